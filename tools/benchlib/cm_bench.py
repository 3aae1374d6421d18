#!/usr/bin/env python3
"""Connection setup rate and connect latency: rdma_cm over MetaRoCE (stock
`cmtime`) beside kernel TCP measured the same way, between the same two
namespaces (docs/connection-manager.md §6.2).

cmtime starts all its connects at once and prints, per step, the total
time, the slowest connection, the fastest and the mean (total / count). The
TCP measurer here does the same: COUNT non-blocking connect()s issued at
once to a listener in the other namespace, each timed to its completion,
all timed to the last. Rates are COUNT / total.

  cm_bench.py [--count N] [--io packet|xdp]   run alone (root): brings up its
      own namespaces ($MROCE_PREFIX, default mroce-cmbench) with
      tests/lib/netns.sh, prints the figures and the ratio, tears them down.
  rows(bench, io)   the same figures for tools/bench (bench.py), on its net.
"""
import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))
NETNS_SH = os.path.join(TOP, "tests/lib/netns.sh")
LAUNCHER = os.path.join(TOP, "kmod-shim/launcher/metaroce-run")

# The TCP side, run with python3 -c in a namespace. Server: accepts COUNT
# connections and closes them. Client: COUNT connects at once, timed.
TCP_SERVER = r"""
import socket, sys
n, port = int(sys.argv[1]), int(sys.argv[2])
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", port)); s.listen(max(n, 128)); print("listening", flush=True)
for _ in range(n):
    c, _ = s.accept(); c.close()
"""
TCP_CLIENT = r"""
import json, selectors, socket, sys, time
n, ip, port = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
sel = selectors.DefaultSelector(); socks = []
t0 = time.monotonic()
for i in range(n):
    s = socket.socket(); s.setblocking(False)
    s.connect_ex((ip, port)); sel.register(s, selectors.EVENT_WRITE, i); socks.append(s)
done, lat = 0, []
while done < n:
    for key, _ in sel.select(timeout=30):
        err = key.fileobj.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if err: raise SystemExit("connect failed: errno %d" % err)
        lat.append(time.monotonic() - t0); sel.unregister(key.fileobj); done += 1
total = time.monotonic() - t0
for s in socks: s.close()
print(json.dumps({"total_ms": total * 1e3, "max_ms": max(lat) * 1e3, "min_us": min(lat) * 1e6,
                  "us_per_conn": total * 1e6 / n}))
"""

ROW = re.compile(r"^(connect|disconnect)\s*:\s*([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)", re.M)


def parse_cmtime(out):
    """cmtime's rows: step -> total ms, max ms, min us, us/conn."""
    return {m.group(1): {"total_ms": float(m.group(2)), "max_ms": float(m.group(3)),
                         "min_us": float(m.group(4)), "us_per_conn": float(m.group(5))}
            for m in ROW.finditer(out)}


def rate(row, count):
    return count / (row["total_ms"] / 1e3) if row["total_ms"] > 0 else 0.0


def measure(in_a, in_b, verbs_a, verbs_b, ip_a, count, port=7471):
    """in_x(cmd) / verbs_x(cmd): argv run in namespace x (verbs_: under the
    launcher). Returns {"cmtime": {...}, "tcp": {...}, "count": N}."""
    srv = subprocess.Popen(verbs_a(["cmtime", "-c", str(count), "-p", str(port)]),
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        out = ""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # the client retries until the server listens
            r = subprocess.run(verbs_b(["cmtime", "-s", ip_a, "-c", str(count), "-p", str(port)]),
                               capture_output=True, text=True, timeout=120)
            out = r.stdout + r.stderr
            if r.returncode == 0 and "connect" in out:
                break
            time.sleep(0.5)
        cm = parse_cmtime(out)
        if "connect" not in cm:
            raise RuntimeError("cmtime printed no connect row: " + out[-400:])
    finally:
        srv.kill()
        srv.wait()
    tport = port + 1
    ts = subprocess.Popen(in_a(["python3", "-c", TCP_SERVER, str(count), str(tport)]),
                          stdout=subprocess.PIPE, text=True)
    try:
        ts.stdout.readline()  # "listening"
        r = subprocess.run(in_b(["python3", "-c", TCP_CLIENT, str(count), ip_a, str(tport)]),
                           capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            raise RuntimeError("TCP measurer: " + r.stderr[-400:])
        tcp = json.loads(r.stdout.strip().splitlines()[-1])
        ts.wait(timeout=60)
    finally:
        if ts.poll() is None:
            ts.kill()
    return {"count": count, "cmtime": cm, "tcp": {"connect": tcp}}


def summary(res, io=""):
    n = res["count"]
    c, t = res["cmtime"]["connect"], res["tcp"]["connect"]
    rc, rt = rate(c, n), rate(t, n)
    lines = ["connection setup, %d connections at once%s:" % (n, " (--io %s)" % io if io else ""),
             "  %-22s %10s %12s %10s %10s" % ("", "conn/s", "us/conn", "max ms", "total ms"),
             "  %-22s %10.0f %12.1f %10.2f %10.2f" % ("rdma_cm (cmtime)", rc, c["us_per_conn"], c["max_ms"], c["total_ms"]),
             "  %-22s %10.0f %12.1f %10.2f %10.2f" % ("kernel TCP", rt, t["us_per_conn"], t["max_ms"], t["total_ms"])]
    if "disconnect" in res["cmtime"]:
        d = res["cmtime"]["disconnect"]
        lines.append("  %-22s %10.0f %12.1f %10.2f %10.2f" % ("rdma_cm disconnect", rate(d, n), d["us_per_conn"],
                                                               d["max_ms"], d["total_ms"]))
    lines.append("  ratio rdma_cm / TCP setup rate: %.3f" % (rc / rt if rt else 0.0))
    return "\n".join(lines)


def rows(bench, io, count=200):
    """tools/bench hook: the figures on bench's network (daemons up)."""
    res = measure(lambda c: bench.in_ns("A", c), lambda c: bench.in_ns("B", c),
                  lambda c: bench.verbs("A", c), lambda c: bench.verbs("B", c), bench.net["IP_A"], count)
    res["backend"] = io
    print(summary(res, io), flush=True)
    bench.results.setdefault("connection_setup", []).append(res)
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--count", type=int, default=200, help="connections (>= 100)")
    ap.add_argument("--io", default="packet", choices=["packet", "xdp"])
    ap.add_argument("--json", help="also write the figures here")
    a = ap.parse_args()
    if a.count < 100:
        sys.exit("cm_bench: --count must be at least 100")
    env = dict(os.environ)
    env.setdefault("MROCE_PREFIX", "mroce-cmbench")
    env.setdefault("E2E_RUN_DIR", "/run/metaroce-test-" + env["MROCE_PREFIX"])
    up = subprocess.run(["bash", "-c", "source %s && mroce_net_up --io %s >&2 && echo $MROCE_NS_A $MROCE_NS_B "
                         "$MROCE_SYSFS_A $MROCE_SYSFS_B $MROCE_IP_A $MROCE_PID_A $MROCE_PID_B"
                         % (shlex.quote(NETNS_SH), a.io)], capture_output=True, text=True, env=env, timeout=120)
    if up.returncode != 0:
        sys.exit("cm_bench: mroce_net_up failed: " + up.stderr[-600:])
    ns_a, ns_b, sys_a, sys_b, ip_a, pid_a, pid_b = up.stdout.split()
    try:
        in_ns = lambda ns: (lambda c: ["ip", "netns", "exec", ns] + c)
        verbs = lambda ns, sysfs: (lambda c: ["ip", "netns", "exec", ns, "env", "-u", "RDMAV_DRIVERS",
                                              "SYSFS_PATH=" + sysfs, LAUNCHER] + c)
        res = measure(in_ns(ns_a), in_ns(ns_b), verbs(ns_a, sys_a), verbs(ns_b, sys_b), ip_a, a.count)
        print(summary(res, a.io))
        if a.json:
            with open(a.json, "w") as f:
                json.dump(res, f, indent=1)
    finally:
        subprocess.run(["bash", "-c", "source %s && MROCE_PID_A=%s MROCE_PID_B=%s mroce_net_down"
                        % (shlex.quote(NETNS_SH), pid_a, pid_b)], env=env, timeout=120)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Communication-library rows of tools/bench (issue 11, docs/benchmark.md).

Each row is measured twice in the same run, between the same two namespaces:
over metaroce and over the kernel's TCP, and the ratio printed beside them.

  UCX ucx_perftest tag_bw 1 MiB (overall MB/s) and tag_lat 8 B (median
      one-way latency, us): UCX_TLS=rc_v on metaroce0:1 against UCX_TLS=tcp
      on the veth;
  Open MPI allreduce bus bandwidth at 1 MiB and 64 MiB (tests/mpi's
      mpi_collectives, nccl-tests busbw, 2 ranks, one per namespace):
      pml ucx over metaroce against pml ob1 with btl tcp.

The MPI jobs run through tests/mpi/mpi_job.sh (the launch agent and
deadline the e2e test uses). tools/bench calls run(); alone:
  tools/benchlib/lib_bench.py [--io packet|xdp] [--out DIR] [--no-build] [--quick]
"""
import argparse
import datetime
import json
import os
import re
import shlex
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402

TOP = bench.TOP
MPI_JOB_SH = os.path.join(TOP, "tests/mpi/mpi_job.sh")
E2E_SH = os.path.join(TOP, "tests/lib/e2e.sh")
AGENT = os.path.join(TOP, "tests/mpi/netns_agent.sh")
MPI_TARGET = "//tests/mpi:mpi_collectives"


# ------------------------------------------------------------------- network
def net_up(b, io):
    """The bench network, both devices named metaroce0 (UCX sends device
    names to peers, as in tests/ucx and tests/mpi)."""
    b.net_down()
    script = """
MROCE_DEV_B=$MROCE_DEV_A
mroce_net_up --io %s --mtu %d || exit 1
echo "NET NS_A=$MROCE_NS_A NS_B=$MROCE_NS_B IF_A=$MROCE_IF_A IF_B=$MROCE_IF_B IP_A=$MROCE_IP_A IP_B=$MROCE_IP_B \
DEV_A=$MROCE_DEV_A DEV_B=$MROCE_DEV_B SYSFS_A=$MROCE_SYSFS_A SYSFS_B=$MROCE_SYSFS_B PID_A=$MROCE_PID_A PID_B=$MROCE_PID_B"
""" % (shlex.quote(io), b.a.mtu)
    rc, out, _ = b.sh("lib-net-up-%s" % io, script, timeout=90)
    line = next((l for l in out.splitlines() if l.startswith("NET ")), None)
    b.net = {"NS_A": b.prefix + "-a", "NS_B": b.prefix + "-b"}
    if rc != 0 or not line:
        raise RuntimeError("network/daemons did not come up (--io %s): %s" % (io, out.strip()[-400:]))
    b.net = dict(kv.split("=", 1) for kv in line.split()[1:])
    b.net["PID_A"], b.net["PID_B"] = int(b.net["PID_A"]), int(b.net["PID_B"])


# ----------------------------------------------------------------------- UCX
UCX_OVER = {
    "metaroce": lambda b, side: {"UCX_TLS": "rc_v", "UCX_NET_DEVICES": b.net["DEV_" + side] + ":1"},
    "tcp": lambda b, side: {"UCX_TLS": "tcp", "UCX_NET_DEVICES": b.net["IF_" + side]},
}


def ucx_cmd(b, side, over, args):
    """ucx_perftest in a namespace under metaroce-run with its sysfs view (UCX
    reads /sys/class/infiniband; the view is made inside the namespace, whose
    `ip netns exec` mounts a fresh /sys)."""
    env = ["%s=%s" % kv for kv in sorted(UCX_OVER[over](b, side).items())] + ["UCX_LOG_LEVEL=info"]
    return b.in_ns(side, [bench.LAUNCHER, "--sysfs-root", b.net["SYSFS_" + side], "--sysfs-view", "on",
                          "env"] + env + ["ucx_perftest"] + args)


def lanes(out):
    """The transports UCX's endpoint configurations name (tag(rc_verbs/metaroce0:1) ...)."""
    found = set()
    for l in out.splitlines():
        if "ep_cfg[" in l:
            found.update(re.findall(r"[a-z_]+/[A-Za-z0-9_.:-]+", l.split("ep_cfg[", 1)[1]))
    return sorted(found)


def ucx_perftest(b, over, test, size, iters):
    port = b.next_port()
    srv = b.procs.start("ucx-%s-%s-server" % (test, over), ucx_cmd(b, "A", over, ["-p", str(port)]), env=b.env())
    try:
        if not b.wait_listen("A", port, srv, secs=60):
            raise RuntimeError("ucx_perftest server did not listen")
        rc, out, to = b.procs.run("ucx-%s-%s-client" % (test, over), ucx_cmd(b, "B", over, [
            "-p", str(port), "-t", test, "-s", str(size), "-n", str(iters), b.net["IP_A"]]), b.a.timeout + 60, env=b.env())
    finally:
        b.procs.wait(srv, 15)
    final = next((l.split() for l in out.splitlines() if l.startswith("Final:")), None)
    if rc != 0 or not final or len(final) < 9:
        raise RuntimeError("ucx_perftest %s over %s failed (%s): %s" % (test, over, "timeout" if to else "exit %s" % rc,
                                                                     bench.tail(out)))
    # Final: iterations, latency 50%ile/average/overall (us), bandwidth
    # average/overall (MB/s), message rate average/overall.
    return {"status": "ok", "iterations": int(final[1]), "lat_p50_us": float(final[2]),
            "lat_avg_us": float(final[3]), "bw_mbps": float(final[6]), "lanes": lanes(out)}


# ------------------------------------------------------------------- Open MPI
def mpi_allreduce(b, over, sizes):
    """busbw (GB/s) per size from one mpi_collectives job of 2 ranks."""
    transport = {"metaroce": "MPI_OVER_METAROCE", "tcp": "MPI_OVER_TCP"}[over]
    lo, hi = min(sizes), max(sizes)
    factor = max(2, hi // lo)
    script = """
source %(e2e)s
source %(job)s
MROCE_DEV_B=$MROCE_DEV_A
LAUNCHER=%(launcher)s AGENT=%(agent)s
mpi_setup
rc=0
mpi_run mpi-allreduce-%(over)s %(deadline)d 2 "${%(transport)s[@]}" -x UCX_LOG_LEVEL=info -- %(prog)s \
  --only allreduce --min-bytes %(lo)d --max-bytes %(hi)d --factor %(factor)d --budget-bytes 256M --max-iters 20 || rc=$?
cat "$E2E_RUN_DIR/mpi-allreduce-%(over)s.log"
exit $rc
""" % {"e2e": shlex.quote(E2E_SH), "job": shlex.quote(MPI_JOB_SH), "launcher": shlex.quote(bench.LAUNCHER),
       "agent": shlex.quote(AGENT), "over": over, "deadline": 600, "transport": transport,
       "prog": shlex.quote(b.bin["mpi_collectives"]), "lo": lo, "hi": hi, "factor": factor}
    rc, out, to = b.sh("mpi-allreduce-%s" % over, script, timeout=660)
    rows = {}
    for l in out.splitlines():
        f = l.split()
        if len(f) == 7 and f[0] == "allreduce" and f[6] == "ok":
            rows[int(f[1])] = {"status": "ok", "iters": int(f[2]), "time_us": float(f[3]), "algbw_gbs": float(f[4]),
                               "busbw_gbs": float(f[5])}
    if rc != 0 or any(s not in rows for s in sizes):
        raise RuntimeError("mpirun over %s failed (%s): %s" % (over, "timeout" if to else "exit %s" % rc, bench.tail(out)))
    for s in sizes:
        rows[s]["lanes"] = lanes(out) if over == "metaroce" else ["btl tcp"]
    return rows


# ---------------------------------------------------------------------- rows
def pair(name, unit, key, higher_better, fn):
    """Runs fn(over) for metaroce and tcp; a row with both figures and the ratio."""
    row = {"row": name, "unit": unit}
    for over in ("metaroce", "tcp"):
        try:
            row[over] = fn(over)
        except Exception as e:  # noqa: BLE001
            row[over] = {"status": "failed", "reason": str(e)[:600]}
    m, t = row["metaroce"].get(key), row["tcp"].get(key)
    if m and t:
        row["ratio"] = (m / t) if higher_better else (t / m)
    row["ratio_note"] = "metaroce/tcp" if higher_better else "tcp/metaroce, above 1: metaroce faster"
    return row


def fmt(r, key):
    return ("%.3f" % r[key]) if r.get("status") == "ok" else "FAILED"


def show(row, key):
    ratio = ("%.3g" % row["ratio"]) if "ratio" in row else "-"
    bench.log("  %-30s metaroce %10s  tcp %10s %-6s  ratio %s (%s)" % (
        row["row"], fmt(row["metaroce"], key), fmt(row["tcp"], key), row["unit"], ratio, row["ratio_note"]))
    for over in ("metaroce", "tcp"):
        if row[over].get("status") != "ok":
            bench.log("    %s: %s" % (over, row[over].get("reason", "?")[:300]))


def build(b):
    if not b.a.no_build:
        rc, _, _ = b.procs.run("bazel-build-mpi", b.bazel() + ["build", "--config=release", MPI_TARGET], timeout=1800)
        if rc != 0:
            raise RuntimeError("building %s failed" % MPI_TARGET)
    bindir = b.bin["metaroced"][: -len("firmware-model/daemon/metaroced")]
    b.bin["mpi_collectives"] = os.path.join(bindir, "tests/mpi/mpi_collectives")
    if not os.path.exists(b.bin["mpi_collectives"]):
        raise RuntimeError("%s not found (build %s)" % (b.bin["mpi_collectives"], MPI_TARGET))


def run(b, io):
    """The library rows over daemons --io io; results in b.results["libraries"]."""
    bench.log("\n== communication libraries over metaroce (--io %s) and over kernel TCP" % io)
    res = b.results.setdefault("libraries", {"backend": io, "rows": []})
    try:
        build(b)
        net_up(b, io)
    except Exception as e:  # noqa: BLE001
        b.event("libraries: %s" % e)
        res["rows"].append({"row": "(all)", "status": "failed", "reason": str(e)[:600]})
        b.net_down()
        return
    bw_iters, lat_iters = (20, 1000) if b.a.quick else (100, 5000)
    rows = [
        (pair("UCX tag_bw 1 MiB", "MB/s", "bw_mbps", True,
              lambda over: ucx_perftest(b, over, "tag_bw", bench.MIB, bw_iters)), "bw_mbps"),
        (pair("UCX tag_lat 8 B (p50)", "us", "lat_p50_us", False,
              lambda over: ucx_perftest(b, over, "tag_lat", 8, lat_iters)), "lat_p50_us"),
    ]
    sizes = [bench.MIB, 64 * bench.MIB]
    mpi = {}
    for over in ("metaroce", "tcp"):
        try:
            mpi[over] = mpi_allreduce(b, over, sizes)
        except Exception as e:  # noqa: BLE001
            mpi[over] = {s: {"status": "failed", "reason": str(e)[:600]} for s in sizes}
    for s in sizes:
        rows.append((pair("MPI allreduce busbw %s" % bench.fmt_size(s), "GB/s", "busbw_gbs", True,
                          lambda over, s=s: mpi[over][s]), "busbw_gbs"))
    for row, key in rows:
        show(row, key)
        row["key"] = key
        res["rows"].append(row)
    b.net_down()
    write(res, b.out)


def write(res, out):
    """libraries.json and libraries.md in the run's output directory."""
    with open(os.path.join(out, "libraries.json"), "w") as f:
        json.dump(res, f, indent=2)
    lines = ["# Communication libraries (daemons --io %s), metaroce beside kernel TCP, same run" % res["backend"], "",
             "| row | metaroce | tcp | unit | ratio |", "| --- | --- | --- | --- | --- |"]
    for r in res["rows"]:
        if "key" not in r:
            lines.append("| %s | FAILED: %s | | | |" % (r["row"], r.get("reason", "?")[:200]))
            continue
        ratio = ("%.3g (%s)" % (r["ratio"], r["ratio_note"])) if "ratio" in r else "-"
        lines.append("| %s | %s | %s | %s | %s |" % (r["row"], fmt(r["metaroce"], r["key"]), fmt(r["tcp"], r["key"]),
                                                  r["unit"], ratio))
    with open(os.path.join(out, "libraries.md"), "w") as f:
        f.write("\n".join(lines) + "\n")


def main():
    ap = argparse.ArgumentParser(prog="lib_bench.py", description=__doc__.split("\n")[0])
    ap.add_argument("--io", default="packet", choices=("packet", "xdp", "auto"))
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", help="output directory (default out/libbench-<timestamp>)")
    ap.add_argument("--no-build", action="store_true")
    ap.add_argument("--output-base")
    ap.add_argument("--mtu", type=int, default=1500)
    ap.add_argument("--timeout", type=int, default=120, help="seconds per ucx_perftest run (plus 60)")
    a = ap.parse_args()
    a.out = os.path.abspath(a.out or os.path.join(TOP, "out", "libbench-" +
                                                   datetime.datetime.now().strftime("%Y%m%d-%H%M%S")))
    if os.geteuid() != 0:
        sys.exit("lib_bench.py: run as root (namespaces, veth, AF_XDP)")
    b = bench.Bench(a)
    if b.ns_taken():
        sys.exit("lib_bench.py: namespaces %s already exist; set MROCE_PREFIX=mroce-..." % " ".join(b.ns_taken()))
    try:
        b.build()
        run(b, a.io)
    finally:
        b.cleanup()
    bench.log("\nwritten: %s, libraries.md" % os.path.join(a.out, "libraries.json"))
    failed = [r["row"] for r in b.results["libraries"]["rows"] if "ratio" not in r]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

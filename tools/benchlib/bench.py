#!/usr/bin/env python3
"""Side-by-side MetaRoCE benchmark (tools/bench, docs/benchmark.md).

One run, one machine, one kind of link (the tests/lib/netns.sh veth pair
between two namespaces named $MROCE_PREFIX-a/-b, default mroce-bench):

  1. references, with no daemon on the link: kernel TCP (one iperf3 stream),
     raw frame rates (tests/io io_pingpong: AF_PACKET and AF_XDP, frames of
     MetaRoCE's full-MTU data packet on this link: metaroce_frame_bytes), kernel UDP socket ping-pong round trip (tools/benchlib
     udp_pingpong, 8-B messages, both sides spinning);
  2. per backend (--io packet, --io xdp; the network is rebuilt for each):
     perftest ib_write_bw over message sizes, ib_read_bw and ib_send_bw
     64 KiB, ib_write_lat and ib_send_lat 8 B, with the daemons' CPU time;
  3. per backend: the bandwidth tests again under loss, delay and reordering
     (sch_netem where the kernel has it, else through the mroce-impair hop).

Every subprocess runs in its own process group with a timeout; a failed or
timed-out test is recorded as failed and the run goes on (the network is
rebuilt when a daemon died or a test timed out). Everything this run started
is ended on exit, Ctrl-C or SIGTERM: its process groups, its daemons (by pid),
its namespaces (only those it created).
"""
import argparse
import datetime
import json
import os
import platform
import re
import shlex
import signal
import statistics
import subprocess
import sys
import time

import cm_bench  # cmasan: connection setup rows (tools/benchlib/cm_bench.py)

TOP = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
NETNS_SH = os.path.join(TOP, "tests/lib/netns.sh")
LAUNCHER = os.path.join(TOP, "kmod-shim/launcher/metaroce-run")
TARGETS = ["//firmware-model/daemon:metaroced", "//provider:libmetaroce-rdmav34.so",
           "//kmod-shim/launcher:all", "//tests/io:io_pingpong", "//tools/benchlib:udp_pingpong",
           "//tools/impair:mroce-impair", "//tools:metaroce-ctl"]
KIB, MIB = 1024, 1024 * 1024
# Device counters read around every perftest run (metaroce-ctl stat, both
# daemons): the transmit path's drops and holds, and the recovery they cause.
COUNTERS = ["tx_drop_ring_full", "tx_held_ring_full", "tx_retransmits", "timeouts", "tx_packets"]


def metaroce_frame_bytes(link_mtu):
    """The Ethernet frame of a full-MTU MetaRoCE data packet (RDMA WRITE middle, IPv4): the
    RDMA MTU the daemon reports for this link (control_plane.cc active_ibv_mtu: the largest
    IB MTU that fits with IPv6 + UDP + MBTH + RETH + IMM + ICRC) + Ethernet 14 + IPv4 20 +
    UDP 8 + MBTH 24 + ICRC 4."""
    room = link_mtu - (40 + 8 + 24 + 16 + 4 + 4)
    ib = max([m for m in (256, 512, 1024, 2048, 4096) if m <= room] or [256])
    return ib + 14 + 20 + 8 + 24 + 4
CLK_TCK = os.sysconf("SC_CLK_TCK")

# Impairments. With sch_netem: `tc qdisc replace dev <veth> root netem SPEC`
# on BOTH veth ends (data and acknowledgements alike). Kernels without netem
# (CONFIG_NET_SCH_NETEM unset, as here) get every row from the fault-injection
# hop instead (tools/impair, docs/impair.md): the network is rebuilt through a
# third namespace whose mroce-impair applies ARGS to both directions. It works
# for AF_XDP too (the earlier generic-XDP drop on receive could not: the
# daemon's own XDP program holds that hook). "delay 100us" alone is the
# control for the reorder row, which must be read against it.
IMPAIRMENTS = [
    # label, netem spec, mroce-impair arguments
    ("loss 0.1%", "loss 0.1%", "--loss 0.1%"),
    ("loss 1%", "loss 1%", "--loss 1%"),
    ("delay 100us (control)", "delay 100us limit 100000", "--delay 100us"),
    # netem: 25 % of frames skip the delay and overtake up to 100 us of
    # traffic; the hop: 25 % are held 100 us longer and are overtaken.
    ("reorder 25%, delay 100us", "delay 100us reorder 25% 50% limit 100000", "--delay 100us --reorder 25%:100us"),
    ("loss 1% + delay 1ms", "delay 1ms loss 1% limit 100000", "--loss 1% --delay 1ms"),
]


def log(msg):
    print(msg, flush=True)


class Interrupted(Exception):
    pass


class Procs:
    """Subprocesses of this run, each in its own process group (its session)."""

    def __init__(self, logdir):
        self.logdir = logdir
        self.live = {}  # pid -> Popen
        self.n = 0

    def _logfile(self, name):
        self.n += 1
        safe = re.sub(r"[^A-Za-z0-9_.+-]+", "_", name)[:80]
        return os.path.join(self.logdir, "%03d-%s.log" % (self.n, safe))

    def start(self, name, cmd, env=None):
        path = self._logfile(name)
        f = open(path, "w")
        f.write("$ %s\n" % " ".join(shlex.quote(c) for c in cmd))
        f.flush()
        p = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                             env=env, start_new_session=True, cwd=TOP)
        f.close()
        p.logpath = path
        p.started = time.monotonic()
        self.live[p.pid] = p
        return p

    def wait(self, p, timeout):
        """Returns (rc, output, timed_out). rc None when it had to be killed."""
        timed_out = False
        try:
            p.wait(timeout=max(0.1, timeout))
        except subprocess.TimeoutExpired:
            timed_out = True
            self.kill(p)
        self.live.pop(p.pid, None)
        with open(p.logpath, errors="replace") as f:
            out = f.read()
        return (None if timed_out else p.returncode), out, timed_out

    def run(self, name, cmd, timeout, env=None):
        return self.wait(self.start(name, cmd, env), timeout)

    def kill(self, p):
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(p.pid, sig)
            except ProcessLookupError:
                break
            try:
                p.wait(timeout=2)
                break
            except subprocess.TimeoutExpired:
                continue
        self.live.pop(p.pid, None)

    def kill_all(self):
        for p in list(self.live.values()):
            self.kill(p)


def cpu_ticks(pid):
    """utime + stime of a whole process (all threads), in clock ticks."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            s = f.read()
    except OSError:
        return None
    fields = s[s.rfind(")") + 2:].split()
    return int(fields[11]) + int(fields[12])


def alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except OSError:
        return False


def parse_table(out, first_col):
    """perftest prints a header line starting with '#bytes' and one row per size.
    Header names contain single spaces ("BW peak[MB/sec]", "99% percentile[usec]")."""
    lines = out.splitlines()
    for i, line in enumerate(lines):
        if line.strip().startswith(first_col):
            toks, header = line.split(), []
            while toks:
                t = toks.pop(0)
                if (t == "BW" or t.endswith("%")) and toks:
                    t += " " + toks.pop(0)
                header.append(t)
            for row in lines[i + 1:]:
                vals = row.split()
                if vals and re.match(r"^\d+$", vals[0]) and len(vals) >= 3:
                    return dict(zip(header, vals))
    return None


def num_from(d, prefix):
    for k, v in d.items():
        if k.startswith(prefix):
            try:
                return float(v)
            except ValueError:
                return None
    return None


class Bench:
    def __init__(self, args):
        self.a = args
        self.out = args.out
        os.makedirs(os.path.join(self.out, "logs"), exist_ok=True)
        self.procs = Procs(os.path.join(self.out, "logs"))
        self.prefix = os.environ.get("MROCE_PREFIX", "mroce-bench")
        self.net = None  # dict once up
        self.port = 18700
        self.results = {"references": {}, "perftest": [], "impairments": [], "events": []}
        self.bin = {}
        self.netem_ok = None
        self.variant = {}  # wake: the --variant being run (label, args, bin, pin)

    # ---------------------------------------------------------------- setup
    def event(self, msg):
        log("  ! " + msg)
        self.results["events"].append({"t": round(time.time(), 1), "msg": msg})

    def bazel(self):
        b = ["bazel"] + (["--output_base=" + self.a.output_base] if self.a.output_base else [])
        return b

    def build(self):
        if not self.a.no_build:
            log("building (release): " + " ".join(TARGETS))
            rc, out, to = self.procs.run("bazel-build", self.bazel() + ["build", "--config=release"] + TARGETS,
                                         timeout=1800)
            if rc != 0:
                sys.exit("tools/bench: build failed, see %s" % os.path.join(self.out, "logs"))
        rc, out, _ = self.procs.run("bazel-info", self.bazel() + ["info", "--config=release", "bazel-bin"], 300)
        bindir = out.strip().splitlines()[-1] if rc == 0 else ""
        paths = {
            "metaroced": os.environ.get("METAROCED") or os.path.join(bindir, "firmware-model/daemon/metaroced"),
            "provider": os.environ.get("METAROCE_PROVIDER") or os.path.join(bindir, "provider/libmetaroce-rdmav34.so"),
            "preload": os.environ.get("METAROCE_PRELOAD") or os.path.join(bindir, "kmod-shim/launcher/libmetaroce-preload.so"),
            "io_pingpong": os.path.join(bindir, "tests/io/io_pingpong"),
            "udp_pingpong": os.path.join(bindir, "tools/benchlib/udp_pingpong"),
            "mroce_impair": os.path.join(bindir, "tools/impair/mroce-impair"),
            "ctl": os.path.join(bindir, "tools/metaroce-ctl"),
        }
        for k, v in paths.items():
            if not os.path.exists(v):
                sys.exit("tools/bench: %s not found at %s (build it, or drop --no-build)" % (k, v))
        self.bin = paths

    def env(self):
        e = dict(os.environ)
        if self.variant.get("args") is not None:  # wake: a --variant's daemon arguments
            e["MROCE_DAEMON_ARGS"] = self.variant["args"]
        e.update(MROCE_PREFIX=self.prefix, METAROCED=self.variant.get("bin") or self.bin["metaroced"], E2E_RUN_DIR=os.path.join(self.out, "run"),
                 METAROCE_PROVIDER=self.bin["provider"], METAROCE_PRELOAD=self.bin["preload"],
                 MROCE_IMPAIR=self.bin["mroce_impair"])
        return e

    def sh(self, name, script, timeout=60):
        """Runs bash with tests/lib/netns.sh sourced."""
        full = "source %s\n%s" % (shlex.quote(NETNS_SH), script)
        return self.procs.run(name, ["bash", "-c", full], timeout, env=self.env())

    def ns_taken(self):
        out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=10).stdout
        names = [l.split()[0] for l in out.splitlines() if l.strip()]
        return [n for n in names if n in (self.prefix + "-a", self.prefix + "-b", self.prefix + "-m")]

    def net_up(self, io, hop=False):
        """Namespaces, veth and both daemons (tests/lib/netns.sh). io=None: no daemons stay.
        hop: through the mroce-impair namespace, impairing nothing yet."""
        self.net_down()
        script = """
MROCE_IMPAIR_ARGS= mroce_net_up --io %s --mtu %d %s || exit 1
mac() { ip -n "$1" -br link show "$2" | awk '{print $3}'; }
echo "NET NS_A=$MROCE_NS_A NS_B=$MROCE_NS_B IF_A=$MROCE_IF_A IF_B=$MROCE_IF_B IP_A=$MROCE_IP_A IP_B=$MROCE_IP_B \
DEV_A=$MROCE_DEV_A DEV_B=$MROCE_DEV_B SYSFS_A=$MROCE_SYSFS_A SYSFS_B=$MROCE_SYSFS_B PID_A=$MROCE_PID_A PID_B=$MROCE_PID_B \
MAC_A=$(mac $MROCE_NS_A $MROCE_IF_A) MAC_B=$(mac $MROCE_NS_B $MROCE_IF_B)"
grep -h "packet I/O" "$MROCE_RUN_A/daemon.log" | sed 's/^/IOLINE /'
""" % (io or "packet", self.a.mtu, "--hop" if hop else "")
        rc, out, to = self.sh("net-up-%s" % (io or "refs"), script, timeout=60)
        line = next((l for l in out.splitlines() if l.startswith("NET ")), None)
        if rc != 0 or not line:
            # the namespaces may exist even though a daemon did not come up
            self.net = {"NS_A": self.prefix + "-a", "NS_B": self.prefix + "-b"}
            raise RuntimeError("network/daemons did not come up (--io %s): %s" % (io, out.strip()[-400:]))
        self.net = dict(kv.split("=", 1) for kv in line.split()[1:])
        self.net["PID_A"], self.net["PID_B"] = int(self.net["PID_A"]), int(self.net["PID_B"])
        self.net["io_line"] = next((l[7:] for l in out.splitlines() if l.startswith("IOLINE ")), "")
        self.net["hop"] = hop
        if io is None:
            self.stop_daemons()
        else:
            self.pin_daemons()
            self.net["GID_A"] = self.gid_index("A")
            self.net["GID_B"] = self.gid_index("B")
        return self.net

    def pin_daemons(self):
        """wake: the --variant's placement of the two daemons (every thread), by pid."""
        for side in ("A", "B"):
            cpu = self.variant.get("pin", {}).get("daemon_" + side)
            if cpu is not None:
                rc, out, _ = self.procs.run("taskset-" + side, ["taskset", "-a", "-p", "-c", cpu,
                                                               str(self.net["PID_" + side])], 10)
                if rc != 0:
                    raise RuntimeError("taskset of daemon %s failed: %s" % (side, tail(out)))

    def stop_daemons(self):
        for k in ("PID_A", "PID_B"):
            pid = self.net.get(k) if self.net else None
            if pid and alive(pid):
                os.kill(pid, signal.SIGTERM)
                for _ in range(30):
                    if not alive(pid):
                        break
                    time.sleep(0.1)
                if alive(pid):
                    os.kill(pid, signal.SIGKILL)
            if self.net:
                self.net[k] = 0

    def net_down(self):
        if self.net is None:
            return
        self.stop_daemons()
        # mroce_net_down deletes only $MROCE_PREFIX-a/-b and their run dirs
        self.sh("net-down", "MROCE_PID_A=; MROCE_PID_B=; mroce_net_down", timeout=60)
        self.net = None

    def in_ns(self, side, cmd):
        return ["ip", "netns", "exec", self.net["NS_" + side]] + cmd

    def verbs(self, side, cmd):
        cpu = self.variant.get("pin", {}).get("app_" + side)
        if cpu is not None:  # wake: the --variant's placement of this side's application
            return ["taskset", "-c", cpu, LAUNCHER, "--sysfs-root", self.net["SYSFS_" + side]] + self.in_ns(side, cmd)
        return [LAUNCHER, "--sysfs-root", self.net["SYSFS_" + side]] + self.in_ns(side, cmd)

    def gid_index(self, side):
        rc, out, _ = self.procs.run("devinfo-" + side, self.verbs(side, ["ibv_devinfo", "-v", "-d", self.net["DEV_" + side]]),
                                    30, env=self.env())
        ip = "::ffff:" + self.net["IP_" + side]
        for l in out.splitlines():
            m = re.search(r"GID\[\s*(\d+)\]:\s*(\S+),\s*RoCE v2", l)
            if m and m.group(2) == ip:
                return m.group(1)
        raise RuntimeError("no RoCE v2 GID for %s on %s" % (ip, self.net["DEV_" + side]))

    def wait_listen(self, side, port, proc, secs=15):
        end = time.monotonic() + secs
        while time.monotonic() < end:
            if proc.poll() is not None:
                return False
            out = subprocess.run(self.in_ns(side, ["ss", "-ltnu"]), capture_output=True, text=True, timeout=10).stdout
            if re.search(r":%d\s" % port, out):
                return True
            time.sleep(0.1)
        return False

    def wait_file(self, path, proc, secs=15):
        end = time.monotonic() + secs
        while time.monotonic() < end:
            if os.path.exists(path) and os.path.getsize(path) > 0:
                return True
            if proc.poll() is not None:
                return False
            time.sleep(0.05)
        return False

    # ----------------------------------------------------------- references
    def ref_tcp(self):
        port = self.next_port()
        srv = self.procs.start("iperf3-server", self.in_ns("A", ["iperf3", "-s", "-1", "-p", str(port)]))
        try:
            if not self.wait_listen("A", port, srv):
                raise RuntimeError("iperf3 server did not listen")
            secs = 3 if self.a.quick else 5
            rc, out, to = self.procs.run("iperf3-client", self.in_ns("B", ["iperf3", "-c", self.net["IP_A"], "-p", str(port),
                                                                     "-t", str(secs), "-J"]), secs + 30)
        finally:
            self.procs.wait(srv, 10)
        if rc != 0:
            raise RuntimeError("iperf3 client failed (%s)" % ("timeout" if to else "exit %s" % rc))
        j = json.loads(out[out.index("{"):])
        end = j["end"]
        gbps = end["sum_received"]["bits_per_second"] / 1e9
        cpu = end.get("cpu_utilization_percent", {})
        moved = end["sum_received"]["bytes"]
        dur = end["sum_received"]["seconds"]
        cpu_s = (cpu.get("host_total", 0) + cpu.get("remote_total", 0)) / 100 * dur
        return {"status": "ok", "gbps": gbps, "seconds": dur, "bytes": moved,
                "retransmits": end.get("sum_sent", {}).get("retransmits"),
                "cpu_s_per_gb": cpu_s / (moved / 1e9) if moved else None,
                "cpu_note": "iperf3 sender+receiver process CPU (user+sys), not softirq time elsewhere"}

    def ref_frames(self, io):
        runs = []
        frame = metaroce_frame_bytes(self.a.mtu)
        count = 100000 if self.a.quick else 300000
        for i in range(1 if self.a.quick else 3):
            ready = os.path.join(self.out, "run", "sink-%s-%d.ready" % (io, i))
            os.makedirs(os.path.dirname(ready), exist_ok=True)
            if os.path.exists(ready):
                os.remove(ready)
            sink = self.procs.start("frames-sink-%s" % io, self.in_ns("B", [
                self.bin["io_pingpong"], "--role=sink", "--if=" + self.net["IF_B"], "--io=" + io,
                "--count=%d" % count, "--expect=1", "--timeout=10", "--ready-file=" + ready]))
            if not self.wait_file(ready, sink):
                self.procs.kill(sink)
                raise RuntimeError("frame sink (--io %s) did not open: %s" % (io, open(sink.logpath).read()[-300:]))
            src_rc, src_out, _ = self.procs.run("frames-source-%s" % io, self.in_ns("A", [
                self.bin["io_pingpong"], "--role=source", "--if=" + self.net["IF_A"], "--io=" + io,
                "--src-ip=" + self.net["IP_A"], "--dst-ip=" + self.net["IP_B"], "--dst-mac=" + self.net["MAC_B"],
                "--count=%d" % count, "--size=%d" % frame]), 60)
            rc, out, to = self.procs.wait(sink, 30)
            m = re.search(r"sink: (\d+)/(\d+) frames intact.*?([\d.]+) Mpps, ([\d.]+) Gbit/s", out)
            if not m:
                raise RuntimeError("frame sink printed no rate (source exit %s): %s" % (src_rc, out[-300:]))
            backend = re.search(r"^backend (\S+)", out, re.M)
            runs.append({"mpps": float(m.group(3)), "gbps": float(m.group(4)), "received": int(m.group(1)),
                         "sent": count, "backend": backend.group(1).rstrip(",") if backend else io})
        med = statistics.median(r["gbps"] for r in runs)
        best = min(runs, key=lambda r: abs(r["gbps"] - med))
        return {"status": "ok", "gbps": best["gbps"], "mpps": best["mpps"], "frame_bytes": frame,
                "backend": best["backend"], "runs": runs,
                "note": "io_pingpong source (tx --io %s, unpaced) -> sink (rx --io %s), ICRC checked, median of %d"
                        % (io, io, len(runs))}

    def ref_udp(self):
        port = self.next_port()
        srv = self.procs.start("udp-server", self.in_ns("A", [self.bin["udp_pingpong"], "--server", "--port=%d" % port,
                                                              "--timeout=3"]))
        try:
            if not self.wait_listen("A", port, srv):
                raise RuntimeError("udp_pingpong server did not bind")
            count = 10000 if self.a.quick else 50000
            rc, out, to = self.procs.run("udp-client", self.in_ns("B", [
                self.bin["udp_pingpong"], "--client", "--dst=" + self.net["IP_A"], "--port=%d" % port,
                "--count=%d" % count, "--size=8"]), 60)
        finally:
            self.procs.kill(srv)
        m = re.search(r"udp_rtt: count (\d+) lost (\d+) size \d+ min ([\d.]+) p50 ([\d.]+) p90 ([\d.]+) p99 ([\d.]+) "
                      r"p999 ([\d.]+) max ([\d.]+) mean ([\d.]+)", out)
        if not m:
            raise RuntimeError("udp_pingpong failed (%s): %s" % ("timeout" if to else rc, out[-300:]))
        v = [float(x) for x in m.groups()]
        return {"status": "ok", "count": int(v[0]), "lost": int(v[1]), "rtt_min_us": v[2], "rtt_p50_us": v[3],
                "rtt_p90_us": v[4], "rtt_p99_us": v[5], "rtt_p999_us": v[6], "rtt_mean_us": v[8], "size": 8}

    def references(self):
        log("\n== references (no daemon on the link)")
        try:
            self.net_up(None)
        except Exception as e:  # noqa: BLE001
            for k in ("tcp", "af_packet", "af_xdp", "udp"):
                self.results["references"][k] = {"status": "failed", "reason": str(e)}
            self.net_down()
            return
        steps = [("tcp", self.ref_tcp), ("af_packet", lambda: self.ref_frames("packet")),
                 ("af_xdp", lambda: self.ref_frames("xdp")), ("udp", self.ref_udp)]
        for key, fn in steps:
            if not self.want("frames" if key.startswith("af_") else key):
                continue
            r = self.guard(key, fn)
            self.results["references"][key] = r
            log("  %-10s %s" % (key, summary(r)))
        self.net_down()

    # ------------------------------------------------------------- perftest
    def next_port(self):
        self.port += 1
        return self.port

    def perftest(self, tool, size, iters, extra=(), timeout=60):
        """Server in A, client in B. Returns a result dict (status ok/failed)."""
        port = self.next_port()
        common = [tool, "-F", "-p", str(port), "-s", str(size), "-n", str(iters)] + list(extra)
        srv = self.procs.start("%s-%d-server" % (tool, size),
                               self.verbs("A", common + ["-d", self.net["DEV_A"], "-x", self.net["GID_A"]]), env=self.env())
        deadline = time.monotonic() + timeout
        try:
            if not self.wait_listen("A", port, srv):
                rc, out, _ = self.procs.wait(srv, 1)
                raise RuntimeError("server did not listen (exit %s): %s" % (rc, tail(out)))
            pids = (self.net["PID_A"], self.net["PID_B"])
            k0 = self.counters()
            c0 = [cpu_ticks(p) for p in pids]
            t0 = time.monotonic()
            cli = self.procs.start("%s-%d-client" % (tool, size),
                                   self.verbs("B", common + ["-d", self.net["DEV_B"], "-x", self.net["GID_B"],
                                                             self.net["IP_A"]]), env=self.env())
            rc, out, to = self.procs.wait(cli, deadline - time.monotonic())
            wall = time.monotonic() - t0
            c1 = [cpu_ticks(p) for p in pids]
        finally:
            src, sout, sto = self.procs.wait(srv, max(3, deadline - time.monotonic()))
        k1 = self.counters()
        if to:
            raise RuntimeError("timeout after %.0f s (client log %s)" % (timeout, os.path.basename(cli.logpath)))
        if rc != 0 or src != 0:
            raise RuntimeError("client exit %s, server exit %s: %s" % (rc, "timeout" if sto else src, tail(out + sout)))
        r = {"status": "ok", "wall_s": wall, "log": os.path.basename(cli.logpath)}
        if k0 is not None and k1 is not None:
            r["counters"] = {n: k1.get(n, 0) - k0.get(n, 0) for n in COUNTERS}
        if None not in c0 and None not in c1:
            r["daemon_cpu_s"] = [(b - a) / CLK_TCK for a, b in zip(c0, c1)]
        if tool.endswith("_lat"):
            row = parse_table(out, "#bytes")
            if not row:
                raise RuntimeError("no latency row in output: " + tail(out))
            r.update(size=int(row["#bytes"]), iters=int(row["#iterations"]), t_min_us=num_from(row, "t_min"),
                     t_typical_us=num_from(row, "t_typical"), t_avg_us=num_from(row, "t_avg"),
                     t_p99_us=num_from(row, "99%"), t_p999_us=num_from(row, "99.9%"), t_max_us=num_from(row, "t_max"))
        else:
            row = parse_table(out, "#bytes")
            if not row:
                raise RuntimeError("no bandwidth row in output: " + tail(out))
            mbs = num_from(row, "BW average")
            r.update(size=int(row["#bytes"]), iters=int(row["#iterations"]), mib_s=mbs,
                     gbps=mbs * MIB * 8 / 1e9, peak_gbps=num_from(row, "BW peak") * MIB * 8 / 1e9,
                     mpps=num_from(row, "MsgRate"))
            moved = r["size"] * r["iters"]
            r["bytes"] = moved
            if "daemon_cpu_s" in r and moved:
                r["daemon_cpu_s_per_gb"] = sum(r["daemon_cpu_s"]) / (moved / 1e9)
                r["daemon_cpu_util"] = sum(r["daemon_cpu_s"]) / wall if wall else None
        return r

    def counters(self):
        """COUNTERS summed over both daemons (metaroce-ctl stat), or None if unreadable."""
        tot = {}
        for side in ("A", "B"):
            rc, out, _ = self.procs.run("ctl-stat-" + side, self.in_ns(side, [
                self.bin["ctl"], "--sysfs-root", self.net["SYSFS_" + side], "stat", "-a", self.net["DEV_" + side]]), 20)
            if rc != 0:
                return None
            for line in out.splitlines():
                f = line.split()
                if len(f) == 2 and f[0] in COUNTERS and f[1].isdigit():
                    tot[f[0]] = tot.get(f[0], 0) + int(f[1])
        return tot

    def guard(self, name, fn):
        """Runs one test; any failure becomes a record, never a crash."""
        try:
            return fn()
        except (Interrupted, KeyboardInterrupt):
            raise
        except Exception as e:  # noqa: BLE001
            return {"status": "failed", "reason": str(e)[:600]}

    def bw_iters(self, size, impaired=False):
        if impaired:
            return max(50, (128 if not self.a.quick else 64) * MIB // size)
        target = (128 if self.a.quick else 512) * MIB
        cap = 20000 if self.a.quick else 50000
        return max(100, min(cap, target // size))

    def healthy(self):
        return self.net and alive(self.net["PID_A"]) and alive(self.net["PID_B"])

    def run_pt(self, io, tool, size, iters, condition="lossless", extra=()):
        timeout = self.a.timeout
        r = self.guard(tool, lambda: self.perftest(tool, size, iters, extra, timeout))
        r.update(backend=io, tool=tool, size=r.get("size", size), condition=condition, iters_asked=iters)
        log("  %-8s %-12s %8s  %-26s %s" % (io, tool, fmt_size(size), condition, summary(r)))
        if r["status"] != "ok" and (not self.healthy() or "timeout" in r.get("reason", "")):
            self.event("%s %s %s on --io %s failed (%s); daemons alive: A %s B %s; rebuilding the network"
                       % (tool, fmt_size(size), condition, io, r["reason"][:120],
                          alive(self.net["PID_A"]), alive(self.net["PID_B"])))
            self.save_daemon_logs(io, "after-failure")
            try:
                self.net_up(io.split("/")[0], hop=bool(self.net and self.net.get("hop")))
            except Exception as e:  # noqa: BLE001
                self.event("rebuild failed: %s" % e)
        return r

    def save_daemon_logs(self, io, tag):
        for side in ("a", "b"):
            src = "/run/metaroce/%s-%s/daemon.log" % (self.prefix, side)
            dst = os.path.join(self.out, "logs", "daemon-%s-%s-%s-%d.log" % (io.replace("/", "+"), side, tag,
                                                                               int(time.time())))
            try:
                with open(src, errors="replace") as f, open(dst, "w") as g:
                    g.write(f.read()[-200000:])
            except OSError:
                pass

    def sizes(self):
        if self.a.sizes:
            return self.a.sizes
        if self.a.quick:
            return [64, 4 * KIB, 64 * KIB, MIB]
        return [64, 256, KIB, 4 * KIB, 16 * KIB, 64 * KIB, 256 * KIB, MIB]

    def want(self, row):
        """wake: --rows selects rows; none given runs them all."""
        return not self.a.rows or row in self.a.rows

    def backend(self, io, variant=None):
        """One backend's rows; under a --variant the rows are named io/LABEL."""
        self.variant = variant or {}
        name = "%s/%s" % (io, variant["label"]) if variant else io
        log("\n== MetaRoCE, daemons --io %s%s" % (io, " (%s)" % describe_variant(variant) if variant else ""))
        self.backend_rows(io, name)
        self.variant = {}

    def backend_rows(self, io, name):
        try:
            net = self.net_up(io)
        except Exception as e:  # noqa: BLE001
            self.event("--io %s: %s" % (io, e))
            self.results["perftest"].append({"backend": name, "tool": "(all)", "size": 0, "condition": "lossless",
                                             "status": "failed", "reason": str(e)[:600]})
            self.net_down()
            return
        self.results.setdefault("backends", {})[name] = net.get("io_line", "")
        log("  " + net.get("io_line", ""))
        pt = self.results["perftest"]
        if self.a.only_impairments:
            self.impairments(io, name)
            self.save_daemon_logs(io, "end")
            self.net_down()
            return
        for s in self.sizes() if self.want("write_bw") else ():
            pt.append(self.run_pt(name, "ib_write_bw", s, self.bw_iters(s)))
        for tool in ("ib_read_bw", "ib_send_bw"):
            if self.want(tool[3:]):
                pt.append(self.run_pt(name, tool, 64 * KIB, self.bw_iters(64 * KIB)))
        lat_iters = 2000 if self.a.quick else 5000
        for tool in ("ib_write_lat", "ib_send_lat"):
            if self.want(tool[3:]):
                pt.append(self.run_pt(name, tool, 8, lat_iters))
        if self.want("cm"):
            self.guard("connection setup", lambda: cm_bench.rows(self, io))  # cmasan: cmtime vs TCP
        if self.want("impair"):
            self.impairments(io, name)
        self.save_daemon_logs(io, "end")
        self.net_down()

    def has_netem(self):
        if self.netem_ok is None:
            dev = self.net["IF_A"]
            rc, out, _ = self.procs.run("tc-probe-netem", self.in_ns("A", ["tc", "qdisc", "replace", "dev", dev, "root",
                                                                           "netem", "delay", "0"]), 20)
            self.netem_ok = rc == 0
            if rc == 0:
                self.procs.run("tc-del", self.in_ns("A", ["tc", "qdisc", "del", "dev", dev, "root"]), 20)
            else:
                self.event("sch_netem unavailable (%s): impairments through the mroce-impair hop "
                           "(a third namespace, docs/impair.md)" % out.strip().splitlines()[-1])
        return self.netem_ok

    def impair(self, method, spec):
        """Installs the impairment (netem on both veth ends, or the hop's arguments); None removes it."""
        if method == "hop":
            rc, out, _ = self.sh("hop-restart", "mroce_hop_restart %s" % (spec or ""), timeout=60)
            if rc != 0:
                raise RuntimeError("mroce-impair %s did not start: %s" % (spec, tail(out)))
            return
        for side in ("A", "B"):
            dev = self.net["IF_" + side]
            if spec is None:
                self.procs.run("tc-del", self.in_ns(side, ["tc", "qdisc", "del", "dev", dev, "root"]), 20)
                continue
            cmd = ["tc", "qdisc", "replace", "dev", dev, "root", "netem"] + spec.split()
            rc, out, _ = self.procs.run("tc-" + side, self.in_ns(side, cmd), 20)
            if rc != 0:
                raise RuntimeError("%s failed: %s" % (" ".join(cmd[:6]), out.strip().splitlines()[-1]))

    def link_tx(self):
        """tx packets of both hosts' veth ends (counts every transmit path, AF_XDP direct xmit too)."""
        n = 0
        for side in ("A", "B"):
            out = subprocess.run(self.in_ns(side, ["cat", "/sys/class/net/%s/statistics/tx_packets" %
                                                   self.net["IF_" + side]]), capture_output=True, text=True,
                                 timeout=10).stdout
            n += int(out.strip() or 0)
        return n

    def hop_counters(self):
        """Both directions' counters of the running mroce-impair (tests/lib/netns.sh mroce_hop_stats)."""
        rc, out, _ = self.sh("hop-stats", "mroce_hop_stats", timeout=60)
        line = next((l for l in out.splitlines() if l.startswith("{")), None)
        if rc != 0 or not line:
            raise RuntimeError("no counters from mroce-impair: " + tail(out))
        d = json.loads(line)
        return {k: d[k] for k in ("a_to_b", "b_to_a")}

    def impair_stats(self, method):
        """Frames the impairment saw and dropped, both ends; with the hop also its counters."""
        if method == "hop":
            c = self.hop_counters()
            seen = sum(v["matched"] for v in c.values())
            dropped = sum(v[k] for v in c.values() for k in v if k.startswith("dropped_"))
            return seen, dropped, c
        seen = dropped = 0
        for side in ("A", "B"):
            cmd = ["tc", "-s", "qdisc", "show", "dev", self.net["IF_" + side]]
            out = subprocess.run(self.in_ns(side, cmd), capture_output=True, text=True, timeout=10).stdout
            m = re.search(r"netem.*?Sent (\d+) bytes (\d+) pkt \(dropped (\d+)", out, re.S)
            if m:
                seen += int(m.group(2)) + int(m.group(3))
                dropped += int(m.group(3))
        return seen, dropped, None

    def impairments(self, io, name=None):
        name = name or io
        tools = ["ib_write_bw", "ib_read_bw"]  # both: the loss goals name write and read
        method = "netem" if self.has_netem() else "hop"
        size = 64 * KIB
        if method == "hop":
            try:
                self.net_up(io, hop=True)
            except Exception as e:  # noqa: BLE001
                self.event("--io %s through the hop: %s" % (io, e))
                for label, _, _ in IMPAIRMENTS:
                    for tool in tools:
                        self.results["impairments"].append({"backend": name, "tool": tool, "size": size,
                                                            "condition": label, "status": "failed",
                                                            "reason": "network through the hop: %s" % str(e)[:300]})
                return
        # A second lossless run with the impaired runs' iteration count (through
        # the hop, impairing nothing, when the rows use it): the retained ratio's
        # baseline (docs/benchmark.md).
        for tool in tools:
            r = self.run_pt(name, tool, size, self.bw_iters(size, impaired=True), condition="lossless (repeat)")
            r["via"] = method
            self.results["impairments"].append(r)
        rows = [(l, n, h) for l, n, h in IMPAIRMENTS if not (self.a.quick and "control" in l)]
        if self.a.only_impair:
            rows = [x for x in rows if x[0] in self.a.only_impair]
        for label, netem_spec, hop_args in rows:
            spec = netem_spec if method == "netem" else hop_args
            how = ("netem " + spec + " (both veth ends)") if method == "netem" else \
                ("mroce-impair hop, both directions: " + spec)
            for tool in tools:
                self.results["impairments"].append(self.impaired_run(name, tool, size, label, method, spec, how))
        if method == "hop" and self.net:
            self.guard("hop-clear", lambda: self.impair("hop", None))

    def impaired_run(self, io, tool, size, label, method, spec, how):
        base = {"backend": io, "tool": tool, "size": size, "condition": label, "impairment": how, "via": method}
        if not self.net:
            return dict(base, status="failed", reason="network down")
        try:
            self.impair(method, spec)
            tx0 = self.link_tx()
        except Exception as e:  # noqa: BLE001
            return dict(base, status="failed", reason=str(e))
        try:
            r = self.run_pt(io, tool, size, self.bw_iters(size, impaired=True), condition=label)
            r.update(base)
            try:
                seen, dropped, hop = self.impair_stats(method)
                r.update(link_tx_frames=self.link_tx() - tx0, impaired_frames_seen=seen, impaired_drops=dropped)
                if hop:
                    r["hop_counters"] = hop
            except Exception as e:  # noqa: BLE001
                r["note"] = "impairment counters unavailable: %s" % str(e)[:200]
        finally:
            if self.net and method == "netem":
                self.guard("impair-del", lambda: self.impair(method, None))
        self.check_applied(r)
        return r

    def check_applied(self, r):
        """An impairment the backend's transmit path bypasses is reported as not applied."""
        frames = r.get("link_tx_frames") or 0
        if r.get("status") != "ok" or not frames:
            return
        applied = (r.get("impaired_frames_seen") or 0) > 0.5 * frames
        r["impairment_applied"] = applied
        if not applied:
            r["note"] = ("the impairment saw almost none of the %d frames sent (%s frames seen), so the figure is "
                         "NOT an impaired one" % (frames, r.get("impaired_frames_seen")))
            log("           ^ impairment not applied")

    # ------------------------------------------------------------- machine
    def machine(self):
        cpu = ""
        try:
            with open("/proc/cpuinfo") as f:
                cpu = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), "")
        except OSError:
            pass
        git = lambda *a: subprocess.run(["git"] + list(a), cwd=TOP, capture_output=True, text=True).stdout.strip()
        return {"nproc": os.cpu_count(), "kernel": platform.release(), "cpu_model": cpu,
                "loadavg_start": open("/proc/loadavg").read().split()[:3],
                "hostname": platform.node(), "git_head": git("rev-parse", "--short", "HEAD"),
                "git_dirty_paths": len([l for l in git("status", "--porcelain").splitlines() if l]),
                "perftest": subprocess.run(["dpkg-query", "-W", "-f", "${Version}", "perftest"], capture_output=True,
                                           text=True).stdout.strip(),
                "date": datetime.datetime.now().isoformat(timespec="seconds")}

    def settings(self):
        names = ["%s/%s" % (b, v["label"]) for b in self.a.backends for v in self.a.variants] or self.a.backends
        return {"quick": self.a.quick, "mtu": self.a.mtu, "backends": names, "rows": self.a.rows,
                "variants": [dict(v, text=describe_variant(v)) for v in self.a.variants], "prefix": self.prefix,
                "sizes": self.sizes(), "bw_iters": {s: self.bw_iters(s) for s in self.sizes()},
                "impaired_iters_64k": self.bw_iters(64 * KIB, True), "lat_iters": 2000 if self.a.quick else 5000,
                "lat_size": 8, "timeout_s": self.a.timeout,
                "impairments": {l: {"netem": "tc qdisc replace dev <veth> root netem " + s + " (both veth ends)",
                                    "without_netem": "mroce-impair " + h + " (hop namespace, both directions)"}
                                for l, s, h in IMPAIRMENTS},
                "perftest_topology": "server in ns A (device metaroce0), client in ns B; -x = RoCE v2 IPv4 GID",
                "daemon_args": "tests/lib/netns.sh defaults (--paths %s) %s" % (
                    os.environ.get("MROCE_PATHS", "4"), os.environ.get("MROCE_DAEMON_ARGS", "")),
                "binaries": self.bin}

    # ----------------------------------------------------------------- run
    def run(self):
        if os.geteuid() != 0:
            sys.exit("tools/bench: run as root (namespaces, veth, AF_XDP, tc)")
        taken = self.ns_taken()
        if taken:
            sys.exit("tools/bench: namespaces %s already exist (another benchmark running?). Set MROCE_PREFIX=mroce-... "
                     "to use other names, or remove them if they are stale: ip netns del NAME" % " ".join(taken))
        self.build()
        self.results["machine"] = self.machine()
        self.results["settings"] = self.settings()
        t0 = time.monotonic()
        if not self.a.only_impairments:
            self.references()
        for io in self.a.backends:
            for v in self.a.variants or [None]:
                self.backend(io, v)
        if not self.a.only_impairments and self.want("lib"):  # UCX and Open MPI rows (issue 11): tools/benchlib/lib_bench.py
            import lib_bench
            lib_bench.run(self, self.a.backends[0])
        self.results["machine"]["loadavg_end"] = open("/proc/loadavg").read().split()[:3]
        self.results["duration_s"] = round(time.monotonic() - t0, 1)

    def cleanup(self):
        self.procs.kill_all()
        if self.net is not None:
            try:
                self.net_down()
            except Exception as e:  # noqa: BLE001
                log("cleanup: %s" % e)


def tail(s, n=300):
    s = " ".join(s.split())
    return s[-n:]


def fmt_size(s):
    if s >= MIB and s % MIB == 0:
        return "%d MiB" % (s // MIB)
    if s >= KIB and s % KIB == 0:
        return "%d KiB" % (s // KIB)
    return "%d B" % s


def summary(r):
    if r.get("status") != "ok":
        return "FAILED: " + r.get("reason", "?")[:160]
    if "gbps" in r and "mpps" in r and "frame_bytes" in r:
        return "%.2f Gbit/s, %.3f Mpps" % (r["gbps"], r["mpps"])
    if "rtt_p50_us" in r:
        return "RTT p50 %.1f us, p99 %.1f us" % (r["rtt_p50_us"], r["rtt_p99_us"])
    if "t_typical_us" in r:
        return "one-way typical %.1f us, p99 %.1f us" % (r["t_typical_us"], r["t_p99_us"])
    if "gbps" in r:
        extra = ""
        if r.get("daemon_cpu_s_per_gb") is not None:
            extra = ", daemons %.1f CPU-s/GB" % r["daemon_cpu_s_per_gb"]
        k = r.get("counters")
        if k:
            extra += ", ring drops %d, held %d, retx %d" % (k["tx_drop_ring_full"], k["tx_held_ring_full"],
                                                           k["tx_retransmits"])
        return "%.2f Gbit/s%s" % (r["gbps"], extra)
    return "ok"


def parse_variant(spec):
    """wake: 'LABEL[@METAROCED];DAEMON ARGS[;PIN]', PIN = CPUs of daemon A, daemon B, app A,
    app B ('-' leaves one unpinned), e.g. 'pair;--spin-us 0;0,1,0,1'."""
    parts = spec.split(";")
    if len(parts) not in (2, 3) or not parts[0]:
        raise ValueError("--variant takes 'LABEL[@BIN];DAEMON ARGS[;dA,dB,aA,aB]': %r" % spec)
    label, _, binary = parts[0].partition("@")
    v = {"label": label, "args": parts[1], "bin": binary or None, "pin": {}}
    if len(parts) == 3 and parts[2]:
        cpus = parts[2].split(",")
        if len(cpus) != 4:
            raise ValueError("--variant placement takes 4 CPUs (daemon A, daemon B, app A, app B): %r" % parts[2])
        for k, c in zip(("daemon_A", "daemon_B", "app_A", "app_B"), cpus):
            if c != "-":
                v["pin"][k] = c
    return v


def describe_variant(v):
    pin = " ".join("%s@cpu%s" % (k, c) for k, c in sorted(v["pin"].items()))
    return "daemon args %r%s%s" % (v["args"], " binary " + v["bin"] if v["bin"] else "", ", " + pin if pin else "")


def main():
    ap = argparse.ArgumentParser(prog="tools/bench", description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer sizes and iterations (~2-3 min)")
    ap.add_argument("--out", help="output directory (default out/bench-<timestamp>)")
    ap.add_argument("--no-build", action="store_true", help="use the binaries already built")
    ap.add_argument("--output-base", help="bazel --output_base for build and info")
    ap.add_argument("--backends", default="packet,xdp", help="comma list of daemon --io backends")
    ap.add_argument("--mtu", type=int, default=1500)
    ap.add_argument("--timeout", type=int, default=None, help="seconds per perftest run (default 60, quick 40)")
    ap.add_argument("--only-impairments", action="store_true",
                    help="skip references and the lossless sweep: only the impairment rows")
    ap.add_argument("--impairment", action="append", dest="only_impair", default=[],
                    help="run only this impairment row (its label, e.g. 'loss 1%% + delay 1ms'); repeatable")
    ap.add_argument("--rows", default="",
                    help="wake: comma list of rows to run (default all): tcp, frames, udp, write_bw, read_bw, "
                         "send_bw, write_lat, send_lat, cm, impair, lib")
    ap.add_argument("--sizes", default="", help="comma list of ib_write_bw sizes in bytes (default the sweep)")
    ap.add_argument("--variant", action="append", default=[], dest="variant_specs",
                    help="wake: run every backend's rows once per variant, named BACKEND/LABEL, in this run: "
                         "'LABEL[@METAROCED];DAEMON ARGS[;dA,dB,aA,aB]' (daemon arguments, another binary, "
                         "CPUs of the daemons and the perftest processes); repeatable")
    a = ap.parse_args()
    a.rows = [r for r in a.rows.split(",") if r]
    a.sizes = [int(x) for x in a.sizes.split(",") if x]
    try:
        a.variants = [parse_variant(v) for v in a.variant_specs]
    except ValueError as e:
        ap.error(str(e))
    a.backends = [b for b in a.backends.split(",") if b]
    for b in a.backends:
        if b not in ("packet", "xdp", "auto"):
            ap.error("--backends takes packet, xdp, auto")
    if a.timeout is None:
        a.timeout = 40 if a.quick else 60
    if not a.out:
        a.out = os.path.join(TOP, "out", "bench-" + datetime.datetime.now().strftime("%Y%m%d-%H%M%S"))
    a.out = os.path.abspath(a.out)

    b = Bench(a)

    def on_signal(signum, frame):
        raise Interrupted("signal %d" % signum)

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    interrupted = False
    try:
        b.run()
    except (Interrupted, KeyboardInterrupt) as e:
        interrupted = True
        log("\ntools/bench: interrupted (%s); tearing down" % e)
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        b.cleanup()
    if "machine" not in b.results:
        return 130 if interrupted else 1
    b.results["interrupted"] = interrupted
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import report  # noqa: E402
    report.write(b.results, a.out)
    return 130 if interrupted else 0


if __name__ == "__main__":
    sys.exit(main())

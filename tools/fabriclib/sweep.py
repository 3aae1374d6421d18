#!/usr/bin/env python3
"""Runs a preset set of fabric-sim scenarios as parallel processes.

Shows progress on one terminal line, then writes DIR/results.md (the table
docs/evaluation.md quotes), DIR/results.csv and the plots (plot.py).
Usage: tools/fabric-sim sweep [--preset goals|scale|ci|share] [--jobs N]
       [--hosts N] [--out DIR] [--only WORD[,WORD..]] [--dry-run]
"""
import argparse
import csv
import json
import os
import subprocess
import sys
import time


def presets(hosts):
    """name -> list of (run name, fabric-sim arguments)."""
    h = str(hosts)
    transports = ["metaroce", "roce-pfc", "roce-lossy"]
    goals = []
    for t in transports:
        goals.append((f"a2a-{t}-{h}", ["alltoall", "--hosts", h, "--transport", t]))
    goals.append((f"a2a-metaroce-paths1-{h}", ["alltoall", "--hosts", h, "--paths", "1"]))
    for t in transports:
        goals.append((f"ring-{t}-{h}", ["allreduce-ring", "--hosts", h, "--transport", t]))
    for t in transports:  # 1% loss on one leaf-spine link
        goals.append((f"a2a-loss-{t}-{h}",
                      ["alltoall", "--hosts", h, "--transport", t, "--loss-link", "0", "--loss", "0.01"]))
    if hosts in (16, 128, 1024):  # k-ary fat-tree sizes with k = 4, 8, 16
        for t in transports:
            goals.append((f"a2a-fattree-{t}-{h}", ["alltoall", "--hosts", h, "--topology", "fat-tree",
                                                   "--transport", t]))
    for t in ["metaroce", "roce-pfc"]:
        goals.append((f"incast64-{t}", ["incast", "--hosts", h, "--transport", t, "--senders",
                                        str(min(64, hosts - 1))]))
    # The same MetaRoCE runs with a NIC that backpressures the engine
    # (hal.h tx_ready, 64 KB of queued data) instead of queueing every
    # QP's first window.
    room = ["--tx-room-kb", "64"]
    goals.append((f"a2a-metaroce-txroom64-{h}", ["alltoall", "--hosts", h] + room))
    # 4 path entropies per QP, the engine's default (the simulator's is 16).
    goals.append((f"a2a-metaroce-txroom64-paths4-{h}",
                  ["alltoall", "--hosts", h, "--paths", "4"] + room))
    goals.append((f"a2a-loss-metaroce-txroom64-{h}",
                  ["alltoall", "--hosts", h, "--loss-link", "0", "--loss", "0.01"] + room))
    goals.append((f"incast64-metaroce-txroom64", ["incast", "--hosts", h, "--senders",
                                                  str(min(64, hosts - 1))] + room))
    # Trimming switches (docs/protocol.md §3.8), with either NIC.
    trim = ["incast", "--hosts", h, "--senders", str(min(64, hosts - 1)), "--trim", "on"]
    goals.append(("incast64-metaroce-trim", trim))
    goals.append(("incast64-metaroce-trim-txroom64", trim + room))
    scale = []
    for n in (16, 32, 128):
        hpl = str(min(16, n // 2))
        for w in ("alltoall", "allreduce-ring"):
            for t in ("metaroce", "roce-pfc"):
                scale.append((f"scale-{w}-{t}-{n}",
                              [w, "--hosts", str(n), "--hosts-per-leaf", hpl, "--transport", t]))
    ci = [(f"ci-{w}-{t}", [w, "--hosts", "16", "--hosts-per-leaf", "4", "--transport", t,
                           "--bytes", "262144"])
          for w in ("alltoall", "allreduce-ring", "incast") for t in transports]
    # Jobs sharing the fabric and background traffic (docs/evaluation.md
    # §5 "Sharing the fabric"): 4 leaves of hosts/4, backpressuring NIC.
    share = []
    base = ["--hosts", h, "--hosts-per-leaf", str(max(2, hosts // 4))] + room
    ring = ["allreduce-ring", "--bytes", "4194304"] + base
    a2a = ["alltoall"] + base
    share += [(f"share-ring-{h}", ring),
              (f"share-ring-bg30-{h}", ring + ["--background", "0.3"]),
              (f"share-ring-bg60-{h}", ring + ["--background", "0.6"]),
              (f"share-ring-bg30-1m-{h}", ring + ["--background", "0.3",
                                                   "--background-bytes", "1048576"]),
              (f"share-ring-2jobs-{h}", ring + ["--jobs", "2"]),
              (f"share-ring-2jobs-interleaved-{h}", ring + ["--jobs", "2", "--placement",
                                                            "interleaved"]),
              (f"share-a2a-{h}", a2a),
              (f"share-a2a-bg50-{h}", a2a + ["--background", "0.5"]),
              (f"share-a2a-2jobs-{h}", a2a + ["--jobs", "2"]),
              (f"share-a2a-2jobs-interleaved-{h}", a2a + ["--jobs", "2", "--placement",
                                                          "interleaved"]),
              (f"share-a2a-4jobs-interleaved-{h}", a2a + ["--jobs", "4", "--placement",
                                                          "interleaved"])]
    return {"goals": goals, "scale": scale, "ci": ci, "share": share}


def progress(done, total, running, t0):
    line = f"\r[{done}/{total}] {time.time() - t0:6.0f}s  running: {', '.join(running)[:90]}"
    sys.stderr.write(line.ljust(130))
    sys.stderr.flush()


def run_all(binary, runs, out, jobs):
    t0 = time.time()
    pending = list(runs)
    active = {}
    results = []
    while pending or active:
        while pending and len(active) < jobs:
            name, args = pending.pop(0)
            log = open(os.path.join(out, name + ".log"), "w")
            cmd = ["nice", "-n", "19", binary] + args + ["--name", name, "--out", out]
            active[name] = (subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT), log)
        for name, (p, log) in list(active.items()):
            if p.poll() is None:
                continue
            log.close()
            del active[name]
            results.append(name)
        progress(len(results), len(runs), list(active), t0)
        time.sleep(0.5)
    sys.stderr.write("\n")


COLUMNS = ["name", "transport", "workload", "hosts", "completed", "verified", "completion_us",
           "ideal_us", "ratio_to_ideal", "slowdown_p50", "slowdown_p99", "slowdown_max",
           "drops", "retransmits", "timeouts", "pfc_pause_frames", "pfc_paused_us",
           "max_queue_kb", "wall_s", "events_per_s", "peak_rss_mb"]


def row(j):
    r = {k: j.get(k) for k in COLUMNS}
    r["slowdown_p50"] = j["slowdown"]["p50"]
    r["slowdown_p99"] = j["slowdown"]["p99"]
    r["slowdown_max"] = j["slowdown"]["max"]
    r["max_queue_kb"] = max([t["max_queue_bytes"] for t in j["tiers"]] or [0]) / 1000
    return r


def fmt(v):
    if isinstance(v, float):
        return f"{v:.3g}" if abs(v) < 1000 else f"{v:.0f}"
    return str(v)


def write_tables(out, names):
    rows = []
    for n in names:
        path = os.path.join(out, n + ".json")
        if not os.path.exists(path):
            rows.append({"name": n, "completed": "crashed (see .log)"})
            continue
        with open(path) as f:
            rows.append(row(json.load(f)))
    with open(os.path.join(out, "results.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        for r in rows:
            w.writerow(r)
    with open(os.path.join(out, "results.md"), "w") as f:
        f.write("| " + " | ".join(COLUMNS) + " |\n|" + "---|" * len(COLUMNS) + "\n")
        for r in rows:
            f.write("| " + " | ".join(fmt(r.get(c, "")) for c in COLUMNS) + " |\n")
    return rows


def plotting_python():
    """A python3 that has matplotlib (Debian's, from python3-matplotlib)."""
    for c in ("/usr/bin/python3", sys.executable):
        if subprocess.call([c, "-c", "import matplotlib"], stderr=subprocess.DEVNULL) == 0:
            return c
    return sys.executable  # plot.py then says what is missing


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--preset", default="ci")
    ap.add_argument("--hosts", type=int, default=128)
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--out", default=None)
    ap.add_argument("--only", default="",
                    help="comma-separated words; run only the preset's runs whose name has one")
    ap.add_argument("--dry-run", action="store_true")
    a = ap.parse_args()
    sets = presets(a.hosts)
    if a.preset not in sets:
        sys.exit(f"sweep: unknown preset {a.preset!r} ({', '.join(sets)})")
    runs = sets[a.preset]
    if a.only:
        words = [w for w in a.only.split(",") if w]
        runs = [(n, r) for n, r in runs if any(w in n for w in words)]
    out = a.out or f"out/fabric-{a.preset}-{time.strftime('%Y%m%d-%H%M%S')}"
    os.makedirs(out, exist_ok=True)
    if a.dry_run:
        for name, args in runs:
            print(name, " ".join(args))
        return
    run_all(a.bin, runs, out, max(1, a.jobs))
    rows = write_tables(out, [n for n, _ in runs])
    print(open(os.path.join(out, "results.md")).read())
    subprocess.call([plotting_python(), os.path.join(os.path.dirname(__file__), "plot.py"), out])
    bad = [r["name"] for r in rows if r.get("completed") is not True or r.get("verified") is not True]
    if bad:
        print("not completed or not verified:", ", ".join(bad))
    print("results in", out)


if __name__ == "__main__":
    main()

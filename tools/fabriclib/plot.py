#!/usr/bin/env python3
"""Plots from fabric-sim results in DIR (NAME.json, NAME.flows.csv,
NAME.queues.csv): flow-slowdown CDFs per workload, completion time vs hosts,
and switch queues over time. Writes PNGs into DIR."""
import collections
import csv
import glob
import json
import os
import sys

try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    sys.exit("plot: python3-matplotlib is missing (tools/setup installs it)")


def load(out):
    runs = {}
    for path in sorted(glob.glob(os.path.join(out, "*.json"))):
        with open(path) as f:
            j = json.load(f)
        runs[os.path.basename(path)[:-5]] = j
    return runs


def slowdowns(out, name, j):
    path = os.path.join(out, name + ".flows.csv")
    if not os.path.exists(path):
        return []
    bps = j["link_gbps"] * 1e9
    v = []
    with open(path) as f:
        for r in csv.DictReader(f):
            if "slowdown" in r:  # the simulator's own baseline (scenario.cc alone_ns)
                v.append(float(r["slowdown"]))
                continue
            alone_us = int(r["bytes"]) * 8 / bps * 1e6  # older results
            v.append(float(r["fct_us"]) / max(alone_us, 1e-3))
    return sorted(v)


def cdfs(out, runs):
    by_workload = collections.defaultdict(list)
    for name, j in runs.items():
        by_workload[(j["workload"], j["hosts"])].append(name)
    for (w, h), names in by_workload.items():
        plt.figure(figsize=(6, 4))
        for n in names:
            v = slowdowns(out, n, runs[n])
            if v:
                plt.step(v, [(i + 1) / len(v) for i in range(len(v))], where="post", label=n)
        plt.xscale("log")
        plt.xlabel("flow completion time / transfer time at line rate")
        plt.ylabel("CDF")
        plt.title(f"{w}, {h} hosts")
        plt.legend(fontsize=7)
        plt.tight_layout()
        plt.savefig(os.path.join(out, f"cdf-{w}-{h}.png"), dpi=120)
        plt.close()


def vs_hosts(out, runs):
    series = collections.defaultdict(list)
    for j in runs.values():
        if j["completed"]:
            series[(j["workload"], j["transport"])].append((j["hosts"], j["ratio_to_ideal"]))
    if not any(len(v) > 1 for v in series.values()):
        return
    plt.figure(figsize=(6, 4))
    for (w, t), pts in sorted(series.items()):
        pts.sort()
        plt.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=f"{w} {t}")
    plt.xscale("log", base=2)
    plt.xlabel("hosts")
    plt.ylabel("completion time / ideal")
    plt.legend(fontsize=7)
    plt.tight_layout()
    plt.savefig(os.path.join(out, "completion-vs-hosts.png"), dpi=120)
    plt.close()


def queues(out, runs):
    for name in runs:
        path = os.path.join(out, name + ".queues.csv")
        if not os.path.exists(path):
            continue
        tiers = collections.defaultdict(lambda: ([], []))
        with open(path) as f:
            for r in csv.DictReader(f):
                t, v = tiers[r["tier"]]
                t.append(float(r["t_us"]))
                v.append(int(r["max_bytes"]) / 1000)
        if not tiers:
            continue
        plt.figure(figsize=(6, 3.5))
        for tier, (t, v) in sorted(tiers.items()):
            plt.plot(t, v, label=tier, linewidth=0.8)
        plt.xlabel("time (us)")
        plt.ylabel("largest queue in tier (KB)")
        plt.title(name)
        plt.legend(fontsize=7)
        plt.tight_layout()
        plt.savefig(os.path.join(out, f"queues-{name}.png"), dpi=120)
        plt.close()


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: plot.py DIR")
    out = sys.argv[1]
    runs = load(out)
    if not runs:
        sys.exit(f"plot: no results in {out}")
    cdfs(out, runs)
    vs_hosts(out, runs)
    queues(out, runs)
    print(f"plots in {out}")


if __name__ == "__main__":
    main()

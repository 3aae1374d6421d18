"""Turns tools/bench results into results.json, results.md and PNG plots.

Comparisons (docs/benchmark.md):
- bandwidth: perftest "BW average" (MiB/s, converted to Gbit/s = 1e9 bit/s)
  over the kernel TCP figure (iperf3, one stream) and over the raw frame rate
  of the same backend (the ceiling for a software NIC on this link);
- latency: perftest ib_write_lat / ib_send_lat report HALF the round trip
  (perftest divides ping-pong time by 2 for write and send). The table
  compares round trips: 2 x perftest typical against the UDP p50 round trip,
  2 x perftest 99% against the UDP p99 round trip;
- impairments: goodput under netem over the lossless goodput of the same
  test, backend and run.
"""
import json
import os

KIB, MIB = 1024, 1024 * 1024


def fmt_size(s):
    if s >= MIB and s % MIB == 0:
        return "%d MiB" % (s // MIB)
    if s >= KIB and s % KIB == 0:
        return "%d KiB" % (s // KIB)
    return "%d B" % s


def f2(x, unit=""):
    return "-" if x is None else ("%.2f%s" % (x, unit))


def ratio(a, b):
    return None if a is None or not b else a / b


def ok(r):
    return r is not None and r.get("status") == "ok"


def cell_fail(r):
    if r is None:
        return "not run"
    return "FAILED (%s)" % r.get("reason", "?")[:90].replace("|", "/")


def find(results, backend, tool, size, condition="lossless"):
    for r in results["perftest"] + results["impairments"]:
        if r.get("backend") == backend and r.get("tool") == tool and r.get("size") == size and \
                r.get("condition") == condition:
            return r
    return None


def baseline(results, backend, tool, size):
    """Mean lossless goodput: the sweep's run and the repeat before the impaired runs. When the
    impaired runs went through the mroce-impair hop, only the repeat (through the hop, impairing
    nothing) is a like-for-like baseline."""
    rep = find(results, backend, tool, size, "lossless (repeat)")
    runs = (rep,) if rep and rep.get("via") == "hop" else (find(results, backend, tool, size), rep)
    g = [r["gbps"] for r in runs if ok(r)]
    return sum(g) / len(g) if g else None


def backends(results):
    return results["settings"]["backends"]


def io_label(b):
    io, _, variant = b.partition("/")  # wake: BACKEND/LABEL under tools/bench --variant
    io = {"packet": "AF_PACKET", "xdp": "AF_XDP", "auto": "auto"}.get(io, io)
    return io + (" " + variant if variant else "")


def ref_row(name, r, fig):
    return "| %s | %s |" % (name, fig(r) if ok(r) else cell_fail(r))


def goal_rows(results):
    """One row per goal and backend: (goal, backend, measured, ratio, target text, met or None)."""
    refs = results["references"]
    tcp, udp = refs.get("tcp") or {}, refs.get("udp") or {}
    rows = []
    for b in backends(results):
        io = io_label(b)
        raw = refs.get("af_xdp" if b.split("/")[0] == "xdp" else "af_packet") or {}
        w = find(results, b, "ib_write_bw", 64 * KIB)
        v = ratio(w["gbps"], tcp.get("gbps")) if ok(w) and ok(tcp) else None
        rows.append(("64 KiB ib_write_bw / one TCP stream", io, w and ok(w) and "%.2f Gbit/s" % w["gbps"], v,
                     ">= 1.0 (floor 0.8)", None if v is None else v >= 1.0))
        lat = find(results, b, "ib_write_lat", 8)
        v = ratio(2 * lat["t_typical_us"], udp.get("rtt_p50_us")) if ok(lat) and ok(udp) else None
        rows.append(("8 B ib_write_lat round trip / UDP ping-pong RTT p50", io,
                     lat and ok(lat) and "%.1f us" % (2 * lat["t_typical_us"]), v, "<= 2.0",
                     None if v is None else v <= 2.0))
        for tool, target in (("ib_write_bw", 0.95), ("ib_read_bw", 0.90)):
            for cond in ("loss 1%", "loss 1% + delay 1ms"):
                r = find(results, b, tool, 64 * KIB, cond)
                base = baseline(results, b, tool, 64 * KIB)
                v = ratio(r["gbps"], base) if ok(r) else None
                rows.append(("64 KiB %s retained at %s" % (tool.replace("ib_", "").replace("_bw", ""), cond), io,
                             r and ok(r) and "%.2f Gbit/s" % r["gbps"], v, ">= %.2f" % target,
                             None if v is None else v >= target))
        v = ratio(w.get("daemon_cpu_s_per_gb"), tcp.get("cpu_s_per_gb")) if ok(w) and ok(tcp) else None
        rows.append(("daemon CPU per GB (64 KiB write) / TCP's", io,
                     w and ok(w) and w.get("daemon_cpu_s_per_gb") is not None and "%.2f s/GB" % w["daemon_cpu_s_per_gb"],
                     v, "<= 1.5", None if v is None else v <= 1.5))
        m = find(results, b, "ib_write_bw", 64)
        v = ratio(m.get("mpps"), raw.get("mpps")) if ok(m) and ok(raw) else None
        rows.append(("64 B message rate / raw frame rate (%s-B frames)" % raw.get("frame_bytes", "?"), io,
                     m and ok(m) and "%.3f Mpps" % m["mpps"], v, ">= 0.9", None if v is None else v >= 0.9))
    return rows


def goals_table(results):
    L = ["\n### Goals (issue 15; ratios from this run)\n",
         "| goal | backend | measured | ratio | target | |", "| --- | --- | --- | --- | --- | --- |"]
    for goal, io, fig, v, target, met in goal_rows(results):
        L.append("| %s | %s | %s | %s | %s | %s |" % (goal, io, fig or "not measured", f2(v), target,
                                                       "not measured" if met is None else ("met" if met else "NOT met")))
    return L


def counters_table(results):
    """Transmit drops and holds, per perftest run that read them."""
    L = ["\n### Transmit path counters (both daemons, over each run: metaroce-ctl stat)\n",
         "| test | size | condition | backend | tx_drop_ring_full | tx_held_ring_full | tx_retransmits | timeouts "
         "| tx_packets |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in results["perftest"] + results["impairments"]:
        k = r.get("counters")
        if ok(r) and k and not r["tool"].endswith("_lat"):
            L.append("| %s | %s | %s | %s | %d | %d | %d | %d | %d |" % (
                r["tool"], fmt_size(r["size"]), r["condition"], io_label(r["backend"]), k["tx_drop_ring_full"],
                k["tx_held_ring_full"], k["tx_retransmits"], k["timeouts"], k["tx_packets"]))
    return L if len(L) > 3 else []


def tables(results):
    refs = results["references"]
    tcp = refs.get("tcp") or {}
    udp = refs.get("udp") or {}
    tcp_g = tcp.get("gbps") if ok(tcp) else None
    L = []
    m = results["machine"]
    s = results["settings"]
    L.append("Machine: %s, %s vCPU, kernel %s, load average %s at start, %s at end; git %s (%d paths modified); "
             "perftest %s; %s; %s mode, %.0f s." % (
                 m.get("cpu_model"), m.get("nproc"), m.get("kernel"), " ".join(m.get("loadavg_start", [])),
                 " ".join(m.get("loadavg_end", ["?"])), m.get("git_head"), m.get("git_dirty_paths", 0),
                 m.get("perftest"), m.get("date"), "quick" if s.get("quick") else "full",
                 results.get("duration_s", 0)))
    if results.get("interrupted"):
        L.append("\n**Interrupted: the tables are partial.**")
    for b, line in results.get("backends", {}).items():
        L.append("\n- daemons --io %s: `%s`" % (b, line.strip()))
    L.append("")
    L.append("### References (same veth pair, no MetaRoCE daemon running)\n")
    L.append("| reference | figure |")
    L.append("| --- | --- |")
    L.append(ref_row("kernel TCP, one iperf3 stream", tcp, lambda r: "%.2f Gbit/s (%s retransmits; iperf3 CPU %.1f s/GB)" % (
        r["gbps"], r.get("retransmits"), r.get("cpu_s_per_gb") or 0)))
    for k, name in (("af_packet", "raw AF_PACKET"), ("af_xdp", "raw AF_XDP")):
        L.append(ref_row(name, refs.get(k), lambda r: "%.2f Gbit/s, %.3f Mpps, %s-B frames (%s)" % (
            r["gbps"], r["mpps"], r.get("frame_bytes", "?"), r["backend"])))
    L.append(ref_row("UDP socket ping-pong, 8 B, round trip", udp,
                     lambda r: "p50 %.1f us, p99 %.1f us (min %.1f, %d samples)" % (
                         r["rtt_p50_us"], r["rtt_p99_us"], r["rtt_min_us"], r["count"])))

    bk = backends(results)
    # -------- bandwidth
    L.append("\n### MetaRoCE bandwidth (perftest BW average, Gbit/s; ratio to kernel TCP and to the raw frame rate "
             "of the same backend)\n")
    hdr = "| test | size |" + "".join(" %s Gbit/s | /TCP | /raw |" % io_label(b) for b in bk)
    L.append(hdr)
    L.append("| --- | --- |" + " --- | --- | --- |" * len(bk))
    rows = [("ib_write_bw", sz) for sz in s["sizes"]] + [("ib_read_bw", 64 * KIB), ("ib_send_bw", 64 * KIB)]
    for tool, sz in rows:
        cells = []
        for b in bk:
            r = find(results, b, tool, sz)
            raw = refs.get("af_xdp" if b.split("/")[0] == "xdp" else "af_packet")
            if ok(r):
                cells += [f2(r["gbps"]), f2(ratio(r["gbps"], tcp_g)),
                          f2(ratio(r["gbps"], raw.get("gbps") if ok(raw) else None))]
            else:
                cells += [cell_fail(r), "-", "-"]
        L.append("| %s | %s | %s |" % (tool, fmt_size(sz), " | ".join(cells)))

    # -------- latency
    L.append("\n### MetaRoCE latency, 8 B (perftest reports one-way = round trip / 2; compared as round trips)\n")
    L.append("| test | backend | one-way typical us | one-way p99 us | RTT typical us (2x) | RTT p99 us (2x) | "
             "RTT typical / UDP p50 | RTT p99 / UDP p99 |")
    L.append("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for tool in ("ib_write_lat", "ib_send_lat"):
        for b in bk:
            r = find(results, b, tool, 8)
            if ok(r):
                rt, rp = 2 * r["t_typical_us"], 2 * r["t_p99_us"]
                L.append("| %s | %s | %.1f | %.1f | %.1f | %.1f | %s | %s |" % (
                    tool, io_label(b), r["t_typical_us"], r["t_p99_us"], rt, rp,
                    f2(ratio(rt, udp.get("rtt_p50_us") if ok(udp) else None)),
                    f2(ratio(rp, udp.get("rtt_p99_us") if ok(udp) else None))))
            else:
                L.append("| %s | %s | %s | | | | | |" % (tool, io_label(b), cell_fail(r)))

    # -------- impairments
    L.append("\n### Goodput under impairment (64 KiB messages, both directions; retained = impaired / lossless, "
             "same test, backend and run, lossless = mean of the sweep's run and the repeat, or through the "
             "mroce-impair hop only the repeat through the hop; drops = frames the impairment dropped / frames both ends sent)\n")
    L.append("| condition | test |" + "".join(" %s Gbit/s | retained | drops |" % io_label(b) for b in bk))
    L.append("| --- | --- |" + " --- | --- | --- |" * len(bk))
    conds = []
    for r in results["impairments"]:
        key = (r["condition"], r["tool"])
        if key not in conds:
            conds.append(key)
    notes, hows = [], []
    for cond, tool in conds:
        cells = []
        for b in bk:
            r = find(results, b, tool, 64 * KIB, cond)
            base_g = baseline(results, b, tool, 64 * KIB)
            if r and r.get("impairment") and r["impairment"] not in hows:
                hows.append(r["impairment"])
            if ok(r):
                g = f2(r["gbps"])
                if r.get("impairment_applied") is False:
                    g += " (not applied\\*)"
                    notes.append(r.get("note", ""))
                d = r.get("impaired_drops", "?")
                drops = "-" if cond.startswith("lossless") else "%s / %s" % (
                    "n/a" if d is None else d, r.get("link_tx_frames", "?"))
                cells += [g, f2(ratio(r["gbps"], base_g)), drops]
            elif r is not None and r.get("status") == "skipped":
                cells += ["skipped: " + r.get("reason", ""), "-", "-"]
            else:
                cells += [cell_fail(r), "-", "-"]
        L.append("| %s | %s | %s |" % (cond, tool, " | ".join(cells)))
    if hows:
        L.append("\nImpairments as applied: " + "; ".join("`%s`" % h for h in hows) + ".")
    if notes:
        L.append("\n\\* " + notes[0])

    # -------- cpu
    L.append("\n### Daemon CPU time per GB moved (utime+stime of both metaroced, /proc/PID/stat, over the client run)\n")
    L.append("| test | size | backend | Gbit/s | daemon CPU s (A + B) | wall s | CPU s per GB | daemon CPU use "
             "(1.0 = one vCPU) |")
    L.append("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for tool, sz in [("ib_write_bw", 64 * KIB), ("ib_write_bw", MIB), ("ib_write_bw", 64), ("ib_read_bw", 64 * KIB),
                     ("ib_send_bw", 64 * KIB)]:
        for b in bk:
            r = find(results, b, tool, sz)
            if ok(r) and r.get("daemon_cpu_s_per_gb") is not None:
                L.append("| %s | %s | %s | %.2f | %.2f + %.2f | %.2f | %.2f | %.2f |" % (
                    tool, fmt_size(sz), io_label(b), r["gbps"], r["daemon_cpu_s"][0], r["daemon_cpu_s"][1],
                    r["wall_s"], r["daemon_cpu_s_per_gb"], r["daemon_cpu_util"]))
    if ok(tcp) and tcp.get("cpu_s_per_gb"):
        L.append("| iperf3 (kernel TCP) | - | - | %.2f | | %.1f | %.2f | |" % (tcp["gbps"], tcp["seconds"],
                                                                             tcp["cpu_s_per_gb"]))

    L += counters_table(results)
    L += goals_table(results)

    if results.get("events"):
        L.append("\n### Events\n")
        for e in results["events"]:
            L.append("- " + e["msg"])
    return "\n".join(L) + "\n"


def plots(results, out):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        return ["plots skipped: %s" % e]
    made = []
    refs = results["references"]
    bk = backends(results)
    sizes = results["settings"]["sizes"]
    # bandwidth vs size
    fig, ax = plt.subplots(figsize=(8, 5))
    for b, mk in zip(bk, "os^"):
        xs, ys = [], []
        for sz in sizes:
            r = find(results, b, "ib_write_bw", sz)
            if ok(r):
                xs.append(sz)
                ys.append(r["gbps"])
        if xs:
            ax.plot(xs, ys, marker=mk, label="MetaRoCE ib_write_bw, %s" % io_label(b))
    styles = [("tcp", "kernel TCP (iperf3, 1 stream)", "k", "-"),
              ("af_packet", "raw AF_PACKET, MTU frames", "tab:blue", "--"),
              ("af_xdp", "raw AF_XDP, MTU frames", "tab:orange", "--")]
    for k, label, color, ls in styles:
        r = refs.get(k)
        if ok(r):
            ax.axhline(r["gbps"], color=color, linestyle=ls, linewidth=1, label="%s: %.1f" % (label, r["gbps"]))
    ax.set_xscale("log", base=2)
    ax.set_xticks(sizes)
    ax.set_xticklabels([fmt_size(s) for s in sizes], rotation=30)
    ax.set_xlabel("message size")
    ax.set_ylabel("Gbit/s (average)")
    ax.set_title("Bandwidth on one veth pair (same run)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    p = os.path.join(out, "bandwidth.png")
    fig.savefig(p, dpi=110)
    plt.close(fig)
    made.append(p)
    # latency: round trips
    labels, p50, p99 = [], [], []
    udp = refs.get("udp")
    if ok(udp):
        labels.append("UDP socket\nping-pong")
        p50.append(udp["rtt_p50_us"])
        p99.append(udp["rtt_p99_us"])
    for tool in ("ib_write_lat", "ib_send_lat"):
        for b in bk:
            r = find(results, b, tool, 8)
            if ok(r):
                labels.append("%s\n%s" % (tool, io_label(b)))
                p50.append(2 * r["t_typical_us"])
                p99.append(2 * r["t_p99_us"])
    if labels:
        fig, ax = plt.subplots(figsize=(8, 5))
        x = range(len(labels))
        ax.bar([i - 0.2 for i in x], p50, width=0.4, label="typical / p50")
        ax.bar([i + 0.2 for i in x], p99, width=0.4, label="p99")
        ax.set_xticks(list(x))
        ax.set_xticklabels(labels, fontsize=8)
        ax.set_yscale("log")
        ax.set_ylabel("round trip, us (perftest: 2 x reported one-way)")
        ax.set_title("8-byte round trip (same run)")
        ax.grid(True, axis="y", alpha=0.3)
        ax.legend()
        fig.tight_layout()
        p = os.path.join(out, "latency.png")
        fig.savefig(p, dpi=110)
        plt.close(fig)
        made.append(p)
    # impairments
    rows = []
    for r in results["impairments"]:
        base_g = baseline(results, r["backend"], r["tool"], 64 * KIB)
        if ok(r) and base_g:
            rows.append(("%s %s\n%s" % (r["tool"].replace("ib_", "").replace("_bw", ""), io_label(r["backend"]),
                                         r["condition"]), r["gbps"] / base_g,
                         r.get("impairment_applied") is not False))
    if rows:
        fig, ax = plt.subplots(figsize=(max(8, len(rows) * 0.7), 5))
        ax.bar(range(len(rows)), [v for _, v, _ in rows],
               color=["tab:green" if a else "lightgray" for _, _, a in rows])
        ax.set_xticks(range(len(rows)))
        ax.set_xticklabels([l for l, _, _ in rows], fontsize=6, rotation=60, ha="right")
        ax.axhline(1.0, color="k", linewidth=0.8)
        ax.set_ylabel("goodput retained (impaired / lossless)")
        ax.set_title("64 KiB goodput under impairment (gray: impairment bypassed, not applied)")
        fig.tight_layout()
        p = os.path.join(out, "impairments.png")
        fig.savefig(p, dpi=110)
        plt.close(fig)
        made.append(p)
    return made


def write(results, out):
    os.makedirs(out, exist_ok=True)
    md = tables(results)
    made = plots(results, out)
    results["plots"] = [os.path.basename(p) if os.path.exists(p) else p for p in made]
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump(results, f, indent=1, sort_keys=True, default=str)
    with open(os.path.join(out, "results.md"), "w") as f:
        f.write("# MetaRoCE benchmark (tools/bench)\n\n")
        f.write(md)
        f.write("\nSettings: see results.json (`settings`); raw tool output in logs/.\n")
        for p in results["plots"]:
            f.write("\n![%s](%s)\n" % (p, p))
    print("\n" + md)
    print("wrote %s/results.md, results.json%s" % (out, "".join(", " + os.path.basename(p) for p in made)))

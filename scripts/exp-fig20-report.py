#!/usr/bin/env python3
"""Summarises scripts/exp-fig20.sh's runs: harvest-fig20-summary.csv, .svg, .md.

    exp-fig20-report.py OUT_DIR SECS REPS DB_NUM VOL ELAPSED_S NOTES_FILE
"""
import csv
import os
import statistics
import subprocess
import sys

out, secs, reps, db_num, vol, elapsed, notes_file = sys.argv[1:8]
rows = list(csv.DictReader(open(f"{out}/harvest-fig20.csv")))
policies = list(dict.fromkeys(r["policy"] for r in rows))
channels = sorted({int(r["channels"]) for r in rows})


def vals(pol, n, cfg, key):
    return [float(r[key]) for r in rows
            if r["policy"] == pol and int(r["channels"]) == n and r["config"] == cfg
            and r[key] not in ("", "-")]


def stat(v):
    return (statistics.mean(v), min(v), max(v)) if v else None


CONFIGS = ["alone", "static", "harvest"]
summary = []
for pol in policies:
    for n in channels:
        s = {"policy": pol, "channels": n}
        for c in CONFIGS:
            s[f"{c}_ops"] = stat(vals(pol, n, c, "ops_per_s"))
            s[f"{c}_p95"] = stat(vals(pol, n, c, "p95_us"))
        rel = lambda a, b: (s[f"{a}_ops"][0] / s[f"{b}_ops"][0] - 1) if s[f"{a}_ops"] and s[f"{b}_ops"] else None
        relp = lambda a, b: (s[f"{a}_p95"][0] / s[f"{b}_p95"][0] - 1) if s[f"{a}_p95"] and s[f"{b}_p95"] else None
        s["vs_alone"], s["vs_static"] = rel("harvest", "alone"), rel("harvest", "static")
        s["host"] = rel("static", "alone")
        s["p95_vs_alone"], s["p95_vs_static"] = relp("harvest", "alone"), relp("harvest", "static")
        s["hv_static"] = stat(vals(pol, n, "static", "hv_mib_s"))
        s["hv_harvest"] = stat(vals(pol, n, "harvest", "hv_mib_s"))
        lent = vals(pol, n, "harvest", "lent_blocks")
        s["lent_blocks"] = statistics.mean(lent) if lent else 0
        s["lent_runs"] = len([x for x in lent if x > 0])
        s["harvest_runs"] = len([r for r in rows if r["policy"] == pol and int(r["channels"]) == n and r["config"] == "harvest"])
        summary.append(s)

with open(f"{out}/harvest-fig20-summary.csv", "w", newline="") as f:
    w = csv.writer(f)
    head = ["policy", "channels"]
    for c in CONFIGS:
        head += [f"{c}_ops_mean", f"{c}_ops_min", f"{c}_ops_max", f"{c}_p95_us"]
    head += ["harvest_vs_alone", "harvest_vs_static", "static_vs_alone", "p95_harvest_vs_alone",
             "p95_harvest_vs_static", "lent_blocks_mean", "runs_lent", "hv_static_mib_s", "hv_harvest_mib_s"]
    w.writerow(head)
    g = lambda t, i: f"{t[i]:.1f}" if t else ""
    r4 = lambda x: f"{x:.4f}" if x is not None else ""
    for s in summary:
        row = [s["policy"], s["channels"]]
        for c in CONFIGS:
            row += [g(s[f"{c}_ops"], 0), g(s[f"{c}_ops"], 1), g(s[f"{c}_ops"], 2), g(s[f"{c}_p95"], 0)]
        row += [r4(s["vs_alone"]), r4(s["vs_static"]), r4(s["host"]), r4(s["p95_vs_alone"]),
                r4(s["p95_vs_static"]), f"{s['lent_blocks']:.0f}", f"{s['lent_runs']}/{s['harvest_runs']}",
                g(s["hv_static"], 0), g(s["hv_harvest"], 0)]
        w.writerow(row)

# SVG: throughput (bars with min-max) per channel count, alone and harvest, one
# panel per policy.
W, H, pad = 360 * max(1, len(policies)) + 60, 340, 60
top = max([s[f"{c}_ops"][2] for s in summary for c in CONFIGS if s[f"{c}_ops"]] + [1])
y_of = lambda v: H - pad - (H - 2 * pad) * v / top
colours = {"alone": "#4878a8", "static": "#8a8a8a", "harvest": "#d08040"}
svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
       f'<text x="{W/2}" y="18" text-anchor="middle" font-weight="bold">Figure 20: R\'s db_bench YCSB-A-like ops/s, alone, beside HV on its own flash (static) and on R\'s (harvest)</text>']
for k in range(5):
    v = top * k / 4
    svg.append(f'<text x="{pad-4}" y="{y_of(v)+4}" text-anchor="end">{v:.0f}</text>')
    svg.append(f'<line x1="{pad}" y1="{y_of(v)}" x2="{W-10}" y2="{y_of(v)}" stroke="#ddd"/>')
panel = (W - pad - 10) / max(1, len(policies))
for pi, pol in enumerate(policies):
    x0 = pad + pi * panel
    slot = panel / max(1, len(channels))
    for ci, n in enumerate(channels):
        s = next(x for x in summary if x["policy"] == pol and x["channels"] == n)
        for k, cfg in enumerate(CONFIGS):
            t = s[f"{cfg}_ops"]
            x = x0 + ci * slot + slot * (0.05 + 0.3 * k)
            if not t:
                svg.append(f'<text x="{x + slot*0.2}" y="{H-pad-4}" text-anchor="middle" font-size="9">n/a</text>')
                continue
            m, lo, hi = t
            svg.append(f'<rect x="{x:.1f}" y="{y_of(m):.1f}" width="{slot*0.28:.1f}" height="{H-pad-y_of(m):.1f}" fill="{colours[cfg]}"/>')
            cx = x + slot * 0.14
            svg.append(f'<line x1="{cx:.1f}" y1="{y_of(lo):.1f}" x2="{cx:.1f}" y2="{y_of(hi):.1f}" stroke="black"/>')
        svg.append(f'<text x="{x0 + ci*slot + slot/2:.1f}" y="{H-pad+14}" text-anchor="middle">{n} ch</text>')
    svg.append(f'<text x="{x0 + panel/2:.1f}" y="{H-pad+32}" text-anchor="middle" font-weight="bold">policy = "{pol}"</text>')
for k, cfg in enumerate(CONFIGS):
    svg.append(f'<rect x="{pad + 10 + 90*k}" y="28" width="10" height="10" fill="{colours[cfg]}"/>')
    svg.append(f'<text x="{pad + 24 + 90*k}" y="37">{cfg}</text>')
svg.append("</svg>")
open(f"{out}/harvest-fig20.svg", "w").write("\n".join(svg))

rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
notes = open(notes_file).read().strip() if os.path.exists(notes_file) else ""
load = os.getloadavg()[0]
pct = lambda x: f"{100*x:+.1f}%" if x is not None else "n/a"
fmt = lambda t: f"{t[0]:,.0f} [{t[1]:,.0f}–{t[2]:,.0f}]" if t else "n/a"
md = [
    "# BlockFlex Figure 20: a regular tenant's key-value store beside a harvest tenant",
    "",
    f"Generated by `scripts/exp-fig20.sh {secs}` (REPS={reps}, DB_NUM={db_num}, VOL={vol}) at commit {rev}; "
    f"took {int(elapsed)//60} min {int(elapsed)%60} s on this 2-core VM (load average {load:.1f} at the end). "
    "Do not edit by hand.",
    "",
    "**Setup.** Emulation mode (the flash model's timing, program/erase suspend on). The regular "
    "tenant R runs RocksDB `db_bench readrandomwriterandom` (50% reads, 50% writes, 10 threads: "
    f"a YCSB-A-like mix, not YCSB itself) for {secs} s on ext4 over nbdfuse and a loop device, on "
    f"{int(db_num):,} keys of 100 bytes loaded once; its vSSD has 2-10 channels and the same data on each. "
    "In *harvest*, the harvest tenant HV runs fio on a harvest volume on the gSSD R lent "
    f"({vol}, on all of that gSSD's channels; 64 KiB random I/O, 70% reads, queue depth 32). *static* "
    "runs the same fio job on HV's own vSSD (no flash shared with R), *alone* with HV idle; the three "
    "rotate in each repetition. RocksDB reads with direct I/O and an 8 MiB block cache, so reads reach the flash. P95 is over reads and "
    "writes together, interpolated in db_bench's histogram buckets. Paper: YCSB-A, 10 threads, 2-10 "
    "channels, the harvest VM running ML Prep on all of the regular VM's channels.",
    "",
    "![Figure 20](harvest-fig20.svg)",
    "",
    "| policy | channels | R alone ops/s (min–max) | R, HV on its own flash (static) | R, HV on R's flash (harvest) | harvest vs alone | harvest vs static | P95 µs alone / static / harvest | R lent (blocks, runs that lent) | HV MiB/s static / harvest |",
    "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
]
num = lambda t: f"{t[0]:,.0f}" if t else "n/a"
for s in summary:
    md.append("| " + " | ".join([
        s["policy"], str(s["channels"]), fmt(s["alone_ops"]), fmt(s["static_ops"]), fmt(s["harvest_ops"]),
        pct(s["vs_alone"]), pct(s["vs_static"]),
        " / ".join(num(s[f"{c}_p95"]) for c in CONFIGS),
        f"{s['lent_blocks']:,.0f} ({s['lent_runs']}/{s['harvest_runs']})",
        f"{num(s['hv_static'])} / {num(s['hv_harvest'])}",
    ]) + " |")
md += ["", "## Against the paper", ""]
mean = lambda xs: statistics.mean(xs) if xs else None
for pol in policies:
    mine = [s for s in summary if s["policy"] == pol]
    va = [s["vs_alone"] for s in mine if s["vs_alone"] is not None]
    vs = [s["vs_static"] for s in mine if s["vs_static"] is not None]
    host = [s["host"] for s in mine if s["host"] is not None]
    pa = [s["p95_vs_alone"] for s in mine if s["p95_vs_alone"] is not None]
    ps = [s["p95_vs_static"] for s in mine if s["p95_vs_static"] is not None]
    if va:
        md.append(f"- `{pol}`: with HV on R's flash, R's throughput changes by {pct(mean(va))} on average against "
                  f"R alone (over {len(va)} channel counts, {pct(min(va))} to {pct(max(va))}), and by "
                  f"{pct(mean(vs))} against HV running the same job on its own flash (static); paper: -5.1% "
                  f"against no harvest VM. HV on its own flash alone costs R {pct(mean(host))}: that part is "
                  f"the host (2 cores shared by db_bench's 10 threads, fio and the daemon), not shared flash. "
                  f"P95: {pct(mean(pa))} against alone, {pct(mean(ps))} against static.")
    else:
        md.append(f"- `{pol}`: no run with HV on R's flash (R lent nothing in time): nothing to compare.")
md += [
    "- Spread: each row is the mean of its repetitions with the min-max beside it; a change smaller "
    "than the alone row's own spread is not a measured difference on this shared 2-core VM, where "
    "db_bench's 10 threads, fio and the daemon share the cores.",
    "",
]
hv_s = [s["hv_static"][0] for s in summary if s["hv_static"]]
hv_h = [s["hv_harvest"][0] for s in summary if s["hv_harvest"]]
if hv_s and hv_h:
    md.insert(md.index("## Against the paper") + 2,
              f"- HV's own throughput, averaged over the rows: {statistics.mean(hv_s):,.0f} MiB/s on its own flash (static), "
              f"{statistics.mean(hv_h):,.0f} MiB/s on R's gSSD (harvest), where its requests wait for the dies R uses.")
if notes:
    md += ["## Notes from the run", "", "```", notes, "```", ""]
open(f"{out}/harvest-fig20.md", "w").write("\n".join(md))

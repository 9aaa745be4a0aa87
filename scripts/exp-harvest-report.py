#!/usr/bin/env python3
"""Tables and plots of scripts/exp-harvest.sh (Figures 18 and 19), from its work
directory: fio JSON reports and bandwidth logs, the daemon's events (stamped with
the wall time they were seen), the harvester's status. Standard library only.

    exp-harvest-report.py WORK OUT SECS R_MAX R_RATE ELAPSED_S
"""
import csv
import glob
import json
import os
import re
import statistics
import sys

work, out = sys.argv[1], sys.argv[2]
secs, r_max, r_rate, elapsed = (int(x) for x in sys.argv[3:7])
BLOCK_MIB = 0.25  # 256 KiB flash blocks
HV_QD = int(os.environ.get("HV_QD", "32"))  # each HV job's queue depth, as the run used


def load(p):
    with open(p) as f:
        return json.load(f)


def hv_bw(tag):
    j = load(f"{work}/hv-{tag}.json")
    return sum(x["read"]["bw_bytes"] + x["write"]["bw_bytes"] for x in j["jobs"]) / 2**20


def r_stats(tag):
    r = load(f"{work}/r-{tag}.json")["jobs"][0]["read"]
    return r["iops"], r["clat_ns"]["percentile"]["95.000000"] / 1000.0


def spread(v):
    v = [x for x in v if x is not None]
    if not v:
        return None
    return (statistics.mean(v), min(v), max(v), len(v))


def fmt(s, unit="", signed=False, nd=1):
    if s is None:
        return "n/a"
    m, lo, hi, n = s
    f = f"{{:{'+' if signed else ''}.{nd}f}}"
    txt = f"{f.format(m)}{unit} ({f.format(lo)} to {f.format(hi)})"
    return txt if n >= 3 else f"{txt}, {n} run{'s' if n != 1 else ''}"


# ---- Figure 18: every run ------------------------------------------------------
runs = [line.strip().split(",") for line in open(f"{work}/runs.txt") if line.strip()]
policies = []
for p, *_ in runs:
    if p not in policies:
        policies.append(p)
reps = sorted({int(r[1]) for r in runs})
rows = []
for pol, rep, cfg, load1 in runs:
    tag = f"{pol}-{rep}-{cfg}"
    row = {"policy": pol, "rep": rep, "config": cfg, "load1": load1,
           "hv_mib_s": "", "r_iops": "", "r_p95_us": "", "gssd_channels": "", "gssd_mib": "",
           "ended_on": ""}
    if os.path.exists(f"{work}/hv-{tag}.json"):
        row["hv_mib_s"] = round(hv_bw(tag), 1)
    iops, p95 = r_stats(tag)
    row["r_iops"], row["r_p95_us"] = round(iops), round(p95)
    if os.path.exists(f"{work}/vol-{tag}.json"):
        v = load(f"{work}/vol-{tag}.json")
        g = {x["id"]: x for x in load(f"{work}/gssds-{tag}.json")}
        segs = [g[s["gssd"]] for s in v["segments"]]
        row["gssd_channels"] = "+".join(str(x["bandwidth"]) for x in segs)
        row["gssd_mib"] = "+".join(f"{x['capacity_bytes'] / 2**20:.0f}" for x in segs)
        if os.path.exists(f"{work}/vol-after-{tag}.json"):
            after = load(f"{work}/vol-after-{tag}.json")
            moved = [s["gssd"] for s in after["segments"]] != [s["gssd"] for s in v["segments"]]
            row["ended_on"] = "moved" if moved else "same gSSD"
    rows.append(row)
with open(f"{out}/harvest-fig18.csv", "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
    w.writeheader()
    w.writerows(rows)


def get(pol, rep, cfg, key):
    for r in rows:
        if r["policy"] == pol and r["rep"] == str(rep) and r["config"] == cfg and r[key] != "":
            return float(r[key])
    return None


summary_rows = []
table = {}
for pol in policies:
    for cfg in ["alone", "static", "sold", "unsold"]:
        hv, gain, loss, p95, p95inc, iops, loss_st, p95_st = [], [], [], [], [], [], [], []
        for rep in reps:
            a_iops, a_p95 = get(pol, rep, "alone", "r_iops"), get(pol, rep, "alone", "r_p95_us")
            st = get(pol, rep, "static", "hv_mib_s")
            b = get(pol, rep, cfg, "hv_mib_s")
            i, p = get(pol, rep, cfg, "r_iops"), get(pol, rep, cfg, "r_p95_us")
            if b is not None:
                hv.append(b)
                if st:
                    gain.append(100 * (b / st - 1))
            if i is not None and a_iops:
                iops.append(i)
                loss.append(100 * (1 - i / a_iops))
            if p is not None and a_p95:
                p95.append(p)
                p95inc.append(100 * (p / a_p95 - 1))
            s_iops, s_p95 = get(pol, rep, "static", "r_iops"), get(pol, rep, "static", "r_p95_us")
            if i is not None and s_iops:
                loss_st.append(100 * (1 - i / s_iops))
            if p is not None and s_p95:
                p95_st.append(100 * (p / s_p95 - 1))
        t = {"hv_mib_s": spread(hv), "hv_gain_pct": spread(gain), "r_iops": spread(iops),
             "r_loss_pct": spread(loss), "r_p95_us": spread(p95), "r_p95_increase_pct": spread(p95inc),
             "r_loss_vs_static_pct": spread(loss_st), "r_p95_vs_static_pct": spread(p95_st)}
        table[(pol, cfg)] = t
        for k, s in t.items():
            if s is not None:
                summary_rows.append([pol, cfg, k, round(s[0], 2), round(s[1], 2), round(s[2], 2), s[3]])
with open(f"{out}/harvest-fig18-summary.csv", "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["policy", "config", "metric", "mean", "min", "max", "runs"])
    w.writerows(summary_rows)

# ---- What each policy lent (events) --------------------------------------------
lend_rows = []
lending = {}
for pol in policies:
    evs = [json.loads(x) for x in open(f"{work}/events-{pol}.jsonl")] if os.path.exists(
        f"{work}/events-{pol}.jsonl") else []
    t_end = max((e["at_ns"] for e in evs), default=0)
    created = {}
    for e in evs:
        if e["kind"] == "created" and e.get("home") == "R":
            m = re.search(r"(\d+) blocks on channels (\S+)", e["detail"])
            chans = m.group(2)
            n = sum(len(range(int(a), int(b) + 1)) if "-" in c else 1
                    for c in chans.split(",") for a, _, b in [c.partition("-")])
            created[e["gssd"]] = {"policy": pol, "gssd": e["gssd"], "channels": n,
                                  "capacity_mib": int(m.group(1)) * BLOCK_MIB,
                                  "start": e["at_ns"], "end": None, "how": "still lent",
                                  "in_use_s": 0.0, "early": False}
    inuse = {}
    for e in evs:
        g = created.get(e.get("gssd"))
        if g is None:
            continue
        if e["kind"] == "harvested":
            inuse[g["gssd"]] = e["at_ns"]
        elif e["kind"] in ("migration-started",) or (
                e["kind"] == "reclaimed" and g["gssd"] in inuse
                and ("needs its blocks" in e["detail"] or "expired while in use" in e["detail"])):
            g["early"] = True
        if e["kind"] in ("released", "migration-started", "reclaimed", "expired") and g["gssd"] in inuse:
            g["in_use_s"] += (e["at_ns"] - inuse.pop(g["gssd"])) / 1e9
        if e["kind"] in ("reclaimed", "expired") and g["end"] is None:
            g["end"] = e["at_ns"]
            g["how"] = e["kind"] + (": " + e["detail"].split(": ", 1)[1] if ": " in e["detail"] else "")
    for g in created.values():
        end = g["end"] if g["end"] is not None else t_end
        g["lifetime_s"] = round((end - g["start"]) / 1e9, 1)
        g["in_use_s"] = round(g["in_use_s"], 1)
        lend_rows.append(g)
    gs = list(created.values())
    lending[pol] = {
        "gssds": len(gs),
        "channels": sorted({g["channels"] for g in gs}),
        "mib": sorted({g["capacity_mib"] for g in gs}),
        "lifetime": spread([g["lifetime_s"] for g in gs]),
        "in_use": sum(g["in_use_s"] for g in gs),
        "harvested": sum(1 for e in evs if e["kind"] == "harvested" and e.get("gssd") in created),
        "early": sum(1 for g in gs if g["early"]),
        "reclaims_home": sum(1 for e in evs if e["kind"] == "reclaimed" and e.get("gssd") in created),
        "expired": sum(1 for e in evs if e["kind"] == "expired" and e.get("gssd") in created),
        "kinds": {k: sum(1 for e in evs if e["kind"] == k) for k in sorted({e["kind"] for e in evs})},
    }
with open(f"{out}/harvest-lending.csv", "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=["policy", "gssd", "channels", "capacity_mib", "lifetime_s",
                                      "in_use_s", "early", "how"], extrasaction="ignore")
    w.writeheader()
    w.writerows(lend_rows)

# ---- Figure 19 ------------------------------------------------------------------
fig19 = {}
if os.path.exists(f"{work}/fig19-t0"):
    t0 = float(open(f"{work}/fig19-t0").read())
    starts = {"r": t0, "hva": t0, "hvb": float(open(f"{work}/fig19-hvb").read())}

    def series(prefix, start):
        per = {}
        for p in glob.glob(f"{work}/f19-{prefix}_bw.*.log"):
            for line in open(p):
                t_ms, kib, *_ = (x.strip() for x in line.split(","))
                t = round((start - t0) + int(t_ms) / 1000.0, 1)
                per[t] = per.get(t, 0.0) + int(kib) / 1024.0
        return dict(sorted(per.items()))

    r, a, b = series("r", starts["r"]), series("hva", starts["hva"]), series("hvb", starts["hvb"])
    evs = [json.loads(x) for x in open(f"{work}/events-fixed.jsonl")]
    ev19 = [e for e in evs if e["wall"] >= t0 and e.get("volume", "") in ("f19", "")
            and e["kind"] in ("harvested", "migration-started", "migrated", "reclaimed")]
    mig = [e["wall"] - t0 for e in ev19 if e["kind"] == "migration-started"]
    rec = [e["wall"] - t0 for e in ev19 if e["kind"] == "reclaimed" and mig and e["wall"] - t0 >= mig[0]]
    grow = float(open(f"{work}/fig19-grow").read()) - t0
    harvest_t = float(open(f"{work}/fig19-harvest").read()) - t0
    hv_total = {}
    for d in (a, b):
        for t, v in d.items():
            k = round(round(t * 2) / 2, 1)  # align the two jobs' 0.5 s samples
            hv_total[k] = hv_total.get(k, 0.0) + v
    with open(f"{out}/harvest-fig19.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["series", "t_s", "mib_s"])
        for name, d in [("R (regular, 4 KiB reads)", r), ("HV on its own vSSD", a),
                        ("HV on the harvest volume", b), ("HV total", hv_total)]:
            for t, v in sorted(d.items()):
                w.writerow([name, t, round(v, 2)])
        for t in mig + rec:
            w.writerow(["reclaim (migration to erase)", round(t, 1), 0])
    # R's slowdown while the gSSD is reclaimed: its samples from the migration's
    # start to the erase's end (at least one sample) against its samples in the
    # harvested steady state before its usage grew.
    if mig:
        lo, hi = mig[0] - 0.5, (rec[0] if rec else mig[0]) + 0.5
        during = [v for t, v in r.items() if lo <= t <= hi]
        before = [v for t, v in r.items() if harvest_t + 3 <= t <= grow]
        growing = [v for t, v in r.items() if grow <= t < lo]
        fig19 = {
            "harvest_s": harvest_t, "grow_s": grow, "migration_s": mig[0],
            "reclaimed_s": rec[0] if rec else None,
            "r_before": statistics.mean(before) if before else None,
            "r_growing": statistics.mean(growing) if growing else None,
            "r_during": statistics.mean(during) if during else None,
            "r_before_sd": statistics.stdev(before) if len(before) > 1 else None,
            "r_during_samples": len(during),
            "hv_static": statistics.mean([v for t, v in hv_total.items() if 2 <= t <= harvest_t]),
            "hv_harvest": statistics.mean([v for t, v in hv_total.items() if harvest_t + 3 <= t <= grow] or [0]),
            "hv_after": statistics.mean([v for t, v in hv_total.items() if t >= hi + 1] or [0]),
            "events": [(round(e["wall"] - t0, 1), e["kind"], e["detail"]) for e in ev19],
        }
        if fig19["r_before"] and fig19["r_during"] is not None:
            fig19["slowdown_pct"] = 100 * (1 - fig19["r_during"] / fig19["r_before"])

# ---- Reclaim time of a full unsold gSSD -------------------------------------------
erase = [int(m.group(1)) for m in re.finditer(
    r"erased \((\d+) ms modelled\) and returned to the unsold", open(f"{work}/events-reclaim.txt").read())]

# ---- Summary CSV and the text the page is written from ------------------------------
uptimes = open(f"{work}/uptime.txt").read().strip().splitlines()
summary = [("seconds per run", secs), ("HV queue depth per job", HV_QD), ("R max IOPS (alone, qd16)", r_max), ("R base load IOPS (50%)", r_rate)]
for pol in policies:
    for cfg in ["sold", "unsold"]:
        t = table[(pol, cfg)]
        summary.append((f"{pol}: HV gain {cfg} % (mean, min, max)", fmt(t["hv_gain_pct"], signed=True)))
        summary.append((f"{pol}: R throughput loss {cfg} %", fmt(t["r_loss_pct"], signed=True, nd=2)))
        summary.append((f"{pol}: R read P95 increase {cfg} %", fmt(t["r_p95_increase_pct"], signed=True)))
        summary.append((f"{pol}: R throughput loss {cfg} vs static %", fmt(t["r_loss_vs_static_pct"], signed=True, nd=2)))
        summary.append((f"{pol}: R read P95 change {cfg} vs static %", fmt(t["r_p95_vs_static_pct"], signed=True)))
summary.append(("reclaim erase of a full 4-channel gSSD ms (modelled)", max(erase) if erase else "n/a"))
if fig19.get("slowdown_pct") is not None:
    summary.append(("Figure 19: R slowdown while its gSSD is reclaimed %", round(fig19["slowdown_pct"], 2)))
summary.append(("script run time s", elapsed))
with open(f"{out}/harvest-summary.csv", "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["metric", "value"])
    w.writerows(summary)
for k, v in summary:
    print(f"{k:55} {v}")

print("\nFigure 18 (mean, min to max over repetitions):")
print("| policy | config | HV MiB/s | HV gain % | R IOPS | R loss % | R read P95 us | R P95 change % |")
for pol in policies:
    for cfg in ["alone", "static", "sold", "unsold"]:
        t = table[(pol, cfg)]
        print(f"| {pol} | {cfg} | {fmt(t['hv_mib_s'])} | {fmt(t['hv_gain_pct'], signed=True)} | "
              f"{fmt(t['r_iops'], nd=0)} | {fmt(t['r_loss_pct'], signed=True, nd=2)} | "
              f"{fmt(t['r_p95_us'], nd=0)} | {fmt(t['r_p95_increase_pct'], signed=True)} |")
print("\nLending (R's gSSDs):")
for pol, l in lending.items():
    print(f"  {pol}: {l['gssds']} gSSDs lent, channels {l['channels']}, MiB {l['mib']}, "
          f"lifetime s {fmt(l['lifetime'])}, harvested {l['harvested']}x, in use {l['in_use']:.1f} s, "
          f"early reclaims {l['early']}, back home {l['reclaims_home']} reclaimed + {l['expired']} expired; "
          f"events {l['kinds']}")
if fig19:
    print("\nFigure 19:", json.dumps({k: (round(v, 2) if isinstance(v, float) else v)
                                     for k, v in fig19.items()}, indent=1))
print("\nload:", *uptimes, sep="\n  ")
print("loadavg per run:", ", ".join(r["load1"] for r in rows))

# ---- Figure 18's bars: HV bandwidth per policy and configuration, min-max whiskers ----
cfgs = ["static", "sold", "unsold"]
colours = {"static": "#888", "sold": "#36c", "unsold": "#3a3"}
vals = [table[(p, c)]["hv_mib_s"] for p in policies for c in cfgs]
top = max(s[2] for s in vals if s) * 1.2
W, H, pad = 560, 320, 56
svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
       f'<text x="{W/2}" y="18" text-anchor="middle">Harvest tenant bandwidth (emulation; 2 fio jobs, 64 KiB 70/30, qd{HV_QD} each)</text>',
       f'<line x1="{pad}" y1="{H-pad}" x2="{W-10}" y2="{H-pad}" stroke="black"/>',
       f'<line x1="{pad}" y1="30" x2="{pad}" y2="{H-pad}" stroke="black"/>',
       f'<text x="14" y="{H/2}" transform="rotate(-90 14 {H/2})" text-anchor="middle">MiB/s (mean, min-max)</text>']
y_of = lambda v: H - pad - (H - pad - 30) * v / top
for i in range(5):
    v = top * i / 4
    svg.append(f'<text x="{pad-4}" y="{y_of(v)+4}" text-anchor="end">{v:.0f}</text>')
    svg.append(f'<line x1="{pad}" y1="{y_of(v)}" x2="{W-10}" y2="{y_of(v)}" stroke="#ddd"/>')
group = (W - pad - 10) / len(policies)
for gi, pol in enumerate(policies):
    slot = group / (len(cfgs) + 1)
    for ci, cfg in enumerate(cfgs):
        s = table[(pol, cfg)]["hv_mib_s"]
        x = pad + gi * group + slot * (ci + 0.5)
        if s is None:
            svg.append(f'<text x="{x+slot*0.4}" y="{H-pad-4}" text-anchor="middle">n/a</text>')
            continue
        m, lo, hi, _ = s
        svg.append(f'<rect x="{x}" y="{y_of(m)}" width="{slot*0.8}" height="{H-pad-y_of(m)}" fill="{colours[cfg]}"/>')
        cx = x + slot * 0.4
        svg.append(f'<line x1="{cx}" y1="{y_of(lo)}" x2="{cx}" y2="{y_of(hi)}" stroke="black"/>')
        svg.append(f'<line x1="{cx-4}" y1="{y_of(lo)}" x2="{cx+4}" y2="{y_of(lo)}" stroke="black"/>')
        svg.append(f'<line x1="{cx-4}" y1="{y_of(hi)}" x2="{cx+4}" y2="{y_of(hi)}" stroke="black"/>')
        g = table[(pol, cfg)]["hv_gain_pct"]
        label = f"{m:.0f}" + ("" if cfg == "static" or g is None else f" ({g[0]:+.0f}%)")
        svg.append(f'<text x="{cx}" y="{y_of(hi)-4}" text-anchor="middle" font-size="10">{label}</text>')
        svg.append(f'<text x="{cx}" y="{H-pad+14}" text-anchor="middle" font-size="11">{cfg}</text>')
    svg.append(f'<text x="{pad + gi*group + group/2}" y="{H-pad+32}" text-anchor="middle" font-weight="bold">policy = "{pol}"</text>')
svg.append('</svg>')
open(f"{out}/harvest-fig18.svg", "w").write("\n".join(svg))

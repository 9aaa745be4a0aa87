#!/usr/bin/env bash
# Regulator §6.2 on flexssd (issue 7): a latency-sensitive tenant A and a noisy
# neighbour B share the dies of two channels (A on blocks 0..32, B on 32..64 of
# each plane) of an emulated SSD in emulation mode; fio drives both over NBD.
#
#   1. the unit's SLA curve is measured (`flexssd sla measure-device`, P95 <= 500 µs,
#      at the vSSDs' utilization: each exports 160 MiB of its 256 MiB of flash);
#   2. run "alone": A by itself (the floor: modelled flash plus host overhead);
#      run "off": no curves, the scheduler only counts. A reads at a steady rate,
#      B reads and writes as fast as it can;
#   3. run "on": the unit's curve is stored and A and B get their SLA curves
#      (set live through the API; bursting off, as in the paper), same workloads.
#
# Both tenants' curves together stay within the unit's curve (checked below), so
# the placement is one Regulator would accept. Reported per second: each
# tenant's (write, read) throughput against its curve (Figure 8) and A's read
# P95, end to end as fio sees it (Figure 9).
#
# Writes docs/results/regulator-*.csv and .svg and prints a summary table.
#   scripts/exp-regulator.sh [SECONDS]   (default 30 per run)
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-30}
. scripts/lib.sh
note "building flexssd (release)"
scripts/build-deps.sh; cargo build --release -q -p flexssd
BIN=$PWD/target/release/flexssd
WORK=$(mktemp -d /tmp/flexssd-reg.XXXXXX)
trap 'stop_daemon; kill $(jobs -p) 2>/dev/null || true; rm -rf "$WORK"' EXIT
R=docs/results
mkdir -p "$R"

# The experiment's SLA numbers (4 KiB operations per second).
BOUND_US=500
A_CURVE="0:40000,300:0"     # A: up to 40k reads/s, or 300 writes/s, linear between
B_CURVE="0:40000,300:0"      # B when limited: the same
A_READ_IOPS=10000           # A: a quarter of its curve in reads...
A_WRITE_IOPS=30             # ...and 10% in writes
B_MIX=90                    # B: 90% reads, unthrottled, queue depth 16

steps 7
step "start the daemon"
start_daemon "$WORK/d" '
mode = "emulation"
[[devices]]
name = "ssd0"
backend = "memory"
prefault = true
[devices.geometry]
channels = 2
[[vssds]]
name = "A"
channel_ids = [0, 1]
blocks = "0..32"
capacity = "160M"
[[vssds]]
name = "B"
channel_ids = [0, 1]
blocks = "32..64"
capacity = "160M"'

step "measure the unit's SLA curve"
echo "== measuring the unit's curve (2 channels, P95 <= ${BOUND_US} µs; scratch copy of the model)"
cli sla measure-device --device ssd0 --channels 2 --bound "${BOUND_US}us" --utilization 0.625 \
  --out "$WORK/unit.json" --csv "$R/regulator-unit-curve.csv" --plot "$R/regulator-unit-curve.svg"

step "preconditioning A and B"
echo "== preconditioning: fill A and B, then overwrite half of B at random (GC in steady state)"
for v in A B; do
  fio --name=fill --ioengine=nbd --uri="$(uri $v)" --rw=write --bs=1M --iodepth=4 --size=160M >/dev/null
done
fio --name=age --ioengine=nbd --uri="$(uri B)" --rw=randwrite --bs=4k --iodepth=16 --size=160M \
  --io_size=80M --randrepeat=0 >/dev/null

run() {  # run NAME [alone]: the workloads for $SECS seconds, per-I/O latency logs
  local name=$1 alone=${2:-}
  for v in A B; do curl -fs -X POST "$API/v1/vssds/$v/latency/reset" >/dev/null; done
  curl -fs "$API/v1/vssds/A/sla" > "$WORK/$name-A-sla-before.json"
  fio --output-format=json --output="$WORK/$name-A.json" \
    --ioengine=nbd --uri="$(uri A)" --size=160M --time_based --runtime="$SECS" --log_avg_msec=0 \
    --name=Ar --rw=randread --bs=4k --iodepth=16 --rate_iops="$A_READ_IOPS" --rate_process=poisson \
      --write_lat_log="$WORK/$name-Ar" \
    --name=Aw --rw=randwrite --bs=4k --iodepth=1 --rate_iops="$A_WRITE_IOPS" --rate_process=poisson \
      --write_lat_log="$WORK/$name-Aw" >/dev/null &
  local a=$!
  if [ -n "$alone" ]; then
    wait $a
    curl -fs "$API/v1/vssds/A/stats" > "$WORK/$name-A-stats.json"
    curl -fs "$API/v1/vssds/A/sla" > "$WORK/$name-A-sla.json"
    return
  fi
  fio --output-format=json --output="$WORK/$name-B.json" \
    --ioengine=nbd --uri="$(uri B)" --size=160M --time_based --runtime="$SECS" --log_avg_msec=0 \
    --name=B --rw=randrw --rwmixread="$B_MIX" --bs=4k --iodepth=16 \
      --write_lat_log="$WORK/$name-B" >/dev/null &
  local b=$!
  wait $a $b
  # The daemon's view: A's modelled flash latency and A's scheduler counters.
  curl -fs "$API/v1/vssds/A/stats" > "$WORK/$name-A-stats.json"
  curl -fs "$API/v1/vssds/A/sla" > "$WORK/$name-A-sla.json"
}

step "run alone: A by itself ($SECS s)"
echo "== run alone: A by itself"
run alone alone
step "run off: A and B, no SLA curves ($SECS s)"
echo "== run off: no SLA curves"
run off

step "run on: A and B limited to their curves ($SECS s)"
echo "== run on: unit curve stored, A and B limited to their curves"
curl -fs -X PUT -H 'content-type: application/json' --data @"$WORK/unit.json" \
  "$API/v1/devices/ssd0/curves/2" >/dev/null
cli sla set A --sla-curve "$A_CURVE" >/dev/null
cli sla set B --sla-curve "$B_CURVE" >/dev/null
cli sla show B
run on

step "summary and plots"
python3 - "$WORK" "$R" "$SECS" "$BOUND_US" "$A_CURVE" "$B_CURVE" <<'PY'
import csv, json, math, sys, glob, os
work, out, secs, bound, a_curve, b_curve = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), sys.argv[5], sys.argv[6]

def curve(s):
    return [tuple(map(float, p.split(":"))) for p in s.split(",")]

def gauge(c, w, r):
    """Smallest l with (w, r)/l under curve c (piecewise linear): bisection."""
    if w == 0 and r == 0:
        return 0.0
    def inside(x, y):
        if x > c[-1][0] + 1e-9:
            return False
        for (x0, y0), (x1, y1) in zip(c, c[1:]):
            if x0 <= x <= x1:
                cy = y0 + (y1 - y0) * (x - x0) / (x1 - x0)
                return y <= cy + 1e-9
        return y <= c[0][1] + 1e-9
    lo, hi = 0.0, 1.0
    while not inside(w / hi, r / hi):
        hi *= 2
    for _ in range(60):
        mid = (lo + hi) / 2
        if inside(w / mid, r / mid):
            hi = mid
        else:
            lo = mid
    return hi

def load(prefix):
    """(second, is_write, latency_us) from fio's per-I/O clat logs."""
    rows = []
    for f in glob.glob(prefix + "_clat.*.log"):
        for line in open(f):
            t, lat, d = line.split(",")[:3]
            rows.append((int(t) // 1000, int(d) == 1, int(lat) / 1000.0))
    return rows

def p(vals, q):
    if not vals:
        return float("nan")
    v = sorted(vals)
    return v[max(0, math.ceil(q * len(v)) - 1)]

curves = {"A": curve(a_curve), "B": curve(b_curve)}
ts = open(os.path.join(out, "regulator-timeseries.csv"), "w", newline="")
tw = csv.writer(ts)
tw.writerow(["run", "second", "tenant", "read_iops", "write_iops", "curve_load", "a_read_p95_us"])
pts = open(os.path.join(out, "regulator-throughput.csv"), "w", newline="")
pw = csv.writer(pts)
pw.writerow(["series", "write_iops", "read_iops"])
for t in "AB":
    for w, r in curves[t]:
        pw.writerow([f"{t} curve", w, r])
lat = open(os.path.join(out, "regulator-a-p95.csv"), "w", newline="")
lw = csv.writer(lat)
lw.writerow(["series", "second", "p95_us"])
summary = []
for run in ["alone", "off", "on"]:
    a = load(f"{work}/{run}-Ar") + load(f"{work}/{run}-Aw")
    b = load(f"{work}/{run}-B")
    a_reads = [x for x in a if not x[1]]
    # Skip the first second (ramp) and the last (partial).
    seconds = range(1, secs - 1)
    over = {"A": 0, "B": 0}
    viol = 0
    for s in seconds:
        ar = [x[2] for x in a_reads if x[0] == s]
        p95 = p(ar, 0.95)
        if p95 > bound:
            viol += 1
        lw.writerow([f"A {run}", s, f"{p95:.1f}"])
        for name, rows in (("A", a), ("B", b)):
            r = sum(1 for x in rows if x[0] == s and not x[1])
            w = sum(1 for x in rows if x[0] == s and x[1])
            g = gauge(curves[name], w, r)
            over[name] += g > 1.05
            tw.writerow([run, s, name, r, w, f"{g:.3f}", f"{p95:.1f}" if name == "A" else ""])
            pw.writerow([f"{name} {run}", w, r])
    n = len(seconds)
    b_r = sum(1 for x in b if not x[1]) / secs
    b_w = sum(1 for x in b if x[1]) / secs
    st = json.load(open(f"{work}/{run}-A-stats.json"))["io"]["read_latency"]
    s0 = json.load(open(f"{work}/{run}-A-sla-before.json"))["stats"]
    s1 = json.load(open(f"{work}/{run}-A-sla.json"))["stats"]
    summary.append({
        "run": run,
        "A modelled read p95 us": round(st["p95_ns"] / 1e3, 1),
        "A pieces delayed by the scheduler": s1["delayed"] - s0["delayed"],
        "A read p95 us": round(p([x[2] for x in a_reads], 0.95), 1),
        "A read p99 us": round(p([x[2] for x in a_reads], 0.99), 1),
        "A read IOPS": round(len(a_reads) / secs),
        "seconds A p95 over bound": f"{viol}/{n}",
        "B read IOPS": round(b_r),
        "B write IOPS": round(b_w),
        "seconds A over its curve": f"{over['A']}/{n}",
        "seconds B over its curve": f"{over['B']}/{n}",
    })
with open(os.path.join(out, "regulator-summary.csv"), "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=list(summary[0].keys()))
    w.writeheader()
    w.writerows(summary)
keys = list(summary[0].keys())
print("| " + " | ".join(keys) + " |")
print("|" + "---|" * len(keys))
for s in summary:
    print("| " + " | ".join(str(s[k]) for k in keys) + " |")
PY

"$BIN" plot lines --csv "$R/regulator-throughput.csv" --series series --x write_iops --y read_iops \
  --scatter "A off,B off,A on,B on" --out "$R/regulator-throughput.svg" \
  --title "Per-second throughput against the SLA curves (Regulator Fig. 8)" \
  --xlabel "write IOPS (4 KiB)" --ylabel "read IOPS (4 KiB)"
"$BIN" plot lines --csv "$R/regulator-a-p95.csv" --series series --x second --y p95_us --logy \
  --hline "$BOUND_US" --out "$R/regulator-a-p95.svg" \
  --title "Tenant A read P95 per second, bound ${BOUND_US} µs (Regulator Fig. 9)" \
  --xlabel "time (s)" --ylabel "read P95 (µs, end to end)"
echo "wrote $R/regulator-*.csv and .svg"
steps_done

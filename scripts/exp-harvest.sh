#!/usr/bin/env bash
# BlockFlex Figure 18 on flexssd (issue 3), emulation mode, fio over NBD.
#
# One emulated SSD of 16 channels (2 dies each, 64 blocks of 256 KiB per die).
# A harvest tenant HV owns 8 channels (0-7); a regular tenant R owns 4 (8-11)
# and keeps them busy at half of its measured maximum (4 KiB random reads over
# 24 MiB of data, poisson arrivals); channels 12-15 are unsold. HV runs a
# bandwidth-bound workload (64 KiB random reads and writes, 70/30, queue depth
# 32 per export, over 16 MiB of each export) in three configurations, each for SECS seconds:
#
#   static  HV's own 8 channels only;
#   sold    plus a harvest volume on a 4-channel gSSD lent by R while R runs at
#           50% (the harvester's fixed policy lends half of R's spare blocks);
#   unsold  plus a harvest volume on a 4-channel gSSD of unsold channels
#           (a second daemon with no R, so the unsold channels are 8-15).
#
# Reported: HV's bandwidth gain over static (paper: 16-51% sold, 22-60% unsold)
# and R's throughput and read P95 while harvested against R alone at 50%
# (paper: 5.1% loss on average; goal under 5%). Then the reclaim time of the
# unsold gSSD holding a full harvest volume: a regular vSSD buys exactly its
# channels, the volume migrates to the other unsold gSSD, and the harvester's
# event says how long erasing the old one took on the model (paper: 68.4 s per
# 64 GB channel).
#
# Writes docs/results/harvest-fig18.csv and .svg and docs/results/harvest-summary.csv.
#   scripts/exp-harvest.sh [SECONDS]   (default 20 per run)
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-20}
. scripts/lib.sh
note "building flexssd (release)"
cargo build --release -q -p flexssd
BIN=$PWD/target/release/flexssd
WORK=$(mktemp -d /tmp/flexssd-harvest.XXXXXX)
trap 'stop_daemon; kill $(jobs -p) 2>/dev/null || true; rm -rf "$WORK"' EXIT
R=docs/results
mkdir -p "$R"

DEVICE='
mode = "emulation"
[[devices]]
name = "ssd0"
backend = "memory"
prefault = true
[devices.geometry]
channels = 16
dies_per_channel = 2
planes_per_die = 1
blocks_per_plane = 64
pages_per_block = 64
page_size = 4096

[[vssds]]
name = "HV"
channel_ids = [0, 1, 2, 3, 4, 5, 6, 7]
role = "harvest"
'
HARVEST_COMMON='
enabled = true
policy = "fixed"
priority_slack_us = 1
tick_ms = 200
granule_s = 60
reclaim_horizon_s = 60
lend_for_s = 3600
'
cli() { "$BIN" --api "$API" "$@"; }
uri() { echo "nbd+unix:///$1?socket=$SOCK"; }

hv_job() {  # hv_job OUT EXPORT... : HV's workload on the given exports
  local out=$1; shift
  local args=()
  for e in "$@"; do
    args+=(--name="hv-$e" --uri="$(uri "$e")")
  done
  fio --output-format=json --output="$out" --ioengine=nbd --rw=randrw --rwmixread=70 \
    --bs=64k --iodepth=32 --size=16M --time_based --runtime="$SECS" --randrepeat=0 \
    "${args[@]}" >/dev/null
}

r_job() {  # r_job OUT IOPS : R's reads at a fixed rate
  fio --output-format=json --output="$1" --ioengine=nbd --uri="$(uri R)" --name=r \
    --rw=randread --bs=4k --iodepth=16 --size=24M --time_based --runtime="$SECS" \
    --rate_iops="$2" --rate_process=poisson --randrepeat=0 >/dev/null
}

steps 9
step "daemon 1: HV, regular tenant R, unsold channels not harvested"
echo "== daemon 1: HV on channels 0-7, regular R on 8-11, unsold channels not harvested"
start_daemon "$WORK/d1" "$DEVICE
[[vssds]]
name = \"R\"
channel_ids = [8, 9, 10, 11]

[harvest]
$HARVEST_COMMON
unsold = false
"
step "preconditioning HV and R"
echo "-- preconditioning: HV's 16 MiB and R's 24 MiB of data written once"
fio --name=fill --ioengine=nbd --uri="$(uri HV)" --rw=write --bs=1M --iodepth=4 --size=16M >/dev/null
fio --name=fill --ioengine=nbd --uri="$(uri R)" --rw=write --bs=1M --iodepth=4 --size=24M >/dev/null
step "R's maximum ($SECS s)"
echo "-- R's maximum (4 KiB random reads, queue depth 16, $SECS s)"
fio --output-format=json --output="$WORK/r-max.json" --ioengine=nbd --uri="$(uri R)" --name=r \
  --rw=randread --bs=4k --iodepth=16 --size=24M --time_based --runtime="$SECS" >/dev/null
R_MAX=$(python3 -c "import json;print(int(json.load(open('$WORK/r-max.json'))['jobs'][0]['read']['iops']))")
R_RATE=$((R_MAX / 2))
echo "   R max $R_MAX IOPS; runs at $R_RATE"

step "R alone at 50% ($SECS s)"
echo "-- R alone at 50%"
r_job "$WORK/r-alone.json" "$R_RATE"
step "static: HV on its own channels, R at 50% ($SECS s)"
echo "-- static: HV on its 8 channels, R at 50% on its own"
r_job "$WORK/r-static.json" "$R_RATE" & RP=$!
hv_job "$WORK/hv-static.json" HV
wait $RP

step "sold: HV plus a gSSD lent by R ($SECS s)"
echo "-- sold: the harvester lends R's spare blocks; HV asks for 4 channels"
for _ in $(seq 1 50); do
  [ "$(curl -fs "$API/v1/gssds" | python3 -c 'import json,sys;print(len(json.load(sys.stdin)))')" -ge 1 ] && break
  sleep 0.2
done
cli gssd list
cli harvest request sold --tenant HV --capacity 16M --bandwidth 4 --duration 1800
curl -fs "$API/v1/gssds" > "$WORK/gssds-sold.json"
python3 - "$WORK/gssds-sold.json" <<'PY'
import json, sys
g = [x for x in json.load(open(sys.argv[1])) if x.get("volume") == "sold"]
assert len(g) == 1 and g[0].get("home") == "R" and g[0]["bandwidth"] == 4, g
PY
fio --name=fill --ioengine=nbd --uri="$(uri sold)" --rw=write --bs=1M --iodepth=4 --size=16M >/dev/null
r_job "$WORK/r-sold.json" "$R_RATE" & RP=$!
hv_job "$WORK/hv-sold.json" HV sold
wait $RP
cli events > "$WORK/events-1.txt"
cli harvest release sold
stop_daemon

step "daemon 2, unsold: HV plus a gSSD of unsold channels ($SECS s)"
echo "== daemon 2: HV on channels 0-7, channels 8-15 unsold and harvested"
start_daemon "$WORK/d2" "$DEVICE
[harvest]
$HARVEST_COMMON
unsold = true
unsold_group = 4
"
for _ in $(seq 1 50); do
  [ "$(curl -fs "$API/v1/gssds" | python3 -c 'import json,sys;print(len(json.load(sys.stdin)))')" -ge 2 ] && break
  sleep 0.2
done
cli gssd list
fio --name=fill --ioengine=nbd --uri="$(uri HV)" --rw=write --bs=1M --iodepth=4 --size=16M >/dev/null
cli harvest request unsold --tenant HV --capacity 16M --bandwidth 4 --duration 1800
fio --name=fill --ioengine=nbd --uri="$(uri unsold)" --rw=write --bs=1M --iodepth=4 --size=16M >/dev/null
hv_job "$WORK/hv-unsold.json" HV unsold
step "reclaim: a full unsold gSSD goes to a buyer"
echo "-- reclaim: a harvest volume fills a whole unsold gSSD; a regular tenant buys its channels"
cli harvest release unsold
cli harvest request full --tenant HV --capacity 100M --bandwidth 4 --duration 1800
FULL_GSSD=$(curl -fs "$API/v1/harvest/volumes/full" | python3 -c 'import json,sys;print(json.load(sys.stdin)["segments"][0]["gssd"])')
FULL_CH=$(curl -fs "$API/v1/gssds" | python3 -c "import json,sys;print(','.join(str(c) for c in [g for g in json.load(sys.stdin) if g['id']==$FULL_GSSD][0]['channels']))")
fio --name=full --ioengine=nbd --uri="$(uri full)" --rw=write --bs=1M --iodepth=4 --size=100M >/dev/null
# The buyer wants exactly those channels: the volume migrates to the other
# unsold gSSD, then the full gSSD is erased and its channels go to the buyer.
cli vssd create buyer --channel-ids "$FULL_CH"
cli events > "$WORK/events-2.txt"
cat "$WORK/events-2.txt"
stop_daemon

step "results"
python3 - "$WORK" "$R" "$SECS" "$R_MAX" "$R_RATE" <<'PY'
import csv, json, re, sys
work, out, secs, r_max, r_rate = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])

def hv_bw(name):
    j = json.load(open(f"{work}/hv-{name}.json"))
    return sum(job["read"]["bw_bytes"] + job["write"]["bw_bytes"] for job in j["jobs"]) / 2**20

def r_stats(name):
    j = json.load(open(f"{work}/r-{name}.json"))["jobs"][0]["read"]
    return j["iops"], j["clat_ns"]["percentile"]["95.000000"] / 1000.0

rows = []
static = hv_bw("static")
for case in ["static", "sold", "unsold"]:
    bw = hv_bw(case)
    rows.append({"case": case, "hv_mib_s": round(bw, 1), "gain_pct": round(100 * (bw / static - 1), 1)})
alone_iops, alone_p95 = r_stats("alone")
static_iops, static_p95 = r_stats("static")
sold_iops, sold_p95 = r_stats("sold")
with open(f"{out}/harvest-fig18.csv", "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=["case", "hv_mib_s", "gain_pct"])
    w.writeheader()
    w.writerows(rows)

# Reclaim: the erase times the harvester logged when the unsold gSSDs went home.
erase = [int(m.group(1)) for m in re.finditer(r"erased \((\d+) ms modelled\) and returned to the unsold",
                                              open(f"{work}/events-2.txt").read())]
summary = [
    ("R max IOPS (alone, qd16)", r_max),
    ("R target IOPS (50%)", r_rate),
    ("R IOPS alone at 50%", round(alone_iops)),
    ("R IOPS while HV runs static", round(static_iops)),
    ("R IOPS while harvested (sold)", round(sold_iops)),
    ("R throughput loss while harvested %", round(100 * (1 - sold_iops / alone_iops), 2)),
    ("R read P95 alone us", round(alone_p95)),
    ("R read P95 while harvested us", round(sold_p95)),
    ("R read P95 increase %", round(100 * (sold_p95 / alone_p95 - 1), 1)),
    ("HV static MiB/s", round(static, 1)),
    ("HV gain sold %", rows[1]["gain_pct"]),
    ("HV gain unsold %", rows[2]["gain_pct"]),
    ("reclaim erase of the full 4-channel gSSD ms (modelled)", max(erase) if erase else "n/a"),
]
with open(f"{out}/harvest-summary.csv", "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["metric", "value"])
    w.writerows(summary)
for k, v in summary:
    print(f"{k:55} {v}")

# Figure 18's shape: HV's bandwidth per configuration, as bars (plain SVG).
W, H, pad, bw_max = 480, 300, 50, max(r["hv_mib_s"] for r in rows) * 1.15
svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
       f'<text x="{W/2}" y="18" text-anchor="middle">Harvest tenant bandwidth (emulation, fio 64 KiB 70/30)</text>',
       f'<line x1="{pad}" y1="{H-pad}" x2="{W-10}" y2="{H-pad}" stroke="black"/>',
       f'<line x1="{pad}" y1="30" x2="{pad}" y2="{H-pad}" stroke="black"/>',
       f'<text x="14" y="{H/2}" transform="rotate(-90 14 {H/2})" text-anchor="middle">MiB/s</text>']
for i in range(5):
    v = bw_max * i / 4
    y = H - pad - (H - pad - 30) * i / 4
    svg.append(f'<text x="{pad-4}" y="{y+4}" text-anchor="end">{v:.0f}</text>')
    svg.append(f'<line x1="{pad}" y1="{y}" x2="{W-10}" y2="{y}" stroke="#ddd"/>')
slot = (W - pad - 10) / len(rows)
for i, r in enumerate(rows):
    h = (H - pad - 30) * r["hv_mib_s"] / bw_max
    x = pad + slot * i + slot * 0.2
    svg.append(f'<rect x="{x}" y="{H-pad-h}" width="{slot*0.6}" height="{h}" fill="{["#888","#36c","#3a3"][i]}"/>')
    label = r["case"] + ("" if i == 0 else f' (+{r["gain_pct"]}%)')
    svg.append(f'<text x="{x+slot*0.3}" y="{H-pad+16}" text-anchor="middle">{label}</text>')
    svg.append(f'<text x="{x+slot*0.3}" y="{H-pad-h-4}" text-anchor="middle">{r["hv_mib_s"]}</text>')
svg.append('</svg>')
open(f"{out}/harvest-fig18.svg", "w").write("\n".join(svg))
PY
echo "wrote $R/harvest-fig18.csv, $R/harvest-fig18.svg, $R/harvest-summary.csv"
steps_done

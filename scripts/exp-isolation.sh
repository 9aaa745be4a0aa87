#!/usr/bin/env bash
# Isolation experiment in emulation mode (issue: foundation). Two parts, fio over NBD:
#
#  A. bandwidth follows channels: 128 KiB sequential writes to a vSSD on 8 channels
#     and to one on 2 channels (expect about 4x, within 15%);
#  B. latency isolation: a victim vSSD (channels 10-13, blocks 0..32 of each
#     plane) runs 4 KiB random reads at queue depth 1 alone, then while a
#     neighbour on other channels (14-15) writes flat out, then while a neighbour
#     on the *same* channels (blocks 32..64) writes flat out. Expect p99 within
#     10% of alone with dedicated channels, and with shared ones a modelled p99
#     longer by about a suspension (the programs and erases on the victim's dies
#     are suspended for its reads: docs/results/isolation.md). Latency is reported
#     twice: end to end by fio (includes host CPU noise: fio, the daemon and the
#     neighbour share 2 cores) and as the modelled flash latency the daemon records.
#
# Writes docs/results/isolation.csv (summary), isolation-latency.csv (the victim's
# read-latency percentiles per scenario) and isolation-latency.svg, and prints a
# Markdown table.
#   scripts/exp-isolation.sh [READ_SECONDS]   (default 15)
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-15}
. scripts/lib.sh
note "building flexssd (release)"
scripts/build-deps.sh; cargo build --release -q -p flexssd
BIN=$PWD/target/release/flexssd
WORK=$(mktemp -d /tmp/flexssd-iso.XXXXXX)
trap 'stop_daemon; kill $(jobs -p) 2>/dev/null; rm -rf "$WORK"' EXIT
OUT=docs/results/isolation.csv
LAT=docs/results/isolation-latency.csv
PCTS=1:5:10:25:50:75:90:95:99:99.5:99.9:99.99
mkdir -p docs/results

steps 8
step "start the daemon"
start_daemon "$WORK/d" '
mode = "emulation"
[[devices]]
name = "ssd0"
backend = "memory"
prefault = true
[[vssds]]
name = "w8"
channel_ids = [0, 1, 2, 3, 4, 5, 6, 7]
[[vssds]]
name = "w2"
channel_ids = [8, 9]
[[vssds]]
name = "victim"
channel_ids = [10, 11, 12, 13]
blocks = "0..32"
[[vssds]]
name = "shared"
channel_ids = [10, 11, 12, 13]
blocks = "32..64"
[[vssds]]
name = "other"
channel_ids = [14, 15]'
val() { python3 -c "import json,sys; j=json.load(open('$1')); x=j['jobs'][0]['$2']; print($3)"; }

echo "scenario,metric,value" > "$OUT"
echo "scenario,percentile,latency_us" > "$LAT"
# --- A: bandwidth vs channels (fresh vSSDs: no GC in the measured window)
step "A: sequential writes, 8 channels (1 GiB)"
fio_json "$WORK/w8.json" --name=w8 --ioengine=nbd --uri="$(uri w8)" --rw=write --bs=128k --iodepth=32 --size=1G
step "A: sequential writes, 2 channels (256 MiB)"
fio_json "$WORK/w2.json" --name=w2 --ioengine=nbd --uri="$(uri w2)" --rw=write --bs=128k --iodepth=32 --size=256M
bw8=$(val "$WORK/w8.json" write "x['bw_bytes']/1e6")
bw2=$(val "$WORK/w2.json" write "x['bw_bytes']/1e6")
ratio=$(python3 -c "print(f'{$bw8/$bw2:.2f}')")
echo "seq-write-8ch,MB/s,$bw8" >> "$OUT"
echo "seq-write-2ch,MB/s,$bw2" >> "$OUT"
echo "seq-write,ratio-8ch-over-2ch,$ratio" >> "$OUT"

# --- B: read latency of the victim
step "B: filling the victim (256 MiB)"
fio --name=fill --ioengine=nbd --uri="$(uri victim)" --rw=write --bs=1M --iodepth=4 --size=256M >/dev/null
readlat() {  # readlat NAME -> appends p50/p99/p99.9 of the victim, end to end and modelled
  curl -fs -X POST "$API/v1/vssds/victim/latency/reset" >/dev/null
  fio_json "$WORK/$1.json" --name="$1" --ioengine=nbd --uri="$(uri victim)" --rw=randread --bs=4k --iodepth=1 \
    --size=256M --time_based --runtime="$SECS" --percentile_list=$PCTS
  for p in ${PCTS//:/ }; do
    v=$(val "$WORK/$1.json" read "x['clat_ns']['percentile']['$(printf '%.6f' $p)']/1000")
    echo "$1,$p,$v" >> "$LAT"
    case $p in 50|99|99.9) echo "$1,p$p-us,$v" >> "$OUT" ;; esac
  done
  echo "$1,iops,$(val "$WORK/$1.json" read "x['iops']")" >> "$OUT"
  # The daemon's own record of the modelled flash latency (no host noise).
  curl -fs "$API/v1/vssds/victim/stats" | python3 -c "
import json,sys
l=json.load(sys.stdin)['io']['read_latency']
for k,n in (('p50_ns','p50'),('p99_ns','p99'),('p999_ns','p99.9')):
    print('$1,model-'+n+'-us,'+str(l[k]/1000))" >> "$OUT"
}
noisy() {  # noisy EXPORT: flat-out 128 KiB writes for longer than the read run
  fio --name=noise --ioengine=nbd --uri="$(uri "$1")" --rw=randwrite --bs=128k --iodepth=32 \
    --size=200M --time_based --runtime=$((SECS + 3)) --output="$WORK/noise-$1.txt" >/dev/null &
  NOISE=$!
  sleep 2
}
step "B: victim alone ($SECS s)"
readlat alone
step "B: victim beside a writer on other channels ($SECS s)"
noisy other;  readlat neighbour-other-channels;  wait $NOISE
step "B: victim beside a writer on the same channels ($SECS s)"
noisy shared; readlat neighbour-shared-channels; wait $NOISE

step "table and plot"
python3 - "$OUT" <<'PY'
import csv,sys
rows=list(csv.reader(open(sys.argv[1])))[1:]
d={(s,m):float(v) for s,m,v in rows}
print(f"| bandwidth | MB/s |\n|---|---:|")
print(f"| 8 channels | {d['seq-write-8ch','MB/s']:.0f} |\n| 2 channels | {d['seq-write-2ch','MB/s']:.0f} |\n| ratio | {d['seq-write','ratio-8ch-over-2ch']:.2f} (goal 4 ± 15%) |\n")
print("| victim 4 KiB random read, qd1 | fio p50 µs | fio p99 µs | fio p99.9 µs | fio p99 vs alone | model p50 µs | model p99 µs | model p99.9 µs | model p99 vs alone |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|")
base=d['alone','p99-us']; mbase=d['alone','model-p99-us']
for s in ("alone","neighbour-other-channels","neighbour-shared-channels"):
    print(f"| {s} | {d[s,'p50-us']:.0f} | {d[s,'p99-us']:.0f} | {d[s,'p99.9-us']:.0f} | {100*(d[s,'p99-us']/base-1):+.1f}% "
          f"| {d[s,'model-p50-us']:.0f} | {d[s,'model-p99-us']:.0f} | {d[s,'model-p99.9-us']:.0f} | {100*(d[s,'model-p99-us']/mbase-1):+.1f}% |")
PY
"$BIN" plot lines --csv "$LAT" --series scenario --x percentile --y latency_us --logy \
  --title "Victim 4 KiB random read latency (emulation mode)" --xlabel "percentile" --ylabel "latency (µs, log)" \
  --out docs/results/isolation-latency.svg
echo "CSV: $OUT $LAT; plot: docs/results/isolation-latency.svg"
steps_done

#!/usr/bin/env bash
# Cost of Regulator's scheduler on the data path (issue 7): throughput of a vSSD
# whose requests go through the scheduler with curves that never bind ("on":
# tenant and unit curves set, every piece booked, nobody waits), against a vSSD
# on a device with the scheduler disabled ("off"), in one run, fast mode, fio
# over NBD. Runs alternate on/off ROUNDS times per workload (which goes first
# alternates too); medians and the
# ratio are printed as a Markdown table (goal: under 5% loss).
#   scripts/bench-sched.sh [ROUNDS] [SECONDS]   (default 5 rounds of 5 s)
#   BENCH_SCHED_SWAP=1 scripts/bench-sched.sh ...   (the other device order)
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-5}
SECS=${2:-5}
scripts/build-deps.sh; cargo build --release -q -p flexssd
BIN=$PWD/target/release/flexssd
. scripts/lib.sh
WORK=$(mktemp -d /tmp/flexssd-bsched.XXXXXX)
trap 'stop_daemon; rm -rf "$WORK"' EXIT

# The two devices' order in the config (and so in memory) alternates with
# $BENCH_SCHED_SWAP, to separate placement effects from the scheduler's cost.
ON_DEV='
[[devices]]
name = "on"
backend = "memory"
[devices.geometry]
channels = 4'
OFF_DEV='
[[devices]]
name = "off"
backend = "memory"
[devices.geometry]
channels = 4
[devices.scheduler]
enabled = false'
if [ -n "${BENCH_SCHED_SWAP:-}" ]; then DEVS="$OFF_DEV$ON_DEV"; else DEVS="$ON_DEV$OFF_DEV"; fi
start_daemon "$WORK/d" "
mode = \"fast\"
$DEVS"'
[[vssds]]
name = "on"
device = "on"
channels = 4
[vssds.sla]
curve = [[0.0, 1.0e8], [1.0e7, 0.0]]
[[vssds]]
name = "off"
device = "off"
channels = 4'
# A unit curve that never binds either, so both checks run on every piece.
curl -fs -X PUT -H 'content-type: application/json' \
  --data '{"percentile":"p95","bound_us":500,"curve":[[0,200000000],[20000000,0]]}' \
  "$API/v1/devices/on/curves/4" >/dev/null
for v in on off; do
  fio --name=fill --ioengine=nbd --uri="$(uri $v)" --rw=write --bs=1M --iodepth=4 --size=256M >/dev/null
done

iops() {  # iops VSSD RW BS -> IOPS of a SECS-second run
  fio --output-format=json --output="$WORK/fio.json" --name=b --ioengine=nbd --uri="$(uri "$1")" \
    --rw="$2" --bs="$3" --iodepth=32 --size=256M --time_based --runtime="$SECS" --randrepeat=0 \
    >"$WORK/fio.out" 2>&1 || { echo "fio failed:" >&2; cat "$WORK/fio.out" >&2; exit 1; }
  python3 -c 'import json,sys; j=json.load(open(sys.argv[1]))["jobs"][0]; print(j["read"]["iops"]+j["write"]["iops"])' "$WORK/fio.json" ||
    { echo "fio wrote:" >&2; head -c 2000 "$WORK/fio.json" >&2; exit 1; }
}
median() { python3 -c 'import sys,statistics; print(statistics.median(float(x) for x in sys.argv[1:]))' "$@"; }

echo "| workload | scheduler on (IOPS) | off (IOPS) | on/off |"
echo "|---|---:|---:|---:|"
for w in "randread 4k" "randwrite 4k" "read 128k"; do
  set -- $w
  on=() off=()
  for i in $(seq "$ROUNDS"); do
    # Alternate which goes first, so order effects cancel.
    if [ $((i % 2)) -eq 1 ]; then
      on+=("$(iops on "$1" "$2")")
      off+=("$(iops off "$1" "$2")")
    else
      off+=("$(iops off "$1" "$2")")
      on+=("$(iops on "$1" "$2")")
    fi
  done
  mon=$(median "${on[@]}")
  moff=$(median "${off[@]}")
  python3 -c "print(f'| $1 $2 | {$mon:.0f} | {$moff:.0f} | {$mon/$moff:.3f} |')"
done
# The scheduler really was in the path: its counters for "on".
"$BIN" --api "$API" sla show on | grep scheduler

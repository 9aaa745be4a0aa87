#!/usr/bin/env bash
# CPU per request: one fio workload over one connection against flexssd on its
# default configuration (file backend, a fresh data directory) and `nbdkit
# file` on a sparse file of the export's size, each server's utime+stime read
# from /proc/PID/stat over 4 s in the middle of a 6 s run. Prints IOPS, server
# cores, server CPU µs per request and fio's CPU for each run.
#
#   scripts/bench-cpu.sh [REPS]   (default 2)
#
# Environment:
#   FLEXSSD_BIN=PATH   the flexssd binary (default: build target/release)
#   FIO_ARGS="..."     the workload (default: 128 KiB sequential writes, qd 32)
set -euo pipefail
cd "$(dirname "$0")/.."
REPS=${1:-2}
if [ -n "${FLEXSSD_BIN:-}" ]; then BIN=$(realpath "$FLEXSSD_BIN"); else
  scripts/build-deps.sh; cargo build --release -q -p flexssd; BIN=$PWD/target/release/flexssd; fi
. scripts/lib.sh
for t in fio nbdkit curl python3; do command -v $t >/dev/null || { echo "bench-cpu: $t is missing (make test installs it)"; exit 1; }; done
ARGS=${FIO_ARGS:---rw=write --bs=128k --iodepth=32 --size=400M}
WORK=$(mktemp -d /tmp/flexssd-bench-cpu.XXXXXX)
trap 'stop_daemon; [ -n "${KPID:-}" ] && kill $KPID 2>/dev/null; rm -rf "$WORK"' EXIT
start_daemon "$WORK/fx" "$(default_body)"
FX="nbd+unix:///default?socket=$SOCK"
truncate -s "$(curl -fs "$API/v1/vssds/default" | python3 -c 'import json,sys; print(json.load(sys.stdin)["capacity_bytes"])')" "$WORK/k.img"
nbdkit -U "$WORK/k.sock" --pidfile "$WORK/k.pid" file "$WORK/k.img"
for _ in $(seq 50); do [ -f "$WORK/k.pid" ] && break; sleep 0.1; done
KPID=$(cat "$WORK/k.pid")
NK="nbd+unix:///?socket=$WORK/k.sock"
ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
HZ=$(getconf CLK_TCK)
echo "workload: $ARGS"
echo "| server | IOPS | server cores | server CPU µs per request | fio CPU % |"
echo "|---|---:|---:|---:|---:|"
for r in $(seq "$REPS"); do
  for s in flexssd nbdkit; do
    if [ $s = flexssd ]; then uri=$FX pid=$DAEMON_PID; else uri=$NK pid=$KPID; fi
    # shellcheck disable=SC2086
    fio --name=w --ioengine=nbd --uri="$uri" $ARGS --time_based --runtime=6 \
      --output-format=json --output="$WORK/o.json" >/dev/null &
    f=$!; sleep 1; c0=$(ticks "$pid"); sleep 4; c1=$(ticks "$pid"); wait $f
    python3 - "$WORK/o.json" "$s" "$c0" "$c1" "$HZ" <<'PY'
import json, sys
f, s, c0, c1, hz = sys.argv[1:]
j = json.load(open(f))["jobs"][0]
iops = j["read"]["iops"] + j["write"]["iops"]
cores = (int(c1) - int(c0)) / int(hz) / 4
print(f"| {s} | {iops:,.0f} | {cores:.2f} | {cores / iops * 1e6:.0f} | {j['usr_cpu'] + j['sys_cpu']:.0f} |")
PY
  done
done

#!/usr/bin/env bash
# How physical layout affects 128 KiB sequential reads: flexssd (fast mode, full
# FTL, memory backend) against `nbdkit memory`, first on freshly, sequentially
# written data, then after 4 KiB random writes have scattered flexssd's pages.
# Servers alternate; REPS runs of RUNTIME seconds each; prints the IOPS medians.
#
#   scripts/bench-layout.sh [RUNTIME_SECONDS [REPS]]   (default 4 s, 3 repetitions)
#
# Environment: FLEXSSD_BIN=PATH benchmarks this flexssd binary (default: build
# target/release).
set -euo pipefail
cd "$(dirname "$0")/.."
RUNTIME=${1:-4}
REPS=${2:-3}
. scripts/lib.sh
pick_bin
WORK=$(mktemp -d /tmp/flexssd-layout.XXXXXX)
trap 'stop_daemon; [ -n "${KPID:-}" ] && kill $KPID 2>/dev/null; rm -rf "$WORK"' EXIT
start_daemon "$WORK/fx" "$BENCH_VSSD"
FX="nbd+unix:///bench?socket=$SOCK"
nbdkit -U "$WORK/k.sock" --pidfile "$WORK/k.pid" memory 2G
for _ in $(seq 50); do [ -f "$WORK/k.pid" ] && break; sleep 0.1; done
KPID=$(cat "$WORK/k.pid")
NK="nbd+unix:///?socket=$WORK/k.sock"
iops() { python3 -c "import json; j=json.load(open('$1'))['jobs'][0]; print(round(j['read']['iops']))"; }
med() { printf '%s\n' "$@" | sort -n | sed -n "$(( ($# + 1) / 2 ))p"; }
measure() {  # measure LABEL
  local f=() n=()
  for r in $(seq "$REPS"); do
    fio_json "$WORK/f.json" --name=r --ioengine=nbd --uri="$FX" --rw=read --bs=128k --iodepth=32 --size=1G --time_based --runtime="$RUNTIME"
    f+=("$(iops "$WORK/f.json")")
    fio_json "$WORK/n.json" --name=r --ioengine=nbd --uri="$NK" --rw=read --bs=128k --iodepth=32 --size=1G --time_based --runtime="$RUNTIME"
    n+=("$(iops "$WORK/n.json")")
  done
  local fm nm; fm=$(med "${f[@]}"); nm=$(med "${n[@]}")
  printf '| %s | %s | %s | %s |\n' "$1" "$fm" "$nm" "$(python3 -c "print(f'{$fm/$nm:.2f}')")"
}
for u in "$FX" "$NK"; do fio --name=fill --ioengine=nbd --uri="$u" --rw=write --bs=1M --iodepth=8 --size=1G >/dev/null; done
printf '| 128 KiB seq read, qd32 | flexssd IOPS | nbdkit IOPS | ratio |\n|---|---:|---:|---:|\n'
measure "sequentially written"
for u in "$FX" "$NK"; do fio --name=rw --ioengine=nbd --uri="$u" --rw=randwrite --bs=4k --iodepth=32 --size=1G --time_based --runtime=8 >/dev/null; done
measure "after 8 s of 4 KiB random writes"

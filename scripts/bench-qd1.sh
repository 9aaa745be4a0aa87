#!/usr/bin/env bash
# Latency one request at a time, and the large-write row, against nbdkit: what
# a database's commits and index reads see. fio's nbd engine over a unix
# socket, flexssd on its embedded default configuration (file backend, fast
# mode) against `nbdkit file` on a sparse file, alternated, REPS runs each.
# Prints, per row and server, the runs' IOPS and mean completion latency
# (for rows with a flush after each write, the flush's mean latency too).
#
#   scripts/bench-qd1.sh [RUNTIME_SECONDS [REPS]]   (default 4 s, 2 repetitions)
#
# Environment:
#   FLEXSSD_BIN=PATH   benchmark this flexssd binary (default: build target/release)
#   BACKEND=memory     flexssd on a memory device and `nbdkit memory` instead
#                      (the server path without the file)
#   PIN=CPU            run both servers and fio on that one CPU (taskset): no
#                      wake-up crosses cores
#   BENCH_ROWS=REGEX   only the rows whose name matches (grep -E)
#   SPIN_POLLS=N       flexssd's [nbd] spin_polls (default: the built-in 64;
#                      0: a connection's thread parks at once)
set -euo pipefail
cd "$(dirname "$0")/.."
RUNTIME=${1:-4}
REPS=${2:-2}
. scripts/lib.sh
pick_bin
for t in fio nbdkit python3 taskset; do command -v $t >/dev/null || { echo "bench-qd1: $t is missing (make test installs it)"; exit 1; }; done
case ${BACKEND:-file} in
  file|memory) ;;
  *) echo "bench-qd1: BACKEND must be file or memory, not $BACKEND" >&2; exit 1 ;;
esac
PINCMD=()
[ -n "${PIN:-}" ] && PINCMD=(taskset -c "$PIN")

WORK=$(mktemp -d /tmp/flexssd-bench-qd1.XXXXXX)
trap 'stop_daemon; [ -f "$WORK/kf.pid" ] && kill "$(cat "$WORK/kf.pid")" 2>/dev/null; rm -rf "$WORK"' EXIT

# The embedded default, less [api] and [nbd] (start_daemon writes them), on the
# backend asked for.
BODY=$(default_body)
if [ "${BACKEND:-file}" = memory ]; then BODY=${BODY//backend = \"file\"/backend = \"memory\"}; fi
if [ -n "${PIN:-}" ]; then
  printf '#!/bin/sh\nexec taskset -c %s %s "$@"\n' "$PIN" "$BIN" > "$WORK/flexssd"
  chmod +x "$WORK/flexssd"
  BIN=$WORK/flexssd
fi
start_daemon "$WORK/fx" "$BODY" "${SPIN_POLLS:+spin_polls = $SPIN_POLLS}"
FX="nbd+unix:///default?socket=$SOCK"
SIZE=$(nbdinfo --size "$FX" 2>/dev/null || echo 939524096)
if [ "${BACKEND:-file}" = memory ]; then
  "${PINCMD[@]}" nbdkit -U "$WORK/kf.sock" --pidfile "$WORK/kf.pid" memory "$SIZE"
  PEER="nbdkit memory"
else
  truncate -s "$SIZE" "$WORK/disk.img"
  "${PINCMD[@]}" nbdkit -U "$WORK/kf.sock" --pidfile "$WORK/kf.pid" file "$WORK/disk.img"
  PEER="nbdkit file"
fi
for _ in $(seq 50); do [ -f "$WORK/kf.pid" ] && break; sleep 0.1; done
KF="nbd+unix:///?socket=$WORK/kf.sock"
for u in "$FX" "$KF"; do
  fio --name=fill --ioengine=nbd --uri="$u" --rw=write --bs=1M --iodepth=8 --size=400M >/dev/null
done

rows=(
  "8k randread qd1|--rw=randread --bs=8k --iodepth=1 --size=400M"
  "8k randwrite qd1|--rw=randwrite --bs=8k --iodepth=1 --size=400M"
  "8k randwrite, flush after each|--rw=randwrite --bs=8k --iodepth=1 --fsync=1 --size=400M"
  "8k WAL-like (64 KiB region), flush after each|--rw=write --bs=8k --iodepth=1 --fsync=1 --size=64k"
  "128k seq write qd32|--rw=write --bs=128k --iodepth=32 --size=400M"
)
echo "backend ${BACKEND:-file}${PIN:+, all on CPU $PIN}${SPIN_POLLS:+, spin_polls $SPIN_POLLS}; flexssd against $PEER; ${RUNTIME}s runs"
echo
echo "| workload | server | IOPS per run | mean latency µs per run | flush µs per run |"
echo "|---|---|---|---|---|"
for row in "${rows[@]}"; do
  name=${row%%|*}; args=${row#*|}
  if [ -n "${BENCH_ROWS:-}" ] && ! grep -Eq -- "$BENCH_ROWS" <<<"$name"; then continue; fi
  declare -A iops=() lat=() fl=()
  for r in $(seq "$REPS"); do
    for s in fx kf; do
      u=$FX; [ $s = kf ] && u=$KF
      # shellcheck disable=SC2086
      "${PINCMD[@]}" fio --output-format=json --output="$WORK/o.json" --name=b --ioengine=nbd \
        --uri="$u" $args --time_based --runtime="$RUNTIME" >/dev/null
      read -r i l f < <(python3 - "$WORK/o.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))["jobs"][0]
d = j["read"] if j["read"]["total_ios"] > 0 else j["write"]
s = j.get("sync", {})
f = s["lat_ns"]["mean"] / 1000 if s.get("total_ios", 0) > 0 else 0
print(f"{d['iops']:.0f} {d['clat_ns']['mean'] / 1000:.1f} {f:.0f}")
PY
)
      iops[$s]+="$i "; lat[$s]+="$l "; fl[$s]+="$f "
    done
  done
  echo "| $name | flexssd | ${iops[fx]}| ${lat[fx]}| ${fl[fx]}|"
  echo "| $name | $PEER | ${iops[kf]}| ${lat[kf]}| ${fl[kf]}|"
  unset iops lat fl
done

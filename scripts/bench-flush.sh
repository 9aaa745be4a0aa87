#!/usr/bin/env bash
# What a flush costs: fio's nbd engine writing 4 KiB blocks with a FLUSH after
# every write (--fsync=1, what a database commit does), against flexssd on its
# default configuration (file backend, persistent) and `nbdkit file` on a sparse
# file (persistent: the fair peer), and `nbdkit memory` for reference, in one
# run, alternating servers; median of REPS runs each.
#
# Two more rows show whether one tenant's flushes are its own: the flushing
# tenant alone, and again while a second vSSD on the same device takes random
# writes with no flushes at all (its flush syncs the flushing vSSD's own pages,
# so the neighbour's dirty pages must not slow it); and the same for the peer,
# `nbdkit file` beside a second `nbdkit file` process on a second file.
#
#   scripts/bench-flush.sh [RUNTIME_SECONDS [REPS]]   (default 5 s, 3 repetitions)
#
# Environment:
#   FLEXSSD_BIN=PATH       benchmark this flexssd binary (default: build target/release)
#   FLEXSSD_BASE_BIN=PATH  also benchmark this build (a baseline) in the same run
#   BENCH_ROWS=REGEX       only the rows whose name matches (grep -E; the
#                          isolation rows are named "isolation")
set -euo pipefail
cd "$(dirname "$0")/.."
RUNTIME=${1:-5}
REPS=${2:-3}
. scripts/lib.sh
pick_bin
BASE_BIN=${FLEXSSD_BASE_BIN:+$(realpath "$FLEXSSD_BASE_BIN")}
for t in fio nbdkit curl python3; do command -v $t >/dev/null || { echo "bench-flush: $t is missing (make test installs it)"; exit 1; }; done

WORK=$(mktemp -d /tmp/flexssd-bench-flush.XXXXXX)
PIDS=()
trap 'stop_daemon; for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$WORK"' EXIT
SIZE=256M

# The default configuration's device and vSSD, plus a neighbour on other channels.
FX_CONFIG='
[[vssds]]
name = "default"
channels = 4
[[vssds]]
name = "noisy"
channels = 4'
# flexssd config default has these devices; only the vSSDs are spelled out.
DEFAULT_DEVICES=$("$BIN" config default | python3 -c '
import sys, re
t = sys.stdin.read()
i = t.index("[[devices]]")
j = t.find("[[vssds]]", i)
print(t[i:j if j >= 0 else len(t)])')
start_daemon "$WORK/fx" "mode = \"fast\"
$DEFAULT_DEVICES
$FX_CONFIG"
FX="nbd+unix:///default?socket=$SOCK"
NOISY="nbd+unix:///noisy?socket=$SOCK"
FX_PID=$DAEMON_PID
if [ -n "$BASE_BIN" ]; then
  NEW_BIN=$BIN BIN=$BASE_BIN
  DAEMON_PID=
  start_daemon "$WORK/base" "mode = \"fast\"
$DEFAULT_DEVICES
$FX_CONFIG"
  PIDS+=("$DAEMON_PID"); DAEMON_PID=$FX_PID; BIN=$NEW_BIN
  BS="nbd+unix:///default?socket=$SOCK"
  BNOISY="nbd+unix:///noisy?socket=$SOCK"
fi
truncate -s 2G "$WORK/disk.img" "$WORK/disk2.img"
nbdkit -U "$WORK/kf.sock" --pidfile "$WORK/kf.pid" file "$WORK/disk.img"
nbdkit -U "$WORK/km.sock" --pidfile "$WORK/km.pid" memory 2G
# The peer's isolation row: the neighbour is a second nbdkit on a second file.
nbdkit -U "$WORK/kn.sock" --pidfile "$WORK/kn.pid" file "$WORK/disk2.img"
for _ in $(seq 50); do [ -f "$WORK/kf.pid" ] && [ -f "$WORK/km.pid" ] && [ -f "$WORK/kn.pid" ] && break; sleep 0.1; done
PIDS+=("$(cat "$WORK/kf.pid")" "$(cat "$WORK/km.pid")" "$(cat "$WORK/kn.pid")")
KN="nbd+unix:///?socket=$WORK/kn.sock"
KF="nbd+unix:///?socket=$WORK/kf.sock"
KM="nbd+unix:///?socket=$WORK/km.sock"

servers=(fx kf km); declare -A URI=([fx]=$FX [kf]=$KF [km]=$KM)
if [ -n "$BASE_BIN" ]; then servers+=(bs); URI[bs]=$BS; fi
for s in "${servers[@]}"; do
  fio --name=fill --ioengine=nbd --uri="${URI[$s]}" --rw=write --bs=1M --iodepth=8 --size=$SIZE >/dev/null
done

rows=(
  "4k randwrite, flush after each, 1 job|--rw=randwrite --bs=4k --iodepth=1 --numjobs=1 --fsync=1"
  "4k randwrite, flush after each, 4 jobs|--rw=randwrite --bs=4k --iodepth=1 --numjobs=4 --fsync=1"
  "4k randwrite, flush every 32, qd8|--rw=randwrite --bs=4k --iodepth=8 --numjobs=1 --fsync=32"
)
med() { printf '%s\n' "$@" | sort -n -k1,1 | sed -n "$(( ($# + 1) / 2 ))p"; }
hdr='| workload | flexssd IOPS | nbdkit file IOPS | vs file | nbdkit memory IOPS | vs memory |'
sep='|---|---:|---:|---:|---:|---:|'
if [ -n "$BASE_BIN" ]; then hdr+=' base IOPS | new/base |'; sep+='---:|---:|'; fi
echo "$hdr"; echo "$sep"
for row in "${rows[@]}"; do
  name=${row%%|*}; args=${row#*|}
  if [ -n "${BENCH_ROWS:-}" ] && ! grep -Eq -- "$BENCH_ROWS" <<<"$name"; then continue; fi
  declare -A got=(); for s in "${servers[@]}"; do got[$s]=""; done
  for r in $(seq "$REPS"); do
    # Rotate the order every repetition.
    order=("${servers[@]:$((r % ${#servers[@]}))}" "${servers[@]:0:$((r % ${#servers[@]}))}")
    for s in "${order[@]}"; do
      # shellcheck disable=SC2086
      fio_json "$WORK/$s$r.json" --name=b --ioengine=nbd --uri="${URI[$s]}" $args --size=$SIZE --time_based --runtime="$RUNTIME" --group_reporting --percentile_list=99
      got[$s]+="$(fio_summ "$WORK/$s$r.json" | cut -d' ' -f1) "
    done
  done
  # shellcheck disable=SC2086
  fx=$(med ${got[fx]}); kf=$(med ${got[kf]}); km=$(med ${got[km]})
  line="| $name | $fx | $kf | $(python3 -c "print(f'{$fx/$kf:.2f}')") | $km | $(python3 -c "print(f'{$fx/$km:.2f}')") |"
  if [ -n "$BASE_BIN" ]; then
    # shellcheck disable=SC2086
    bs=$(med ${got[bs]}); line+=" $bs | $(python3 -c "print(f'{$fx/$bs:.2f}')") |"
  fi
  echo "$line"
  printf '  %s: %s\n' "$name" "$(for s in "${servers[@]}"; do printf '%s=[%s] ' "$s" "${got[$s]}"; done)" >&2
done

# Isolation: the flushing tenant alone, then beside a neighbour writing with no flushes.
if [ -n "${BENCH_ROWS:-}" ] && ! grep -Eq -- "$BENCH_ROWS" <<<"isolation"; then exit 0; fi
echo
echo '| flushing tenant (4k randwrite, flush after each, 1 job) | alone IOPS | with a no-flush neighbour IOPS | ratio |'
echo '|---|---:|---:|---:|'
iso() {  # LABEL URI NEIGHBOUR_URI
  local alone=() busy=()
  for r in $(seq "$REPS"); do
    fio_json "$WORK/a$r.json" --name=b --ioengine=nbd --uri="$2" --rw=randwrite --bs=4k --iodepth=1 --fsync=1 --size=$SIZE --time_based --runtime="$RUNTIME"
    alone+=("$(fio_summ "$WORK/a$r.json" | cut -d' ' -f1)")
    fio --name=noise --ioengine=nbd --uri="$3" --rw=randwrite --bs=4k --iodepth=32 --size=$SIZE --time_based --runtime=$((RUNTIME + 2)) >/dev/null &
    local np=$!
    sleep 1
    fio_json "$WORK/b$r.json" --name=b --ioengine=nbd --uri="$2" --rw=randwrite --bs=4k --iodepth=1 --fsync=1 --size=$SIZE --time_based --runtime="$RUNTIME"
    wait $np
    busy+=("$(fio_summ "$WORK/b$r.json" | cut -d' ' -f1)")
  done
  local a b; a=$(med "${alone[@]}"); b=$(med "${busy[@]}")
  echo "| $1 | $a | $b | $(python3 -c "print(f'{$b/$a:.2f}')") |"
}
iso "flexssd (neighbour: a second vSSD of the same daemon)" "$FX" "$NOISY"
if [ -n "$BASE_BIN" ]; then iso "flexssd base" "$BS" "$BNOISY"; fi
iso "nbdkit file (neighbour: a second nbdkit file process)" "$KF" "$KN"

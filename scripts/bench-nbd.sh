#!/usr/bin/env bash
# NBD data-path benchmark: fio's nbd engine against flexssd (fast mode, memory
# backend, full FTL in the path) and against `nbdkit memory`, in the same run,
# alternating workloads so machine noise hits both alike. Prints a Markdown table
# with IOPS, p99 latency and the flexssd/nbdkit ratio.
#
# Each workload runs REPS times per server, alternating servers, and the median of
# each is reported (the machine is noisy: single runs of nbdkit varied 2x).
#
#   scripts/bench-nbd.sh [RUNTIME_SECONDS [REPS]]   (default 5 s, 3 repetitions)
#
# Environment:
#   FLEXSSD_BIN=PATH       benchmark this flexssd binary (default: build target/release)
#   FLEXSSD_BASE_BIN=PATH  also benchmark this one (a baseline build) in the same run,
#                          alternating with the others; adds its IOPS and new/base ratio
#   BENCH_ROWS=REGEX       only the workloads whose name matches (grep -E)
#   BACKEND=file           flexssd's flash on the default configuration's file
#                          backend (persistent; page cache, pwrite) instead of
#                          prefaulted memory
set -euo pipefail
cd "$(dirname "$0")/.."
RUNTIME=${1:-5}
REPS=${2:-3}
. scripts/lib.sh
pick_bin
BASE_BIN=${FLEXSSD_BASE_BIN:+$(realpath "$FLEXSSD_BASE_BIN")}
for t in fio nbdkit curl python3; do command -v $t >/dev/null || { echo "bench-nbd: $t is missing (make test installs it)"; exit 1; }; done

WORK=$(mktemp -d /tmp/flexssd-bench.XXXXXX)
trap 'stop_daemon; [ -n "${BPID:-}" ] && kill $BPID 2>/dev/null; [ -n "${KPID:-}" ] && kill $KPID 2>/dev/null; rm -rf "$WORK"' EXIT
SIZE=1G

# flexssd: 8 of the default device's 16 channels (2 GiB raw, 1.75 GiB exported).
case ${BACKEND:-memory} in
  memory) BACKEND_CONFIG='backend = "memory"
prefault = true' ;;
  file) BACKEND_CONFIG='backend = "file"' ;;
  *) echo "bench-nbd: BACKEND must be memory or file, not ${BACKEND}" >&2; exit 1 ;;
esac
FX_CONFIG="
mode = \"fast\"
[[devices]]
name = \"ssd0\"
$BACKEND_CONFIG
[[vssds]]
name = \"bench\"
channels = 8"
URIS=()
if [ -n "$BASE_BIN" ]; then
  NEW_BIN=$BIN BIN=$BASE_BIN
  start_daemon "$WORK/base" "$FX_CONFIG"
  BPID=$DAEMON_PID DAEMON_PID= BIN=$NEW_BIN
  BS="nbd+unix:///bench?socket=$SOCK"
  URIS+=("$BS")
fi
start_daemon "$WORK/fx" "$FX_CONFIG"
FX="nbd+unix:///bench?socket=$SOCK"
nbdkit -U "$WORK/k.sock" --pidfile "$WORK/k.pid" memory 2G
for _ in $(seq 50); do [ -f "$WORK/k.pid" ] && break; sleep 0.1; done
KPID=$(cat "$WORK/k.pid")
NK="nbd+unix:///?socket=$WORK/k.sock"

# Fill both so reads hit written data and flexssd's FTL maps every page.
for uri in "${URIS[@]}" "$FX" "$NK"; do
  fio --name=fill --ioengine=nbd --uri="$uri" --rw=write --bs=1M --iodepth=8 --size=$SIZE >/dev/null
done

rows=(
  "4k randread qd32 1 job|--rw=randread --bs=4k --iodepth=32 --numjobs=1"
  "4k randread qd32 4 jobs|--rw=randread --bs=4k --iodepth=32 --numjobs=4"
  "4k randwrite qd32 1 job|--rw=randwrite --bs=4k --iodepth=32 --numjobs=1"
  "4k randwrite qd32 4 jobs|--rw=randwrite --bs=4k --iodepth=32 --numjobs=4"
  "4k 70/30 randrw qd32 1 job|--rw=randrw --rwmixread=70 --bs=4k --iodepth=32 --numjobs=1"
  "4k 70/30 randrw qd32 4 jobs|--rw=randrw --rwmixread=70 --bs=4k --iodepth=32 --numjobs=4"
  "128k seq read qd32|--rw=read --bs=128k --iodepth=32 --numjobs=1"
  "128k seq write qd32|--rw=write --bs=128k --iodepth=32 --numjobs=1"
)
if [ -n "$BASE_BIN" ]; then
  printf '| workload | flexssd IOPS | nbdkit IOPS | ratio | flexssd p99 µs | nbdkit p99 µs | base IOPS | new/base | base p99 µs |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n'
else
  printf '| workload | flexssd IOPS | nbdkit IOPS | ratio | flexssd p99 µs | nbdkit p99 µs |\n|---|---:|---:|---:|---:|---:|\n'
fi
for row in "${rows[@]}"; do
  name=${row%%|*}; args=${row#*|}
  if [ -n "${BENCH_ROWS:-}" ] && ! grep -Eq -- "$BENCH_ROWS" <<<"$name"; then continue; fi
  fxs=(); nks=(); bss=()
  for r in $(seq "$REPS"); do
    run() {  # run LABEL URI
      # shellcheck disable=SC2086
      fio_json "$WORK/$1$r.json" --name=b --ioengine=nbd --uri="$2" $args --size=$SIZE --time_based --runtime="$RUNTIME" --group_reporting --percentile_list=99
    }
    # With a baseline, the two flexssd builds swap places every repetition.
    if [ -n "$BASE_BIN" ] && [ $((r % 2)) = 1 ]; then run bs "$BS"; fi
    run fx "$FX"
    if [ -n "$BASE_BIN" ] && [ $((r % 2)) = 0 ]; then run bs "$BS"; fi
    run nk "$NK"
    fxs+=("$(fio_summ "$WORK/fx$r.json")"); nks+=("$(fio_summ "$WORK/nk$r.json")")
    if [ -n "$BASE_BIN" ]; then bss+=("$(fio_summ "$WORK/bs$r.json")"); fi
  done
  med() { printf '%s\n' "$@" | sort -n -k1,1 | sed -n "$(( ($# + 1) / 2 ))p"; }
  read -r fi fp < <(med "${fxs[@]}")
  read -r ni np < <(med "${nks[@]}")
  ratio=$(python3 -c "print(f'{$fi/$ni:.2f}')")
  if [ -n "$BASE_BIN" ]; then
    read -r bi bp < <(med "${bss[@]}")
    bratio=$(python3 -c "print(f'{$fi/$bi:.3f}')")
    printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n' "$name" "$fi" "$ni" "$ratio" "$fp" "$np" "$bi" "$bratio" "$bp"
    printf '  %s: new %s | base %s\n' "$name" "${fxs[*]}" "${bss[*]}" >&2
  else
    printf '| %s | %s | %s | %s | %s | %s |\n' "$name" "$fi" "$ni" "$ratio" "$fp" "$np"
  fi
done
echo
curl -fs "$API/v1/vssds/bench/stats" | python3 -c '
import json,sys
f=json.load(sys.stdin)["ftl"]
wa=f["flash_pages_written"]/max(1,f["host_pages_written"])
gc, moved, lo, hi = f["gc_runs"], f["gc_pages_moved"], f["min_erase_count"], f["max_erase_count"]
syncs = f.get("erase_syncs", 0)
print(f"flexssd FTL after the run: write amplification {wa:.2f}, GC runs {gc}, pages moved by GC {moved}, syncs erases waited for {syncs}, erase counts {lo}..{hi}")'

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
set -euo pipefail
cd "$(dirname "$0")/.."
RUNTIME=${1:-5}
REPS=${2:-3}
cargo build --release -q -p flexssd
BIN=$PWD/target/release/flexssd
. scripts/lib.sh
for t in fio nbdkit curl python3; do command -v $t >/dev/null || { echo "bench-nbd: $t is missing (make test installs it)"; exit 1; }; done

WORK=$(mktemp -d /tmp/flexssd-bench.XXXXXX)
trap 'stop_daemon; [ -n "${KPID:-}" ] && kill $KPID 2>/dev/null; rm -rf "$WORK"' EXIT
SIZE=1G

# flexssd: 8 of the default device's 16 channels (2 GiB raw, 1.75 GiB exported).
start_daemon "$WORK/fx" '
mode = "fast"
[[devices]]
name = "ssd0"
backend = "memory"
prefault = true
[[vssds]]
name = "bench"
channels = 8'
FX="nbd+unix:///bench?socket=$SOCK"
nbdkit -U "$WORK/k.sock" --pidfile "$WORK/k.pid" memory 2G
for _ in $(seq 50); do [ -f "$WORK/k.pid" ] && break; sleep 0.1; done
KPID=$(cat "$WORK/k.pid")
NK="nbd+unix:///?socket=$WORK/k.sock"

# Fill both so reads hit written data and flexssd's FTL maps every page.
for uri in "$FX" "$NK"; do
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
summ() {  # summ JSON -> "iops p99_us"
  python3 - "$1" <<'PY'
import json,sys
j=json.load(open(sys.argv[1]))
iops=0.0; p99=0.0
for job in j["jobs"]:
    for d in ("read","write"):
        x=job[d]
        if x["total_ios"]>0:
            iops+=x["iops"]
            p=x["clat_ns"].get("percentile",{}).get("99.000000",0)/1000
            p99=max(p99,p)
print(f"{iops:.0f} {p99:.0f}")
PY
}
printf '| workload | flexssd IOPS | nbdkit IOPS | ratio | flexssd p99 µs | nbdkit p99 µs |\n|---|---:|---:|---:|---:|---:|\n'
for row in "${rows[@]}"; do
  name=${row%%|*}; args=${row#*|}
  fxs=(); nks=()
  for r in $(seq "$REPS"); do
    # shellcheck disable=SC2086
    fio_json "$WORK/fx$r.json" --name=b --ioengine=nbd --uri="$FX" $args --size=$SIZE --time_based --runtime="$RUNTIME" --group_reporting --percentile_list=99
    # shellcheck disable=SC2086
    fio_json "$WORK/nk$r.json" --name=b --ioengine=nbd --uri="$NK" $args --size=$SIZE --time_based --runtime="$RUNTIME" --group_reporting --percentile_list=99
    fxs+=("$(summ "$WORK/fx$r.json")"); nks+=("$(summ "$WORK/nk$r.json")")
  done
  med() { printf '%s\n' "$@" | sort -n -k1,1 | sed -n "$(( ($# + 1) / 2 ))p"; }
  read -r fi fp < <(med "${fxs[@]}")
  read -r ni np < <(med "${nks[@]}")
  ratio=$(python3 -c "print(f'{$fi/$ni:.2f}')")
  printf '| %s | %s | %s | %s | %s | %s |\n' "$name" "$fi" "$ni" "$ratio" "$fp" "$np"
done
echo
curl -fs "$API/v1/vssds/bench/stats" | python3 -c '
import json,sys
f=json.load(sys.stdin)["ftl"]
wa=f["flash_pages_written"]/max(1,f["host_pages_written"])
gc, moved, lo, hi = f["gc_runs"], f["gc_pages_moved"], f["min_erase_count"], f["max_erase_count"]
print(f"flexssd FTL after the run: write amplification {wa:.2f}, GC runs {gc}, pages moved by GC {moved}, erase counts {lo}..{hi}")'

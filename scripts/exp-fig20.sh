#!/usr/bin/env bash
# BlockFlex Figure 20 on flexssd (issue 15 item 2): a regular tenant's key-value
# store on 2, 4, 6, 8 and 10 channels, alone and with a harvest tenant running
# on the flash it lends, emulation mode, in one daemon per (policy, channels).
#
# Paper (§5.4, Figure 20): YCSB workload A (50% reads, 50% updates, 10 threads)
# on RocksDB in the regular VM, its vSSD on 2-10 channels; then a harvest VM
# harvests all of the regular VM's channels and runs ML Prep. Throughput drops
# by 5.1% on average, and the 95th percentile latency about as much.
#
# Here (YCSB-like, not YCSB): RocksDB's db_bench `readrandomwriterandom`
# (readwritepercent = 50, 10 threads, DB_NUM keys of 100 bytes, loaded once by
# `fillrandom`) on ext4, over nbdfuse and a loop device on R's export. R keeps
# the same data on every channel count, so more channels means more idle flash
# to lend. The harvest tenant HV owns 4 channels of its own; once R's gSSD is in
# the pool, HV asks for a harvest volume of VOL on as many channels as the gSSD
# has (best fit puts it there: no unsold channels), fills it, and runs fio on
# it during the measurement ("harvest"): 64 KiB random I/O, 70% reads, queue
# depth 32 (a batch job's scan-and-write, standing in for ML Prep). "alone"
# runs the same db_bench with HV idle; "static" with the same fio job on HV's
# own vSSD (no flash shared with R: what the host's CPUs alone cost R, on
# these 2 cores). Each (policy, channels) does REPS repetitions, the three
# configurations in rotated order; reported: mean and min-max of ops/s and
# of P95 latency (read and update histograms merged, interpolated in the
# bucket), how much R lent, and HV's throughput in static and harvest.
#
# Device: 16 channels x 2 dies x 256 blocks x 64 pages x 4 KiB (128 MiB a
# channel), program/erase suspend on ([devices.timing] defaults); R on channels
# 0..N-1, HV on 12-15, the rest unsold but not harvested (unsold = false, so
# every harvest volume lands on R's flash). Regular tenants first: harvest I/O
# waits for dies R uses (priority_slack_us = 1).
#
# Policies: "fixed" (lend_fraction 0.5 of R's spare blocks) and "predicted"
# (the quantile model on 1-second windows, as exp-harvest.sh; it lends only
# what it predicts idle, so a row may show that nothing was lent).
#
# Writes docs/results/harvest-fig20.csv (every run), harvest-fig20-summary.csv,
# harvest-fig20.svg and harvest-fig20.md.
#   scripts/exp-fig20.sh [SECONDS]    (default 15 per run; REPS=3, DB_NUM=200000,
#                                      CHANNELS="2 4 6 8 10", POLICIES="fixed predicted")
# Needs root (loop devices, mount), nbdfuse, fio and db_bench (rocksdb-tools;
# installed when missing).
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-15}
REPS=${REPS:-3}
DB_NUM=${DB_NUM:-200000}
# RocksDB's memtables (and the WAL it preallocates to their size) and files
# small enough for a 2-channel vSSD (224 MiB): 4 MiB instead of 64 MiB. Reads
# bypass the page cache (direct I/O) and the block cache holds 8 MiB, less than
# the data, so that reads reach the flash as they do in the paper's 180 GB store.
DB_OPTS=(--write_buffer_size=4194304 --target_file_size_base=4194304 --max_bytes_for_level_base=16777216
  --use_direct_reads=true --cache_size=8388608)
CHANNELS=${CHANNELS:-2 4 6 8 10}
POLICIES=${POLICIES:-fixed predicted}
VOL=${VOL:-16M}
[ "$(id -u)" = 0 ] || { echo "exp-fig20: needs root (loop devices and mount)" >&2; exit 1; }
command -v db_bench >/dev/null || {
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends rocksdb-tools >/dev/null
}
for t in nbdfuse fio losetup fusermount3 mkfs.ext4 curl python3 db_bench; do
  command -v "$t" >/dev/null || { echo "exp-fig20: $t is missing (make test installs it)" >&2; exit 1; }
done
. scripts/lib.sh
note "building flexssd (release)"
scripts/build-deps.sh; cargo build --release -q -p flexssd
BIN=${CARGO_TARGET_DIR:-$PWD/target}/release/flexssd
WORK=$(mktemp -d /tmp/flexssd-fig20.XXXXXX)
MNT=$WORK/mnt FUSE=$WORK/fuse LOOP= FUSE_PID= HVF=
mkdir -p "$MNT" "$FUSE"
detach() {
  if mountpoint -q "$MNT"; then umount "$MNT"; fi
  if [ -n "$LOOP" ]; then losetup -d "$LOOP" || true; LOOP=; fi
  if mountpoint -q "$FUSE"; then fusermount3 -u "$FUSE"; fi
  if [ -n "$FUSE_PID" ]; then wait "$FUSE_PID" 2>/dev/null || true; FUSE_PID=; fi
}
stop_hv() {
  [ -n "$HVF" ] || return 0
  kill "$HVF" 2>/dev/null || true
  wait "$HVF" 2>/dev/null || true
  HVF=
}
trap 'stop_hv; detach || true; stop_daemon; [ -n "${KEEP_WORK:-}" ] || rm -rf "$WORK"' EXIT
R=docs/results
mkdir -p "$R"
T_START=$SECONDS

device() {  # device N: the daemon's config body, R on channels 0..N-1
  local n=$1 ids
  ids=$(seq -s, 0 $((n - 1)))
  cat <<TOML
mode = "emulation"
[[devices]]
name = "ssd0"
backend = "file"
[devices.geometry]
channels = 16
dies_per_channel = 2
planes_per_die = 1
blocks_per_plane = 256
pages_per_block = 64
page_size = 4096

[[vssds]]
name = "R"
channel_ids = [$ids]

[[vssds]]
name = "HV"
channel_ids = [12, 13, 14, 15]
role = "harvest"

[harvest]
enabled = true
policy = "$2"
priority_slack_us = 1
tick_ms = 1000
window_s = 1
granule_s = 1
refresh_s = 1
reclaim_horizon_s = 1
lend_for_s = 3600
lend_fraction = 0.5
unsold = false

[harvest.predictor]
model = "quantile"
[harvest.predictor.quantile]
duration_quantile = 0.5
zero_weight = 0.1
TOML
}
R_GSSD='[x for x in g if x.get("home") == "R" and not x["in_use"] and x["state"] == "pool"]'

attach_r() {
  rm -f "$WORK/fuse.pid"
  nbdfuse -P "$WORK/fuse.pid" "$FUSE" "$(uri R)" >/dev/null &
  FUSE_PID=$!
  for _ in $(seq 600); do [ -f "$WORK/fuse.pid" ] && [ -e "$FUSE/nbd" ] && break; sleep 0.05; done
  [ -e "$FUSE/nbd" ] || { echo "exp-fig20: nbdfuse did not mount R" >&2; exit 1; }
  LOOP=$(losetup --find --show "$FUSE/nbd")
  mkfs.ext4 -q -F -E nodiscard "$LOOP"
  mount "$LOOP" "$MNT"
}

# ycsb OUT: db_bench's YCSB-A-like mix for SECS seconds; its output into OUT.
ycsb() {
  sync; echo 3 > /proc/sys/vm/drop_caches
  db_bench --db="$MNT/rocks" --benchmarks=readrandomwriterandom --readwritepercent=50 \
    --threads=10 --duration="$SECS" --use_existing_db=1 --num="$DB_NUM" --value_size=100 \
    "${DB_OPTS[@]}" --histogram=1 >"$1" 2>"$1.err" || {
    echo "exp-fig20: db_bench failed: $(tail -c 300 "$1.err")" >&2
    echo "RocksDB's log says:" >&2
    grep -a -i -m5 "error\|fail" "$MNT/rocks/LOG" >&2 || true
    df -h "$MNT" >&2
    exit 1
  }
}

# One measurement: policy $1, channels $2, repetition $3, configuration $4.
run_one() {
  local pol=$1 n=$2 rep=$3 cfg=$4 tag="$1-$2-$3-$4" lent_blocks=0 vol="" bw=0
  if [ "$cfg" = harvest ]; then
    if ! wait_gssds "$R_GSSD" 30; then
      echo "   $tag: R lent nothing within 30 s" | tee -a "$WORK/notes.txt"
      echo "$pol,$n,$rep,$cfg,,,0,0,,no gSSD" >> "$WORK/runs.csv"
      return 0
    fi
    read -r lent_blocks bw < <(jget /v1/gssds | python3 -c "import json,sys;g=json.load(sys.stdin);x=$R_GSSD[0];print(x['capacity_blocks'],x['bandwidth'])")
    vol="v$rep"
    if ! cli harvest request "$vol" --tenant HV --capacity "$VOL" --bandwidth "$bw" --duration $((SECS + 30)) >"$WORK/req-$tag.txt" 2>&1; then
      # The gSSD may not be predicted to last that long: ask for what it has.
      cli harvest request "$vol" --tenant HV --capacity "$VOL" --bandwidth "$bw" --duration 1 >"$WORK/req-$tag.txt" 2>&1 || {
        echo "   $tag: HV's request failed: $(tail -1 "$WORK/req-$tag.txt")" | tee -a "$WORK/notes.txt"
        echo "$pol,$n,$rep,$cfg,,,$lent_blocks,$bw,,request failed" >> "$WORK/runs.csv"
        return 0
      }
    fi
    fio --name=fill --ioengine=nbd --uri="$(uri "$vol")" --rw=write --bs=1M --iodepth=4 --size="$VOL" >/dev/null
    local hu
    hu=$(uri "$vol")
    (trap - EXIT; exec fio --ioengine=nbd --uri="$hu" --name=hv --rw=randrw --rwmixread=70 --bs=64k \
      --iodepth=32 --size="$VOL" --time_based --runtime=$((SECS + 4)) --randrepeat=0 \
      --output-format=json --output="$WORK/hv-$tag.json" >/dev/null 2>&1) &
    HVF=$!
    sleep 1
  fi
  if [ "$cfg" = static ]; then
    local hu
    hu=$(uri HV)
    (trap - EXIT; exec fio --ioengine=nbd --uri="$hu" --name=hv --rw=randrw --rwmixread=70 --bs=64k \
      --iodepth=32 --size="$VOL" --time_based --runtime=$((SECS + 4)) --randrepeat=0 \
      --output-format=json --output="$WORK/hv-$tag.json" >/dev/null 2>&1) &
    HVF=$!
    sleep 1
  fi
  ycsb "$WORK/db-$tag.txt"
  # HV's job covers db_bench (it starts 1 s before) and ends on its own, so that fio
  # writes its report: what HV got meanwhile.
  if [ -n "$HVF" ]; then wait "$HVF" || true; HVF=; fi
  local hv=""
  [ -s "$WORK/hv-$tag.json" ] && hv=$(python3 -c '
import json, sys
j = json.load(open(sys.argv[1]))
print(round(sum(x["read"]["bw_bytes"] + x["write"]["bw_bytes"] for x in j["jobs"]) / 2**20, 1))' "$WORK/hv-$tag.json" 2>/dev/null || true)
  local note=""
  if [ "$cfg" = harvest ]; then
    jget "/v1/harvest/volumes/$vol" > "$WORK/vol-$tag.json" || true
    note=$(python3 -c "import json,sys;v=json.load(open(sys.argv[1]));print(v.get('state',''))" "$WORK/vol-$tag.json" 2>/dev/null || true)
    cli harvest release "$vol" >/dev/null || true
  fi
  read -r ops p95 < <(python3 - "$WORK/db-$tag.txt" <<'PY'
import re, sys
t = open(sys.argv[1]).read()
m = re.search(r"readrandomwriterandom\s*:\s*[\d.]+ micros/op (\d+) ops/sec", t)
buckets = {}
for lo, hi, n in re.findall(r"^[\[(]\s*([\d.]+),\s*([\d.]+)\s*[\])]\s+(\d+)", t, re.M):
    k = (float(lo), float(hi))
    buckets[k] = buckets.get(k, 0) + int(n)
total = sum(buckets.values())
p95, acc = "", 0
for (lo, hi), n in sorted(buckets.items()):
    if total and acc + n >= 0.95 * total:
        p95 = f"{lo + (hi - lo) * (0.95 * total - acc) / n:.1f}"
        break
    acc += n
print(m.group(1) if m else "", p95 or "-")
PY
)
  [ -n "$ops" ] || { echo "exp-fig20: no ops/sec in $WORK/db-$tag.txt" >&2; exit 1; }
  echo "$pol,$n,$rep,$cfg,$ops,$p95,$lent_blocks,$bw,$hv,$note" >> "$WORK/runs.csv"
  printf '   %-8s %2s ch  rep %s  %-7s %7s ops/s  P95 %8s us  lent %s blocks on %s channels  HV %s MiB/s\n' \
    "$pol" "$n" "$rep" "$cfg" "$ops" "$p95" "$lent_blocks" "$bw" "${hv:--}"
}

echo "policy,channels,rep,config,ops_per_s,p95_us,lent_blocks,gssd_channels,hv_mib_s,note" > "$WORK/runs.csv"
CONFIGS=(alone static harvest)
# HV's own export gets its data once, for the static runs.
fill_hv() { fio --name=fill --ioengine=nbd --uri="$(uri HV)" --rw=write --bs=1M --iodepth=4 --size="$VOL" >/dev/null; }
read -ra chans <<<"$CHANNELS"
read -ra pols <<<"$POLICIES"
steps $((${#chans[@]} * ${#pols[@]}))
for pol in "${pols[@]}"; do
  for n in "${chans[@]}"; do
    step "policy $pol, R on $n channels"
    start_daemon "$WORK/d-$pol-$n" "$(device "$n" "$pol")"
    attach_r
    fill_hv
    db_bench --db="$MNT/rocks" --benchmarks=fillrandom --num="$DB_NUM" --value_size=100 \
      --threads=1 "${DB_OPTS[@]}" >"$WORK/fill-$pol-$n.txt" 2>&1 || { echo "exp-fig20: the load failed:" >&2; tail -5 "$WORK/fill-$pol-$n.txt" >&2; exit 1; }
    sync
    for rep in $(seq "$REPS"); do
      order=("${CONFIGS[@]:$(( (rep - 1) % 3 ))}" "${CONFIGS[@]:0:$(( (rep - 1) % 3 ))}")
      for cfg in "${order[@]}"; do run_one "$pol" "$n" "$rep" "$cfg"; done
    done
    cp "$WORK/d-$pol-$n/daemon.log" "$WORK/daemon-$pol-$n.log"
    detach
    stop_daemon
    rm -rf "$WORK/d-$pol-$n/data"
  done
done
steps_done
cp "$WORK/runs.csv" "$R/harvest-fig20.csv"
python3 scripts/exp-fig20-report.py "$R" "$SECS" "$REPS" "$DB_NUM" "$VOL" $((SECONDS - T_START)) "$WORK/notes.txt"
echo "wrote $R/harvest-fig20.md"

#!/usr/bin/env bash
# BlockFlex Figures 18 and 19 on flexssd (issues 3 and 15), emulation mode, fio over NBD.
#
# One emulated SSD of 16 channels (2 dies each, 64 blocks of 256 KiB per die;
# program/erase suspend on, as [devices.timing] defaults). A harvest tenant HV
# owns channels 0-7, a regular tenant R owns 8-11, channels 12-15 are unsold
# (one unsold gSSD of 4 channels). Everything runs in one daemon per lending
# policy (`[harvest] policy = "fixed"`, then `"predicted"`).
#
# GC warm-up before measuring (in a daemon with the harvester off; the flash is
# file-backed, so the data stays when the daemon restarts with it on): R's whole export is written, its 32 MiB working
# set overwritten at random twice and the rest trimmed; HV's whole export is
# written and 128 MiB of 64 KiB random writes go over it, so both FTLs have
# programmed every block and HV's writes run GC during the measurements.
#
# R's workload (synthetic): a base load of 4 KiB random reads over its working
# set at half of its measured maximum (the paper's "regular VM at 50%"), and
# before every measurement a 2-second burst (128 KiB reads at queue depth 16
# plus 16 MiB of new data, trimmed after the burst): an idle-with-bursts pattern.
# Its base load also runs while HV sets up a sold or unsold run (an idle R is a
# level the predictors never saw).
# For the predicted policy the predictors (model = "quantile", 1-second windows,
# 1-second duration granule; see WARM below) first learn WARM cycles of that
# pattern (burst, then GAP seconds of base load), so that they predict the gap.
#
# Figure 18, REPS repetitions, the four runs of a repetition in a rotated order,
# each of SECS seconds with R's base load:
#   alone   R only (HV idle);
#   static  HV on its own 8 channels: two fio jobs, each 64 KiB random I/O
#           (70% reads) at queue depth 32 over 12 MiB, on two regions of HV;
#   sold    the same two jobs, the second on a 12 MiB harvest volume on the
#           gSSD R lends (the policy decides its channels and blocks);
#   unsold  the second on a 12 MiB harvest volume on the unsold gSSD.
# Equal load: two jobs at queue depth 32 in every configuration.
#
# Figure 19 (fixed policy's daemon, after its repetitions): per-second
# throughput of R and HV over FIG19_SECS seconds: HV alone on its vSSD, then a
# harvest volume on R's gSSD (harvest), then R writes new data until its FTL
# needs its blocks back: the gSSD is reclaimed early and the volume migrates to
# the unsold gSSD; R's slowdown while the gSSD is reclaimed.
#
# Then the reclaim time of a full unsold gSSD (as before): a regular vSSD buys
# exactly its channels, the volume migrates, the old gSSD is erased.
#
# Took 14 min 15 s with the defaults on 2 idle cores (docs/results/harvest.md).
# Writes to docs/results/: harvest-fig18.csv (every run), harvest-fig18-summary.csv
# (means and min-max), harvest-fig18.svg, harvest-fig19.csv, harvest-fig19.svg,
# harvest-lending.csv (what each policy lent), harvest-summary.csv.
#   scripts/exp-harvest.sh [SECONDS]   (default 15 per run; REPS=3, WARM=8 from the environment)
# Environment also: POLICIES="fixed predicted"; HV_QD=32 (the queue depth of each
# of HV's two jobs, the same in every configuration); OUT_DIR=docs/results
# (where the CSVs and plots go: another directory for a trial run).
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-15}
REPS=${REPS:-3}
WARM=${WARM:-8}
GAP=$((2 * SECS + 6))
FIG19_SECS=${FIG19_SECS:-55}
VOL=12M
. scripts/lib.sh
note "building flexssd (release)"
scripts/build-deps.sh; cargo build --release -q -p flexssd
BIN=${CARGO_TARGET_DIR:-$PWD/target}/release/flexssd
WORK=$(mktemp -d /tmp/flexssd-harvest.XXXXXX)
trap 'stop_daemon; kill $(jobs -p) 2>/dev/null || true; [ -n "${KEEP_WORK:-}" ] || rm -rf "$WORK"' EXIT
R=${OUT_DIR:-docs/results}
HV_QD=${HV_QD:-32}
mkdir -p "$R"
T_START=$SECONDS
uptime > "$WORK/uptime.txt"

DEVICE='
mode = "emulation"
[[devices]]
name = "ssd0"
backend = "file"
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
R_VSSD='
[[vssds]]
name = "R"
channel_ids = [8, 9, 10, 11]
'
# The quantile model predicts the median of R's past idle stretches
# (duration_quantile = 0.5, zero_weight = 0.1) rather than the default 15th
# percentile with a zero-length run of weight 1: with the 8 stretches a short
# warm-up gives, that is the shortest stretch or zero, and R lends for a second.
# Short periods so that a run of seconds sees what the paper's hours do:
# one sample per 1-second window (a period of 1 s, the default: with shorter
# periods a window's maximum catches scheduling noise), 1-second granule and refresh; released gSSDs expiring within a
# second are erased, others pooled. The quantile model warms on counts
# (docs/results/predict.md), with its defaults otherwise.
harvest_cfg() {
  cat <<TOML
[harvest]
enabled = true
policy = "$1"
priority_slack_us = 1
tick_ms = 1000
window_s = 1
granule_s = 1
refresh_s = 1
reclaim_horizon_s = 1
lend_for_s = 3600
lend_fraction = 0.5
unsold = true
unsold_group = 4

[harvest.predictor]
model = "quantile"
[harvest.predictor.quantile]
duration_quantile = 0.5
zero_weight = 0.1
TOML
}

R_GSSD='[x for x in g if x.get("home") == "R" and not x["in_use"] and x["state"] == "pool"]'
U_GSSD='[x for x in g if "home" not in x and not x["in_use"] and x["state"] == "pool"]'

hv_job() {  # hv_job OUT SECOND_EXPORT SECOND_OFFSET: two jobs, the first on HV's first region
  fio --output-format=json --output="$1" --ioengine=nbd --rw=randrw --rwmixread=70 \
    --bs=64k --iodepth="$HV_QD" --size=$VOL --time_based --runtime="$SECS" --randrepeat=0 \
    --name=hv-a --uri="$(uri HV)" --offset=0 \
    --name=hv-b --uri="$(uri "$2")" --offset="$3" >/dev/null
}
r_job() {  # r_job OUT [RUNTIME [extra fio args]]: R's base load
  local out=$1 rt=${2:-$SECS}; shift 2 || shift $#
  fio --output-format=json --output="$out" --ioengine=nbd --uri="$(uri R)" --name=r \
    --rw=randread --bs=4k --iodepth=16 --size=32M --time_based --runtime="$rt" \
    --rate_iops="$R_RATE" --rate_process=poisson --randrepeat=0 "$@" >/dev/null
}
r_burst() {  # R's burst: big reads and 16 MiB of new data for 2 s, the new data trimmed after
  fio --ioengine=nbd --uri="$(uri R)" --time_based --runtime=2 \
    --name=big --rw=randread --bs=128k --iodepth=16 --size=32M \
    --name=grow --rw=write --bs=1M --iodepth=4 --offset=32M --size=16M --rate=8m \
    >"$WORK/burst.out" 2>&1 || { echo "R's burst failed: $(grep -m1 error "$WORK/burst.out")" >> "$WORK/notes.txt"; }
  fio --ioengine=nbd --uri="$(uri R)" --name=trim --rw=trim --bs=1M --iodepth=4 \
    --offset=32M --size=16M >/dev/null
}

# The events of the daemon, each stamped with the wall time it was first seen
# (every 0.25 s): EVENTS_PID, into $1.
poll_events() {
  python3 - "$API" "$1" <<'PY' &
import json, sys, time, urllib.request
api, out = sys.argv[1], sys.argv[2]
since = 0
with open(out, "a") as f:
    while True:
        try:
            ev = json.load(urllib.request.urlopen(f"{api}/v1/events?since={since}", timeout=2))
        except Exception:
            time.sleep(0.25)
            continue
        now = time.time()
        for e in ev:
            since = max(since, e["seq"])
            e["wall"] = now
            f.write(json.dumps(e) + "\n")
        f.flush()
        time.sleep(0.25)
PY
  EVENTS_PID=$!
}

precondition() {
  note "GC warm-up: R and HV written whole and overwritten"
  fio --name=fill --ioengine=nbd --uri="$(uri R)" --rw=write --bs=1M --iodepth=4 >/dev/null
  fio --name=ow --ioengine=nbd --uri="$(uri R)" --rw=randwrite --bs=4k --iodepth=16 \
    --size=32M --io_size=64M >/dev/null
  fio --name=trim --ioengine=nbd --uri="$(uri R)" --rw=trim --bs=1M --iodepth=4 --offset=32M >/dev/null
  fio --name=fill --ioengine=nbd --uri="$(uri HV)" --rw=write --bs=1M --iodepth=4 >/dev/null
  fio --name=ow --ioengine=nbd --uri="$(uri HV)" --rw=randwrite --bs=64k --iodepth=16 \
    --io_size=128M >/dev/null
  # HV keeps 96 MiB of its 224 (the two regions its jobs use and more); the
  # rest is trimmed, as a file system with discard leaves it.
  fio --name=trim --ioengine=nbd --uri="$(uri HV)" --rw=trim --bs=1M --iodepth=4 --offset=48M --size=64M >/dev/null
  fio --name=trim --ioengine=nbd --uri="$(uri HV)" --rw=trim --bs=1M --iodepth=4 --offset=160M >/dev/null
}

stop_pad() {
  [ -n "${PAD:-}" ] || return 0
  # Only once the child is fio: a bash child killed before its exec would run
  # the EXIT trap and stop the daemon.
  for _ in $(seq 1 100); do
    [ "$(cat "/proc/$PAD/comm" 2>/dev/null)" = fio ] && break
    sleep 0.02
  done
  kill "$PAD" 2>/dev/null || true
  wait "$PAD" 2>/dev/null || true
  PAD=
}

# One Figure-18 run: policy $1, repetition $2, configuration $3.
fig18_run() {
  local pol=$1 rep=$2 cfg=$3 tag="$1-$2-$3" vol="" gid=""
  r_burst
  # For sold and unsold, R's base load goes on while HV sets up (waits for a
  # gSSD, asks, fills its volume), as in the warm-up: an idle R would be a
  # level the predictors never saw, with no history of how long it lasts.
  # stop_pad stops it before the measured run.
  PAD=
  if [ "$cfg" = sold ] || [ "$cfg" = unsold ]; then
    local ru
    ru=$(uri R)
    # fio itself (exec), so that stopping it stops the I/O; the trap is reset
    # first, so the subshell never runs the script's EXIT trap.
    (trap - EXIT; exec fio --ioengine=nbd --uri="$ru" --name=pad --rw=randread --bs=4k --iodepth=16 \
      --size=32M --time_based --runtime=120 --rate_iops="$R_RATE" --rate_process=poisson >/dev/null 2>&1) &
    PAD=$!
  fi
  case $cfg in
    alone)
      stop_pad
      r_job "$WORK/r-$tag.json"
      ;;
    static)
      stop_pad
      r_job "$WORK/r-$tag.json" & local rp=$!
      hv_job "$WORK/hv-$tag.json" HV 112M
      wait $rp
      ;;
    sold | unsold)
      vol="v$rep$cfg"
      local cap bw hold=""
      if [ "$cfg" = sold ]; then
        # The gSSD R lends after its burst (the predicted policy lends only
        # once it predicts an idle stretch long enough).
        if ! wait_gssds "$R_GSSD" 15; then
          echo "   $tag: R lent nothing within 15 s" | tee -a "$WORK/notes.txt"
          stop_pad
          r_job "$WORK/r-$tag.json"
          return 0
        fi
        read -r gid cap bw < <(jget /v1/gssds | python3 -c "import json,sys;g=json.load(sys.stdin);x=$R_GSSD[0];print(x['id'],x['capacity_bytes'],x['bandwidth'])")
      else
        wait_gssds "$U_GSSD" 8
        # Best fit would pick R's smaller gSSD: hold it with a tiny volume.
        if jget /v1/gssds | python3 -c "import json,sys;g=json.load(sys.stdin);sys.exit(0 if $R_GSSD else 1)"; then
          hold="hold$rep"
          cli harvest request "$hold" --tenant HV --capacity 1M --bandwidth 1 --duration 1 >/dev/null || hold=""
        fi
        bw=4
      fi
      # HV asks for the run's length; when R's gSSD is not predicted to last
      # that long, best fit takes the unsold one: then HV asks for 1 s, gets
      # R's gSSD, and the run shows what happens when it expires in use.
      local dur
      for dur in $((SECS + 2)) 1; do
        cli harvest request "$vol" --tenant HV --capacity $VOL --bandwidth "$bw" --duration "$dur" >/dev/null
        jget "/v1/harvest/volumes/$vol" > "$WORK/vol-$tag.json"
        jget /v1/gssds > "$WORK/gssds-$tag.json"
        if python3 - "$WORK/vol-$tag.json" "$WORK/gssds-$tag.json" "$cfg" <<'PY'
import json, sys
v = json.load(open(sys.argv[1])); g = {x["id"]: x for x in json.load(open(sys.argv[2]))}
homes = {g[s["gssd"]].get("home", "unsold") for s in v["segments"]}
want = {"R"} if sys.argv[3] == "sold" else {"unsold"}
sys.exit(0 if homes == want else 1)
PY
        then break; fi
        cli harvest release "$vol" >/dev/null
        [ "$dur" = 1 ] && { echo "   $tag: no gSSD of the right kind" | tee -a "$WORK/notes.txt"; stop_pad; r_job "$WORK/r-$tag.json"; return 0; }
        echo "   $tag: R's gSSD was not predicted to last $dur s; HV asks for 1 s" | tee -a "$WORK/notes.txt"
      done
      [ -n "$hold" ] && cli harvest release "$hold" >/dev/null
      fio --name=fill --ioengine=nbd --uri="$(uri "$vol")" --rw=write --bs=1M --iodepth=4 --size=$VOL >/dev/null
      stop_pad
      r_job "$WORK/r-$tag.json" & local rp=$!
      hv_job "$WORK/hv-$tag.json" "$vol" 0
      wait $rp
      jget "/v1/harvest/volumes/$vol" > "$WORK/vol-after-$tag.json"
      cli harvest release "$vol" >/dev/null
      ;;
  esac
  echo "$pol,$rep,$cfg,$(cut -d' ' -f1 /proc/loadavg)" >> "$WORK/runs.txt"
}

CONFIGS=(alone static sold unsold)
read -r -a POLICIES <<<"${POLICIES:-fixed predicted}"
steps $((${#POLICIES[@]} * (3 + REPS) + 3))
: > "$WORK/runs.txt"
for pol in "${POLICIES[@]}"; do
  step "GC warm-up ($pol), harvester off"
  # The warm-up runs with the harvester off (file-backed flash, so the data
  # stays for the restart): R's fill cannot run into blocks lent meanwhile, and
  # the predictors do not learn the warm-up's writes as R's usage.
  start_daemon "$WORK/d-$pol" "$DEVICE
$R_VSSD
"
  precondition
  stop_daemon
  step "daemon ($pol policy)"
  start_daemon "$WORK/d-$pol" "$DEVICE
$R_VSSD
$(harvest_cfg "$pol")
"
  poll_events "$WORK/events-$pol.jsonl"
  if [ -z "${R_RATE:-}" ]; then
    echo "-- R's maximum (4 KiB random reads, queue depth 16, $SECS s)"
    fio --output-format=json --output="$WORK/r-max.json" --ioengine=nbd --uri="$(uri R)" --name=r \
      --rw=randread --bs=4k --iodepth=16 --size=32M --time_based --runtime="$SECS" >/dev/null
    R_MAX=$(python3 -c "import json;print(int(json.load(open('$WORK/r-max.json'))['jobs'][0]['read']['iops']))")
    R_RATE=$((R_MAX / 2))
  fi
  R_MAX=${R_MAX:-0}
  echo "   R max $R_MAX IOPS; runs at $R_RATE"
  step "predictors learn R's pattern ($pol)"
  if [ "$pol" = predicted ]; then
    echo "-- $WARM cycles of R's burst then $GAP s of base load"
    for _ in $(seq 1 "$WARM"); do
      r_burst
      r_job "$WORK/warm.json" "$GAP"
    done
    jget /v1/harvest > "$WORK/status-warm-$pol.json"
  fi
  for rep in $(seq 1 "$REPS"); do
    step "Figure 18, $pol, repetition $rep/$REPS (4 × $SECS s)"
    order=("${CONFIGS[@]:$(((rep - 1) % 4))}" "${CONFIGS[@]:0:$(((rep - 1) % 4))}")
    for cfg in "${order[@]}"; do
      fig18_run "$pol" "$rep" "$cfg"
    done
  done
  jget /v1/harvest > "$WORK/status-$pol.json"
  jget /v1/gssds > "$WORK/gssds-end-$pol.json"

  if [ "$pol" = fixed ]; then
    step "Figure 19: harvest, then an early reclaim ($FIG19_SECS s)"
    r_burst
    wait_gssds "$R_GSSD" 8
    T0=$(date +%s.%N)
    echo "$T0" > "$WORK/fig19-t0"
    r_job "$WORK/f19-r.json" "$FIG19_SECS" --write_bw_log="$WORK/f19-r" --write_iops_log="$WORK/f19-r" --log_avg_msec=500 &
    F1=$!
    fio --output-format=json --output="$WORK/f19-hva.json" --ioengine=nbd --rw=randrw --rwmixread=70 \
      --bs=64k --iodepth="$HV_QD" --size=$VOL --time_based --runtime="$FIG19_SECS" --randrepeat=0 \
      --name=hv-a --uri="$(uri HV)" --write_bw_log="$WORK/f19-hva" --log_avg_msec=500 >/dev/null &
    F2=$!
    sleep 10
    cli harvest request f19 --tenant HV --capacity $VOL --bandwidth 4 --duration "$FIG19_SECS" >/dev/null
    date +%s.%N > "$WORK/fig19-harvest"
    fio --name=fill --ioengine=nbd --uri="$(uri f19)" --rw=write --bs=1M --iodepth=4 --size=$VOL >/dev/null
    date +%s.%N > "$WORK/fig19-hvb"
    fio --output-format=json --output="$WORK/f19-hvb.json" --ioengine=nbd --rw=randrw --rwmixread=70 \
      --bs=64k --iodepth="$HV_QD" --size=$VOL --time_based --runtime=$((FIG19_SECS - 11)) --randrepeat=0 \
      --name=hv-b --uri="$(uri f19)" --write_bw_log="$WORK/f19-hvb" --log_avg_msec=500 >/dev/null &
    F3=$!
    sleep 12
    # R's usage grows: 48 MiB of new data at 4 MiB/s, more than its FTL can
    # hold with the gSSD lent, so it asks for its blocks back.
    date +%s.%N > "$WORK/fig19-grow"
    fio --ioengine=nbd --uri="$(uri R)" --name=grow --rw=write --bs=256k --iodepth=1 \
      --offset=48M --size=48M --rate=4m >/dev/null
    wait $F1 $F2 $F3
    jget /v1/harvest/volumes/f19 > "$WORK/f19-vol.json" || true
    cli harvest release f19 >/dev/null || true
    fio --name=trim --ioengine=nbd --uri="$(uri R)" --rw=trim --bs=1M --iodepth=4 --offset=32M >/dev/null
  fi
  kill "$EVENTS_PID" 2>/dev/null || true
  wait "$EVENTS_PID" 2>/dev/null || true
  stop_daemon
done

step "reclaim time: a full unsold gSSD goes to a buyer"
echo "== reclaim: a harvest volume fills a whole unsold gSSD; a regular tenant buys its channels"
# No R here: channels 8-15 are two unsold gSSDs, so the volume has somewhere to go.
start_daemon "$WORK/d-reclaim" "$DEVICE
$(harvest_cfg fixed | sed 's/^reclaim_horizon_s = 1$/reclaim_horizon_s = 60/')
"
wait_gssds 'len([x for x in g if "home" not in x]) >= 2' 10
cli harvest request full --tenant HV --capacity 100M --bandwidth 4 --duration 1800 >/dev/null
FULL_GSSD=$(jget /v1/harvest/volumes/full | python3 -c 'import json,sys;print(json.load(sys.stdin)["segments"][0]["gssd"])')
FULL_CH=$(jget /v1/gssds | python3 -c "import json,sys;print(','.join(str(c) for c in [g for g in json.load(sys.stdin) if g['id']==$FULL_GSSD][0]['channels']))")
fio --name=full --ioengine=nbd --uri="$(uri full)" --rw=write --bs=1M --iodepth=4 --size=100M >/dev/null
cli vssd create buyer --channel-ids "$FULL_CH" >/dev/null
cli events > "$WORK/events-reclaim.txt"
stop_daemon
uptime >> "$WORK/uptime.txt"

step "results"
HV_QD="$HV_QD" python3 scripts/exp-harvest-report.py "$WORK" "$R" "$SECS" "$R_MAX" "$R_RATE" "$((SECONDS - T_START))"
"$BIN" plot lines --csv "$R/harvest-fig19.csv" --series series --x t_s --y mib_s \
  --scatter "reclaim (migration to erase)" \
  --title "Figure 19 (emulated): throughput through a harvest and an early reclaim" \
  --xlabel "seconds" --ylabel "MiB/s" --out "$R/harvest-fig19.svg"
echo "wrote $R/harvest-fig18.csv, -fig18-summary.csv, -fig18.svg, -fig19.csv, -fig19.svg, -lending.csv, -summary.csv"
steps_done

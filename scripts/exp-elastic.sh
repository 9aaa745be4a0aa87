#!/usr/bin/env bash
# Elastic storage microbenchmark (issue 6; Nicolae et al., IPDPS'14 §IV-C, Fig. 2),
# at 1/4 of the paper's scale in space AND time, on a real btrfs volume whose disks
# are flexssd vSSDs (nbdfuse + loop). Needs root, /dev/fuse, loop devices, nbdfuse,
# btrfs-progs. Writes, and overwrites:
#
#   docs/results/elastic.md              the results page (generated: edit this script)
#   docs/results/elastic-runs.csv        one row per run (policy, reserve, run, times, waste)
#   docs/results/elastic-summary.csv     per policy at its smallest failure-free reserve
#   docs/results/elastic-series-<p>.csv  run 1's probe series (t_s, used, expected, allocated, ...)
#   docs/results/elastic-sim.csv         that series replayed by `flexssd sim elastic`
#   docs/results/elastic-fig2b.svg       used / expected / allocated over time (Fig. 2(b) style)
#
# Scale (the paper's numbers / 4): files of 32 MiB written until more than 1.6 GiB,
# sync, then every file read back while 1 GiB of them is deleted; INIT 256 MiB,
# INC 512 MiB, prealloc 2 GiB; TMIN 0.25 s, TMAX 1.25 s, AD 2.5 s, RD 15 s, reactive
# probe 1.25 s (--time-scale 0.25). Each run lasts RUN_S seconds from the controller's
# start (benchmark plus cool-down; the paper's 400 s would be 100 s at 1/4 scale, RUN_S=80 keeps
# the script near 20 minutes); waste is summed over 5-second intervals over that time.
# For each policy the
# reserve starts at 0 and grows by 128 MiB until RUNS runs in a row are failure-free
# (no ENOSPC, no other error), at most MAX_RESERVE_MIB; a failed run stops at once.
#
#   scripts/exp-elastic.sh            (RUNS=5 RUN_S=80 by default; ~40 minutes)
#   KEEP_RUNS=1 POLICIES=predictive scripts/exp-elastic.sh   (rerun one policy, keep the rest)
#   PAGE_ONLY=1 scripts/exp-elastic.sh   (no runs: figure and page from the CSVs in docs/results)
#   TAG=-100s RUN_S=100 POLICIES="prealloc reactive-addrm predictive" scripts/exp-elastic.sh
#                   the paper's whole 400 s, into elastic-runs-100s.csv (and series and
#                   a figure of their own), summarised on the page
#   ALTERNATE=1 RUN_S=25 POLICIES="prealloc predictive reactive-addrm" scripts/exp-elastic.sh
#                   completion times with the policies alternated run by run, into
#                   elastic-overhead.csv (the page's overhead figures come from there)
#   NOTE="..."   a remark printed under the results table (e.g. which policies were rerun when)
#   DISK_MIBPS=100 RUN_S=100 POLICIES="prealloc reactive-addrm predictive" scripts/exp-elastic.sh
#                   every disk held to 100 MiB/s of reads and writes together (an SLA curve
#                   of the daemon's scheduler), the speed of the paper's disks: raw files on
#                   one local HDD. Scaling space and time by 1/4 keeps the paper's rates only
#                   if the disks keep its speed too; unlimited vSSDs write 3-4x faster, so
#                   the benchmark takes 5 s of a run rather than a third of it. Writes
#                   elastic-runs-disk<N>.csv, elastic-series-disk<N>-<p>.csv and
#                   elastic-fig2b-disk<N>.svg and stops; PAGE_ONLY=1 then puts them on the page.
#
# `predictive-estimated` is ours with pending writes estimated from written bytes
# (`--written-correction estimated`, the default before btrfs's own count was read).
# `predictive-paper` is the predictive policy with Algorithm 2 as printed
# (`--written-correction window --trend history`: every byte written during the
# history counts as pending, and the write trend is fitted to the whole history);
# `predictive-probe` is ours with the paper's short-term rate, between the last two
# probes (`--short-term probe`, the default before the rate over the horizon).
# `predictive` is ours (the defaults: pending writes as btrfs counts them, its
# `bytes_may_use`, the trend fitted to the window's probes, and the short-term rate
# over as much past as the prediction looks ahead; AD is the paper's constant).
# `predictive-measured` is ours with AD twice the slowest add the volume has made
# (`--add-delay measured`); every other label pins the constant AD.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
if [ -z "${BIN:-}" ]; then
  note "building flexssd (release)"
  scripts/build-deps.sh; cargo build --release -q -p flexssd
  BIN=$PWD/target/release/flexssd
fi
OUT=docs/results
mkdir -p "$OUT"
RUNS=${RUNS:-5}
RUN_S=${RUN_S:-80}
MAX_RESERVE_MIB=${MAX_RESERVE_MIB:-768}
POLICIES=${POLICIES:-"prealloc reactive-add reactive-addrm predictive-paper predictive"}
# DISK_MIBPS: the disks' speed (reads and writes share it, as on a hard disk), in
# the scheduler's curve units (4 KiB operations per second); TAG names the outputs
# (-disk<N>); TAG=-100s with RUN_S=100 keeps the runs over the paper's whole
# duration apart in the same way (elastic-runs-100s.csv, on the page's claims)
DISK_SLA=
TAG=${TAG:-}
case $TAG in ""|-100s) ;; *) echo "TAG must be empty or -100s (DISK_MIBPS sets -disk<N>)" >&2; exit 2 ;; esac
if [ -n "${DISK_MIBPS:-}" ]; then
  ops=$((DISK_MIBPS * 256))
  DISK_SLA="{\"curve\": [[0, $ops], [$ops, 0]]}"
  TAG=-disk$DISK_MIBPS
fi
WHAT=${DISK_MIBPS:+disks at $DISK_MIBPS MiB/s}
WHAT=${WHAT:-runs of $RUN_S s}
# the controller's options for a policy label of this script
pargs() {
  case $1 in
    predictive-paper) echo "--policy predictive --written-correction window --trend history --short-term probe --add-delay fixed" ;;
    predictive-estimated) echo "--policy predictive --written-correction estimated --add-delay fixed" ;;
    predictive-probe) echo "--policy predictive --short-term probe --add-delay fixed" ;;
    predictive-measured) echo "--policy predictive --add-delay measured" ;;
    *) echo "--policy $1" ;;
  esac
}
# fig_csv TAG POLICY...: run 1's series of each policy (elastic-series<TAG>-<p>.csv,
# those that exist) as t_s,series,gib rows for `flexssd plot lines`: allocated for
# all, expected for predictive and reactive-addrm, used from the predictive run
fig_csv() {
  python3 - "$OUT" "$@" <<'PY'
import csv, os, sys
out, tag, pols = sys.argv[1], sys.argv[2], sys.argv[3:]
print("t_s,series,gib")
for p in pols:
    f = f"{out}/elastic-series{tag}-{p}.csv"
    if not os.path.exists(f):
        continue
    rows = list(csv.DictReader(open(f)))
    t0 = float(rows[0]["t_s"])
    for x in rows:
        t = float(x["t_s"]) - t0
        print(f"{t:.2f},{p} allocated,{int(x['allocated']) / 2**30:.4f}")
        if p in ("predictive", "reactive-addrm"):
            print(f"{t:.2f},{p} expected,{int(x['expected']) / 2**30:.4f}")
        if p == "predictive":
            print(f"{t:.2f},used (predictive run),{int(x['used']) / 2**30:.4f}")
PY
}
SCALE=(--init 256M --increment 512M --prealloc 2G --time-scale 0.25)
WORK=$(mktemp -d /tmp/exp-elastic.XXXXXX)
MNT=$WORK/mnt
cleanup() {
  [ -n "${CTL_PID:-}" ] && kill -TERM "$CTL_PID" 2>/dev/null && wait "$CTL_PID" 2>/dev/null
  stop_daemon
  rm -rf "$WORK/data" "$WORK/src"
}
trap cleanup EXIT
steps $(($(wc -w <<< "$POLICIES") + 4))

if [ -z "${PAGE_ONLY:-}" ]; then
step "start the daemon"
# 14 channels × 640 MiB (1 MiB blocks): a 256 or 512 MiB disk is one channel, the
# 2 GiB prealloc disk four. Fast mode: flash timing is not what is measured here.
start_daemon "$WORK" '
[[devices]]
name = "ssd0"
backend = "file"
[devices.geometry]
channels = 14
dies_per_channel = 1
planes_per_die = 1
blocks_per_plane = 640
pages_per_block = 256
page_size = 4096
'
echo "daemon at $API; work in $WORK" >&2
mkdir -p "$WORK/src"
head -c $((32 << 20)) /dev/urandom > "$WORK/src/block"
fi

# bench DIR: the microbenchmark; prints "seconds errors".
bench() {
  local dir=$1 t0 t1 n=0 err=0 total=0 limit=$((1638 << 20))
  t0=$(date +%s.%N)
  while [ $total -le $limit ]; do
    if ! dd if="$WORK/src/block" of="$dir/f$n" bs=4M status=none 2>>"$WORK/bench.err"; then err=$((err + 1)); fi
    total=$((total + (32 << 20))); n=$((n + 1))
  done
  sync || err=$((err + 1))
  # read everything back; delete the first 32 files (1 GiB) as we go
  for i in $(seq 0 $((n - 1))); do
    cat "$dir/f$i" > /dev/null 2>>"$WORK/bench.err" || err=$((err + 1))
    if [ "$i" -lt 32 ]; then rm -f "$dir/f$i" || err=$((err + 1)); fi
  done
  t1=$(date +%s.%N)
  echo "$(echo "$t1 - $t0" | bc) $err"
}

HEADER="policy,reserve_mib,run,completion_s,app_errors,waste_gbh,adds,removes,peak_alloc_mib"
# ALTERNATE=1: no reserve search and no page: RUNS rounds of $POLICIES, one run of
# each policy per round in turn, at the reserve elastic-runs.csv chose for it, into
# elastic-overhead.csv (completion times taken side by side; waste is over RUN_S only)
RUNS_CSV="$OUT/elastic-runs$TAG.csv"
[ -z "${ALTERNATE:-}" ] || RUNS_CSV="$OUT/elastic-overhead.csv"
# with KEEP_RUNS, rerun only $POLICIES: the other policies' rows and series stay
[ -n "${PAGE_ONLY:-}" ] || [ -n "${ALTERNATE:-}" ] || keep_rows "$RUNS_CSV" "$HEADER" $POLICIES
[ -z "${ALTERNATE:-}" ] || echo "$HEADER" > "$RUNS_CSV"
# A run during which the kernel's btrfs aborted a transaction (a kernel fault,
# see btrfs_aborted in lib.sh) is not the policy's failure: it is recorded in
# elastic-aborts.csv and run again (at most 3 times).
ABORTS="$OUT/elastic-aborts$TAG.csv"
# alternated runs keep their kernel faults apart from the reserve search's
[ -z "${ALTERNATE:-}" ] || ABORTS="$OUT/elastic-overhead-aborts.csv"
[ -n "${PAGE_ONLY:-}" ] || keep_rows "$ABORTS" "policy,reserve_mib,run,kernel_message" $POLICIES
# one_run policy reserve_mib run: 0 failure-free, 1 failed (app errors), 2 the
# kernel aborted a btrfs transaction (no row written: run it again)
one_run() {
  local p=$1 r=$2 k=$3 res csvf="$WORK/series-$1-$2-$3.csv" st="$WORK/state-$1" dm0
  rm -rf "$st"; : > "$WORK/bench.err"
  dm0=$(dmesg_mark)
  note "$p: reserve $r MiB, run $k of $RUNS ($RUN_S s)"
  "$BIN" elastic run --api "$API" --mount "$MNT" --state "$st" --csv "$csvf" $(pargs "$p") \
    --reserve "${r}M" "${SCALE[@]}" --name "el-$p" --duration-s "$RUN_S" \
    ${DISK_SLA:+--disk-sla "$DISK_SLA"} 2> "$WORK/ctl-$p-$r-$k.log" &
  CTL_PID=$!
  for _ in $(seq 1 600); do [ -f "$st/status.json" ] && break; sleep 0.1; done
  sleep 2
  res=$(bench "$MNT")
  # a failed run is over: stop its controller now rather than at RUN_S
  [ "${res#* }" = 0 ] || kill -TERM "$CTL_PID"
  wait "$CTL_PID" || { echo "controller failed:" >&2; cat "$WORK/ctl-$p-$r-$k.log" >&2; exit 1; }
  CTL_PID=
  btrfs_aborted "$ABORTS" "$dm0" "$p" "$r" "$k" && return 2
  python3 - "$p" "$r" "$k" "$res" "$st/status.json" "$csvf" >> "$RUNS_CSV" <<'PY'
import csv, json, sys
p, r, k, res, stf, csvf = sys.argv[1:]
secs, errs = res.split()
st = json.load(open(stf))
rows = list(csv.DictReader(open(csvf)))
adds = sum(1 for x in rows if x["action"] == "add")
rms = sum(1 for x in rows if x["action"] == "remove")
peak = max(int(x["allocated"]) for x in rows) >> 20
print(f"{p},{r},{k},{float(secs):.2f},{errs},{st['waste_gbh']:.5f},{adds},{rms},{peak}")
PY
  tail -1 "$RUNS_CSV" >&2
  [ "$k" = 1 ] && cp "$csvf" "$WORK/first-$p-$r.csv"
  [ "$(tail -1 "$RUNS_CSV" | cut -d, -f5)" = 0 ]
}

if [ -z "${PAGE_ONLY:-}" ] && [ -z "${ALTERNATE:-}" ]; then
for p in $POLICIES; do
  step "policy $p: smallest reserve with $RUNS failure-free runs"
  r=0
  while :; do
    ok=1
    for k in $(seq 1 "$RUNS"); do
      if ! until_not_aborted one_run "$p" "$r" "$k"; then ok=0; break; fi
    done
    if [ $ok = 1 ] || [ "$p" = prealloc ] || [ $r -ge "$MAX_RESERVE_MIB" ]; then break; fi
    r=$((r + 128))
  done
  cp "$WORK/first-$p-$r.csv" "$OUT/elastic-series$TAG-$p.csv"
done
fi
if [ -n "$TAG" ]; then
  step "figure of the $WHAT"
  # every policy's run 1 at this speed, those of earlier invocations too
  fig_csv "$TAG" prealloc reactive-add reactive-addrm predictive-paper predictive-estimated \
    predictive-probe predictive-measured predictive > "$WORK/fig.csv"
  "$BIN" plot lines --csv "$WORK/fig.csv" --x t_s --y gib --series series --out "$OUT/elastic-fig2b$TAG.svg" \
    --title "Elastic btrfs, $WHAT (run 1 of each policy)" \
    --xlabel "time since controller start (s)" --ylabel "GiB"
  steps_done
  note "runs in $RUNS_CSV; PAGE_ONLY=1 $0 puts them on the page"
  exit 0
fi
ALL="prealloc reactive-add reactive-addrm predictive-paper predictive-estimated predictive-probe predictive-measured predictive"
# each policy's chosen reserve: the smallest with RUNS failure-free runs (else the largest tried)
python3 - "$OUT/elastic-runs.csv" "$RUNS" $ALL > "$WORK/chosen" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
for p in sys.argv[3:]:
    rs = sorted({int(x["reserve_mib"]) for x in rows if x["policy"] == p})
    ok = [r for r in rs if sum(1 for x in rows if x["policy"] == p and int(x["reserve_mib"]) == r and x["app_errors"] == "0") >= int(sys.argv[2])]
    if rs:
        print(p, ok[0] if ok else rs[-1])
PY
if [ -n "${ALTERNATE:-}" ]; then
  step "$RUNS rounds of $POLICIES, alternated"
  for k in $(seq 1 "$RUNS"); do
    for p in $POLICIES; do
      r=$(awk -v p="$p" '$1 == p { print $2 }' "$WORK/chosen")
      until_not_aborted one_run "$p" "${r:-0}" "$k" || true
    done
  done
  steps_done
  exit 0
fi
POLICIES=$(cut -d' ' -f1 "$WORK/chosen" | tr '\n' ' ')

if [ -z "${PAGE_ONLY:-}" ]; then
step "replay the recorded series in the simulator"
# Replay each recorded series through the simulator with the same parameters; add
# and move times measured from the real run.
echo "policy,reserve_mib,real_waste_gbh,sim_waste_gbh,real_adds,sim_adds,real_removes,sim_removes,sim_failures,add_s,move_mibps" > "$OUT/elastic-sim.csv"
while read -r p r; do
  f="$OUT/elastic-series-$p.csv"
  read -r add_s move <<<"$(python3 - "$f" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
adds = [float(x["action_s"]) for x in rows if x["action"] == "add"]
rms = [(float(x["action_s"]), int(x["used"]) ) for x in rows if x["action"] == "remove"]
add_s = sum(adds) / len(adds) if adds else 0.5
# bytes moved ≈ the removed disk's share of usage; rate in MiB/s
mv = [u / 2**20 / max(s, 0.01) * 0.3 for s, u in rms]
print(f"{add_s:.3f} {sum(mv) / len(mv) if mv else 100:.1f}")
PY
)"
  sim=$("$BIN" sim elastic --usage-trace "$f" $(pargs "$p") --reserve "${r}M" "${SCALE[@]}" \
        --add-s "$add_s" --remove-s 0.2 --move-mibps "$move" --end-s "$RUN_S" --json)
  python3 - "$p" "$r" "$f" "$add_s" "$move" "$sim" "$OUT/elastic-runs.csv" >> "$OUT/elastic-sim.csv" <<'PY'
import csv, json, sys
p, r, f, add_s, move, sim, runs = sys.argv[1:]
s = json.loads(sim)["summary"]
run1 = [x for x in csv.DictReader(open(runs)) if x["policy"] == p and x["reserve_mib"] == r and x["run"] == "1"][0]
print(f"{p},{r},{run1['waste_gbh']},{s['waste_gbh']:.5f},{run1['adds']},{s['adds']},{run1['removes']},{s['removes']},{s['failures']},{add_s},{move}")
PY
done < "$WORK/chosen"
fi

DIRTY=$(git status --porcelain -- crates/elastic flexssd/src/elastic_cmd.rs flexssd/src/elastic scripts/exp-elastic.sh | head -1)
step "figure"
# Figure 2(b): used (predictive run), expected and allocated of every policy.
fig_csv "" $POLICIES > "$WORK/fig.csv"
"$BIN" plot lines --csv "$WORK/fig.csv" --x t_s --y gib --series series --out "$OUT/elastic-fig2b.svg" \
  --title "Elastic btrfs on vSSDs, 1/4-scale microbenchmark (run 1 of each policy)" \
  --xlabel "time since controller start (s)" --ylabel "GiB"

step "results page"
NOTE=${NOTE:-} OUT=$OUT RUN_S=$RUN_S RUNS=$RUNS COMMIT="$(git rev-parse --short HEAD)${DIRTY:+ plus uncommitted changes}" python3 - <<'PY'
import csv, os, statistics as S
OUT, RUN_S, COMMIT = os.environ["OUT"], os.environ["RUN_S"], os.environ["COMMIT"]
RUNS = int(os.environ["RUNS"])
runs = list(csv.DictReader(open(f"{OUT}/elastic-runs.csv")))
sims = {x["policy"]: x for x in csv.DictReader(open(f"{OUT}/elastic-sim.csv"))}
POL = [p for p in ["prealloc", "reactive-add", "reactive-addrm", "predictive-paper", "predictive-estimated", "predictive-probe", "predictive-measured", "predictive"] if p in sims]
chosen = {p: sims[p]["reserve_mib"] for p in POL}
sel = {p: [x for x in runs if x["policy"] == p and x["reserve_mib"] == chosen[p]] for p in POL}
ok = {p: all(x["app_errors"] == "0" for x in sel[p]) for p in POL}
mean = lambda p, k: S.mean(float(x[k]) for x in sel[p])
# a reduction in percent as "N% less", or "N% more" when negative
word = lambda x: f"{x:.0f}% less" if x >= 0 else f"{-x:.0f}% more"
rng = lambda p, k: (min(float(x[k]) for x in sel[p]), max(float(x[k]) for x in sel[p]))
sd = lambda p, k: S.stdev(float(x[k]) for x in sel[p]) if len(sel[p]) > 1 else 0.0
base_t = mean("prealloc", "completion_s") if "prealloc" in POL else None
base_w = mean("prealloc", "waste_gbh") if "prealloc" in POL else None
ra_w = mean("reactive-addrm", "waste_gbh") if "reactive-addrm" in POL else None
PAPER = {"prealloc": ("8 GB disk", "≈0.6", "0 (baseline)"), "reactive-add": ("2 GB", "≈0.43", "<2%"),
         "reactive-addrm": ("2 GB", "≈0.33", "<2%"), "predictive": ("0", "≈0.2 (33% < reactive-addrm, 66% < prealloc)", "<2%"),
         "predictive-paper": ("0", "≈0.2 (as predictive)", "<2%"),
         "predictive-estimated": ("0", "≈0.2 (as predictive)", "<2%"),
         "predictive-probe": ("0", "≈0.2 (as predictive)", "<2%"),
         "predictive-measured": ("0", "≈0.2 (as predictive)", "<2%")}
md = []
P = md.append
P("# Elastic storage: the IPDPS'14 microbenchmark on real btrfs over vSSDs")
P("")
P(f"Generated by `scripts/exp-elastic.sh` at commit {COMMIT}; do not edit by hand.")
P("")
P("Nicolae, Riteau, Keahey, *Towards Transparent Throughput Elasticity for IaaS Cloud Storage* "
  "(IPDPS'14), §IV-C: write files until the volume holds more than 6.5 GB, sync, then read everything "
  "back while deleting 4 GB. **Here at 1/4 scale in space and time**: 32 MiB files until more than "
  "1.6 GiB, sync, read back while deleting 1 GiB; INIT 256 MiB, INC 512 MiB, prealloc disk 2 GiB; "
  "TMIN 0.25 s, TMAX 1.25 s, AD 2.5 s, RD 15 s, reactive probe every 1.25 s. Every disk is a flexssd "
  "vSSD (fast mode) attached through nbdfuse and a loop device; btrfs grows with `btrfs device add` and "
  "shrinks with `btrfs device remove`. Each run lasts "
  f"{RUN_S} s from the controller's start (benchmark plus cool-down); waste is the paper's: "
  "allocated minus used, summed over 5-second intervals, in GiB·hours. The reserve of each policy is "
  "the smallest multiple of 128 MiB (from 0) with failure-free runs (no ENOSPC or other error in "
  "the benchmark). Numbers are from one 2-core VM; the paper used a cloud testbed.")
P("")
P("What the predictor reads as written bytes (`wb` of Algorithm 2) is the application's writes only. The volume "
  "counts writes at the loop devices under btrfs, and `btrfs device remove` copies every extent of the departing "
  "disk to the others: hundreds of MiB of device writes (and reads) while used space stays flat, which Algorithm 2 "
  "took for pending application data (issue 16). The volume brackets each removal (a blocking `btrfs device remove`, "
  "which commits before it returns) with two readings of the device counters and of used space, and subtracts the "
  "writes of that window except as much as used space grew in it; the series record it in the `relocated` column. "
  "Application writes that take new space during a removal still count; what the window wrote without growing the "
  "file system is btrfs's copy of the departing disk and the trees it rewrites to point at it (or an application "
  "overwrite, which needs no space). We chose this over "
  "counting writes at the file-system level because nothing below the application (statvfs, btrfs's sysfs) "
  "reports bytes written through the mount, and the controller must stay transparent to the application.")
P("")
P("## Results (mean ± standard deviation over the runs at the chosen reserve; min–max in brackets)")
P("")
P("| policy | reserve | failure-free | completion s | overhead vs prealloc | waste GiB·h | vs prealloc | adds / removes (run mean) | paper: reserve | paper: waste GB·h | paper: overhead |")
P("|---|---:|:-:|---:|---:|---:|---:|---:|---|---|---|")
for p in POL:
    t, w = mean(p, "completion_s"), mean(p, "waste_gbh")
    tl, th = rng(p, "completion_s"); wl, wh = rng(p, "waste_gbh")
    ov = f"{100 * (t / base_t - 1):+.1f}%" if base_t else "–"
    d = 100 * (1 - w / base_w) if base_w else 0
    vs = (f"{d:.0f}% less" if d >= 0 else f"{-d:.0f}% more") if base_w and p != "prealloc" else "–"
    P(f"| {p} | {chosen[p]} MiB | {'yes' if ok[p] else '**no**'} ({len(sel[p])} runs) | {t:.1f} ± {sd(p, 'completion_s'):.1f} [{tl:.1f}–{th:.1f}] | {ov} | "
      f"{w:.4f} ± {sd(p, 'waste_gbh'):.4f} [{wl:.4f}–{wh:.4f}] | {vs} | {mean(p, 'adds'):.1f} / {mean(p, 'removes'):.1f} | "
      f"{PAPER[p][0]} | {PAPER[p][1]} | {PAPER[p][2]} |")
P("")
P("All runs, including those of smaller reserves that failed: `elastic-runs.csv`.")
if os.environ.get("NOTE"):
    P("")
    P("**Note on these runs:** " + os.environ["NOTE"])
P("")
P("![used, expected and allocated over time](elastic-fig2b.svg)")
P("")
P("## Against the paper's claims")
P("")
claims = []
if "predictive" in POL and "reactive-addrm" in POL:
    pr, rr = int(chosen["predictive"]), int(chosen["reactive-addrm"])
    claims.append(f"- Reserve: predictive needs {pr} MiB, reactive-addrm {rr} MiB, reactive-add {chosen.get('reactive-add', '–')} MiB "
                  f"(paper: 0 against 2 GB, i.e. 512 MiB at our scale). "
                  + ("As in the paper, prediction removes the need for a reserve." if pr == 0 and rr > 0 else
                     "**We do not reproduce this**: " + ("predictive needs a reserve too." if pr > 0 else "the reactive policies needed no reserve here either (writes at this scale leave them time).")))
    pw = mean("predictive", "waste_gbh")
    red = 100 * (1 - pw / ra_w)
    claims.append(f"- Waste: predictive {word(red)} than reactive-addrm (paper 33% less) and "
                  f"{word(100 * (1 - pw / base_w))} than prealloc (paper 66% less)."
                  + ("" if red >= 33 and 100 * (1 - pw / base_w) >= 66 else " **Behind the paper here.**"))
    full = f"{OUT}/elastic-runs-100s.csv"
    if os.path.exists(full):
        # the same benchmark over the paper's whole 400 s (100 s at this scale):
        # RUN_S=100, prealloc, reactive-addrm and predictive only
        fr = list(csv.DictReader(open(full)))
        def full_pick(p):
            rs = sorted({int(x["reserve_mib"]) for x in fr if x["policy"] == p})
            good = [r for r in rs if sum(1 for x in fr if x["policy"] == p and int(x["reserve_mib"]) == r and x["app_errors"] == "0") >= RUNS]
            at = [x for x in fr if x["policy"] == p and int(x["reserve_mib"]) == good[0]] if good else []
            c = [float(x["completion_s"]) for x in at]
            return (good[0], S.mean(float(x["waste_gbh"]) for x in at), min(c), max(c)) if good else None
        fp, fa, fb = full_pick("predictive"), full_pick("reactive-addrm"), full_pick("prealloc")
        if fp and fa and fb:
            claims.append(f"- Over the paper's whole duration (400 s, 100 s here: `elastic-runs-100s.csv`, "
                          f"`TAG=-100s RUN_S=100`): predictive {fp[1]:.4f} GiB·h at {fp[0]} MiB, reactive-addrm {fa[1]:.4f} at "
                          f"{fa[0]} MiB, prealloc {fb[1]:.4f}: predictive {word(100 * (1 - fp[1] / fa[1]))} than "
                          f"reactive-addrm (paper 33% less) and {word(100 * (1 - fp[1] / fb[1]))} than prealloc "
                          "(paper 66% less). The 20 s more hold each policy's final allocation: reactive-addrm "
                          "keeps its reserve and an increment it may not remove, predictive only what the "
                          "increment size leaves. Completion there: predictive "
                          f"{fp[2]:.1f}–{fp[3]:.1f} s, reactive-addrm {fa[2]:.1f}–{fa[3]:.1f} s, prealloc {fb[2]:.1f}–{fb[3]:.1f} s, "
                          "the policies run one after another, not alternated, so the host's state between them "
                          "is in those figures too.")
    ov = 100 * (mean("predictive", "completion_s") / base_t - 1)
    claims.append(f"- Overhead, the table's runs (each policy's one after another, sessions apart): predictive "
                  f"completes {ov:+.1f}% against prealloc (paper: under 2%)."
                  + ("" if ov < 2 else " **Behind the paper here.**"))
    alt = f"{OUT}/elastic-overhead.csv"
    if os.path.exists(alt):
        # completion with the policies alternated run by run (ALTERNATE=1)
        ar = [x for x in csv.DictReader(open(alt)) if x["app_errors"] == "0"]
        # each run against prealloc's run of the same round: the host's state
        # changes between rounds more than within one
        base = {x["run"]: float(x["completion_s"]) for x in ar if x["policy"] == "prealloc"}
        ratio = {p: sorted(float(x["completion_s"]) / base[x["run"]] for x in ar if x["policy"] == p and x["run"] in base)
                 for p in ("reactive-addrm", "predictive", "predictive-measured")}
        if base and len(ratio["predictive"]) > 1:
            parts = [f"{p} {100 * (S.median(r) - 1):+.1f}% (rounds {100 * (r[0] - 1):+.0f}% to {100 * (r[-1] - 1):+.0f}%)"
                     for p, r in ratio.items() if r]
            failed = {p: sum(1 for x in csv.DictReader(open(alt)) if x["policy"] == p and x["app_errors"] != "0")
                      for p in ratio}
            claims.append(f"- Overhead with the policies alternated run by run (`elastic-overhead.csv`, `ALTERNATE=1 RUN_S=25`, "
                          f"{len(base)} rounds, each policy at the reserve the table chose when they ran; each run against prealloc's in the same round, median): "
                          + ", ".join(parts) + f"; prealloc {min(base.values()):.1f}–{max(base.values()):.1f} s "
                          "(paper: under 2%)."
                          + "".join(f" {p} failed (ENOSPC) in {n} of its {len(base)} rounds there, which are left out."
                                    for p, n in failed.items() if n))
if "predictive-paper" in POL and "predictive" in POL:
    ww, pw = mean("predictive-paper", "waste_gbh"), mean("predictive", "waste_gbh")
    claims.append(f"- Algorithm 2 as printed against ours: predictive-paper wastes {ww:.4f} GiB·h at "
                  f"{chosen['predictive-paper']} MiB, predictive {pw:.4f} GiB·h at {chosen['predictive']} MiB: "
                  + (f"ours {100 * (1 - pw / ww):.0f}% less" if pw <= ww else f"ours {100 * (pw / ww - 1):.0f}% more")
                  + f"; completion {mean('predictive', 'completion_s'):.1f} s against {mean('predictive-paper', 'completion_s'):.1f} s.")
    if "reactive-addrm" in POL:
        red_w = 100 * (1 - ww / ra_w)
        claims.append(f"- Algorithm 2 as printed against reactive-addrm: {word(red_w)} (paper 33% less).")
# predictive-estimated differs from predictive in the pending term only (both
# take the short-term rate over the horizon; predictive-probe differs in that)
twin = "predictive"
if "predictive-estimated" in POL and twin in POL:
    ew, pw = mean("predictive-estimated", "waste_gbh"), mean(twin, "waste_gbh")
    claims.append(f"- Pending writes as btrfs reports them ({twin}: `bytes_may_use`) against estimated from written "
                  f"bytes (predictive-estimated, reserve {chosen['predictive-estimated']} MiB): {pw:.4f} against {ew:.4f} GiB·h, "
                  + word(100 * (1 - pw / ew)) + ".")
if "predictive-measured" in POL and "predictive" in POL:
    mw, pw = mean("predictive-measured", "waste_gbh"), mean("predictive", "waste_gbh")
    adds = {}
    for p in ("predictive", "predictive-measured"):
        f = f"{OUT}/elastic-series-{p}.csv"
        if os.path.exists(f):
            adds[p] = [float(x["action_s"]) for x in csv.DictReader(open(f)) if x["action"] == "add"]
    took = (f" The adds of predictive's run 1 took {min(adds['predictive']):.2f}–{max(adds['predictive']):.2f} s "
            "(a vSSD created, attached through nbdfuse and a loop device, and `btrfs device add`), against the 2.5 s AD "
            "the paper's 10 s gives at this scale.") if adds.get("predictive") else ""
    ra = (f" Against reactive-addrm, predictive-measured wastes {word(100 * (1 - mw / ra_w))} (paper 33% less) and "
          f"{word(100 * (1 - mw / base_w))} than prealloc (paper 66% less).") if ra_w and base_w else ""
    claims.append(f"- AD measured from the volume's own adds (predictive-measured, `--add-delay measured`: twice the slowest "
                  f"add so far, reserve {chosen['predictive-measured']} MiB) against the paper's constant (predictive): "
                  f"{mw:.4f} against {pw:.4f} GiB·h, {word(100 * (1 - mw / pw))}; peak allocation "
                  f"{mean('predictive-measured', 'peak_alloc_mib'):.0f} against {mean('predictive', 'peak_alloc_mib'):.0f} MiB "
                  f"(run mean); completion {mean('predictive-measured', 'completion_s'):.1f} s against "
                  f"{mean('predictive', 'completion_s'):.1f} s, one policy's runs after the other's (the alternated runs "
                  "above compare completion side by side)." + took + ra + " It is not the default: under the bursty "
                  "sort/merge job of `elastic-multi.md` the shorter look-ahead failed at reserves of 0 and 128 MiB, "
                  "where the constant AD needs none.")
ours = "predictive"
if "predictive-probe" in POL and ours in POL:
    qw, pw = mean("predictive-probe", "waste_gbh"), mean(ours, "waste_gbh")
    claims.append(f"- The short-term rate over as much past as the prediction looks ahead ({ours}) against between "
                  f"the last two probes, as printed (predictive-probe, reserve {chosen['predictive-probe']} MiB): {pw:.4f} "
                  f"against {qw:.4f} GiB·h, {word(100 * (1 - pw / qw))}"
                  + f"; completion {mean(ours, 'completion_s'):.1f} s against {mean('predictive-probe', 'completion_s'):.1f} s.")
ab = f"{OUT}/elastic-aborts.csv"
ab = [x for x in csv.DictReader(open(ab)) if x["policy"] in POL] if os.path.exists(ab) else []
if ab:
    per = {p: sum(1 for x in ab if x["policy"] == p) for p in POL}
    claims.append("- Runs run again because the kernel's btrfs aborted a transaction (Linux 6.18: a chunk allocation "
                  "racing with `btrfs device add` fails with ENOENT, and the file system goes read-only, whatever the "
                  "reserve; `elastic-aborts.csv`): "
                  + ", ".join(f"{p} {n}" for p, n in per.items() if n) + ". They are not counted as the policy's failures.")
md.extend(claims)
if "prealloc" in POL and "predictive" in POL:
    tl, th = rng("prealloc", "completion_s")
    P(f"- Spread: prealloc alone completes in {tl:.1f}–{th:.1f} s over its runs (± {sd('prealloc', 'completion_s'):.1f} s), "
      f"predictive in {rng('predictive', 'completion_s')[0]:.1f}–{rng('predictive', 'completion_s')[1]:.1f} s: on this shared "
      "2-core VM an overhead within that spread is not measurable.")
ser = f"{OUT}/elastic-series-predictive.csv"
if os.path.exists(ser):
    rows = list(csv.DictReader(open(ser)))
    if rows and "relocated" in rows[0]:
        rel = int(rows[-1]["relocated"] or 0) >> 20
        rms = sum(1 for x in rows if x["action"] == "remove")
        P(f"- Relocation kept out of `wb` in predictive's run 1: {rel} MiB over {rms} removals.")
        idx = [i for i, x in enumerate(rows) if x["action"] == "remove-failed" and i + 1 < len(rows)]
        leak = sum(int(rows[i + 1]["written"]) - int(rows[i]["written"]) for i in idx) >> 20
        if leak > 0:
            P(f"- Still counted as writes in that run: {leak} MiB written during {len(idx)} failed removals "
              "(btrfs relocated some block groups, then gave up with ENOSPC). The predictive runs on this page "
              "were made before commit d09c95e, which accounts a failed removal's relocation too; they have not "
              "been rerun since (`KEEP_RUNS=1 POLICIES=predictive scripts/exp-elastic.sh`). After the first "
              "failure, the prediction exceeded used space by up to "
              f"{max(int(x['expected']) - int(x['used']) for x in rows[idx[0]:]) >> 20} MiB in that run.")
capped = f"{OUT}/elastic-runs-reloc-capped.csv"
if os.path.exists(capped):
    c = [x for x in csv.DictReader(open(capped)) if x["reserve_mib"] == "0"]
    cs = f"{OUT}/elastic-series-predictive-reloc-capped.csv"
    gap = ""
    if os.path.exists(cs):
        cr = list(csv.DictReader(open(cs)))
        rm = [float(x["t_s"]) for x in cr if x["action"] == "remove"]
        gaps = [b - a for a, b in zip(rm, rm[1:])]
        if gaps:
            gap = (f" In its run 1 the longest wait between two removals was {max(gaps):.1f} s: btrfs's tree "
                   "updates beyond the moved chunks (1.5 MiB after a 192 MiB move) counted as application writes, the "
                   "next probe was 'uncertain', and RD started again.")
    now_ser = f"{OUT}/elastic-series-predictive.csv"
    if gap and os.path.exists(now_ser):
        nr = list(csv.DictReader(open(now_ser)))
        rm = [float(x["t_s"]) for x in nr if x["action"] == "remove"]
        gaps = [b - a for a, b in zip(rm, rm[1:])]
        if gaps:
            gap += (f" Now, in run 1 above, the longest wait between two removals is {max(gaps):.1f} s "
                    f"({len(rm)} removals). The mean waste moved by less than the runs' spread: predictive's "
                    "peak allocation varies from run to run with how fast the writes go (rate × future), and "
                    "that, not the shrinking, sets most of the difference between runs.")
    if c:
        cw = S.mean(float(x["waste_gbh"]) for x in c)
        P("")
        P(f"Before used-space growth bounded the relocation (`elastic-runs-reloc-capped.csv`, {len(c)} runs at 0 MiB, "
          f"commit f3d9b6e): the window's writes were subtracted only up to what btrfs had allocated on the departing "
          f"disk; predictive wasted {cw:.4f} GiB·h with {S.mean(float(x['removes']) for x in c):.1f} removes a run."
          + gap)
old = f"{OUT}/elastic-runs-reloc-counted.csv"
if os.path.exists(old):
    o = list(csv.DictReader(open(old)))
    def ochosen(p):
        rs = sorted({int(x["reserve_mib"]) for x in o if x["policy"] == p})
        okr = [r for r in rs if sum(1 for x in o if x["policy"] == p and int(x["reserve_mib"]) == r and x["app_errors"] == "0") >= 3]
        return okr[0] if okr else rs[-1]
    om = lambda p, k: S.mean(float(x[k]) for x in o if x["policy"] == p and int(x["reserve_mib"]) == ochosen(p))
    ow, ra, pa = om("predictive", "waste_gbh"), om("reactive-addrm", "waste_gbh"), om("prealloc", "waste_gbh")
    P("")
    P("Before relocation was subtracted (`elastic-runs-reloc-counted.csv`, 3 runs per reserve, commit c4fa0d9): "
      f"predictive at {ochosen('predictive')} MiB wasted {ow:.4f} GiB·h, {word(100 * (1 - ow / ra))} than reactive-addrm "
      f"and {word(100 * (1 - ow / pa))} than prealloc, with {om('predictive', 'removes'):.1f} removes a run; after the "
      "first removal that moved data, the relocated bytes stayed in the predictor's history as pending writes "
      "(used space flat) and no further disk was removed.")
P("")
if os.path.exists(f"{OUT}/elastic-runs-nofloor.csv"):
    nf = [x for x in csv.DictReader(open(f"{OUT}/elastic-runs-nofloor.csv"))]
    P("")
    P("Before the uncertainty floor (`elastic-runs-nofloor.csv`, same script at commit 25f9e1f, the paper's "
      "test `pred - used > R` taken literally): predictive at R = 0 was failure-free too but removed no disk "
      f"in any run ({sum(int(x['removes']) for x in nf)} removes in {len(nf)} runs): btrfs writes a few KiB at every "
      "commit, so with R = 0 the idle volume stayed 'uncertain' forever; waste was "
      + ", ".join(f"{float(x['waste_gbh']):.4f}" for x in nf) + " GiB·h, above prealloc. The floor (4 MiB, "
      "`uncertainty_floor`) is our change to the paper's Algorithm 1.")
# the same benchmark on disks held to the paper's speed (DISK_MIBPS=N): one section per
# elastic-runs-disk<N>.csv
import glob, re
for f in sorted(glob.glob(f"{OUT}/elastic-runs-disk*.csv")):
    m = re.search(r"disk(\d+)\.csv$", f)
    if not m:
        continue
    n = m.group(1)
    dr = list(csv.DictReader(open(f)))
    dpol = [p for p in PAPER if any(x["policy"] == p for x in dr)]
    dsel = {}
    for p in dpol:
        rs = sorted({int(x["reserve_mib"]) for x in dr if x["policy"] == p})
        good = [r for r in rs if sum(1 for x in dr if x["policy"] == p and int(x["reserve_mib"]) == r and x["app_errors"] == "0") >= RUNS]
        r = good[0] if good else rs[-1]
        dsel[p] = (r, bool(good), [x for x in dr if x["policy"] == p and int(x["reserve_mib"]) == r])
    dm = lambda p, k: S.mean(float(x[k]) for x in dsel[p][2])
    dsd = lambda p, k: S.stdev(float(x[k]) for x in dsel[p][2]) if len(dsel[p][2]) > 1 else 0.0
    dr_ = lambda p, k: (min(float(x[k]) for x in dsel[p][2]), max(float(x[k]) for x in dsel[p][2]))
    P("")
    P(f"## The same benchmark on disks at the paper's speed ({n} MiB/s)")
    P("")
    P(f"`DISK_MIBPS={n} RUN_S=100 POLICIES=\"{' '.join(dpol)}\" scripts/exp-elastic.sh`: every disk is held to "
      f"{n} MiB/s of reads and writes together by an SLA curve of the daemon's scheduler (`--disk-sla`, Regulator's "
      "curve `[[0, N], [N, 0]]` in 4 KiB operations per second). The paper's disks were raw files on one local hard "
      "disk of its testbed (§IV-A; it gives no speed, and a hard disk of its time streams about this fast); scaling "
      "space and time by 1/4 keeps the paper's rates only if the disks keep its speed. On the unlimited vSSDs above "
      + (f"prealloc completes the benchmark in {base_t:.1f} s of a {RUN_S} s run, here in "
         f"{dm('prealloc', 'completion_s'):.1f} s of 100 s. " if base_t and "prealloc" in dsel else "the benchmark is over early in the run. ")
      + "Each disk has its own limit (the paper's disks shared one hard disk, so here a volume of several disks has more bandwidth than prealloc's one disk, and completion times are not comparable), and the files "
      "read back are mostly in the page cache, as in the paper's 8 GB VM. Runs of 100 s, the paper's 400 s scaled. "
      f"All runs: `elastic-runs-disk{n}.csv`; run 1's series: `elastic-series-disk{n}-<policy>.csv`.")
    P("")
    P("| policy | reserve | failure-free | completion s | overhead vs prealloc | waste GiB·h | vs prealloc | vs reactive-addrm | adds / removes (run mean) |")
    P("|---|---:|:-:|---:|---:|---:|---:|---:|---:|")
    bt = dm("prealloc", "completion_s") if "prealloc" in dsel else None
    bw = dm("prealloc", "waste_gbh") if "prealloc" in dsel else None
    aw = dm("reactive-addrm", "waste_gbh") if "reactive-addrm" in dsel else None
    for p in dpol:
        r, good, rows = dsel[p]
        t, w = dm(p, "completion_s"), dm(p, "waste_gbh")
        (tl, th), (wl, wh) = dr_(p, "completion_s"), dr_(p, "waste_gbh")
        P(f"| {p} | {r} MiB | {'yes' if good else '**no**'} ({len(rows)} runs) | {t:.1f} ± {dsd(p, 'completion_s'):.1f} [{tl:.1f}–{th:.1f}] | "
          + (f"{100 * (t / bt - 1):+.1f}%" if bt else "–") + f" | {w:.4f} ± {dsd(p, 'waste_gbh'):.4f} [{wl:.4f}–{wh:.4f}] | "
          + (word(100 * (1 - w / bw)) if bw and p != "prealloc" else "–") + " | "
          + (word(100 * (1 - w / aw)) if aw and p not in ("prealloc", "reactive-addrm") else "–")
          + f" | {dm(p, 'adds'):.1f} / {dm(p, 'removes'):.1f} |")
    if bw and aw and "predictive" in dsel:
        pw, pt = dm("predictive", "waste_gbh"), dm("predictive", "completion_s")
        ra, la = 100 * (1 - pw / aw), 100 * (1 - pw / bw)
        P("")
        P(f"Against the paper: predictive wastes {word(ra)} than reactive-addrm (paper 33% less) and {word(la)} than "
          f"prealloc (paper 66% less), completing {100 * (pt / bt - 1):+.1f}% against prealloc (paper: under 2%); "
          f"reserves {dsel['predictive'][0]} MiB against reactive-addrm's {dsel['reactive-addrm'][0]} MiB "
          "(paper: 0 against 512 MiB at our scale)."
          + ("" if ra >= 33 and la >= 66 else " **Still behind the paper**" + (" on the reduction against prealloc." if ra >= 33 else ".")))
    # where the rest goes: run 1's waste while RD holds the predictive policy back
    # (from the first fall of used space to its first removal) and after it
    sp, sr = f"{OUT}/elastic-series-disk{n}-predictive.csv", f"{OUT}/elastic-series-disk{n}-reactive-addrm.csv"
    if os.path.exists(sp) and os.path.exists(sr):
        def phases(f):
            rows = [(float(x["t_s"]), int(x["used"]), int(x["allocated"]), x["action"]) for x in csv.DictReader(open(f))]
            peak = max(range(len(rows)), key=lambda i: rows[i][1])
            fall = next((i for i in range(peak, len(rows)) if rows[i][1] < rows[peak][1]), len(rows) - 1)
            rm = next((i for i in range(fall, len(rows)) if rows[i][3] == "remove"), len(rows) - 1)
            w = lambda a, b: sum((rows[i + 1][0] - rows[i][0]) * max(rows[i][2] - rows[i][1], 0) for i in range(a, b)) / 2**30 / 3600
            return w(0, fall), w(fall, rm), w(rm, len(rows) - 1), rows[rm][0] - rows[fall][0], rows[-1][2] >> 20
        pw_, pd_, pa_, pt_, pf_ = phases(sp)
        rw_, rd_, ra_, rt_, rf_ = phases(sr)
        P("")
        P(f"Where the rest goes (run 1, GiB·h): predictive {pw_:.4f} while writing, {pd_:.4f} in the {pt_:.1f} s from the "
          f"first fall of used space to its first removal (RD, the paper's 60 s / 4, counted from the last 'uncertain' "
          f"probe, with the disks the writes needed still attached), {pa_:.4f} after, ending at {pf_} MiB; reactive-addrm "
          f"{rw_:.4f}, {rd_:.4f} ({rt_:.1f} s) and {ra_:.4f}, ending at {rf_} MiB (its reserve keeps an increment the "
          "predictive policy sheds). The paper's predictive policy gains on reactive-addrm after the writes; ours does, "
          "by the final allocation, but gives most of it back while RD runs.")
    bc = f"{OUT}/elastic-runs-disk{n}-before-compaction.csv"
    if os.path.exists(bc) and "predictive" in dsel:
        # the same runs before a removal could compact (commit f60f492)
        br = [x for x in csv.DictReader(open(bc)) if x["app_errors"] == "0"]
        parts = []
        for p in ("predictive", "reactive-addrm"):
            b = [x for x in br if x["policy"] == p]
            if b and p in dsel:
                parts.append(f"{p} wasted {S.mean(float(x['waste_gbh']) for x in b):.4f} GiB·h at {b[0]['reserve_mib']} MiB "
                             f"with {S.mean(int(x['removes']) for x in b):.1f} removes a run ({len(b)} runs), against "
                             f"{dm(p, 'waste_gbh'):.4f} and {dm(p, 'removes'):.1f} now")
        if parts:
            P("")
            P(f"Before a removal could compact (`{os.path.basename(bc)}`, commit f60f492): " + "; ".join(parts) + ". "
              "Then predictive, after its first removals, found at every probe four 512 MiB disks with 480-511 MiB "
              "allocated each for 646 MiB of data (block groups left partly empty by the deletes), no disk fitting in "
              "the others' unallocated space, and kept two disks more than its data needed to the end of the run; "
              "reactive-addrm's 256 MiB first disk fitted on paper, but btrfs refused to remove it (ENOSPC) at every "
              "probe, and nothing else was tried.")
    if os.path.exists(f"{OUT}/elastic-fig2b-disk{n}.svg"):
        P("")
        P(f"![disks at {n} MiB/s: used, expected and allocated over time](elastic-fig2b-disk{n}.svg)")
ser = lambda p: f"{OUT}/elastic-series-{p}.csv"
if all(os.path.exists(ser(p)) for p in ("predictive", "reactive-addrm")):
    P("")
    P("## Where predictive's waste goes (run 1 of each, GiB·h by phase)")
    P("")
    P("Waste split at the moment used space starts to fall (the benchmark's delete phase): before it the policies "
      "allocate ahead of the writes, after it they shrink. `to first removal` is from the first delete to the first "
      "disk removed; `removes failed` counts removals that did not happen: before commit 6c726b9 `btrfs device remove` "
      "refusals of the last disk added (ENOSPC: btrfs could not fit the data in the remaining disks' chunks although "
      "used + reserve fits their size); since, the volume removes the largest disk that fits in the others' unallocated space "
      "(the one holding the least among equals: `elastic::pick_removal`), and a removal counts as failed when no disk fits "
      "or btrfs still refuses. Since commits 2aa95c7 and 1e1338d, when no disk fits, or btrfs refuses every one that does, "
      "the volume first compacts the data block groups (`btrfs balance -dusage=20`, then 50, then 80) and tries once "
      "more; a removal fails only if that does not help either.")
    P("")
    P("| policy | peak allocated MiB | waste while writing | waste after | final allocated MiB (used MiB) | to first removal s | removes failed |")
    P("|---|---:|---:|---:|---:|---:|---:|")
    peaks = {}
    for p in ("prealloc", "reactive-addrm", "predictive-paper", "predictive-estimated", "predictive-probe", "predictive"):
        if not os.path.exists(ser(p)):
            continue
        rows = list(csv.DictReader(open(ser(p))))
        t = [float(x["t_s"]) for x in rows]
        u = [int(x["used"]) for x in rows]
        a = [int(x["allocated"]) for x in rows]
        peak_i = max(range(len(u)), key=lambda i: (u[i], -i))
        drop_i = next((i for i in range(peak_i, len(u)) if u[i] < u[peak_i]), len(u) - 1)
        w = [0.0, 0.0]
        for i in range(len(rows) - 1):
            w[0 if i < drop_i else 1] += max(a[i] - u[i], 0) / 2**30 * (t[i + 1] - t[i]) / 3600
        first_rm = next((t[i] for i in range(drop_i, len(rows)) if rows[i]["action"] == "remove"), None)
        fails = sum(1 for x in rows if x["action"] == "remove-failed")
        peaks[p] = max(a)
        P(f"| {p} | {max(a) >> 20} | {w[0]:.4f} | {w[1]:.4f} | {a[-1] >> 20} ({u[-1] >> 20}) | "
          f"{'–' if first_rm is None else f'{first_rm - t[drop_i]:.1f}'} | {fails} |")
    P("")
    P("A predictive policy may remove a disk only RD (15 s at this scale, the paper's 60 s / 4) after its last "
      "'uncertain' probe. With Algorithm 2 as printed (predictive-paper) that probe comes when used space first "
      "falls (the deletes), not at the end of the writes: while used space stays flat (the sync and the read-back "
      "before the deletes) the history is kept whole, every byte written in it counts as possibly pending, and the "
      "write trend is fitted to all of it, so the burst that ended keeps the prediction above usage; while writing "
      "it allocates for used + the bytes written in its window (which used space already shows) + rate × "
      "(2·next + AD). Ours takes the pending bytes from btrfs itself (predictive: its data space's "
      "`bytes_may_use`, what it has promised to writes not yet allocated) or estimates them as the written bytes less "
      "the growth of used space over the same history (predictive-estimated), so the writes "
      "that used space shows are not counted twice, and fits the trend to the window's probes only, so the "
      "prediction returns to usage one window after the writes stop and RD starts then. Its short-term rate is "
      "measured over as much past as the prediction looks ahead (2·next + AD), not between the last two probes as "
      "printed (predictive-probe), so a write-back burst within one probe counts once instead of being extrapolated "
      "over the look-ahead as a sustained rate. Reactive-addrm has "
      "no such delay and removes as soon as free space exceeds reserve + increment. Peak allocation in run 1: "
      + ", ".join(f"{p} {peaks[p] >> 20} MiB" for p in peaks) + ". "
      f"Each run here lasts {RUN_S} s (the paper's 400 s scaled would be 100 s).")
P("")
P("## Simulator against the real runs")
P("")
P("Run 1's recorded series (used and written bytes per probe) replayed by `flexssd sim elastic` through "
  "the same controller, with add time and move rate measured from that run. The replay cannot slow the "
  "application down, so it is a check of the controller, not of btrfs.")
P("")
P("| policy | reserve | real waste | sim waste | real adds / removes | sim adds / removes | sim failures |")
P("|---|---:|---:|---:|---:|---:|---:|")
for p in POL:
    s = sims[p]
    P(f"| {p} | {s['reserve_mib']} MiB | {float(s['real_waste_gbh']):.4f} | {float(s['sim_waste_gbh']):.4f} | "
      f"{s['real_adds']} / {s['real_removes']} | {s['sim_adds']} / {s['sim_removes']} | {s['sim_failures']} |")
P("")
open(f"{OUT}/elastic.md", "w").write("\n".join(md) + "\n")
PY
echo "wrote $OUT/elastic.md" >&2
steps_done

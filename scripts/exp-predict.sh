#!/usr/bin/env bash
# Accuracy and waste of the BlockFlex predictors (crates/predict) on inputs never seen
# in training, against the paper's Figure 14: `flexssd sim predict --split` over the
# published split docs/results/predict-split.txt (the BlockFlex artifact inputs,
# ../shared/traces/blockflex/, and the 80 CloudPhysics 30-minute workloads,
# ../shared/traces/cloudphysics-30min/: half train, half test), for provisioning
# ratios 0, 5, 10, 20, 30 %. Models: the paper's LSTM (`model = "lstm"`), the quantile
# model (`model = "quantile"`, with the prior fitted on the training inputs and
# without one) and last-value. All inputs are real traces.
# Writes, and overwrites:
#
#   docs/results/predict.csv           one row per test input, metric, model, ratio
#   docs/results/predict.svg           accuracy against ratio (Figure 14 style)
#   docs/results/predict-tradeoff.csv  accuracy and waste of every model's knob swept (ratio 0)
#   docs/results/predict-tradeoff.svg  the accuracy/waste trade-off curves
#   docs/results/predict-cost.csv      measured training/inference time and model size
#   docs/results/predict-swapped.csv   the quantile model and last-value with train and test swapped
#   docs/results/predict-swapped-tradeoff.csv
#   docs/results/predict-pinball.csv   artifact test inputs, LSTM with pinball-loss (20% quantile) durations
#   docs/results/predict-pinball.svg
#   docs/results/predict.md            the paper's numbers beside ours (generated: edit this script)
#
#   scripts/exp-predict.sh             every input of the split (about 20 minutes on 2 cores)
#   CP_N=10 scripts/exp-predict.sh     only the first 10 CloudPhysics test workloads (iteration)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
note "building flexssd (release)"
scripts/build-deps.sh; cargo build --release -q -p flexssd
BIN=$PWD/target/release/flexssd
T=../shared/traces
OUT=docs/results
SPLIT=$OUT/predict-split.txt
mkdir -p "$OUT"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
if [ -n "${CP_N:-}" ]; then
  awk -v n="$CP_N" '$1 == "test" && $2 == "cloudphysics" { if (++k > n) next } { print }' "$SPLIT" > "$TMP/split.txt"
  RUN_SPLIT=$TMP/split.txt
else
  RUN_SPLIT=$SPLIT
fi
grep -v cloudphysics "$SPLIT" > "$TMP/split-blockflex.txt"
awk '$1 == "train" { $1 = "test"; print; next } $1 == "test" { $1 = "train"; print; next } { print }' "$SPLIT" > "$TMP/swapped.txt"
START=$(date +%s)
steps 4
step "sim predict: every model on the test inputs of $RUN_SPLIT"
"$BIN" sim predict --split "$RUN_SPLIT" --traces "$T" --ratios 0,5,10,20,30 \
  --csv "$OUT/predict.csv" --plot "$OUT/predict.svg" \
  --tradeoff "$OUT/predict-tradeoff.csv" --tradeoff-plot "$OUT/predict-tradeoff.svg" \
  --cost "$OUT/predict-cost.csv" > "$TMP/table.txt"
MID=$(date +%s)
step "sim predict: quantile model and last-value with train and test swapped"
"$BIN" sim predict --split "$TMP/swapped.txt" --traces "$T" --models quantile --ratios 0,5 \
  --csv "$OUT/predict-swapped.csv" --tradeoff "$OUT/predict-swapped-tradeoff.csv" > /dev/null
MID=$(date +%s)
printf '[duration]\nloss = "pinball"\nquantile = 0.2\n' > "$TMP/pinball.toml"
step "sim predict: artifact test inputs, LSTM with pinball durations"
"$BIN" sim predict --split "$TMP/split-blockflex.txt" --traces "$T" --models lstm --config "$TMP/pinball.toml" \
  --ratios 0,5,10,20,30 --csv "$OUT/predict-pinball.csv" --plot "$OUT/predict-pinball.svg" > /dev/null
END=$(date +%s)

step "results page"
DIRTY=$(git status --porcelain -- crates/predict flexssd/src/sim_predict.rs | head -1)
OUT=$OUT SPLIT=$SPLIT CP_N=${CP_N:-all} SECS1=$((MID - START)) SECS2=$((END - MID)) NPROC=$(nproc) \
LOAD="$(cut -d' ' -f1-3 /proc/loadavg)" \
COMMIT="$(git rev-parse --short HEAD)${DIRTY:+ plus uncommitted changes}" python3 - <<'PY'
import csv, os
from collections import defaultdict
OUT = os.environ["OUT"]
ENV = os.environ

def load(path):
    acc = defaultdict(lambda: [0.0, 0.0, 0.0, 0.0, 0])
    for r in csv.DictReader(open(path)):
        if int(r["n"]) == 0:
            continue
        k = (r["source"], r["metric"], r["model"], float(r["ratio_pct"]))
        a = acc[k]
        for i, c in enumerate(["accuracy", "over", "under", "waste"]):
            a[i] += float(r[c])
        a[4] += 1
    return {k: [v[0] / v[4], v[1] / v[4], v[2] / v[4], v[3] / v[4], v[4]] for k, v in acc.items()}

def load_trade(path):
    acc = defaultdict(lambda: [0.0, 0.0, 0])
    for r in csv.DictReader(open(path)):
        a = acc[(r["source"], r["metric"], r["model"], r["knob"])]
        a[0] += float(r["accuracy"]); a[1] += float(r["waste"]); a[2] += 1
    return {k: (v[0] / v[2], v[1] / v[2]) for k, v in acc.items()}

res, pin, trade = load(f"{OUT}/predict.csv"), load(f"{OUT}/predict-pinball.csv"), load_trade(f"{OUT}/predict-tradeoff.csv")
cost = list(csv.DictReader(open(f"{OUT}/predict-cost.csv")))
METRICS = ["bandwidth", "capacity", "bandwidth_duration", "capacity_duration"]
SOURCES = ["blockflex", "cloudphysics"]
PAPER0 = {"bandwidth": 89, "capacity": 93, "bandwidth_duration": 79, "capacity_duration": 79}
SRC = {"bandwidth": "Alibaba bw", "capacity": "Google size", "bandwidth_duration": "Alibaba bw", "capacity_duration": "Google size"}
NAME = {"lstm": "paper LSTM", "quantile": "quantile (ours)", "quantile_online": "quantile, no prior", "last": "last-value"}
pct = lambda x: f"{100 * x:.1f} %"
split_lines = [l.split() for l in open(ENV["SPLIT"]) if l.strip() and not l.startswith("#")]
n_train = {s: sum(1 for l in split_lines if l[0] == "train" and l[1] == s) for s in SOURCES}
n_test = {s: sum(1 for l in split_lines if l[0] == "test" and l[1] == s) for s in SOURCES}

def frontier(src, met, model, res=res, trade=trade):
    """Lower envelope of waste against accuracy over every point of `model`:
    its knob swept at ratio 0 and its provisioning ratios."""
    pts = [(a, w) for (s, m, md, _), (a, w) in trade.items() if (s, m, md) == (src, met, model)]
    pts += [(v[0], v[3]) for (s, m, md, _), v in res.items() if (s, m, md) == (src, met, model)]
    pts.sort()
    f = []
    for x, y in pts:
        while f and f[-1][1] >= y:
            f.pop()
        f.append((x, y))
    return f

def waste_at(f, x):
    """Waste the frontier needs to be at least x accurate (linear between points)."""
    if not f:
        return None
    if x <= f[0][0]:
        return f[0][1]
    for (x0, y0), (x1, y1) in zip(f, f[1:]):
        if x0 <= x <= x1:
            return y0 + (y1 - y0) * (x - x0) / max(x1 - x0, 1e-12)
    return None  # beyond the most accurate point

md = []
P = md.append
P("# BlockFlex predictors on unseen inputs: accuracy and waste against the paper (Figure 14)")
P("")
P(f"Generated by `scripts/exp-predict.sh` (commit {ENV['COMMIT']}; {ENV['SECS1']} s for the main run and {ENV['SECS2']} s for the "
  f"pinball run on {ENV['NPROC']} cores, load average {ENV['LOAD']} at the end). Do not edit by hand. All inputs are real traces; "
  "nothing here is synthetic.")
P("")
P("Every number on this page is measured on **test inputs that no model was trained or tuned on**: the split is published in "
  f"[`predict-split.txt`](predict-split.txt) (BlockFlex artifact: {n_train['blockflex']} train / {n_test['blockflex']} test files; "
  f"CloudPhysics: {n_train['cloudphysics']} train / {n_test['cloudphysics']} test VMs, odd/even by sorted name"
  + ("" if ENV["CP_N"] == "all" else f"; this run used only the first {ENV['CP_N']} CloudPhysics test VMs") + ").")
P("")
P("![accuracy/waste trade-off](predict-tradeoff.svg)")
P("")
P("## Setup")
P("")
P("* **paper LSTM** (`model = \"lstm\"`, the default of `PredictorConfig`): bandwidth LSTM 16 hidden, lr 0.005; capacity LSTM 4 hidden, "
  "lr 0.04, both softmax over 17 levels (0..16) trained with cross-entropy; one duration sub-predictor per level, 50 hidden, lr 0.003, "
  "MSE; Adam; 5 Adam steps every 3 minutes on the preceding 15 minutes (at least 8 samples). Online per input: it needs no training "
  "inputs, so it is simply run on the test inputs.")
P("* **quantile (ours)** (`model = \"quantile\"`, `crates/predict/src/quantile.rs`): levels: the distribution of the next level given "
  "the current one, `(w0 · prior + own transitions) / (w0 + n)`, read out at quantile `level_quantile = 0.8`; the prior is the "
  "transition matrix of the training inputs of the same source and resource (`w0 = level_prior_weight = 3`), and without a prior a "
  "point mass at the current level, so an untrained model is exactly last-value. Durations: survival on the empirical run lengths "
  "at or below the level (own runs, the training inputs' runs with total weight `duration_prior_weight = 5`, and one run of length "
  "zero, `zero_weight = 1`), conditioned on how long the current run has lasted, read out at `duration_quantile = 0.15`; a run "
  "that has outlived every run seen (or the 12.5-hour cap the runs are counted to) is given a share of its age instead, "
  "`e · q / (1 - q)` (the scale-free prior; before commit 41f0d67 it was given nothing). "
  "Trains every window (counting). **quantile, no prior** is the same model without training inputs: what the daemon runs today "
  "(its config has no prior yet).")
P("* **last-value**: the next level equals the current one; a run lasts as long again as it has so far.")
P("* Inputs: the artifact's inputs are stepped in 18 s steps up to 10,000 steps as the artifact does (about 50 hours each); the "
  "CloudPhysics 30-minute features give bandwidth = bytes per window and capacity = the page working set, each in sixteenths of the "
  "VM's peak, about 300 windows each (training every window, since a window is longer than the 3-minute period).")
P("* Accuracy as the paper defines it: a level prediction, over-provisioned by the ratio (`ceil(level × (1 + r))`), is accurate if "
  "it is at least the actual level of the next window; a duration prediction, under-provisioned (`/(1 + r)`), is accurate if "
  "usage stays at or below the current level at least that long, in whole 30-minute units (the artifact's granularity; cap 12.5 h). "
  "Waste beside it: for levels, the mean over-provisioned share of the device (channels or capacity) left idle; for durations, the "
  "share of the actually available time not used by the prediction. Averages weigh every input equally (as the paper averages "
  "workloads); every model is judged on the same windows, the first 5 predictions of a series not judged.")
P("* **Trade-off** (plot above, `predict-tradeoff.csv`): every model has a knob that trades waste for accuracy. For the quantile "
  "model it is the quantile (levels q = 0.5..0.98, durations q = 0.02..0.5); for last-value and the LSTM, levels raised by +0..+4 "
  "and durations scaled by ×1..×0.05; the provisioning ratios are points too. \"Last-value's waste at equal accuracy\" below is "
  "read off last-value's lower envelope over all its points (linear between points).")
P("")
P("## Goals on unseen inputs (issue 15)")
P("")
P("| source | predictor | last-value, 0 % | paper LSTM, 0 % | **ours, 0 %** | ours, 5 % | ours' waste, 0 % / 5 % | last-value's waste at ours' accuracy, 0 % / 5 % | paper LSTM's waste at ours' accuracy (its knob swept), 0 % / 5 % |")
P("|---|---|---:|---:|---:|---:|---:|---:|---:|")
lstm_better = []
goal_rows = []
for src in SOURCES:
    for m in METRICS:
        k = lambda md, r: res.get((src, m, md, r))
        q0, q5, l0, p0 = k("quantile", 0.0), k("quantile", 5.0), k("last", 0.0), k("lstm", 0.0)
        if not q0:
            continue
        f = frontier(src, m, "last")
        b0, b5 = waste_at(f, q0[0]), waste_at(f, q5[0])
        fmt = lambda b: "beyond that model's most accurate point" if b is None else pct(b)
        fl = frontier(src, m, "lstm")
        c0, c5 = waste_at(fl, q0[0]), waste_at(fl, q5[0])
        for r, q, c in ((0, q0, c0), (5, q5, c5)):
            if c is not None and q[3] > c + 1e-4:
                lstm_better.append((src, m, r, q, c))
        P(f"| {src} | {m.replace('_', ' ')} | {pct(l0[0])} | {pct(p0[0]) if p0 else '–'} | **{pct(q0[0])}** | {pct(q5[0])} | "
          f"{pct(q0[3])} / {pct(q5[3])} | {fmt(b0)} / {fmt(b5)} | {fmt(c0) if fl else '–'} / {fmt(c5) if fl else '–'} |")
        goal_rows.append((src, m, q0, q5, l0, b0, b5))
P("")
a_ok = [(s, m) for s, m, q0, q5, l0, b0, b5 in goal_rows if m in ("bandwidth", "capacity") and q0[0] < l0[0] - 1e-9]
b_ok = [(s, m, q5[0]) for s, m, q0, q5, l0, b0, b5 in goal_rows if q5[0] < 0.93]
c_ok = [(s, m, r) for s, m, q0, q5, l0, b0, b5 in goal_rows for r, q, b in ((0, q0, b0), (5, q5, b5)) if b is not None and q[3] > b + 1e-4]
P("* (a) at least as accurate as last-value on both levels at 0 %: " + ("**met** on every source." if not a_ok else
  "**not met** on " + ", ".join(f"{s} {m}" for s, m in a_ok) + "."))
P("* (b) at least 93 % on all four predictors at 5 %: " + ("**met** on every source." if not b_ok else
  "**not met** on " + ", ".join(f"{s} {m.replace('_', ' ')} ({pct(a)})" for s, m, a in b_ok) + "."))
P("* (c) waste no higher than last-value's at equal accuracy: " + ("**met** at 0 % and 5 % on every source and predictor." if not c_ok else
  "**not met** on " + ", ".join(f"{s} {m.replace('_', ' ')} at {r} %" for s, m, r in c_ok) + "."))
P("")
swap, swap_t = load(f"{OUT}/predict-swapped.csv"), load_trade(f"{OUT}/predict-swapped-tradeoff.csv")
P("### The same goals with train and test swapped")
P("")
P("A check that the settings were not tuned to one half of the data: the quantile model refitted on the test half and "
  "judged on the training half (`predict-swapped.csv`; the LSTM is not rerun, it does not use training inputs).")
P("")
P("| source | predictor | last-value, 0 % | **ours, 0 %** | ours, 5 % | ours' waste, 0 % / 5 % | last-value's waste at ours' accuracy, 0 % / 5 % |")
P("|---|---|---:|---:|---:|---:|---:|")
swap_bad = []
for src in SOURCES:
    for m in METRICS:
        q0, q5, l0 = swap.get((src, m, "quantile", 0.0)), swap.get((src, m, "quantile", 5.0)), swap.get((src, m, "last", 0.0))
        if not (q0 and q5 and l0):
            continue
        f = frontier(src, m, "last", swap, swap_t)
        b0, b5 = waste_at(f, q0[0]), waste_at(f, q5[0])
        fmt = lambda b: "beyond that model's most accurate point" if b is None else pct(b)
        P(f"| {src} | {m.replace('_', ' ')} | {pct(l0[0])} | **{pct(q0[0])}** | {pct(q5[0])} | {pct(q0[3])} / {pct(q5[3])} | {fmt(b0)} / {fmt(b5)} |")
        if (m in ("bandwidth", "capacity") and q0[0] < l0[0] - 1e-9) or q5[0] < 0.93 or any(
                b is not None and q[3] > b + 1e-4 for q, b in ((q0, b0), (q5, b5))):
            swap_bad.append(f"{src} {m.replace('_', ' ')}")
P("")
P("* Swapped: goals (a), (b) and (c) " + ("**hold** on every source and predictor." if not swap_bad else
  "are **missed** on " + ", ".join(swap_bad) + "."))
P("")
P("## The paper's numbers beside ours (BlockFlex artifact test inputs)")
P("")
P("| predictor | input | paper, no provisioning | paper LSTM (ours), 0 % | last-value, 0 % | **quantile, 0 %** | paper, 5 % | paper LSTM, 5 % | **quantile, 5 %** | waste at 5 %: LSTM / quantile | LSTM with pinball durations, 0 % / 5 % |")
P("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for m in METRICS:
    g = lambda md, r: res.get(("blockflex", m, md, r))
    a0, a5, b0, q0, q5 = g("lstm", 0.0), g("lstm", 5.0), g("last", 0.0), g("quantile", 0.0), g("quantile", 5.0)
    if not (a0 and q0):
        continue
    p0, p5 = pin.get(("blockflex", m, "lstm", 0.0)), pin.get(("blockflex", m, "lstm", 5.0))
    pinball = f"{pct(p0[0])} / {pct(p5[0])}" if p0 and p5 else "–"
    P(f"| {m.replace('_', ' ')} | {SRC[m]} ({a0[4]} files) | {PAPER0[m]} % | {pct(a0[0])} | {pct(b0[0])} | **{pct(q0[0])}** | 93–96 % | "
      f"{pct(a5[0])} | **{pct(q5[0])}** | {pct(a5[3])} / {pct(q5[3])} | {pinball} |")
P("")
P("## Training and inference cost, measured on these inputs")
P("")
P("Measured inside `sim predict` (release build, one thread per series, wall-clock around the calls): a training period is what "
  "runs every 3 minutes of trace time (every window for CloudPhysics), the level and duration models of one resource together; "
  "inference is one level and one duration prediction. Per vSSD and round, bandwidth and capacity add up. The paper's Table 3: "
  "training 475 ms, inference 7.3 ms, 1.7 MB per vSSD; the goal is at most 47 ms of training per vSSD per round. Times are "
  "wall-clock on the shared 2-core machine while other jobs ran (the load at the end of the run is in the first line), so "
  "they are upper bounds; BENCHMARKS.md has the LSTM on an idle machine (17.5 ms per vSSD per round on synthetic inputs; its "
  "duration sub-predictors train by hand since 2026-11-29, `crates/predict/src/cell.rs`, 4.2x faster than through candle).")
P("")
P("| source | model | training per vSSD per round, mean (max) | inference per vSSD | model state per vSSD |")
P("|---|---|---:|---:|---:|")
per = defaultdict(lambda: [0.0, 0.0, 0.0, 0])
for c in cost:
    e = per[(c["source"], c["model"])]
    e[0] += float(c["train_ms_mean"]); e[1] += float(c["train_ms_max"]); e[2] += float(c["infer_us_mean"]); e[3] += int(c["model_bytes"])
for (src, model), e in sorted(per.items()):
    P(f"| {src} | {NAME[model]} | {e[0]:.3f} ms ({e[1]:.3f} ms) | {e[2]:.1f} µs | {e[3] / 1024:.1f} KiB |")
P("")
P("The quantile model's state is its own transition counts and run lengths (the prior is shared by all vSSDs of a host and not "
  "counted: 17 × 17 floats plus the training inputs' run lengths). The LSTM's counts weights and both Adam moments.")
P("")
P("## Every input set, every ratio")
P("")
P("| source | metric | ratio | paper LSTM: accuracy / waste | quantile: accuracy / waste | quantile, no prior | last-value | inputs |")
P("|---|---|---:|---:|---:|---:|---:|---:|")
for src in SOURCES:
    for m in METRICS:
        for r in [0.0, 5.0, 10.0, 20.0, 30.0]:
            cells = []
            for mdl in ["lstm", "quantile", "quantile_online", "last"]:
                v = res.get((src, m, mdl, r))
                cells.append(f"{pct(v[0])} / {pct(v[3])}" if v else "–")
            n = res.get((src, m, "last", r))
            if not n:
                continue
            P(f"| {src} | {m} | {r:g} % | " + " | ".join(cells) + f" | {n[4]} |")
P("")
P("![accuracy vs ratio](predict.svg)")
P("")
P("## Where we are behind")
P("")
behind = []
for m in METRICS:
    a0 = res.get(("blockflex", m, "lstm", 0.0))
    if a0 and 100 * a0[0] < PAPER0[m] - 0.05:
        behind.append(f"* The paper's LSTM as we run it is behind the paper's own {PAPER0[m]} % on {m.replace('_', ' ')} "
                      f"({pct(a0[0])} on the artifact test inputs, 0 %).")
    a5 = res.get(("blockflex", m, "lstm", 5.0))
    if a5 and a5[0] < 0.93:
        behind.append(f"* The paper's LSTM at 5 % is below the paper's 93–96 % on {m.replace('_', ' ')} ({pct(a5[0])}).")
for src in SOURCES:
    for m in ["bandwidth", "capacity"]:
        a0, l0 = res.get((src, m, "lstm", 0.0)), res.get((src, m, "last", 0.0))
        if a0 and l0 and a0[0] < l0[0]:
            behind.append(f"* The paper's LSTM trails last-value on {src} {m} at 0 % ({pct(a0[0])} vs {pct(l0[0])}).")
for s, m in a_ok:
    behind.append(f"* Goal (a) missed: quantile below last-value on {s} {m} at 0 %.")
for s, m, a in b_ok:
    behind.append(f"* Goal (b) missed: quantile below 93 % on {s} {m.replace('_', ' ')} at 5 % ({pct(a)}).")
for src, m, r, q, c in lstm_better:
    behind.append(f"* The paper's LSTM, its predictions {'raised' if m in ('bandwidth', 'capacity') else 'scaled down'} "
                  f"(not as configured: its knob swept), wastes less than the quantile model at equal accuracy on {src} "
                  f"{m.replace('_', ' ')} at {r} % ({pct(c)} vs {pct(q[3])} at {pct(q[0])}): its duration estimates, "
                  "scaled down, rank runs better than the empirical survival curve does on these inputs. A quantile head on "
                  "the LSTM (pinball loss, last column of the paper table) is the obvious next model to try.")
for x in swap_bad:
    behind.append(f"* With train and test swapped, a goal is missed on {x}.")
for s, m, r in c_ok:
    behind.append(f"* Goal (c) missed: quantile wastes more than last-value at equal accuracy on {s} {m.replace('_', ' ')} at {r} %.")
for s, m, q0, q5, l0, b0, b5 in goal_rows:
    if m in ("bandwidth", "capacity") and abs(q0[0] - l0[0]) < 5e-4 and abs(q0[3] - l0[3]) < 5e-4:
        behind.append(f"* On {s} {m} the quantile model only ties last-value (at 18-second steps the level changes about once "
                      "per 100 windows, and the 80 % quantile of \"where it goes next\" is \"it stays\"); there is nothing it "
                      "predicts better there, only nothing worse.")
for src in SOURCES:
    for m in ["bandwidth_duration", "capacity_duration"]:
        q, o, f = res.get((src, m, "quantile", 0.0)), res.get((src, m, "quantile_online", 0.0)), frontier(src, m, "last")
        if o:
            b = waste_at(f, o[0])
            if b is not None and o[3] > b + 1e-4:
                behind.append(f"* Without a prior (the daemon today), the quantile durations on {src} {m.split('_')[0]} waste "
                              f"more than last-value at equal accuracy ({pct(o[3])} vs {pct(b)} at {pct(o[0])}): the zero-length "
                              "run keeps a vSSD with few runs from promising anything until it has seen about 1/q runs.")
behind.append("* Durations stay expensive for every model: at ≥ 93 % accuracy about 80–94 % of the actually available time is "
              "left unused (predicted in whole 30-minute units, the next change of a level is hard to foresee). The quantile "
              "model wastes less than last-value at the same accuracy, but a lower duration quantile is the only lever.")
behind.append("* The daemon (`[harvest.predictor] model = \"quantile\"`) has no way yet to load a prior fitted offline, so it "
              "runs the \"no prior\" variant; the default model stays the paper's LSTM (see the report of issue 15).")
behind.append("* The quantile model uses only the level history, not the window's other features (IOPS, min/avg); the LSTM's "
              "inputs did not beat last-value, and nothing here shows they carry more than the level does.")
md.extend(behind)
open(f"{OUT}/predict.md", "w").write("\n".join(md) + "\n")
print(f"wrote {OUT}/predict.md")
PY
steps_done

#!/usr/bin/env bash
# Regulator §6.1 (APSys'21): disks needed by the same tenants under four
# provisioning methods — aggregate IOPS, weighted IOPS (write weight 3/6/20 at
# P95/P99/P99.9), SLA curves placed at random, and Regulator's SLA-aware
# placement — for 300 tenants per population at P95, P99 and P99.9.
#
# Runs (all deterministic; seeds fixed below):
#  1. main: synthetic groups (paper = 100 read-intensive + 100 write-intensive
#     + 100 mixed, and 300 of each class alone), metric dot, 10 trials;
#  2. Regulator's alignment metric: l2 and area instead of dot;
#  3. the baselines' new-unit rule: cheapest type, and Regulator's own
#     least-cost rule, instead of a random type (paper group only);
#  4. tenants whose curve shapes come from the block traces in ../shared
#     (each rescaled to a random size; see docs/results/sla-placement.md).
#
# Writes docs/results/sla-placement*.{csv,svg,txt}.
#   scripts/exp-sla-placement.sh [TRIALS]   (default 10)
# TRACE_DIR overrides the trace directory (default ../shared/traces/block).
set -euo pipefail
cd "$(dirname "$0")/.."
TRIALS=${1:-10}
TRACE_DIR=${TRACE_DIR:-../shared/traces/block}
SEED=1
. scripts/lib.sh
# The experiment is pure computation (no timing), so the dev build gives the
# same numbers as a release build and avoids a long optimised compile.
note "building flexssd (debug)"
cargo build -q -p flexssd
BIN=$PWD/target/debug/flexssd
OUT=docs/results
mkdir -p "$OUT"
run() { "$BIN" sim sla-placement --seed "$SEED" --trials "$TRIALS" "$@"; }

steps 6
step "main: synthetic groups, metric dot, $TRIALS trial(s)"
run --csv "$OUT/sla-placement.csv" --plot "$OUT/sla-placement.svg" | tee "$OUT/sla-placement.txt"

for m in l2 area; do
  step "alignment metric $m"
  run --metric "$m" --csv "$OUT/sla-placement-metric-$m.csv" > "$OUT/sla-placement-metric-$m.txt"
done

for b in cheapest least-cost; do
  step "baselines' new-unit rule: $b"
  run --groups paper --baseline-new-unit "$b" \
    --csv "$OUT/sla-placement-baseline-$b.csv" > "$OUT/sla-placement-baseline-$b.txt"
done

step "tenants shaped by the block traces"
run --trace "msr:$TRACE_DIR/msr-hm0-sample.csv" \
    --trace "tencent:$TRACE_DIR/tencent-cbs-sample.csv" \
    --trace "systor:$TRACE_DIR/systor17-sample.csv" \
    --trace "systor:$TRACE_DIR/systor17-additional-sample.csv" \
    --trace "cloudphysics:$TRACE_DIR/cloudphysics-io-sample.csv" \
    --trace "disksim:$TRACE_DIR/mqsim-tpcc-small.trace" \
    --trace "disksim:$TRACE_DIR/mqsim-wsrch-small.trace" \
    --csv "$OUT/sla-placement-traces.csv" --plot "$OUT/sla-placement-traces.svg" \
    > "$OUT/sla-placement-traces.txt" 2>&1
cat "$OUT/sla-placement-traces.txt"
steps_done

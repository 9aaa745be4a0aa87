#!/usr/bin/env bash
# Overhead of the BlockFlex predictors (crates/predict) per vSSD against the paper's
# Table 3 (training 475 ms, inference 7.3 ms per iteration, 1.7 MB per vSSD), and the
# cost of predicting for 1,000 vSSDs at once, batched (one stacked forward pass per
# model kind) against one by one. Inputs are synthetic level patterns (timings do not
# depend on the values). Prints the JSON of crates/predict/examples/overhead.rs.
#
#   scripts/bench-predict.sh [N_VSSDS]     (default 1000)
#
# Run on an idle machine (load < 1.5): the numbers are wall-clock times.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build-deps.sh; cargo build --release -q -p predict --example overhead
echo "load: $(cut -d' ' -f1-3 /proc/loadavg), cores: $(nproc), RAYON_NUM_THREADS=1" >&2
RAYON_NUM_THREADS=1 target/release/examples/overhead "${1:-1000}"

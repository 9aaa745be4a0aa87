#!/usr/bin/env bash
# Power-loss harness, long run (issue 14): the #[ignore]d tests of
# crates/powerloss, in release, with STATES crash states per scenario (plain
# vSSDs; a gSSD-backed harvest volume during migrations, on plain vSSDs and
# on ghost vSSDs of lent blocks; the cache tier).
# Each prints "crash states tried: N, checks passed: M"; this script collects
# those lines in docs/results/powerloss-long.txt (generated: edit this script).
# The method and the figures of the test suite are in docs/results/powerloss.md.
#
#   scripts/exp-powerloss.sh              (STATES=100000; ~10 minutes on 2 cores)
#   STATES=1000000 scripts/exp-powerloss.sh
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
STATES=${STATES:-100000}
OUT=docs/results/powerloss-long.txt
note "power-loss harness: $STATES crash states per scenario (release)"
{
  echo "# scripts/exp-powerloss.sh, STATES=$STATES, commit $(git rev-parse --short HEAD)"
  for t in vssd gvol harvest tier; do
    start=$SECONDS
    FLEXSSD_POWERLOSS_STATES=$STATES cargo test -q --release -p powerloss --test "$t" -- \
      --ignored --nocapture 2>&1 | grep -E "power-loss|test result"
    echo "# $t: $((SECONDS - start)) s"
  done
} | tee "$OUT"

#!/usr/bin/env bash
# Refreshes the dashboard screenshots under docs/img (the README shows them):
# the browser test's pages of a real daemon (admin, with its wear layer, and
# a tenant's) and the synthetic page at scale. Needs chromium,
# chromium-driver, python3-selenium and fio. Ordinary test runs write no
# screenshots; this is the one command that does.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p docs/img
FLEXSSD_DASHBOARD_SHOTS="$PWD/docs/img" cargo test -p flexssd --test dashboard \
  the_dashboard_shows_what_the_api_says -- --nocapture
SHOT=1 UPDATES=2 scripts/bench-dashboard.sh
ls -l docs/img/dashboard-*.png

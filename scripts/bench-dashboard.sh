#!/usr/bin/env bash
# Dashboard at scale (issue 17): serves the dashboard over SYNTHETIC data
# (`flexssd dashboard synthetic`: 1,000 vSSDs, 10,000 gSSDs, 3,334 harvest
# volumes, 1,000 events, 4 devices of 64 channels x 1,024 blocks by default;
# seeded, not a host) and loads it in headless Chromium
# (scripts/dashboard_browser.py), which reports:
#   first_ms   navigation start until the first fragment is fetched, swapped
#              in, laid out and a frame has passed (what a person waits for);
#   fetch_ms / render_ms of each live update (request + transfer; swap +
#              layout + one frame), the synthetic server moving every vSSD's
#              rates on by one sample per request, so each update redraws the
#              vSSD table, the summary and the detail view.
# Also saves docs/img/dashboard-synthetic.png with SHOT=1.
#   VSSDS=1000 GSSDS=10000 UPDATES=5 FLEXSSD=target/release/flexssd scripts/bench-dashboard.sh
set -euo pipefail
cd "$(dirname "$0")/.."
VSSDS=${VSSDS:-1000}
GSSDS=${GSSDS:-10000}
UPDATES=${UPDATES:-5}
PORT=${PORT:-8741}
if [ -z "${FLEXSSD:-}" ]; then
  cargo build -p flexssd --quiet
  FLEXSSD=target/debug/flexssd
fi
for f in /usr/bin/chromium /usr/bin/chromedriver; do
  [ -x "$f" ] || { echo "bench-dashboard: $f is missing (apt-get install chromium chromium-driver python3-selenium)" >&2; exit 1; }
done
"$FLEXSSD" dashboard synthetic --vssds "$VSSDS" --gssds "$GSSDS" --listen "127.0.0.1:$PORT" &
pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT
for _ in $(seq 100); do
  curl -sf -o /dev/null "http://127.0.0.1:$PORT/dashboard" && break
  sleep 0.1
done
bytes=$(curl -s -o /dev/null -w '%{size_download}' "http://127.0.0.1:$PORT/v1/dashboard")
shot=()
if [ -n "${SHOT:-}" ]; then
  mkdir -p docs/img
  shot=(--screenshot docs/img/dashboard-synthetic.png)
fi
out=$(mktemp)
trap 'kill $pid 2>/dev/null || true; rm -f "$out"' EXIT
/usr/bin/python3 scripts/dashboard_browser.py --url "http://127.0.0.1:$PORT/dashboard" \
  --updates "$UPDATES" --timeout 120 "${shot[@]}" > "$out"
/usr/bin/python3 - "$out" "$VSSDS" "$GSSDS" "$bytes" <<'PY'
import json, statistics, sys
d = json.load(open(sys.argv[1]))
t = d["timings"]
f = [x["fetch_ms"] for x in t]
r = [x["render_ms"] for x in t]
print(f"SYNTHETIC dashboard: {sys.argv[2]} vSSDs, {sys.argv[3]} gSSDs, fragment {int(sys.argv[4]) / 1e6:.1f} MB")
print(f"first view: {d['first_ms']:.0f} ms after navigation start")
print(f"live updates ({len(t)}): fetch median {statistics.median(f):.0f} ms (max {max(f):.0f}), "
      f"swap+layout+frame median {statistics.median(r):.0f} ms (max {max(r):.0f})")
print(f"rows on the page: {sum(len(v) for v in d['rows'].values())}, "
      f"flash-map rectangles: {sum(m['owner_rects'] for m in d['flash'].values())}")
PY

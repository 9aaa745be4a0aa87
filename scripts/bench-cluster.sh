#!/usr/bin/env bash
# Fleet scale benchmark (issue 12): HOSTS light host agents (the real agent
# code over an in-memory host, one etcd lease each) and one scheduler against
# one real etcd on local disk; PLACEMENTS vSSDs of 1-3 channels, 64 in flight;
# then one agent is killed without revoking its lease and the time until the
# scheduler sees the host lost is measured. Reports etcd keys and bytes per host.
# Goals on a 2-core machine: 1,000 hosts, >= 500 placements/s, loss within TTL + 1 s.
#
#   scripts/bench-cluster.sh [HOSTS [PLACEMENTS [TTL_S [REPS]]]]   (default 1000 10000 10 3)
#
# Environment: FLEXSSD_BIN=PATH benchmarks this binary (default: build target/release).
set -euo pipefail
cd "$(dirname "$0")/.."
HOSTS=${1:-1000}
PLACEMENTS=${2:-10000}
TTL=${3:-10}
REPS=${4:-3}
. scripts/lib.sh
pick_bin
command -v etcd >/dev/null || { echo "bench-cluster: etcd is missing (make test installs etcd-server)"; exit 1; }
ulimit -n 65536 2>/dev/null || ulimit -n 8192

WORK=$(mktemp -d /var/tmp/flexssd-bench-cluster.XXXXXX)
trap '[ -n "${EPID:-}" ] && kill $EPID 2>/dev/null; wait 2>/dev/null; rm -rf "$WORK"' EXIT
CP=$(free_port); PP=$(free_port)
steps $((REPS + 1))
step "etcd $(etcd --version | head -1 | awk '{print $3}') on 127.0.0.1:$CP, data on $(df --output=fstype "$WORK" | tail -1) ($WORK)"
etcd --name bench --data-dir "$WORK/etcd" \
  --listen-client-urls "http://127.0.0.1:$CP" --advertise-client-urls "http://127.0.0.1:$CP" \
  --listen-peer-urls "http://127.0.0.1:$PP" --initial-advertise-peer-urls "http://127.0.0.1:$PP" \
  --initial-cluster "bench=http://127.0.0.1:$PP" --quota-backend-bytes $((4 << 30)) \
  > "$WORK/etcd.log" 2>&1 &
EPID=$!
for _ in $(seq 100); do
  ETCDCTL_API=3 etcdctl --endpoints "http://127.0.0.1:$CP" endpoint health >/dev/null 2>&1 && break
  sleep 0.1
done
echo "| run | hosts | registered in | placements | placements/s | p50 ms | p99 ms | loss detected after kill (TTL) | keys/host | bytes/host | etcd db |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
for r in $(seq "$REPS"); do
  step "run $r: $HOSTS hosts, $PLACEMENTS placements"
  "$BIN" cluster bench --etcd "http://127.0.0.1:$CP" --hosts "$HOSTS" --placements "$PLACEMENTS" \
    --ttl "$TTL" --json > "$WORK/r$r.json"
  python3 - "$WORK/r$r.json" "$r" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print(f"| {sys.argv[2]} | {r['hosts_registered']} | {r['register_s']:.1f} s | {r['placed']} ok, {r['failed']} failed "
      f"| {r['placements_per_s']:.0f} | {r['place_p50_ms']:.1f} | {r['place_p99_ms']:.1f} "
      f"| {r['loss_detect_s']:.2f} s ({r['ttl_s']:.0f} s) | {r['keys_per_host']:.1f} | {r['value_bytes_per_host']:.0f} "
      f"| {r['db_bytes'] / 2**20:.0f} MiB |")
PY
done
steps_done

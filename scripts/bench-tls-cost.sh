#!/usr/bin/env bash
# What one 128 KiB write over NBD TLS costs each server: flexssd (the
# bench-tls configuration: fast mode, memory backend, 8 channels) and
# `nbdkit --tls=require memory`, both with the same X.509 certificates and
# AES-128-GCM, one after the other. fio writes sequentially at queue depth 32
# for 8 s; `perf stat` counts the server's CPU time and system calls over 4 s
# of it, and fio's own CPU over the same 4 s. Prints IOPS, CPU µs per
# request, both CPU shares and the counts (BENCHMARKS.md, the
# TLS section).
#
#   scripts/bench-tls-cost.sh            (FLEXSSD_BIN=PATH: this binary)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
pick_bin
for t in fio nbdkit perf openssl python3; do command -v $t >/dev/null || { echo "bench-tls-cost: $t is missing"; exit 1; }; done
WORK=$(mktemp -d /tmp/flexssd-tls-cost.XXXXXX)
trap 'stop_daemon; [ -n "${KPID:-}" ] && kill $KPID 2>/dev/null; rm -rf "$WORK"' EXIT
PKI=$WORK/pki
make_pki "$PKI"
export HOME=$PKI/home
start_daemon "$WORK/fx" "$BENCH_VSSD" "tls = \"require\"
tls_certificates = \"$PKI/srv\""
FX="nbds+unix:///bench?socket=$SOCK&tls-hostname=localhost"
start_nbdkit_tls "$WORK" "$PKI"
EVENTS='task-clock,context-switches,syscalls:sys_enter_recvfrom,syscalls:sys_enter_sendto,syscalls:sys_enter_sendmsg,syscalls:sys_enter_epoll_wait'
printf '| server | IOPS | CPU µs per request | server CPU %% | fio CPU %% | recvfrom | sendto + sendmsg | epoll_wait | context switches |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n'
for s in "flexssd $DAEMON_PID $FX" "nbdkit $KPID $NK"; do
  read -r name pid uri <<<"$s"
  fio --name=fill --ioengine=nbd --uri="$uri" --rw=write --bs=1M --iodepth=8 --size=1G >/dev/null
  fio_json "$WORK/$name.json" --name=b --ioengine=nbd --uri="$uri" --rw=write --bs=128k --iodepth=32 \
    --size=1G --time_based --runtime=8 &
  F=$!
  sleep 2
  # fio's own CPU over the same 4 s (user + system ticks), beside the server's.
  FIO=$(pgrep -n -x fio)
  t0=$(awk '{print $14 + $15}' "/proc/$FIO/stat")
  perf stat -x, -e "$EVENTS" -p "$pid" -- sleep 4 2> "$WORK/$name.stat" >/dev/null
  t1=$(awk '{print $14 + $15}' "/proc/$FIO/stat")
  wait "$F"
  python3 - "$name" "$WORK/$name.json" "$WORK/$name.stat" "$((t1 - t0))" "$(getconf CLK_TCK)" <<'PY'
import json, sys
name, fj, st, fio_ticks, hz = sys.argv[1:]
iops = sum(j["write"]["iops"] for j in json.load(open(fj))["jobs"])
c = {}
for line in open(st):
    f = line.strip().split(",")
    if len(f) > 2 and f[0].replace(".", "").isdigit():
        c[f[2]] = float(f[0])
ms = c.get("task-clock", 0.0)  # milliseconds of CPU over the 4 s
per = ms * 1000 / (iops * 4) if iops else 0
g = lambda k: int(c.get("syscalls:sys_enter_" + k, 0))
fio_pct = int(fio_ticks) / int(hz) / 4 * 100
print(f"| {name} | {iops:,.0f} | {per:.0f} | {ms / 40:.0f} | {fio_pct:.0f} | {g('recvfrom'):,} | {g('sendto') + g('sendmsg'):,} | {g('epoll_wait'):,} | {int(c.get('context-switches', 0)):,} |")
PY
done

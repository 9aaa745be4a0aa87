#!/usr/bin/env bash
# A well-behaved tenant's throughput while other clients misbehave, measured in
# one run: fio 4 KiB random reads over TLS alone, then beside each abuse, in
# alternation, medians of REPS. The abuses:
#   idle      1,000 connections that never send a byte (held until the handshake
#             timeout cuts them off, then reopened);
#   half      200 connections that send half an option header and stop;
#   plaintext 200 clients per second that try NBD without TLS (refused).
# Prints a Markdown table: IOPS alone, IOPS under abuse, ratio (goal: within 10%).
#
#   scripts/bench-abuse.sh [RUNTIME_SECONDS [REPS]]   (default 5 s, 3)
#
# Environment: FLEXSSD_BIN=PATH benchmarks this binary (default: build target/release).
set -euo pipefail
cd "$(dirname "$0")/.."
RUNTIME=${1:-5}
REPS=${2:-3}
. scripts/lib.sh
pick_bin
for t in fio curl python3 openssl; do command -v $t >/dev/null || { echo "bench-abuse: $t is missing (make test installs it)"; exit 1; }; done
ulimit -n 8192

WORK=$(mktemp -d /tmp/flexssd-bench-abuse.XXXXXX)
trap 'stop_daemon; [ -n "${APID:-}" ] && kill $APID 2>/dev/null; rm -rf "$WORK"' EXIT
PKI=$WORK/pki
make_pki "$PKI"
export HOME=$PKI/home
start_daemon "$WORK/fx" "$BENCH_VSSD" "tls = \"require\"
tls_certificates = \"$PKI/srv\"
handshake_timeout_ms = 3000
max_connections = 4096"
URI="nbds+unix:///bench?socket=$SOCK&tls-hostname=localhost"
fio --name=fill --ioengine=nbd --uri="$URI" --rw=write --bs=1M --iodepth=8 --size=512M >/dev/null

# The abuser is another user, so another source: the daemon holds each
# source to max_handshakes_per_source (default 16) handshakes in flight, so
# an abuser with the tenant's own uid would shut the tenant out with it (as
# it should: processes of one user are not isolated from each other).
chmod 755 "$WORK" "$(dirname "$SOCK")"
chmod 666 "$SOCK"
# abuse KIND: runs in the background until killed.
abuse() {
  setpriv --reuid=nobody --regid=nogroup --clear-groups /usr/bin/python3 - "$SOCK" "$1" <<'PY' &
import socket, sys, time
path, kind = sys.argv[1], sys.argv[2]
def conn():
    s = socket.socket(socket.AF_UNIX)
    s.connect(path)
    return s
def prune(held):
    """The connections the server has not cut off yet."""
    alive = []
    for s in held:
        s.setblocking(False)
        try:
            if s.recv(64) == b"":
                s.close(); continue
        except BlockingIOError:
            pass
        except OSError:
            s.close(); continue
        alive.append(s)
    return alive
def idle():
    return conn()
def half():
    s = conn()
    s.recv(18)                       # the greeting
    s.sendall(b"\0\0\0\3IHAVE")      # client flags, half an option header
    return s
held = []
while True:
    if kind in ("idle", "half"):
        want = 1000 if kind == "idle" else 200
        while len(held) < want:
            try:
                held.append(idle() if kind == "idle" else half())
            except OSError:
                break
        time.sleep(0.5)
        # Reopen what the server cut off, so the count stays put.
        held = prune(held)
    elif kind == "plaintext":
        t0 = time.time()
        for _ in range(200):
            try:
                s = conn(); s.recv(18)
                s.sendall(b"\0\0\0\3" + b"IHAVEOPT" + (7).to_bytes(4, "big") + (6).to_bytes(4, "big") + b"\0\0\0\0\0\0")
                s.recv(1024); s.close()
            except OSError:
                pass
        time.sleep(max(0, 1 - (time.time() - t0)))
PY
  APID=$!
}
summ() { fio_summ "$1" | cut -d' ' -f1; }
run() { fio_json "$1" --name=b --ioengine=nbd --uri="$URI" --rw=randread --bs=4k --iodepth=32 --size=512M --time_based --runtime="$RUNTIME"; }
med() { printf '%s\n' "$@" | sort -n | sed -n "$(( ($# + 1) / 2 ))p"; }

kinds=(idle half plaintext)
steps ${#kinds[@]}
printf '| abuse | tenant IOPS alone | tenant IOPS under abuse | ratio |\n|---|---:|---:|---:|\n'
for kind in "${kinds[@]}"; do
  step "$kind"
  alone=(); under=()
  for r in $(seq "$REPS"); do
    run "$WORK/a$r.json"; alone+=("$(summ "$WORK/a$r.json")")
    abuse "$kind"; sleep 1
    run "$WORK/u$r.json"; under+=("$(summ "$WORK/u$r.json")")
    kill "$APID" 2>/dev/null; wait "$APID" 2>/dev/null || true; APID=
  done
  a=$(med "${alone[@]}"); u=$(med "${under[@]}")
  printf '| %s | %s | %s | %s |\n' "$kind" "$a" "$u" "$(python3 -c "print(f'{$u/$a:.2f}')")"
done
steps_done

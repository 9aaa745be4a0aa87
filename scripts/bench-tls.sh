#!/usr/bin/env bash
# NBD over TLS: flexssd with [nbd] tls = "require" against
# `nbdkit --tls=require memory`, both with the same X.509 certificates, driven by
# fio's nbd engine in one run, alternating servers so machine noise hits both
# alike. Prints a Markdown table with IOPS, p99 latency and the flexssd/nbdkit
# ratio (median of REPS runs each).
#
#   scripts/bench-tls.sh [RUNTIME_SECONDS [REPS]]   (default 5 s, 3 repetitions)
#
# Both servers run AES-128-GCM (see below where nbdkit starts).
#
# Why X.509 and not PSK: fio's nbd engine connects with nbd_connect_uri and does
# not let the URI read local files, so a `tls-psk-file=` URI is refused ("local
# file access is not allowed"); libnbd finds X.509 client credentials in
# $HOME/.pki/libnbd without any URI parameter. The PSK path is covered by the
# tests (nbdinfo, nbdcopy, qemu-img, libnbd's Python bindings).
#
# Environment: FLEXSSD_BIN=PATH benchmarks this flexssd binary (default: build
# target/release); BENCH_ROWS=REGEX runs only the workloads whose name matches
# (grep -E).
set -euo pipefail
cd "$(dirname "$0")/.."
RUNTIME=${1:-5}
REPS=${2:-3}
. scripts/lib.sh
pick_bin
for t in fio nbdkit curl python3 openssl; do command -v $t >/dev/null || { echo "bench-tls: $t is missing (make test installs it)"; exit 1; }; done

WORK=$(mktemp -d /tmp/flexssd-bench-tls.XXXXXX)
trap 'stop_daemon; [ -n "${KPID:-}" ] && kill $KPID 2>/dev/null; [ -n "${KEEP:-}" ] || rm -rf "$WORK"' EXIT
SIZE=1G

# One CA and a server certificate for localhost (both servers); the CA where
# libnbd looks for it.
PKI=$WORK/pki
make_pki "$PKI"
export HOME=$PKI/home

# flexssd: 8 of the default device's 16 channels, shared (no tenant): with no
# tls-certificates URI parameter libnbd verifies the server from its default
# directory but presents no client certificate, so fio's connections carry no
# tenant identity (as against nbdkit without --tls-verify-peer).
FX_CONFIG="$BENCH_VSSD"
start_daemon "$WORK/fx" "$FX_CONFIG" "tls = \"require\"
tls_certificates = \"$PKI/srv\""
FX="nbds+unix:///bench?socket=$SOCK&tls-hostname=localhost"
start_nbdkit_tls "$WORK" "$PKI"

rows=(
  "4k randread qd32|--rw=randread --bs=4k --iodepth=32"
  "4k randwrite qd32|--rw=randwrite --bs=4k --iodepth=32"
  "128k seq read qd32|--rw=read --bs=128k --iodepth=32"
  "128k seq write qd32|--rw=write --bs=128k --iodepth=32"
)
if [ -n "${BENCH_ROWS:-}" ]; then
  mapfile -t rows < <(printf '%s\n' "${rows[@]}" | grep -E -- "^[^|]*(${BENCH_ROWS})")
fi
steps $((1 + ${#rows[@]}))
step "filling both exports over TLS"
for uri in "$FX" "$NK"; do
  fio --name=fill --ioengine=nbd --uri="$uri" --rw=write --bs=1M --iodepth=8 --size=$SIZE >/dev/null
done
printf '| workload (TLS, X.509) | flexssd IOPS | nbdkit IOPS | ratio | flexssd p99 µs | nbdkit p99 µs |\n|---|---:|---:|---:|---:|---:|\n'
for row in "${rows[@]}"; do
  name=${row%%|*}; args=${row#*|}
  step "$name"
  fxs=(); nks=()
  for r in $(seq "$REPS"); do
    run() {  # run LABEL URI
      # shellcheck disable=SC2086
      fio_json "$WORK/$1$r.json" --name=b --ioengine=nbd --uri="$2" $args --size=$SIZE --time_based --runtime="$RUNTIME" --group_reporting --percentile_list=99
    }
    # The servers swap places every repetition.
    if [ $((r % 2)) = 1 ]; then run fx "$FX"; run nk "$NK"; else run nk "$NK"; run fx "$FX"; fi
    fxs+=("$(fio_summ "$WORK/fx$r.json")"); nks+=("$(fio_summ "$WORK/nk$r.json")")
  done
  med() { printf '%s\n' "$@" | sort -n -k1,1 | sed -n "$(( ($# + 1) / 2 ))p"; }
  read -r fi fp < <(med "${fxs[@]}")
  read -r ni np < <(med "${nks[@]}")
  ratio=$(python3 -c "print(f'{$fi/$ni:.2f}')")
  printf '| %s | %s | %s | %s | %s | %s |\n' "$name" "$fi" "$ni" "$ratio" "$fp" "$np"
done
steps_done

#!/usr/bin/env bash
# NBD over TLS: flexssd with [nbd] tls = "require" against
# `nbdkit --tls=require memory`, both with the same X.509 certificates, driven by
# fio's nbd engine in one run, alternating servers so machine noise hits both
# alike. Prints a Markdown table with IOPS, p99 latency and the flexssd/nbdkit
# ratio (median of REPS runs each).
#
#   scripts/bench-tls.sh [RUNTIME_SECONDS [REPS]]   (default 5 s, 3 repetitions)
#
# Why X.509 and not PSK: fio's nbd engine connects with nbd_connect_uri and does
# not let the URI read local files, so a `tls-psk-file=` URI is refused ("local
# file access is not allowed"); libnbd finds X.509 client credentials in
# $HOME/.pki/libnbd without any URI parameter. The PSK path is covered by the
# tests (nbdinfo, nbdcopy, qemu-img, libnbd's Python bindings).
#
# Environment: FLEXSSD_BIN=PATH benchmarks this flexssd binary (default: build
# target/release).
set -euo pipefail
cd "$(dirname "$0")/.."
RUNTIME=${1:-5}
REPS=${2:-3}
. scripts/lib.sh
if [ -n "${FLEXSSD_BIN:-}" ]; then
  BIN=$(realpath "$FLEXSSD_BIN")
else
  cargo build --release -q -p flexssd
  BIN=$PWD/target/release/flexssd
fi
for t in fio nbdkit curl python3 openssl; do command -v $t >/dev/null || { echo "bench-tls: $t is missing (make test installs it)"; exit 1; }; done

WORK=$(mktemp -d /tmp/flexssd-bench-tls.XXXXXX)
trap 'stop_daemon; [ -n "${KPID:-}" ] && kill $KPID 2>/dev/null; [ -n "${KEEP:-}" ] || rm -rf "$WORK"' EXIT
SIZE=1G

# One CA and a server certificate for localhost (both servers); the CA where
# libnbd looks for it.
PKI=$WORK/pki
mkdir -p "$PKI/srv" "$PKI/home/.pki/libnbd"
(
  cd "$PKI"
  key="-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"
  # shellcheck disable=SC2086
  {
    openssl req -x509 $key -keyout ca-key.pem -out ca-cert.pem -days 2 -subj /CN=bench-ca
    printf 'subjectAltName=DNS:localhost\nextendedKeyUsage=serverAuth\n' > s.ext
    printf 'extendedKeyUsage=clientAuth\n' > c.ext
    openssl req $key -keyout srv/server-key.pem -out s.csr -subj /CN=localhost
    openssl x509 -req -in s.csr -CA ca-cert.pem -CAkey ca-key.pem -CAcreateserial -out srv/server-cert.pem -days 2 -extfile s.ext
    openssl req $key -keyout home/.pki/libnbd/client-key.pem -out c.csr -subj /CN=bench
    openssl x509 -req -in c.csr -CA ca-cert.pem -CAkey ca-key.pem -CAcreateserial -out home/.pki/libnbd/client-cert.pem -days 2 -extfile c.ext
  } 2>/dev/null
  cp ca-cert.pem srv/ && cp ca-cert.pem home/.pki/libnbd/
)
export HOME=$PKI/home

# flexssd: 8 of the default device's 16 channels, shared (no tenant): with no
# tls-certificates URI parameter libnbd verifies the server from its default
# directory but presents no client certificate, so fio's connections carry no
# tenant identity (as against nbdkit without --tls-verify-peer).
FX_CONFIG='
mode = "fast"
[[devices]]
name = "ssd0"
backend = "memory"
prefault = true
[[vssds]]
name = "bench"
channels = 8'
start_daemon "$WORK/fx" "$FX_CONFIG" "tls = \"require\"
tls_certificates = \"$PKI/srv\""
FX="nbds+unix:///bench?socket=$SOCK&tls-hostname=localhost"
nbdkit -U "$WORK/k.sock" --pidfile "$WORK/k.pid" --tls=require --tls-certificates="$PKI/srv" memory 2G
for _ in $(seq 50); do [ -f "$WORK/k.pid" ] && break; sleep 0.1; done
KPID=$(cat "$WORK/k.pid")
NK="nbds+unix:///?socket=$WORK/k.sock&tls-hostname=localhost"

rows=(
  "4k randread qd32|--rw=randread --bs=4k --iodepth=32"
  "4k randwrite qd32|--rw=randwrite --bs=4k --iodepth=32"
  "128k seq read qd32|--rw=read --bs=128k --iodepth=32"
  "128k seq write qd32|--rw=write --bs=128k --iodepth=32"
)
steps $((1 + ${#rows[@]}))
step "filling both exports over TLS"
for uri in "$FX" "$NK"; do
  fio --name=fill --ioengine=nbd --uri="$uri" --rw=write --bs=1M --iodepth=8 --size=$SIZE >/dev/null
done
summ() {  # summ JSON -> "iops p99_us"
  python3 - "$1" <<'PY'
import json,sys
j=json.load(open(sys.argv[1]))
iops=0.0; p99=0.0
for job in j["jobs"]:
    for d in ("read","write"):
        x=job[d]
        if x["total_ios"]>0:
            iops+=x["iops"]
            p=x["clat_ns"].get("percentile",{}).get("99.000000",0)/1000
            p99=max(p99,p)
print(f"{iops:.0f} {p99:.0f}")
PY
}
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
    fxs+=("$(summ "$WORK/fx$r.json")"); nks+=("$(summ "$WORK/nk$r.json")")
  done
  med() { printf '%s\n' "$@" | sort -n -k1,1 | sed -n "$(( ($# + 1) / 2 ))p"; }
  read -r fi fp < <(med "${fxs[@]}")
  read -r ni np < <(med "${nks[@]}")
  ratio=$(python3 -c "print(f'{$fi/$ni:.2f}')")
  printf '| %s | %s | %s | %s | %s | %s |\n' "$name" "$fi" "$ni" "$ratio" "$fp" "$np"
done
steps_done

# Shared helpers for the scripts: start and stop a flexssd daemon on a private
# data directory with a given config (needs $BIN, the flexssd binary), and show
# the progress of a long script's steps. Source it.

# Step progress for a person watching, like the bars of `flexssd sim ...`: on a
# terminal (stderr is a tty) each step prints "[k/N m:ss] what" to stderr, the
# clock counting from when this file was sourced; otherwise nothing is printed,
# so logs and the scripts' stdout and output files are the same either way.
#   steps N        N steps follow (N may be "?" when it is not known ahead)
#   step WHAT...   the next step starts
#   note WHAT...   a line of its own, not counted (e.g. the build, a sub-step)
#   steps_done     all steps are over: prints the total time
STEPS_N='?'
STEPS_K=0
STEPS_T0=$SECONDS
steps() {
  STEPS_N=$1
  STEPS_K=0
}
_steps_clock() {
  local t=$((SECONDS - STEPS_T0))
  printf '%d:%02d' $((t / 60)) $((t % 60))
}
step() {
  STEPS_K=$((STEPS_K + 1))
  [ -t 2 ] || return 0
  printf '[%d/%s %s] %s\n' "$STEPS_K" "$STEPS_N" "$(_steps_clock)" "$*" >&2
}
note() {
  [ -t 2 ] || return 0
  printf '  (%s) %s\n' "$(_steps_clock)" "$*" >&2
}
steps_done() {
  [ -t 2 ] || return 0
  printf '[done in %s] %d step(s)\n' "$(_steps_clock)" "$STEPS_K" >&2
}

# free_port: prints a free localhost TCP port.
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

# start_daemon DIR CONFIG_BODY [NBD_SETTINGS]: writes DIR/flexssd.toml (data_dir,
# api, nbd socket filled in, plus NBD_SETTINGS lines under [nbd]) and starts
# `flexssd serve`; sets DAEMON_PID, API, SOCK.
start_daemon() {
  local dir=$1 body=$2 nbd_extra=${3:-} port
  mkdir -p "$dir"
  port=$(free_port)
  SOCK="$dir/nbd.sock"
  API="http://127.0.0.1:$port"
  cat > "$dir/flexssd.toml" <<TOML
data_dir = "$dir/data"
$body

[api]
listen = "127.0.0.1:$port"

[nbd]
socket = "$SOCK"
$nbd_extra
TOML
  "$BIN" serve --config "$dir/flexssd.toml" > "$dir/daemon.log" 2>&1 &
  DAEMON_PID=$!
  for _ in $(seq 1 2400); do
    if [ -S "$SOCK" ] && curl -fs "$API/v1/vssds" >/dev/null 2>&1; then return 0; fi
    if ! kill -0 "$DAEMON_PID" 2>/dev/null; then cat "$dir/daemon.log" >&2; return 1; fi
    sleep 0.05
  done
  echo "daemon did not come up; log:" >&2; cat "$dir/daemon.log" >&2; return 1
}

# For a daemon started by start_daemon (they read BIN, API and SOCK): the CLI,
# an export's NBD URI, a GET on the API.
# default_body: $BIN's embedded default configuration (`config default`) less
# data_dir and the [api] and [nbd] sections, which start_daemon writes: the
# body to give start_daemon for "flexssd on its default configuration".
default_body() {
  "$BIN" config default | python3 -c '
import re, sys
t = re.sub(r"(?m)^data_dir\s*=.*\n", "", sys.stdin.read())
out, skip = [], False
for line in t.splitlines():
    if re.match(r"^\[(api|nbd)\]\s*$", line):
        skip = True
        continue
    if skip and re.match(r"^\[", line):
        skip = False
    if not skip:
        out.append(line)
print("\n".join(out))'
}

cli() { "$BIN" --api "$API" "$@"; }
uri() { echo "nbd+unix:///$1?socket=$SOCK"; }
jget() { curl -fs "$API$1"; }

# wait_gssds EXPR SECONDS: waits until the Python expression EXPR on
# /v1/gssds (as g) is true, up to SECONDS; fails if it never is.
wait_gssds() {
  local expr=$1 limit=$2 i
  for i in $(seq 1 $((limit * 5))); do
    if jget /v1/gssds | python3 -c "import json,sys;g=json.load(sys.stdin);sys.exit(0 if ($expr) else 1)"; then
      return 0
    fi
    sleep 0.2
  done
  return 1
}

stop_daemon() {
  [ -n "${DAEMON_PID:-}" ] || return 0
  kill "$DAEMON_PID" 2>/dev/null || true
  wait "$DAEMON_PID" 2>/dev/null || true
  DAEMON_PID=
}

# fio_json OUT ARGS...: runs fio with JSON output into OUT.
fio_json() {
  local out=$1; shift
  fio --output-format=json --output="$out" "$@" >/dev/null
}

# make_pki DIR: a CA, a server certificate for localhost in DIR/srv (laid out as
# nbdkit's --tls-certificates: ca-cert.pem, server-cert.pem, server-key.pem), and
# the CA in DIR/home/.pki/libnbd, where libnbd looks when HOME=DIR/home.
make_pki() {
  local dir=$1
  mkdir -p "$dir/srv" "$dir/home/.pki/libnbd"
  (
    cd "$dir"
    local key="-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"
    # shellcheck disable=SC2086
    {
      openssl req -x509 $key -keyout ca-key.pem -out ca-cert.pem -days 2 -subj /CN=bench-ca
      printf 'subjectAltName=DNS:localhost\nextendedKeyUsage=serverAuth\n' > s.ext
      openssl req $key -keyout srv/server-key.pem -out s.csr -subj /CN=localhost
      openssl x509 -req -in s.csr -CA ca-cert.pem -CAkey ca-key.pem -CAcreateserial -out srv/server-cert.pem -days 2 -extfile s.ext
    } 2>/dev/null
    cp ca-cert.pem srv/ && cp ca-cert.pem home/.pki/libnbd/
  )
}

# fio_summ JSON: prints "IOPS p99_µs" of a fio JSON report (all jobs, reads and
# writes together; p99 the worst of them).
fio_summ() {
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

# keep_rows CSV HEADER POLICY...: for an experiment that reruns some policies.
# With KEEP_RUNS set and CSV present, drops the rows of the POLICYs named (about
# to be rerun) and keeps every other row; otherwise starts CSV with HEADER.
keep_rows() {
  local csv=$1 header=$2
  shift 2
  if [ -n "${KEEP_RUNS:-}" ] && [ -f "$csv" ]; then
    grep -v -E "^($(echo "$@" | tr ' ' '|'))," "$csv" > "$csv.keep" || true
    mv "$csv.keep" "$csv"
  else
    echo "$header" > "$csv"
  fi
}

# The experiments on btrfs (exp-elastic.sh, exp-elastic-multi.sh) must not
# count a kernel fault as a policy's failure: on Linux 6.18 a chunk allocation
# racing with `btrfs device add` can fail with ENOENT ("Transaction aborted
# (error -2)" in do_chunk_alloc, then "forced readonly"), whatever the reserve.
#   dmesg_mark                   the kernel's clock now (seconds since boot, as
#                                its log stamps lines: a full log ring drops old
#                                lines, so counting lines would miss new ones)
#   btrfs_aborted CSV MARK P R K whether btrfs logged an error since MARK; if so
#                                appends "P,R,K,message" to CSV and says so
#   until_not_aborted CMD...     runs CMD again while it returns 2 (at most 4
#                                tries); returns its last status
dmesg_mark() { cut -d' ' -f1 /proc/uptime; }
btrfs_aborted() {
  local msg
  msg=$(dmesg 2>/dev/null | awk -v m="$2" '/BTRFS: error/ {
    t = $0; sub(/^\[ */, "", t); sub(/\].*/, "", t)
    if (t + 0 >= m + 0) { sub(/.*BTRFS: error/, "BTRFS: error"); print; exit } }')
  [ -n "$msg" ] || return 1
  echo "$3,$4,$5,\"${msg//\"/}\"" >> "$1"
  echo "$3 reserve $4 run $5: btrfs aborted a transaction ($msg); run again" >&2
}
until_not_aborted() {
  local rc=2 n=0
  while [ $rc = 2 ] && [ $n -lt 4 ]; do
    rc=0; "$@" || rc=$?; n=$((n + 1))
  done
  return $rc
}

# BIN: the flexssd binary FLEXSSD_BIN names, or else this tree's release
# build (the build's packages installed first, as make run does).
pick_bin() {
  if [ -n "${FLEXSSD_BIN:-}" ]; then
    BIN=$(realpath "$FLEXSSD_BIN")
  else
    scripts/build-deps.sh; cargo build --release -q -p flexssd
    BIN=$PWD/target/release/flexssd
  fi
}

# The benchmarks' flexssd: fast mode, the default device on the memory
# backend (prefaulted), and one vSSD "bench" on 8 of its 16 channels.
BENCH_VSSD='
mode = "fast"
[[devices]]
name = "ssd0"
backend = "memory"
prefault = true
[[vssds]]
name = "bench"
channels = 8'

# `nbdkit --tls=require memory 2G` on DIR/k.sock with the server certificate
# of PKI (see make_pki); sets KPID and NK, its URI. The same cipher as
# flexssd: flexssd offers TLS 1.3's SHA-256 suites and prefers AES-128-GCM;
# nbdkit (GnuTLS, no priority flag) would pick AES-256-GCM, so its GnuTLS
# gets a system priority file that takes AES-256-GCM and ChaCha20 away.
# Both sessions then run AES-128-GCM.
start_nbdkit_tls() {
  local dir=$1 pki=$2
  printf '[overrides]\ntls-disabled-cipher = AES-256-GCM\ntls-disabled-cipher = CHACHA20-POLY1305\n' > "$dir/gnutls.cfg"
  GNUTLS_SYSTEM_PRIORITY_FILE="$dir/gnutls.cfg" \
    nbdkit -U "$dir/k.sock" --pidfile "$dir/k.pid" --tls=require --tls-certificates="$pki/srv" memory 2G
  for _ in $(seq 50); do [ -f "$dir/k.pid" ] && break; sleep 0.1; done
  KPID=$(cat "$dir/k.pid")
  NK="nbds+unix:///?socket=$dir/k.sock&tls-hostname=localhost"
}

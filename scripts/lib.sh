# Shared helpers for the scripts: start and stop a flexssd daemon on a private
# data directory with a given config. Source it; needs $BIN (the flexssd binary).

# free_port: prints a free localhost TCP port.
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

# start_daemon DIR CONFIG_BODY: writes DIR/flexssd.toml (data_dir, api, nbd socket
# filled in) and starts `flexssd serve`; sets DAEMON_PID, API, SOCK.
start_daemon() {
  local dir=$1 body=$2 port
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

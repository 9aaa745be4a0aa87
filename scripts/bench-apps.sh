#!/usr/bin/env bash
# Real applications on a flexssd export, beside nbdkit, in one run.
#
# PostgreSQL's pgbench (TPC-B, scale 20, 4 clients) and RocksDB's db_bench
# (fillrandom, readrandom, readrandomwriterandom) on ext4 and on btrfs, over
# nbdfuse + a loop device, as a user would mount an export. Three servers, the
# same size, alternated within each repetition (the order rotates):
#   flexssd       its embedded default configuration (`flexssd config default`:
#                 file backend, persistent, fast mode), the export "default";
#   nbdkit file   on a sparse file (persistent: the fair peer);
#   nbdkit memory (not persistent: the ceiling).
# Each cell is the median over the repetitions; the page cache is dropped
# before every benchmark. A second table gives the bytes each server made the
# host's disk write during the pgbench step (initdb, load, run): the disk that
# holds the work directory, from its /sys/class/block statistics, so other
# writers on the machine count too. A third gives the same disk's writes per
# transaction during pgbench's timed run alone (what a commit costs the host).
#
#   scripts/bench-apps.sh [REPS [PGBENCH_SECONDS]]   (default 1 repetition, 30 s)
#
# Environment:
#   FLEXSSD_BIN=PATH   benchmark this flexssd binary (default: build target/release)
#   FS="ext4 btrfs"    the file systems to run on (also xfs)
#   DB_NUM=1000000     db_bench keys (100-byte values)
#   OUT=DIR            also write DIR/bench-apps.csv (one row per measurement)
#   SERVERS="fx kf km" the servers to run (flexssd, nbdkit file, nbdkit memory)
#   PLACEMENT=stripe|fill  flexssd's top-level `placement` (default: the
#                      embedded default's "auto", which fills in fast mode):
#                      run twice to compare how a vSSD's pages are placed
#   FLEXSSD_BASE_BIN=PATH  also run this flexssd build (server "bs", a baseline)
#                      in the same rotation; the tables gain a new/base column
#   WORKLOADS="pgbench fillrandom readrandom readrandomwriterandom"  the rows
#                      to run (the db_bench rows need fillrandom before them);
#                      add pgbench+neighbour for the isolation row: pgbench
#                      again while a neighbour export of the same server (a
#                      second vSSD; a second nbdkit process) takes fio's 4 KiB
#                      random writes with no flushes, and a table of its tps
#                      over pgbench's alone (needs the pgbench row too)
#   NEIGHBOUR_ON=km|kf the isolation row's neighbour is that nbdkit's second
#                      process for every server, instead of each server's own:
#                      what the neighbour's CPU alone costs pgbench, apart
#                      from sharing a server with it
#   NBD_SETTINGS='spin_polls = 0'  lines for flexssd's [nbd] section
#
# Needs root (loop devices, mount), /dev/fuse, nbdfuse, nbdkit, nbdinfo,
# PostgreSQL 15 (postgresql) and db_bench (rocksdb-tools); as root it installs
# the last two when missing.
set -euo pipefail
shopt -s inherit_errexit
cd "$(dirname "$0")/.."
REPS=${1:-1}
PG_T=${2:-30}
FS=${FS:-ext4 btrfs}
DB_NUM=${DB_NUM:-1000000}
[ "$(id -u)" = 0 ] || { echo "bench-apps: needs root (loop devices and mount)"; exit 1; }
[ -e /dev/fuse ] || { echo "bench-apps: needs /dev/fuse"; exit 1; }
PGBIN=/usr/lib/postgresql/15/bin
need=()
[ -x "$PGBIN/initdb" ] && command -v pgbench >/dev/null || need+=(postgresql)
command -v db_bench >/dev/null || need+=(rocksdb-tools)
if ((${#need[@]})); then
  echo "bench-apps: installing ${need[*]}" >&2
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
# shellcheck disable=SC2086
for t in nbdfuse nbdkit nbdinfo losetup fusermount3 curl python3 $(printf 'mkfs.%s ' $FS); do
  command -v "$t" >/dev/null || { echo "bench-apps: $t is missing (make test installs it)"; exit 1; }
done
. scripts/lib.sh
pick_bin

WORK=$(mktemp -d /tmp/flexssd-bench-apps.XXXXXX)
chmod 755 "$WORK"
PIDS=()
MNT=$WORK/mnt FUSE=$WORK/fuse LOOP=
mkdir -p "$MNT" "$FUSE"
detach() {
  if mountpoint -q "$MNT"; then
    [ -f "$MNT/pg/postmaster.pid" ] && runuser -u postgres -- "$PGBIN/pg_ctl" -D "$MNT/pg" -m fast stop >/dev/null 2>&1 || true
    umount "$MNT"
  fi
  if [ -n "$LOOP" ]; then losetup -d "$LOOP" || true; LOOP=; fi
  if mountpoint -q "$FUSE"; then fusermount3 -u "$FUSE"; fi
  if [ -n "${FUSE_PID:-}" ]; then wait "$FUSE_PID" 2>/dev/null || true; FUSE_PID=; fi
}
trap 'detach || true; stop_daemon; for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$WORK"' EXIT

# flexssd on its embedded default, with only the data directory, the API
# address and the NBD socket moved into $WORK.
DEFAULT_BODY=$(default_body)
if [ -n "${PLACEMENT:-}" ]; then
  case $PLACEMENT in stripe|fill|auto) ;; *) echo "bench-apps: PLACEMENT must be stripe, fill or auto, not '$PLACEMENT'" >&2; exit 1 ;; esac
  grep -q '^placement = ' <<<"$DEFAULT_BODY" || { echo "bench-apps: the default configuration has no top-level placement line" >&2; exit 1; }
  DEFAULT_BODY=$(sed "s/^placement = .*/placement = \"$PLACEMENT\"/" <<<"$DEFAULT_BODY")
fi
# A second vSSD on other channels of the same device: the neighbour of the
# isolation row (pgbench+neighbour); the other rows never touch it.
DEFAULT_BODY+='
[[vssds]]
name = "neighbour"
channels = 4'
start_daemon "$WORK/fx" "$DEFAULT_BODY" "${NBD_SETTINGS:-}"
FX="nbd+unix:///default?socket=$SOCK"
FXN="nbd+unix:///neighbour?socket=$SOCK"
BASE_BIN=${FLEXSSD_BASE_BIN:+$(realpath "$FLEXSSD_BASE_BIN")}
if [ -n "$BASE_BIN" ]; then
  FX_PID=$DAEMON_PID NEW_BIN=$BIN BIN=$BASE_BIN DAEMON_PID=
  start_daemon "$WORK/bs" "$DEFAULT_BODY" "${NBD_SETTINGS:-}"
  PIDS+=("$DAEMON_PID"); DAEMON_PID=$FX_PID; BIN=$NEW_BIN
  BS="nbd+unix:///default?socket=$SOCK"
  BSN="nbd+unix:///neighbour?socket=$SOCK"
fi
SIZE=$(nbdinfo --size "$FX")
truncate -s "$SIZE" "$WORK/disk.img" "$WORK/disk2.img"
nbdkit -U "$WORK/kf.sock" --pidfile "$WORK/kf.pid" file "$WORK/disk.img"
nbdkit -U "$WORK/km.sock" --pidfile "$WORK/km.pid" memory "$SIZE"
# The peers' neighbours for the isolation row: a second process of each.
nbdkit -U "$WORK/kfn.sock" --pidfile "$WORK/kfn.pid" file "$WORK/disk2.img"
nbdkit -U "$WORK/kmn.sock" --pidfile "$WORK/kmn.pid" memory "$SIZE"
for _ in $(seq 50); do [ -f "$WORK/kf.pid" ] && [ -f "$WORK/km.pid" ] && [ -f "$WORK/kfn.pid" ] && [ -f "$WORK/kmn.pid" ] && break; sleep 0.1; done
PIDS+=("$(cat "$WORK/kf.pid")" "$(cat "$WORK/km.pid")" "$(cat "$WORK/kfn.pid")" "$(cat "$WORK/kmn.pid")")
read -ra servers <<<"${SERVERS:-fx kf km}"
declare -A URI=([fx]=$FX [kf]="nbd+unix:///?socket=$WORK/kf.sock" [km]="nbd+unix:///?socket=$WORK/km.sock")
declare -A NEIGHBOUR=([fx]=$FXN [kf]="nbd+unix:///?socket=$WORK/kfn.sock" [km]="nbd+unix:///?socket=$WORK/kmn.sock")
declare -A NAME=([fx]=flexssd [kf]="nbdkit file" [km]="nbdkit memory" [bs]="flexssd base")
if [ -n "$BASE_BIN" ]; then servers+=(bs); URI[bs]=$BS; NEIGHBOUR[bs]=$BSN; fi
case ${NEIGHBOUR_ON:-} in
  '') ;;
  km|kf) other=${NEIGHBOUR[$NEIGHBOUR_ON]}; for s in "${!NEIGHBOUR[@]}"; do NEIGHBOUR[$s]=$other; done ;;
  *) echo "bench-apps: NEIGHBOUR_ON must be km or kf, not '$NEIGHBOUR_ON'" >&2; exit 1 ;;
esac

# attach SERVER FS: the export as a file (nbdfuse), a loop device on it, a fresh
# FS on that, mounted on $MNT.
attach() {
  rm -f "$WORK/fuse.pid"
  nbdfuse -P "$WORK/fuse.pid" "$FUSE" "${URI[$1]}" >/dev/null &
  FUSE_PID=$!
  for _ in $(seq 600); do [ -f "$WORK/fuse.pid" ] && [ -e "$FUSE/nbd" ] && break; sleep 0.05; done
  [ -e "$FUSE/nbd" ] || { echo "bench-apps: nbdfuse did not mount ${URI[$1]}" >&2; exit 1; }
  LOOP=$(losetup --find --show "$FUSE/nbd")
  case $2 in
    ext4) mkfs.ext4 -q -F "$LOOP" ;;
    btrfs) mkfs.btrfs -q -f "$LOOP" >/dev/null ;;
    xfs) mkfs.xfs -q -f "$LOOP" ;;
    *) echo "bench-apps: unknown file system $2" >&2; exit 1 ;;
  esac
  mount "$LOOP" "$MNT"
  chown postgres: "$MNT"
}

drop_caches() { sync; echo 3 > /proc/sys/vm/drop_caches; }

# Sectors written so far to the disk holding $WORK (empty if unknown).
DISK=$(basename "$(df --output=source "$WORK" | tail -1)")
disk_written() { [ -r "/sys/class/block/$DISK/stat" ] && awk '{print $7}' "/sys/class/block/$DISK/stat"; }

# pgbench on $MNT: prints tps, and leaves in $WORK/pg.run the transactions
# processed and the host disk's sectors written during the timed run. With a URI, a neighbour writes to that export
# (fio, 4 KiB random writes at queue depth 32, no flushes) while pgbench runs.
pg() {
  local pg=$MNT/pg
  runuser -u postgres -- "$PGBIN/initdb" -D "$pg" >/dev/null 2>&1
  runuser -u postgres -- "$PGBIN/pg_ctl" -D "$pg" -w -l "$MNT/pg.log" \
    -o "-k $MNT -c listen_addresses='' -c shared_buffers=128MB" start >/dev/null
  runuser -u postgres -- pgbench -h "$MNT" -i -s 20 -q postgres >/dev/null 2>&1
  drop_caches
  local out noise=
  if [ -n "${1:-}" ]; then
    fio --name=neighbour --ioengine=nbd --uri="$1" --rw=randwrite --bs=4k --iodepth=32 \
      --size=256M --time_based --runtime=$((PG_T + 30)) >/dev/null 2>&1 &
    noise=$!
    sleep 1
  fi
  local d0; d0=$(disk_written)
  out=$(runuser -u postgres -- pgbench -h "$MNT" -c 4 -j 4 -T "$PG_T" postgres 2>/dev/null)
  local d1; d1=$(disk_written)
  echo "$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' <<<"$out" | head -1) $([ -n "$d0" ] && echo $((d1 - d0)))" > "$WORK/pg.run"
  if [ -n "$noise" ]; then
    kill -INT "$noise" 2>/dev/null || true
    wait "$noise" 2>/dev/null || true
  fi
  runuser -u postgres -- "$PGBIN/pg_ctl" -D "$pg" -m fast stop >/dev/null
  # db_bench comes next on the same file system: give it the space (btrfs on
  # the 896 MiB export has none left after pgbench's load and WAL).
  rm -rf "$pg"
  sed -n 's/^tps = \([0-9.]*\) .*/\1/p' <<<"$out" | head -1
}

# db_bench BENCHMARK on $MNT/rocks: prints ops/s.
db() {
  local extra=()
  [ "$1" = fillrandom ] || extra=(--use_existing_db=1)
  drop_caches
  local out
  if ! out=$(db_bench --db="$MNT/rocks" --benchmarks="$1" --num="$DB_NUM" --value_size=100 \
    --threads=1 "${extra[@]}" 2>"$WORK/db_bench.err"); then
    echo "bench-apps: db_bench $1 failed on $(df -h --output=size,avail "$MNT" | tail -1 | xargs) (size, free); its last words:" >&2
    tail -5 "$WORK/db_bench.err" >&2
    return 1
  fi
  sed -n "s/^$1 *: *[0-9.]* micros\/op \([0-9]*\) ops\/sec.*/\1/p" <<<"$out" | head -1
}

read -ra rows <<<"${WORKLOADS:-pgbench fillrandom readrandom readrandomwriterandom}"
has_row() { [[ " ${rows[*]} " == *" $1 "* ]]; }
declare -A got=()
[ -n "${OUT:-}" ] && { mkdir -p "$OUT"; echo "fs,rep,server,workload,value" > "$OUT/bench-apps.csv"; }
nfs=$(wc -w <<<"$FS")
steps $((nfs * REPS * ${#servers[@]}))
for fs in $FS; do
  for r in $(seq "$REPS"); do
    k=$((r % ${#servers[@]}))
    order=("${servers[@]:$k}" "${servers[@]:0:$k}")
    for s in "${order[@]}"; do
      step "$fs, repetition $r: ${NAME[$s]}"
      attach "$s" "$fs"
      if has_row pgbench; then
        d0=$(disk_written)
        v=$(pg); [ -n "$v" ] || { echo "bench-apps: pgbench printed no tps" >&2; exit 1; }
        sync
        got[$fs,$s,pgbench]+="$v "
        [ -n "$d0" ] && got[$fs,$s,diskmb]+="$(( ($(disk_written) - d0) / 2048 )) "
        read -r tx sectors < "$WORK/pg.run" || true
        if [ -n "${sectors:-}" ] && [ "${tx:-0}" -gt 0 ]; then
          per_tx=$(python3 -c "print(f'{$sectors * 512 / 4096 / $tx:.2f}')")
          got[$fs,$s,disktx]+="$per_tx "
          [ -n "${OUT:-}" ] && echo "$fs,$r,$s,pgbench-host-writes-per-tx,$per_tx" >> "$OUT/bench-apps.csv"
        fi
        [ -n "${OUT:-}" ] && echo "$fs,$r,$s,pgbench,$v" >> "$OUT/bench-apps.csv"
      fi
      if has_row pgbench+neighbour; then
        v=$(pg "${NEIGHBOUR[$s]}"); [ -n "$v" ] || { echo "bench-apps: pgbench beside the neighbour printed no tps" >&2; exit 1; }
        got[$fs,$s,pgbench+neighbour]+="$v "
        [ -n "${OUT:-}" ] && echo "$fs,$r,$s,pgbench+neighbour,$v" >> "$OUT/bench-apps.csv"
      fi
      for w in fillrandom readrandom readrandomwriterandom; do
        has_row "$w" || continue
        v=$(db "$w"); [ -n "$v" ] || { echo "bench-apps: db_bench $w printed no ops/sec" >&2; exit 1; }
        got[$fs,$s,$w]+="$v "
        [ -n "${OUT:-}" ] && echo "$fs,$r,$s,$w,$v" >> "$OUT/bench-apps.csv"
      done
      detach
    done
  done
done
steps_done

med() { printf '%s\n' "$@" | sort -n | sed -n "$(( ($# + 1) / 2 ))p"; }
ratio() { python3 -c "import sys; a,b=map(float,sys.argv[1:]); print(f'{a/b:.2f}' if b else '-')" "$1" "$2"; }
echo "flexssd export: $SIZE bytes; pgbench ${PG_T}s; db_bench $DB_NUM keys; $REPS repetition(s), median"
for fs in $FS; do
  echo
  hdr="| $fs | flexssd | nbdkit file | vs file | nbdkit memory | vs memory |"
  sep="|---|---:|---:|---:|---:|---:|"
  [ -n "$BASE_BIN" ] && { hdr+=" flexssd base | new/base |"; sep+="---:|---:|"; }
  echo "$hdr"; echo "$sep"
  for w in "${rows[@]}"; do
    unit=ops/s; [[ $w == pgbench* ]] && unit=tps
    # shellcheck disable=SC2086
    fx=$(med ${got[$fs,fx,$w]:-0}); kf=$(med ${got[$fs,kf,$w]:-0}); km=$(med ${got[$fs,km,$w]:-0})
    line="| $w ($unit) | $fx | $kf | $(ratio "$fx" "$kf") | $km | $(ratio "$fx" "$km") |"
    # shellcheck disable=SC2086
    [ -n "$BASE_BIN" ] && { bs=$(med ${got[$fs,bs,$w]:-0}); line+=" $bs | $(ratio "$fx" "$bs") |"; }
    echo "$line"
  done
done
if has_row pgbench && has_row pgbench+neighbour; then
  echo
  echo "Isolation: pgbench's tps beside a neighbour writing flat out with no flushes"
  if [ -n "${NEIGHBOUR_ON:-}" ]; then
    echo "(for every server the same one: a second ${NAME[$NEIGHBOUR_ON]} process, NEIGHBOUR_ON),"
  else
    echo "(another export of the same server: a second vSSD of the daemon, a second"
    echo "nbdkit process),"
  fi
  echo "over its tps alone, medians. Goal: at least 0.90."
  echo
  echo "| file system |$(for s in "${servers[@]}"; do printf ' %s |' "${NAME[$s]}"; done)"
  echo "|---|$(for _ in "${servers[@]}"; do printf -- '---:|'; done)"
  for fs in $FS; do
    line="| $fs |"
    for s in "${servers[@]}"; do
      # shellcheck disable=SC2086
      line+=" $(ratio "$(med ${got[$fs,$s,pgbench+neighbour]:-0})" "$(med ${got[$fs,$s,pgbench]:-0})") |"
    done
    echo "$line"
  done
fi
if [ -n "$(disk_written)" ]; then
  echo
  echo "Host disk ($DISK) writes during the pgbench step (initdb, load, ${PG_T}s run), MiB:"
  echo
  echo "| file system | flexssd | nbdkit file | nbdkit memory |${BASE_BIN:+ flexssd base |}"
  echo "|---|---:|---:|---:|${BASE_BIN:+---:|}"
  for fs in $FS; do
    # shellcheck disable=SC2086
    echo "| $fs | $(med ${got[$fs,fx,diskmb]:-0}) | $(med ${got[$fs,kf,diskmb]:-0}) | $(med ${got[$fs,km,diskmb]:-0}) |${BASE_BIN:+ $(med ${got[$fs,bs,diskmb]:-0}) |}"
  done
  echo
  echo "Host disk ($DISK) writes per pgbench transaction during the ${PG_T}s run alone, in 4 KiB:"
  echo
  echo "| file system | flexssd | nbdkit file | nbdkit memory |${BASE_BIN:+ flexssd base |}"
  echo "|---|---:|---:|---:|${BASE_BIN:+---:|}"
  for fs in $FS; do
    # shellcheck disable=SC2086
    echo "| $fs | $(med ${got[$fs,fx,disktx]:-0}) | $(med ${got[$fs,kf,disktx]:-0}) | $(med ${got[$fs,km,disktx]:-0}) |${BASE_BIN:+ $(med ${got[$fs,bs,disktx]:-0}) |}"
  done
fi

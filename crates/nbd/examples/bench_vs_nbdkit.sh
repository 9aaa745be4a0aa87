#!/usr/bin/env bash
# Compares the flexssd NBD server (examples/memserve, a 1 GiB MemDev) with
# `nbdkit memory 1G` under fio's nbd engine. Prints IOPS per workload, median of
# REPS runs, alternating the two servers so drift hits both alike.
#
#   crates/nbd/examples/bench_vs_nbdkit.sh [RUNTIME_S] [REPS]
set -euo pipefail
RUNTIME=${1:-10}
REPS=${2:-3}
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
cargo build --release -q -p nbd --example memserve --manifest-path "$ROOT/Cargo.toml"
DIR=$(mktemp -d)
X=$DIR/x.sock
K=$DIR/k.sock
"$ROOT/target/release/examples/memserve" "$X" $((1 << 30)) 2>/dev/null &
XPID=$!
nbdkit -U "$K" -P "$DIR/k.pid" memory 1G
trap 'kill $XPID 2>/dev/null; kill $(cat $DIR/k.pid) 2>/dev/null; rm -rf $DIR' EXIT
for _ in $(seq 50); do [ -S "$X" ] && [ -S "$K" ] && break; sleep 0.1; done

run() { # uri, fio args...
    local uri=$1; shift
    fio --name=t --ioengine=nbd --uri="$uri" --size=256m --runtime="$RUNTIME" --time_based \
        --group_reporting --output-format=json "$@" 2>/dev/null |
        sed -n '/^{/,$p' | python3 -c 'import json,sys; j=json.load(sys.stdin)["jobs"][0]; print(round(j["read"]["iops"]+j["write"]["iops"]))'
}
median() { python3 -c 'import sys,statistics; print(round(statistics.median(map(float,sys.argv[1:]))))' "$@"; }

printf '%-34s %12s %12s %7s\n' workload flexssd nbdkit ratio
while read -r name args; do
    xs=(); ks=()
    for _ in $(seq "$REPS"); do
        # shellcheck disable=SC2086
        xs+=("$(run "nbd+unix:///?socket=$X" $args)")
        # shellcheck disable=SC2086
        ks+=("$(run "nbd+unix:///?socket=$K" $args)")
    done
    x=$(median "${xs[@]}"); k=$(median "${ks[@]}")
    printf '%-34s %12s %12s %7s\n' "$name" "$x" "$k" "$(python3 -c "print(f'{$x/$k:.2f}x')")"
done <<'W'
4k-randread-qd32-j1       --rw=randread --bs=4k --iodepth=32 --numjobs=1
4k-randwrite-qd32-j1      --rw=randwrite --bs=4k --iodepth=32 --numjobs=1
4k-randrw70-qd32-j1       --rw=randrw --rwmixread=70 --bs=4k --iodepth=32 --numjobs=1
4k-randread-qd32-j4       --rw=randread --bs=4k --iodepth=32 --numjobs=4
4k-randwrite-qd32-j4      --rw=randwrite --bs=4k --iodepth=32 --numjobs=4
4k-randrw70-qd32-j4       --rw=randrw --rwmixread=70 --bs=4k --iodepth=32 --numjobs=4
128k-seqread-qd32-j1      --rw=read --bs=128k --iodepth=32 --numjobs=1
128k-seqwrite-qd32-j1     --rw=write --bs=128k --iodepth=32 --numjobs=1
W

#!/usr/bin/env bash
# Cache simulator speed and correctness against libCacheSim, side by side in one run.
#
#  1. installs libCacheSim's Python package (`libcachesim`, C core) in a virtual
#     environment under target/ (not committed);
#  2. generates a synthetic Zipf(1.2) trace: 10 million requests over 2 million
#     4 KiB objects (numpy, fixed seed), in libCacheSim's oracleGeneral binary format,
#     which flexssd reads as `oracle:` — the same file for both;
#  3. runs LRU and ARC with a 200,000-object cache in libCacheSim (`process_trace`:
#     the whole trace in C, its own reader) and in flexssd (`flexssd sim cache
#     --threads 1`, its own trace parsing included in the timed run), alternating,
#     REPS times each, and reports medians and the ratio; hit counts must be equal;
#  4. on every real trace in ../shared/traces/block/: flexssd replays the trace file
#     (parsing the text and splitting requests into 4 KiB blocks), libCacheSim replays
#     the same block stream exported by `flexssd trace blocks`; LRU and ARC hit counts
#     must be equal (these are the numbers in crates/cache/tests/golden.rs);
#  5. vFRM, GREM and D-GREM on the Zipf trace on one core (5-minute epochs; the trace's
#     timestamps span 10,000 s, so about 33 epochs).
#
#   scripts/bench-cache.sh [REPS]     (default 3)
# Exits non-zero if any hit count differs between the two simulators.
set -euo pipefail
cd "$(dirname "$0")/.."
REPS=${1:-3}
VENV=${BENCH_CACHE_VENV:-$PWD/target/bench-cache-venv}
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
fi
"$VENV/bin/pip" install -q libcachesim numpy
scripts/build-deps.sh; cargo build --release -q -p flexssd
BIN=$PWD/target/release/flexssd
WORK=$(mktemp -d /tmp/flexssd-bench-cache.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
TRACES=../shared/traces/block
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "libcachesim $("$VENV/bin/python" -c 'import libcachesim; print(libcachesim.__version__)'), flexssd $(git rev-parse --short HEAD)"

BIN=$BIN WORK=$WORK REPS=$REPS TRACES=$TRACES "$VENV/bin/python" - <<'PY'
import json, os, statistics, subprocess, sys, time
import numpy as np
import libcachesim as lcs

BIN, WORK, REPS, TRACES = os.environ["BIN"], os.environ["WORK"], int(os.environ["REPS"]), os.environ["TRACES"]
N, NOBJ, ALPHA, SEED, CACHE_OBJ = 10_000_000, 2_000_000, 1.2, 42, 200_000

# --- synthetic Zipf trace (labelled synthetic everywhere it is reported)
zipf = os.path.join(WORK, "zipf1.2-10M-2M.oracleGeneral.bin")
rng = np.random.default_rng(SEED)
p = np.arange(1, NOBJ + 1, dtype=np.float64) ** -ALPHA
cdf = np.cumsum(p)
rank = np.minimum(np.searchsorted(cdf, rng.random(N) * cdf[-1], side="right"), NOBJ - 1)
ids = rng.permutation(NOBJ).astype(np.uint64)[rank]
rec = np.zeros(N, dtype=np.dtype([("t", "<u4"), ("id", "<u8"), ("sz", "<u4"), ("nv", "<i8")]))
rec["t"] = np.arange(N, dtype=np.uint64) // 1000  # 1000 requests per second: 10,000 s
rec["id"], rec["sz"], rec["nv"] = ids, 4096, -1
rec.tofile(zipf)

def lcs_run(name, path, cache_obj, ignore_size):
    prm = lcs.ReaderInitParam(ignore_obj_size=ignore_size)
    r = lcs.TraceReader(path, lcs.TraceType.ORACLE_GENERAL_TRACE, prm)
    n = r.get_num_of_req() if hasattr(r, "get_num_of_req") else None
    size = cache_obj if ignore_size else cache_obj * 4096
    c = {"LRU": lcs.LRU, "ARC": lcs.ARC}[name](size)
    t0 = time.perf_counter()
    mr, _ = c.process_trace(r)
    dt = time.perf_counter() - t0
    return mr, dt

def flexssd(specs, policies, size, threads=1, extra=()):
    cmd = [BIN, "sim", "cache", "--json", "--threads", str(threads), "--policy", ",".join(policies), "--cache-size", str(size)]
    for s in specs:
        cmd += ["--trace", s]
    cmd += list(extra)
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out)["results"]

def hits(t):
    return t["read_hits"] + t["write_hits"]

bad = 0
print("\n## Zipf(1.2), 10M requests over 2M 4 KiB objects (synthetic), cache 200,000 objects, one core\n")
print("| policy | libcachesim M req/s | flexssd M req/s | ratio | libcachesim misses | flexssd misses |")
print("|---|---:|---:|---:|---:|---:|")
for pol, fpol in [("LRU", "glru"), ("ARC", "arc")]:
    l_rates, f_rates, l_miss, f_miss = [], [], set(), set()
    for _ in range(REPS):
        mr, dt = lcs_run(pol, zipf, CACHE_OBJ, False)
        l_rates.append(N / dt / 1e6)
        l_miss.add(round(mr * N))
        r = flexssd(["oracle:" + zipf], [fpol], CACHE_OBJ * 4096)[0]
        f_rates.append(r["total"]["requests"] / (r["elapsed_ns"] / 1e9) / 1e6)
        f_miss.add(r["total"]["read_misses"] + r["total"]["write_misses"])
    lm, fm = statistics.median(l_rates), statistics.median(f_rates)
    ok = l_miss == f_miss and len(l_miss) == 1
    bad += not ok
    print(f"| {pol} | {lm:.2f} | {fm:.2f} | **{fm / lm:.2f}x** | {min(l_miss)} | {min(f_miss)}{'' if ok else ' MISMATCH'} |")
    print(f"<!-- {pol} all runs: libcachesim {[round(x, 2) for x in l_rates]} flexssd {[round(x, 2) for x in f_rates]} -->")

print("\n## Coarse policies on the same Zipf trace (5-minute epochs), one core\n")
print("| policy | flexssd M req/s | hit ratio % |")
print("|---|---:|---:|")
for pol in ["vfrm", "grem", "dgrem"]:
    rates, hr = [], 0
    for _ in range(REPS):
        r = flexssd(["oracle:" + zipf], [pol], CACHE_OBJ * 4096)[0]
        rates.append(r["total"]["requests"] / (r["elapsed_ns"] / 1e9) / 1e6)
        hr = 100 * r["total"]["hit_ratio"]
    print(f"| {pol} | {statistics.median(rates):.2f} | {hr:.2f} |")

# --- real traces: exact cross-check of LRU and ARC, and speed in block accesses/s
real = [
    ("msr", "msr-hm0-sample.csv", 2 << 20),
    ("tencent", "tencent-cbs-sample.csv", 256 << 20),
    ("systor", "systor17-sample.csv", 8 << 20),
    ("systor", "systor17-additional-sample.csv", 4 << 20),
    ("cloudphysics", "cloudphysics-io-sample.csv", 256 << 20),
    ("disksim", "mqsim-wsrch-small.trace", 64 << 20),
    ("disksim", "mqsim-tpcc-small.trace", 16 << 20),
]
print("\n## Real traces: flexssd parses the trace file, libcachesim replays the exported 4 KiB block stream\n")
print("| trace | cache | policy | block accesses | hits (libcachesim) | hits (flexssd) | libcachesim M acc/s | flexssd M acc/s |")
print("|---|---:|---|---:|---:|---:|---:|---:|")
for fmt, name, size in real:
    path = os.path.join(TRACES, name)
    if not os.path.exists(path):
        print(f"| {name} | skipped: not found | | | | | | |")
        continue
    blocks = os.path.join(WORK, name + ".blocks.bin")
    subprocess.run([BIN, "trace", "blocks", "--trace", f"{fmt}:{path}", "--out", blocks], check=True, capture_output=True)
    n = os.path.getsize(blocks) // 24
    res = {r["policy"]: r for r in flexssd([f"{fmt}:{path}"], ["glru", "arc"], size)}
    for pol, fpol in [("LRU", "glru"), ("ARC", "arc")]:
        mr, dt = lcs_run(pol, blocks, size // 4096, True)
        lh = n - round(mr * n)
        t = res[fpol]["total"]
        fh = hits(t)
        ok = lh == fh and t["read_hits"] + t["read_misses"] + t["write_hits"] + t["write_misses"] == n
        bad += not ok
        frate = n / (res[fpol]["elapsed_ns"] / 1e9) / 1e6
        print(f"| {name} | {size >> 20} MiB | {pol} | {n} | {lh} | {fh}{'' if ok else ' MISMATCH'} | {n / dt / 1e6:.2f} | {frate:.2f} |")

print(f"\n{'all hit counts equal' if bad == 0 else f'{bad} MISMATCH(ES)'}")
sys.exit(1 if bad else 0)
PY

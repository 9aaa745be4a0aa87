//! Workload characterisation: the columns of the GREM paper's Table I, for
//! any trace. They are what tells a cache-friendly workload (small working
//! set, high reuse) from a cache-unfriendly one (large working set, bursts).
//!
//! Definitions, as in the paper, with our counting units made explicit:
//! * **hit ratio**: of 4 KiB block accesses, under global LRU with 4 KiB
//!   lines and a 1 GiB cache (requests are split into blocks);
//! * **working volume (WV)**: bytes accessed, the sum of request sizes;
//! * **working set (WS)**: distinct bytes accessed, in 4 KiB blocks;
//! * **sequential ratio**: bytes of sequential requests over all bytes; a
//!   request is sequential when it starts where the previous request of the
//!   same volume ended;
//! * **write ratio**: write requests over all requests;
//! * **peak IOPS**: the most requests in one 5-minute window (windows are
//!   aligned on the trace's first request; requests stamped before it, as in
//!   unsorted traces, fall into earlier windows), divided by 300 s. A trace shorter than
//!   one window therefore has a peak of its request count / 300, as the
//!   definition gives; the duration is reported beside it.

use rustc_hash::{FxHashMap, FxHashSet};
use serde::Serialize;
use trace::{Op, Request, TraceError};

use crate::policy::glru::Glru;
use crate::{Access, CacheError, CachePolicy, Events, Key, PolicyConfig, BLOCK_BYTES, LINE_BITS};

/// Cache size of the hit-ratio column: 1 GiB.
pub const TABLE1_CACHE_BYTES: u64 = 1 << 30;
/// Window of the peak-IOPS column: 5 minutes.
pub const PEAK_WINDOW_NS: u64 = 300 * 1_000_000_000;

/// The Table I columns for one trace, plus the counts behind them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WorkloadStats {
    /// Requests (zero-length ones included).
    pub requests: u64,
    /// Read requests.
    pub reads: u64,
    /// Write requests.
    pub writes: u64,
    /// Distinct volumes.
    pub volumes: usize,
    /// Seconds from the earliest to the latest time stamp.
    pub duration_s: f64,
    /// Hit ratio of 4 KiB block accesses under 1 GiB global LRU.
    pub lru_1g_hit_ratio: f64,
    /// Working volume, bytes.
    pub working_volume_bytes: u64,
    /// Working set, bytes (distinct 4 KiB blocks × 4 KiB).
    pub working_set_bytes: u64,
    /// Sequential bytes over all bytes.
    pub sequential_ratio: f64,
    /// Write requests over all requests.
    pub write_ratio: f64,
    /// Peak requests per second over 5-minute windows.
    pub peak_iops: f64,
}

/// Computes [`WorkloadStats`] over a stream of requests; stops at the first
/// error, which names the file and line.
pub fn characterise<I>(trace: I) -> Result<WorkloadStats, CacheError>
where
    I: IntoIterator<Item = Result<Request, TraceError>>,
{
    let mut lru = Glru::new(TABLE1_CACHE_BYTES, &PolicyConfig::default())?;
    let mut ev = Events::new();
    let mut spaces: FxHashMap<u32, u32> = FxHashMap::default();
    let mut last_end: Vec<Option<u64>> = Vec::new();
    let mut blocks: FxHashSet<u64> = FxHashSet::default();
    let mut windows: FxHashMap<i64, u64> = FxHashMap::default();
    let (mut requests, mut reads, mut writes) = (0u64, 0u64, 0u64);
    let (mut wv, mut seq, mut hits, mut accesses) = (0u64, 0u64, 0u64, 0u64);
    let (mut first, mut earliest, mut latest) = (None, u64::MAX, 0u64);
    for r in trace {
        let r = r?;
        requests += 1;
        match r.op {
            Op::Read => reads += 1,
            Op::Write => writes += 1,
        }
        let f = *first.get_or_insert(r.time_ns);
        let rel = r.time_ns.saturating_sub(f);
        earliest = earliest.min(r.time_ns);
        latest = latest.max(r.time_ns);
        let signed = i128::from(r.time_ns) - i128::from(f);
        let w = signed.div_euclid(i128::from(PEAK_WINDOW_NS)) as i64;
        *windows.entry(w).or_insert(0) += 1;
        let next = spaces.len() as u32;
        let space = *spaces.entry(r.volume).or_insert(next);
        if space as usize >= last_end.len() {
            last_end.push(None);
        }
        if r.len == 0 {
            continue;
        }
        wv = wv.saturating_add(r.len);
        if last_end[space as usize] == Some(r.offset) {
            seq = seq.saturating_add(r.len);
        }
        let end = r.offset.checked_add(r.len).ok_or_else(|| {
            CacheError::Input(format!(
                "request at offset {} of {} bytes runs past 2^64",
                r.offset, r.len
            ))
        })?;
        last_end[space as usize] = Some(end);
        let (b0, b1) = (r.offset / BLOCK_BYTES, (end - 1) / BLOCK_BYTES);
        Key::new(space, b1)?;
        let base = u64::from(space) << LINE_BITS;
        for b in b0..=b1 {
            let key = Key::from_raw(base | b);
            blocks.insert(key.raw());
            let o = lru.access(
                Access {
                    time_ns: rel,
                    tenant: 0,
                    key,
                    write: r.op == Op::Write,
                },
                &mut ev,
            );
            ev.clear();
            accesses += 1;
            hits += u64::from(o.hit);
        }
    }
    let frac = |a: u64, b: u64| if b == 0 { 0.0 } else { a as f64 / b as f64 };
    let peak = windows.values().copied().max().unwrap_or(0);
    Ok(WorkloadStats {
        requests,
        reads,
        writes,
        volumes: spaces.len(),
        duration_s: latest.saturating_sub(earliest.min(latest)) as f64 / 1e9,
        lru_1g_hit_ratio: frac(hits, accesses),
        working_volume_bytes: wv,
        working_set_bytes: blocks.len() as u64 * BLOCK_BYTES,
        sequential_ratio: frac(seq, wv),
        write_ratio: frac(writes, requests),
        peak_iops: peak as f64 / (PEAK_WINDOW_NS as f64 / 1e9),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(t_s: u64, vol: u32, op: Op, off: u64, len: u64) -> Result<Request, TraceError> {
        Ok(Request {
            time_ns: t_s * 1_000_000_000,
            volume: vol,
            op,
            offset: off,
            len,
        })
    }

    #[test]
    fn table1_columns_on_a_small_trace() {
        let s = characterise(vec![
            req(100, 0, Op::Read, 0, 8192),     // blocks 0,1
            req(101, 0, Op::Write, 8192, 4096), // sequential, block 2
            req(102, 1, Op::Read, 8192, 4096),  // other volume: not sequential
            req(500, 0, Op::Read, 0, 4096),     // hit; second window
            req(501, 0, Op::Read, 0, 0),        // empty
            req(99, 0, Op::Read, 0, 0),         // earlier than the first
        ])
        .unwrap();
        assert_eq!((s.requests, s.reads, s.writes, s.volumes), (6, 5, 1, 2));
        assert_eq!(s.working_volume_bytes, 8192 + 4096 + 4096 + 4096);
        assert_eq!(s.working_set_bytes, 4 * 4096);
        assert!((s.sequential_ratio - 4096.0 / 20480.0).abs() < 1e-12);
        assert!((s.write_ratio - 1.0 / 6.0).abs() < 1e-12);
        assert!((s.lru_1g_hit_ratio - 1.0 / 5.0).abs() < 1e-12);
        assert!((s.peak_iops - 3.0 / 300.0).abs() < 1e-12);
        assert!((s.duration_s - 402.0).abs() < 1e-9);
    }

    #[test]
    fn errors_pass_through() {
        let bad: Vec<Result<Request, TraceError>> = vec![Err(TraceError::Spec {
            spec: "x".into(),
            reason: "bad".into(),
        })];
        assert!(characterise(bad).is_err());
    }
}

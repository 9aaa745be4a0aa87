//! Prometheus metrics of the cache tiers, read from the tiers at scrape time.
//!
//! Hit ratios are per tenant (volume) because that is what the shared-cache
//! policies trade between; zone sizes are per tier (GREM, D-GREM) and
//! reservations per tenant (vFRM, GREM, D-GREM). Hits and misses count 4 KiB
//! blocks, by operation, so `rate(hits) / (rate(hits) + rate(misses))` gives
//! the hit ratio over any window; the `flexssd_tier_hit_ratio` gauge is the
//! ratio since the daemon started.

use std::fmt::Error;
use std::sync::Arc;

use control::{HostManager, TierInfo};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use tier::VolumeStats;

/// Reads every cache tier's counters at each scrape.
#[derive(Debug)]
pub struct TierCollector {
    mgr: Arc<HostManager>,
}

impl TierCollector {
    /// A collector over `mgr`'s tiers.
    pub fn new(mgr: Arc<HostManager>) -> Self {
        Self { mgr }
    }
}

/// Label pairs and a value.
pub(super) type Row<T> = (Vec<(&'static str, String)>, T);

pub(super) fn counter(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    rows: &[Row<u64>],
) -> Result<(), Error> {
    let mut m = enc.encode_descriptor(name, help, None, MetricType::Counter)?;
    for (labels, v) in rows {
        ConstCounter::new(*v).encode(m.encode_family(labels)?)?;
    }
    Ok(())
}

pub(super) fn gauge(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    rows: &[Row<f64>],
) -> Result<(), Error> {
    let mut m = enc.encode_descriptor(name, help, None, MetricType::Gauge)?;
    for (labels, v) in rows {
        ConstGauge::new(*v).encode(m.encode_family(labels)?)?;
    }
    Ok(())
}

/// One row per (tier, volume).
fn per_volume<T>(tiers: &[TierInfo], f: impl Fn(&VolumeStats) -> T) -> Vec<Row<T>> {
    tiers
        .iter()
        .flat_map(|t| {
            t.stats.volumes.iter().map(|v| {
                (
                    vec![("tier", t.name.clone()), ("volume", v.name.clone())],
                    f(v),
                )
            })
        })
        .collect()
}

/// One row per (tier, volume, op) for read and write.
fn per_op<T>(tiers: &[TierInfo], f: impl Fn(&VolumeStats, bool) -> T) -> Vec<Row<T>> {
    let mut out = Vec::new();
    for t in tiers {
        for v in &t.stats.volumes {
            for (op, write) in [("read", false), ("write", true)] {
                out.push((
                    vec![
                        ("tier", t.name.clone()),
                        ("volume", v.name.clone()),
                        ("op", op.to_string()),
                    ],
                    f(v, write),
                ));
            }
        }
    }
    out
}

/// One row per tier.
fn per_tier<T>(tiers: &[TierInfo], f: impl Fn(&TierInfo) -> T) -> Vec<Row<T>> {
    tiers
        .iter()
        .map(|t| (vec![("tier", t.name.clone())], f(t)))
        .collect()
}

impl Collector for TierCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), Error> {
        let tiers = self.mgr.tiers();
        let e = &mut enc;
        counter(
            e,
            "flexssd_tier_hits",
            "4 KiB blocks served from (read) or updated in (write) the tier's flash, per tenant volume",
            &per_op(&tiers, |v, w| if w { v.write_hits } else { v.read_hits }),
        )?;
        counter(
            e,
            "flexssd_tier_misses",
            "4 KiB blocks read from or written to the backing store only, per tenant volume",
            &per_op(
                &tiers,
                |v, w| if w { v.write_misses } else { v.read_misses },
            ),
        )?;
        gauge(
            e,
            "flexssd_tier_hit_ratio",
            "Hits over accesses since the daemon started, per tenant volume and operation",
            &per_op(&tiers, |v, w| {
                if w {
                    v.write_hit_ratio()
                } else {
                    v.read_hit_ratio()
                }
            }),
        )?;
        counter(
            e,
            "flexssd_tier_read_bytes",
            "Bytes read by the tenant volume's clients",
            &per_volume(&tiers, |v| v.read_bytes),
        )?;
        counter(
            e,
            "flexssd_tier_write_bytes",
            "Bytes written by the tenant volume's clients",
            &per_volume(&tiers, |v| v.write_bytes),
        )?;
        gauge(
            e,
            "flexssd_tier_resident_bytes",
            "Bytes of the tenant volume the policy holds in the cache",
            &per_volume(&tiers, |v| v.resident_bytes as f64),
        )?;
        let reserved: Vec<Row<f64>> = per_volume(&tiers, |v| v.reserved_bytes)
            .into_iter()
            .filter_map(|(l, v)| v.map(|b| (l, b as f64)))
            .collect();
        gauge(
            e,
            "flexssd_tier_reserved_bytes",
            "Cache reserved for the tenant volume (vFRM share, GREM long-term zone)",
            &reserved,
        )?;
        let mut zones: Vec<Row<f64>> = Vec::new();
        for t in &tiers {
            for (zone, b) in [
                ("long_term", t.stats.long_term_zone_bytes),
                ("short_term", t.stats.short_term_zone_bytes),
            ] {
                if let Some(b) = b {
                    zones.push((
                        vec![("tier", t.name.clone()), ("zone", zone.to_string())],
                        b as f64,
                    ));
                }
            }
        }
        gauge(
            e,
            "flexssd_tier_zone_bytes",
            "Capacity of the two-zone policies' zones (GREM, D-GREM)",
            &zones,
        )?;
        gauge(
            e,
            "flexssd_tier_cache_bytes",
            "Cache size now",
            &per_tier(&tiers, |t| t.stats.cache_bytes as f64),
        )?;
        gauge(
            e,
            "flexssd_tier_cached_bytes",
            "Bytes of data in the cache now",
            &per_tier(&tiers, |t| t.stats.cached_bytes as f64),
        )?;
        counter(
            e,
            "flexssd_tier_lines_filled",
            "Cache lines filled (admitted on a miss or migrated in at an epoch end)",
            &per_tier(&tiers, |t| t.stats.lines_filled),
        )?;
        counter(
            e,
            "flexssd_tier_lines_evicted",
            "Cache lines that left the cache (evicted, or dropped by a policy change)",
            &per_tier(&tiers, |t| t.stats.lines_evicted),
        )?;
        counter(
            e,
            "flexssd_tier_policy_changes",
            "Live policy changes",
            &per_tier(&tiers, |t| t.stats.policy_changes),
        )?;
        let policy: Vec<Row<f64>> = tiers
            .iter()
            .map(|t| {
                (
                    vec![
                        ("tier", t.name.clone()),
                        ("policy", t.stats.policy.to_string()),
                    ],
                    1.0,
                )
            })
            .collect();
        gauge(
            e,
            "flexssd_tier_policy",
            "The tier's policy now (always 1)",
            &policy,
        )?;
        Ok(())
    }
}

//! Prometheus metrics of BlockFlex harvesting, read from the harvester at
//! scrape time: events by kind (so `rate()` shows reclaims, migrations and
//! exceptions as they happen), gSSDs by state, lent flash, and each harvest
//! volume's size, traffic and migration progress.

use std::fmt::Error;
use std::sync::Arc;

use control::HostManager;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;

use super::tier::{counter, gauge, Row};

/// Reads the harvester's state at each scrape.
#[derive(Debug)]
pub struct HarvestCollector {
    mgr: Arc<HostManager>,
}

impl HarvestCollector {
    /// A collector over `mgr`'s harvester.
    pub fn new(mgr: Arc<HostManager>) -> Self {
        Self { mgr }
    }
}

impl Collector for HarvestCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), Error> {
        let s = self.mgr.harvest_status();
        let e = &mut enc;
        let events: Vec<Row<u64>> = s
            .events
            .iter()
            .map(|(k, n)| (vec![("kind", k.clone())], *n))
            .collect();
        counter(
            e,
            "flexssd_harvest_events",
            "Harvester events by kind (created, harvested, released, pooled, expired, reclaimed, migration-started, migrated, migration-failed, evicted, eviction-done, exception, demand)",
            &events,
        )?;
        let gssds = self.mgr.gssds();
        let states: Vec<Row<f64>> = ["pool", "in-use", "migrating-out", "evicting"]
            .iter()
            .map(|st| {
                let n = gssds.iter().filter(|g| g.state == *st).count();
                (vec![("state", st.to_string())], n as f64)
            })
            .collect();
        gauge(e, "flexssd_harvest_gssds", "gSSDs by state", &states)?;
        gauge(
            e,
            "flexssd_harvest_lent_blocks",
            "Flash blocks that regular vSSDs lend to gSSDs",
            &[(vec![], s.lent_blocks as f64)],
        )?;
        gauge(
            e,
            "flexssd_harvest_unsold_channels",
            "Unsold channels held by gSSDs",
            &[(vec![], f64::from(s.unsold_channels))],
        )?;
        let vols = self.mgr.harvest_volumes();
        let label = |v: &control::HarvestVolumeInfo| {
            vec![("volume", v.name.clone()), ("tenant", v.tenant.clone())]
        };
        let size: Vec<Row<f64>> = vols
            .iter()
            .map(|v| (label(v), v.size_bytes as f64))
            .collect();
        gauge(
            e,
            "flexssd_harvest_volume_bytes",
            "Size of each harvest volume",
            &size,
        )?;
        let evicting: Vec<Row<f64>> = vols
            .iter()
            .map(|v| (label(v), v.evict_by_s.map_or(0.0, |t| t as f64)))
            .collect();
        gauge(
            e,
            "flexssd_harvest_volume_evict_by_seconds",
            "Eviction deadline of each harvest volume on the daemon's clock (0: not evicted)",
            &evicting,
        )?;
        let copied: Vec<Row<f64>> = vols
            .iter()
            .map(|v| {
                let (c, t) = v
                    .migrations
                    .iter()
                    .fold((0, 0), |(c, t), m| (c + m.copied, t + m.total));
                (label(v), if t == 0 { 0.0 } else { c as f64 / t as f64 })
            })
            .collect();
        gauge(
            e,
            "flexssd_harvest_volume_migration_progress",
            "Fraction of the migrating ranges copied (0 when none is migrating)",
            &copied,
        )?;
        let rows = |f: &dyn Fn(&blockdev::StatsSnapshot) -> u64| -> Vec<Row<u64>> {
            vols.iter().map(|v| (label(v), f(&v.io))).collect()
        };
        counter(
            e,
            "flexssd_harvest_volume_read_bytes",
            "Bytes read from each harvest volume",
            &rows(&|s| s.read_bytes),
        )?;
        counter(
            e,
            "flexssd_harvest_volume_write_bytes",
            "Bytes written to each harvest volume",
            &rows(&|s| s.write_bytes),
        )?;
        counter(
            e,
            "flexssd_harvest_volume_errors",
            "Failed requests on each harvest volume (for example after an eviction)",
            &rows(&|s| s.errors),
        )?;
        Ok(())
    }
}

//! Prometheus metrics, read from the live counters at scrape time.
//!
//! Nothing is copied into a metrics registry as I/O happens: the data path already
//! keeps atomic counters (the stats layer, the FTL, the flash model), so a custom
//! [`Collector`] reads them when Prometheus scrapes. Counters get the `_total`
//! suffix from the encoder (`flexssd_vssd_read_ops_total{vssd="default"}`).

use std::fmt::Error;
use std::sync::Arc;

use control::HostManager;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;

mod harvest;
mod tier;
pub use self::harvest::HarvestCollector;
pub use self::tier::TierCollector;

/// Reads a host's vSSD and device counters at every scrape.
#[derive(Debug)]
pub struct HostCollector {
    mgr: Arc<HostManager>,
}

impl HostCollector {
    /// A collector over `mgr`.
    pub fn new(mgr: Arc<HostManager>) -> Self {
        Self { mgr }
    }
}

/// One sample: a label value and a number.
type Rows = Vec<(String, f64)>;

fn counters(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    label: &str,
    rows: &[(String, u64)],
) -> Result<(), Error> {
    let mut m = enc.encode_descriptor(name, help, None, MetricType::Counter)?;
    for (l, v) in rows {
        let labels = [(label, l.as_str())];
        ConstCounter::new(*v).encode(m.encode_family(&labels)?)?;
    }
    Ok(())
}

fn gauges(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    label: &str,
    rows: &Rows,
) -> Result<(), Error> {
    let mut m = enc.encode_descriptor(name, help, None, MetricType::Gauge)?;
    for (l, v) in rows {
        let labels = [(label, l.as_str())];
        ConstGauge::new(*v).encode(m.encode_family(&labels)?)?;
    }
    Ok(())
}

impl Collector for HostCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), Error> {
        let st = self.mgr.stats();
        let v = &st.vssds;
        let c = |f: &dyn Fn(&control::VssdStats) -> u64| -> Vec<(String, u64)> {
            v.iter().map(|s| (s.name.clone(), f(s))).collect()
        };
        let g = |f: &dyn Fn(&control::VssdStats) -> f64| -> Rows {
            v.iter().map(|s| (s.name.clone(), f(s))).collect()
        };
        let e = &mut enc;
        counters(
            e,
            "flexssd_vssd_read_ops",
            "Read requests completed by the vSSD's export",
            "vssd",
            &c(&|s| s.io.reads),
        )?;
        counters(
            e,
            "flexssd_vssd_write_ops",
            "Write requests (write-zeroes included) completed",
            "vssd",
            &c(&|s| s.io.writes),
        )?;
        counters(
            e,
            "flexssd_vssd_read_bytes",
            "Bytes read by clients",
            "vssd",
            &c(&|s| s.io.read_bytes),
        )?;
        counters(
            e,
            "flexssd_vssd_write_bytes",
            "Bytes written by clients",
            "vssd",
            &c(&|s| s.io.write_bytes),
        )?;
        counters(
            e,
            "flexssd_vssd_flush_ops",
            "Flush requests completed",
            "vssd",
            &c(&|s| s.io.flushes),
        )?;
        counters(
            e,
            "flexssd_vssd_trim_ops",
            "Trim requests completed",
            "vssd",
            &c(&|s| s.io.trims),
        )?;
        counters(
            e,
            "flexssd_vssd_trim_bytes",
            "Bytes trimmed",
            "vssd",
            &c(&|s| s.io.trim_bytes),
        )?;
        counters(
            e,
            "flexssd_vssd_errors",
            "Requests that failed",
            "vssd",
            &c(&|s| s.io.errors),
        )?;
        counters(
            e,
            "flexssd_vssd_host_pages_written",
            "Pages written on behalf of clients",
            "vssd",
            &c(&|s| s.ftl.host_pages_written),
        )?;
        counters(
            e,
            "flexssd_vssd_flash_pages_written",
            "Pages programmed in flash (host, GC and trim records)",
            "vssd",
            &c(&|s| s.ftl.flash_pages_written),
        )?;
        counters(
            e,
            "flexssd_vssd_flash_pages_read",
            "Pages read from flash",
            "vssd",
            &c(&|s| s.ftl.flash_pages_read),
        )?;
        counters(
            e,
            "flexssd_vssd_gc_runs",
            "Garbage-collection runs (one victim block each)",
            "vssd",
            &c(&|s| s.ftl.gc_runs),
        )?;
        counters(
            e,
            "flexssd_vssd_gc_pages_moved",
            "Valid pages moved by garbage collection",
            "vssd",
            &c(&|s| s.ftl.gc_pages_moved),
        )?;
        counters(
            e,
            "flexssd_vssd_block_erases",
            "Blocks erased by the vSSD",
            "vssd",
            &c(&|s| s.ftl.block_erases),
        )?;
        gauges(
            e,
            "flexssd_vssd_write_amplification",
            "Flash pages programmed per host page written",
            "vssd",
            &g(&|s| s.write_amplification),
        )?;
        for (name, help, f) in [
            (
                "flexssd_vssd_read_latency_p50_seconds",
                "Modelled read latency, median (emulation mode; since the last latency reset)",
                (|s: &control::VssdStats| s.io.read_latency.p50_ns)
                    as fn(&control::VssdStats) -> u64,
            ),
            (
                "flexssd_vssd_read_latency_p99_seconds",
                "Modelled read latency, 99th percentile (emulation mode)",
                |s| s.io.read_latency.p99_ns,
            ),
            (
                "flexssd_vssd_read_latency_p999_seconds",
                "Modelled read latency, 99.9th percentile (emulation mode)",
                |s| s.io.read_latency.p999_ns,
            ),
            (
                "flexssd_vssd_write_latency_p50_seconds",
                "Modelled write latency, median (emulation mode)",
                |s| s.io.write_latency.p50_ns,
            ),
            (
                "flexssd_vssd_write_latency_p99_seconds",
                "Modelled write latency, 99th percentile (emulation mode)",
                |s| s.io.write_latency.p99_ns,
            ),
        ] {
            gauges(e, name, help, "vssd", &g(&|s| f(s) as f64 / 1e9))?;
        }
        gauges(
            e,
            "flexssd_vssd_free_blocks",
            "Erased blocks ready for writing",
            "vssd",
            &g(&|s| s.ftl.free_blocks as f64),
        )?;
        gauges(
            e,
            "flexssd_vssd_total_blocks",
            "Blocks owned by the vSSD",
            "vssd",
            &g(&|s| s.ftl.total_blocks as f64),
        )?;
        gauges(
            e,
            "flexssd_vssd_mapped_pages",
            "Logical pages currently mapped",
            "vssd",
            &g(&|s| s.ftl.mapped_pages as f64),
        )?;
        gauges(
            e,
            "flexssd_vssd_capacity_bytes",
            "Exported size in bytes",
            "vssd",
            &g(&|s| s.ftl.capacity_bytes as f64),
        )?;
        gauges(
            e,
            "flexssd_vssd_erase_count_max",
            "Largest erase count among the vSSD's blocks",
            "vssd",
            &g(&|s| s.ftl.max_erase_count as f64),
        )?;
        gauges(
            e,
            "flexssd_vssd_erase_count_min",
            "Smallest erase count among the vSSD's blocks",
            "vssd",
            &g(&|s| s.ftl.min_erase_count as f64),
        )?;

        let d = &st.devices;
        let dc = |f: &dyn Fn(&control::DeviceInfo) -> u64| -> Vec<(String, u64)> {
            d.iter().map(|x| (x.name.clone(), f(x))).collect()
        };
        let dg = |f: &dyn Fn(&control::DeviceInfo) -> f64| -> Rows {
            d.iter().map(|x| (x.name.clone(), f(x))).collect()
        };
        counters(
            e,
            "flexssd_device_page_reads",
            "Flash page reads since the daemon started",
            "device",
            &dc(&|x| x.stats.page_reads),
        )?;
        counters(
            e,
            "flexssd_device_page_programs",
            "Flash page programs since the daemon started",
            "device",
            &dc(&|x| x.stats.page_programs),
        )?;
        counters(
            e,
            "flexssd_device_block_erases",
            "Flash block erases since the daemon started",
            "device",
            &dc(&|x| x.stats.block_erases),
        )?;
        gauges(
            e,
            "flexssd_device_erase_count_min",
            "Smallest erase count over all blocks",
            "device",
            &dg(&|x| x.erase_count.min as f64),
        )?;
        gauges(
            e,
            "flexssd_device_erase_count_max",
            "Largest erase count over all blocks",
            "device",
            &dg(&|x| x.erase_count.max as f64),
        )?;
        gauges(
            e,
            "flexssd_device_erase_count_avg",
            "Mean erase count over all blocks",
            "device",
            &dg(&|x| x.erase_count.avg),
        )?;
        gauges(
            e,
            "flexssd_device_channels",
            "Channels of the device",
            "device",
            &dg(&|x| x.geometry.channels as f64),
        )?;
        gauges(
            e,
            "flexssd_device_free_channels",
            "Channels no vSSD uses",
            "device",
            &dg(&|x| x.free_channels.len() as f64),
        )?;
        gauges(
            e,
            "flexssd_device_raw_bytes",
            "Raw flash in bytes",
            "device",
            &dg(&|x| x.raw_bytes as f64),
        )?;
        // Regulator's scheduler, per scheduled vSSD.
        let sc = self.mgr.sched_stats();
        let sch = |f: &dyn Fn(&sched::TenantStats) -> u64| -> Vec<(String, u64)> {
            sc.iter().map(|(n, s)| (n.clone(), f(s))).collect()
        };
        counters(
            e,
            "flexssd_sched_pieces",
            "Request pieces admitted by the SLA scheduler",
            "vssd",
            &sch(&|s| s.pieces),
        )?;
        counters(
            e,
            "flexssd_sched_delayed_pieces",
            "Pieces the SLA scheduler held for a later time slice",
            "vssd",
            &sch(&|s| s.delayed),
        )?;
        gauges(
            e,
            "flexssd_sched_delay_seconds_sum",
            "Total time pieces were held by the SLA scheduler",
            "vssd",
            &sc.iter()
                .map(|(n, s)| (n.clone(), s.delay_ns as f64 / 1e9))
                .collect(),
        )?;
        counters(
            e,
            "flexssd_sched_burst_bytes",
            "Bytes admitted above the vSSD's SLA curve into spare capacity",
            "vssd",
            &sch(&|s| s.burst_bytes),
        )?;
        counters(
            e,
            "flexssd_sched_refused_pieces",
            "Pieces refused because the SLA curve never allows them",
            "vssd",
            &sch(&|s| s.refused),
        )?;
        Ok(())
    }
}

//! `flexssd sla`: tenant SLA curves and storage-unit curves (Regulator).
//!
//! * `set` / `show`: a vSSD's curve, weight and burst flag, changed live through
//!   the API;
//! * `curves`: a device's measured unit curves;
//! * `measure-device`: measures a unit's curve, either of an emulated device (a
//!   scratch copy of its model, so tenants are not disturbed) or of any block
//!   device or file with fio; `--store` saves an emulated unit's curve with its
//!   device, where the scheduler picks it up at once.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{anyhow, bail, Context, Result};
use clap::{Args, Subcommand};
use control::measure::{measure_curve, EmulatedProber, Prober, SearchSpec, UnitCurve};
use control::{Config, DeviceInfo, VssdSlaInfo};
use sched::TenantSla;
use sla::catalog::Percentile;
use sla::Curve;

use crate::client::Client;

/// SLA options of `flexssd vssd create` and `flexssd sla set`.
#[derive(Debug, Clone, Args)]
pub struct SlaOpts {
    /// SLA curve: `W:R` points (write, read throughput in 4 KiB operations per
    /// second), e.g. `0:20000,2000:0`.
    #[arg(long = "sla-curve", value_name = "W:R,...")]
    pub curve: Option<String>,
    /// Share of spare bandwidth when bursting (weighted round robin).
    #[arg(long = "sla-weight", value_name = "N")]
    pub weight: Option<u32>,
    /// Allow bursting above the curve into spare capacity.
    #[arg(long = "sla-burst")]
    pub burst: bool,
}

impl SlaOpts {
    /// The agreement these options describe (`None` if none was given).
    pub fn to_sla(&self) -> Result<Option<TenantSla>> {
        if self.curve.is_none() && self.weight.is_none() && !self.burst {
            return Ok(None);
        }
        Ok(Some(TenantSla {
            curve: self.curve.as_deref().map(parse_curve).transpose()?,
            weight: self.weight.unwrap_or(1),
            burst: self.burst,
        }))
    }
}

/// Parses `W:R,W:R,...` into a curve.
pub fn parse_curve(s: &str) -> Result<Curve> {
    let mut pts = Vec::new();
    for item in s.split(',').map(str::trim).filter(|x| !x.is_empty()) {
        let (w, r) = item
            .split_once(':')
            .ok_or_else(|| anyhow!("curve point {item:?} is not W:R"))?;
        let num = |v: &str, what: &str| -> Result<f64> {
            v.trim()
                .parse::<f64>()
                .map_err(|_| anyhow!("curve point {item:?}: {what} {v:?} is not a number"))
        };
        pts.push((num(w, "write rate")?, num(r, "read rate")?));
    }
    Curve::new(pts).map_err(|e| anyhow!("invalid SLA curve {s:?}: {e}"))
}

fn show_curve(c: &Curve) -> String {
    c.points()
        .iter()
        .map(|(w, r)| format!("{w:.0}:{r:.0}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// Parses a duration such as `500us`, `2ms`, `1.5s` (a bare number is µs).
fn parse_duration_ns(s: &str) -> Result<u64> {
    let s = s.trim();
    let (num, mul) = if let Some(v) = s.strip_suffix("us") {
        (v, 1e3)
    } else if let Some(v) = s.strip_suffix("ms") {
        (v, 1e6)
    } else if let Some(v) = s.strip_suffix("ns") {
        (v, 1.0)
    } else if let Some(v) = s.strip_suffix('s') {
        (v, 1e9)
    } else {
        (s, 1e3)
    };
    let v: f64 = num
        .trim()
        .parse()
        .map_err(|_| anyhow!("{s:?} is not a duration (e.g. 500us, 2ms, 1s)"))?;
    if !(v.is_finite() && v > 0.0) {
        bail!("{s:?}: a duration must be positive");
    }
    Ok((v * mul).round() as u64)
}

/// Options of `flexssd sla`.
#[derive(Debug, Args)]
pub struct SlaArgs {
    #[command(flatten)]
    pub client: crate::ClientOpts,
    #[command(subcommand)]
    cmd: SlaCmd,
}

#[derive(Debug, Subcommand)]
enum SlaCmd {
    /// Set a vSSD's SLA (live).
    Set {
        /// vSSD name.
        vssd: String,
        #[command(flatten)]
        opts: SlaOpts,
        /// Remove the SLA instead.
        #[arg(long, conflicts_with_all = ["curve", "weight", "burst"])]
        clear: bool,
    },
    /// Show a vSSD's SLA, its unit and its scheduler counters.
    Show {
        /// vSSD name.
        vssd: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Show a device's measured unit curves.
    Curves {
        /// Device name.
        device: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Measure a storage unit's SLA curve.
    MeasureDevice(MeasureArgs),
}

/// Options of `flexssd sla measure-device`.
#[derive(Debug, Args)]
struct MeasureArgs {
    /// Emulated device to measure (its geometry and timing come from the daemon,
    /// or from --config when no daemon runs). Default: the first device.
    #[arg(long, conflicts_with = "fio")]
    device: Option<String>,
    /// Configuration file to take the device from when no daemon is asked.
    #[arg(long, value_name = "FILE", conflicts_with = "fio")]
    config: Option<PathBuf>,
    /// Number of channels of the unit (default: all of the device's).
    #[arg(long)]
    channels: Option<u32>,
    /// Measure this block device or file with fio instead of an emulated device.
    #[arg(long, value_name = "PATH")]
    fio: Option<PathBuf>,
    /// With --fio: use O_DIRECT (off for files on tmpfs).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    direct: bool,
    /// With --fio: bytes of the device or file to use.
    #[arg(long, default_value = "1G", value_parser = control::parse_size)]
    size: u64,
    /// Read-latency percentile: p95, p99 or p99.9.
    #[arg(long, default_value = "p95")]
    percentile: Percentile,
    /// Bound on that percentile (e.g. 500us, 2ms).
    #[arg(long, default_value = "500us")]
    bound: String,
    /// Length of each load point (virtual time when emulated, real with fio).
    #[arg(long)]
    duration: Option<String>,
    /// Write rates sampled.
    #[arg(long, default_value_t = 6)]
    points: usize,
    /// Bisection steps per search.
    #[arg(long, default_value_t = 9)]
    steps: u32,
    /// Emulated: share of the raw flash holding live data during the
    /// measurement (GC works harder the fuller it is). Default: a vSSD's
    /// default capacity, 87.5%.
    #[arg(long, conflicts_with = "fio")]
    utilization: Option<f64>,
    /// Random seed of the emulated load.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Store the curve with the device in the daemon (emulated devices).
    #[arg(long, conflicts_with = "fio")]
    store: bool,
    /// Write the curve (JSON) here.
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    /// Write the samples and the curve as CSV here.
    #[arg(long, value_name = "FILE")]
    csv: Option<PathBuf>,
    /// Draw the curve (SVG) here; needs --csv.
    #[arg(long, value_name = "FILE", requires = "csv")]
    plot: Option<PathBuf>,
}

/// Runs an SLA subcommand.
pub fn run(a: &SlaArgs, api: &str) -> Result<()> {
    let c = Client::new(api);
    match &a.cmd {
        SlaCmd::Set { vssd, opts, clear } => {
            let sla = if *clear {
                None
            } else {
                let s = opts.to_sla()?;
                if s.is_none() {
                    bail!("nothing to set: give --sla-curve, --sla-weight, --sla-burst or --clear");
                }
                s
            };
            let info: VssdSlaInfo = c.put(&format!("/v1/vssds/{vssd}/sla"), &sla)?;
            print_sla(&info);
            Ok(())
        }
        SlaCmd::Show { vssd, json } => {
            let info: VssdSlaInfo = c.get(&format!("/v1/vssds/{vssd}/sla"))?;
            if *json {
                println!("{}", serde_json::to_string_pretty(&info)?);
            } else {
                print_sla(&info);
            }
            Ok(())
        }
        SlaCmd::Curves { device, json } => {
            let m: std::collections::BTreeMap<u32, UnitCurve> =
                c.get(&format!("/v1/devices/{device}/curves"))?;
            if *json {
                println!("{}", serde_json::to_string_pretty(&m)?);
                return Ok(());
            }
            if m.is_empty() {
                println!("no unit curves measured for {device}");
            }
            for (ch, u) in m {
                println!(
                    "{ch} channel(s): {} <= {} µs: {}",
                    u.percentile,
                    u.bound_us,
                    show_curve(&u.curve)
                );
            }
            Ok(())
        }
        SlaCmd::MeasureDevice(m) => measure(&c, m),
    }
}

fn print_sla(i: &VssdSlaInfo) {
    println!("vSSD {}", i.name);
    match &i.sla {
        Some(s) => println!(
            "  sla: curve {} weight {} burst {}",
            s.curve.as_ref().map_or("none".into(), show_curve),
            s.weight,
            s.burst
        ),
        None => println!("  sla: none"),
    }
    println!(
        "  unit: {} channels {} with {}",
        i.device,
        control::channel_list(&i.unit_channels),
        if i.neighbours.is_empty() {
            "no other vSSD".to_string()
        } else {
            i.neighbours.join(", ")
        }
    );
    match &i.unit_curve {
        Some(u) => println!(
            "  unit curve: {} <= {} µs: {}",
            u.percentile,
            u.bound_us,
            show_curve(&u.curve)
        ),
        None => println!("  unit curve: none measured"),
    }
    match &i.stats {
        Some(s) => println!(
            "  scheduler: {} pieces, {} delayed ({:.3} s), {} burst bytes, {} refused",
            s.pieces,
            s.delayed,
            s.delay_ns as f64 / 1e9,
            s.burst_bytes,
            s.refused
        ),
        None => println!("  scheduler: off for this device"),
    }
}

fn measure(c: &Client, m: &MeasureArgs) -> Result<()> {
    let bound_ns = parse_duration_ns(&m.bound)?;
    let spec = SearchSpec {
        percentile: m.percentile,
        bound_ns,
        write_points: m.points,
        steps: m.steps,
    };
    let (unit, what, channels, device) = if let Some(path) = &m.fio {
        let dur = parse_duration_ns(m.duration.as_deref().unwrap_or("3s"))?;
        let mut p = FioProber::new(path, m.size, m.direct, dur)?;
        eprintln!(
            "measuring {} with fio: ceilings {:.0} read / {:.0} write IOPS",
            path.display(),
            p.ceilings().0,
            p.ceilings().1
        );
        (
            measure_curve(&mut p, &spec)?,
            path.display().to_string(),
            None,
            None,
        )
    } else {
        let dev = emulated_device(c, m)?;
        let channels = m.channels.unwrap_or(dev.geometry.channels);
        let dur = parse_duration_ns(m.duration.as_deref().unwrap_or("2s"))?;
        eprintln!(
            "measuring {channels} channel(s) of {} (emulated, scratch copy, {} ms of virtual time per point)",
            dev.name,
            dur / 1_000_000
        );
        let mut p = EmulatedProber::new(
            dev.geometry,
            dev.timing,
            channels,
            m.utilization,
            dur,
            m.seed,
        )?;
        let what = format!("{} ({channels} channels, emulated)", dev.name);
        (
            measure_curve(&mut p, &spec)?,
            what,
            Some(channels),
            Some(dev.name),
        )
    };
    println!(
        "{what}: {} read latency <= {} µs",
        unit.percentile, unit.bound_us
    );
    println!(
        "{:>12} {:>12} {:>12}",
        "write IOPS", "read IOPS", "latency µs"
    );
    for s in &unit.samples {
        println!(
            "{:>12.0} {:>12.0} {:>12.1}",
            s.write_iops, s.read_iops, s.latency_us
        );
    }
    println!("curve (upper convex hull): {}", show_curve(&unit.curve));
    if let Some(out) = &m.out {
        std::fs::write(out, serde_json::to_string_pretty(&unit)?)
            .with_context(|| format!("write {}", out.display()))?;
    }
    if let Some(csv) = &m.csv {
        write_csv(csv, &unit)?;
        if let Some(svg) = &m.plot {
            crate::plot::run(&crate::plot::PlotCmd::Lines(crate::plot::LinesArgs {
                csv: csv.clone(),
                x: "write_iops".into(),
                y: "read_iops".into(),
                series: "series".into(),
                out: svg.clone(),
                title: format!(
                    "SLA curve of {what}: {} <= {} µs",
                    unit.percentile, unit.bound_us
                ),
                xlabel: Some("write throughput (4 KiB IOPS)".into()),
                ylabel: Some("read throughput (4 KiB IOPS)".into()),
                logy: false,
                scatter: vec!["measured".into()],
                hline: None,
            }))?;
        }
    }
    if m.store {
        let (Some(ch), Some(dev)) = (channels, device) else {
            bail!("--store needs an emulated device");
        };
        let _: serde_json::Value = c.put(&format!("/v1/devices/{dev}/curves/{ch}"), &unit)?;
        println!("stored as the curve of {dev}'s {ch}-channel units");
    }
    Ok(())
}

fn write_csv(path: &Path, u: &UnitCurve) -> Result<()> {
    let mut f =
        std::fs::File::create(path).with_context(|| format!("create {}", path.display()))?;
    writeln!(f, "series,write_iops,read_iops,latency_us")?;
    for s in &u.samples {
        writeln!(
            f,
            "measured,{},{},{}",
            s.write_iops, s.read_iops, s.latency_us
        )?;
    }
    for (w, r) in u.curve.points() {
        writeln!(f, "curve,{w},{r},")?;
    }
    Ok(())
}

/// An emulated device's model parameters.
struct Emulated {
    name: String,
    geometry: flash::Geometry,
    timing: flash::Timing,
}

impl From<DeviceInfo> for Emulated {
    fn from(d: DeviceInfo) -> Self {
        Emulated {
            name: d.name,
            geometry: d.geometry,
            timing: d.timing,
        }
    }
}

/// The device to measure: from the daemon if it answers, else from the config.
fn emulated_device(c: &Client, m: &MeasureArgs) -> Result<Emulated> {
    if m.config.is_none() {
        let path = match &m.device {
            Some(d) => format!("/v1/devices/{d}"),
            None => "/v1/devices".into(),
        };
        match &m.device {
            Some(_) => match c.get::<DeviceInfo>(&path) {
                Ok(d) => return Ok(d.into()),
                Err(e) if !e.to_string().contains("cannot reach") => return Err(e),
                Err(_) => {}
            },
            None => match c.get::<Vec<DeviceInfo>>(&path) {
                Ok(mut v) if !v.is_empty() => return Ok(v.remove(0).into()),
                Ok(_) => bail!("the daemon has no devices"),
                Err(e) if !e.to_string().contains("cannot reach") => return Err(e),
                Err(_) => {}
            },
        }
        if m.store {
            bail!("--store needs a running daemon");
        }
    }
    let cfg = match &m.config {
        Some(p) => Config::load(p)?,
        None => Config::default(),
    };
    let d = match &m.device {
        Some(n) => cfg
            .devices
            .iter()
            .find(|d| &d.name == n)
            .ok_or_else(|| anyhow!("no device {n:?} in the configuration"))?,
        None => cfg
            .devices
            .first()
            .ok_or_else(|| anyhow!("the configuration has no devices"))?,
    };
    Ok(Emulated {
        name: d.name.clone(),
        geometry: d.geometry,
        timing: d.timing,
    })
}

/// Drives a block device or file with fio: two jobs, random 4 KiB reads and
/// writes, each rate-limited (Poisson arrivals), and reads the read completion
/// latency at the percentile from fio's JSON.
struct FioProber {
    path: PathBuf,
    size: u64,
    direct: bool,
    runtime_s: f64,
    ceilings: (f64, f64),
}

impl FioProber {
    fn new(path: &Path, size: u64, direct: bool, dur_ns: u64) -> Result<Self> {
        let mut p = FioProber {
            path: path.into(),
            size,
            direct,
            runtime_s: (dur_ns as f64 / 1e9).max(1.0),
            ceilings: (0.0, 0.0),
        };
        // Unthrottled runs give the ceilings.
        let r = p.run(None, Some(0.0), 0.95)?.1;
        let w = p.run(Some(0.0), None, 0.95)?.2;
        if r <= 0.0 || w <= 0.0 {
            bail!("fio measured no throughput on {}", path.display());
        }
        p.ceilings = (r * 1.1, w * 1.1);
        Ok(p)
    }

    /// Runs fio; `None` rate = unthrottled, `Some(0)` = no such job. Returns
    /// (read latency at q in ns, read IOPS, write IOPS).
    fn run(&self, read: Option<f64>, write: Option<f64>, q: f64) -> Result<(u64, f64, f64)> {
        let mut cmd = Command::new("fio");
        cmd.arg("--output-format=json")
            .arg(format!("--filename={}", self.path.display()))
            .arg(format!("--size={}", self.size))
            .arg("--ioengine=libaio")
            .arg(format!("--direct={}", u8::from(self.direct)))
            .arg("--bs=4k")
            .arg("--iodepth=32")
            .arg("--time_based")
            .arg(format!("--runtime={}", self.runtime_s))
            .arg("--ramp_time=0.5")
            .arg("--rate_process=poisson")
            .arg("--percentile_list=95:99:99.9")
            .arg("--group_reporting=0");
        let mut jobs = 0;
        for (name, rw, rate) in [("r", "randread", read), ("w", "randwrite", write)] {
            if rate == Some(0.0) {
                continue;
            }
            jobs += 1;
            cmd.arg(format!("--name={name}")).arg(format!("--rw={rw}"));
            if let Some(r) = rate {
                cmd.arg(format!("--rate_iops={}", r.max(1.0).round()));
            }
        }
        if jobs == 0 {
            return Ok((0, 0.0, 0.0));
        }
        let out = cmd.output().context("running fio (is it installed?)")?;
        if !out.status.success() {
            bail!(
                "fio failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).with_context(|| {
            format!(
                "fio output is not JSON: {}",
                String::from_utf8_lossy(&out.stdout)
            )
        })?;
        let key = match q {
            x if x >= 0.999 => "99.900000",
            x if x >= 0.99 => "99.000000",
            _ => "95.000000",
        };
        let (mut lat, mut riops, mut wiops) = (0u64, 0.0, 0.0);
        for j in v["jobs"].as_array().into_iter().flatten() {
            riops += j["read"]["iops"].as_f64().unwrap_or(0.0);
            wiops += j["write"]["iops"].as_f64().unwrap_or(0.0);
            if let Some(p) = j["read"]["clat_ns"]["percentile"][key].as_u64() {
                lat = lat.max(p);
            }
        }
        Ok((lat, riops, wiops))
    }
}

impl Prober for FioProber {
    fn probe(&mut self, read_iops: f64, write_iops: f64, quantile: f64) -> control::Result<u64> {
        let (lat, got_r, got_w) = self
            .run(Some(read_iops), Some(write_iops), quantile)
            .map_err(|e| control::ControlError::Measure(format!("{e:#}")))?;
        // A load the device could not keep up with, in either direction, fails
        // the bound (allowing
        // for Poisson noise in a short run: three standard deviations).
        let slack = (0.1 * read_iops).max(3.0 * (read_iops / self.runtime_s).sqrt());
        let wslack = (0.1 * write_iops).max(3.0 * (write_iops / self.runtime_s).sqrt());
        if (read_iops > 0.0 && got_r < read_iops - slack)
            || (write_iops > 0.0 && got_w < write_iops - wslack)
        {
            return Ok(u64::MAX);
        }
        Ok(lat)
    }

    fn ceilings(&self) -> (f64, f64) {
        self.ceilings
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn curves_and_durations_parse_with_clear_errors() {
        let c = parse_curve("0:20000, 2000:0").unwrap();
        assert_eq!(c.points(), &[(0.0, 20000.0), (2000.0, 0.0)]);
        assert!(parse_curve("0:100,50")
            .unwrap_err()
            .to_string()
            .contains("not W:R"));
        assert!(parse_curve("0:x")
            .unwrap_err()
            .to_string()
            .contains("read rate"));
        assert!(parse_curve("0:10,5:20")
            .unwrap_err()
            .to_string()
            .contains("invalid SLA curve"));
        assert_eq!(parse_duration_ns("500us").unwrap(), 500_000);
        assert_eq!(parse_duration_ns("2ms").unwrap(), 2_000_000);
        assert_eq!(parse_duration_ns("1.5s").unwrap(), 1_500_000_000);
        assert_eq!(parse_duration_ns("250").unwrap(), 250_000);
        assert!(parse_duration_ns("-1ms").is_err());
        assert!(parse_duration_ns("fast").is_err());
        let o = SlaOpts {
            curve: None,
            weight: None,
            burst: false,
        };
        assert!(o.to_sla().unwrap().is_none());
        let o = SlaOpts {
            curve: Some("0:10".into()),
            weight: Some(3),
            burst: true,
        };
        let s = o.to_sla().unwrap().unwrap();
        assert_eq!((s.weight, s.burst), (3, true));
    }
}

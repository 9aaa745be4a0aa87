//! `flexssd elastic run|status|shrink` and `flexssd sim elastic`: transparent storage
//! elasticity (IPDPS'14) on a real btrfs volume made of vSSDs, and the same
//! controller replaying a used-space trace on a virtual clock.
//!
//! The decisions are the `elastic` crate's; this module owns the clock (the host's
//! monotonic clock, injected into the controller as plain `Nanos`), the sleeping,
//! signals, the CSV time series and the status file. Status goes through a state
//! directory (default `/run/flexssd-elastic/<mount path with / as _>`): the running
//! controller rewrites `status.json` after every probe, and `flexssd elastic shrink`
//! drops a `request` file that the controller picks up at its next probe.

#[path = "elastic/btrfs.rs"]
mod btrfs;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, ensure, Context, Result};
use clap::{Args, Subcommand};
use clock::{Clock, MonotonicClock, Nanos, SEC};
use elastic::config::{parse_size, MAX_TIME_S};
use elastic::sim::{read_trace, simulate, SimTiming};
use elastic::{Controller, ElasticConfig, PolicyKind, Sample, Volume, WasteMeter};
use serde::{Deserialize, Serialize};

use btrfs::{Backend, BtrfsVolume};

fn size_arg(s: &str) -> std::result::Result<u64, String> {
    parse_size(s)
}

/// Controller parameters; each overrides the `[elastic]` section of `--config`.
#[derive(Debug, Args, Clone)]
pub struct PolicyOpts {
    /// TOML file with an `[elastic]` section (see docs/config.md).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// predictive, reactive-add, reactive-addrm or prealloc.
    #[arg(long)]
    pub policy: Option<PolicyKind>,
    /// INIT: size of the first disk.
    #[arg(long, value_parser = size_arg, value_name = "SIZE")]
    pub init: Option<u64>,
    /// INC: size of every added disk.
    #[arg(long, value_parser = size_arg, value_name = "SIZE")]
    pub increment: Option<u64>,
    /// R: the preventive reserve.
    #[arg(long, value_parser = size_arg, value_name = "SIZE")]
    pub reserve: Option<u64>,
    /// Size of the prealloc policy's single disk.
    #[arg(long, value_parser = size_arg, value_name = "SIZE")]
    pub prealloc: Option<u64>,
    /// How the predictive policy counts recent writes: `pending` (the default:
    /// the bytes btrfs has promised to writes not yet allocated, its
    /// `bytes_may_use`), `estimated` (writes less the growth of used space) or
    /// `window` (the paper's Algorithm 2 as printed: every byte written during
    /// the history).
    #[arg(long, value_name = "KIND")]
    pub written_correction: Option<elastic::WrittenCorrection>,
    /// Which probes the predictive policy's write trend is fitted to: `window`
    /// (the default) or `history` (the paper's Algorithm 2 as printed).
    #[arg(long, value_name = "KIND")]
    pub trend: Option<elastic::Trend>,
    /// Over what span the predictive policy's short-term rate is measured:
    /// `horizon` (the default: as far back as the prediction looks ahead) or
    /// `probe` (the paper's Algorithm 2 as printed: the last two probes).
    #[arg(long, value_name = "SPAN")]
    pub short_term: Option<elastic::ShortTerm>,
    /// Where the predictive policy's AD comes from: `fixed` (the default, the
    /// paper's: `add_delay_s` throughout) or `measured` (twice the slowest add
    /// the volume has made, once it has made one).
    #[arg(long, value_name = "KIND")]
    pub add_delay: Option<elastic::AddDelay>,
    /// Multiply TMIN, TMAX, AD, RD and the reactive interval by this (a scaled-down
    /// run scales time too).
    #[arg(long, value_name = "F")]
    pub time_scale: Option<f64>,
}

impl PolicyOpts {
    /// The effective configuration.
    pub fn config(&self) -> Result<ElasticConfig> {
        let mut c = match &self.config {
            Some(p) => {
                let text =
                    std::fs::read_to_string(p).with_context(|| format!("read {}", p.display()))?;
                ElasticConfig::from_document(&text).with_context(|| p.display().to_string())?
            }
            None => ElasticConfig::default(),
        };
        if let Some(p) = self.policy {
            c.policy = p;
        }
        if let Some(v) = self.init {
            c.init = v;
        }
        if let Some(v) = self.increment {
            c.increment = v;
        }
        if let Some(v) = self.reserve {
            c.reserve = v;
        }
        if let Some(v) = self.prealloc {
            c.prealloc = v;
        }
        if let Some(w) = self.written_correction {
            c.written_correction = w;
        }
        if let Some(t) = self.trend {
            c.trend = t;
        }
        if let Some(s) = self.short_term {
            c.short_term = s;
        }
        if let Some(a) = self.add_delay {
            c.add_delay = a;
        }
        if let Some(f) = self.time_scale {
            ensure!(
                f.is_finite() && f > 0.0,
                "--time-scale must be a positive number, got {f}"
            );
            c.tmin_s *= f;
            c.tmax_s *= f;
            c.add_delay_s *= f;
            c.remove_delay_s *= f;
            c.reactive_interval_s *= f;
            c.validate()
                .with_context(|| format!("after scaling times by --time-scale {f}"))?;
        }
        c.validate()?;
        Ok(c)
    }
}

/// Options of `flexssd sim elastic`.
#[derive(Debug, Args)]
pub struct SimArgs {
    /// Used-space trace: CSV with columns t_s and used (bytes), optionally written
    /// (cumulative bytes); a `flexssd elastic run --csv` file works as is.
    #[arg(long, value_name = "FILE")]
    pub usage_trace: PathBuf,
    #[command(flatten)]
    pub opts: PolicyOpts,
    /// Seconds an add takes before the disk is usable (0 to 31,622,400: a year).
    #[arg(long, default_value_t = 1.0)]
    pub add_s: f64,
    /// Fixed seconds of a remove (0 to 31,622,400: a year).
    #[arg(long, default_value_t = 1.0)]
    pub remove_s: f64,
    /// MiB/s moved off a disk being removed (more than 0).
    #[arg(long, default_value_t = 100.0)]
    pub move_mibps: f64,
    /// Simulate until this many seconds (default: the trace's end): not before
    /// the trace's first point, at most a year (31,622,400 s) after it.
    #[arg(long)]
    pub end_s: Option<f64>,
    /// Write the 5-second series (t_s, used, expected, allocated) here.
    #[arg(long, value_name = "FILE")]
    pub csv: Option<PathBuf>,
    /// Print the summary as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Runs `flexssd sim elastic`.
pub fn sim(a: &SimArgs) -> Result<()> {
    let cfg = a.opts.config()?;
    for (flag, v) in [("--add-s", a.add_s), ("--remove-s", a.remove_s)] {
        ensure!(
            v.is_finite() && (0.0..=MAX_TIME_S).contains(&v),
            "{flag} must be from 0 to {MAX_TIME_S} seconds, got {v}"
        );
    }
    ensure!(
        a.move_mibps.is_finite() && a.move_mibps > 0.0,
        "--move-mibps must be a positive number, got {}",
        a.move_mibps
    );
    let trace = read_trace(&a.usage_trace)?;
    let timing = SimTiming {
        add_s: a.add_s,
        remove_s: a.remove_s,
        move_bps: (a.move_mibps * (1 << 20) as f64).max(1.0),
    };
    let end = match a.end_s {
        Some(s) => {
            let first = trace.first().map_or(0.0, |p| p.t as f64 / SEC as f64);
            ensure!(
                s.is_finite() && s >= first && s - first <= MAX_TIME_S,
                "--end-s must be from the trace's first point, {first} s, to {MAX_TIME_S} s \
                 after it, got {s}"
            );
            Some((s * SEC as f64).round() as Nanos)
        }
        None => None,
    };
    let r = simulate(&cfg, &trace, timing, end)?;
    if let Some(p) = &a.csv {
        let mut f = std::fs::File::create(p).with_context(|| format!("create {}", p.display()))?;
        writeln!(f, "t_s,used,expected,allocated")?;
        for (t, u, e, al) in &r.series {
            writeln!(f, "{:.3},{u},{e},{al}", *t as f64 / SEC as f64)?;
        }
    }
    if a.json {
        let v = serde_json::json!({ "policy": cfg.policy, "reserve": cfg.reserve, "summary": r.summary });
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        let s = &r.summary;
        println!(
            "{}: reserve {} B, {:.0} s, waste {:.4} GB·h, failures {}, adds {}, removes {}, peak allocated {:.2} GiB (simulated)",
            cfg.policy,
            cfg.reserve,
            s.duration_s,
            s.waste_gbh,
            s.failures,
            s.adds,
            s.removes,
            s.peak_allocated as f64 / (1u64 << 30) as f64
        );
    }
    Ok(())
}

/// `flexssd elastic ...`.
#[derive(Debug, Args)]
pub struct ElasticArgs {
    /// URL of the daemon's HTTP API [env: FLEXSSD_API] [default: http://127.0.0.1:8740]
    #[arg(long = "api", global = true, value_name = "URL")]
    pub api: Option<String>,
    #[command(subcommand)]
    pub cmd: ElasticCmd,
}

/// Subcommands of `flexssd elastic`.
#[derive(Debug, Subcommand)]
pub enum ElasticCmd {
    /// Create a btrfs volume at --mount and grow/shrink it until Ctrl-C/SIGTERM.
    Run(Box<RunArgs>),
    /// Show a running (or finished) controller's status.
    Status(StateArgs),
    /// Ask the running controller to remove the newest disk now (btrfs refuses if
    /// the data would not fit; the disk then stays).
    Shrink(StateArgs),
}

/// Where a controller keeps its state.
#[derive(Debug, Args)]
pub struct StateArgs {
    /// The volume's mount point.
    #[arg(long, value_name = "DIR", required_unless_present = "state")]
    pub mount: Option<PathBuf>,
    /// State directory (default: /run/flexssd-elastic/ and the mount path).
    #[arg(long, value_name = "DIR")]
    pub state: Option<PathBuf>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// Options of `flexssd elastic run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// Mount point (created if missing).
    #[arg(long, value_name = "DIR")]
    pub mount: PathBuf,
    #[command(flatten)]
    pub opts: PolicyOpts,
    /// Time series of every probe (t_s, used, expected, allocated, disks, written,
    /// action, action_s, relocated, pending; `written` leaves btrfs's relocation
    /// out, `relocated` is that relocation, and `pending` the bytes btrfs has
    /// promised to writes not yet allocated, empty where it reports none);
    /// replayable with `flexssd sim elastic --usage-trace`.
    #[arg(long, value_name = "FILE")]
    pub csv: Option<PathBuf>,
    /// State directory (default: /run/flexssd-elastic/ and the mount path).
    #[arg(long, value_name = "DIR")]
    pub state: Option<PathBuf>,
    /// Disks from sparse files on loop devices instead of vSSDs (also used, with a
    /// notice, when nbdfuse or /dev/fuse is missing).
    #[arg(long)]
    pub sparse: bool,
    /// Prefix of the disks' (vSSDs') names.
    #[arg(long, default_value = "elastic")]
    pub name: String,
    /// btrfs commit interval in seconds (mount -o commit=N): freed and written space
    /// shows in statvfs only at a commit, and the controller acts on statvfs.
    #[arg(long, default_value_t = 5)]
    pub commit_s: u32,
    /// Stop on its own after this many seconds (for scripts).
    #[arg(long)]
    pub duration_s: Option<f64>,
    /// Each disk's SLA with the daemon's scheduler, as JSON: for example
    /// `{"curve": [[0, 25600], [25600, 0]]}` holds a disk to 100 MiB/s of reads
    /// and writes together (the curve is in 4 KiB operations per second), like a
    /// hard disk. Default: unlimited.
    #[arg(long, value_name = "JSON", value_parser = disk_sla_arg)]
    pub disk_sla: Option<sched::TenantSla>,
}

/// Parses `--disk-sla`: a [`sched::TenantSla`] in JSON, with a curve (a disk
/// without one would not be held to anything).
fn disk_sla_arg(s: &str) -> std::result::Result<sched::TenantSla, String> {
    let sla: sched::TenantSla = serde_json::from_str(s).map_err(|e| {
        format!("not an SLA ({e}); expected JSON like {{\"curve\": [[0, 25600], [25600, 0]]}}")
    })?;
    if sla.curve.is_none() {
        return Err("the SLA has no \"curve\": it would not limit the disks".into());
    }
    Ok(sla)
}

/// The status file.
#[derive(Debug, Serialize, Deserialize)]
pub struct Status {
    /// Controller process.
    pub pid: u32,
    /// Still running?
    pub running: bool,
    /// Mount point.
    pub mount: String,
    /// vssd or sparse.
    pub backend: String,
    /// Configuration in use.
    pub config: ElasticConfig,
    /// Disks, oldest first.
    pub disks: Vec<elastic::DiskInfo>,
    /// Latest probe.
    pub last: Option<Sample>,
    /// Adds, removes, failed operations so far.
    pub adds: u32,
    /// Removes so far.
    pub removes: u32,
    /// Failed adds/removes so far.
    pub failed_ops: u32,
    /// Cumulated waste so far, GB·h (5-second intervals).
    pub waste_gbh: f64,
    /// Log of operations (times they took, errors).
    pub log: Vec<String>,
}

fn state_dir(mount: Option<&Path>, state: Option<&Path>) -> Result<PathBuf> {
    if let Some(s) = state {
        return Ok(s.to_path_buf());
    }
    let m = mount.context("give --mount or --state")?;
    let abs = std::path::absolute(m)?;
    let key: String = abs
        .to_string_lossy()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    Ok(PathBuf::from("/run/flexssd-elastic").join(key))
}

fn write_status(dir: &Path, st: &Status) -> Result<()> {
    let tmp = dir.join("status.json.tmp");
    std::fs::write(&tmp, serde_json::to_vec_pretty(st)?)?;
    std::fs::rename(&tmp, dir.join("status.json"))?;
    Ok(())
}

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

/// Runs `flexssd elastic ...`.
pub fn run(a: &ElasticArgs, api_url: &str) -> Result<()> {
    match &a.cmd {
        ElasticCmd::Run(r) => run_volume(r, api_url),
        ElasticCmd::Status(s) => {
            let dir = state_dir(s.mount.as_deref(), s.state.as_deref())?;
            let p = dir.join("status.json");
            let text = std::fs::read_to_string(&p).with_context(|| {
                format!("no elastic controller status at {} (is `flexssd elastic run` running for this mount?)", p.display())
            })?;
            if s.json {
                println!("{text}");
                return Ok(());
            }
            let st: Status =
                serde_json::from_str(&text).with_context(|| p.display().to_string())?;
            let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
            println!(
                "{} ({}, pid {}): policy {}, {} disks ({} backend), adds {}, removes {}, failed {}, waste {:.4} GB·h",
                st.mount,
                if st.running { "running" } else { "stopped" },
                st.pid,
                st.config.policy,
                st.disks.len(),
                st.backend,
                st.adds,
                st.removes,
                st.failed_ops,
                st.waste_gbh
            );
            if let Some(l) = &st.last {
                println!(
                    "used {:.3} GiB, expected {:.3} GiB, allocated {:.3} GiB",
                    gib(l.used),
                    gib(l.expected),
                    gib(l.allocated)
                );
            }
            let rows: Vec<Vec<String>> = st
                .disks
                .iter()
                .map(|d| {
                    vec![
                        d.name.clone(),
                        d.device.clone().unwrap_or_default(),
                        control::format_size(d.bytes),
                        format!("{:?}", d.state).to_lowercase(),
                    ]
                })
                .collect();
            crate::client::table(&["DISK", "DEVICE", "SIZE", "STATE"], &rows);
            Ok(())
        }
        ElasticCmd::Shrink(s) => {
            let dir = state_dir(s.mount.as_deref(), s.state.as_deref())?;
            if !dir.join("status.json").exists() {
                bail!("no elastic controller at {}", dir.display());
            }
            std::fs::write(dir.join("request"), "remove\n")?;
            println!(
                "asked the controller at {} to remove its newest disk",
                dir.display()
            );
            Ok(())
        }
    }
}

fn run_volume(r: &RunArgs, api_url: &str) -> Result<()> {
    if let Some(why) = btrfs::unavailable() {
        bail!("cannot build an elastic btrfs volume here: {why}");
    }
    let cfg = r.opts.config()?;
    let dir = state_dir(Some(&r.mount), r.state.as_deref())?;
    std::fs::create_dir_all(&dir).with_context(|| format!("create {}", dir.display()))?;
    let _ = std::fs::remove_file(dir.join("request"));
    let backend = if r.sparse {
        if r.disk_sla.is_some() {
            bail!("--disk-sla needs vSSDs (the daemon's scheduler holds them to it), not --sparse");
        }
        eprintln!("elastic: disks are sparse files on loop devices (--sparse), not vSSDs");
        Backend::Sparse
    } else if let Some(why) = btrfs::vssd_unavailable() {
        if r.disk_sla.is_some() {
            bail!("--disk-sla needs vSSDs, and {why}");
        }
        eprintln!("elastic: {why}; falling back to sparse files on loop devices instead of vSSDs");
        Backend::Sparse
    } else {
        let client = crate::client::Client::new(api_url);
        let info: crate::api::Info = client
            .get("/v1/info")
            .context("elastic volumes are made of vSSDs (or pass --sparse)")?;
        Backend::Vssd {
            client,
            socket: info.nbd_socket,
            sla: r.disk_sla.clone(),
        }
    };
    // SAFETY: installing a handler that only stores to an atomic.
    unsafe {
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
    }
    let clock = Arc::new(MonotonicClock::new());
    let vol = BtrfsVolume::new(
        &r.mount,
        &dir.join("work"),
        &r.name,
        backend,
        r.commit_s,
        clock.clone(),
    )?;
    let backend_name = vol.backend_name().to_string();
    let mut ctl = Controller::start(&cfg, vol, clock.now())
        .context("creating the initial disk and file system")?;
    eprintln!(
        "elastic: {} mounted at {} ({} policy, {} backend)",
        ctl.volume().disks()[0].name,
        r.mount.display(),
        cfg.policy,
        backend_name
    );
    let mut csv = match &r.csv {
        Some(p) => {
            let mut f =
                std::fs::File::create(p).with_context(|| format!("create {}", p.display()))?;
            writeln!(
                f,
                "t_s,used,expected,allocated,disks,written,action,action_s,relocated,pending"
            )?;
            Some(f)
        }
        None => None,
    };
    let mut meter = WasteMeter::new();
    let mut log: Vec<String> = vec![];
    let end = r.duration_s.map(|s| (s * SEC as f64) as Nanos);
    let mut last = None;
    let result = (|| -> Result<()> {
        loop {
            let now = clock.now();
            if STOP.load(Ordering::SeqCst) || end.is_some_and(|e| now >= e) {
                return Ok(());
            }
            if std::fs::remove_file(dir.join("request")).is_ok() {
                let t = clock.now();
                let msg = match ctl.volume_mut().remove_disk(t) {
                    Ok(size) => {
                        format!("manual shrink: removed the newest disk, pool now {size} bytes")
                    }
                    Err(e) => format!("manual shrink failed: {e}"),
                };
                eprintln!("elastic: {msg}");
                log.push(msg);
            }
            let (s, next) = ctl.step(now, &|| clock.now())?;
            if let Some(e) = &s.error {
                eprintln!("elastic: {} at {:.1} s: {e}", s.action, now as f64 / 1e9);
                log.push(format!("{} at {:.1} s: {e}", s.action, now as f64 / 1e9));
            }
            meter.record(s.t, s.used, s.expected, s.allocated);
            if let Some(f) = csv.as_mut() {
                writeln!(
                    f,
                    "{:.3},{},{},{},{},{},{},{:.3},{},{}",
                    s.t as f64 / 1e9,
                    s.used,
                    s.expected,
                    s.allocated,
                    s.disks,
                    s.written,
                    s.action,
                    s.action_ns as f64 / 1e9,
                    s.relocated,
                    s.pending.map_or(String::new(), |p| p.to_string())
                )?;
                f.flush()?;
            }
            last = Some(s);
            status(
                &dir,
                &ctl,
                &cfg,
                &backend_name,
                &last,
                &meter,
                &log,
                clock.now(),
                true,
            )?;
            // Sleep until the next probe, waking for signals and requests.
            let due = clock.now().max(now + next);
            while clock.now() < due && !STOP.load(Ordering::SeqCst) && !dir.join("request").exists()
            {
                std::thread::sleep(clock.until(due).min(Duration::from_millis(50)));
            }
        }
    })();
    let now = clock.now();
    let mut vol = ctl.into_volume();
    log.append(&mut vol.log);
    eprintln!(
        "elastic: stopping; unmounting {} and releasing its disks",
        r.mount.display()
    );
    let down = vol.teardown();
    let st = Status {
        pid: std::process::id(),
        running: false,
        mount: r.mount.display().to_string(),
        backend: backend_name,
        config: cfg,
        disks: vol.disks(),
        last,
        adds: 0,
        removes: 0,
        failed_ops: 0,
        waste_gbh: meter.waste(now).0,
        log,
    };
    let _ = write_status(&dir, &st);
    result.and(down)
}

#[allow(clippy::too_many_arguments)]
fn status(
    dir: &Path,
    ctl: &Controller<BtrfsVolume>,
    cfg: &ElasticConfig,
    backend: &str,
    last: &Option<Sample>,
    meter: &WasteMeter,
    log: &[String],
    now: Nanos,
    running: bool,
) -> Result<()> {
    let (adds, removes, failed_ops) = ctl.counts();
    let mut all = log.to_vec();
    all.extend(ctl.volume().log.iter().cloned());
    write_status(
        dir,
        &Status {
            pid: std::process::id(),
            running,
            mount: ctl.volume().mount_point().display().to_string(),
            backend: backend.into(),
            config: cfg.clone(),
            disks: ctl.volume().disks(),
            last: last.clone(),
            adds,
            removes,
            failed_ops,
            waste_gbh: meter.waste(now).0,
            log: all,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn disk_sla_takes_a_curve_and_names_what_is_wrong() {
        let sla = disk_sla_arg(r#"{"curve": [[0, 25600], [25600, 0]]}"#).unwrap();
        let c = sla.curve.unwrap();
        assert_eq!(c.w_max(), 25600.0);
        assert_eq!(c.points()[0], (0.0, 25600.0));
        assert!(!sla.burst);
        let e = disk_sla_arg(r#"{"weight": 2}"#).unwrap_err();
        assert!(e.contains("no \"curve\""), "{e}");
        let e = disk_sla_arg(r#"{"curve": [[0, 1]], "speed": 3}"#).unwrap_err();
        assert!(e.contains("speed") && e.contains("not an SLA"), "{e}");
        let e = disk_sla_arg("[[0, 25600]]").unwrap_err();
        assert!(e.contains("not an SLA"), "{e}");
        let e = disk_sla_arg(r#"{"curve": [[0, -1]]}"#).unwrap_err();
        assert!(e.contains("not an SLA"), "{e}");
    }
}

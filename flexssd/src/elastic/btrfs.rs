//! A real elastic volume: btrfs over a pool of disks, each a flexssd vSSD attached
//! through nbdfuse and a loop device (or, where those are missing, a loop device on a
//! sparse file).
//!
//! Every change goes through btrfs's own online operations: `btrfs device add` to
//! grow, `btrfs device remove` to shrink. The latter moves every extent off the disk
//! before it returns, and fails (leaving the disk in the pool) when the data would not
//! fit elsewhere or when it is interrupted — so a disk is detached and its vSSD
//! deleted (which erases its flash) only after a successful remove. This module is
//! the only place that runs those tools; the decisions are the `elastic` crate's.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use clock::{Clock, Nanos, SEC};
use elastic::{DiskInfo, DiskState, FsStats, RelocationAccount, Volume};

use crate::client::Client;

/// Where disks come from.
pub enum Backend {
    /// vSSDs created through the daemon's API, exported over NBD on `socket`.
    Vssd {
        /// API client.
        client: Client,
        /// The daemon's NBD unix socket.
        socket: String,
        /// Each disk's SLA with the daemon's scheduler (Regulator's curve), so
        /// that a disk runs at a chosen speed: an experiment can give the disks
        /// the throughput of the paper's (`--disk-sla`). `None`: unlimited.
        sla: Option<sched::TenantSla>,
    },
    /// Sparse files in a directory (fallback without nbdfuse or a daemon).
    Sparse,
}

/// One attached disk.
struct Disk {
    info: DiskInfo,
    /// nbdfuse serving the export as `<fuse_dir>/nbd`.
    fuse: Option<Child>,
    fuse_dir: Option<PathBuf>,
    /// Backing file of the loop device (the nbdfuse file or a sparse file).
    file: PathBuf,
    loopdev: String,
    /// Sectors read/written seen on this loop device at attach (normally 0).
    base: (u64, u64),
}

/// A btrfs file system mounted at `mount` over a pool of disks.
pub struct BtrfsVolume {
    mount: PathBuf,
    work: PathBuf,
    prefix: String,
    backend: Backend,
    disks: Vec<Disk>,
    next_id: u32,
    /// Bytes read/written by disks already removed (counters stay cumulative).
    gone: (u64, u64),
    /// btrfs's own relocation traffic (extents moved off removed disks), kept out of
    /// the counters the controller sees.
    relocation: RelocationAccount,
    mounted: bool,
    /// btrfs commit interval, seconds (how stale statvfs may be).
    commit_s: u32,
    /// The file system's data-space `bytes_may_use` in sysfs
    /// (`/sys/fs/btrfs/<uuid>/allocation/data/bytes_may_use`), once created.
    may_use: Option<PathBuf>,
    /// Each disk's allocation and the MiB in use when a removal last failed
    /// after compacting: with nothing changed since, compacting again would
    /// rewrite the same block groups for the same refusal, at every probe.
    compact_futile: Option<(Pool, u64)>,
    /// Time each add and remove took, for the log.
    pub log: Vec<String>,
    /// Times the tools and bounds the waits for nbdfuse (the caller's clock:
    /// the host's monotonic clock in the daemon's elastic command).
    clock: Arc<dyn Clock>,
}

/// Seconds between two readings of a clock.
fn secs(from: Nanos, to: Nanos) -> f64 {
    to.saturating_sub(from) as f64 / SEC as f64
}

/// Runs a tool; an error carries its stderr.
pub fn sh(cmd: &str, args: &[&str]) -> Result<String> {
    let out = Command::new(cmd)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("cannot run {cmd}"))?;
    if !out.status.success() {
        bail!(
            "{cmd} {} failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn have(cmd: &str) -> bool {
    Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {cmd}"))
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Why real vSSD-backed disks cannot be used here, if they cannot.
pub fn vssd_unavailable() -> Option<String> {
    if !Path::new("/dev/fuse").exists() {
        return Some("/dev/fuse is missing".into());
    }
    for t in ["nbdfuse", "fusermount3"] {
        if !have(t) {
            return Some(format!("{t} is not installed"));
        }
    }
    None
}

/// Why no elastic volume can be built here at all, if it cannot.
pub fn unavailable() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("needs root (losetup, mount, btrfs device add/remove)".into());
    }
    if !Path::new("/dev/loop-control").exists() {
        return Some("no loop devices (/dev/loop-control)".into());
    }
    for t in ["losetup", "mkfs.btrfs", "btrfs", "mount", "umount"] {
        if !have(t) {
            return Some(format!("{t} is not installed"));
        }
    }
    None
}

fn loop_counters(dev: &str) -> (u64, u64) {
    let name = dev.trim_start_matches("/dev/");
    let Ok(s) = std::fs::read_to_string(format!("/sys/block/{name}/stat")) else {
        return (0, 0);
    };
    let f: Vec<u64> = s
        .split_whitespace()
        .filter_map(|x| x.parse().ok())
        .collect();
    // fields: reads, merged, sectors read, ms, writes, merged, sectors written, ...
    (
        f.get(2).copied().unwrap_or(0) * 512,
        f.get(6).copied().unwrap_or(0) * 512,
    )
}

impl BtrfsVolume {
    /// A volume (no disks yet) to be mounted at `mount`; `work` holds fuse mount
    /// points and sparse files; disks are named `<prefix>-<n>`; btrfs commits every
    /// `commit_s` seconds (its default, 30 s, is how late freed space shows in
    /// statvfs — too late for a controller probing every second). `clock` times
    /// adds and removes and bounds the waits for nbdfuse.
    pub fn new(
        mount: &Path,
        work: &Path,
        prefix: &str,
        backend: Backend,
        commit_s: u32,
        clock: Arc<dyn Clock>,
    ) -> Result<Self> {
        std::fs::create_dir_all(mount).with_context(|| format!("create {}", mount.display()))?;
        std::fs::create_dir_all(work).with_context(|| format!("create {}", work.display()))?;
        Ok(BtrfsVolume {
            mount: mount.to_path_buf(),
            work: work.to_path_buf(),
            prefix: prefix.to_string(),
            backend,
            disks: vec![],
            next_id: 0,
            gone: (0, 0),
            relocation: RelocationAccount::new(),
            mounted: false,
            commit_s,
            may_use: None,
            compact_futile: None,
            log: vec![],
            clock,
        })
    }

    /// The mount point.
    pub fn mount_point(&self) -> &Path {
        &self.mount
    }

    /// "vssd" or "sparse".
    pub fn backend_name(&self) -> &'static str {
        match self.backend {
            Backend::Vssd { .. } => "vssd",
            Backend::Sparse => "sparse",
        }
    }

    fn attach(&mut self, bytes: u64) -> Result<Disk> {
        self.next_id += 1;
        let name = format!("{}-{}", self.prefix, self.next_id);
        let mut disk = Disk {
            info: DiskInfo {
                name: name.clone(),
                bytes,
                device: None,
                state: DiskState::Adding,
            },
            fuse: None,
            fuse_dir: None,
            file: PathBuf::new(),
            loopdev: String::new(),
            base: (0, 0),
        };
        match &self.backend {
            Backend::Vssd {
                client,
                socket,
                sla,
            } => {
                create_vssd(client, &name, bytes, sla.as_ref())?;
                let fuse_dir = self.work.join(format!("fuse-{name}"));
                std::fs::create_dir_all(&fuse_dir)?;
                let pid = self.work.join(format!("nbdfuse-{name}.pid"));
                let _ = std::fs::remove_file(&pid);
                let uri = format!("nbd+unix:///{name}?socket={socket}");
                let child = Command::new("nbdfuse")
                    .arg("-P")
                    .arg(&pid)
                    .arg(&fuse_dir)
                    .arg(&uri)
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .spawn();
                let mut child = match child {
                    Ok(c) => c,
                    Err(e) => {
                        let _ = client.delete::<serde_json::Value>(&format!("/v1/vssds/{name}"));
                        return Err(anyhow!("cannot run nbdfuse: {e}"));
                    }
                };
                let file = fuse_dir.join("nbd");
                let deadline = self.clock.now() + 30 * SEC;
                while !(pid.exists() && file.exists()) {
                    let dead = child.try_wait().ok().flatten().is_some();
                    if dead || self.clock.now() > deadline {
                        let _ = child.kill();
                        let _ = child.wait();
                        let _ = sh("fusermount3", &["-u", &fuse_dir.to_string_lossy()]);
                        let _ = client.delete::<serde_json::Value>(&format!("/v1/vssds/{name}"));
                        bail!("nbdfuse did not serve {uri} (exited or 30 s passed)");
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
                disk.fuse = Some(child);
                disk.fuse_dir = Some(fuse_dir);
                disk.file = file;
            }
            Backend::Sparse => {
                let file = self.work.join(format!("{name}.img"));
                let f = std::fs::File::create(&file)?;
                f.set_len(bytes)?;
                disk.file = file;
            }
        }
        match sh(
            "losetup",
            &["--find", "--show", &disk.file.to_string_lossy()],
        ) {
            Ok(dev) => {
                disk.base = loop_counters(&dev);
                disk.loopdev = dev.clone();
                disk.info.device = Some(dev);
                Ok(disk)
            }
            Err(e) => {
                self.detach(&mut disk);
                Err(e)
            }
        }
    }

    /// Detaches a disk that is not (or no longer) part of the file system and
    /// releases it: loop device, nbdfuse, then the vSSD (its flash is erased).
    fn detach(&mut self, d: &mut Disk) {
        if !d.loopdev.is_empty() {
            let (r, w) = loop_counters(&d.loopdev);
            self.gone.0 += r.saturating_sub(d.base.0);
            self.gone.1 += w.saturating_sub(d.base.1);
            if let Err(e) = sh("losetup", &["-d", &d.loopdev]) {
                eprintln!("elastic: {e}");
            }
            d.loopdev.clear();
        }
        if let Some(dir) = d.fuse_dir.take() {
            let d = dir.to_string_lossy();
            if sh("fusermount3", &["-u", &d]).is_err() {
                // nbdfuse already gone (its server died): detach lazily.
                let _ = sh("fusermount3", &["-uz", &d]);
            }
            let _ = std::fs::remove_dir(&dir);
        }
        if let Some(mut c) = d.fuse.take() {
            // nbdfuse exits once unmounted; make sure.
            let deadline = self.clock.now() + 5 * SEC;
            while c.try_wait().ok().flatten().is_none() && self.clock.now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
        match &self.backend {
            Backend::Vssd { client, .. } => {
                if let Err(e) =
                    client.delete::<serde_json::Value>(&format!("/v1/vssds/{}", d.info.name))
                {
                    eprintln!("elastic: delete vSSD {}: {e:#}", d.info.name);
                }
            }
            Backend::Sparse => {
                let _ = std::fs::remove_file(&d.file);
            }
        }
    }

    /// Creates the file system on a first disk of `bytes` and mounts it.
    pub fn create(&mut self, bytes: u64) -> Result<()> {
        let mut d = self.attach(bytes)?;
        let mk = sh(
            "mkfs.btrfs",
            &["-q", "-f", "-K", "-m", "single", "-d", "single", &d.loopdev],
        )
        .and_then(|_| {
            sh(
                "mount",
                &[
                    "-o",
                    &format!("nodiscard,commit={}", self.commit_s),
                    &d.loopdev,
                    &self.mount.to_string_lossy(),
                ],
            )
        });
        if let Err(e) = mk {
            self.detach(&mut d);
            return Err(e);
        }
        self.mounted = true;
        d.info.state = DiskState::Active;
        self.disks.push(d);
        // Where btrfs reports the bytes promised to writes not yet allocated;
        // without it (no sysfs, an old kernel) the predictor estimates them.
        self.may_use = self
            .show()
            .ok()
            .and_then(|s| parse_uuid(&s))
            .map(|u| {
                Path::new("/sys/fs/btrfs")
                    .join(u)
                    .join("allocation/data/bytes_may_use")
            })
            .filter(|p| p.exists());
        if self.may_use.is_none() {
            eprintln!(
                "elastic: btrfs does not report bytes_may_use here; pending writes are estimated"
            );
        }
        Ok(())
    }

    /// Bytes btrfs has promised to data writes it has not allocated yet (its
    /// data space's `bytes_may_use`: delayed allocation, data in the page
    /// cache), which neither statvfs nor the device counters show until
    /// write-back; `None` where it cannot be read.
    fn pending(&self) -> Option<u64> {
        std::fs::read_to_string(self.may_use.as_ref()?)
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    fn add(&mut self, bytes: u64) -> Result<u64> {
        let t0 = self.clock.now();
        let mut d = self.attach(bytes)?;
        let t_attach = secs(t0, self.clock.now());
        if let Err(e) = sh(
            "btrfs",
            &[
                "device",
                "add",
                "-f",
                "-K",
                &d.loopdev,
                &self.mount.to_string_lossy(),
            ],
        ) {
            self.detach(&mut d);
            return Err(e);
        }
        self.log.push(format!(
            "add {} ({}): attach {:.2} s, total {:.2} s",
            d.info.name,
            d.loopdev,
            t_attach,
            secs(t0, self.clock.now())
        ));
        d.info.state = DiskState::Active;
        self.disks.push(d);
        Ok(self.size())
    }

    fn remove(&mut self) -> Result<u64> {
        if self.disks.len() <= 1 {
            bail!("the pool has one disk left; it is never removed");
        }
        let t0 = self.clock.now();
        // Which disk: the largest whose chunks fit in the others' unallocated
        // space, the least filled first (`elastic::removal_order`); if btrfs
        // refuses it, the next; if none fits, or btrfs refuses all that do,
        // the data block groups are compacted (`compact`) and the removal
        // tried once more. What btrfs must copy off a disk is its
        // allocation there: the device counters' growth over the removal, up to
        // that, is relocation, not the application's writes (issue 16).
        let mut pool = match self.allocations() {
            Ok(pool) => pool,
            Err(e) => {
                // Without it, the last disk, and the whole window taken as
                // relocation: the controller is blocked meanwhile, and new data
                // still shows in `used`.
                eprintln!("elastic: {e:#}; removing the last disk, counting all I/O during the removal as relocation");
                return self.remove_one(self.disks.len() - 1, u64::MAX, t0);
            }
        };
        let mut refused = Vec::new();
        // Nothing changed since compacting failed to help: do not again.
        let mut compacted =
            self.compact_futile.is_some() && self.compact_futile == self.state(&pool);
        loop {
            let mut order = elastic::removal_order(&pool, 0);
            if order.is_empty() && !compacted {
                pool = self.compact(pool, false)?;
                order = elastic::removal_order(&pool, 0);
                compacted = true;
            }
            if order.is_empty() {
                self.compact_futile = self.state(&pool);
                bail!(
                    "no disk can be removed: none of {} fits in the others' unallocated space, \
                     even after compacting the data block groups (size, allocated per disk: {}){}",
                    self.disks.len(),
                    pool.iter()
                        .map(|(s, a)| format!("{} MiB, {} MiB", s >> 20, a >> 20))
                        .collect::<Vec<_>>()
                        .join("; "),
                    if refused.is_empty() {
                        String::new()
                    } else {
                        format!("; before compacting: {}", refused.join("; "))
                    }
                );
            }
            for i in order {
                match self.remove_one(i, pool[i].1, t0) {
                    Ok(size) => return Ok(size),
                    Err(e) => refused.push(format!("{e:#}")),
                }
            }
            if compacted {
                let now = self.allocations()?;
                self.compact_futile = self.state(&now);
                bail!("no disk could be removed: {}", refused.join("; "));
            }
            // btrfs refused every disk that fits on paper (ENOSPC: a removal
            // also moves metadata, mirrored within one disk, and needs room
            // for a whole new chunk on one of the others): compact, every
            // pass, for more unallocated room on each disk, then try again.
            let now = self.allocations()?;
            pool = self.compact(now, true)?;
            compacted = true;
        }
    }

    /// Compacts the data block groups until a disk fits in the others'
    /// unallocated space (with `all_passes`, through every pass), or
    /// [`COMPACT_USAGE`] is exhausted; returns the pool's allocation after it.
    ///
    /// Why: after a burst of writes and deletes btrfs keeps block groups
    /// allocated on every disk, each partly empty. In issue 16's runs at the
    /// paper's disk speed, four 512 MiB disks had 480-511 MiB allocated each
    /// while the volume held 646 MiB: no disk's allocation fit in the others'
    /// unallocated space, and the volume kept two disks more than its data
    /// needed for the rest of the run. `btrfs balance -dusage=N` rewrites the
    /// data block groups less than N% full into as few as hold their data and
    /// frees the rest; the least-filled go first, as they cost the least to
    /// move. Its writes are relocation, counted as such (not application
    /// writes), as a removal's are.
    fn compact(&mut self, mut pool: Pool, all_passes: bool) -> Result<Pool> {
        let mnt = self.mount.to_string_lossy().to_string();
        for usage in COMPACT_USAGE {
            let before = self.bracket(false);
            let t0 = self.clock.now();
            let res = sh(
                "btrfs",
                &["balance", "start", &format!("-dusage={usage}"), &mnt],
            );
            let after = self.bracket(true);
            self.relocation.record(before, after, 0);
            let was: u64 = pool.iter().map(|p| p.1).sum();
            pool = self.allocations()?;
            self.log.push(format!(
                "compact -dusage={usage}: {:.2} s, {} MiB written, allocated {} -> {} MiB{}",
                secs(t0, self.clock.now()),
                after.written.saturating_sub(before.written) >> 20,
                was >> 20,
                pool.iter().map(|p| p.1).sum::<u64>() >> 20,
                match &res {
                    Ok(_) => String::new(),
                    Err(e) => format!(" (btrfs: {e:#})"),
                }
            ));
            if !all_passes && !elastic::removal_order(&pool, 0).is_empty() {
                break;
            }
        }
        Ok(pool)
    }

    /// What a removal's outcome depends on: `pool` and the MiB in use (whole
    /// MiB, so that a commit's few KiB of metadata do not count as a change).
    fn state(&self, pool: &Pool) -> Option<(Pool, u64)> {
        Some((pool.clone(), self.used().ok()? >> 20))
    }

    /// Removes disk `i` (btrfs moves its `moved` bytes off it first); on
    /// failure the disk stays in the pool, active.
    fn remove_one(&mut self, i: usize, moved: u64, t0: Nanos) -> Result<u64> {
        self.disks[i].info.state = DiskState::Removing;
        let dev = self.disks[i].loopdev.clone();
        let before = self.bracket(false);
        // Blocks while btrfs moves every extent off the device; fails, leaving the
        // device in the pool, if they do not fit or the call is interrupted.
        if let Err(e) = sh(
            "btrfs",
            &["device", "remove", &dev, &self.mount.to_string_lossy()],
        ) {
            // A failed removal has moved some block groups already (and may move
            // others back): relocation too.
            let after = self.bracket(true);
            self.relocation.record(before, after, moved);
            self.disks[i].info.state = DiskState::Active;
            return Err(e.context(format!(
                "removing {} failed; it stays in the pool",
                self.disks[i].info.name
            )));
        }
        let t_move = secs(t0, self.clock.now());
        let mut d = self.disks.remove(i);
        self.detach(&mut d);
        let after = self.bracket(true);
        self.relocation.record(before, after, moved);
        self.log.push(format!(
            "remove {} ({dev}): move {:.2} s, total {:.2} s, {} MiB written during it \
             ({} MiB allocated there)",
            d.info.name,
            t_move,
            secs(t0, self.clock.now()),
            after.written.saturating_sub(before.written) >> 20,
            moved >> 20
        ));
        Ok(self.size())
    }

    /// `btrfs filesystem show --raw` of the mount. btrfs-progs finds the file system
    /// by reading the mount table and scanning block devices; while another volume on
    /// the host mounts, unmounts or drops a loop device, that scan can answer "not a
    /// valid btrfs filesystem" for a mount that is fine (seen with two volumes built
    /// at once), so that answer is tried again for up to 5 s.
    fn show(&self) -> Result<String> {
        let mnt = self.mount.to_string_lossy().to_string();
        self.sh_retrying(
            "btrfs",
            &["filesystem", "show", "--raw", &mnt],
            "not a valid",
            5 * SEC,
        )
    }

    /// Runs a tool as [`sh`] does, and again while it fails with `transient` in
    /// its error, until `within` has passed on the volume's clock.
    fn sh_retrying(
        &self,
        cmd: &str,
        args: &[&str],
        transient: &str,
        within: Nanos,
    ) -> Result<String> {
        let deadline = self.clock.now() + within;
        loop {
            match sh(cmd, args) {
                Err(e) if e.to_string().contains(transient) && self.clock.now() < deadline => {
                    std::thread::sleep(Duration::from_millis(50));
                }
                r => return r,
            }
        }
    }

    /// `(size, allocated)` of every disk, in the pool's order, from one `btrfs
    /// filesystem show --raw`.
    fn allocations(&self) -> Result<Vec<(u64, u64)>> {
        let out = self.show()?;
        self.disks
            .iter()
            .map(|d| {
                parse_device(&out, &d.loopdev)
                    .ok_or_else(|| anyhow!("{} not in `btrfs filesystem show`", d.loopdev))
            })
            .collect()
    }

    /// Device-level counters: bytes read and written by every disk of the pool so far
    /// (removed ones included), relocation not subtracted; `used` is left to the
    /// caller.
    fn raw_stats(&self) -> FsStats {
        let (mut r, mut w) = self.gone;
        for d in &self.disks {
            let (dr, dw) = loop_counters(&d.loopdev);
            r += dr.saturating_sub(d.base.0);
            w += dw.saturating_sub(d.base.1);
        }
        FsStats {
            used: 0,
            written: w,
            read: r,
            relocated: 0,
            pending: None,
        }
    }

    /// Bytes in use, from statvfs (what `df` shows).
    fn used(&self) -> Result<u64> {
        let c = std::ffi::CString::new(self.mount.to_string_lossy().as_bytes())?;
        // SAFETY: statvfs fills the zeroed struct; c is a valid C string.
        let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
        // SAFETY: as above; st outlives the call.
        if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
            bail!(
                "statvfs {}: {}",
                self.mount.display(),
                std::io::Error::last_os_error()
            );
        }
        Ok((st.f_blocks as u64).saturating_sub(st.f_bfree as u64) * st.f_frsize as u64)
    }

    /// Raw device counters with `used`, to bracket a relocation. If `used` cannot
    /// be read, every write in the window is counted as the application's (see
    /// [`RelocationAccount`]): `before` reads 0 and `after` the maximum.
    fn bracket(&self, at_end: bool) -> FsStats {
        let used = self.used().unwrap_or(if at_end { u64::MAX } else { 0 });
        FsStats {
            used,
            ..self.raw_stats()
        }
    }

    /// Unmounts the file system. A busy mount is tried again for up to 10 s: right
    /// after a device removal btrfs's own workers, or a child another thread is
    /// forking, can hold it for a moment (CI saw `target is busy` once). A mount
    /// still busy then is an error that names who holds it (`fuser -vm`).
    fn unmount(&self) -> Result<()> {
        let mnt = self.mount.to_string_lossy().to_string();
        self.sh_retrying("umount", &[&mnt], "busy", 10 * SEC)
            .map(drop)
            .map_err(|e| {
                let holders = Command::new("fuser")
                    .args(["-vm", &mnt])
                    .output()
                    .map(|o| String::from_utf8_lossy(&o.stderr).trim().to_string())
                    .unwrap_or_default();
                e.context(format!(
                    "unmount failed; disks left attached; holders: {}",
                    if holders.is_empty() {
                        "none found"
                    } else {
                        &holders
                    }
                ))
            })
    }

    /// Unmounts and releases every disk (clean shutdown).
    pub fn teardown(&mut self) -> Result<()> {
        if self.mounted {
            // This file system only (syncfs): a global sync would write back
            // every other volume's and the host's dirty pages too.
            let _ = sh("sync", &["-f", &self.mount.to_string_lossy()]);
            self.unmount()?;
            self.mounted = false;
        }
        while let Some(mut d) = self.disks.pop() {
            self.detach(&mut d);
        }
        Ok(())
    }
}

impl Drop for BtrfsVolume {
    fn drop(&mut self) {
        if let Err(e) = self.teardown() {
            eprintln!("elastic: {e:#}");
        }
    }
}

/// Each disk's size and the bytes btrfs has allocated on it, in pool order.
type Pool = Vec<(u64, u64)>;

/// The `-dusage` filters of [`BtrfsVolume::compact`]'s passes, in order: the
/// block groups less than a fifth full first, then those less than half, then
/// all but the nearly full.
const COMPACT_USAGE: [u32; 3] = [20, 50, 80];

/// Creates a vSSD of exactly `bytes`, with `sla` if given: on 1, 2, 4, ...
/// channels until the placement can hold that capacity.
fn create_vssd(
    client: &Client,
    name: &str,
    bytes: u64,
    sla: Option<&sched::TenantSla>,
) -> Result<()> {
    let mut channels = 1u32;
    loop {
        let spec = vssd_spec(name, channels, bytes, sla);
        match client.post::<_, serde_json::Value>("/v1/vssds", &spec) {
            Ok(_) => return Ok(()),
            Err(e) if e.to_string().contains("more than the") && channels < 64 => channels *= 2,
            Err(e) => return Err(e.context(format!("create vSSD {name} of {bytes} bytes"))),
        }
    }
}

/// The body of `POST /v1/vssds` for one disk.
fn vssd_spec(
    name: &str,
    channels: u32,
    bytes: u64,
    sla: Option<&sched::TenantSla>,
) -> serde_json::Value {
    let mut spec = serde_json::json!({ "name": name, "channels": channels, "capacity": bytes });
    if let Some(sla) = sla {
        spec["sla"] = serde_json::to_value(sla).expect("an SLA serialises");
    }
    spec
}

/// The `size` and `used` (allocated) bytes of `dev` in `btrfs filesystem show
/// --raw` output (lines like `devid 2 size 536870912 used 436207616 path
/// /dev/loop1`).
fn parse_device(show: &str, dev: &str) -> Option<(u64, u64)> {
    show.lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        let at = |k: &str| f.iter().position(|x| *x == k).and_then(|i| f.get(i + 1));
        (at("path") == Some(&dev))
            .then(|| Some((at("size")?.parse().ok()?, at("used")?.parse().ok()?)))?
    })
}

fn to_volume_err(e: anyhow::Error) -> elastic::Error {
    elastic::Error::Volume(format!("{e:#}"))
}

/// The file system's uuid in `btrfs filesystem show` output.
fn parse_uuid(show: &str) -> Option<String> {
    let rest = &show[show.find("uuid: ")? + 6..];
    let u: String = rest
        .chars()
        .take_while(|c| c.is_ascii_hexdigit() || *c == '-')
        .collect();
    (u.len() == 36).then_some(u)
}

impl Volume for BtrfsVolume {
    fn stats(&mut self, _now: Nanos) -> elastic::Result<FsStats> {
        let used = self
            .used()
            .map_err(|e| elastic::Error::Volume(format!("{e:#}")))?;
        Ok(self.relocation.apply(FsStats {
            used,
            pending: self.pending(),
            ..self.raw_stats()
        }))
    }

    fn add_disk(&mut self, bytes: u64, _now: Nanos) -> elastic::Result<u64> {
        if self.disks.is_empty() {
            self.create(bytes).map_err(to_volume_err)?;
            return Ok(self.size());
        }
        self.add(bytes).map_err(to_volume_err)
    }

    fn remove_disk(&mut self, _now: Nanos) -> elastic::Result<u64> {
        self.remove().map_err(to_volume_err)
    }

    fn disks(&self) -> Vec<DiskInfo> {
        self.disks.iter().map(|d| d.info.clone()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_disk_carries_its_sla_to_the_daemon() {
        let plain = vssd_spec("el-1", 2, 1 << 29, None);
        assert_eq!(
            plain,
            serde_json::json!({"name": "el-1", "channels": 2, "capacity": 1u64 << 29})
        );
        let sla: sched::TenantSla =
            serde_json::from_str(r#"{"curve": [[0, 25600], [25600, 0]]}"#).unwrap();
        let spec = vssd_spec("el-1", 1, 4096, Some(&sla));
        assert_eq!(
            spec["sla"]["curve"],
            serde_json::json!([[0.0, 25600.0], [25600.0, 0.0]])
        );
        // what the daemon will parse it back into
        let back: control::VssdSpec = serde_json::from_value(spec).unwrap();
        assert_eq!(back.sla, Some(sla));
    }

    #[test]
    fn parses_the_allocation_of_one_device() {
        let show = "Label: none  uuid: fedc2ced-4d5f-40ec-a600-629b8f1a8f36
\tTotal devices 2 FS bytes used 367542272
\tdevid    1 size 1073741824 used 130023424 path /dev/loop0
\tdevid    2 size 1073741824 used 436207616 path /dev/loop1
";
        assert_eq!(
            parse_device(show, "/dev/loop1"),
            Some((1073741824, 436207616))
        );
        assert_eq!(
            parse_device(show, "/dev/loop0"),
            Some((1073741824, 130023424))
        );
        assert_eq!(parse_device(show, "/dev/loop10"), None);
        assert_eq!(
            parse_uuid(show).as_deref(),
            Some("fedc2ced-4d5f-40ec-a600-629b8f1a8f36")
        );
        assert_eq!(parse_uuid("Label: none  uuid: fedc2ced\n"), None);
    }

    /// Writes back `v`'s file system only (syncfs): the tests here run side by
    /// side, and a global `sync` in one would write back another's buffered
    /// data (which `buffered_writes_are_pending_until_write_back` counts on
    /// staying pending) at a moment of its own: CI once saw the relocation
    /// test's 200 MiB of data in 580 MiB of chunks, too many to remove a disk,
    /// when it ran beside the pending test's global syncs.
    fn sync_fs(v: &BtrfsVolume) {
        sh("sync", &["-f", &v.mount_point().to_string_lossy()]).unwrap();
    }

    const M: u64 = 1 << 20;

    /// A btrfs volume in a new temporary directory (kept alive with it) on
    /// sparse-file disks of these sizes; `None`, saying why the `test` skips,
    /// where this host cannot make one (no root, loop devices or btrfs-progs).
    fn sparse_volume(
        test: &str,
        prefix: &str,
        disks: &[u64],
    ) -> Option<(tempfile::TempDir, BtrfsVolume)> {
        if let Some(why) = unavailable() {
            eprintln!("SKIP btrfs {test} test: {why}");
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let clock: Arc<dyn Clock> = Arc::new(clock::MonotonicClock::new());
        let mut v = BtrfsVolume::new(
            &dir.path().join("mnt"),
            &dir.path().join("work"),
            prefix,
            Backend::Sparse,
            1,
            clock,
        )
        .unwrap();
        for &bytes in disks {
            v.add_disk(bytes, 0).unwrap();
        }
        Some((dir, v))
    }

    /// A removal takes a disk that fits, not blindly the last one: a pool of
    /// 256 + 512 + 512 MiB holding 420 MiB removes one of the disks
    /// `removal_order` names from btrfs's own figures (the next if btrfs
    /// refuses one), and the data stays.
    #[test]
    fn removal_takes_the_disk_that_fits() {
        let Some((_dir, mut v)) =
            sparse_volume("removal choice", "pick", &[256 * M, 512 * M, 512 * M])
        else {
            return;
        };
        let data: Vec<u8> = (0..(420 * M) as usize)
            .map(|i| (i * 13 % 251) as u8)
            .collect();
        std::fs::write(v.mount_point().join("f"), &data).unwrap();
        sync_fs(&v);
        let pool = v.allocations().unwrap();
        let order = elastic::removal_order(&pool, 0);
        assert!(!order.is_empty(), "no disk fits: {pool:?}");
        let names: Vec<String> = v.disks().iter().map(|d| d.name.clone()).collect();
        let size = v.remove_disk(0).unwrap();
        let left: Vec<String> = v.disks().iter().map(|d| d.name.clone()).collect();
        let gone: Vec<usize> = (0..3).filter(|&k| !left.contains(&names[k])).collect();
        assert_eq!(gone.len(), 1, "{names:?} -> {left:?}");
        assert!(
            order.contains(&gone[0]),
            "removed {gone:?}, order {order:?} on {pool:?}"
        );
        assert_eq!(size, 1280 * M - pool[gone[0]].0);
        assert_eq!(std::fs::read(v.mount_point().join("f")).unwrap(), data);
        v.teardown().unwrap();
    }

    /// Issue 16 at the paper's disk speed: after writes and deletes every disk
    /// holds partly empty block groups, and no disk's allocation fits in the
    /// others' unallocated space. The removal compacts them first, then takes
    /// a disk; the data stays, and the compaction's writes are relocation, not
    /// the application's.
    #[test]
    fn removal_compacts_partly_empty_block_groups_first() {
        let Some((_dir, mut v)) =
            sparse_volume("compaction", "compact", &[256 * M, 256 * M, 256 * M])
        else {
            return;
        };
        let file = |k: usize| -> Vec<u8> {
            (0..(16 * M) as usize)
                .map(|i| (i * 7 % 251) as u8 ^ k as u8)
                .collect()
        };
        for k in 0..36 {
            std::fs::write(v.mount_point().join(format!("f{k}")), file(k)).unwrap();
        }
        sync_fs(&v);
        for k in (0..36).step_by(2) {
            std::fs::remove_file(v.mount_point().join(format!("f{k}"))).unwrap();
        }
        sync_fs(&v);
        let pool = v.allocations().unwrap();
        assert!(
            elastic::removal_order(&pool, 0).is_empty(),
            "the setup must leave no disk that fits: {pool:?}"
        );
        let before = v.stats(0).unwrap();
        let size = v.remove_disk(0).unwrap();
        let after = v.stats(0).unwrap();
        assert_eq!(size, 512 * M);
        assert_eq!(v.disks().len(), 2);
        assert!(
            v.log.iter().any(|l| l.starts_with("compact -dusage=")),
            "{:?}",
            v.log
        );
        for k in (1..36).step_by(2) {
            assert!(
                std::fs::read(v.mount_point().join(format!("f{k}"))).unwrap() == file(k),
                "f{k} changed"
            );
        }
        let seen = after.written - before.written;
        assert!(
            seen < 8 * M,
            "{} MiB of relocation counted as written",
            seen >> 20
        );
        assert!(after.relocated - before.relocated >= 64 * M, "{after:?}");
        v.teardown().unwrap();
    }

    /// A removal that fails after compacting is not followed by the same
    /// compaction at the next attempt while nothing has changed (it would
    /// rewrite the same block groups at every probe), and is once something
    /// has.
    #[test]
    fn a_futile_compaction_is_not_repeated_until_something_changes() {
        let Some((_dir, mut v)) = sparse_volume("compaction", "futile", &[256 * M, 256 * M]) else {
            return;
        };
        let data = vec![0x5Au8; (300 * M) as usize];
        std::fs::write(v.mount_point().join("f"), &data).unwrap();
        sync_fs(&v);
        let compactions =
            |v: &BtrfsVolume| v.log.iter().filter(|l| l.starts_with("compact")).count();
        assert!(
            v.remove_disk(0).is_err(),
            "300 MiB cannot fit on one 256 MiB disk"
        );
        let first = compactions(&v);
        assert!(first > 0, "{:?}", v.log);
        assert!(v.remove_disk(0).is_err());
        assert_eq!(
            compactions(&v),
            first,
            "compacted again with nothing changed: {:?}",
            v.log
        );
        std::fs::write(v.mount_point().join("g"), vec![1u8; (4 * M) as usize]).unwrap();
        sync_fs(&v);
        assert!(v.remove_disk(0).is_err());
        assert!(compactions(&v) > first, "{:?}", v.log);
        assert_eq!(v.disks().len(), 2);
        v.teardown().unwrap();
    }

    /// Buffered writes show in `pending` (btrfs's `bytes_may_use`) before
    /// write-back, while neither `used` nor the device counters show them; a
    /// sync moves them into `used`, and a file deleted before write-back takes
    /// its promise with it.
    #[test]
    fn buffered_writes_are_pending_until_write_back() {
        let Some((_dir, mut v)) = sparse_volume("pending", "pend", &[512 * M]) else {
            return;
        };
        sync_fs(&v);
        let before = v.stats(0).unwrap();
        assert_eq!(before.pending, Some(0), "{before:?}");
        let data: Vec<u8> = (0..(64 * M) as usize).map(|i| (i % 251) as u8).collect();
        std::fs::write(v.mount_point().join("f"), &data).unwrap();
        let buffered = v.stats(0).unwrap();
        // (write-back may start at any time: at least part is still pending)
        let pending = buffered.pending.unwrap();
        assert!(pending > 0, "{buffered:?}");
        assert!(
            buffered.used - before.used + pending >= 64 * M,
            "64 MiB neither used nor pending: {buffered:?}"
        );
        sync_fs(&v);
        let synced = v.stats(0).unwrap();
        assert_eq!(synced.pending, Some(0), "{synced:?}");
        assert!(synced.used - before.used >= 64 * M, "{synced:?}");
        // written and deleted before write-back: never allocated, never pending
        std::fs::write(v.mount_point().join("g"), &data).unwrap();
        std::fs::remove_file(v.mount_point().join("g")).unwrap();
        let gone = v.stats(0).unwrap();
        assert_eq!(gone.pending, Some(0), "{gone:?}");
        v.teardown().unwrap();
    }

    /// Issue 16's removal case on a real btrfs (sparse-file disks on loop devices):
    /// data written onto the second disk is relocated when that disk is removed; the
    /// device counters see it, the `written` the controller reads does not.
    #[test]
    fn removal_relocation_is_not_counted_as_written() {
        let Some((_dir, mut v)) = sparse_volume("relocation", "reloc", &[512 * M, 512 * M]) else {
            return;
        };
        // btrfs spreads new data chunks over both disks (the one with the most
        // unallocated space first)
        let data: Vec<u8> = (0..(200 * M) as usize)
            .map(|i| (i * 7 % 251) as u8)
            .collect();
        std::fs::write(v.mount_point().join("f"), &data).unwrap();
        sync_fs(&v);
        // Which of the two equal disks goes is the volume's choice (the one
        // holding less: elastic::removal_order), so what it held is read after.
        let pool = v.allocations().unwrap();
        let names: Vec<String> = v.disks().iter().map(|d| d.name.clone()).collect();
        let before = v.stats(0).unwrap();
        let raw_before = v.raw_stats();
        v.remove_disk(0).unwrap();
        let after = v.stats(0).unwrap();
        let raw_after = v.raw_stats();
        let raw = raw_after.written - raw_before.written;
        let left: Vec<String> = v.disks().iter().map(|d| d.name.clone()).collect();
        let gone = (0..2).find(|&k| !left.contains(&names[k])).unwrap();
        // btrfs did copy the data (extents, not whole chunks: less than the
        // chunks allocated there) ...
        assert!(
            raw >= 32 * M,
            "only {} MiB written by the removal of a disk with {} MiB allocated ({pool:?})",
            raw >> 20,
            pool[gone].1 >> 20
        );
        // ... and the controller's counter leaves it out
        let seen = after.written - before.written;
        assert!(seen < 8 * M, "{} MiB of {} counted", seen >> 20, raw >> 20);
        assert_eq!(after.relocated - before.relocated, raw - seen);
        assert_eq!(std::fs::read(v.mount_point().join("f")).unwrap(), data);
        v.teardown().unwrap();
    }
}

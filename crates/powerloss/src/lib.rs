//! A power-loss harness in the CrashMonkey / ALICE manner (issue 14).
//!
//! `kill -9` keeps every page of a `MAP_SHARED` device file; a host crash
//! keeps any subset of the pages written since they were last synced, a page's
//! data and its OOB record separately. This crate turns a recorded run into
//! crash states and checks what recovery makes of them:
//!
//! * a flash device records its writes ([`flash::FlashDevice::record_crashes`])
//!   and, at a moment of the run, hands out a [`flash::CrashPoint`]: the durable
//!   image and the later writes as separate units;
//! * [`Chooser`] picks which of those units a crash state keeps: none, all, an
//!   in-order prefix, random subsets, and subsets that tear data/OOB pairs;
//! * the workload writes self-identifying pages ([`page`]: tenant, logical
//!   page, version, and a fill derived from them), and a [`VolModel`] per
//!   volume tracks every version written and which are acknowledged durable
//!   (a FUA write, or a write completed before a completed FLUSH);
//! * after recovery, [`VolModel::check`] reads every logical page: one with an
//!   acknowledged version must hold it or a newer version written; every other
//!   page must hold zeros (never written or trimmed) or a version written to
//!   that page of that volume, never another page's or another tenant's data.
//!
//! [`CrashDisk`] is the same recording for a plain block device (the cache
//! tier's backing store), and [`SnapCheckpoints`] a checkpoint store whose
//! contents a crash state can copy (a save is atomic and durable when it
//! returns, as `DirCheckpoints` makes it with write, fsync, rename).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use blockdev::{check_range, BlockDev, IoResult};
use flash::{CrashPoint, UnitKind};
use ftl::{CheckpointStore, FtlError};
use parking_lot::Mutex;
use rng::SplitMix64;

/// First bytes of every page the workload writes.
const MAGIC: &[u8; 8] = b"PWRLOSS1";

/// The content of version `ver` (from 1) of logical page `lba` of `tenant`:
/// a header naming all three, then bytes derived from them, so that a page
/// holding another page's, another version's or torn data is recognised.
pub fn page(tenant: u32, lba: u64, ver: u64, size: usize) -> Vec<u8> {
    let mut b = vec![0u8; size];
    b[..8].copy_from_slice(MAGIC);
    b[8..12].copy_from_slice(&tenant.to_le_bytes());
    b[12..20].copy_from_slice(&lba.to_le_bytes());
    b[20..28].copy_from_slice(&ver.to_le_bytes());
    let mut r = SplitMix64::derive(0x9e11, &[u64::from(tenant), lba, ver]);
    for c in b[28..].chunks_mut(8) {
        let v = r.next_u64().to_le_bytes();
        c.copy_from_slice(&v[..c.len()]);
    }
    b
}

/// What a page read after recovery holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seen {
    /// All zeros: never written, or trimmed.
    Zeros,
    /// Exactly the bytes of [`page`]`(tenant, lba, ver)`.
    Page {
        /// Tenant named in the header.
        tenant: u32,
        /// Logical page named in the header.
        lba: u64,
        /// Version named in the header.
        ver: u64,
    },
    /// Anything else (torn, mixed, foreign).
    Garbage,
}

/// Classifies a page read back.
pub fn decode(b: &[u8]) -> Seen {
    if b.iter().all(|&x| x == 0) {
        return Seen::Zeros;
    }
    if b.len() < 28 || &b[..8] != MAGIC {
        return Seen::Garbage;
    }
    let tenant = u32::from_le_bytes(b[8..12].try_into().expect("4 bytes"));
    let lba = u64::from_le_bytes(b[12..20].try_into().expect("8 bytes"));
    let ver = u64::from_le_bytes(b[20..28].try_into().expect("8 bytes"));
    if page(tenant, lba, ver, b.len()) != b {
        return Seen::Garbage;
    }
    Seen::Page { tenant, lba, ver }
}

/// The model of one volume: every version written to each logical page, in
/// order (version 0 is zeros: the initial content, or a trim), and the oldest
/// index into that history a recovered page may hold.
#[derive(Debug, Clone)]
pub struct VolModel {
    /// Tenant id written in the pages' headers.
    pub tenant: u32,
    /// Page size in bytes.
    pub page_size: usize,
    hist: Vec<Vec<u64>>,
    durable: Vec<usize>,
    next_ver: u64,
}

/// Counts of one check pass.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Checks {
    /// Pages with an acknowledged-durable write that held it (or newer).
    pub durable: u64,
    /// Other pages that held an older or newer version of themselves.
    pub consistent: u64,
}

impl VolModel {
    /// A volume of `pages` logical pages, all zeros (durably: a fresh volume).
    pub fn new(tenant: u32, pages: u64, page_size: usize) -> Self {
        Self {
            tenant,
            page_size,
            hist: vec![vec![0]; pages as usize],
            durable: vec![0; pages as usize],
            next_ver: 1,
        }
    }

    /// Logical pages.
    pub fn pages(&self) -> u64 {
        self.hist.len() as u64
    }

    /// A new version of `lba` is about to be written: its content.
    pub fn write(&mut self, lba: u64) -> Vec<u8> {
        let v = self.next_ver;
        self.next_ver += 1;
        self.hist[lba as usize].push(v);
        page(self.tenant, lba, v, self.page_size)
    }

    /// `lba` is about to be trimmed (reads zeros from then on).
    pub fn trim(&mut self, lba: u64) {
        self.hist[lba as usize].push(0);
    }

    /// The last write or trim of `lba` was acknowledged with FUA.
    pub fn fua(&mut self, lba: u64) {
        let h = &self.hist[lba as usize];
        self.durable[lba as usize] = h.len() - 1;
    }

    /// A FLUSH completed: every write completed before it is durable.
    pub fn flushed(&mut self) {
        for (d, h) in self.durable.iter_mut().zip(&self.hist) {
            *d = h.len() - 1;
        }
    }

    /// Checks page `lba` as read after recovery (see the crate docs).
    pub fn check(&self, lba: u64, buf: &[u8], n: &mut Checks) -> Result<(), String> {
        self.check_version(lba, buf, n).map(|_| ())
    }

    /// [`VolModel::check`], returning the version found.
    fn check_version(&self, lba: u64, buf: &[u8], n: &mut Checks) -> Result<u64, String> {
        let h = &self.hist[lba as usize];
        let d = self.durable[lba as usize];
        let ver = match decode(buf) {
            Seen::Zeros => 0,
            Seen::Page {
                tenant,
                lba: l,
                ver,
            } if tenant == self.tenant && l == lba => ver,
            other => {
                return Err(format!(
                    "tenant {} page {lba} holds {other:?}, not one of its own versions",
                    self.tenant
                ))
            }
        };
        if !h[d..].contains(&ver) {
            return Err(if h.contains(&ver) {
                format!(
                    "tenant {} page {lba} went back to version {ver}; version {} (of {:?}) was acknowledged durable",
                    self.tenant, h[d], h
                )
            } else {
                format!(
                    "tenant {} page {lba} holds version {ver}, never written to it (history {h:?})",
                    self.tenant
                )
            });
        }
        if d > 0 {
            n.durable += 1;
        } else {
            n.consistent += 1;
        }
        Ok(ver)
    }

    /// Reads every page of `dev` and checks it; then takes what it read as
    /// the new starting point (durable: recovery checkpoints it), so that
    /// the model goes on from the recovered state.
    pub fn check_all(&mut self, dev: &dyn BlockDev, n: &mut Checks) -> Result<(), String> {
        let mut buf = vec![0u8; self.page_size];
        for lba in 0..self.pages() {
            dev.read(lba * self.page_size as u64, &mut buf)
                .map_err(|e| format!("tenant {} page {lba}: read failed: {e}", self.tenant))?;
            let ver = self.check_version(lba, &buf, n)?;
            self.hist[lba as usize] = vec![ver];
            self.durable[lba as usize] = 0;
        }
        Ok(())
    }
}

/// One tenant volume under the workload: its device and its model.
pub struct Vol {
    /// The device the workload writes.
    pub dev: Arc<dyn BlockDev>,
    /// What it must hold.
    pub model: VolModel,
}

/// The mix of operations [`step`] draws from.
#[derive(Debug, Clone, Copy)]
pub struct Mix {
    /// Probability that an operation is a FLUSH.
    pub flush: f64,
    /// Probability that it is a trim of one page.
    pub trim: f64,
    /// Probability that a write is FUA.
    pub fua: f64,
    /// Most pages per write.
    pub max_pages: u64,
    /// Writes land in the first this fraction of the pages with probability
    /// 0.8 (overwrite-heavy, so GC runs).
    pub hot: f64,
    /// Injected bug, for checking the checker: FLUSH is acknowledged to the
    /// model but never sent to the device.
    pub skip_flush: bool,
}

impl Default for Mix {
    fn default() -> Self {
        Self {
            flush: 0.04,
            trim: 0.03,
            fua: 0.1,
            max_pages: 3,
            hot: 0.5,
            skip_flush: false,
        }
    }
}

/// One operation of the workload on a volume drawn from `vols`: a write of
/// one to `max_pages` pages (some FUA), a trim, or a FLUSH. The model learns
/// of a write before the device sees it, and of its durability after.
pub fn step(rng: &mut SplitMix64, vols: &mut [Vol], mix: &Mix) -> Result<(), String> {
    let v = rng.below(vols.len());
    let Vol { dev, model } = &mut vols[v];
    let ps = model.page_size as u64;
    let pages = model.pages();
    let r = rng.next_f64();
    let tenant = model.tenant;
    let err = |what: &str, e: blockdev::IoError| format!("tenant {tenant}: {what}: {e}");
    if r < mix.flush {
        if !mix.skip_flush {
            dev.flush().map_err(|e| err("flush", e))?;
        }
        model.flushed();
        return Ok(());
    }
    let hot = ((pages as f64 * mix.hot) as u64).max(1);
    let lba = if rng.next_f64() < 0.8 {
        rng.below(hot as usize) as u64
    } else {
        rng.below(pages as usize) as u64
    };
    if r < mix.flush + mix.trim {
        model.trim(lba);
        dev.trim(lba * ps, ps).map_err(|e| err("trim", e))?;
        return Ok(());
    }
    let n = (1 + rng.below(mix.max_pages as usize) as u64).min(pages - lba);
    let fua = rng.next_f64() < mix.fua;
    let mut data = Vec::with_capacity((n * ps) as usize);
    for l in lba..lba + n {
        data.extend_from_slice(&model.write(l));
    }
    dev.write(lba * ps, &data, fua)
        .map_err(|e| err("write", e))?;
    if fua {
        for l in lba..lba + n {
            model.fua(l);
        }
    }
    Ok(())
}

/// How a crash state picks the units it keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Strategy {
    /// Only the durable image.
    None,
    /// Every unit (what `kill -9` keeps).
    All,
    /// The units up to a random one, in order (a crash mid-write-back of an
    /// ordered log).
    Prefix,
    /// Each unit with probability one half.
    Half,
    /// Each unit with a probability drawn per state.
    Skewed,
    /// Each data/OOB pair of a programmed page keeps exactly one of the two
    /// (half the pairs), the other units with probability one half.
    Torn,
}

impl Strategy {
    /// Every strategy, in the order states cycle through them.
    pub const ALL: [Strategy; 6] = [
        Strategy::Torn,
        Strategy::Half,
        Strategy::Prefix,
        Strategy::Skewed,
        Strategy::All,
        Strategy::None,
    ];
}

/// Picks units for crash states of one crash point.
#[derive(Debug)]
pub struct Chooser {
    rng: SplitMix64,
}

impl Chooser {
    /// Choices drawn from `rng`.
    pub fn new(rng: SplitMix64) -> Self {
        Self { rng }
    }

    /// Which units of `point` crash state number `i` keeps (and by what
    /// strategy). The first few states of a point are the deterministic ones.
    pub fn choose(&mut self, point: &CrashPoint, i: usize) -> (Strategy, Vec<bool>) {
        let n = point.units().len();
        let s = Strategy::ALL[i % Strategy::ALL.len()];
        let r = &mut self.rng;
        let keep = match s {
            Strategy::None => vec![false; n],
            Strategy::All => vec![true; n],
            Strategy::Prefix => {
                let k = r.below(n + 1);
                (0..n).map(|j| j < k).collect()
            }
            Strategy::Half => (0..n).map(|_| r.next_u64() & 1 == 1).collect(),
            Strategy::Skewed => {
                let p = r.next_f64();
                (0..n).map(|_| r.next_f64() < p).collect()
            }
            Strategy::Torn => {
                let mut keep: Vec<bool> = (0..n).map(|_| r.next_u64() & 1 == 1).collect();
                let mut data_of: HashMap<u64, usize> = HashMap::new();
                for (j, u) in point.units().iter().enumerate() {
                    match u.kind {
                        UnitKind::PageData => {
                            data_of.insert(u.target, j);
                        }
                        UnitKind::PageOob => {
                            if let Some(d) = data_of.remove(&u.target) {
                                if r.next_u64() & 1 == 1 {
                                    let oob_only = r.next_u64() & 1 == 1;
                                    keep[d] = !oob_only;
                                    keep[j] = oob_only;
                                }
                            }
                        }
                        _ => {}
                    }
                }
                keep
            }
        };
        (s, keep)
    }
}

/// Totals of a harness run, printed by the tests and the long command.
#[derive(Debug, Default, Clone)]
pub struct Figures {
    /// Crash points (moments of the run) crash states were made at.
    pub points: u64,
    /// Crash states tried (each recovered and checked).
    pub states: u64,
    /// Recoveries that succeeded (one per vSSD per state).
    pub recoveries: u64,
    /// Checks that passed.
    pub checks: Checks,
    /// Units the crash points held, in all.
    pub units: u64,
    /// Crash states per strategy.
    pub by_strategy: BTreeMap<Strategy, u64>,
    /// GC runs (victim blocks erased) during the recorded workloads.
    pub gc_runs: u64,
}

impl Figures {
    /// Checks passed in all (durable + consistent + one per recovery).
    pub fn checks_passed(&self) -> u64 {
        self.checks.durable + self.checks.consistent + self.recoveries
    }

    /// Adds `o`.
    pub fn add(&mut self, o: &Figures) {
        self.points += o.points;
        self.states += o.states;
        self.recoveries += o.recoveries;
        self.checks.durable += o.checks.durable;
        self.checks.consistent += o.checks.consistent;
        self.units += o.units;
        self.gc_runs += o.gc_runs;
        for (k, v) in &o.by_strategy {
            *self.by_strategy.entry(*k).or_default() += v;
        }
    }

    /// The line the tests print.
    pub fn line(&self, what: &str) -> String {
        format!(
            "power-loss harness [{what}]: crash points: {}, crash states tried: {}, checks passed: {} \
             (recoveries {}, acknowledged-durable pages intact {}, other pages consistent {}), units per point: {:.1}, \
             GC runs in the workloads: {}, states by strategy: {:?}",
            self.points,
            self.states,
            self.checks_passed(),
            self.recoveries,
            self.checks.durable,
            self.checks.consistent,
            self.units as f64 / self.points.max(1) as f64,
            self.gc_runs,
            self.by_strategy
        )
    }
}

/// Prints a figures line where `cargo test` shows it without
/// `--nocapture`: straight to the process's stderr (the test harness
/// captures only the `print!` family of macros).
pub fn report(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

/// How many crash states per crash point: `FLEXSSD_POWERLOSS_STATES` (total
/// wanted) over `points`, else `default`.
pub fn states_per_point(points: u64, default: u64) -> u64 {
    std::env::var("FLEXSSD_POWERLOSS_STATES")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .map_or(default, |total| total.div_ceil(points.max(1)).max(1))
}

/// A checkpoint store kept in memory whose contents a crash state copies: a
/// save is atomic and durable when it returns.
#[derive(Debug, Default, Clone)]
pub struct SnapCheckpoints {
    map: Arc<Mutex<HashMap<u32, Vec<u8>>>>,
}

impl SnapCheckpoints {
    /// An independent copy of what is saved now.
    pub fn snapshot(&self) -> SnapCheckpoints {
        SnapCheckpoints {
            map: Arc::new(Mutex::new(self.map.lock().clone())),
        }
    }
}

impl CheckpointStore for SnapCheckpoints {
    fn load(&self, id: u32) -> Result<Option<Vec<u8>>, FtlError> {
        Ok(self.map.lock().get(&id).cloned())
    }
    fn save(&self, id: u32, bytes: &[u8]) -> Result<(), FtlError> {
        self.map.lock().insert(id, bytes.to_vec());
        Ok(())
    }
    fn remove(&self, id: u32) -> Result<(), FtlError> {
        self.map.lock().remove(&id);
        Ok(())
    }
}

/// A block device in memory that records what a host crash may keep of it:
/// a durable image and, per 4 KiB block, the writes since the last FLUSH
/// (a FUA write makes only itself durable). For stores outside the flash
/// model (the cache tier's backing store).
#[derive(Debug)]
pub struct CrashDisk {
    st: Mutex<DiskState>,
    size: u64,
}

#[derive(Debug, Clone)]
struct DiskState {
    live: Vec<u8>,
    durable: Vec<u8>,
    /// (offset, bytes) written since they were last durable, in order.
    pending: Vec<(u64, Vec<u8>)>,
}

/// A crash point of a [`CrashDisk`].
#[derive(Debug, Clone)]
pub struct DiskPoint {
    durable: Vec<u8>,
    pending: Vec<(u64, Vec<u8>)>,
}

impl DiskPoint {
    /// Writes not known durable.
    pub fn units(&self) -> usize {
        self.pending.len()
    }

    /// The disk after a crash that kept the units `i` with `keep[i]`.
    pub fn disk(&self, keep: &[bool]) -> CrashDisk {
        let mut d = self.durable.clone();
        for ((off, b), &k) in self.pending.iter().zip(keep) {
            if k {
                d[*off as usize..*off as usize + b.len()].copy_from_slice(b);
            }
        }
        CrashDisk::from_bytes(d)
    }
}

const DISK_UNIT: u64 = 4096;

impl CrashDisk {
    /// A zeroed disk of `size` bytes (a multiple of 4096), durable.
    pub fn new(size: u64) -> Self {
        Self::from_bytes(vec![0; size as usize])
    }

    fn from_bytes(b: Vec<u8>) -> Self {
        Self {
            size: b.len() as u64,
            st: Mutex::new(DiskState {
                durable: b.clone(),
                live: b,
                pending: Vec::new(),
            }),
        }
    }

    /// The crash point now.
    pub fn point(&self) -> DiskPoint {
        let st = self.st.lock();
        DiskPoint {
            durable: st.durable.clone(),
            pending: st.pending.clone(),
        }
    }

    fn put(&self, offset: u64, data: &[u8], fua: bool) {
        let mut st = self.st.lock();
        let st = &mut *st;
        st.live[offset as usize..offset as usize + data.len()].copy_from_slice(data);
        let mut pos = 0u64;
        while pos < data.len() as u64 {
            let at = offset + pos;
            let n = (DISK_UNIT - at % DISK_UNIT).min(data.len() as u64 - pos);
            let bytes = data[pos as usize..(pos + n) as usize].to_vec();
            if fua {
                st.durable[at as usize..(at + n) as usize].copy_from_slice(&bytes);
                // An older write of these bytes still pending must not land
                // on top of this one: a disk keeps the order of writes to
                // one sector. Keep only its bytes outside this range.
                let mut rest = Vec::with_capacity(st.pending.len());
                for (o, b) in st.pending.drain(..) {
                    let end = o + b.len() as u64;
                    if end <= at || o >= at + n {
                        rest.push((o, b));
                        continue;
                    }
                    if o < at {
                        rest.push((o, b[..(at - o) as usize].to_vec()));
                    }
                    if end > at + n {
                        rest.push((at + n, b[(at + n - o) as usize..].to_vec()));
                    }
                }
                st.pending = rest;
            } else {
                st.pending.push((at, bytes));
            }
            pos += n;
        }
    }
}

impl BlockDev for CrashDisk {
    fn size(&self) -> u64 {
        self.size
    }
    fn read(&self, offset: u64, buf: &mut [u8]) -> IoResult {
        check_range(offset, buf.len() as u64, self.size)?;
        let st = self.st.lock();
        buf.copy_from_slice(&st.live[offset as usize..offset as usize + buf.len()]);
        Ok(0)
    }
    fn write(&self, offset: u64, data: &[u8], fua: bool) -> IoResult {
        check_range(offset, data.len() as u64, self.size)?;
        self.put(offset, data, fua);
        Ok(0)
    }
    fn flush(&self) -> IoResult {
        let mut st = self.st.lock();
        st.durable = st.live.clone();
        st.pending.clear();
        Ok(0)
    }
    fn trim(&self, offset: u64, len: u64) -> IoResult {
        self.write_zeroes(offset, len, false)
    }
    fn write_zeroes(&self, offset: u64, len: u64, fua: bool) -> IoResult {
        check_range(offset, len, self.size)?;
        self.put(offset, &vec![0; len as usize], fua);
        Ok(0)
    }
}

/// Picks `keep` flags for a [`DiskPoint`] with the strategies of [`Chooser`]
/// (no data/OOB pairs on a disk: `Torn` is `Half` there).
pub fn choose_disk(rng: &mut SplitMix64, n: usize, i: usize) -> (Strategy, Vec<bool>) {
    let s = Strategy::ALL[i % Strategy::ALL.len()];
    let keep = match s {
        Strategy::None => vec![false; n],
        Strategy::All => vec![true; n],
        Strategy::Prefix => {
            let k = rng.below(n + 1);
            (0..n).map(|j| j < k).collect()
        }
        Strategy::Half | Strategy::Torn => (0..n).map(|_| rng.next_u64() & 1 == 1).collect(),
        Strategy::Skewed => {
            let p = rng.next_f64();
            (0..n).map(|_| rng.next_f64() < p).collect()
        }
    };
    (s, keep)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_identify_themselves() {
        let p = page(3, 17, 9, 4096);
        assert_eq!(
            decode(&p),
            Seen::Page {
                tenant: 3,
                lba: 17,
                ver: 9
            }
        );
        let mut torn = p.clone();
        torn[2000] ^= 1;
        assert_eq!(decode(&torn), Seen::Garbage);
        assert_eq!(decode(&[0; 4096]), Seen::Zeros);
    }

    #[test]
    fn the_model_rejects_lost_foreign_and_invented_versions() {
        let mut m = VolModel::new(1, 4, 4096);
        let mut n = Checks::default();
        let v1 = m.write(0);
        m.flushed();
        let v2 = m.write(0);
        assert!(m.check(0, &v1, &mut n).is_ok(), "older than unflushed v2");
        assert!(m.check(0, &v2, &mut n).is_ok());
        assert!(m.check(0, &[0; 4096], &mut n).is_err(), "v1 was flushed");
        assert!(m.check(1, &v1, &mut n).is_err(), "another page's data");
        assert!(
            m.check(0, &page(2, 0, 1, 4096), &mut n).is_err(),
            "another tenant"
        );
        assert!(m.check(1, &[0; 4096], &mut n).is_ok());
        m.trim(0);
        m.fua(0);
        assert!(m.check(0, &v2, &mut n).is_err(), "the trim was FUA");
        assert_eq!(
            n,
            Checks {
                durable: 2,
                consistent: 1
            }
        );
    }

    #[test]
    fn a_crash_disk_keeps_fua_and_flushed_writes() {
        let d = CrashDisk::new(16384);
        d.write(0, &[1; 4096], false).unwrap();
        d.write(4096, &[2; 4096], true).unwrap();
        let p = d.point();
        assert_eq!(p.units(), 1);
        let lost = p.disk(&[false]);
        let mut b = [0u8; 4096];
        lost.read(0, &mut b).unwrap();
        assert_eq!(b, [0; 4096]);
        lost.read(4096, &mut b).unwrap();
        assert_eq!(b, [2; 4096]);
        d.write(4096, &[3; 4096], false).unwrap();
        d.write(4096, &[4; 4096], true).unwrap();
        let p = d.point();
        assert_eq!(
            p.units(),
            1,
            "the FUA write retired the older write of its block"
        );
        p.disk(&[true]).read(4096, &mut b).unwrap();
        assert_eq!(b, [4; 4096]);
        d.flush().unwrap();
        assert_eq!(d.point().units(), 0);
    }
}

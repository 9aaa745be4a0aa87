//! The two durability bugs the harness found, each as one hand-made crash
//! state (they fail on the code before the fixes).

use std::sync::Arc;

use blockdev::BlockDev;
use clock::VirtualClock;
use flash::{CrashPoint, FlashDevice, Geometry, Timing, UnitKind};
use ftl::{max_capacity, Extent, GcPolicyKind, Vssd, VssdConfig};
use powerloss::{page, Checks, SnapCheckpoints, VolModel};

const PAGE: usize = 4096;

fn geo() -> Geometry {
    Geometry {
        channels: 1,
        dies_per_channel: 1,
        planes_per_die: 1,
        blocks_per_plane: 12,
        pages_per_block: 4,
        page_size: PAGE as u32,
    }
}

fn cfg() -> VssdConfig {
    let extents = vec![Extent {
        channel: 0,
        first_block: 0,
        blocks: 12,
    }];
    VssdConfig {
        id: 1,
        name: "t".into(),
        capacity_bytes: max_capacity(&geo(), &extents),
        extents,
        gc: GcPolicyKind::Greedy,
        lent: Vec::new(),
    }
}

fn setup() -> (Arc<FlashDevice>, Arc<Vssd>, SnapCheckpoints, VolModel) {
    let dev = Arc::new(FlashDevice::memory(geo(), Timing::default()).unwrap());
    dev.record_crashes();
    let ckpt = SnapCheckpoints::default();
    let v = Vssd::create(
        dev.clone(),
        cfg(),
        Arc::new(VirtualClock::new(1)),
        Arc::new(ckpt.clone()),
    )
    .unwrap();
    let pages = cfg().capacity_bytes / PAGE as u64;
    (dev, v, ckpt, VolModel::new(1, pages, PAGE))
}

/// Recovers the crash state of `point` keeping the units `keep` says and
/// checks every page against `model`.
fn check(
    point: &CrashPoint,
    keep: impl Fn(usize) -> bool,
    ckpt: &SnapCheckpoints,
    model: &VolModel,
) -> Result<(), String> {
    let img = point.image(keep);
    let dev = Arc::new(FlashDevice::from_crash_image(geo(), Timing::default(), &img).unwrap());
    let v = Vssd::open(
        dev,
        cfg(),
        Arc::new(VirtualClock::new(1)),
        Arc::new(ckpt.snapshot()),
    )
    .map_err(|e| e.to_string())?;
    model.clone().check_all(&*v, &mut Checks::default())
}

/// An overwrite whose OOB record reached the disk but whose data did not
/// must not hide the flushed version (recovery mapped it and read zeros).
#[test]
fn a_torn_overwrite_does_not_hide_the_flushed_version() {
    let (dev, v, ckpt, mut m) = setup();
    v.write(0, &m.write(0), false).unwrap();
    v.flush().unwrap();
    m.flushed();
    v.write(0, &m.write(0), false).unwrap();
    let point = dev.crash_point().unwrap();
    let kinds: Vec<UnitKind> = point.units().iter().map(|u| u.kind).collect();
    assert_eq!(kinds, [UnitKind::PageData, UnitKind::PageOob]);
    check(&point, |i| i == 1, &ckpt, &m).unwrap();
}

/// GC must not erase a block before the writes that made its pages stale
/// (and the copies of its live pages) are durable: a crash that kept only
/// the erase lost the flushed version of page 0.
#[test]
fn a_gc_erase_does_not_outrun_the_overwrites() {
    let (dev, v, ckpt, mut m) = setup();
    v.write(0, &m.write(0), false).unwrap();
    v.flush().unwrap();
    m.flushed();
    let first = (0..geo().total_pages())
        .find(|&p| dev.oob(p).is_some_and(|o| o.lba == 0))
        .unwrap();
    let block = first / u64::from(geo().pages_per_block);
    let pages = m.pages();
    // Overwrite everything, page 0 first, without a FLUSH, until GC erases
    // the block that held page 0's flushed version.
    for i in 0..50 * pages {
        let lba = i % pages;
        v.write(lba * PAGE as u64, &m.write(lba), false).unwrap();
        let point = dev.crash_point().unwrap();
        let erased = point
            .units()
            .iter()
            .any(|u| u.kind == UnitKind::EraseOob && u.target == block);
        if erased || dev.oob(first).is_none_or(|o| o.lba != 0) {
            // Keep only the erases: the overwrites stay in the page cache.
            let erase = |i: usize| {
                matches!(
                    point.units()[i].kind,
                    UnitKind::EraseData | UnitKind::EraseOob | UnitKind::EraseCount
                )
            };
            check(&point, erase, &ckpt, &m).unwrap();
            return;
        }
    }
    panic!("GC never erased block {block}");
}

/// The page content really names its page: a sanity check of the helper the
/// two tests above rely on.
#[test]
fn pages_differ_by_version() {
    assert_ne!(page(1, 0, 1, PAGE), page(1, 0, 2, PAGE));
}

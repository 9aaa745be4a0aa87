//! Paced migrations: chunks spaced by `chunk / rate` on a virtual clock, a paced
//! run on the monotonic clock that takes the time the rate allots and keeps the
//! data, and a cancel or deadline that ends a long wait at once.

use std::num::NonZeroU64;
use std::time::Duration;

use clock::{Clock, MonotonicClock, MS, SEC};

use super::*;

const K64: u64 = 64 << 10;

fn paced(chunk: u64, bytes_per_sec: u64, clock: Arc<dyn Clock>) -> MigrateOptions {
    MigrateOptions {
        chunk_bytes: chunk,
        deadline: None,
        pacing: Some(Pacing {
            bytes_per_sec: NonZeroU64::new(bytes_per_sec).unwrap(),
            clock,
        }),
    }
}

fn copied(s: Step) -> u64 {
    match s {
        Step::Copied(p) => p.copied_bytes,
        other => panic!("expected a chunk copied, got {other:?}"),
    }
}

/// Waits (up to a minute, on the test's own monotonic clock) until `f` holds.
fn eventually(what: &str, clock: &MonotonicClock, f: impl Fn() -> bool) {
    let t0 = clock.now();
    while !f() {
        assert!(clock.now() - t0 < 60 * SEC, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// The migration's outcome once it has one, if that is within `limit` on
/// `clock`: a copier that does not wake fails the test instead of hanging it.
fn outcome_within(
    h: &MigrationHandle,
    clock: &MonotonicClock,
    limit: u64,
) -> Result<Migrated, MigrationError> {
    let t0 = clock.now();
    loop {
        if let Some(r) = h.outcome() {
            return r;
        }
        assert!(
            clock.now() - t0 < limit,
            "no outcome within {} ms",
            limit / MS
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[test]
fn pacing_allots_time_in_proportion_rounded_up() {
    let p = |rate: u64| Pacing {
        bytes_per_sec: NonZeroU64::new(rate).unwrap(),
        clock: Arc::new(VirtualClock::new(0)),
    };
    assert_eq!(p(256 << 10).time_for(K64), 250 * MS);
    assert_eq!(p(1 << 20).time_for(1 << 20), SEC);
    assert_eq!(p(3).time_for(1), 333_333_334, "rounded up");
    assert_eq!(p(1).time_for(0), 0);
    assert_eq!(p(1).time_for(u64::MAX), u64::MAX, "saturates");
}

#[test]
fn paced_steps_are_spaced_by_chunk_over_rate_on_a_virtual_clock() {
    let clock = Arc::new(VirtualClock::new(5 * SEC));
    let v = GhostVolume::new("v", 8 * K4);
    let old = mem(4 * K4);
    v.attach(0, 4 * K4, 1, old, 0).unwrap();
    v.write(0, &[7u8; 4 * K4 as usize], false).unwrap();
    // 4 KiB chunks at 8 KiB/s: one chunk every half second.
    let gap = SEC / 2;
    let mut m = v
        .start_migration(0, 2, mem(4 * K4), 0, paced(K4, 2 * K4, clock.clone()))
        .unwrap();
    // The first chunk may go at once.
    assert!(m.next_step_at().unwrap() <= clock.now());
    assert_eq!(copied(m.step().unwrap()), K4);
    let t1 = m.next_step_at().unwrap();
    assert_eq!(t1, 5 * SEC + gap);
    // Early steps copy nothing and say when.
    assert!(matches!(m.step().unwrap(), Step::Wait(t) if t == t1));
    clock.set(t1 - 1);
    assert!(matches!(m.step().unwrap(), Step::Wait(t) if t == t1));
    assert_eq!(m.progress().copied_bytes, K4);
    // On time: the next chunk, and the one after is one gap later.
    clock.set(t1);
    assert_eq!(copied(m.step().unwrap()), 2 * K4);
    assert_eq!(m.next_step_at(), Some(t1 + gap));
    // A late step earns no burst: the next gap counts from the late step.
    clock.set(t1 + 10 * SEC);
    assert_eq!(copied(m.step().unwrap()), 3 * K4);
    assert_eq!(m.next_step_at(), Some(t1 + 10 * SEC + gap));
    assert!(matches!(m.step().unwrap(), Step::Wait(_)));
    clock.advance(gap);
    assert_eq!(copied(m.step().unwrap()), 4 * K4);
    // Only the switch is left: it is not paced.
    assert_eq!(m.next_step_at(), None);
    let Step::Done(done) = m.step().unwrap() else {
        panic!("the switch follows the last chunk at once");
    };
    assert_eq!(done.new_gssd, 2);
    assert_eq!(m.next_step_at(), None, "finished");
    assert_eq!(read_vec(&v, 0, 4 * K4 as usize), vec![7u8; 4 * K4 as usize]);
    // Without pacing there is never anything to wait for.
    let m = v.start_migration(0, 3, mem(4 * K4), 0, opts(K4)).unwrap();
    assert_eq!(m.next_step_at(), None);
}

#[test]
fn a_paced_run_takes_the_time_the_rate_allots_and_keeps_the_data() {
    const CHUNKS: u64 = 8;
    const RATE: u64 = 256 << 10;
    let clock = Arc::new(MonotonicClock::new());
    let len = CHUNKS * K64;
    let v = GhostVolume::new("v", len);
    let old = mem(len);
    let new = mem(len);
    v.attach(0, len, 1, old, 0).unwrap();
    let mut want: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
    v.write(0, &want, false).unwrap();
    // The copy may not finish before 7 gaps of 64 KiB / 256 KiB/s = 1.75 s.
    let least = (CHUNKS - 1) * K64 * SEC / RATE;
    let t0 = clock.now();
    let h = v
        .migrate_with(0, 2, new.clone(), 0, paced(K64, RATE, clock.clone()))
        .unwrap();
    eventually("the first chunk", &clock, || h.progress().copied_bytes > 0);
    // A write while the copy is paced: to a chunk copied or not, it must survive.
    v.write(len - 100, b"late", false).unwrap();
    want[(len - 100) as usize..(len - 96) as usize].copy_from_slice(b"late");
    if clock.now() - t0 < least {
        assert!(
            h.outcome().is_none(),
            "finished {} ms in, before the rate allows",
            (clock.now() - t0) / MS
        );
    }
    let done = h.wait().unwrap();
    let took = clock.now() - t0;
    assert!(
        took >= least,
        "{len} bytes at {RATE} B/s took {} ms, less than {} ms",
        took / MS,
        least / MS
    );
    assert_eq!((done.new_gssd, h.progress().fraction()), (2, 1.0));
    assert_eq!(v.segments()[0].gssd_id, 2);
    assert_eq!(read_vec(&v, 0, len as usize), want);
    let mut on_new = vec![0u8; len as usize];
    new.read(0, &mut on_new).unwrap();
    assert_eq!(on_new, want, "the new gSSD holds the volume");
}

#[test]
fn a_cancel_ends_a_long_paced_wait_at_once() {
    let clock = Arc::new(MonotonicClock::new());
    let v = GhostVolume::new("v", 4 * K4);
    v.attach(0, 4 * K4, 1, mem(4 * K4), 0).unwrap();
    v.write(0, b"keep", false).unwrap();
    // 1 byte/s: after the first chunk, the next is 4096 s away.
    let h = v
        .migrate_with(0, 2, mem(4 * K4), 0, paced(K4, 1, clock.clone()))
        .unwrap();
    eventually("the first chunk", &clock, || {
        h.progress().copied_bytes == K4
    });
    std::thread::sleep(Duration::from_millis(50));
    assert!(h.outcome().is_none(), "the copier is waiting");
    h.cancel();
    let r = outcome_within(&h, &clock, 5 * SEC);
    assert_eq!(r.unwrap_err(), MigrationError::Cancelled);
    assert_eq!(v.segments()[0].gssd_id, 1);
    assert!(v.segments()[0].migration.is_none());
    assert_eq!(read_vec(&v, 0, 4), b"keep");
}

#[test]
fn a_deadline_ends_a_long_paced_wait_when_it_passes() {
    let clock = Arc::new(MonotonicClock::new());
    let v = GhostVolume::new("v", 4 * K4);
    v.attach(0, 4 * K4, 1, mem(4 * K4), 0).unwrap();
    let at = clock.now() + 300 * MS;
    let o = MigrateOptions {
        deadline: Some(Deadline {
            clock: clock.clone(),
            at,
        }),
        ..paced(K4, 1, clock.clone())
    };
    let h = v.migrate_with(0, 2, mem(4 * K4), 0, o).unwrap();
    // Noticed within seconds of the deadline, not after the 4096 s wait.
    let e = outcome_within(&h, &clock, 5 * SEC + 300 * MS).unwrap_err();
    assert!(
        matches!(e, MigrationError::DeadlineExceeded { deadline, .. } if deadline == at),
        "{e}"
    );
    assert!(
        h.progress().copied_bytes <= K4,
        "at most the first chunk, then the wait"
    );
    assert_eq!(v.segments()[0].gssd_id, 1);
}

#[test]
fn a_paced_run_follows_a_virtual_clock_that_someone_else_moves() {
    let clock = Arc::new(VirtualClock::new(0));
    let v = GhostVolume::new("v", 4 * K4);
    v.attach(0, 4 * K4, 1, mem(4 * K4), 0).unwrap();
    // One chunk per virtual second.
    let h = v
        .migrate_with(0, 2, mem(4 * K4), 0, paced(K4, K4, clock.clone()))
        .unwrap();
    let real = MonotonicClock::new();
    for n in 1..=3 {
        eventually("a chunk", &real, || h.progress().copied_bytes == n * K4);
        // Real time passes, virtual time does not: no further chunk.
        std::thread::sleep(Duration::from_millis(150));
        assert_eq!(
            h.progress().copied_bytes,
            n * K4,
            "copied ahead of the clock"
        );
        clock.advance(SEC);
    }
    assert_eq!(h.wait().unwrap().new_gssd, 2);
}

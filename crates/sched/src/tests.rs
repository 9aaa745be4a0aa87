//! Scheduler tests on a virtual clock: rates, unit caps, bursts, weighted sharing,
//! refusals, live changes, and a property test that nobody exceeds its curve.

use super::*;
use clock::{VirtualClock, SEC};
use proptest::prelude::*;

const K: u64 = 4096;

fn linear(reads: f64, writes: f64) -> Curve {
    Curve::new(vec![(0.0, reads), (writes, 0.0)]).unwrap()
}

/// Slices of 1 ms and a bucket of one slice: every admission is checked
/// against the curve over the current slice only, which the exact-rate tests
/// below rely on.
fn cfg() -> SchedConfig {
    SchedConfig {
        bucket_ms: 1,
        ..SchedConfig::default()
    }
}

fn sched(unit: Option<Curve>) -> (Arc<VirtualClock>, Arc<Scheduler>) {
    let clock = Arc::new(VirtualClock::new(0));
    let s = Scheduler::new(cfg(), unit, clock.clone()).unwrap();
    (clock, Arc::new(s))
}

fn tenant(curve: Option<Curve>, weight: u32, burst: bool) -> TenantSla {
    TenantSla {
        curve,
        weight,
        burst,
    }
}

/// The booked start time (panics on a retry or an error).
fn at(g: &TenantGate, dir: Dir, len: u64) -> Nanos {
    match g.reserve(dir, len).unwrap() {
        Admit::At(t) => t,
        Admit::Retry(t) => panic!("unexpected retry at {t}"),
    }
}

/// Start times of `n` back-to-back pieces of `len` bytes, all asked for at once.
fn burst_of(g: &TenantGate, dir: Dir, n: usize, len: u64) -> Vec<Nanos> {
    (0..n).map(|_| at(g, dir, len)).collect()
}

/// Closed-loop clients, one per gate, each with a backlog of 4 KiB reads: a
/// client asks for its next piece when its previous one starts (or when told to
/// ask again). Returns the pieces each got started before `until`.
fn drive(clock: &VirtualClock, gates: &[&TenantGate], until: Nanos) -> Vec<u64> {
    let mut next = vec![0; gates.len()];
    let mut got = vec![0; gates.len()];
    loop {
        let (i, &t) = next.iter().enumerate().min_by_key(|(_, &t)| t).unwrap();
        if t >= until {
            return got;
        }
        clock.set(t);
        match gates[i].reserve(Dir::Read, K).unwrap() {
            Admit::At(s) => {
                if s < until {
                    got[i] += 1;
                }
                next[i] = s;
            }
            Admit::Retry(s) => {
                assert!(s > t, "retry must be later");
                next[i] = s;
            }
        }
    }
}

#[test]
fn reads_are_paced_at_the_curve() {
    let (_c, s) = sched(None);
    let g = s
        .add_tenant("a", tenant(Some(linear(1000.0, 100.0)), 1, false))
        .unwrap();
    let t = burst_of(&g, Dir::Read, 5000, K);
    // 5000 reads at 1000/s: the last starts just before 5 s.
    let last = *t.last().unwrap() as f64 / SEC as f64;
    assert!((4.98..=5.0).contains(&last), "last start {last}");
    assert!(t.windows(2).all(|w| w[0] <= w[1]), "FIFO order");
    let st = s.tenant("a").unwrap().stats;
    assert_eq!(st.read_bytes, 5000 * K);
    assert!(st.delayed > 4900);
}

#[test]
fn mixed_traffic_lands_on_the_curve() {
    let (_c, s) = sched(None);
    let g = s
        .add_tenant("a", tenant(Some(linear(1000.0, 100.0)), 1, false))
        .unwrap();
    // One write per four reads: the curve gives w/100 + r/1000 = 1 with
    // r = 4w, i.e. w = 1000/14 ≈ 71.4/s and r ≈ 285.7/s.
    let mut last = 0;
    let (mut w, mut r) = (0u64, 0u64);
    for i in 0..5000 {
        let dir = if i % 5 == 0 { Dir::Write } else { Dir::Read };
        last = at(&g, dir, K);
        if dir == Dir::Write {
            w += 1
        } else {
            r += 1
        }
    }
    let secs = last as f64 / SEC as f64;
    let (wr, rr) = (w as f64 / secs, r as f64 / secs);
    let load = wr / 100.0 + rr / 1000.0;
    assert!(
        (0.98..=1.02).contains(&load),
        "w {wr}/s r {rr}/s load {load}"
    );
}

#[test]
fn large_requests_are_charged_in_full() {
    let (_c, s) = sched(None);
    // 100 ops of 4 KiB per second = 400 KiB/s of reads; a 64 KiB piece is
    // 16 ops, far more than a 1 ms slice's budget of 0.1 op.
    let g = s
        .add_tenant("a", tenant(Some(linear(100.0, 10.0)), 1, false))
        .unwrap();
    let t = burst_of(&g, Dir::Read, 101, 64 * 1024);
    let secs = *t.last().unwrap() as f64 / SEC as f64;
    assert!(
        (15.9..=16.1).contains(&secs),
        "100 pieces after the first took {secs} s"
    );
}

#[test]
fn the_unit_curve_caps_the_total() {
    let (_c, s) = sched(Some(linear(2000.0, 200.0)));
    let a = s.add_tenant("a", TenantSla::default()).unwrap();
    let b = s.add_tenant("b", TenantSla::default()).unwrap();
    let mut last = 0;
    for _ in 0..2000 {
        last = last.max(at(&a, Dir::Read, K));
        last = last.max(at(&b, Dir::Read, K));
    }
    let secs = last as f64 / SEC as f64;
    assert!(
        (1.98..=2.0).contains(&secs),
        "4000 reads at 2000/s took {secs} s"
    );
}

#[test]
fn a_tenant_under_its_curve_is_not_held_back_by_a_throttled_neighbour() {
    let (clock, s) = sched(None);
    let noisy = s
        .add_tenant("noisy", tenant(Some(linear(100.0, 10.0)), 1, false))
        .unwrap();
    let quiet = s
        .add_tenant("quiet", tenant(Some(linear(1000.0, 100.0)), 1, false))
        .unwrap();
    // The noisy tenant books a long backlog of writes...
    let t = burst_of(&noisy, Dir::Write, 100, K);
    assert!(*t.last().unwrap() > 9 * SEC);
    // ...which does not delay the quiet one's reads.
    clock.set(SEC / 2);
    assert_eq!(at(&quiet, Dir::Read, K), SEC / 2);
}

#[test]
fn bursts_use_spare_capacity_only() {
    let (clock, s) = sched(Some(linear(2000.0, 200.0)));
    let a = s
        .add_tenant("a", tenant(Some(linear(500.0, 50.0)), 1, true))
        .unwrap();
    // Alone, a bursting tenant gets the unit's rate, not its curve's.
    let got = drive(&clock, &[&a], SEC);
    assert!((1990..=2001).contains(&got[0]), "{got:?}");
    let st = s.tenant("a").unwrap().stats;
    assert!(st.burst_bytes >= 1400 * K, "burst {}", st.burst_bytes / K);
    // Without bursting it gets its curve.
    let (clock, s) = sched(Some(linear(2000.0, 200.0)));
    let a = s
        .add_tenant("a", tenant(Some(linear(500.0, 50.0)), 1, false))
        .unwrap();
    let got = drive(&clock, &[&a], SEC);
    assert!((495..=501).contains(&got[0]), "{got:?}");
}

#[test]
fn bursting_tenants_share_spare_capacity_by_weight() {
    let (clock, s) = sched(Some(linear(4000.0, 400.0)));
    let tiny = || Some(linear(1.0, 0.1));
    let a = s.add_tenant("a", tenant(tiny(), 1, true)).unwrap();
    let b = s.add_tenant("b", tenant(tiny(), 3, true)).unwrap();
    let got = drive(&clock, &[&a, &b], 2 * SEC);
    let ratio = got[1] as f64 / got[0] as f64;
    assert!((2.8..=3.2).contains(&ratio), "{got:?}");
    assert!(
        got[0] + got[1] >= 7900 && got[0] + got[1] <= 8002,
        "{got:?}"
    );
}

#[test]
fn no_bursts_while_a_tenant_under_its_curve_is_held_back() {
    // Unit: 1000 reads/s. "steady" has a curve of 1000 reads/s (it alone can
    // fill the unit); "bursty" has almost none but may burst.
    let (clock, s) = sched(Some(linear(1000.0, 100.0)));
    let steady = s
        .add_tenant("steady", tenant(Some(linear(1000.0, 100.0)), 1, false))
        .unwrap();
    let bursty = s
        .add_tenant("bursty", tenant(Some(linear(1.0, 0.1)), 1, true))
        .unwrap();
    let got = drive(&clock, &[&steady, &bursty], SEC);
    assert!(got[0] >= 990, "{got:?}");
    assert!(got[1] <= 3, "{got:?}");
}

#[test]
fn a_deep_bucket_lets_a_costly_write_pass_without_stalling_reads() {
    // A curve of 40 writes/s: one 4 KiB write is worth 25 ms of the curve.
    let curve = || Some(linear(40_000.0, 40.0));
    // With a one-slice bucket, the reads after a write wait about 25 ms.
    let (clock, s) = sched(None);
    let g = s.add_tenant("a", tenant(curve(), 1, false)).unwrap();
    at(&g, Dir::Write, K);
    clock.set(1_000_000);
    assert!(at(&g, Dir::Read, K) >= 20_000_000);
    // With the default 100 ms bucket they go at once, and the long-run rate
    // is still the curve: 10 writes then reads at 40k/s for the rest.
    let clock = Arc::new(VirtualClock::new(0));
    let s = Arc::new(Scheduler::new(SchedConfig::default(), None, clock.clone()).unwrap());
    let g = s.add_tenant("a", tenant(curve(), 1, false)).unwrap();
    at(&g, Dir::Write, K);
    clock.set(1_000_000);
    assert_eq!(at(&g, Dir::Read, K), 1_000_000);
    let t: Vec<_> = (0..40).map(|_| at(&g, Dir::Write, K)).collect();
    let secs = *t.last().unwrap() as f64 / SEC as f64;
    // 41 writes at 40/s less the 100 ms of depth: about 0.9 s.
    assert!((0.85..=1.0).contains(&secs), "{secs}");
}

#[test]
fn a_deep_unit_window_lets_reads_past_a_costly_write() {
    // Unit: 100k reads/s or 100 writes/s. One write is worth 10 ms of it.
    let unit = || Some(linear(100_000.0, 100.0));
    let reads_after_write = |cfg: SchedConfig| {
        let clock = Arc::new(VirtualClock::new(0));
        let s = Arc::new(Scheduler::new(cfg, unit(), clock.clone()).unwrap());
        let w = s.add_tenant("w", TenantSla::default()).unwrap();
        let r = s.add_tenant("r", TenantSla::default()).unwrap();
        at(&w, Dir::Write, K);
        at(&r, Dir::Read, K)
    };
    // One-slice accounting: the write fills the next 10 slices.
    assert!(reads_after_write(cfg()) >= 9_000_000);
    // A 100 ms deep queue: the read goes at once.
    assert_eq!(reads_after_write(SchedConfig::default()), 0);
    // The long-run rate still holds: 300 writes take about 3 s less the window.
    let clock = Arc::new(VirtualClock::new(0));
    let s = Arc::new(Scheduler::new(SchedConfig::default(), unit(), clock.clone()).unwrap());
    let w = s.add_tenant("w", TenantSla::default()).unwrap();
    let last = (0..300).map(|_| at(&w, Dir::Write, K)).max().unwrap();
    let secs = last as f64 / SEC as f64;
    assert!((2.85..=3.0).contains(&secs), "{secs}");
}

#[test]
fn forbidden_directions_are_refused() {
    let (_c, s) = sched(None);
    let ro = Curve::new(vec![(0.0, 1000.0)]).unwrap();
    let g = s.add_tenant("ro", tenant(Some(ro), 1, false)).unwrap();
    assert!(g.reserve(Dir::Read, K).is_ok());
    let e = g.reserve(Dir::Write, K).unwrap_err();
    assert_eq!(e.errno(), 1);
    assert!(e.to_string().contains("allows no writes"), "{e}");
    assert_eq!(s.tenant("ro").unwrap().stats.refused, 1);
}

#[test]
fn curves_change_live() {
    let (clock, s) = sched(None);
    let g = s
        .add_tenant("a", tenant(Some(linear(100.0, 10.0)), 1, false))
        .unwrap();
    let slow = burst_of(&g, Dir::Read, 100, K);
    assert!(*slow.last().unwrap() >= SEC - SEC / 50);
    clock.set(2 * SEC);
    s.set_tenant("a", tenant(Some(linear(10_000.0, 1000.0)), 1, false))
        .unwrap();
    let fast = burst_of(&g, Dir::Read, 100, K);
    assert!(
        *fast.last().unwrap() <= 2 * SEC + SEC / 50,
        "{:?}",
        fast.last()
    );
}

#[test]
fn nothing_to_enforce_admits_at_once() {
    let (clock, s) = sched(None);
    let g = s.add_tenant("a", TenantSla::default()).unwrap();
    clock.set(12345);
    for _ in 0..1000 {
        assert_eq!(at(&g, Dir::Write, 1 << 20), 12345);
    }
    assert_eq!(s.tenant("a").unwrap().stats.write_bytes, 1000 << 20);
}

#[test]
fn control_errors_are_clear() {
    let clock: Arc<dyn Clock> = Arc::new(VirtualClock::new(0));
    let bad = SchedConfig {
        slice_us: 0,
        ..cfg()
    };
    assert!(matches!(
        Scheduler::new(bad, None, clock.clone()),
        Err(SchedError::Config(_))
    ));
    let s = Arc::new(Scheduler::new(cfg(), None, clock).unwrap());
    let g = s.add_tenant("a", TenantSla::default()).unwrap();
    assert_eq!(
        s.add_tenant("a", TenantSla::default()).unwrap_err(),
        SchedError::DuplicateTenant("a".into())
    );
    assert_eq!(
        s.add_tenant("z", tenant(None, 0, false)).unwrap_err(),
        SchedError::ZeroWeight("z".into())
    );
    assert_eq!(
        s.set_tenant("nope", TenantSla::default()).unwrap_err(),
        SchedError::UnknownTenant("nope".into())
    );
    s.remove_tenant("a").unwrap();
    assert!(matches!(g.reserve(Dir::Read, K), Err(IoError::Gone(_))));
    let cfg: Result<SchedConfig, _> = serde_json::from_str(r#"{"slice_us": 10, "bogus": 1}"#);
    assert!(cfg.unwrap_err().to_string().contains("bogus"));
}

fn arb_curve() -> impl Strategy<Value = Curve> {
    // Concave curves from samples, rates between 50 and 5000 ops/s.
    prop::collection::vec((1u32..=500, 50u32..=5000), 1..6).prop_map(|v| {
        let mut pts: Vec<(f64, f64)> = v
            .into_iter()
            .map(|(w, r)| (f64::from(w), f64::from(r)))
            .collect();
        pts.push((0.0, 100.0));
        Curve::from_samples(&pts).unwrap()
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Whatever the request mix and arrival times, the traffic booked for a
    /// tenant over a span of slices stays within its curve over that span
    /// (plus the one piece that may overshoot), and likewise for the unit.
    #[test]
    fn nobody_exceeds_its_curve(
        ca in arb_curve(),
        cb in arb_curve(),
        reqs in prop::collection::vec((any::<bool>(), any::<bool>(), 1u64..=16, 0u64..2000), 1..400),
        deep in any::<bool>(),
    ) {
        let unit = sla::sum(&ca, &cb).unwrap();
        // One-slice accounting, or the default 100-slice bucket and queue.
        let config = if deep { SchedConfig::default() } else { cfg() };
        let depth = if deep { 100.0 } else { 0.0 };
        let clock = Arc::new(VirtualClock::new(0));
        let s = Arc::new(Scheduler::new(config, Some(unit.clone()), clock.clone()).unwrap());
        let a = s.add_tenant("a", tenant(Some(ca.clone()), 1, false)).unwrap();
        let b = s.add_tenant("b", tenant(Some(cb.clone()), 1, false)).unwrap();
        let mut booked: Vec<(bool, bool, u64, Nanos)> = Vec::new();
        for (is_a, write, pages, gap_us) in reqs {
            clock.advance(gap_us * 1000);
            let g = if is_a { &a } else { &b };
            let dir = if write { Dir::Write } else { Dir::Read };
            let t = at(g, dir, pages * K);
            prop_assert!(t >= clock.now());
            booked.push((is_a, write, pages * K, t));
        }
        let slice_ns = SchedConfig::default().slice_us * 1000;
        let span = |sel: &dyn Fn(bool) -> bool| {
            let mine: Vec<_> = booked.iter().filter(|x| sel(x.0)).collect();
            if mine.is_empty() {
                return None;
            }
            let first = mine.iter().map(|x| x.3 / slice_ns).min().unwrap();
            let last = mine.iter().map(|x| x.3 / slice_ns).max().unwrap();
            let w: u64 = mine.iter().filter(|x| x.1).map(|x| x.2).sum();
            let r: u64 = mine.iter().filter(|x| !x.1).map(|x| x.2).sum();
            Some((last - first + 1, w as f64, r as f64))
        };
        let check = |curve: &Curve, got: Option<(u64, f64, f64)>| {
            if let Some((slices, w, r)) = got {
                let g = Region::new(curve.clone(), K, 1e-3).gauge(w, r);
                // Pieces of at most 64 KiB may overshoot the last slice (one
                // per tenant): allow two pieces' gauge.
                let piece = Region::new(curve.clone(), K, 1e-3);
                let slack = depth
                    + 2.0 * piece.gauge(0.0, 16.0 * K as f64).max(piece.gauge(16.0 * K as f64, 0.0));
                assert!(g <= slices as f64 + slack + 1e-6, "gauge {g} over {slices} slices (+{slack})");
            }
        };
        check(&ca, span(&|x| x));
        check(&cb, span(&|x| !x));
        check(&unit, span(&|_| true));
    }
}

/// A clock that moves on by one slice every time it is read, so that every
/// reservation sees a later time than the one before it read: the schedule of
/// threads that read the clock, then wait for the lock, then book.
#[derive(Debug, Default)]
struct Racing(std::sync::atomic::AtomicU64);

impl Clock for Racing {
    fn now(&self) -> Nanos {
        self.0
            .fetch_add(1_000_000, std::sync::atomic::Ordering::SeqCst)
    }
}

#[test]
fn reservations_from_racing_threads_never_fall_behind_the_window() {
    let s = Arc::new(
        Scheduler::new(
            SchedConfig::default(),
            Some(linear(100_000.0, 100.0)),
            Arc::new(Racing::default()),
        )
        .unwrap(),
    );
    let gates: Vec<_> = (0..4)
        .map(|i| {
            s.add_tenant(
                &format!("t{i}"),
                tenant(Some(linear(50_000.0, 50.0)), 1, false),
            )
            .unwrap()
        })
        .collect();
    std::thread::scope(|sc| {
        for g in &gates {
            sc.spawn(move || {
                for i in 0..2000 {
                    let dir = if i % 10 == 0 { Dir::Write } else { Dir::Read };
                    assert!(g.reserve(dir, K).is_ok());
                }
            });
        }
    });
    let total: u64 = s.report().iter().map(|r| r.stats.pieces).sum();
    assert_eq!(total, 8000);
}

#[test]
fn new_terms_let_a_waiting_booking_be_given_back_and_asked_again() {
    let (clock, s) = sched(None);
    // 10 writes of 4 KiB a second (no reads): the second 64 KiB piece waits.
    let g = s
        .add_tenant("t", tenant(Some(linear(0.0001, 10.0)), 1, false))
        .unwrap();
    at(&g, Dir::Write, 16 * K);
    let later = at(&g, Dir::Write, 16 * K);
    assert!(later >= SEC, "booked {later} ns ahead");
    let terms = g.terms();
    // A relaxed curve: new terms; the waiting booking is given back, and
    // asked again it runs at once, not after the old slot.
    s.set_tenant("t", tenant(Some(linear(0.0001, 100_000.0)), 1, false))
        .unwrap();
    assert_ne!(g.terms(), terms);
    g.cancel(Dir::Write, 16 * K, later);
    assert_eq!(at(&g, Dir::Write, 16 * K), clock.now());
    // Cleared: new terms again, and nothing waits.
    let terms = g.terms();
    s.set_tenant("t", tenant(None, 1, false)).unwrap();
    assert_ne!(g.terms(), terms);
    assert_eq!(at(&g, Dir::Write, 16 * K), clock.now());
}

#[test]
fn terms_change_only_for_the_tenant_whose_curve_changed() {
    let (_, s) = sched(None);
    let a = s
        .add_tenant("a", tenant(Some(linear(100.0, 10.0)), 1, false))
        .unwrap();
    let b = s
        .add_tenant("b", tenant(Some(linear(100.0, 10.0)), 1, false))
        .unwrap();
    let (ta, tb) = (a.terms(), b.terms());
    // Another tenant's change leaves a's waiters where they are.
    s.set_tenant("b", tenant(None, 1, false)).unwrap();
    assert_eq!(a.terms(), ta);
    assert_ne!(b.terms(), tb);
    // The unit's curve is everybody's terms.
    let tb = b.terms();
    s.set_unit_curve(Some(linear(1000.0, 100.0)));
    assert!(a.terms() != ta && b.terms() != tb);
    // A removed tenant's waiters ask again and are refused.
    s.remove_tenant("a").unwrap();
    assert_eq!(a.terms(), u64::MAX);
    assert!(a.reserve(Dir::Read, K).is_err());
}

//! Group commit: how a vSSD makes its own writes durable.
//!
//! Why: `FLUSH` and FUA used to `msync` the whole device (every tenant's dirty
//! pages, both mappings), so a tenant's commit paid for its neighbours'
//! writes. Now every page a vSSD programs and every block it erases is
//! recorded in its [`DirtySet`] (under the vSSD's lock, as part of the
//! write), and a sync writes back exactly that set with
//! [`FlashDevice::sync_dirty`](flash::FlashDevice::sync_dirty), with no lock
//! held.
//!
//! Concurrent flushes run their syncs concurrently, each on the pages dirty
//! at its call, and the kernel shares the expensive part among them (the
//! file system's journal commit and the disk's cache flush: fsyncs waiting
//! on the same commit are answered together). An earlier version let one
//! sync run at a time and gathered the flushes that arrived meanwhile for the
//! next; with four committers at queue depth 1 it measured 0.35x of the
//! whole-device `msync` it replaced (`scripts/bench-flush.sh`), because each
//! sync then covered about one and a half flushes while the kernel had
//! batched four.
//!
//! What makes it correct: a flush is numbered and takes the dirty set in one
//! step under the group's lock, so every write completed before the call is
//! in its own set or in the set of a lower-numbered sync; it then waits for
//! every lower-numbered sync still running. A failed sync gives its set back
//! (so a later sync retries it) and fails its own flush and every flush that
//! was waiting on it.

use std::collections::{BTreeSet, VecDeque};

use flash::DirtySet;
use parking_lot::{Condvar, Mutex};

/// Failures remembered for flushes still waiting on them (failures are
/// rare; a flush only looks at syncs that were running when it started).
const FAILURES_KEPT: usize = 64;

/// Sync numbering, what is running and recent failures.
#[derive(Debug, Default)]
struct State {
    /// Syncs started so far (the number of the latest one).
    started: u64,
    /// Numbers of the syncs still running.
    running: BTreeSet<u64>,
    /// Recent failed syncs: number and error.
    failed: VecDeque<(u64, String)>,
    /// Syncs that did any writing back (the set was not empty).
    syncs: u64,
}

/// The group-commit state of one vSSD (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct SyncGroup {
    state: Mutex<State>,
    done: Condvar,
}

impl SyncGroup {
    /// Makes every write completed before this call durable. `take` takes the
    /// vSSD's dirty set (called under the group's lock, so it must take only
    /// the vSSD's own lock), `sync` writes it back (called with no lock held;
    /// the vSSD's is [`flash::FlashDevice::sync_dirty`]) and `give_back`
    /// returns the set after a failure.
    pub(crate) fn flush(
        &self,
        take: impl Fn() -> DirtySet,
        sync: impl Fn(&DirtySet) -> Result<(), String>,
        give_back: impl Fn(DirtySet),
    ) -> Result<(), String> {
        let (n, set, before) = {
            let mut st = self.state.lock();
            st.started += 1;
            let n = st.started;
            let set = take();
            let before: Vec<u64> = st.running.iter().copied().collect();
            st.running.insert(n);
            (n, set, before)
        };
        let empty = set.is_empty();
        let r = if empty { Ok(()) } else { sync(&set) };
        if r.is_err() {
            give_back(set);
        }
        let mut st = self.state.lock();
        st.running.remove(&n);
        st.syncs += u64::from(!empty);
        if let Err(e) = &r {
            if st.failed.len() == FAILURES_KEPT {
                st.failed.pop_front();
            }
            st.failed.push_back((n, e.clone()));
        }
        self.done.notify_all();
        r?;
        // The lower-numbered syncs that were running hold writes this caller
        // may depend on: wait for them, and fail if one of them failed.
        while st.running.first().is_some_and(|&m| m < n) {
            self.done.wait(&mut st);
        }
        match st.failed.iter().find(|(m, _)| before.contains(m)) {
            Some((m, e)) => Err(format!(
                "an earlier sync (#{m}) this flush depends on failed: {e}"
            )),
            None => Ok(()),
        }
    }

    /// Syncs that wrote something back, since the vSSD was opened.
    pub(crate) fn syncs(&self) -> u64 {
        self.state.lock().syncs
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flash::Geometry;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    fn geo() -> Geometry {
        Geometry {
            channels: 1,
            dies_per_channel: 1,
            planes_per_die: 1,
            blocks_per_plane: 64,
            pages_per_block: 64,
            page_size: 4096,
        }
    }

    fn one_page() -> DirtySet {
        let mut s = DirtySet::new();
        s.programmed(&geo(), 0);
        s
    }

    /// Eight threads write pages and flush: every page a thread wrote is in
    /// a finished sync when its flush returns, and syncs overlap (so the
    /// kernel can share a journal commit among them).
    #[test]
    fn concurrent_flushes_cover_every_completed_write_and_overlap() {
        let g = Arc::new(SyncGroup::default());
        let next = Arc::new(AtomicU64::new(0));
        let dirty = Arc::new(Mutex::new(DirtySet::new()));
        let durable = Arc::new(Mutex::new(Vec::<DirtySet>::new()));
        let (now, most) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let ran = Arc::new(AtomicU64::new(0));
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let (g, next, dirty, durable) =
                    (g.clone(), next.clone(), dirty.clone(), durable.clone());
                let (now, most, ran) = (now.clone(), most.clone(), ran.clone());
                std::thread::spawn(move || {
                    let mut mine = Vec::new();
                    for _ in 0..40 {
                        let p = next.fetch_add(1, Ordering::SeqCst);
                        dirty.lock().programmed(&geo(), p);
                        mine.push(p);
                        g.flush(
                            || std::mem::take(&mut *dirty.lock()),
                            |set| {
                                ran.fetch_add(1, Ordering::SeqCst);
                                let k = now.fetch_add(1, Ordering::SeqCst) + 1;
                                most.fetch_max(k, Ordering::SeqCst);
                                std::thread::sleep(Duration::from_micros(300));
                                durable.lock().push(set.clone());
                                now.fetch_sub(1, Ordering::SeqCst);
                                Ok(())
                            },
                            |_| panic!("no failure"),
                        )
                        .unwrap();
                        let d = durable.lock();
                        for &q in &mine {
                            assert!(
                                d.iter().any(|s| s.covers(&geo(), q)),
                                "page {q} written before the flush is not durable after it"
                            );
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert!(most.load(Ordering::SeqCst) > 1, "syncs never overlapped");
        // The counter counts exactly the syncs that wrote something back.
        assert_eq!(g.syncs(), ran.load(Ordering::SeqCst));
    }

    /// A failed sync fails its caller and gives its set back; the next one
    /// succeeds; an empty set is no sync at all.
    #[test]
    fn a_failed_sync_fails_and_returns_its_set() {
        let g = SyncGroup::default();
        let back = std::cell::RefCell::new(None);
        let r = g.flush(
            one_page,
            |_| Err("disk on fire".into()),
            |s| *back.borrow_mut() = Some(s),
        );
        assert_eq!(r, Err("disk on fire".to_string()));
        assert_eq!(back.borrow().as_ref(), Some(&one_page()));
        assert!(g
            .flush(one_page, |_| Ok(()), |_| panic!("no failure"))
            .is_ok());
        assert!(g
            .flush(DirtySet::new, |_| panic!("nothing to sync"), |_| {})
            .is_ok());
        assert_eq!(g.syncs(), 2);
    }

    /// A flush that starts while an earlier sync runs waits for it, and
    /// fails if it fails (that sync held writes the later flush depends on),
    /// even though its own sync succeeded.
    #[test]
    fn a_flush_fails_with_the_earlier_sync_it_depends_on() {
        let g = Arc::new(SyncGroup::default());
        let (started_tx, started_rx) = std::sync::mpsc::channel::<()>();
        let (fail_tx, fail_rx) = std::sync::mpsc::channel::<()>();
        let first = {
            let g = g.clone();
            std::thread::spawn(move || {
                g.flush(
                    one_page,
                    |_| {
                        started_tx.send(()).unwrap();
                        fail_rx.recv().unwrap();
                        Err("disk on fire".into())
                    },
                    |_| {},
                )
            })
        };
        started_rx.recv().unwrap();
        let second = {
            let g = g.clone();
            std::thread::spawn(move || g.flush(one_page, |_| Ok(()), |_| {}))
        };
        std::thread::sleep(Duration::from_millis(50));
        assert!(
            !second.is_finished(),
            "returned before the earlier sync ended"
        );
        fail_tx.send(()).unwrap();
        assert!(first.join().unwrap().is_err());
        let e = second.join().unwrap().unwrap_err();
        assert!(
            e.contains("disk on fire") && e.contains("earlier sync"),
            "{e}"
        );
        // Later flushes do not depend on it any more.
        assert!(g.flush(one_page, |_| Ok(()), |_| {}).is_ok());
    }
}

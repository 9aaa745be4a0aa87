//! Group commit: how a vSSD makes its own writes durable.
//!
//! Why: `FLUSH` and FUA used to `msync` the whole device (every tenant's dirty
//! pages, both mappings), one flush at a time, so a tenant's commit paid for
//! its neighbours' writes and concurrent commits queued behind each other.
//! Now every page a vSSD programs and every block it erases is recorded in its
//! [`DirtySet`] (under the vSSD's lock, as part of the write), and a sync
//! writes back exactly that set with [`FlashDevice::sync_dirty`], with no lock
//! held.
//!
//! Concurrent flushes share syncs. A flush needs a sync that *starts* after it
//! was called (that sync's set then holds every write completed before the
//! call). Syncs are numbered: a caller's target is one past the last started;
//! if none is running it leads (takes the set and syncs it), otherwise it
//! waits, and the next leader's sync covers it and everyone else who arrived
//! meanwhile: while one sync runs, any number of flushes gather for the next.
//! A failed sync gives its set back (so a later one retries it) and fails the
//! flushes waiting for it.

use flash::DirtySet;
use parking_lot::{Condvar, Mutex};

/// Sync numbering and the result of the last failure.
#[derive(Debug, Default)]
struct State {
    /// Syncs started so far (the number of the latest one).
    started: u64,
    /// Syncs finished so far (numbers up to this one are done).
    finished: u64,
    /// A sync is running.
    running: bool,
    /// Number and error of the latest failed sync.
    failed: Option<(u64, String)>,
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
    /// vSSD's dirty set (under its lock), `sync` writes it back (called with
    /// no lock held; the vSSD's is [`flash::FlashDevice::sync_dirty`]) and
    /// `give_back` returns the set after a failure.
    pub(crate) fn flush(
        &self,
        take: impl Fn() -> DirtySet,
        sync: impl Fn(&DirtySet) -> Result<(), String>,
        give_back: impl Fn(DirtySet),
    ) -> Result<(), String> {
        let mut st = self.state.lock();
        let target = st.started + 1;
        loop {
            if st.finished >= target {
                return match &st.failed {
                    Some((n, e)) if *n >= target => Err(e.clone()),
                    _ => Ok(()),
                };
            }
            if st.running {
                self.done.wait(&mut st);
                continue;
            }
            st.running = true;
            st.started += 1;
            let n = st.started;
            drop(st);
            let set = take();
            let empty = set.is_empty();
            let r = if empty { Ok(()) } else { sync(&set) };
            if r.is_err() {
                give_back(set);
            }
            st = self.state.lock();
            st.running = false;
            st.finished = n;
            st.syncs += u64::from(!empty);
            if let Err(e) = r {
                st.failed = Some((n, e));
            }
            self.done.notify_all();
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

    fn geo() -> Geometry {
        Geometry {
            channels: 1,
            dies_per_channel: 1,
            planes_per_die: 1,
            blocks_per_plane: 4,
            pages_per_block: 4,
            page_size: 4096,
        }
    }

    fn one_page() -> DirtySet {
        let mut s = DirtySet::new();
        s.programmed(&geo(), 0);
        s
    }

    /// Many concurrent flushes share syncs: fewer syncs than callers, and each
    /// caller returns only after a sync that started after its call.
    #[test]
    fn concurrent_flushes_share_syncs() {
        let g = Arc::new(SyncGroup::default());
        let syncs = Arc::new(AtomicU64::new(0));
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let (g, syncs) = (g.clone(), syncs.clone());
                std::thread::spawn(move || {
                    for _ in 0..50 {
                        let called = syncs.load(Ordering::SeqCst);
                        let started = std::cell::Cell::new(0);
                        g.flush(
                            one_page,
                            |_| {
                                syncs.fetch_add(1, Ordering::SeqCst);
                                // Others gather while this one runs.
                                std::thread::sleep(std::time::Duration::from_micros(300));
                                Ok(())
                            },
                            |_| panic!("no failure"),
                        )
                        .unwrap();
                        started.set(syncs.load(Ordering::SeqCst));
                        assert!(
                            started.get() > called,
                            "returned without a sync after the call"
                        );
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let n = syncs.load(Ordering::SeqCst);
        assert!(n < 400, "{n} syncs for 400 flushes: none shared");
        assert_eq!(g.syncs(), n);
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
}

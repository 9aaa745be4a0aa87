//! Precise reply pacing for emulation mode.
//!
//! A modelled 4 KiB read completes in about 50 µs, but tokio's timer wheel has
//! millisecond resolution: sleeping on it turned every paced reply into a ≥1 ms
//! one (measured with `scripts/exp-isolation.sh`: p50 1.1 ms for a 50 µs read). A
//! [`Pacer`] is one thread per paced connection that keeps the pending deadlines
//! in a heap and sleeps on a condition variable with the thread's timer slack set
//! to 1 ns, so replies leave within a few microseconds of their modelled time.

use std::collections::BinaryHeap;
use std::sync::Arc;
use std::time::Duration;

use blockdev::Nanos;
use clock::Clock;
use parking_lot::{Condvar, Mutex};

/// Longest single sleep of the pacer thread.
const MAX_SLEEP: Duration = Duration::from_millis(5);

struct Entry {
    at: Nanos,
    seq: u64,
    job: Box<dyn FnOnce() + Send>,
}

impl PartialEq for Entry {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Entry {
    // Min-heap on (deadline, arrival).
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (o.at, o.seq).cmp(&(self.at, self.seq))
    }
}

#[derive(Default)]
struct State {
    heap: BinaryHeap<Entry>,
    seq: u64,
    closed: bool,
}

struct Shared {
    clock: Arc<dyn Clock>,
    state: Mutex<State>,
    cv: Condvar,
}

/// Runs jobs at their deadlines on `clock`, with microsecond precision.
pub(crate) struct Pacer {
    shared: Arc<Shared>,
}

impl Pacer {
    /// Starts the pacing thread.
    pub(crate) fn new(clock: Arc<dyn Clock>) -> std::io::Result<Pacer> {
        let shared = Arc::new(Shared {
            clock,
            state: Mutex::new(State::default()),
            cv: Condvar::new(),
        });
        let s = shared.clone();
        std::thread::Builder::new()
            .name("nbd-pacer".into())
            .spawn(move || run(s))?;
        Ok(Pacer { shared })
    }

    /// Runs `job` on the pacer thread once the clock reaches `at` (at once if it has).
    /// Jobs must be short: they only hand a reply to the writer.
    pub(crate) fn schedule(&self, at: Nanos, job: impl FnOnce() + Send + 'static) {
        let mut st = self.shared.state.lock();
        st.seq += 1;
        let seq = st.seq;
        let earliest = st.heap.peek().is_none_or(|e| at < e.at);
        st.heap.push(Entry {
            at,
            seq,
            job: Box::new(job),
        });
        if earliest {
            self.shared.cv.notify_one();
        }
    }
}

impl Drop for Pacer {
    fn drop(&mut self) {
        self.shared.state.lock().closed = true;
        self.shared.cv.notify_one();
    }
}

fn run(s: Arc<Shared>) {
    #[cfg(target_os = "linux")]
    // SAFETY: prctl on the calling thread only; 1 ns slack makes timed waits precise.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1, 0, 0, 0);
    }
    let mut st = s.state.lock();
    loop {
        let now = s.clock.now();
        let mut due = Vec::new();
        while st.heap.peek().is_some_and(|e| e.at <= now) {
            due.push(st.heap.pop().expect("peeked").job);
        }
        if !due.is_empty() {
            drop(st);
            for job in due {
                job();
            }
            st = s.state.lock();
            continue;
        }
        if st.closed {
            // The connection is going away: send what is left without waiting.
            let rest: Vec<_> = st.heap.drain().map(|e| e.job).collect();
            drop(st);
            for job in rest {
                job();
            }
            return;
        }
        match st.heap.peek() {
            Some(e) => {
                let wait = Duration::from_nanos(e.at.saturating_sub(now));
                // Capped, so that a clock that jumps (a virtual clock) is re-read soon.
                s.cv.wait_for(&mut st, wait.min(MAX_SLEEP));
            }
            None => s.cv.wait(&mut st),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clock::MonotonicClock;

    /// Schedules 50 jobs in reverse deadline order; returns their lateness (ns),
    /// after checking that none ran early and, when all 50 were scheduled before
    /// the first deadline, that they ran in deadline order. (On a loaded machine
    /// the scheduling itself can outlast the first deadlines; then a due job
    /// rightly runs before a job of an earlier deadline that did not exist yet.)
    fn run_batch(p: &Pacer, clock: &Arc<dyn Clock>) -> (Vec<u64>, bool) {
        let (tx, rx) = std::sync::mpsc::channel();
        let base = clock.now();
        let first = base + 2_000_000;
        for i in 0..50u64 {
            let at = first + (49 - i) * 20_000;
            let (tx, c) = (tx.clone(), clock.clone());
            p.schedule(at, move || tx.send((at, c.now())).unwrap());
        }
        let in_time = clock.now() < first;
        let got: Vec<(u64, u64)> = (0..50)
            .map(|_| rx.recv_timeout(Duration::from_secs(10)).unwrap())
            .collect();
        assert!(
            !in_time || got.windows(2).all(|w| w[0].0 <= w[1].0),
            "jobs ran out of deadline order"
        );
        assert!(got.iter().all(|&(at, ran)| ran >= at), "a job ran early");
        let mut late: Vec<u64> = got.iter().map(|&(at, ran)| ran - at).collect();
        late.sort_unstable();
        (late, in_time)
    }

    #[test]
    fn runs_jobs_in_deadline_order_close_to_the_deadline() {
        let clock: Arc<dyn Clock> = Arc::new(MonotonicClock::new());
        let p = Pacer::new(clock.clone()).unwrap();
        // Timing on a loaded 2-core CI machine is noisy: one quiet batch out of a
        // few (scheduled in time, so its order is checked) is enough to show
        // sub-millisecond precision (tokio's timer would be about 1 ms late every
        // time). Never-early holds for every batch.
        let mut seen = Vec::new();
        for _ in 0..10 {
            let (late, in_time) = run_batch(&p, &clock);
            if in_time && late[25] < 500_000 {
                return;
            }
            seen.push((late[25], in_time));
        }
        panic!("no batch scheduled in time with a median lateness under 500 us: {seen:?}");
    }

    #[test]
    fn follows_a_virtual_clock() {
        let clock = Arc::new(clock::VirtualClock::new(0));
        let p = Pacer::new(clock.clone()).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        p.schedule(20_000_000, move || tx.send(()).unwrap());
        assert!(
            rx.recv_timeout(Duration::from_millis(100)).is_err(),
            "ran before the virtual clock reached its time"
        );
        clock.advance(20_000_000);
        rx.recv_timeout(Duration::from_secs(5)).unwrap();
    }
}

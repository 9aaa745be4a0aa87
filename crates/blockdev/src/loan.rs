//! Bytes a device lends to a read reply instead of copying them out.
//!
//! A large read used to copy its data twice: out of the flash's memory mapping
//! into a reply buffer, then into the socket (the kernel's copy, or TLS's
//! encryption). A [`Loan`] hands the mapping itself to the NBD writer, so the
//! first copy goes (`BENCHMARKS.md`: it was 16% of the daemon's CPU under
//! 128 KiB reads).
//!
//! The lender must be able to change its bytes while a reply is still queued:
//! a flash block is erased by GC, by a reclaim or when its vSSD goes, and a
//! client may stop reading for as long as it likes. So every loan can be
//! *recalled*: before it changes the bytes, the lender calls [`Recall::recall`],
//! which copies them into the loan; the borrower reads that copy from then on.
//! The borrower holds the loan's lock only while it reads the bytes (one
//! non-blocking socket write, or one TLS record), never while it waits for a
//! client, so a recall waits for at most that. A recall costs the copy the
//! loan saved, and only for the loans still out on the block it changes.

use std::ops::Deref;
use std::sync::{Arc, Weak};

use parking_lot::{Mutex, MutexGuard};

/// Zeros lent for ranges that hold no data (never written, or trimmed).
static ZEROS: [u8; ZEROS_LEN] = [0; ZEROS_LEN];
/// Longest loan of zeros ([`Loan::zeros`]).
pub const ZEROS_LEN: usize = 64 * 1024;

struct Cell {
    ptr: *const u8,
    len: usize,
    /// `Some` once recalled: the bytes as they were, owned by the loan.
    copy: Mutex<Option<Box<[u8]>>>,
    /// Keeps the lender's memory mapped while the loan is out.
    _keep: Option<Arc<dyn Send + Sync>>,
}

// SAFETY: `ptr` is only read, and only while `copy`'s lock is held and before
// a recall (the contract of `Loan::new`); every other field is Send + Sync.
unsafe impl Send for Cell {}
// SAFETY: as for Send: shared access only reads, under the lock.
unsafe impl Sync for Cell {}

/// Bytes of a device lent to a reader (see the module docs). Cheap to move;
/// dropping it ends the loan.
pub struct Loan(Arc<Cell>);

/// The lender's handle on a [`Loan`]: recalls it before the bytes change.
pub struct Recall(Weak<Cell>);

/// The lent bytes, readable while this guard lives (it holds the loan's lock:
/// keep it for one write, not across a wait).
pub struct LoanBytes<'a> {
    cell: &'a Cell,
    copy: MutexGuard<'a, Option<Box<[u8]>>>,
}

impl Loan {
    /// Lends `len` bytes at `ptr`, kept mapped by `keep`.
    ///
    /// # Safety
    ///
    /// `ptr .. ptr + len` must be readable, and must not change, for as long
    /// as `keep` (or the memory's owner) lives, until the lender has called
    /// [`Recall::recall`] on the returned handle (which returns once the
    /// bytes are copied, and after which they are never read again). A lender
    /// that changes the bytes must recall first, under whatever lock orders
    /// its own readers and writers.
    pub unsafe fn new(ptr: *const u8, len: usize, keep: Arc<dyn Send + Sync>) -> (Loan, Recall) {
        let cell = Arc::new(Cell {
            ptr,
            len,
            copy: Mutex::new(None),
            _keep: Some(keep),
        });
        let recall = Recall(Arc::downgrade(&cell));
        (Loan(cell), recall)
    }

    /// `len` zero bytes (at most [`ZEROS_LEN`]), never recalled: the read of
    /// a hole.
    pub fn zeros(len: usize) -> Loan {
        assert!(
            len <= ZEROS_LEN,
            "a loan of zeros is at most {ZEROS_LEN} bytes"
        );
        Loan(Arc::new(Cell {
            ptr: ZEROS.as_ptr(),
            len,
            copy: Mutex::new(None),
            _keep: None,
        }))
    }

    /// Appends `n` zero bytes to `loans`, in loans of at most [`ZEROS_LEN`]:
    /// a hole of any length.
    pub fn push_zeros(loans: &mut Vec<Loan>, mut n: usize) {
        while n > 0 {
            let k = n.min(ZEROS_LEN);
            loans.push(Loan::zeros(k));
            n -= k;
        }
    }

    /// A loan of bytes the borrower owns already (a device that cannot lend
    /// part of a read).
    pub fn owned(bytes: Box<[u8]>) -> Loan {
        Loan(Arc::new(Cell {
            ptr: bytes.as_ptr(),
            len: bytes.len(),
            copy: Mutex::new(Some(bytes)),
            _keep: None,
        }))
    }

    /// How many bytes are lent.
    pub fn len(&self) -> usize {
        self.0.len
    }

    /// Whether no byte is lent.
    pub fn is_empty(&self) -> bool {
        self.0.len == 0
    }

    /// Locks the loan and returns its bytes: the lender's, or the copy a
    /// recall made.
    pub fn bytes(&self) -> LoanBytes<'_> {
        LoanBytes {
            cell: &self.0,
            copy: self.0.copy.lock(),
        }
    }

    /// Whether the lender took its bytes back (they are a copy now).
    pub fn recalled(&self) -> bool {
        self.0.copy.lock().is_some()
    }
}

impl std::fmt::Debug for Loan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Loan")
            .field("len", &self.0.len)
            .field("recalled", &self.recalled())
            .finish()
    }
}

impl Deref for LoanBytes<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match &*self.copy {
            Some(b) => b,
            // SAFETY: not recalled, and we hold the lock a recall takes
            // before the lender may change the bytes (`Loan::new`).
            None => unsafe { std::slice::from_raw_parts(self.cell.ptr, self.cell.len) },
        }
    }
}

impl Recall {
    /// Whether the loan is still out (its borrower has not dropped it).
    pub fn is_out(&self) -> bool {
        self.0.strong_count() > 0
    }

    /// Copies the lent bytes into the loan, if it is still out and not
    /// recalled yet, so that the lender may change them once this returns.
    /// Waits for a borrower reading them (one write). Returns whether the
    /// loan was still out.
    pub fn recall(&self) -> bool {
        let Some(cell) = self.0.upgrade() else {
            return false;
        };
        let mut copy = cell.copy.lock();
        if copy.is_none() {
            // SAFETY: not recalled yet, so the bytes are still the lender's
            // and unchanged (`Loan::new`).
            let b = unsafe { std::slice::from_raw_parts(cell.ptr, cell.len) };
            *copy = Some(b.into());
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lend(v: &Arc<Vec<u8>>, range: std::ops::Range<usize>) -> (Loan, Recall) {
        let keep: Arc<dyn Send + Sync> = v.clone();
        // SAFETY: the test changes no byte of `v`.
        unsafe { Loan::new(v[range.clone()].as_ptr(), range.len(), keep) }
    }

    #[test]
    fn a_loan_reads_the_lenders_bytes_until_recalled_then_its_copy() {
        let mut v = [7u8; 16];
        let (loan, recall) = {
            let keep: Arc<dyn Send + Sync> = Arc::new(());
            // SAFETY: the bytes change only after the recall below.
            unsafe { Loan::new(v.as_ptr(), 8, keep) }
        };
        assert_eq!(&*loan.bytes(), &[7u8; 8]);
        assert!(!loan.recalled());
        assert!(recall.recall());
        // The lender changes its bytes; the loan keeps the old ones.
        v.iter_mut().for_each(|b| *b = 9);
        assert!(loan.recalled());
        assert_eq!(&*loan.bytes(), &[7u8; 8]);
        assert_eq!(v[0], 9);
    }

    #[test]
    fn a_dropped_loan_is_not_out_and_its_recall_does_nothing() {
        let v = Arc::new(vec![1u8; 32]);
        let (loan, recall) = lend(&v, 4..12);
        assert!(recall.is_out());
        assert_eq!(loan.len(), 8);
        drop(loan);
        assert!(!recall.is_out());
        assert!(!recall.recall());
    }

    #[test]
    fn a_loan_keeps_its_memory_alive() {
        let v = Arc::new((0..64u8).collect::<Vec<_>>());
        let (loan, _recall) = lend(&v, 10..20);
        drop(v);
        assert_eq!(&*loan.bytes(), &(10..20u8).collect::<Vec<_>>()[..]);
    }

    #[test]
    fn zeros_and_owned_loans() {
        let z = Loan::zeros(ZEROS_LEN);
        assert!(z.bytes().iter().all(|&b| b == 0));
        assert_eq!(z.len(), ZEROS_LEN);
        let o = Loan::owned(vec![3u8; 5].into_boxed_slice());
        assert_eq!(&*o.bytes(), &[3u8; 5]);
        assert!(Loan::zeros(0).is_empty());
        let mut v = Vec::new();
        Loan::push_zeros(&mut v, 2 * ZEROS_LEN + 5);
        assert_eq!(
            v.iter().map(Loan::len).collect::<Vec<_>>(),
            [ZEROS_LEN, ZEROS_LEN, 5]
        );
    }

    #[test]
    fn a_recall_waits_for_a_reader_holding_the_bytes() {
        let v = Arc::new(vec![5u8; 4096]);
        let (loan, recall) = lend(&v, 0..4096);
        let held = loan.bytes();
        let t = std::thread::spawn(move || recall.recall());
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert!(!t.is_finished(), "the recall waits for the reader's lock");
        assert_eq!(held[4095], 5);
        drop(held);
        assert!(t.join().unwrap());
        assert!(loan.recalled());
    }
}

//! The transmission phase of one connection: a reader that decodes and executes
//! requests, and a writer task that sends the replies in batches. Both run on
//! the connection's own thread and single-threaded runtime (see the crate
//! docs), so handing a batch from one to the other wakes no other thread.
//!
//! # Data flow
//!
//! The reader owns the read half and an [`InBuf`]. For every request it calls the
//! device synchronously (device calls are fast, in-memory model updates) and encodes
//! the reply straight into the shared output buffer ([`OutBuf`]): a small read's
//! data is read by the device directly into its place in that buffer, behind the
//! reply header, so it costs no allocation and no copy besides the device's own.
//! A large read (see [`LARGE_READ`]) from a device that lends its memory
//! ([`BlockDev::read_lent`]: a vSSD lends its flash mapping) is queued as the
//! device's [`Loan`]s and sent from the device's own bytes, with no copy before
//! the socket's ([`write_parts`]); the device recalls a loan (copies its bytes
//! into it) before it erases them, so a client that stops reading delays no
//! erase. From other devices, or when the reply waits for its modelled time,
//! a large read is read outside the buffer's lock into a buffer of its own,
//! which is then *attached* to the queue (moved, not copied) and sent from
//! there with a vectored write; the writer hands the buffer back for the next
//! large read.
//!
//! The writer task owns the write half. It swaps the filled output buffer for its
//! empty spare one (double buffering) under the lock, and writes the whole batch
//! with one `write_all`. The reader wakes the writer only when it is about to wait
//! for more input (or when the batch is already large), so a burst of requests
//! that arrived in one socket read is answered with one socket write.
//!
//! # Flushes and FUA
//!
//! A sync can take milliseconds, so it does not run on the reader: a `FLUSH`,
//! or the sync after a FUA write, trim or write-zeroes (whose data the reader
//! has already written), runs on a blocking thread, and its reply is queued
//! when it finishes. The reader meanwhile goes on reading and executing
//! requests. The protocol's order is kept: a write is executed before the
//! reader takes the next request, so every write completed before a `FLUSH`
//! arrived is in what that flush syncs; and the device shares one sync among
//! concurrent flushes (the FTL's group commit). Pending syncs hold the same
//! byte budget as paced replies, so a connection ends only after their replies
//! are queued.
//!
//! # A device that panics
//!
//! Every device call runs inside [`contained`]: a panic in it (a bug in a
//! layer below) fails that one request with `EIO` and is logged, instead of
//! unwinding through a half-encoded reply and killing the connection with
//! garbage on the wire. The client sees a clean error for the request, and its
//! other requests, and other connections, go on.
//!
//! # Emulation mode
//!
//! With a pacing clock, the device is still called at once, but a reply whose
//! modelled completion time is in the future is handed to the connection's
//! [`Pacer`], which appends it to the output buffer when the clock gets there;
//! replies thus leave out of order, matched by their cookies, and a slow request
//! never holds up a fast one. A per-connection byte budget (a semaphore) bounds
//! what the pacer may hold.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use blockdev::{Admit, BlockDev, Dir, Gate, IoError, IoResult, Loan, LoanBytes, Nanos};
use clock::Clock;

use crate::pacer::Pacer;
use parking_lot::Mutex;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::{watch, Notify, Semaphore, TryAcquireError};

use crate::handshake::Negotiated;
use crate::inbuf::InBuf;
use crate::proto::{self, Decision, Limits};
use crate::NbdError;

/// A look for the next request that took longer than this (ns) means
/// another thread ran on the CPU during its yield: the spin stops (see
/// [`Conn::spin`]). A look alone takes one to a few microseconds.
const SPIN_LOOK_MAX: Nanos = 20_000;
/// Initial size of each of the two output buffers.
const OUT_INITIAL: usize = 256 * 1024;
/// Wake the writer at once when this much is queued, rather than waiting until
/// the reader runs out of input.
const KICK_AT: usize = 64 * 1024;
/// The reader stops decoding requests while this much output is queued.
const HIGH_WATER: usize = 512 * 1024;
/// An output buffer that grew past this (huge reads) is freed after use.
const OUT_SHRINK_ABOVE: usize = 8 * 1024 * 1024;
/// A write-payload buffer that grew past this is freed after use.
const WBUF_KEEP: usize = 4 * 1024 * 1024;
/// Reads at least this large are read outside the output queue's lock, into a
/// buffer of their own, which is attached to the queue: a device read under that
/// lock keeps the writer from sending the replies already queued, and copying
/// the data in would cost a second copy of every byte.
const LARGE_READ: usize = 32 * 1024;
/// Reply bytes charged per deferred reply, besides its data.
const DEFERRED_OVERHEAD: u32 = 256;
/// How long a finished connection waits for its last replies to be written.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// An output buffer that stays initialised: `data[..used]` is queued output, and
/// the rest is scratch space, so appending a read reply never zero-fills. Large
/// read payloads are not copied in: they are *attached* (moved, with the
/// position in `data` they follow) and the writer sends them from where the
/// device read them, with one vectored write on a socket.
pub(crate) struct OutBuf {
    data: Vec<u8>,
    used: usize,
    /// Attached payloads, in order: each goes out after `data[..at]`.
    attached: Vec<Attached>,
    attached_bytes: usize,
}

/// A read payload queued by ownership (see [`OutBuf`]).
struct Attached {
    at: usize,
    payload: Payload,
}

/// What an attached payload is.
enum Payload {
    /// `buf[..len]`, read by the device into a buffer of the connection's.
    Owned { buf: Vec<u8>, len: usize },
    /// The device's own memory, lent ([`BlockDev::read_lent`]): sent with
    /// no copy out of the device ([`write_parts`]).
    Lent(Vec<Loan>),
}

impl Payload {
    fn len(&self) -> usize {
        match self {
            Payload::Owned { len, .. } => *len,
            Payload::Lent(loans) => loans.iter().map(Loan::len).sum(),
        }
    }
}

/// One part of the queued output, in order (see [`OutBuf::parts`]).
enum Part<'a> {
    Bytes(&'a [u8]),
    Lent(&'a Loan),
}

impl Part<'_> {
    fn len(&self) -> usize {
        match self {
            Part::Bytes(b) => b.len(),
            Part::Lent(l) => l.len(),
        }
    }
}

impl OutBuf {
    fn new(cap: usize) -> Self {
        Self {
            data: vec![0u8; cap],
            used: 0,
            attached: Vec::new(),
            attached_bytes: 0,
        }
    }

    /// Appends `n` bytes and returns them for the caller to fill.
    fn slot(&mut self, n: usize) -> &mut [u8] {
        let start = self.used;
        let end = start + n;
        if self.data.len() < end {
            let grown = end.max(self.data.len() * 2);
            self.data.resize(grown, 0);
        }
        self.used = end;
        &mut self.data[start..end]
    }

    fn push(&mut self, b: &[u8]) {
        self.slot(b.len()).copy_from_slice(b);
    }

    /// Queues `payload` after what is queued now: an owned buffer moved in,
    /// or the device's loans.
    fn attach_payload(&mut self, payload: Payload) {
        self.attached_bytes += payload.len();
        if let Payload::Owned { buf, len } = &payload {
            debug_assert!(*len <= buf.len());
        }
        self.attached.push(Attached {
            at: self.used,
            payload,
        });
    }

    /// Bytes queued, attached payloads included.
    fn queued(&self) -> usize {
        self.used + self.attached_bytes
    }

    /// The queued output in order, loans included, empty parts left out.
    fn parts(&self) -> Vec<Part<'_>> {
        let mut out = Vec::with_capacity(2 * self.attached.len() + 1);
        let mut pos = 0;
        for a in &self.attached {
            if a.at > pos {
                out.push(Part::Bytes(&self.data[pos..a.at]));
            }
            match &a.payload {
                Payload::Owned { buf, len } if *len > 0 => out.push(Part::Bytes(&buf[..*len])),
                Payload::Owned { .. } => {}
                Payload::Lent(loans) => {
                    out.extend(loans.iter().filter(|l| !l.is_empty()).map(Part::Lent))
                }
            }
            pos = a.at;
        }
        if self.used > pos {
            out.push(Part::Bytes(&self.data[pos..self.used]));
        }
        out
    }

    /// Empties the buffer (loans end); returns the attached payloads'
    /// buffers for reuse.
    fn clear(&mut self) -> impl Iterator<Item = Vec<u8>> + '_ {
        self.used = 0;
        self.attached_bytes = 0;
        self.attached.drain(..).filter_map(|a| match a.payload {
            Payload::Owned { buf, .. } => Some(buf),
            Payload::Lent(_) => None,
        })
    }
}

/// Most slices one vectored write takes (the kernel's `IOV_MAX` is 1,024).
const MAX_SLICES: usize = 1024;

/// Writes `out`'s parts in order: with vectored writes where the stream has
/// them (sockets), else a part at a time (TLS, whose records are cut by the
/// library). Each poll of the stream locks the loans ([`Payload::Lent`]) it
/// sends from and lets go of them
/// before it returns, so a lender recalling a loan (an erase of its block)
/// waits for at most one non-blocking write, never for the client to read.
/// After a recall the loan's copy goes out, the same bytes (a TLS stream
/// accepts its buffer moving between retries: the server's context sets
/// `SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER`, see `tls.rs`).
///
/// A stream without vectored writes is a TLS session, which makes a record
/// of each write: there, parts shorter than a record (reply headers, and
/// the single pages a vSSD striped page by page lends a read as) are first
/// gathered into records of [`RECORD`] bytes. Each record costs a cipher
/// setup and a tag on both sides; sent as they came, a 128 KiB read was 33
/// records instead of 9, and reads of pages scattered by random writes ran
/// at 0.65x of nbdkit over TLS (0.83x gathered; BENCHMARKS.md).
async fn write_parts<W: AsyncWrite + Unpin>(w: &mut W, out: &OutBuf) -> std::io::Result<()> {
    let parts = out.parts();
    if w.is_write_vectored() {
        return write_in_order(w, &parts, true).await;
    }
    let mut stage: Vec<u8> = Vec::with_capacity(RECORD);
    let mut i = 0;
    while i < parts.len() {
        // Parts from `i` on that are short: gathered; a long one: sent from
        // where it is.
        if parts[i].len() >= RECORD {
            let j = (i..parts.len())
                .find(|&j| parts[j].len() < RECORD)
                .unwrap_or(parts.len());
            write_in_order(w, &parts[i..j], false).await?;
            i = j;
            continue;
        }
        while i < parts.len() && parts[i].len() < RECORD {
            // Whole records: a part may straddle two.
            let mut from = 0;
            while from < parts[i].len() {
                let take = (RECORD - stage.len()).min(parts[i].len() - from);
                match &parts[i] {
                    Part::Bytes(b) => stage.extend_from_slice(&b[from..from + take]),
                    // The loan is held for the copy only.
                    Part::Lent(l) => stage.extend_from_slice(&l.bytes()[from..from + take]),
                }
                from += take;
                if stage.len() == RECORD {
                    w.write_all(&stage).await?;
                    stage.clear();
                }
            }
            i += 1;
        }
        if !stage.is_empty() {
            w.write_all(&stage).await?;
            stage.clear();
        }
    }
    Ok(())
}

/// The largest TLS record's payload (RFC 8446, 5.1): what [`write_parts`]
/// gathers short parts into.
const RECORD: usize = 16 * 1024;

/// Writes `parts` in order, each poll of the stream holding the loans it
/// sends from (see [`write_parts`]): with vectored writes, or a part at a
/// time.
async fn write_in_order<W: AsyncWrite + Unpin>(
    w: &mut W,
    parts: &[Part<'_>],
    vectored: bool,
) -> std::io::Result<()> {
    // The first part not wholly sent, and how much of it was.
    let (mut first, mut skip) = (0usize, 0usize);
    while first < parts.len() {
        let n = std::future::poll_fn(|cx| {
            let end = (first + if vectored { MAX_SLICES } else { 1 }).min(parts.len());
            let held: Vec<Option<LoanBytes<'_>>> = parts[first..end]
                .iter()
                .map(|p| match p {
                    Part::Lent(l) => Some(l.bytes()),
                    Part::Bytes(_) => None,
                })
                .collect();
            let slices: Vec<std::io::IoSlice<'_>> = parts[first..end]
                .iter()
                .zip(&held)
                .enumerate()
                .map(|(i, (p, h))| {
                    let b: &[u8] = match (p, h) {
                        (Part::Bytes(b), _) => b,
                        (Part::Lent(_), Some(g)) => g,
                        (Part::Lent(_), None) => unreachable!("every loan sent from is held"),
                    };
                    std::io::IoSlice::new(if i == 0 { &b[skip..] } else { b })
                })
                .collect();
            if vectored {
                std::pin::Pin::new(&mut *w).poll_write_vectored(cx, &slices)
            } else {
                std::pin::Pin::new(&mut *w).poll_write(cx, &slices[0])
            }
        })
        .await?;
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        skip += n;
        while first < parts.len() && skip >= parts[first].len() {
            skip -= parts[first].len();
            first += 1;
        }
    }
    Ok(())
}

/// Appends a reply that carries no data: a simple reply on success (allowed in
/// both modes), and on error a simple reply, or with structured replies an error
/// chunk with a message.
fn put_status(
    out: &mut OutBuf,
    structured: bool,
    cookie: u64,
    res: Result<(), (u32, Cow<'_, str>)>,
) {
    match res {
        Ok(()) => out.push(&proto::simple_reply(cookie, 0)),
        Err((errno, _)) if !structured => out.push(&proto::simple_reply(cookie, errno)),
        Err((errno, msg)) => {
            let n = proto::structured_error_len(&msg);
            proto::write_structured_error(out.slot(n), cookie, errno, &msg);
        }
    }
}

/// Header length in front of read data.
fn read_header_len(structured: bool) -> usize {
    if structured {
        proto::STRUCTURED_HEADER_LEN + 8
    } else {
        proto::SIMPLE_REPLY_LEN
    }
}

/// Writes the header of a successful read reply into `hdr`.
fn write_read_header(hdr: &mut [u8], structured: bool, cookie: u64, offset: u64, len: usize) {
    if structured {
        hdr[..proto::STRUCTURED_HEADER_LEN].copy_from_slice(&proto::structured_header(
            proto::REPLY_FLAG_DONE,
            proto::REPLY_TYPE_OFFSET_DATA,
            cookie,
            8 + len as u32,
        ));
        hdr[proto::STRUCTURED_HEADER_LEN..].copy_from_slice(&offset.to_be_bytes());
    } else {
        hdr.copy_from_slice(&proto::simple_reply(cookie, 0));
    }
}

/// A structured reply to an empty read: a lone final `NBD_REPLY_TYPE_NONE` chunk
/// (a data chunk must carry at least one byte).
fn put_empty_read(out: &mut OutBuf, cookie: u64) {
    out.push(&proto::structured_header(
        proto::REPLY_FLAG_DONE,
        proto::REPLY_TYPE_NONE,
        cookie,
        0,
    ));
}

/// Runs one device call; a panic in it becomes an `EIO` error for the request
/// (see the module docs) and an error in the log.
pub(crate) fn contained<T>(op: &'static str, f: impl FnOnce() -> IoResult<T>) -> IoResult<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_else(|panic| {
        let why = panic
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic without a message".to_owned());
        tracing::error!(op, %why, "the device panicked; the request fails with EIO");
        Err(IoError::Media(format!(
            "internal error in the device's {op}: {why}"
        )))
    })
}

/// Reads from the device straight into the output buffer, behind the header.
fn put_read(
    out: &mut OutBuf,
    structured: bool,
    cookie: u64,
    offset: u64,
    len: u32,
    dev: &dyn BlockDev,
) {
    let len = len as usize;
    let mark = out.used;
    let hlen = read_header_len(structured);
    let slot = out.slot(hlen + len);
    let (hdr, data) = slot.split_at_mut(hlen);
    match contained("read", || dev.read(offset, data)) {
        Ok(_) if structured && len == 0 => {
            out.used = mark;
            put_empty_read(out, cookie);
        }
        Ok(_) => write_read_header(hdr, structured, cookie, offset, len),
        Err(e) => {
            out.used = mark;
            put_status(
                out,
                structured,
                cookie,
                Err((e.errno(), Cow::Owned(e.to_string()))),
            );
        }
    }
}

/// Appends a read reply whose data was read earlier (a large read, or any
/// read in emulation mode): the header is copied in, the data attached, in
/// a buffer of its own or as the device's loans ([`BlockDev::read_lent`]).
fn put_read_payload(out: &mut OutBuf, structured: bool, cookie: u64, offset: u64, data: Payload) {
    let len = data.len();
    if structured && len == 0 {
        return put_empty_read(out, cookie);
    }
    let hlen = read_header_len(structured);
    write_read_header(out.slot(hlen), structured, cookie, offset, len);
    out.attach_payload(data);
}

/// Copies the bytes of `loans`, in order, into `out` (as long as they are).
fn copy_lent(loans: &[Loan], out: &mut [u8]) {
    let mut at = 0;
    for l in loans {
        let b = l.bytes();
        out[at..at + b.len()].copy_from_slice(&b);
        at += b.len();
    }
    debug_assert_eq!(at, out.len());
}

fn reject_message(errno: u32) -> &'static str {
    match errno {
        proto::EPERM => "the export is read-only",
        proto::EOVERFLOW => "request longer than the server's maximum payload",
        _ => "invalid request: unknown command or flags, or bad range or alignment",
    }
}

struct State {
    out: OutBuf,
    /// The writer is waiting for `data_ready`.
    writer_idle: bool,
    /// The reader is waiting for `space_ready`.
    reader_waiting: bool,
    /// No more output will come: the writer exits once `out` is empty.
    closed: bool,
    /// A socket write failed: output is discarded and the reader stops.
    failed: bool,
    /// Buffers of attached payloads the writer has sent, for the next large
    /// reads (a fresh 128 KiB allocation is a fresh mapping, page faults and all).
    free: Vec<Vec<u8>>,
}

/// Most bytes of sent payload buffers a connection keeps for reuse (a queue
/// depth's worth of 128 KiB reads).
const FREE_KEEP_BYTES: usize = 4 * 1024 * 1024;

/// What the reader, the writer and the pacer share.
struct Shared {
    state: Mutex<State>,
    data_ready: Notify,
    space_ready: Notify,
    writer_gone: Notify,
    /// Byte budget of deferred replies (emulation mode).
    paced: Semaphore,
    paced_budget: u32,
}

impl Shared {
    /// Appends a deferred reply (from the pacer) and wakes the writer if it sleeps.
    fn push_deferred(&self, f: impl FnOnce(&mut OutBuf)) {
        let wake = {
            let mut st = self.state.lock();
            if st.failed {
                return;
            }
            f(&mut st.out);
            std::mem::replace(&mut st.writer_idle, false)
        };
        if wake {
            self.data_ready.notify_one();
        }
    }
}

/// The writer task: sends queued output until the connection is closed and the
/// queue is empty, or a write fails.
async fn writer_loop<W: AsyncWrite + Unpin>(mut w: W, sh: Arc<Shared>) -> std::io::Result<()> {
    let mut spare = OutBuf::new(OUT_INITIAL);
    loop {
        let wait = {
            let mut st = sh.state.lock();
            if st.out.queued() == 0 {
                if st.closed {
                    break;
                }
                st.writer_idle = true;
                true
            } else {
                std::mem::swap(&mut st.out, &mut spare);
                if std::mem::replace(&mut st.reader_waiting, false) {
                    sh.space_ready.notify_one();
                }
                false
            }
        };
        if wait {
            sh.data_ready.notified().await;
            continue;
        }
        // The flush is free on a socket; under TLS it sends the buffered records.
        let written = if spare.attached.is_empty() {
            // The common case: one contiguous batch, no slices to build.
            w.write_all(&spare.data[..spare.used]).await
        } else {
            write_parts(&mut w, &spare).await
        };
        let sent = match written {
            Ok(()) => w.flush().await,
            Err(e) => Err(e),
        };
        if let Err(e) = sent {
            let waiting = {
                let mut st = sh.state.lock();
                st.failed = true;
                st.out.clear().for_each(drop);
                std::mem::replace(&mut st.reader_waiting, false)
            };
            if waiting {
                sh.space_ready.notify_one();
            }
            sh.writer_gone.notify_one();
            return Err(e);
        }
        if spare.attached.is_empty() {
            spare.used = 0;
        } else {
            let mut st = sh.state.lock();
            let free = &mut st.free;
            let mut kept: usize = free.iter().map(Vec::len).sum();
            for b in spare.clear() {
                if kept + b.len() <= FREE_KEEP_BYTES {
                    kept += b.len();
                    free.push(b);
                }
            }
        }
        if spare.data.len() > OUT_SHRINK_ABOVE {
            spare = OutBuf::new(OUT_INITIAL);
        }
    }
    w.flush().await?;
    let _ = w.shutdown().await;
    Ok(())
}

/// Resolves once `rx` says shutdown; never, without a receiver or once its sender
/// is gone.
pub(crate) async fn wait_shutdown(rx: &mut Option<watch::Receiver<bool>>) {
    let Some(rx) = rx else {
        return std::future::pending().await;
    };
    loop {
        if *rx.borrow_and_update() {
            return;
        }
        if rx.changed().await.is_err() {
            return std::future::pending().await;
        }
    }
}

/// Appends output from the reader, waiting while the queue is over the high-water
/// mark. The writer is woken at once only for a large batch; otherwise
/// `kick_pending` records that it must be woken before the reader next waits.
async fn append<T>(
    sh: &Shared,
    kick_pending: &mut bool,
    f: impl FnOnce(&mut OutBuf) -> T,
) -> Result<T, NbdError> {
    loop {
        let full = {
            let mut st = sh.state.lock();
            if st.failed {
                return Err(NbdError::WriterGone);
            }
            if st.out.queued() < HIGH_WATER {
                let r = f(&mut st.out);
                let wake = st.writer_idle && st.out.queued() >= KICK_AT;
                if wake {
                    st.writer_idle = false;
                } else {
                    *kick_pending = true;
                }
                drop(st);
                if wake {
                    sh.data_ready.notify_one();
                }
                return Ok(r);
            }
            st.reader_waiting = true;
            std::mem::replace(&mut st.writer_idle, false)
        };
        if full {
            sh.data_ready.notify_one();
        }
        *kick_pending = false;
        // `f` was not called: the next round tries again with it.
        sh.space_ready.notified().await;
    }
}

/// A reply held back until its modelled completion time.
enum Deferred {
    Status {
        cookie: u64,
    },
    Data {
        cookie: u64,
        offset: u64,
        data: Vec<u8>,
    },
}

/// Which sync a reply waits for.
#[derive(Clone, Copy)]
enum Sync {
    /// `NBD_CMD_FLUSH`.
    Flush,
    /// The FUA flag of a write, trim or write-zeroes.
    Fua,
}

/// What admission control said about one piece of a request.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Ticket {
    /// Wait until this time (on the gate's clock) first.
    wait_until: Option<Nanos>,
    /// Booked: run the piece then. Otherwise ask again then.
    booked: bool,
}

impl Ticket {
    /// Run the piece now.
    const GO: Ticket = Ticket {
        wait_until: None,
        booked: true,
    };
}

/// A connection's admission control: the export's [`Gate`], or for an export
/// without one the open gate, which admits every request at once and whole,
/// without reading a clock. Reads and writes take the same path either way.
enum Admission {
    Open,
    Gated(Arc<dyn Gate>),
}

impl Admission {
    /// Largest piece a request is split into (the caller splits larger ones).
    fn max_piece(&self) -> u64 {
        match self {
            Self::Open => u64::MAX,
            Self::Gated(g) => g.max_piece().max(512),
        }
    }

    /// Asks to run a piece of `len` bytes. An error: the gate refuses it.
    #[inline]
    fn ask(&self, dir: Dir, len: u64) -> IoResult<Ticket> {
        let Self::Gated(gate) = self else {
            return Ok(Ticket::GO);
        };
        let (t, booked) = match gate.reserve(dir, len)? {
            Admit::At(t) => (t, true),
            Admit::Retry(t) => (t, false),
        };
        let wait_until = (gate.clock().now() < t).then_some(t);
        Ok(Ticket { wait_until, booked })
    }

    /// The gate's terms ([`Gate::terms`]); the open gate's never change.
    fn terms(&self) -> u64 {
        match self {
            Self::Open => 0,
            Self::Gated(g) => g.terms(),
        }
    }

    /// The gate's time now (the open gate never makes anyone wait: 0).
    fn now(&self) -> Nanos {
        match self {
            Self::Open => 0,
            Self::Gated(g) => g.clock().now(),
        }
    }

    /// Gives back a booking that will not be used ([`Gate::cancel`]).
    fn cancel(&self, dir: Dir, len: u64, at: Nanos) {
        if let Self::Gated(g) = self {
            g.cancel(dir, len, at);
        }
    }
}

/// Longest a piece waits for its booked time without looking whether the
/// gate's terms changed (an SLA cleared or relaxed meanwhile): it then gives
/// the booking back and asks again.
const TERMS_RECHECK_NS: Nanos = 50_000_000;

/// The reader side of a connection in transmission.
struct Conn<R> {
    rd: R,
    inbuf: InBuf,
    dev: Arc<dyn BlockDev>,
    pace: Option<Arc<dyn Clock>>,
    gate: Admission,
    limits: Limits,
    shared: Arc<Shared>,
    pacer: Option<Arc<Pacer>>,
    wbuf: Vec<u8>,
    /// Buffer of large reads (see [`LARGE_READ`]).
    rbuf: Vec<u8>,
    kick_pending: bool,
    shutdown: Option<watch::Receiver<bool>>,
    /// Most looks for the next request before parking (see [`Conn::spin`]).
    spin_polls: u32,
    /// Times the looks (host time: the spin is about the host's CPUs).
    spin_clock: clock::MonotonicClock,
    /// See [`Knobs::look_first`].
    look_first: bool,
}

impl<R: AsyncRead + Unpin> Conn<R> {
    /// Wakes the writer if replies were queued since it last was.
    fn kick(&mut self) {
        if !std::mem::take(&mut self.kick_pending) {
            return;
        }
        let wake = {
            let mut st = self.shared.state.lock();
            st.out.queued() > 0 && std::mem::replace(&mut st.writer_idle, false)
        };
        if wake {
            self.shared.data_ready.notify_one();
        }
    }

    /// The next request header if the stream has it now, without waiting
    /// (`None`: it would wait). Cancel-safe: bytes a read returned stay in
    /// the buffer.
    async fn fill_now(&mut self) -> Option<std::io::Result<bool>> {
        tokio::select! {
            biased;
            r = self.inbuf.fill(&mut self.rd, proto::REQUEST_HEADER_LEN) => Some(r),
            () = std::future::ready(()) => None,
        }
    }

    /// Before the thread parks to wait for the next request: lets the writer
    /// send what is queued (it runs on this thread), then looks for the next
    /// request up to `spin_polls` times without sleeping (each look polls the
    /// reactor without blocking, tries the socket, and yields the CPU). A
    /// client waiting on one reply at a time sends its next request within
    /// microseconds; caught here, it costs no wake-up of a parked thread,
    /// which across cores costs tens of microseconds in a VM. `None`: nothing
    /// came, wait as usual.
    ///
    /// The spin stops as soon as a look took longer than [`SPIN_LOOK_MAX`]:
    /// the yield ran another thread on this CPU, so the CPU has other work
    /// (a neighbour's requests, the client itself) and spinning would take
    /// from it. Only then does spinning cost anyone anything; an adaptive
    /// budget (halved on a miss) was tried instead and collapsed to nothing
    /// at queue depth 1, where a catch takes most of the budget.
    async fn spin(&mut self) -> Option<std::io::Result<bool>> {
        if self.spin_polls == 0 {
            return None;
        }
        let mut last = self.spin_clock.now();
        for _ in 0..self.spin_polls {
            tokio::task::yield_now().await;
            let r = self.fill_now().await;
            if r.is_some() {
                return r;
            }
            std::thread::yield_now();
            let now = self.spin_clock.now();
            if now.saturating_sub(last) > SPIN_LOOK_MAX {
                return None;
            }
            last = now;
        }
        None
    }

    /// Decodes and executes requests until the client disconnects (`Ok`), the
    /// server shuts down (`Ok`), or the stream breaks (`Err`).
    async fn serve(&mut self) -> Result<(), NbdError> {
        loop {
            if self.inbuf.len() < proto::REQUEST_HEADER_LEN {
                // A request already below the socket first: a TLS session
                // hands over one record, so one request, a read, while the
                // rest of a burst waits deciphered-to-be in its buffer. Taken
                // now, a burst's replies are queued together and leave in one
                // batch; kicking the writer after each request sent each
                // reply on its own (a socket write and a reactor poll per
                // request). Only where the stream buffers (`look_first`).
                let ahead = if self.look_first {
                    self.fill_now().await
                } else {
                    None
                };
                let filled = match ahead {
                    Some(r) => r?,
                    None => {
                        self.kick();
                        match self.spin().await {
                            Some(r) => r?,
                            None => tokio::select! {
                            biased;
                            _ = wait_shutdown(&mut self.shutdown) => return Ok(()),
                            _ = self.shared.writer_gone.notified() => return Err(NbdError::WriterGone),
                            r = self.inbuf.fill(&mut self.rd, proto::REQUEST_HEADER_LEN) => r?,
                            },
                        }
                    }
                };
                if !filled {
                    return if self.inbuf.len() == 0 {
                        Ok(())
                    } else {
                        Err(NbdError::HungUp)
                    };
                }
            }
            let h = proto::parse_request(&self.inbuf.data()[..proto::REQUEST_HEADER_LEN])?;
            self.inbuf.consume(proto::REQUEST_HEADER_LEN);
            let cookie = h.cookie;
            match proto::classify(&h, &self.limits) {
                Decision::Read { offset, len } => self.read(cookie, offset, len).await?,
                Decision::Write { offset, len, fua } => {
                    self.write(cookie, offset, len, fua).await?
                }
                Decision::Flush => self.sync_then_reply(cookie, 0, Sync::Flush).await?,
                Decision::Trim { offset, len, fua } => {
                    let r = contained("trim", || self.dev.trim(offset, u64::from(len)));
                    self.complete_fua(cookie, r, fua).await?;
                }
                Decision::WriteZeroes {
                    offset,
                    len,
                    fua,
                    no_hole: _,
                } => {
                    // A device that implements write_zeroes allocates or not as
                    // it sees fit; either way the range reads back as zeroes, so
                    // NO_HOLE needs no special handling.
                    let r = contained("write_zeroes", || {
                        self.dev.write_zeroes(offset, u64::from(len), false)
                    });
                    self.complete_fua(cookie, r, fua).await?;
                }
                Decision::Cache { .. } => self.status(cookie, Ok(())).await?,
                Decision::BlockStatus {
                    offset,
                    len,
                    req_one,
                } => self.block_status(cookie, offset, len, req_one).await?,
                Decision::Disconnect => return Ok(()),
                Decision::Reject { errno, skip } => {
                    if skip > 0 {
                        self.kick();
                        if !self.inbuf.skip(&mut self.rd, skip as usize).await? {
                            return Err(NbdError::HungUp);
                        }
                    }
                    let structured = self.limits.structured;
                    append(&self.shared, &mut self.kick_pending, |out| {
                        put_status(
                            out,
                            structured,
                            cookie,
                            Err((errno, reject_message(errno).into())),
                        )
                    })
                    .await?;
                }
                Decision::HangUp(e) => return Err(e.into()),
            }
        }
    }

    /// Queues a data-less reply now.
    async fn status(
        &mut self,
        cookie: u64,
        res: Result<(), (u32, Cow<'static, str>)>,
    ) -> Result<(), NbdError> {
        let structured = self.limits.structured;
        append(&self.shared, &mut self.kick_pending, |out| {
            put_status(out, structured, cookie, res)
        })
        .await
    }

    /// Block status (`base:allocation`): the device's allocation map of the
    /// range, answered at once (it is bookkeeping, not media time).
    async fn block_status(
        &mut self,
        cookie: u64,
        offset: u64,
        len: u32,
        req_one: bool,
    ) -> Result<(), NbdError> {
        match contained("block status", || {
            self.dev.allocation(offset, u64::from(len))
        }) {
            Ok(map) => {
                let descs = proto::status_descriptors(&map, len, req_one);
                append(&self.shared, &mut self.kick_pending, |out| {
                    let n = proto::block_status_len(descs.len());
                    proto::write_block_status(
                        out.slot(n),
                        cookie,
                        proto::META_BASE_ALLOCATION_ID,
                        &descs,
                    );
                })
                .await
            }
            Err(e) => {
                self.status(cookie, Err((e.errno(), Cow::Owned(e.to_string()))))
                    .await
            }
        }
    }

    /// Replies to a data-less command that the device has executed without
    /// FUA: now, or with `fua` after a sync off the reader.
    async fn complete_fua(&mut self, cookie: u64, r: IoResult, fua: bool) -> Result<(), NbdError> {
        match r {
            Ok(t) if fua => self.sync_then_reply(cookie, t, Sync::Fua).await,
            r => self.complete(cookie, r).await,
        }
    }

    /// Runs a sync on a blocking thread and queues the reply when it is done
    /// (at `done`, the command's modelled completion, at the earliest), while
    /// the reader goes on (see the module docs).
    async fn sync_then_reply(
        &mut self,
        cookie: u64,
        done: Nanos,
        kind: Sync,
    ) -> Result<(), NbdError> {
        let cost = self.reserve_paced(DEFERRED_OVERHEAD).await?;
        let dev = self.dev.clone();
        let shared = self.shared.clone();
        let structured = self.limits.structured;
        let pace = self.pace.clone().zip(self.pacer.clone());
        let sync = move || {
            contained("sync", || match kind {
                Sync::Flush => dev.flush(),
                Sync::Fua => dev.sync_fua(),
            })
        };
        let push = move |res: Result<(), (u32, Cow<'static, str>)>| {
            shared.push_deferred(|out| put_status(out, structured, cookie, res));
            shared.paced.add_permits(cost as usize);
        };
        let Some(pace) = pace else {
            // Fast mode: the blocking thread queues the reply itself (the
            // output queue and the writer's wake-up are thread-safe), one
            // thread hand-off per sync instead of three; under a CPU-bound
            // database workload every hand-off is a context switch.
            drop(tokio::task::spawn_blocking(move || {
                push(
                    sync()
                        .map(|_| ())
                        .map_err(|e| (e.errno(), Cow::Owned(e.to_string()))),
                );
            }));
            return Ok(());
        };
        tokio::spawn(async move {
            let r = tokio::task::spawn_blocking(sync)
                .await
                .unwrap_or_else(|e| Err(IoError::Media(format!("the sync failed: {e}"))));
            let (clock, pacer) = pace;
            match r {
                Ok(t) if clock.now() < t.max(done) => {
                    pacer.schedule(t.max(done), move || push(Ok(())));
                }
                Ok(_) => push(Ok(())),
                Err(e) => push(Err((e.errno(), Cow::Owned(e.to_string())))),
            }
        });
        Ok(())
    }

    /// Replies to a data-less command that the device has executed.
    async fn complete(&mut self, cookie: u64, r: IoResult) -> Result<(), NbdError> {
        match r {
            Ok(t) => match self.pace.clone() {
                Some(clock) if clock.now() < t => self.defer(t, Deferred::Status { cookie }).await,
                _ => self.status(cookie, Ok(())).await,
            },
            Err(e) => {
                self.status(cookie, Err((e.errno(), Cow::Owned(e.to_string()))))
                    .await
            }
        }
    }

    /// A read: admitted piece by piece (an export without a gate has one piece,
    /// admitted at once), then replied to now or, in emulation mode, at the
    /// device's completion time.
    async fn read(&mut self, cookie: u64, offset: u64, len: u32) -> Result<(), NbdError> {
        let structured = self.limits.structured;
        let n = len as usize;
        let piece = self.gate.max_piece();
        let mut first = None;
        if u64::from(len) <= piece {
            let ticket = self.gate.ask(Dir::Read, u64::from(len));
            if self.pace.is_none() && n < LARGE_READ && matches!(ticket, Ok(Ticket::GO)) {
                // The common case: straight from the device into the output
                // buffer, behind the reply header.
                let dev = &*self.dev;
                return append(&self.shared, &mut self.kick_pending, |out| {
                    put_read(out, structured, cookie, offset, len, dev)
                })
                .await;
            }
            first = Some(ticket);
        }
        // A large read replied to now is lent by a device that lends (a
        // vSSD: its flash pages, sent with no copy out of them); a reply
        // held for its modelled time is copied (a loan would sit in the
        // pacer). Otherwise into a buffer of its own, which the reply takes
        // along (deferred or not) and the writer hands back once sent; a
        // buffer a failed read leaves is kept for the next large read.
        let mut loans = (self.pace.is_none() && n >= LARGE_READ).then(Vec::new);
        let mut buf = Vec::new();
        let mut res: IoResult = Ok(0);
        let mut off = 0u64;
        loop {
            let m = piece.min(u64::from(len) - off);
            if let Err(e) = self.admit(Dir::Read, m, first.take()).await? {
                res = Err(e);
                break;
            }
            let (a, b) = (off as usize, (off + m) as usize);
            let at = offset + off;
            let r = match loans.as_mut() {
                Some(lent) => match contained("read", || Ok(self.dev.read_lent(at, b - a))) {
                    Ok(Some(Ok((t, l)))) => {
                        lent.extend(l);
                        Ok(t)
                    }
                    Ok(Some(Err(e))) | Err(e) => Err(e),
                    Ok(None) => {
                        // The device does not lend: copy from here on,
                        // behind what it lent so far (nothing, for a
                        // device that never lends).
                        buf = self.take_rbuf(n);
                        copy_lent(&loans.take().unwrap_or_default(), &mut buf[..a]);
                        contained("read", || self.dev.read(at, &mut buf[a..b]))
                    }
                },
                None => {
                    if buf.len() < n {
                        buf = self.take_rbuf(n);
                    }
                    contained("read", || self.dev.read(at, &mut buf[a..b]))
                }
            };
            match r {
                Ok(t) => res = res.map(|d| d.max(t)),
                Err(e) => {
                    res = Err(e);
                    break;
                }
            }
            off += m;
            if off >= u64::from(len) {
                break;
            }
        }
        let r = match (res, self.pace.clone(), loans) {
            (Err(e), _, _) => {
                self.status(cookie, Err((e.errno(), Cow::Owned(e.to_string()))))
                    .await
            }
            (Ok(_), _, Some(lent)) if lent.iter().map(Loan::len).sum::<usize>() != n => {
                // A device bug; a reply of another length would desync the stream.
                let e = IoError::Media(format!(
                    "the device lent the wrong length for a read of {n} bytes"
                ));
                self.status(cookie, Err((e.errno(), Cow::Owned(e.to_string()))))
                    .await
            }
            (Ok(_), _, Some(lent)) => {
                append(&self.shared, &mut self.kick_pending, |out| {
                    put_read_payload(out, structured, cookie, offset, Payload::Lent(lent))
                })
                .await
            }
            (Ok(t), Some(clock), None) if clock.now() < t => {
                // A reused buffer may be longer than this read.
                let mut data = std::mem::take(&mut buf);
                data.truncate(n);
                self.defer(
                    t,
                    Deferred::Data {
                        cookie,
                        offset,
                        data,
                    },
                )
                .await
            }
            (Ok(_), _, None) => {
                // The buffer goes with the reply; the writer hands it back.
                let data = std::mem::take(&mut buf);
                append(&self.shared, &mut self.kick_pending, |out| {
                    put_read_payload(
                        out,
                        structured,
                        cookie,
                        offset,
                        Payload::Owned { buf: data, len: n },
                    )
                })
                .await
            }
        };
        if !buf.is_empty() && buf.len() <= WBUF_KEEP {
            self.rbuf = buf;
        }
        r
    }

    /// A buffer of at least `n` bytes for a large read: the one a failed
    /// read left, or one the writer handed back, or a new one.
    fn take_rbuf(&mut self, n: usize) -> Vec<u8> {
        let mut buf = std::mem::take(&mut self.rbuf);
        if buf.is_empty() {
            buf = self.shared.state.lock().free.pop().unwrap_or_default();
        }
        if buf.len() < n {
            buf.resize(n, 0);
        }
        buf
    }

    /// A write: the payload is taken off the socket first (the client has sent
    /// it; a payload already buffered is written from there, with no copy), then
    /// written piece by piece as admitted (an export without a gate has one
    /// piece, admitted at once).
    async fn write(
        &mut self,
        cookie: u64,
        offset: u64,
        len: u32,
        fua: bool,
    ) -> Result<(), NbdError> {
        let n = len as usize;
        // Where the payload is when the device writes it: the input buffer,
        // or `wbuf` for one over half the buffer. One that fits is read into
        // the buffer rather than copied out of it into `wbuf` (a TLS session,
        // which hands over a record at a time, paid that copy on every
        // 128 KiB write).
        let buffered = self.inbuf.len() >= n || n <= self.inbuf.capacity() / 2;
        if self.inbuf.len() < n {
            self.kick();
            let whole = if buffered {
                self.inbuf.fill(&mut self.rd, n).await?
            } else {
                if self.wbuf.len() < n {
                    self.wbuf.resize(n, 0);
                }
                self.inbuf
                    .read_exact(&mut self.rd, &mut self.wbuf[..n])
                    .await?
            };
            if !whole {
                // Hung up mid-payload: nothing was written.
                return Err(NbdError::HungUp);
            }
        }
        let piece = self.gate.max_piece();
        let mut res: IoResult = Ok(0);
        // Pieces admitted at once are written together, in one device write
        // (one program per flash unit for its pages, not one per piece):
        // `[from, off)` is admitted and not yet written.
        let mut from = 0u64;
        let mut off = 0u64;
        loop {
            let m = piece.min(u64::from(len) - off);
            let ticket = self.gate.ask(Dir::Write, m);
            if !matches!(ticket, Ok(Ticket::GO)) {
                // This piece waits (or is refused): what was admitted goes first.
                res = self.write_span(res, buffered, offset, from, off);
                from = off;
                if res.is_err() {
                    break;
                }
                if let Err(e) = self.admit(Dir::Write, m, Some(ticket)).await? {
                    res = Err(e);
                    break;
                }
            }
            off += m;
            if off >= u64::from(len) {
                res = self.write_span(res, buffered, offset, from, off);
                break;
            }
        }
        if buffered {
            self.inbuf.consume(n);
        } else if self.wbuf.len() > WBUF_KEEP {
            self.wbuf = Vec::new();
        }
        self.complete_fua(cookie, res, fua).await
    }

    /// Writes bytes `a .. b` of the payload being served (in the input buffer,
    /// or in `wbuf` if it was read there) at `offset + a`, folding the result
    /// into `res`; nothing for an empty span. FUA's sync comes after, off the
    /// reader (see the module docs).
    fn write_span(&self, res: IoResult, buffered: bool, offset: u64, a: u64, b: u64) -> IoResult {
        if a >= b {
            return res;
        }
        let (a_, b_) = (a as usize, b as usize);
        let payload = if buffered {
            &self.inbuf.data()[a_..b_]
        } else {
            &self.wbuf[a_..b_]
        };
        match contained("write", || self.dev.write(offset + a, payload, false)) {
            Ok(t) => res.map(|d| d.max(t)),
            Err(e) => Err(e),
        }
    }

    /// Waits until the gate admits a piece of `len` bytes; `first` is its
    /// ticket if already asked for (it must not be asked for twice).
    /// `Ok(Err(_))`: the gate refused it (the request fails with that error).
    /// The open gate admits at once.
    async fn admit(
        &mut self,
        dir: Dir,
        len: u64,
        mut first: Option<IoResult<Ticket>>,
    ) -> Result<IoResult<()>, NbdError> {
        loop {
            let ticket = match first.take().unwrap_or_else(|| self.gate.ask(dir, len)) {
                Ok(t) => t,
                Err(e) => return Ok(Err(e)),
            };
            if let Some(at) = ticket.wait_until {
                // Let queued replies go out while this tenant waits its turn.
                self.kick();
                let terms = self.gate.terms();
                let mut retimed = false;
                while self.gate.now() < at {
                    // In steps, looking for new terms between them.
                    let until = at.min(self.gate.now().saturating_add(TERMS_RECHECK_NS));
                    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
                    let Some(pacer) = &self.pacer else {
                        unreachable!("only a gate makes a request wait, and it brings a pacer");
                    };
                    pacer.schedule(until, move || {
                        let _ = tx.send(());
                    });
                    tokio::select! {
                        biased;
                        _ = wait_shutdown(&mut self.shutdown) => {
                            return Ok(Err(IoError::Gone("the server is shutting down".into())));
                        }
                        _ = rx => {}
                    }
                    if self.gate.terms() != terms {
                        retimed = true;
                        break;
                    }
                }
                if retimed {
                    // Booked under terms that no longer hold: give it back
                    // and ask again under the new ones.
                    if ticket.booked {
                        self.gate.cancel(dir, len, at);
                    }
                    continue;
                }
            }
            if ticket.booked {
                return Ok(Ok(()));
            }
        }
    }

    /// Takes `want` bytes (at most the whole budget) of the budget of replies
    /// held back for later; over budget, lets the writer drain and waits for
    /// held replies to go. Returns what was taken, to give back when the reply
    /// is pushed.
    async fn reserve_paced(&mut self, want: u32) -> Result<u32, NbdError> {
        let cost = want.min(self.shared.paced_budget);
        let acquired = match self.shared.paced.try_acquire_many(cost) {
            Ok(p) => {
                p.forget();
                true
            }
            Err(TryAcquireError::NoPermits) => false,
            Err(TryAcquireError::Closed) => return Err(NbdError::WriterGone),
        };
        if !acquired {
            self.kick();
            match self.shared.paced.acquire_many(cost).await {
                Ok(p) => p.forget(),
                Err(_) => return Err(NbdError::WriterGone),
            }
        }
        Ok(cost)
    }

    /// Hands a reply to the pacer, to be queued once `clock` reaches `t`.
    async fn defer(&mut self, t: Nanos, d: Deferred) -> Result<(), NbdError> {
        let data_len = match &d {
            Deferred::Data { data, .. } => data.len() as u32,
            Deferred::Status { .. } => 0,
        };
        let cost = self
            .reserve_paced(DEFERRED_OVERHEAD.saturating_add(data_len))
            .await?;
        let shared = self.shared.clone();
        let structured = self.limits.structured;
        let Some(pacer) = &self.pacer else {
            unreachable!("deferred replies only happen with a pacing clock, which has a pacer");
        };
        pacer.schedule(t, move || {
            shared.push_deferred(|out| match d {
                Deferred::Status { cookie } => put_status(out, structured, cookie, Ok(())),
                Deferred::Data {
                    cookie,
                    offset,
                    data,
                } => {
                    let len = data.len();
                    put_read_payload(
                        out,
                        structured,
                        cookie,
                        offset,
                        Payload::Owned { buf: data, len },
                    )
                }
            });
            shared.paced.add_permits(cost as usize);
        });
        Ok(())
    }
}

/// Tells the writer there will be no more output when dropped, also when the
/// reader's task unwinds.
struct CloseOnDrop(Arc<Shared>);

impl Drop for CloseOnDrop {
    fn drop(&mut self) {
        self.0.state.lock().closed = true;
        self.0.data_ready.notify_one();
    }
}

/// The server's settings a connection's transmission phase uses (from
/// [`crate::ServerConfig`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Knobs {
    /// Largest write payload or read length accepted.
    pub max_payload: u32,
    /// Bytes of replies the pacer and pending syncs may hold.
    pub paced_budget: u32,
    /// Looks for the next request before parking (see `Conn::spin`).
    pub spin_polls: u32,
    /// The stream hands over requests one at a time from a buffer of its
    /// own (a TLS session: a record a read): take the next one it holds
    /// before the writer runs (see `Conn::serve`). On a socket a short read
    /// has told already that nothing more is there, so the look is skipped.
    pub look_first: bool,
}

/// Runs the transmission phase until the client disconnects, the server shuts
/// down, or the stream breaks; in-flight replies are sent before the connection
/// is closed.
pub(crate) async fn transmit<R, W>(
    rd: R,
    inbuf: InBuf,
    wr: W,
    neg: Negotiated,
    knobs: Knobs,
    shutdown: Option<watch::Receiver<bool>>,
) -> Result<(), NbdError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let Knobs {
        max_payload,
        paced_budget,
        spin_polls,
        look_first,
    } = knobs;
    let paced_budget = paced_budget.max(max_payload.saturating_add(DEFERRED_OVERHEAD));
    let shared = Arc::new(Shared {
        state: Mutex::new(State {
            out: OutBuf::new(OUT_INITIAL),
            writer_idle: false,
            reader_waiting: false,
            closed: false,
            failed: false,
            free: Vec::new(),
        }),
        data_ready: Notify::new(),
        space_ready: Notify::new(),
        writer_gone: Notify::new(),
        paced: Semaphore::new(paced_budget as usize),
        paced_budget,
    });
    let mut writer = tokio::spawn(writer_loop(wr, shared.clone()));
    // If the reader unwinds (a device panicked), the writer must still finish
    // and drop its half of the socket, or the client would wait forever.
    let _close_writer = CloseOnDrop(shared.clone());
    let limits = Limits {
        size: neg.size,
        block: neg.block,
        max_payload,
        read_only: neg.export.dev.read_only(),
        structured: neg.structured,
        block_status: neg.block_status,
        fast_zero: neg.export.dev.fast_zero(),
    };
    let pace_clock =
        (neg.export.pace.clone()).or_else(|| neg.export.gate.as_ref().map(|g| g.clock().clone()));
    let pacer = match pace_clock {
        Some(clock) => Some(Arc::new(Pacer::new(clock)?)),
        None => None,
    };
    let mut conn = Conn {
        rd,
        inbuf,
        dev: neg.export.dev.clone(),
        pace: neg.export.pace.clone(),
        gate: match &neg.export.gate {
            Some(g) => Admission::Gated(g.clone()),
            None => Admission::Open,
        },
        limits,
        shared: shared.clone(),
        pacer,
        wbuf: Vec::new(),
        rbuf: Vec::new(),
        kick_pending: false,
        shutdown,
        spin_polls,
        spin_clock: clock::MonotonicClock::new(),
        look_first,
    };
    let res = conn.serve().await;
    // Keep the pacer until every deferred reply has been queued at its time.
    let pacer = conn.pacer.take();
    drop(conn);
    if let Ok(p) = shared.paced.acquire_many(paced_budget).await {
        p.forget();
    }
    drop(pacer);
    shared.state.lock().closed = true;
    shared.data_ready.notify_one();
    let wres = match tokio::time::timeout(DRAIN_TIMEOUT, &mut writer).await {
        Ok(Ok(r)) => r.map_err(NbdError::from),
        Ok(Err(join)) => Err(NbdError::Task(join.to_string())),
        Err(_) => {
            writer.abort();
            Err(NbdError::Io(std::io::ErrorKind::TimedOut.into()))
        }
    };
    match res {
        Err(NbdError::WriterGone) => wres.and(Err(NbdError::WriterGone)),
        Err(e) => Err(e),
        Ok(()) => wres,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A writer that takes at most `max` bytes per call, vectored or not, so
    /// that every partial-write path runs.
    struct Dribble {
        got: Vec<u8>,
        max: usize,
        vectored: bool,
        /// Bytes taken by each call.
        calls: Vec<usize>,
    }

    impl Dribble {
        fn new(max: usize, vectored: bool) -> Self {
            Self {
                got: Vec::new(),
                max,
                vectored,
                calls: Vec::new(),
            }
        }
    }

    impl AsyncWrite for Dribble {
        fn poll_write(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            buf: &[u8],
        ) -> std::task::Poll<std::io::Result<usize>> {
            let n = buf.len().min(self.max);
            self.got.extend_from_slice(&buf[..n]);
            self.calls.push(n);
            std::task::Poll::Ready(Ok(n))
        }
        fn poll_write_vectored(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            bufs: &[std::io::IoSlice<'_>],
        ) -> std::task::Poll<std::io::Result<usize>> {
            let mut left = self.max;
            let mut n = 0;
            for b in bufs {
                let k = b.len().min(left);
                self.got.extend_from_slice(&b[..k]);
                (n, left) = (n + k, left - k);
                if left == 0 {
                    break;
                }
            }
            self.calls.push(n);
            std::task::Poll::Ready(Ok(n))
        }
        fn is_write_vectored(&self) -> bool {
            self.vectored
        }
        fn poll_flush(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            std::task::Poll::Ready(Ok(()))
        }
        fn poll_shutdown(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            std::task::Poll::Ready(Ok(()))
        }
    }

    /// A stream that hands over at most `max` bytes a read (a TLS session
    /// gives one record, here one request, per read) and then waits forever.
    struct OneAtATime {
        data: Vec<u8>,
        pos: usize,
        max: usize,
    }

    impl AsyncRead for OneAtATime {
        fn poll_read(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            buf: &mut tokio::io::ReadBuf<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            if self.pos == self.data.len() {
                return std::task::Poll::Pending;
            }
            let n = (self.data.len() - self.pos)
                .min(self.max)
                .min(buf.remaining());
            let at = self.pos;
            buf.put_slice(&self.data[at..at + n]);
            self.pos += n;
            std::task::Poll::Ready(Ok(()))
        }
    }

    /// Counts the writer's flushes (one per batch of replies) and the bytes.
    #[derive(Clone, Default)]
    struct Batches(Arc<Mutex<(usize, usize)>>);

    impl AsyncWrite for Batches {
        fn poll_write(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            buf: &[u8],
        ) -> std::task::Poll<std::io::Result<usize>> {
            self.0.lock().1 += buf.len();
            std::task::Poll::Ready(Ok(buf.len()))
        }
        fn poll_flush(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            self.0.lock().0 += 1;
            std::task::Poll::Ready(Ok(()))
        }
        fn poll_shutdown(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            std::task::Poll::Ready(Ok(()))
        }
    }

    /// A burst of requests that the stream hands over one per read, as a
    /// TLS session does, is answered in one batch, not a batch (a socket
    /// write) per request: the reader takes a request the stream already
    /// has before it lets the writer run.
    #[tokio::test(flavor = "current_thread")]
    async fn a_burst_read_a_request_at_a_time_is_answered_in_one_batch() {
        const N: usize = 32;
        let mut data = Vec::new();
        for i in 0..N as u64 {
            data.extend_from_slice(&proto::encode_request(&proto::RequestHeader {
                flags: 0,
                kind: proto::CMD_READ,
                cookie: i,
                offset: i * 4096,
                length: 4096,
            }));
        }
        let rd = OneAtATime {
            data,
            pos: 0,
            max: proto::REQUEST_HEADER_LEN,
        };
        let dev: Arc<dyn BlockDev> = Arc::new(blockdev::MemDev::new(1 << 20));
        let neg = Negotiated {
            export: crate::Export {
                name: String::new(),
                description: String::new(),
                dev: dev.clone(),
                pace: None,
                gate: None,
                owner: None,
            },
            structured: false,
            block_status: false,
            size: 1 << 20,
            block: dev.block_sizes(),
        };
        let knobs = Knobs {
            max_payload: 1 << 20,
            paced_budget: 1 << 20,
            spin_polls: crate::DEFAULT_SPIN_POLLS,
            look_first: true,
        };
        let w = Batches::default();
        let seen = w.clone();
        let (tx, rx) = watch::channel(false);
        let conn = tokio::spawn(transmit(rd, InBuf::new(1 << 16), w, neg, knobs, Some(rx)));
        let want = N * (proto::SIMPLE_REPLY_LEN + 4096);
        for _ in 0..1000 {
            if seen.0.lock().1 >= want {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        let (flushes, bytes) = *seen.0.lock();
        assert_eq!(bytes, want, "every reply sent");
        assert!(flushes <= 2, "{N} replies in {flushes} batches");
        tx.send(true).unwrap();
        conn.await.unwrap().unwrap();
    }

    /// Attached payloads go out in their place among the copied bytes, only
    /// their `len` bytes, whatever the writer takes per call; clearing hands
    /// their buffers back.
    #[tokio::test]
    async fn attached_payloads_go_out_in_order() {
        let mut out = OutBuf::new(16);
        out.push(b"head1");
        out.attach_payload(Payload::Owned {
            buf: b"PAYLOAD-1xxx".to_vec(),
            len: 9,
        });
        out.attach_payload(Payload::Owned {
            buf: Vec::new(),
            len: 0,
        });
        out.push(b"head2");
        out.push(b"tail");
        out.attach_payload(Payload::Owned {
            buf: b"P2".to_vec(),
            len: 2,
        });
        assert_eq!(out.queued(), 5 + 9 + 5 + 4 + 2);
        let want = b"head1PAYLOAD-1head2tailP2".to_vec();
        for (max, vectored) in [(1, true), (3, true), (7, false), (1000, true)] {
            let mut w = Dribble::new(max, vectored);
            write_parts(&mut w, &out).await.unwrap();
            assert_eq!(w.got, want, "max {max}, vectored {vectored}");
        }
        let back: Vec<Vec<u8>> = out.clear().collect();
        assert_eq!(back.len(), 3);
        assert_eq!(out.queued(), 0);
        assert!(out.parts().is_empty());
    }

    /// On a stream without vectored writes (TLS: a record a write), short
    /// parts (a reply header, the scattered pages a read is lent as) go out
    /// gathered into whole records, a long part from where it is; the bytes
    /// are the same either way.
    #[tokio::test(flavor = "current_thread")]
    async fn short_parts_go_out_in_whole_records_without_vectored_writes() {
        let page = |i: u8| Loan::owned(vec![i; 4096].into_boxed_slice());
        let mut out = OutBuf::new(64);
        out.push(&[0xAA; 32]);
        out.attach_payload(Payload::Lent((0..32).map(page).collect()));
        out.push(&[0xBB; 16]);
        out.attach_payload(Payload::Owned {
            buf: vec![0xCC; 40_000],
            len: 40_000,
        });
        out.push(&[0xDD; 16]);
        let mut want = vec![0xAA; 32];
        (0..32u8).for_each(|i| want.extend(std::iter::repeat_n(i, 4096)));
        want.extend([0xBB; 16]);
        want.extend(vec![0xCC; 40_000]);
        want.extend([0xDD; 16]);
        let mut w = Dribble::new(usize::MAX, false);
        write_parts(&mut w, &out).await.unwrap();
        assert_eq!(w.got, want);
        // The header and the 32 pages (131,104 bytes) in 8 full records;
        // their last 32 bytes with the next header (the payload after it is
        // long); the payload; the last header.
        let mut calls = vec![RECORD; 8];
        calls.extend([48, 40_000, 16]);
        assert_eq!(w.calls, calls);
        // A vectored stream takes the parts as they are, in one call.
        let mut v = Dribble::new(usize::MAX, true);
        write_parts(&mut v, &out).await.unwrap();
        assert_eq!((v.got == want, v.calls.len()), (true, 1));
    }
}

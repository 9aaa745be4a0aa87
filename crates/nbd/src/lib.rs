//! An NBD (Network Block Device) server that exports flexssd [`BlockDev`]s.
//!
//! The daemon builds a [`Server`] from an [`ExportRegistry`] and a [`ServerConfig`],
//! and runs [`Server::serve_unix`] or [`Server::serve_tcp`]; each accepted
//! connection goes through [`Server::handle`]'s logic: the fixed-newstyle
//! handshake, then the transmission phase.
//!
//! # Protocol coverage
//!
//! Handshake: fixed newstyle with `NO_ZEROES`; options `EXPORT_NAME`, `ABORT`,
//! `LIST`, `INFO`, `GO` (answering `NBD_INFO_EXPORT`, `NAME`, `DESCRIPTION` and
//! `BLOCK_SIZE`), `STRUCTURED_REPLY`, `LIST_META_CONTEXT` and
//! `SET_META_CONTEXT` (the one context `base:allocation`), and `STARTTLS` (see
//! [`tls`]); anything else gets `NBD_REP_ERR_UNSUP`. Transmission: `READ`,
//! `WRITE`, `DISC`, `FLUSH`, `TRIM`, `WRITE_ZEROES` (with `FUA`, `NO_HOLE` and
//! `FAST_ZERO`, which fails at once with `ENOTSUP` on a device that zeroes by
//! writing: `blockdev::BlockDev::fast_zero`), `CACHE` and `BLOCK_STATUS`.
//!
//! # Why it is built this way
//!
//! * **Pure protocol core.** Every decision about untrusted input is made by the
//!   synchronous functions of [`proto`]: header and option parsing, and
//!   [`proto::classify`], which turns a request header into either a device call
//!   whose range is proven to lie inside the export, an error reply, or a hang-up.
//!   The async code only moves bytes, so the fuzz targets and property tests
//!   exercise the same code that guards the device.
//! * **One reader, one writer per connection.** Device calls are fast,
//!   synchronous, in-memory model updates, so the reader executes each request
//!   inline as it decodes it (no task per request) and encodes the reply straight
//!   into a shared output buffer; read data lands in that buffer directly. A writer
//!   task sends the buffer in batches and is woken only when the reader runs out
//!   of input, so a burst of pipelined requests costs one socket read and one
//!   socket write. That is what lets one connection keep up with fio at queue
//!   depth 32 on two cores.
//! * **A thread per connection.** Each accepted socket leaves the listener's
//!   runtime for a thread of its own running a single-threaded runtime (the
//!   reader, the writer task and the connection's timers all on it; syncs on
//!   that runtime's blocking thread). The kernel's scheduler then shares the
//!   CPU among connections, as among `nbdkit`'s threads: a tenant doing one
//!   small commit at a time is woken as soon as its request arrives instead of
//!   queueing for a worker behind a busy neighbour's hundreds of requests
//!   (`scripts/bench-flush.sh`'s isolation row: the flushing tenant kept 0.28-0.35
//!   of its alone rate beside a neighbour on the shared runtime, 0.83-0.86 on
//!   its own thread), and a device call that blocks holds up only its own
//!   connection. Connections given to [`Server::handle`] run where they are
//!   polled. Before its thread parks, an idle connection looks for its next
//!   request [`ServerConfig::spin_polls`] times: at queue depth 1 the next
//!   request is usually there within microseconds, and catching it saves
//!   the cross-core wake-up of a parked thread (8 KiB reads one at a time:
//!   22-24 µs a request against 52-55 µs parking at once, `nbdkit file`
//!   41-44 µs, `scripts/bench-qd1.sh`).
//! * **Out-of-order replies in emulation mode.** An export with a pacing clock
//!   ([`Export::pace`]) is an emulated SSD whose device calls return modelled
//!   completion times. The reader still executes every call at once, but a reply
//!   that is not due yet is handed to the connection's pacer thread, which queues
//!   it when its completion time comes; the client matches replies by cookie. A
//!   fast request thus never waits behind a slow one, as on a real SSD. The pacer
//!   is a thread with microsecond timer slack rather than `tokio::time::sleep`,
//!   whose 1 ms tick would add about a millisecond to every emulated I/O.
//! * **Bounded resources.** Option data is limited to 64 KiB, payloads to
//!   [`ServerConfig::max_payload`], queued output to about 1 MiB and deferred replies
//!   to [`ServerConfig::max_inflight_bytes`] per connection: a hostile client can
//!   only slow itself down. A write whose announced payload is too large cannot be
//!   resynchronised, so it ends the connection; a write that is merely invalid has
//!   its payload consumed and gets an error. A write reaches the device only after
//!   its whole payload has arrived. A handshake, TLS included, must finish within
//!   [`ServerConfig::handshake_timeout`], connections are capped in total and
//!   per tenant, and handshakes in flight are capped per source
//!   ([`ServerConfig::max_handshakes_per_source`]), so idle or half-open
//!   clients cannot crowd others out.
//! * **Tenants see their own exports.** With TLS, the client's TLS identity names
//!   its tenant, and [`tls::may_open`] decides which exports it may list and open
//!   (an export's [`Export::owner`]); one it may not see answers as unknown.

#![warn(missing_docs)]

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use blockdev::BlockDev;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, UnixListener};
use tokio::sync::watch;
use tokio::task::JoinSet;

mod conn;
mod handshake;
mod inbuf;
mod pacer;
pub mod proto;
pub mod tls;

pub use tls::{PskKeys, Tls, TlsError, TlsMode, TlsSetup};

/// One export: a named block device, optionally paced by a clock.
#[derive(Clone)]
pub struct Export {
    /// Name clients ask for (`""` is the default export).
    pub name: String,
    /// Human-readable description (sent in `NBD_OPT_LIST` and `NBD_INFO_DESCRIPTION`).
    pub description: String,
    /// The device.
    pub dev: Arc<dyn BlockDev>,
    /// Emulation mode: when set, the device's completion times are on this clock,
    /// and no reply is sent before the clock reaches its request's completion time.
    pub pace: Option<Arc<dyn clock::Clock>>,
    /// Admission control (an SLA scheduler): when set, every read and write is
    /// split into the gate's pieces, and each piece waits, without holding a
    /// thread, until the gate admits it. With `pace` too, both must be the same
    /// clock.
    pub gate: Option<Arc<dyn blockdev::Gate>>,
    /// The tenant that owns it: with TLS, only a client whose TLS identity is
    /// this tenant lists and opens it. `None`: shared with every client.
    pub owner: Option<String>,
}

impl std::fmt::Debug for Export {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Export")
            .field("name", &self.name)
            .field("description", &self.description)
            .field("size", &self.dev.size())
            .field("read_only", &self.dev.read_only())
            .field("paced", &self.pace.is_some())
            .field("gated", &self.gate.is_some())
            .field("owner", &self.owner)
            .finish()
    }
}

/// Where the server finds its exports. Looked up on every `NBD_OPT_INFO`, `GO`,
/// `EXPORT_NAME` and `LIST`, so exports can come and go while the server runs.
pub trait ExportRegistry: Send + Sync {
    /// The export called `name`; `""` asks for the default export.
    fn lookup(&self, name: &str) -> Option<Export>;
    /// Every export, for `NBD_OPT_LIST` (filtered there by [`tls::may_open`]).
    fn list(&self) -> Vec<Listing>;
}

/// One export as `NBD_OPT_LIST` sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listing {
    /// Export name.
    pub name: String,
    /// Its description.
    pub description: String,
    /// Its owner ([`Export::owner`]).
    pub owner: Option<String>,
}

/// A simple in-memory [`ExportRegistry`]: exports by name, plus an optional
/// default export answered for the name `""`.
#[derive(Default)]
pub struct MapRegistry {
    inner: parking_lot::RwLock<(BTreeMap<String, Export>, Option<String>)>,
}

impl MapRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds (or replaces) an export under its name.
    pub fn insert(&self, export: Export) {
        self.inner.write().0.insert(export.name.clone(), export);
    }

    /// Removes an export; connections already using it keep their device.
    pub fn remove(&self, name: &str) -> Option<Export> {
        self.inner.write().0.remove(name)
    }

    /// Makes `name` the export served for the empty name (unless an export is
    /// itself named `""`).
    pub fn set_default(&self, name: Option<&str>) {
        self.inner.write().1 = name.map(str::to_owned);
    }
}

impl ExportRegistry for MapRegistry {
    fn lookup(&self, name: &str) -> Option<Export> {
        let g = self.inner.read();
        if let Some(e) = g.0.get(name) {
            return Some(e.clone());
        }
        match (name, &g.1) {
            ("", Some(default)) => g.0.get(default).cloned(),
            _ => None,
        }
    }

    fn list(&self) -> Vec<Listing> {
        self.inner
            .read()
            .0
            .values()
            .map(|e| Listing {
                name: e.name.clone(),
                description: e.description.clone(),
                owner: e.owner.clone(),
            })
            .collect()
    }
}

/// Server settings.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Largest read or write payload, in bytes (default 32 MiB). Also caps the
    /// advertised maximum block size. A read beyond it gets `EOVERFLOW`; a write
    /// beyond it ends the connection. Values below 4 KiB are raised to 4 KiB.
    pub max_payload: u32,
    /// Advertise `NBD_FLAG_CAN_MULTI_CONN` (default true): the devices are shared
    /// by all connections, so a flush on one covers writes made on the others.
    pub multi_conn: bool,
    /// Per connection, the most bytes of replies that may wait for their
    /// completion time in emulation mode (default 64 MiB; never below
    /// `max_payload`). The reader stops taking requests while it is exhausted.
    pub max_inflight_bytes: u32,
    /// Send buffer size requested (`SO_SNDBUF`) for accepted Unix-socket
    /// connections (default 1 MiB; `None` keeps the system default). Unix sockets
    /// do not autotune their buffers, and the default (about 200 KiB) makes the
    /// writer stall every few replies under large reads; the kernel caps the
    /// request at `net.core.wmem_max`. TCP sockets are left to the kernel's
    /// autotuning.
    pub unix_send_buffer: Option<u32>,
    /// After shutdown is signalled, how long the server waits for open
    /// connections to finish their in-flight requests before cutting them off
    /// (default 5 s).
    pub shutdown_grace: Duration,
    /// TLS (`None`: off). See [`Tls::new`].
    pub tls: Option<Arc<Tls>>,
    /// A client must finish its handshake (TLS included) within this time, or
    /// it is disconnected (default 10 s).
    pub handshake_timeout: Duration,
    /// Most connections open at once; a client beyond it is disconnected at
    /// once (default 1,024).
    pub max_connections: usize,
    /// Most connections one TLS-authenticated tenant may have open at once; its
    /// next one is disconnected after the TLS handshake (default 64).
    pub max_connections_per_tenant: usize,
    /// Most connections from one [`Source`] that may be in their handshake
    /// (greeting to the choice of an export, TLS included) at once; the next
    /// one from that source is closed at once, unanswered, with a warning
    /// naming the source and the limit (default 16; 0: no limit). Against a
    /// client that opens many connections and stalls each in the handshake
    /// to crowd others out of [`ServerConfig::max_connections`] before
    /// [`ServerConfig::handshake_timeout`] fires. A connection stops counting
    /// as soon as its handshake ends, however it ends. Connections given to
    /// [`Server::handle`] have no source and are not counted.
    pub max_handshakes_per_source: usize,
    /// How many times a connection looks for its next request, without
    /// sleeping, before its thread parks (default
    /// [`DEFAULT_SPIN_POLLS`]; 0: park at once). A client that waits for
    /// each reply before sending its next request (a database's reads and
    /// commits, queue depth 1) usually sends it within microseconds; caught
    /// by a look, it costs no wake-up of a parked thread, which takes tens
    /// of microseconds across cores in a VM. Each look is a non-blocking
    /// poll of the connection's reactor and socket followed by a
    /// `sched_yield`, about a microsecond of CPU; a connection that is idle
    /// spends at most `spin_polls` of them before it parks, and stops at
    /// once when a yield ran another thread (the CPU has other work).
    pub spin_polls: u32,
}

/// The default of [`ServerConfig::spin_polls`].
pub const DEFAULT_SPIN_POLLS: u32 = 64;

/// Where a connection comes from, as [`ServerConfig::max_handshakes_per_source`]
/// counts it.
///
/// * TCP: the peer's IPv4 address (an IPv4-mapped IPv6 address counts as its
///   IPv4 address), or the /64 prefix of its IPv6 address, since one IPv6
///   host usually holds a whole /64 and could otherwise pick a fresh address
///   per connection.
/// * Unix socket: the peer's user id (`SO_PEERCRED`). Processes of one user
///   are not isolated from each other by the system anyway (each may signal
///   or trace the others), so separating them would protect nothing, while
///   one shared bucket would let any local user starve every other one. A
///   peer whose credentials cannot be read counts as [`Source::Unknown`], one
///   bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Source {
    /// A TCP peer: an IPv4 address, or an IPv6 address with its low 64 bits
    /// cleared.
    Ip(IpAddr),
    /// A Unix-socket peer's user id.
    Uid(u32),
    /// A Unix-socket peer whose credentials could not be read.
    Unknown,
}

impl Source {
    /// The source a TCP peer at `ip` counts as.
    pub fn of_ip(ip: IpAddr) -> Self {
        match ip.to_canonical() {
            IpAddr::V4(v4) => Source::Ip(IpAddr::V4(v4)),
            IpAddr::V6(v6) => {
                let bits = u128::from(v6) & !((1u128 << 64) - 1);
                Source::Ip(IpAddr::V6(bits.into()))
            }
        }
    }
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Ip(IpAddr::V4(a)) => write!(f, "{a}"),
            Source::Ip(IpAddr::V6(a)) => write!(f, "{a}/64"),
            Source::Uid(u) => write!(f, "local uid {u}"),
            Source::Unknown => f.write_str("local peer of unknown uid"),
        }
    }
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            max_payload: 32 * 1024 * 1024,
            multi_conn: true,
            max_inflight_bytes: 64 * 1024 * 1024,
            unix_send_buffer: Some(1024 * 1024),
            shutdown_grace: Duration::from_secs(5),
            tls: None,
            handshake_timeout: Duration::from_secs(10),
            max_connections: 1024,
            max_connections_per_tenant: 64,
            max_handshakes_per_source: 16,
            spin_polls: DEFAULT_SPIN_POLLS,
        }
    }
}

/// Why a connection ended other than by the client's clean request.
#[derive(Debug, thiserror::Error)]
pub enum NbdError {
    /// Reading from or writing to the connection failed.
    #[error("connection I/O error: {0}")]
    Io(#[from] std::io::Error),
    /// The client broke the protocol in a way that ends the connection (bad magic,
    /// unknown client flags, oversized option or write payload).
    #[error("protocol violation: {0}")]
    Protocol(#[from] proto::ProtoError),
    /// `NBD_OPT_EXPORT_NAME` named an export that does not exist (the protocol
    /// offers no error reply for it).
    #[error("client asked for unknown export {0:?}")]
    UnknownExport(String),
    /// The client hung up in the middle of a message.
    #[error("client hung up in the middle of a message")]
    HungUp,
    /// The client sent more options than the server accepts in one handshake.
    #[error("client sent too many options")]
    TooManyOptions,
    /// Writing replies failed, so the connection was abandoned.
    #[error("the reply stream to the client broke")]
    WriterGone,
    /// A connection task failed unexpectedly.
    #[error("connection task failed: {0}")]
    Task(String),
    /// The server requires TLS and the client asked for an export without it.
    #[error("client asked for an export without TLS, which this server requires")]
    TlsRequired,
    /// The TLS handshake failed (wrong key, unknown certificate, not TLS at all).
    #[error("TLS handshake failed: {0}")]
    Tls(String),
    /// The client sent bytes after `NBD_OPT_STARTTLS` before the TLS handshake
    /// (they would be read as if protected: a known injection attack).
    #[error("client sent plaintext after NBD_OPT_STARTTLS")]
    PlaintextAfterStartTls,
    /// The handshake took longer than [`ServerConfig::handshake_timeout`].
    #[error("handshake not finished within {0:?}")]
    HandshakeTimeout(Duration),
    /// The tenant has [`ServerConfig::max_connections_per_tenant`] open already.
    #[error("tenant {tenant:?} has {limit} connections open already")]
    TenantLimit {
        /// The tenant.
        tenant: String,
        /// Its limit.
        limit: usize,
    },
}

struct Inner {
    registry: Arc<dyn ExportRegistry>,
    config: ServerConfig,
    /// Open connections per authenticated tenant.
    tenants: Counts<String>,
    /// Connections in their handshake, per source.
    handshakes: Counts<Source>,
}

/// A byte stream the server can split into a reader and a writer half once the
/// handshake is over: sockets split into owned halves (no lock between them),
/// anything else through [`tokio::io::split`].
pub trait Transport: AsyncRead + AsyncWrite + Unpin + Send + 'static {
    /// The reading half.
    type Rd: AsyncRead + Unpin + Send + 'static;
    /// The writing half.
    type Wr: AsyncWrite + Unpin + Send + 'static;
    /// Splits the stream.
    fn halves(self) -> (Self::Rd, Self::Wr);
}

impl Transport for tokio::net::TcpStream {
    type Rd = tokio::net::tcp::OwnedReadHalf;
    type Wr = tokio::net::tcp::OwnedWriteHalf;
    fn halves(self) -> (Self::Rd, Self::Wr) {
        self.into_split()
    }
}

impl Transport for tokio::net::UnixStream {
    type Rd = tokio::net::unix::OwnedReadHalf;
    type Wr = tokio::net::unix::OwnedWriteHalf;
    fn halves(self) -> (Self::Rd, Self::Wr) {
        self.into_split()
    }
}

/// A socket that can leave the runtime that accepted it, to be served by a
/// thread of its own (see [`Server::serve_unix`]): taken out of one
/// runtime's reactor as a standard socket and registered with another's.
pub trait Detach: Transport + Sized {
    /// The socket outside any runtime.
    type Std: Send + 'static;
    /// Takes the socket out of the current runtime's reactor.
    fn detach(self) -> std::io::Result<Self::Std>;
    /// Registers the socket with the current runtime's reactor.
    fn attach(s: Self::Std) -> std::io::Result<Self>;
}

impl Detach for tokio::net::TcpStream {
    type Std = std::net::TcpStream;
    fn detach(self) -> std::io::Result<Self::Std> {
        self.into_std()
    }
    fn attach(s: Self::Std) -> std::io::Result<Self> {
        Self::from_std(s)
    }
}

impl Detach for tokio::net::UnixStream {
    type Std = std::os::unix::net::UnixStream;
    fn detach(self) -> std::io::Result<Self::Std> {
        self.into_std()
    }
    fn attach(s: Self::Std) -> std::io::Result<Self> {
        Self::from_std(s)
    }
}

/// Any stream, split through [`tokio::io::split`] (tests, TLS sessions).
struct Whole<S>(S);

impl<S: AsyncRead + Unpin> AsyncRead for Whole<S> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Whole<S> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.0).poll_write(cx, buf)
    }
    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_flush(cx)
    }
    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin + Send + 'static> Transport for Whole<S> {
    type Rd = tokio::io::ReadHalf<S>;
    type Wr = tokio::io::WriteHalf<S>;
    fn halves(self) -> (Self::Rd, Self::Wr) {
        tokio::io::split(self.0)
    }
}

/// The NBD server. Cheap to clone; clones share the registry and configuration.
#[derive(Clone)]
pub struct Server {
    inner: Arc<Inner>,
}

impl Server {
    /// A server for the exports in `registry`.
    pub fn new(registry: Arc<dyn ExportRegistry>, mut config: ServerConfig) -> Self {
        config.max_payload = config.max_payload.clamp(4096, 1 << 31);
        Self {
            inner: Arc::new(Inner {
                registry,
                config,
                tenants: Counts::default(),
                handshakes: Counts::default(),
            }),
        }
    }

    /// The configuration in force (after clamping).
    pub fn config(&self) -> &ServerConfig {
        &self.inner.config
    }

    /// Accepts connections on a Unix socket until `shutdown` becomes true, then
    /// lets open connections finish their in-flight requests (for at most
    /// [`ServerConfig::shutdown_grace`]) and returns. If the sender of `shutdown`
    /// is dropped, the server runs until its future is dropped. Each connection
    /// is served on a thread of its own (see the crate docs); the listener
    /// needs a runtime with I/O and time enabled.
    pub async fn serve_unix(
        &self,
        listener: UnixListener,
        shutdown: watch::Receiver<bool>,
    ) -> std::io::Result<()> {
        let sndbuf = self.inner.config.unix_send_buffer;
        let l = &listener;
        let accept = move || async move {
            let (stream, _) = l.accept().await?;
            if let Some(bytes) = sndbuf {
                set_send_buffer(&stream, bytes);
            }
            let source = stream
                .peer_cred()
                .map_or(Source::Unknown, |c| Source::Uid(c.uid()));
            Ok((stream, source))
        };
        self.accept_loop(accept, shutdown).await
    }

    /// Accepts connections on a TCP socket; otherwise as [`Server::serve_unix`].
    pub async fn serve_tcp(
        &self,
        listener: TcpListener,
        shutdown: watch::Receiver<bool>,
    ) -> std::io::Result<()> {
        let l = &listener;
        let accept = move || async move {
            let (stream, peer) = l.accept().await?;
            // Replies are batched by the writer; Nagle would only delay the last
            // one of each batch.
            if let Err(e) = stream.set_nodelay(true) {
                tracing::debug!(%peer, "set_nodelay failed: {e}");
            }
            Ok((stream, Source::of_ip(peer.ip())))
        };
        self.accept_loop(accept, shutdown).await
    }

    /// The accept loop shared by every listener kind: `accept` yields a new,
    /// configured connection and where it comes from.
    async fn accept_loop<F, Fut, S>(
        &self,
        mut accept: F,
        shutdown: watch::Receiver<bool>,
    ) -> std::io::Result<()>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = std::io::Result<(S, Source)>>,
        S: Detach,
    {
        let max = self.inner.config.max_connections.max(1);
        let mut conns = JoinSet::new();
        let mut stop = Some(shutdown.clone());
        loop {
            tokio::select! {
                biased;
                _ = conn::wait_shutdown(&mut stop) => break,
                Some(_) = conns.join_next(), if !conns.is_empty() => {}
                r = accept() => match r {
                    Ok(_) if conns.len() >= max => {
                        // Dropped unanswered: the client sees the connection close.
                        tracing::warn!(limit = max, "NBD connection refused: too many open connections ([nbd] max_connections)");
                    }
                    Ok((stream, source)) => match self.inner.handshake_slot(source) {
                        Err(limit) => {
                            // Dropped unanswered, like a connection over max_connections.
                            tracing::warn!(%source, limit, "NBD connection refused: {source} has {limit} handshakes in flight already ([nbd] max_handshakes_per_source)");
                        }
                        Ok(slot) => {
                            let inner = self.inner.clone();
                            let sd = Some(shutdown.clone());
                            match stream.detach() {
                                Ok(sock) => { conns.spawn(own_thread::<S>(inner, sock, sd, slot)); }
                                Err(e) => tracing::warn!("NBD connection dropped: cannot move its socket to its thread: {e}"),
                            }
                        }
                    },
                    Err(e) => accept_failed(e).await,
                },
            }
        }
        self.drain(conns).await;
        Ok(())
    }

    /// Serves one connection over any byte stream, from the greeting to the
    /// disconnect. Returns `Ok` when the client ended it cleanly (`NBD_OPT_ABORT`,
    /// `NBD_CMD_DISC`, or closing the stream between messages).
    pub async fn handle<S>(&self, stream: S) -> Result<(), NbdError>
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        self.inner
            .clone()
            .connection(Whole(stream), None, None)
            .await
    }

    async fn drain(&self, mut conns: JoinSet<()>) {
        let all = async { while conns.join_next().await.is_some() {} };
        if tokio::time::timeout(self.inner.config.shutdown_grace, all)
            .await
            .is_err()
        {
            tracing::info!(
                left = conns.len(),
                "shutdown grace expired, closing connections"
            );
            conns.abort_all();
            while conns.join_next().await.is_some() {}
        }
    }
}

/// Serves one connection on a thread of its own, with its own single-threaded
/// runtime, and returns when the connection ends. Dropping the returned future
/// (the shutdown grace expired) ends the connection.
async fn own_thread<S: Detach>(
    inner: Arc<Inner>,
    sock: S::Std,
    shutdown: Option<watch::Receiver<bool>>,
    slot: Option<Slot<Source>>,
) {
    let (done_tx, done_rx) = tokio::sync::oneshot::channel::<()>();
    let (cancel_tx, cancel_rx) = tokio::sync::oneshot::channel::<()>();
    let spawned = std::thread::Builder::new()
        .name("nbd-conn".into())
        .spawn(move || {
            let rt = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    tracing::warn!("NBD connection dropped: no runtime for its thread: {e}");
                    return;
                }
            };
            rt.block_on(async move {
                let stream = match S::attach(sock) {
                    Ok(s) => s,
                    Err(e) => {
                        tracing::warn!("NBD connection dropped: cannot register its socket: {e}");
                        return;
                    }
                };
                tokio::select! {
                    r = inner.connection(stream, shutdown, slot) => log_end(r),
                    _ = cancel_rx => {}
                }
            });
            // Dropping the runtime waits for the connection's blocking syncs.
            drop(rt);
            drop(done_tx);
        });
    match spawned {
        Ok(_) => {
            let _keep = cancel_tx;
            let _ = done_rx.await;
        }
        Err(e) => tracing::warn!("NBD connection dropped: cannot start its thread: {e}"),
    }
}

/// Asks for a send buffer of `bytes` on a Unix stream (best effort).
fn set_send_buffer(stream: &tokio::net::UnixStream, bytes: u32) {
    use std::os::fd::AsRawFd;
    let value = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    // SAFETY: the descriptor is a valid socket owned by `stream` for the whole
    // call, and the option value is a c_int that lives across the call, with its
    // exact size passed as the length.
    let rc = unsafe {
        libc::setsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_SNDBUF,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        tracing::debug!("SO_SNDBUF: {}", std::io::Error::last_os_error());
    }
}

async fn accept_failed(e: std::io::Error) {
    // Typically EMFILE/ENFILE: back off instead of spinning.
    tracing::warn!("accept failed: {e}");
    tokio::time::sleep(Duration::from_millis(50)).await;
}

fn log_end(r: Result<(), NbdError>) {
    match r {
        Ok(()) => tracing::debug!("NBD connection closed"),
        Err(e) => tracing::debug!("NBD connection ended: {e}"),
    }
}

/// Socket-side buffer, each way, under a TLS session.
const TLS_BUFFER: usize = 256 * 1024;

/// Counts a tenant's open connection while it lives.
/// Connections counted per key (a tenant, a source), each held by a
/// [`Slot`] that gives it back when dropped.
struct Counts<K: Ord>(Arc<parking_lot::Mutex<BTreeMap<K, usize>>>);

impl<K: Ord> Default for Counts<K> {
    fn default() -> Self {
        Self(Arc::default())
    }
}

impl<K: Ord + Clone> Counts<K> {
    /// One more for `key`, unless it has `limit` already.
    fn take(&self, key: &K, limit: usize) -> Option<Slot<K>> {
        let mut m = self.0.lock();
        let n = m.entry(key.clone()).or_insert(0);
        if *n >= limit {
            return None;
        }
        *n += 1;
        Some(Slot {
            counts: self.0.clone(),
            key: key.clone(),
        })
    }
}

/// One counted connection; dropping it gives the count back.
struct Slot<K: Ord> {
    counts: Arc<parking_lot::Mutex<BTreeMap<K, usize>>>,
    key: K,
}

impl<K: Ord> Drop for Slot<K> {
    fn drop(&mut self) {
        let mut m = self.counts.lock();
        if let Some(n) = m.get_mut(&self.key) {
            *n -= 1;
            if *n == 0 {
                m.remove(&self.key);
            }
        }
    }
}

impl Inner {
    /// Counts a new connection from `source` as in its handshake: `Ok(None)`
    /// without a limit, `Err(limit)` when `source` has that many already.
    fn handshake_slot(&self, source: Source) -> Result<Option<Slot<Source>>, usize> {
        let limit = self.config.max_handshakes_per_source;
        if limit == 0 {
            return Ok(None);
        }
        self.handshakes.take(&source, limit).map(Some).ok_or(limit)
    }

    /// Takes one of `tenant`'s connection slots, if it has one left.
    fn tenant_slot(&self, tenant: &str) -> Result<Slot<String>, NbdError> {
        let limit = self.config.max_connections_per_tenant.max(1);
        self.tenants
            .take(&tenant.to_string(), limit)
            .ok_or_else(|| NbdError::TenantLimit {
                tenant: tenant.to_string(),
                limit,
            })
    }

    /// Serves one connection; `in_handshake` counts it against its source until
    /// the handshake ends (dropped on every way out of it).
    async fn connection<S: Transport>(
        self: Arc<Self>,
        mut stream: S,
        shutdown: Option<watch::Receiver<bool>>,
        in_handshake: Option<Slot<Source>>,
    ) -> Result<(), NbdError> {
        let mut inbuf = inbuf::InBuf::new(512 * 1024);
        let mut stop = shutdown.clone();
        let limit = self.config.handshake_timeout;
        let deadline = tokio::time::Instant::now() + limit;
        let mut session = handshake::Session::default();
        let Some(first) = self
            .phase(&mut session, &mut inbuf, &mut stream, deadline, &mut stop)
            .await?
        else {
            return Ok(());
        };
        match first {
            handshake::Outcome::Closed => Ok(()),
            handshake::Outcome::Go(neg) => {
                drop(in_handshake);
                let (rd, wr) = stream.halves();
                self.transmit(rd, inbuf, wr, neg, shutdown, false).await
            }
            handshake::Outcome::StartTls => {
                if inbuf.len() != 0 {
                    return Err(NbdError::PlaintextAfterStartTls);
                }
                let tls = self
                    .config
                    .tls
                    .clone()
                    .ok_or_else(|| NbdError::Tls("TLS is off".into()))?;
                let ssl = openssl::ssl::Ssl::new(tls.context())
                    .map_err(|e| NbdError::Tls(e.to_string()))?;
                // OpenSSL writes each 16 KiB record to its transport on its own,
                // and reads one record at a time: buffer both ways, so a batch of
                // replies leaves in few socket writes (the writer flushes after
                // each batch) and a burst of requests arrives in few reads.
                let stream = tokio::io::BufStream::with_capacity(TLS_BUFFER, TLS_BUFFER, stream);
                let mut s = tokio_openssl::SslStream::new(ssl, stream)
                    .map_err(|e| NbdError::Tls(e.to_string()))?;
                tokio::time::timeout_at(deadline, std::pin::Pin::new(&mut s).accept())
                    .await
                    .map_err(|_| NbdError::HandshakeTimeout(limit))?
                    .map_err(|e| NbdError::Tls(e.to_string()))?;
                session.secure = true;
                session.identity = tls.identity(s.ssl());
                let _slot = match &session.identity {
                    Some(t) => Some(self.tenant_slot(t)?),
                    None => None,
                };
                tracing::debug!(tenant = ?session.identity, "NBD client authenticated over TLS");
                let Some(second) = self
                    .phase(&mut session, &mut inbuf, &mut s, deadline, &mut stop)
                    .await?
                else {
                    return Ok(());
                };
                match second {
                    handshake::Outcome::Go(neg) => {
                        drop(in_handshake);
                        let (rd, wr) = Whole(s).halves();
                        // A TLS session hands over a record, one request, a read.
                        self.transmit(rd, inbuf, wr, neg, shutdown, true).await
                    }
                    // A second STARTTLS is refused inside the handshake.
                    handshake::Outcome::Closed | handshake::Outcome::StartTls => Ok(()),
                }
            }
        }
    }

    /// One phase of option haggling on `stream`, within the handshake's
    /// `deadline`; `None` when shutdown came first.
    async fn phase<S: AsyncRead + AsyncWrite + Unpin>(
        &self,
        session: &mut handshake::Session,
        inbuf: &mut inbuf::InBuf,
        stream: &mut S,
        deadline: tokio::time::Instant,
        stop: &mut Option<watch::Receiver<bool>>,
    ) -> Result<Option<handshake::Outcome>, NbdError> {
        let haggle = handshake::negotiate(&*self.registry, &self.config, session, inbuf, stream);
        tokio::select! {
            biased;
            _ = conn::wait_shutdown(stop) => Ok(None),
            r = tokio::time::timeout_at(deadline, haggle) => r
                .map_err(|_| NbdError::HandshakeTimeout(self.config.handshake_timeout))?
                .map(Some),
        }
    }

    async fn transmit<R, W>(
        &self,
        rd: R,
        inbuf: inbuf::InBuf,
        wr: W,
        neg: handshake::Negotiated,
        shutdown: Option<watch::Receiver<bool>>,
        look_first: bool,
    ) -> Result<(), NbdError>
    where
        R: AsyncRead + Unpin + Send,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        tracing::debug!(export = %neg.export.name, structured = neg.structured, "NBD transmission");
        conn::transmit(
            rd,
            inbuf,
            wr,
            neg,
            conn::Knobs {
                max_payload: self.config.max_payload,
                paced_budget: self.config.max_inflight_bytes,
                spin_polls: self.config.spin_polls,
                look_first,
            },
            shutdown,
        )
        .await
    }
}

#[cfg(test)]
mod tests;

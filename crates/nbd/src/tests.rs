//! Connection-level tests: a hand-written client speaks the raw protocol to
//! [`Server::handle`] over an in-memory duplex pipe.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use blockdev::{BlockDev, BlockSizes, IoError, IoResult, MemDev};
use clock::{Clock, MonotonicClock, VirtualClock};
use parking_lot::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};
use tokio::task::JoinHandle;

use crate::proto::*;
use crate::{Export, MapRegistry, NbdError, Server, ServerConfig};

const SIZE: u64 = 1 << 20;
const T: Duration = Duration::from_secs(10);

// ---------------------------------------------------------------------------------
// Test devices
// ---------------------------------------------------------------------------------

/// Records every call (with its FUA flag) before passing it to a MemDev; can be
/// made read-only or given block sizes.
struct Recorder {
    inner: MemDev,
    log: Mutex<Vec<String>>,
    /// Flushes and FUA syncs, with the length of `log` when each was called
    /// (they run off the connection's reader, so their place among the other
    /// calls varies from run to run).
    syncs: Mutex<Vec<(&'static str, usize)>>,
    read_only: bool,
    sizes: BlockSizes,
}

impl Recorder {
    fn new(size: u64) -> Self {
        Self {
            inner: MemDev::new(size),
            log: Mutex::new(Vec::new()),
            syncs: Mutex::new(Vec::new()),
            read_only: false,
            sizes: BlockSizes::default(),
        }
    }
    fn take_log(&self) -> Vec<String> {
        std::mem::take(&mut *self.log.lock())
    }
    fn take_syncs(&self) -> Vec<(&'static str, usize)> {
        std::mem::take(&mut *self.syncs.lock())
    }
    fn sync(&self, kind: &'static str) {
        let at = self.log.lock().len();
        self.syncs.lock().push((kind, at));
    }
}

impl BlockDev for Recorder {
    fn size(&self) -> u64 {
        self.inner.size()
    }
    fn block_sizes(&self) -> BlockSizes {
        self.sizes
    }
    fn read(&self, offset: u64, buf: &mut [u8]) -> IoResult {
        self.inner.read(offset, buf)
    }
    fn write(&self, offset: u64, data: &[u8], fua: bool) -> IoResult {
        self.log
            .lock()
            .push(format!("write {offset} {} fua={fua}", data.len()));
        self.inner.write(offset, data, fua)
    }
    fn flush(&self) -> IoResult {
        self.sync("flush");
        self.inner.flush()
    }
    fn sync_fua(&self) -> IoResult {
        self.sync("sync");
        self.inner.flush()
    }
    fn trim(&self, offset: u64, len: u64) -> IoResult {
        self.log.lock().push(format!("trim {offset} {len}"));
        self.inner.trim(offset, len)
    }
    fn write_zeroes(&self, offset: u64, len: u64, fua: bool) -> IoResult {
        self.log
            .lock()
            .push(format!("zero {offset} {len} fua={fua}"));
        self.inner.write_zeroes(offset, len, fua)
    }
    fn read_only(&self) -> bool {
        self.read_only
    }
}

/// A device whose every call fails with the given error.
struct Failing(IoError);

impl BlockDev for Failing {
    fn size(&self) -> u64 {
        SIZE
    }
    fn read(&self, _: u64, _: &mut [u8]) -> IoResult {
        Err(self.0.clone())
    }
    fn write(&self, _: u64, _: &[u8], _: bool) -> IoResult {
        Err(self.0.clone())
    }
    fn flush(&self) -> IoResult {
        Err(self.0.clone())
    }
    fn trim(&self, _: u64, _: u64) -> IoResult {
        Err(self.0.clone())
    }
    fn write_zeroes(&self, _: u64, _: u64, _: bool) -> IoResult {
        Err(self.0.clone())
    }
}

/// A MemDev whose operations complete `offset / 4096 * step` after "now" on a
/// clock: the higher the offset, the slower the request.
#[derive(Debug)]
struct Paced {
    inner: MemDev,
    clock: Arc<dyn Clock>,
    step: u64,
    calls: AtomicU64,
}

impl Paced {
    fn done(&self, offset: u64) -> u64 {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.clock.now() + offset / 4096 * self.step
    }
}

impl BlockDev for Paced {
    fn size(&self) -> u64 {
        self.inner.size()
    }
    fn read(&self, offset: u64, buf: &mut [u8]) -> IoResult {
        self.inner.read(offset, buf)?;
        Ok(self.done(offset))
    }
    fn write(&self, offset: u64, data: &[u8], fua: bool) -> IoResult {
        self.inner.write(offset, data, fua)?;
        Ok(self.done(offset))
    }
    fn flush(&self) -> IoResult {
        Ok(self.done(0))
    }
    fn trim(&self, offset: u64, len: u64) -> IoResult {
        self.inner.trim(offset, len)?;
        Ok(self.done(offset))
    }
    fn write_zeroes(&self, offset: u64, len: u64, fua: bool) -> IoResult {
        self.inner.write_zeroes(offset, len, fua)?;
        Ok(self.done(offset))
    }
}

// ---------------------------------------------------------------------------------
// Raw client
// ---------------------------------------------------------------------------------

fn export(name: &str, dev: Arc<dyn BlockDev>) -> Export {
    Export {
        name: name.into(),
        description: format!("{name} device"),
        dev,
        pace: None,
        gate: None,
        owner: None,
    }
}

fn server_with(exports: Vec<Export>, config: ServerConfig) -> Server {
    let reg = MapRegistry::new();
    for e in exports {
        reg.insert(e);
    }
    reg.set_default(Some("disk"));
    Server::new(Arc::new(reg), config)
}

struct Client {
    s: DuplexStream,
    srv: JoinHandle<Result<(), NbdError>>,
}

struct Reply {
    error: u32,
    cookie: u64,
    data: Vec<u8>,
}

impl Client {
    async fn connect(server: &Server) -> Self {
        let (a, b) = tokio::io::duplex(4 << 20);
        let server = server.clone();
        let srv = tokio::spawn(async move { server.handle(b).await });
        let mut c = Client { s: a, srv };
        let mut g = [0u8; 18];
        c.s.read_exact(&mut g).await.unwrap();
        assert_eq!(&g[..16], b"NBDMAGICIHAVEOPT");
        assert_eq!(
            u16::from_be_bytes([g[16], g[17]]),
            FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES
        );
        c
    }

    /// Connects, sends client flags 3 (fixed newstyle, no zeroes).
    async fn start(server: &Server) -> Self {
        let mut c = Self::connect(server).await;
        c.s.write_all(&3u32.to_be_bytes()).await.unwrap();
        c
    }

    async fn option(&mut self, option: u32, data: &[u8]) {
        let mut m = IHAVEOPT.to_be_bytes().to_vec();
        m.extend_from_slice(&option.to_be_bytes());
        m.extend_from_slice(&(data.len() as u32).to_be_bytes());
        m.extend_from_slice(data);
        self.s.write_all(&m).await.unwrap();
    }

    async fn option_reply(&mut self) -> (u32, u32, Vec<u8>) {
        let mut h = [0u8; 20];
        tokio::time::timeout(T, self.s.read_exact(&mut h))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            u64::from_be_bytes(h[..8].try_into().unwrap()),
            OPT_REPLY_MAGIC
        );
        let opt = u32::from_be_bytes(h[8..12].try_into().unwrap());
        let rep = u32::from_be_bytes(h[12..16].try_into().unwrap());
        let len = u32::from_be_bytes(h[16..20].try_into().unwrap());
        let mut d = vec![0u8; len as usize];
        self.s.read_exact(&mut d).await.unwrap();
        (opt, rep, d)
    }

    /// Sends INFO or GO and collects the replies up to the final one.
    async fn info(&mut self, option: u32, name: &str, reqs: &[u16]) -> (u32, Vec<Vec<u8>>) {
        let mut d = (name.len() as u32).to_be_bytes().to_vec();
        d.extend_from_slice(name.as_bytes());
        d.extend_from_slice(&(reqs.len() as u16).to_be_bytes());
        for r in reqs {
            d.extend_from_slice(&r.to_be_bytes());
        }
        self.option(option, &d).await;
        let mut infos = Vec::new();
        loop {
            let (opt, rep, data) = self.option_reply().await;
            assert_eq!(opt, option);
            if rep == REP_INFO {
                infos.push(data);
            } else {
                return (rep, infos);
            }
        }
    }

    /// Full handshake to transmission on `name`; returns (size, flags).
    async fn go(server: &Server, name: &str, structured: bool) -> (Self, u64, u16) {
        let mut c = Self::start(server).await;
        if structured {
            c.option(OPT_STRUCTURED_REPLY, &[]).await;
            assert_eq!(c.option_reply().await.1, REP_ACK);
        }
        let (rep, infos) = c.info(OPT_GO, name, &[INFO_BLOCK_SIZE]).await;
        assert_eq!(rep, REP_ACK);
        let e = infos
            .iter()
            .find(|i| i[..2] == INFO_EXPORT.to_be_bytes())
            .unwrap();
        let size = u64::from_be_bytes(e[2..10].try_into().unwrap());
        let flags = u16::from_be_bytes(e[10..12].try_into().unwrap());
        (c, size, flags)
    }

    async fn request(&mut self, kind: u16, flags: u16, cookie: u64, offset: u64, length: u32) {
        let h = RequestHeader {
            flags,
            kind,
            cookie,
            offset,
            length,
        };
        self.s.write_all(&encode_request(&h)).await.unwrap();
    }

    async fn write(&mut self, cookie: u64, offset: u64, data: &[u8], flags: u16) {
        self.request(CMD_WRITE, flags, cookie, offset, data.len() as u32)
            .await;
        self.s.write_all(data).await.unwrap();
    }

    /// A simple reply; `data_len` bytes follow it if it reports success.
    async fn simple(&mut self, data_len: usize) -> Reply {
        let mut h = [0u8; 16];
        tokio::time::timeout(T, self.s.read_exact(&mut h))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            u32::from_be_bytes(h[..4].try_into().unwrap()),
            SIMPLE_REPLY_MAGIC
        );
        let error = u32::from_be_bytes(h[4..8].try_into().unwrap());
        let cookie = u64::from_be_bytes(h[8..16].try_into().unwrap());
        let mut data = vec![0u8; if error == 0 { data_len } else { 0 }];
        self.s.read_exact(&mut data).await.unwrap();
        Reply {
            error,
            cookie,
            data,
        }
    }

    /// One structured chunk: (flags, type, cookie, payload).
    async fn chunk(&mut self) -> (u16, u16, u64, Vec<u8>) {
        let mut h = [0u8; 20];
        tokio::time::timeout(T, self.s.read_exact(&mut h))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            u32::from_be_bytes(h[..4].try_into().unwrap()),
            STRUCTURED_REPLY_MAGIC
        );
        let flags = u16::from_be_bytes(h[4..6].try_into().unwrap());
        let kind = u16::from_be_bytes(h[6..8].try_into().unwrap());
        let cookie = u64::from_be_bytes(h[8..16].try_into().unwrap());
        let len = u32::from_be_bytes(h[16..20].try_into().unwrap());
        let mut p = vec![0u8; len as usize];
        self.s.read_exact(&mut p).await.unwrap();
        (flags, kind, cookie, p)
    }

    /// Waits for the server to close the connection; returns its result.
    async fn closed(mut self) -> Result<(), NbdError> {
        let mut rest = Vec::new();
        tokio::time::timeout(T, self.s.read_to_end(&mut rest))
            .await
            .unwrap()
            .unwrap();
        tokio::time::timeout(T, self.srv).await.unwrap().unwrap()
    }

    async fn disconnect(mut self) -> Result<(), NbdError> {
        self.request(CMD_DISC, 0, 0, 0, 0).await;
        self.closed().await
    }
}

fn mem_server() -> (Server, Arc<MemDev>) {
    let dev = Arc::new(MemDev::new(SIZE));
    (
        server_with(vec![export("disk", dev.clone())], ServerConfig::default()),
        dev,
    )
}

fn dev_bytes(dev: &dyn BlockDev) -> Vec<u8> {
    let mut v = vec![0u8; dev.size() as usize];
    dev.read(0, &mut v).unwrap();
    v
}

// ---------------------------------------------------------------------------------
// Handshake
// ---------------------------------------------------------------------------------

#[tokio::test]
async fn unknown_client_flags_disconnect() {
    let (server, _) = mem_server();
    let mut c = Client::connect(&server).await;
    c.s.write_all(&0x80u32.to_be_bytes()).await.unwrap();
    assert!(matches!(
        c.closed().await,
        Err(NbdError::Protocol(ProtoError::BadClientFlags(0x80)))
    ));
}

#[tokio::test]
async fn wrong_option_magic_disconnects() {
    let (server, _) = mem_server();
    let mut c = Client::start(&server).await;
    c.s.write_all(b"NOTMAGIC\0\0\0\x07\0\0\0\0").await.unwrap();
    assert!(matches!(
        c.closed().await,
        Err(NbdError::Protocol(ProtoError::BadMagic(_)))
    ));
}

#[tokio::test]
async fn oversized_option_disconnects() {
    let (server, _) = mem_server();
    let mut c = Client::start(&server).await;
    let mut m = IHAVEOPT.to_be_bytes().to_vec();
    m.extend_from_slice(&OPT_LIST.to_be_bytes());
    m.extend_from_slice(&(MAX_OPTION_LEN + 1).to_be_bytes());
    c.s.write_all(&m).await.unwrap();
    assert!(matches!(
        c.closed().await,
        Err(NbdError::Protocol(ProtoError::OptionTooLong { .. }))
    ));
}

/// Data of a meta context option: export name, then the queries.
fn meta_data(name: &str, queries: &[&str]) -> Vec<u8> {
    let mut d = (name.len() as u32).to_be_bytes().to_vec();
    d.extend_from_slice(name.as_bytes());
    d.extend_from_slice(&(queries.len() as u32).to_be_bytes());
    for q in queries {
        d.extend_from_slice(&(q.len() as u32).to_be_bytes());
        d.extend_from_slice(q.as_bytes());
    }
    d
}

/// Replies to a meta context option: the contexts (id, name) and the final reply.
async fn meta_replies(c: &mut Client, option: u32) -> (Vec<(u32, String)>, u32) {
    let mut ctx = Vec::new();
    loop {
        let (opt, rep, d) = c.option_reply().await;
        assert_eq!(opt, option);
        if rep != REP_META_CONTEXT {
            return (ctx, rep);
        }
        let id = u32::from_be_bytes(d[..4].try_into().unwrap());
        ctx.push((id, String::from_utf8(d[4..].to_vec()).unwrap()));
    }
}

/// Listing and selecting `base:allocation`, then block status: holes where
/// nothing is written, data where it is, EINVAL out of range or without a
/// selected context, and a selection for another export does not count.
#[tokio::test]
async fn meta_contexts_and_block_status() {
    let (server, dev) = mem_server();
    dev.write(128 * 1024, &[1u8; 100], false).unwrap();
    let mut c = Client::start(&server).await;
    c.option(OPT_STRUCTURED_REPLY, &[]).await;
    assert_eq!(c.option_reply().await.1, REP_ACK);
    let base = (0, META_BASE_ALLOCATION.to_string());
    for q in [&[][..], &["base:"], &["base:allocation", "x-other:thing"]] {
        c.option(OPT_LIST_META_CONTEXT, &meta_data("disk", q)).await;
        assert_eq!(
            meta_replies(&mut c, OPT_LIST_META_CONTEXT).await,
            (vec![base.clone()], REP_ACK),
            "{q:?}"
        );
    }
    c.option(OPT_LIST_META_CONTEXT, &meta_data("nope", &[]))
        .await;
    assert_eq!(
        meta_replies(&mut c, OPT_LIST_META_CONTEXT).await,
        (vec![], REP_ERR_UNKNOWN)
    );
    // A namespace alone selects nothing; the name does.
    c.option(OPT_SET_META_CONTEXT, &meta_data("disk", &["base:"]))
        .await;
    assert_eq!(
        meta_replies(&mut c, OPT_SET_META_CONTEXT).await,
        (vec![], REP_ACK)
    );
    c.option(
        OPT_SET_META_CONTEXT,
        &meta_data("disk", &[META_BASE_ALLOCATION]),
    )
    .await;
    let (ctx, rep) = meta_replies(&mut c, OPT_SET_META_CONTEXT).await;
    assert_eq!(
        (ctx, rep),
        (
            vec![(META_BASE_ALLOCATION_ID, META_BASE_ALLOCATION.into())],
            REP_ACK
        )
    );
    let (rep, _) = c.info(OPT_GO, "disk", &[]).await;
    assert_eq!(rep, REP_ACK);
    c.request(CMD_BLOCK_STATUS, 0, 5, 0, SIZE as u32).await;
    let (flags, kind, cookie, p) = c.chunk().await;
    assert_eq!(
        (flags, kind, cookie),
        (REPLY_FLAG_DONE, REPLY_TYPE_BLOCK_STATUS, 5)
    );
    let descs: Vec<(u32, u32)> = p[4..]
        .chunks_exact(8)
        .map(|d| {
            (
                u32::from_be_bytes(d[..4].try_into().unwrap()),
                u32::from_be_bytes(d[4..].try_into().unwrap()),
            )
        })
        .collect();
    let hz = STATE_HOLE | STATE_ZERO;
    // MemDev allocates in 64 KiB chunks.
    assert_eq!(
        descs,
        [
            (128 << 10, hz),
            (64 << 10, 0),
            ((SIZE as u32) - (192 << 10), hz)
        ]
    );
    c.request(CMD_BLOCK_STATUS, CMD_FLAG_REQ_ONE, 6, 0, SIZE as u32)
        .await;
    let (_, _, _, p) = c.chunk().await;
    assert_eq!(p.len(), 12, "one descriptor with REQ_ONE");
    c.request(CMD_BLOCK_STATUS, 0, 7, SIZE - 512, 1024).await;
    let (_, kind, _, p) = c.chunk().await;
    assert_eq!(
        (kind, u32::from_be_bytes(p[..4].try_into().unwrap())),
        (REPLY_TYPE_ERROR, EINVAL)
    );
    c.disconnect().await.unwrap();

    // Selected for another export, then GO on this one: no context.
    let server = server_with(
        vec![
            export("disk", dev.clone()),
            export("other", Arc::new(MemDev::new(SIZE))),
        ],
        ServerConfig::default(),
    );
    let mut c = Client::start(&server).await;
    c.option(OPT_STRUCTURED_REPLY, &[]).await;
    assert_eq!(c.option_reply().await.1, REP_ACK);
    c.option(
        OPT_SET_META_CONTEXT,
        &meta_data("other", &[META_BASE_ALLOCATION]),
    )
    .await;
    assert_eq!(meta_replies(&mut c, OPT_SET_META_CONTEXT).await.1, REP_ACK);
    let (rep, _) = c.info(OPT_GO, "disk", &[]).await;
    assert_eq!(rep, REP_ACK);
    c.request(CMD_BLOCK_STATUS, 0, 8, 0, 4096).await;
    let (_, kind, _, p) = c.chunk().await;
    assert_eq!(
        (kind, u32::from_be_bytes(p[..4].try_into().unwrap())),
        (REPLY_TYPE_ERROR, EINVAL)
    );
    c.disconnect().await.unwrap();
}

#[tokio::test]
async fn unknown_and_malformed_options_keep_negotiating() {
    let (server, _) = mem_server();
    let mut c = Client::start(&server).await;
    c.option(0xdead, b"whatever").await;
    assert_eq!(c.option_reply().await.1, REP_ERR_UNSUP);
    c.option(OPT_STARTTLS, &[]).await;
    assert_eq!(c.option_reply().await.1, REP_ERR_UNSUP);
    // Meta contexts need structured replies first.
    c.option(OPT_SET_META_CONTEXT, &[0; 8]).await;
    assert_eq!(c.option_reply().await.1, REP_ERR_INVALID);
    c.option(OPT_LIST, b"x").await;
    assert_eq!(c.option_reply().await.1, REP_ERR_INVALID);
    c.option(OPT_STRUCTURED_REPLY, b"x").await;
    assert_eq!(c.option_reply().await.1, REP_ERR_INVALID);
    // Name length pointing past the data.
    c.option(OPT_GO, &[0, 0, 0, 9, b'd', 0, 0]).await;
    assert_eq!(c.option_reply().await.1, REP_ERR_INVALID);
    // Request count not matching the length.
    c.option(OPT_INFO, &[0, 0, 0, 0, 0, 2, 0, 3]).await;
    assert_eq!(c.option_reply().await.1, REP_ERR_INVALID);
    // Still negotiating: GO works.
    let (rep, _) = c.info(OPT_GO, "disk", &[]).await;
    assert_eq!(rep, REP_ACK);
    assert!(c.disconnect().await.is_ok());
}

#[tokio::test]
async fn unknown_export() {
    let (server, _) = mem_server();
    let mut c = Client::start(&server).await;
    let (rep, infos) = c.info(OPT_INFO, "nope", &[]).await;
    assert_eq!((rep, infos.len()), (REP_ERR_UNKNOWN, 0));
    let (rep, _) = c.info(OPT_GO, "nope", &[]).await;
    assert_eq!(rep, REP_ERR_UNKNOWN);
    // NBD_OPT_EXPORT_NAME cannot report an error: the server hangs up.
    c.option(OPT_EXPORT_NAME, b"nope").await;
    assert!(matches!(c.closed().await, Err(NbdError::UnknownExport(n)) if n == "nope"));
}

#[tokio::test]
async fn list_returns_exports() {
    let server = server_with(
        vec![
            export("disk", Arc::new(MemDev::new(SIZE))),
            export("other", Arc::new(MemDev::new(4096))),
        ],
        ServerConfig::default(),
    );
    let mut c = Client::start(&server).await;
    c.option(OPT_LIST, &[]).await;
    let mut got = Vec::new();
    loop {
        let (opt, rep, d) = c.option_reply().await;
        assert_eq!(opt, OPT_LIST);
        if rep == REP_ACK {
            break;
        }
        assert_eq!(rep, REP_SERVER);
        let n = u32::from_be_bytes(d[..4].try_into().unwrap()) as usize;
        got.push((
            String::from_utf8(d[4..4 + n].to_vec()).unwrap(),
            String::from_utf8(d[4 + n..].to_vec()).unwrap(),
        ));
    }
    assert_eq!(
        got,
        vec![
            ("disk".into(), "disk device".into()),
            ("other".into(), "other device".into())
        ]
    );
    c.option(OPT_ABORT, &[]).await;
    assert_eq!(c.option_reply().await.1, REP_ACK);
    assert!(c.closed().await.is_ok());
}

#[tokio::test]
async fn info_and_go_report_export_and_block_sizes() {
    let mut rec = Recorder::new(SIZE);
    rec.sizes = BlockSizes {
        minimum: 512,
        preferred: 4096,
        maximum: 64 << 20,
    };
    let mut ro = Recorder::new(8192);
    ro.read_only = true;
    let config = ServerConfig {
        max_payload: 1 << 20,
        multi_conn: false,
        ..Default::default()
    };
    let server = server_with(
        vec![export("disk", Arc::new(rec)), export("ro", Arc::new(ro))],
        config,
    );
    let mut c = Client::start(&server).await;
    let (rep, infos) = c
        .info(
            OPT_INFO,
            "",
            &[INFO_NAME, INFO_DESCRIPTION, INFO_BLOCK_SIZE, 999],
        )
        .await;
    assert_eq!(rep, REP_ACK);
    let base = TFLAG_HAS_FLAGS
        | TFLAG_SEND_FLUSH
        | TFLAG_SEND_FUA
        | TFLAG_SEND_TRIM
        | TFLAG_SEND_WRITE_ZEROES
        | TFLAG_SEND_FAST_ZERO
        | TFLAG_SEND_CACHE;
    assert!(
        infos.contains(&info_export(SIZE, base).to_vec()),
        "{infos:?}"
    );
    assert!(infos.contains(&info_string(INFO_NAME, "disk")));
    assert!(infos.contains(&info_string(INFO_DESCRIPTION, "disk device")));
    let bs = BlockSizes {
        minimum: 512,
        preferred: 4096,
        maximum: 1 << 20,
    };
    assert!(infos.contains(&info_block_size(bs).to_vec()));
    assert_eq!(infos.len(), 4, "the unknown request 999 is ignored");

    // Read-only export, structured replies negotiated: READ_ONLY and DF flags.
    c.option(OPT_STRUCTURED_REPLY, &[]).await;
    assert_eq!(c.option_reply().await.1, REP_ACK);
    let (rep, infos) = c.info(OPT_GO, "ro", &[]).await;
    assert_eq!(rep, REP_ACK);
    assert!(infos.contains(&info_export(8192, base | TFLAG_READ_ONLY | TFLAG_SEND_DF).to_vec()));
    assert!(c.disconnect().await.is_ok());

    // multi_conn on by default.
    let (server, _) = mem_server();
    let (c, size, flags) = Client::go(&server, "disk", false).await;
    assert_eq!(size, SIZE);
    assert_eq!(flags, base | TFLAG_CAN_MULTI_CONN);
    assert!(c.disconnect().await.is_ok());
}

#[tokio::test]
async fn export_name_with_and_without_zeroes() {
    for (client_flags, len) in [(1u32, 134usize), (3, 10)] {
        let (server, _) = mem_server();
        let mut c = Client::connect(&server).await;
        c.s.write_all(&client_flags.to_be_bytes()).await.unwrap();
        c.option(OPT_EXPORT_NAME, b"disk").await;
        let mut r = vec![0u8; len];
        c.s.read_exact(&mut r).await.unwrap();
        assert_eq!(u64::from_be_bytes(r[..8].try_into().unwrap()), SIZE);
        assert!(r[10..].iter().all(|&b| b == 0));
        // Transmission works right after.
        c.write(1, 0, b"abc", 0).await;
        assert_eq!(c.simple(0).await.error, 0);
        assert!(c.disconnect().await.is_ok());
    }
}

#[tokio::test]
async fn client_leaving_during_handshake_is_clean() {
    let (server, _) = mem_server();
    let c = Client::start(&server).await;
    drop(c.s);
    assert!(c.srv.await.unwrap().is_ok());
    // Mid-option is a hang-up.
    let mut c = Client::start(&server).await;
    c.s.write_all(&IHAVEOPT.to_be_bytes()).await.unwrap();
    let Client { s, srv } = c;
    drop(s);
    assert!(matches!(srv.await.unwrap(), Err(NbdError::HungUp)));
}

// ---------------------------------------------------------------------------------
// Transmission
// ---------------------------------------------------------------------------------

#[tokio::test]
async fn write_then_read_back() {
    let (server, dev) = mem_server();
    let (mut c, _, _) = Client::go(&server, "disk", false).await;
    let data: Vec<u8> = (0..10_000u32).map(|i| (i * 7) as u8).collect();
    c.write(1, 12_345, &data, 0).await;
    let r = c.simple(0).await;
    assert_eq!((r.error, r.cookie), (0, 1));
    c.request(CMD_READ, 0, 2, 12_345, 10_000).await;
    let r = c.simple(10_000).await;
    assert_eq!((r.error, r.cookie), (0, 2));
    assert_eq!(r.data, data);
    assert_eq!(&dev_bytes(&*dev)[12_345..22_345], &data[..]);
    assert!(c.disconnect().await.is_ok());
}

#[tokio::test]
async fn out_of_range_requests_get_einval_and_touch_nothing() {
    let (server, dev) = mem_server();
    dev.write(0, &vec![0x5a; SIZE as usize], false).unwrap();
    let before = dev_bytes(&*dev);
    let (mut c, _, _) = Client::go(&server, "disk", false).await;
    // Write straddling the end: EINVAL, payload consumed.
    c.write(1, SIZE - 10, &[1u8; 20], 0).await;
    assert_eq!(c.simple(0).await.error, EINVAL);
    // Offset that overflows u64.
    c.write(2, u64::MAX - 5, &[2u8; 20], 0).await;
    assert_eq!(c.simple(0).await.error, EINVAL);
    c.request(CMD_READ, 0, 3, SIZE, 1).await;
    let r = c.simple(1).await;
    assert_eq!((r.error, r.cookie, r.data.len()), (EINVAL, 3, 0));
    c.request(CMD_TRIM, 0, 4, SIZE - 1, 2).await;
    assert_eq!(c.simple(0).await.error, EINVAL);
    c.request(CMD_WRITE_ZEROES, 0, 5, u64::MAX, u32::MAX).await;
    assert_eq!(c.simple(0).await.error, EINVAL);
    c.request(CMD_CACHE, 0, 6, SIZE, 1).await;
    assert_eq!(c.simple(0).await.error, EINVAL);
    // The stream is still in sync: a good write lands exactly where asked.
    c.write(7, SIZE - 4, b"tail", 0).await;
    let r = c.simple(0).await;
    assert_eq!((r.error, r.cookie), (0, 7));
    let after = dev_bytes(&*dev);
    assert_eq!(&after[..SIZE as usize - 4], &before[..SIZE as usize - 4]);
    assert_eq!(&after[SIZE as usize - 4..], b"tail");
    assert!(c.disconnect().await.is_ok());
}

#[tokio::test]
async fn oversized_write_disconnects_without_writing() {
    let config = ServerConfig {
        max_payload: 64 * 1024,
        ..Default::default()
    };
    let dev = Arc::new(MemDev::new(SIZE));
    let server = server_with(vec![export("disk", dev.clone())], config);
    let (mut c, _, _) = Client::go(&server, "disk", false).await;
    c.write(1, 0, &[7u8; 64 * 1024 + 1], 0).await;
    assert!(matches!(
        c.closed().await,
        Err(NbdError::Protocol(ProtoError::PayloadTooLarge {
            len: 65537,
            max: 65536
        }))
    ));
    assert!(dev_bytes(&*dev).iter().all(|&b| b == 0));
}

#[tokio::test]
async fn oversized_read_gets_eoverflow() {
    let config = ServerConfig {
        max_payload: 64 * 1024,
        ..Default::default()
    };
    let server = server_with(vec![export("disk", Arc::new(MemDev::new(SIZE)))], config);
    let (mut c, _, _) = Client::go(&server, "disk", false).await;
    c.request(CMD_READ, 0, 1, 0, 64 * 1024 + 1).await;
    assert_eq!(c.simple(0).await.error, EOVERFLOW);
    c.request(CMD_READ, 0, 2, 0, 64 * 1024).await;
    assert_eq!(c.simple(64 * 1024).await.error, 0);
    assert!(c.disconnect().await.is_ok());
}

#[tokio::test]
async fn unknown_commands_and_flags_get_einval() {
    let (server, dev) = mem_server();
    let (mut c, _, _) = Client::go(&server, "disk", false).await;
    c.request(42, 0, 1, 0, 0).await;
    assert_eq!(c.simple(0).await.error, EINVAL);
    c.request(CMD_BLOCK_STATUS, 0, 2, 0, 512).await;
    assert_eq!(c.simple(0).await.error, EINVAL);
    c.request(CMD_FLUSH, 0x8000, 3, 0, 0).await;
    assert_eq!(c.simple(0).await.error, EINVAL);
    // DF without structured replies is not allowed.
    c.request(CMD_READ, CMD_FLAG_DF, 4, 0, 512).await;
    assert_eq!(c.simple(512).await.error, EINVAL);
    // A write with bad flags: EINVAL, payload skipped, nothing written.
    c.write(5, 0, &[9u8; 100], CMD_FLAG_NO_HOLE).await;
    assert_eq!(c.simple(0).await.error, EINVAL);
    c.request(CMD_READ, 0, 6, 0, 100).await;
    let r = c.simple(100).await;
    assert_eq!((r.error, r.cookie), (0, 6));
    assert!(r.data.iter().all(|&b| b == 0));
    assert!(dev_bytes(&*dev).iter().all(|&b| b == 0));
    assert!(c.disconnect().await.is_ok());
}

#[tokio::test]
async fn bad_request_magic_disconnects_after_earlier_replies() {
    let (server, _) = mem_server();
    let (mut c, _, _) = Client::go(&server, "disk", false).await;
    c.request(CMD_FLUSH, 0, 1, 0, 0).await;
    c.s.write_all(&[0u8; 28]).await.unwrap();
    assert_eq!(c.simple(0).await.cookie, 1);
    assert!(matches!(
        c.closed().await,
        Err(NbdError::Protocol(ProtoError::BadMagic(0)))
    ));
}

#[tokio::test]
async fn hang_up_mid_write_leaves_device_unchanged() {
    let (server, dev) = mem_server();
    let (mut c, _, _) = Client::go(&server, "disk", false).await;
    c.request(CMD_WRITE, 0, 1, 4096, 8192).await;
    c.s.write_all(&[0xee; 5000]).await.unwrap();
    c.s.flush().await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let Client { s, srv } = c;
    drop(s);
    assert!(matches!(srv.await.unwrap(), Err(NbdError::HungUp)));
    assert!(dev_bytes(&*dev).iter().all(|&b| b == 0));
    // Hanging up inside a request header is a hang-up too.
    let (mut c, _, _) = Client::go(&server, "disk", false).await;
    c.s.write_all(&REQUEST_MAGIC.to_be_bytes()).await.unwrap();
    let Client { s, srv } = c;
    drop(s);
    assert!(matches!(srv.await.unwrap(), Err(NbdError::HungUp)));
}

#[tokio::test]
async fn fua_flush_trim_zeroes_cache() {
    let rec = Arc::new(Recorder::new(SIZE));
    let server = server_with(vec![export("disk", rec.clone())], ServerConfig::default());
    let (mut c, _, _) = Client::go(&server, "disk", false).await;
    c.write(1, 0, &[0xffu8; 8192], CMD_FLAG_FUA).await;
    c.write(2, 8192, &[0xffu8; 8192], 0).await;
    c.request(CMD_FLUSH, 0, 3, 0, 0).await;
    c.request(CMD_TRIM, CMD_FLAG_FUA, 4, 0, 4096).await;
    c.request(
        CMD_WRITE_ZEROES,
        CMD_FLAG_FUA | CMD_FLAG_NO_HOLE,
        5,
        8192,
        100,
    )
    .await;
    c.request(CMD_WRITE_ZEROES, 0, 6, 9000, 100).await;
    c.request(CMD_CACHE, 0, 7, 0, 65536).await;
    // Syncs reply when they finish: in any order.
    let mut replies = Vec::new();
    for _ in 1..=7 {
        let r = c.simple(0).await;
        replies.push((r.cookie, r.error));
    }
    replies.sort_unstable();
    assert_eq!(replies, (1..=7).map(|c| (c, 0)).collect::<Vec<_>>());
    // The data is written on the reader, without FUA...
    assert_eq!(
        rec.take_log(),
        vec![
            "write 0 8192 fua=false",
            "write 8192 8192 fua=false",
            "trim 0 4096",
            "zero 8192 100 fua=false",
            "zero 9000 100 fua=false",
        ]
    );
    // ...and each FUA command's sync, and the flush, came after what they
    // cover: the FUA write (log entry 1), both writes (2), the FUA trim (3)
    // and the FUA zeroing (4).
    let mut syncs = rec.take_syncs();
    syncs.sort_unstable();
    assert_eq!(
        syncs.iter().map(|s| s.0).collect::<Vec<_>>(),
        ["flush", "sync", "sync", "sync"]
    );
    assert!(syncs[0].1 >= 2, "{syncs:?}");
    let mut at: Vec<usize> = syncs[1..].iter().map(|s| s.1).collect();
    at.sort_unstable();
    assert!(at[0] >= 1 && at[1] >= 3 && at[2] >= 4, "{syncs:?}");
    let b = dev_bytes(&*rec);
    assert!(b[..4096].iter().all(|&x| x == 0), "trimmed");
    assert!(b[4096..8192].iter().all(|&x| x == 0xff));
    assert!(b[8192..8292].iter().all(|&x| x == 0), "zeroed");
    assert!(b[8292..9000].iter().all(|&x| x == 0xff));
    assert!(b[9000..9100].iter().all(|&x| x == 0), "zeroed");
    assert!(b[9100..16384].iter().all(|&x| x == 0xff));
    assert!(c.disconnect().await.is_ok());
}

#[tokio::test]
async fn read_only_export_refuses_writes_with_eperm() {
    let mut rec = Recorder::new(SIZE);
    rec.read_only = true;
    let rec = Arc::new(rec);
    let server = server_with(vec![export("disk", rec.clone())], ServerConfig::default());
    let (mut c, _, flags) = Client::go(&server, "disk", false).await;
    assert_ne!(flags & TFLAG_READ_ONLY, 0);
    c.write(1, 0, &[1u8; 512], 0).await;
    assert_eq!(c.simple(0).await.error, EPERM);
    c.request(CMD_TRIM, 0, 2, 0, 512).await;
    assert_eq!(c.simple(0).await.error, EPERM);
    c.request(CMD_WRITE_ZEROES, 0, 3, 0, 512).await;
    assert_eq!(c.simple(0).await.error, EPERM);
    c.request(CMD_READ, 0, 4, 0, 512).await;
    assert_eq!(c.simple(512).await.error, 0);
    assert!(rec.take_log().is_empty(), "no write reached the device");
    assert!(c.disconnect().await.is_ok());
}

#[tokio::test]
async fn device_errors_map_to_errno() {
    for (err, errno) in [
        (IoError::Media("bad block".into()), EIO),
        (IoError::NoSpace("full".into()), ENOSPC),
        (IoError::ReadOnly, EPERM),
    ] {
        let server = server_with(
            vec![export("disk", Arc::new(Failing(err)))],
            ServerConfig::default(),
        );
        let (mut c, _, _) = Client::go(&server, "disk", false).await;
        c.write(1, 0, &[1u8; 512], 0).await;
        assert_eq!(c.simple(0).await.error, errno);
        c.request(CMD_READ, 0, 2, 0, 512).await;
        assert_eq!(c.simple(512).await.error, errno);
        c.request(CMD_FLUSH, 0, 3, 0, 0).await;
        assert_eq!(c.simple(0).await.error, errno);
        assert!(c.disconnect().await.is_ok());
    }
}

/// A MemDev with bugs: reads past 64 KiB, writes starting with 0xEE and trims
/// panic.
struct Buggy(MemDev);

impl BlockDev for Buggy {
    fn size(&self) -> u64 {
        SIZE
    }
    fn read(&self, offset: u64, buf: &mut [u8]) -> IoResult {
        assert!(offset < 65536, "read bug at {offset}");
        self.0.read(offset, buf)
    }
    fn write(&self, offset: u64, data: &[u8], fua: bool) -> IoResult {
        if data.first() == Some(&0xEE) {
            panic!("write bug");
        }
        self.0.write(offset, data, fua)
    }
    fn flush(&self) -> IoResult {
        self.0.flush()
    }
    fn trim(&self, _: u64, _: u64) -> IoResult {
        panic!("trim bug")
    }
    fn write_zeroes(&self, offset: u64, len: u64, fua: bool) -> IoResult {
        self.0.write_zeroes(offset, len, fua)
    }
}

/// A panic in the device fails its request with EIO, replied in place with
/// its own cookie, and the connection goes on: small and large reads, writes,
/// trims, in simple and structured replies.
#[tokio::test]
async fn a_panicking_device_fails_the_request_not_the_connection() {
    for structured in [false, true] {
        let server = server_with(
            vec![export("disk", Arc::new(Buggy(MemDev::new(SIZE))))],
            ServerConfig::default(),
        );
        let (mut c, _, _) = Client::go(&server, "disk", structured).await;
        c.write(1, 0, b"good data", 0).await;
        assert_eq!(c.simple(0).await.error, 0);
        let sends: [(u64, &str); 4] = [
            (2, "write bug"),
            (3, "trim bug"),
            (4, "read bug"),
            (5, "read bug"),
        ];
        for (cookie, bug) in sends {
            match cookie {
                2 => c.write(2, 4096, &[0xEE; 512], 0).await,
                3 => c.request(CMD_TRIM, 0, 3, 0, 4096).await,
                4 => c.request(CMD_READ, 0, 4, 65536, 512).await,
                _ => c.request(CMD_READ, 0, 5, 65536, 256 * 1024).await,
            }
            if structured {
                let (_, kind, got, p) = c.chunk().await;
                assert_eq!((got, kind), (cookie, REPLY_TYPE_ERROR));
                assert_eq!(u32::from_be_bytes(p[..4].try_into().unwrap()), EIO);
                let msg = String::from_utf8_lossy(&p[6..]).into_owned();
                assert!(msg.contains(bug), "{msg}");
            } else {
                let r = c.simple(0).await;
                assert_eq!((r.cookie, r.error), (cookie, EIO), "{bug}");
            }
        }
        // The stream is intact: the next request is answered normally.
        c.request(CMD_READ, 0, 6, 0, 9).await;
        if structured {
            let (_, _, cookie, p) = c.chunk().await;
            assert_eq!((cookie, &p[8..]), (6, &b"good data"[..]));
        } else {
            let r = c.simple(9).await;
            assert_eq!((r.cookie, r.error, &r.data[..]), (6, 0, &b"good data"[..]));
        }
        assert!(c.disconnect().await.is_ok());
    }
}

/// Small reads (copied into the output queue) and large ones (attached to it
/// and sent from their own buffers, which are reused) pipelined back to back:
/// every reply carries its own data, in order, simple and structured.
#[tokio::test]
async fn pipelined_small_and_large_reads_each_get_their_own_data() {
    let dev = Arc::new(MemDev::new(4 << 20));
    let pattern: Vec<u8> = (0..(2 << 20))
        .map(|i: u32| (i % 251) as u8 ^ (i >> 12) as u8)
        .collect();
    dev.write(0, &pattern, false).unwrap();
    let server = server_with(vec![export("disk", dev)], ServerConfig::default());
    for structured in [false, true] {
        let (mut c, _, _) = Client::go(&server, "disk", structured).await;
        let reqs: Vec<(u64, u32)> = (0..40u64)
            .map(|i| {
                let len = [4096u32, 128 << 10, 512, 64 << 10, 1 << 20][(i % 5) as usize];
                ((i * 37 * 4096) % ((2 << 20) - (1 << 20)), len)
            })
            .collect();
        for (k, &(off, len)) in reqs.iter().enumerate() {
            c.request(CMD_READ, 0, k as u64 + 1, off, len).await;
        }
        for (k, &(off, len)) in reqs.iter().enumerate() {
            let want = &pattern[off as usize..(off + u64::from(len)) as usize];
            if structured {
                let (_, kind, cookie, p) = c.chunk().await;
                assert_eq!((cookie, kind), (k as u64 + 1, REPLY_TYPE_OFFSET_DATA));
                assert_eq!(u64::from_be_bytes(p[..8].try_into().unwrap()), off);
                assert!(
                    &p[8..] == want,
                    "read {k} ({len} bytes at {off}) has the wrong data"
                );
            } else {
                let r = c.simple(len as usize).await;
                assert_eq!((r.cookie, r.error), (k as u64 + 1, 0));
                assert!(
                    &r.data[..] == want,
                    "read {k} ({len} bytes at {off}) has the wrong data"
                );
            }
        }
        assert!(c.disconnect().await.is_ok());
    }
}

/// Lends its memory to reads ([`BlockDev::read_lent`]) in 16 KiB loans; a
/// write recalls every loan still out before it changes a byte, as the
/// flash device recalls a block's loans before its erase.
struct Lender {
    mem: Arc<LenderMem>,
    /// The loans out; its lock is the device's (reads and writes take it).
    loans: Mutex<Vec<blockdev::Recall>>,
    reads: AtomicU64,
    recalled: AtomicU64,
}

/// Memory written through a raw pointer while loans of it are out.
struct LenderMem {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the bytes are written under `Lender::loans`' lock only, after
// every loan of them is recalled.
unsafe impl Send for LenderMem {}
// SAFETY: as for Send.
unsafe impl Sync for LenderMem {}

impl Drop for LenderMem {
    fn drop(&mut self) {
        // SAFETY: allocated by `Lender::new` as a boxed slice of `len`.
        drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(self.ptr, self.len)) });
    }
}

impl Lender {
    fn new(len: usize) -> Self {
        let ptr = Box::into_raw(vec![0u8; len].into_boxed_slice()).cast::<u8>();
        Self {
            mem: Arc::new(LenderMem { ptr, len }),
            loans: Mutex::new(Vec::new()),
            reads: AtomicU64::new(0),
            recalled: AtomicU64::new(0),
        }
    }
}

impl Lender {
    /// Waits until the server has stopped reading (its pipe and queue are
    /// full of the replies to a burst of `n` reads, at least one of them
    /// still to come), then overwrites every byte with `byte`, which
    /// recalls the loans still out. Returns the reads done before.
    async fn overwrite_once_stalled(&self, n: u64, byte: u8) -> u64 {
        let mut before = u64::MAX;
        while self.reads.load(Ordering::SeqCst) != before {
            before = self.reads.load(Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        self.write(0, &vec![byte; self.mem.len], false).unwrap();
        assert!(
            (1..n).contains(&before),
            "the reader stalled after {before} of {n} reads"
        );
        assert!(
            self.recalled.load(Ordering::SeqCst) > 0,
            "some loans were still queued when the device changed"
        );
        before
    }
}

impl BlockDev for Lender {
    fn size(&self) -> u64 {
        self.mem.len as u64
    }
    fn read(&self, offset: u64, buf: &mut [u8]) -> IoResult {
        let _g = self.loans.lock();
        blockdev::check_range(offset, buf.len() as u64, self.size())?;
        // SAFETY: in range; writes wait for the lock we hold.
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.mem.ptr.add(offset as usize),
                buf.as_mut_ptr(),
                buf.len(),
            )
        };
        self.reads.fetch_add(1, Ordering::SeqCst);
        Ok(0)
    }
    fn read_lent(&self, offset: u64, len: usize) -> Option<IoResult<(u64, Vec<blockdev::Loan>)>> {
        let mut out = self.loans.lock();
        if let Err(e) = blockdev::check_range(offset, len as u64, self.size()) {
            return Some(Err(e));
        }
        let mut loans = Vec::new();
        for at in (0..len).step_by(16 << 10) {
            let n = (len - at).min(16 << 10);
            let keep: Arc<dyn Send + Sync> = self.mem.clone();
            // SAFETY: in range; a write recalls every listed loan before it
            // changes a byte.
            let (loan, recall) =
                unsafe { blockdev::Loan::new(self.mem.ptr.add(offset as usize + at), n, keep) };
            out.push(recall);
            loans.push(loan);
        }
        self.reads.fetch_add(1, Ordering::SeqCst);
        Some(Ok((0, loans)))
    }
    fn write(&self, offset: u64, data: &[u8], _fua: bool) -> IoResult {
        let mut out = self.loans.lock();
        blockdev::check_range(offset, data.len() as u64, self.size())?;
        for r in out.drain(..) {
            if r.recall() {
                self.recalled.fetch_add(1, Ordering::SeqCst);
            }
        }
        // SAFETY: in range; no loan reads these bytes any more.
        unsafe {
            std::ptr::copy_nonoverlapping(
                data.as_ptr(),
                self.mem.ptr.add(offset as usize),
                data.len(),
            )
        };
        Ok(0)
    }
    fn flush(&self) -> IoResult {
        Ok(0)
    }
    fn trim(&self, offset: u64, len: u64) -> IoResult {
        self.write(offset, &vec![0u8; len as usize], false)
    }
    fn write_zeroes(&self, offset: u64, len: u64, _fua: bool) -> IoResult {
        self.trim(offset, len)
    }
}

/// Large reads go out from the device's loans; while their replies wait for
/// a client that does not read, the device overwrites everything. Every
/// reply read before the overwrite carries the old bytes (its loans were
/// recalled: copied before the change), every later one the new, none a mix.
#[tokio::test]
async fn lent_reads_keep_their_bytes_when_recalled_while_queued() {
    const LEN: u32 = 128 << 10;
    const N: u64 = 64; // 8 MiB of replies: more than the pipe and the queue hold
    for structured in [false, true] {
        let dev = Arc::new(Lender::new(2 << 20));
        dev.write(0, &vec![0xAA; 2 << 20], false).unwrap();
        let server = server_with(vec![export("disk", dev.clone())], ServerConfig::default());
        let (mut c, _, _) = Client::go(&server, "disk", structured).await;
        for i in 0..N {
            c.request(CMD_READ, 0, i + 1, (i % 16) * u64::from(LEN), LEN)
                .await;
        }
        let before = dev.overwrite_once_stalled(N, 0x55).await;
        for i in 0..N {
            let data = if structured {
                let (_, kind, cookie, p) = c.chunk().await;
                assert_eq!((cookie, kind), (i + 1, REPLY_TYPE_OFFSET_DATA));
                p[8..].to_vec()
            } else {
                let r = c.simple(LEN as usize).await;
                assert_eq!((r.cookie, r.error), (i + 1, 0));
                r.data
            };
            let want = if i < before { 0xAA } else { 0x55 };
            assert!(
                data.iter().all(|&b| b == want),
                "reply {i} (read {}) holds other bytes than its read's",
                if i < before {
                    "before the overwrite"
                } else {
                    "after it"
                }
            );
        }
        assert!(c.disconnect().await.is_ok());
    }
}

/// As above, over TLS: a loan recalled while OpenSSL waits to finish a
/// write of its bytes is retried from the copy, at another address, which
/// OpenSSL accepts only with `SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER` (without
/// it the retry fails with "bad write retry" and the connection is lost).
#[tokio::test]
async fn lent_reads_over_tls_survive_a_recall_mid_write() {
    use crate::tls::{PskKeys, Tls, TlsMode, TlsSetup};
    const LEN: u32 = 128 << 10;
    const N: u64 = 32;
    const KEY: [u8; 16] = [0x11; 16];
    let dev = Arc::new(Lender::new(2 << 20));
    dev.write(0, &vec![0xAA; 2 << 20], false).unwrap();
    let tls = Tls::new(TlsSetup {
        mode: TlsMode::Require,
        psk: Some(PskKeys::parse("alice:11111111111111111111111111111111").unwrap()),
        ..TlsSetup::default()
    })
    .unwrap()
    .map(Arc::new);
    let server = server_with(
        vec![export("disk", dev.clone())],
        ServerConfig {
            tls,
            ..ServerConfig::default()
        },
    );
    // A small pipe: the server's writer soon waits in the middle of a reply.
    let (mut a, b) = tokio::io::duplex(64 << 10);
    let srv = tokio::spawn(async move { server.handle(b).await });
    let mut greeting = [0u8; 18];
    a.read_exact(&mut greeting).await.unwrap();
    a.write_all(&3u32.to_be_bytes()).await.unwrap();
    let option = |opt: u32, data: &[u8]| {
        let mut m = IHAVEOPT.to_be_bytes().to_vec();
        m.extend_from_slice(&opt.to_be_bytes());
        m.extend_from_slice(&(data.len() as u32).to_be_bytes());
        m.extend_from_slice(data);
        m
    };
    a.write_all(&option(OPT_STARTTLS, &[])).await.unwrap();
    let mut ack = [0u8; 20];
    a.read_exact(&mut ack).await.unwrap();
    assert_eq!(u32::from_be_bytes(ack[12..16].try_into().unwrap()), REP_ACK);
    let mut cb =
        openssl::ssl::SslConnector::builder(openssl::ssl::SslMethod::tls_client()).unwrap();
    cb.set_verify(openssl::ssl::SslVerifyMode::NONE);
    cb.set_psk_client_callback(|_, _, identity, psk| {
        identity[..6].copy_from_slice(b"alice\0");
        psk[..KEY.len()].copy_from_slice(&KEY);
        Ok(KEY.len())
    });
    let ssl = cb
        .build()
        .configure()
        .unwrap()
        .verify_hostname(false)
        .into_ssl("localhost")
        .unwrap();
    let mut c = tokio_openssl::SslStream::new(ssl, a).unwrap();
    std::pin::Pin::new(&mut c).connect().await.unwrap();
    let mut go = 4u32.to_be_bytes().to_vec();
    go.extend_from_slice(b"disk");
    go.extend_from_slice(&0u16.to_be_bytes());
    c.write_all(&option(OPT_GO, &go)).await.unwrap();
    loop {
        let mut h = [0u8; 20];
        c.read_exact(&mut h).await.unwrap();
        let mut d = vec![0u8; u32::from_be_bytes(h[16..20].try_into().unwrap()) as usize];
        c.read_exact(&mut d).await.unwrap();
        if u32::from_be_bytes(h[12..16].try_into().unwrap()) == REP_ACK {
            break;
        }
    }
    for i in 0..N {
        let h = RequestHeader {
            flags: 0,
            kind: CMD_READ,
            cookie: i + 1,
            offset: (i % 16) * u64::from(LEN),
            length: LEN,
        };
        c.write_all(&encode_request(&h)).await.unwrap();
    }
    let before = dev.overwrite_once_stalled(N, 0x55).await;
    let mut buf = vec![0u8; 16 + LEN as usize];
    for i in 0..N {
        tokio::time::timeout(T, c.read_exact(&mut buf))
            .await
            .expect("a reply in time")
            .unwrap_or_else(|e| panic!("reply {i}: {e} (the server's write failed?)"));
        assert_eq!(u64::from_be_bytes(buf[8..16].try_into().unwrap()), i + 1);
        let want = if i < before { 0xAA } else { 0x55 };
        assert!(
            buf[16..].iter().all(|&b| b == want),
            "reply {i} holds other bytes than its read's"
        );
    }
    drop(c);
    let _ = srv.await;
}

#[tokio::test]
async fn alignment_is_enforced_for_devices_with_a_minimum_block() {
    let mut rec = Recorder::new(SIZE);
    rec.sizes = BlockSizes {
        minimum: 512,
        preferred: 4096,
        maximum: 1 << 20,
    };
    let rec = Arc::new(rec);
    let server = server_with(vec![export("disk", rec.clone())], ServerConfig::default());
    let (mut c, _, _) = Client::go(&server, "disk", false).await;
    c.write(1, 100, &[1u8; 512], 0).await;
    assert_eq!(c.simple(0).await.error, EINVAL);
    c.request(CMD_READ, 0, 2, 512, 100).await;
    assert_eq!(c.simple(100).await.error, EINVAL);
    // Over the advertised maximum but within the payload limit.
    c.request(CMD_READ, 0, 3, 0, (1 << 20) + 512).await;
    assert_eq!(c.simple(0).await.error, EINVAL);
    c.write(4, 512, &[1u8; 1024], 0).await;
    assert_eq!(c.simple(0).await.error, 0);
    assert_eq!(rec.take_log(), vec!["write 512 1024 fua=false"]);
    assert!(c.disconnect().await.is_ok());
}

#[tokio::test]
async fn structured_replies() {
    let dev = Arc::new(MemDev::new(SIZE));
    dev.write(4096, b"structured", false).unwrap();
    let server = server_with(
        vec![
            export("disk", dev.clone()),
            export("bad", Arc::new(Failing(IoError::Media("x".into())))),
        ],
        ServerConfig::default(),
    );
    let (mut c, _, flags) = Client::go(&server, "disk", true).await;
    assert_ne!(flags & TFLAG_SEND_DF, 0);
    c.request(CMD_READ, CMD_FLAG_DF, 1, 4096, 10).await;
    let (f, kind, cookie, p) = c.chunk().await;
    assert_eq!(
        (f, kind, cookie),
        (REPLY_FLAG_DONE, REPLY_TYPE_OFFSET_DATA, 1)
    );
    assert_eq!(u64::from_be_bytes(p[..8].try_into().unwrap()), 4096);
    assert_eq!(&p[8..], b"structured");
    // Empty read: a lone NONE chunk.
    c.request(CMD_READ, 0, 2, 0, 0).await;
    assert_eq!(
        c.chunk().await,
        (REPLY_FLAG_DONE, REPLY_TYPE_NONE, 2, vec![])
    );
    // Read error: an error chunk with errno and message.
    c.request(CMD_READ, 0, 3, SIZE, 1).await;
    let (f, kind, cookie, p) = c.chunk().await;
    assert_eq!((f, kind, cookie), (REPLY_FLAG_DONE, REPLY_TYPE_ERROR, 3));
    assert_eq!(u32::from_be_bytes(p[..4].try_into().unwrap()), EINVAL);
    let mlen = u16::from_be_bytes(p[4..6].try_into().unwrap()) as usize;
    assert_eq!(p.len(), 6 + mlen);
    assert!(mlen > 0);
    // Successful non-reads still use simple replies.
    c.write(4, 0, b"x", 0).await;
    assert_eq!(c.simple(0).await.error, 0);
    assert!(c.disconnect().await.is_ok());

    let (mut c, _, _) = Client::go(&server, "bad", true).await;
    c.request(CMD_READ, 0, 5, 0, 512).await;
    let (_, kind, _, p) = c.chunk().await;
    assert_eq!(kind, REPLY_TYPE_ERROR);
    assert_eq!(u32::from_be_bytes(p[..4].try_into().unwrap()), EIO);
    assert!(c.disconnect().await.is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_burst_larger_than_the_output_queue() {
    // 600 reads of 64 KiB (~37 MiB of replies) sent before reading any reply:
    // the reader must pause at the high-water mark and resume, losing nothing.
    let (server, dev) = mem_server();
    for i in 0..16u64 {
        dev.write(i * 65536, &[i as u8; 65536], false).unwrap();
    }
    let (c, _, _) = Client::go(&server, "disk", false).await;
    let Client { s, srv } = c;
    let (mut rd, mut wr) = tokio::io::split(s);
    let sender = tokio::spawn(async move {
        for i in 0..600u64 {
            let h = RequestHeader {
                flags: 0,
                kind: CMD_READ,
                cookie: i,
                offset: (i % 16) * 65536,
                length: 65536,
            };
            wr.write_all(&encode_request(&h)).await.unwrap();
        }
        wr
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut buf = vec![0u8; 16 + 65536];
    for i in 0..600u64 {
        tokio::time::timeout(T, rd.read_exact(&mut buf))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            u64::from_be_bytes(buf[8..16].try_into().unwrap()),
            i,
            "in order"
        );
        assert!(buf[16..].iter().all(|&b| b == (i % 16) as u8));
    }
    let mut wr = sender.await.unwrap();
    wr.write_all(&encode_request(&RequestHeader {
        flags: 0,
        kind: CMD_DISC,
        cookie: 0,
        offset: 0,
        length: 0,
    }))
    .await
    .unwrap();
    assert!(srv.await.unwrap().is_ok());
}

// ---------------------------------------------------------------------------------
// Emulation mode (paced replies)
// ---------------------------------------------------------------------------------

fn paced_server(clock: Arc<dyn Clock>, step: u64) -> (Server, Arc<Paced>) {
    let dev = Arc::new(Paced {
        inner: MemDev::new(SIZE),
        clock: clock.clone(),
        step,
        calls: AtomicU64::new(0),
    });
    let e = Export {
        name: "disk".into(),
        description: String::new(),
        dev: dev.clone(),
        pace: Some(clock),
        gate: None,
        owner: None,
    };
    (server_with(vec![e], ServerConfig::default()), dev)
}

/// In emulation mode a large read's buffer goes with its deferred reply and
/// comes back for the next one: a short read after a long one carries only
/// its own bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paced_large_reads_reuse_buffers_at_their_own_length() {
    let clock: Arc<dyn Clock> = Arc::new(MonotonicClock::new());
    // Completion = now + offset/4096 * 10 µs: every read below is deferred.
    let (server, dev) = paced_server(clock, 10_000);
    let pattern: Vec<u8> = (0..SIZE as u32).map(|i| (i % 253) as u8).collect();
    dev.inner.write(0, &pattern, false).unwrap();
    let (mut c, _, _) = Client::go(&server, "disk", false).await;
    for (k, (off, len)) in [
        (4096u64, 512 * 1024u32),
        (8192, 64 * 1024),
        (65536, 256 * 1024),
        (12288, 40 * 1024),
    ]
    .into_iter()
    .enumerate()
    {
        c.request(CMD_READ, 0, k as u64, off, len).await;
        let r = c.simple(len as usize).await;
        assert_eq!((r.cookie, r.error), (k as u64, 0));
        assert!(
            r.data[..] == pattern[off as usize..(off + u64::from(len)) as usize],
            "read {k}: wrong data"
        );
    }
    // Nothing more came: the next reply is the next request's.
    c.request(CMD_READ, 0, 99, 4096, 512).await;
    let r = c.simple(512).await;
    assert_eq!((r.cookie, r.error), (99, 0));
    assert!(c.disconnect().await.is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paced_replies_leave_out_of_order_and_not_early() {
    let clock: Arc<dyn Clock> = Arc::new(MonotonicClock::new());
    // Completion = now + offset/4096 * 100 ms.
    let (server, dev) = paced_server(clock, 100_000_000);
    let (mut c, _, _) = Client::go(&server, "disk", false).await;
    let t0 = Instant::now();
    c.request(CMD_READ, 0, 3, 3 * 4096, 4096).await; // due at 300 ms
    c.write(2, 2 * 4096, &[2u8; 4096], 0).await; // due at 200 ms
    c.request(CMD_READ, 0, 0, 0, 4096).await; // due now
    c.request(CMD_FLUSH, 0, 9, 0, 0).await; // due now
    let mut order = Vec::new();
    for _ in 0..4 {
        let mut h = [0u8; 16];
        c.s.read_exact(&mut h).await.unwrap();
        let cookie = u64::from_be_bytes(h[8..16].try_into().unwrap());
        let elapsed = t0.elapsed();
        if cookie == 0 || cookie == 3 {
            let mut d = vec![0u8; 4096];
            c.s.read_exact(&mut d).await.unwrap();
        }
        order.push(cookie);
        let due = Duration::from_millis(match cookie {
            3 => 300,
            2 => 200,
            _ => 0,
        });
        assert!(
            elapsed >= due,
            "reply {cookie} after {elapsed:?}, due at {due:?}"
        );
    }
    assert_eq!(
        &order[2..],
        &[2, 3],
        "slow requests answered last, fastest first"
    );
    assert_eq!(dev.calls.load(Ordering::SeqCst), 4, "all executed at once");
    assert!(t0.elapsed() < Duration::from_secs(3));
    assert!(c.disconnect().await.is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paced_replies_follow_a_virtual_clock() {
    let vclock = Arc::new(VirtualClock::new(1_000));
    // Completion = now + offset/4096 * 50 ms of virtual time.
    let (server, _) = paced_server(vclock.clone(), 50_000_000);
    let (mut c, _, _) = Client::go(&server, "disk", true).await;
    c.request(CMD_READ, 0, 7, 4096, 16).await;
    c.request(CMD_FLUSH, 0, 8, 0, 0).await;
    // The flush is due at once and overtakes the read.
    let r = c.simple(0).await;
    assert_eq!((r.error, r.cookie), (0, 8));
    // Real time passes, virtual time does not: the read stays pending.
    let mut h = [0u8; 1];
    let early = tokio::time::timeout(Duration::from_millis(300), c.s.read(&mut h)).await;
    assert!(
        early.is_err(),
        "reply sent before the virtual clock reached its completion"
    );
    vclock.advance(50_000_000);
    let (_, kind, cookie, p) = c.chunk().await;
    assert_eq!((kind, cookie, p.len()), (REPLY_TYPE_OFFSET_DATA, 7, 8 + 16));
    assert!(c.disconnect().await.is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disconnect_waits_for_paced_replies() {
    let clock: Arc<dyn Clock> = Arc::new(MonotonicClock::new());
    let (server, dev) = paced_server(clock, 20_000_000);
    let (mut c, _, _) = Client::go(&server, "disk", false).await;
    c.write(1, 10 * 4096, b"late", 0).await; // due in 200 ms
    c.request(CMD_DISC, 0, 0, 0, 0).await;
    let r = c.simple(0).await;
    assert_eq!((r.error, r.cookie), (0, 1));
    assert!(c.closed().await.is_ok());
    let mut b = [0u8; 4];
    dev.read(10 * 4096, &mut b).unwrap();
    assert_eq!(&b, b"late");
}

// ---------------------------------------------------------------------------------
// Server-level
// ---------------------------------------------------------------------------------

#[test]
fn connection_future_is_send() {
    fn assert_send<T: Send>(_: &T) {}
    let (server, _) = mem_server();
    let (a, _b) = tokio::io::duplex(64);
    let fut = server.handle(a);
    assert_send(&fut);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_unix_shuts_down_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.sock");
    let (server, dev) = mem_server();
    let listener = tokio::net::UnixListener::bind(&path).unwrap();
    let (tx, rx) = tokio::sync::watch::channel(false);
    let task = tokio::spawn(async move { server.serve_unix(listener, rx).await });
    let mut s = tokio::net::UnixStream::connect(&path).await.unwrap();
    let mut g = [0u8; 18];
    s.read_exact(&mut g).await.unwrap();
    let mut m = 3u32.to_be_bytes().to_vec();
    m.extend_from_slice(&IHAVEOPT.to_be_bytes());
    m.extend_from_slice(&OPT_EXPORT_NAME.to_be_bytes());
    m.extend_from_slice(&4u32.to_be_bytes());
    m.extend_from_slice(b"disk");
    s.write_all(&m).await.unwrap();
    let mut r = [0u8; 10];
    s.read_exact(&mut r).await.unwrap();
    let mut w = encode_request(&RequestHeader {
        flags: 0,
        kind: CMD_WRITE,
        cookie: 5,
        offset: 0,
        length: 2,
    })
    .to_vec();
    w.extend_from_slice(b"ok");
    s.write_all(&w).await.unwrap();
    let mut h = [0u8; 16];
    s.read_exact(&mut h).await.unwrap();
    assert_eq!(h, simple_reply(5, 0));
    tx.send(true).unwrap();
    // The server closes the idle connection and returns.
    let mut rest = Vec::new();
    tokio::time::timeout(T, s.read_to_end(&mut rest))
        .await
        .unwrap()
        .unwrap();
    assert!(tokio::time::timeout(T, task)
        .await
        .unwrap()
        .unwrap()
        .is_ok());
    let mut b = [0u8; 2];
    dev.read(0, &mut b).unwrap();
    assert_eq!(&b, b"ok");
}

/// A device whose read at offset 0 blocks until [`Stall::release`] (or 10 s).
struct Stall {
    mem: MemDev,
    open: std::sync::Mutex<bool>,
    cv: std::sync::Condvar,
    entered: std::sync::mpsc::SyncSender<()>,
}

impl Stall {
    fn release(&self) {
        *self.open.lock().unwrap() = true;
        self.cv.notify_all();
    }
}

impl BlockDev for Stall {
    fn size(&self) -> u64 {
        self.mem.size()
    }
    fn read(&self, offset: u64, buf: &mut [u8]) -> IoResult {
        if offset == 0 {
            let _ = self.entered.try_send(());
            let open = self.open.lock().unwrap();
            let _ = self.cv.wait_timeout_while(open, T, |o| !*o).unwrap();
        }
        self.mem.read(offset, buf)
    }
    fn write(&self, offset: u64, data: &[u8], fua: bool) -> IoResult {
        self.mem.write(offset, data, fua)
    }
    fn flush(&self) -> IoResult {
        Ok(0)
    }
    fn trim(&self, offset: u64, len: u64) -> IoResult {
        self.mem.trim(offset, len)
    }
    fn write_zeroes(&self, offset: u64, len: u64, fua: bool) -> IoResult {
        self.mem.write_zeroes(offset, len, fua)
    }
}

/// A blocking client on a Unix socket: greets, picks `disk` with
/// `NBD_OPT_EXPORT_NAME`, and sends a read of `len` at `offset`.
fn blocking_read_request(
    path: &std::path::Path,
    offset: u64,
    len: u32,
) -> std::os::unix::net::UnixStream {
    use std::io::{Read, Write};
    let mut s = std::os::unix::net::UnixStream::connect(path).unwrap();
    s.set_read_timeout(Some(T)).unwrap();
    let mut g = [0u8; 18];
    s.read_exact(&mut g).unwrap();
    let mut m = 3u32.to_be_bytes().to_vec();
    m.extend_from_slice(&IHAVEOPT.to_be_bytes());
    m.extend_from_slice(&OPT_EXPORT_NAME.to_be_bytes());
    m.extend_from_slice(&4u32.to_be_bytes());
    m.extend_from_slice(b"disk");
    s.write_all(&m).unwrap();
    let mut r = [0u8; 10];
    s.read_exact(&mut r).unwrap();
    let req = encode_request(&RequestHeader {
        flags: 0,
        kind: CMD_READ,
        cookie: offset,
        offset,
        length: len,
    });
    s.write_all(&req).unwrap();
    s
}

/// Each accepted connection is served by a thread of its own: a device call
/// that blocks one connection (a slow disk, a sync) holds up nothing else,
/// even when the listener runs on a single-threaded runtime.
#[test]
fn a_connection_blocked_in_its_device_does_not_stall_another() {
    use std::io::Read;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.sock");
    let (entered, entered_rx) = std::sync::mpsc::sync_channel(1);
    let dev = Arc::new(Stall {
        mem: MemDev::new(SIZE),
        open: std::sync::Mutex::new(false),
        cv: std::sync::Condvar::new(),
        entered,
    });
    dev.mem.write(4096, b"free", false).unwrap();
    let server = server_with(vec![export("disk", dev.clone())], ServerConfig::default());
    let (tx, rx) = tokio::sync::watch::channel(false);
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let p = path.clone();
    let listener_thread = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let listener = tokio::net::UnixListener::bind(&p).unwrap();
            ready_tx.send(()).unwrap();
            server.serve_unix(listener, rx).await.unwrap();
        });
    });
    ready_rx.recv_timeout(T).unwrap();

    let mut stuck = blocking_read_request(&path, 0, 4);
    entered_rx
        .recv_timeout(T)
        .expect("the first read reached the device");
    // The first connection's thread is inside the device now; a second
    // connection is accepted, negotiated and answered regardless.
    let started = Instant::now();
    let mut free = blocking_read_request(&path, 4096, 4);
    let mut h = [0u8; 20];
    free.read_exact(&mut h)
        .expect("the second connection is answered while the first is blocked");
    assert_eq!(&h[..16], &simple_reply(4096, 0));
    assert_eq!(&h[16..], b"free");
    assert!(
        started.elapsed() < T / 2,
        "answered only after the stalled read timed out"
    );

    dev.release();
    stuck.read_exact(&mut h).unwrap();
    assert_eq!(&h[..16], &simple_reply(0, 0));
    tx.send(true).unwrap();
    drop((stuck, free));
    listener_thread.join().unwrap();
}

// ---------------------------------------------------------------------------------
// Admission gates (the SLA scheduler's hook)
// ---------------------------------------------------------------------------------

/// A scripted gate: each piece is booked `step` after the previous booking;
/// writes are refused when `refuse_writes`; the first `retries` asks are told to
/// come back `step` later.
#[derive(Debug)]
struct ScriptGate {
    clock: Arc<dyn Clock>,
    step: u64,
    piece: u64,
    refuse_writes: bool,
    retries: Mutex<u32>,
    next: Mutex<u64>,
    asked: Mutex<Vec<(blockdev::Dir, u64, blockdev::Admit)>>,
}

impl ScriptGate {
    fn new(step: u64, piece: u64) -> Self {
        Self {
            clock: Arc::new(MonotonicClock::new()),
            step,
            piece,
            refuse_writes: false,
            retries: Mutex::new(0),
            next: Mutex::new(0),
            asked: Mutex::new(Vec::new()),
        }
    }
}

impl blockdev::Gate for ScriptGate {
    fn reserve(&self, dir: blockdev::Dir, len: u64) -> IoResult<blockdev::Admit> {
        assert!(
            len <= self.piece,
            "piece of {len} bytes over the gate's limit"
        );
        if self.refuse_writes && dir == blockdev::Dir::Write {
            return Err(IoError::NotPermitted("no writes for you".into()));
        }
        let now = self.clock.now();
        let a = {
            let mut r = self.retries.lock();
            if *r > 0 {
                *r -= 1;
                blockdev::Admit::Retry(now + self.step)
            } else {
                let mut next = self.next.lock();
                *next = (*next + self.step).max(now);
                blockdev::Admit::At(*next)
            }
        };
        self.asked.lock().push((dir, len, a));
        Ok(a)
    }
    fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }
    fn max_piece(&self) -> u64 {
        self.piece
    }
}

fn gated_server(gate: Arc<ScriptGate>) -> (Server, Arc<MemDev>) {
    let dev = Arc::new(MemDev::new(SIZE));
    let mut e = export("disk", dev.clone());
    e.gate = Some(gate);
    let plain = export("plain", Arc::new(MemDev::new(SIZE)));
    (server_with(vec![e, plain], ServerConfig::default()), dev)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gated_requests_are_split_into_pieces_that_wait_their_turn() {
    let gate = Arc::new(ScriptGate::new(50_000_000, 64 * 1024));
    let (server, dev) = gated_server(gate.clone());
    let (mut c, _, _) = Client::go(&server, "disk", false).await;
    let data: Vec<u8> = (0..200_000u32).map(|i| (i * 13) as u8).collect();
    let t0 = Instant::now();
    c.write(1, 4096, &data, 0).await;
    assert_eq!(c.simple(0).await.error, 0);
    c.request(CMD_READ, 0, 2, 4096, 200_000).await;
    let r = c.simple(200_000).await;
    assert_eq!(r.error, 0);
    assert_eq!(r.data, data);
    assert_eq!(&dev_bytes(&*dev)[4096..204_096], &data[..]);
    // 4 pieces each way (3 of 64 KiB and one of 3392 bytes), 50 ms apart.
    let asked = gate.asked.lock().clone();
    let sizes: Vec<u64> = asked.iter().map(|a| a.1).collect();
    assert_eq!(
        sizes,
        [65536, 65536, 65536, 3392, 65536, 65536, 65536, 3392]
    );
    assert!(
        t0.elapsed() >= Duration::from_millis(7 * 50),
        "{:?}",
        t0.elapsed()
    );
    assert!(c.disconnect().await.is_ok());
}

/// A device that records the write calls it is given, `(offset, length)`.
struct WriteLog {
    inner: Arc<dyn BlockDev>,
    writes: Mutex<Vec<(u64, usize)>>,
}

impl blockdev::Layer for WriteLog {
    fn inner(&self) -> &Arc<dyn BlockDev> {
        &self.inner
    }
    fn write(&self, offset: u64, data: &[u8], fua: bool) -> IoResult {
        self.writes.lock().push((offset, data.len()));
        self.inner.write(offset, data, fua)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pieces_admitted_at_once_are_written_together() {
    // One 200,000-byte write in 64 KiB pieces: a gate that admits every piece
    // at once gets one device write; one that makes pieces wait gets one per
    // piece, each after its turn.
    for (step, want) in [(0u64, 1usize), (30_000_000, 4)] {
        let gate = Arc::new(ScriptGate::new(step, 64 * 1024));
        let mem = Arc::new(MemDev::new(SIZE));
        let log = Arc::new(blockdev::Layered(WriteLog {
            inner: mem.clone(),
            writes: Mutex::new(Vec::new()),
        }));
        let mut e = export("disk", log.clone());
        e.gate = Some(gate.clone());
        let server = server_with(vec![e], ServerConfig::default());
        let (mut c, _, _) = Client::go(&server, "disk", false).await;
        let data: Vec<u8> = (0..200_000u32).map(|i| (i * 7) as u8).collect();
        c.write(1, 8192, &data, 0).await;
        assert_eq!(c.simple(0).await.error, 0);
        assert_eq!(&dev_bytes(&*mem)[8192..208_192], &data[..]);
        let writes = log.0.writes.lock().clone();
        assert_eq!(writes.len(), want, "step {step}: {writes:?}");
        // In order, end to end, covering the request exactly.
        let mut at = 8192u64;
        for &(off, len) in &writes {
            assert_eq!(off, at, "{writes:?}");
            at += len as u64;
        }
        assert_eq!(at, 208_192);
        assert_eq!(gate.asked.lock().len(), 4, "every piece is still asked for");
        assert!(c.disconnect().await.is_ok());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gate_retries_are_asked_again_and_refusals_fail_cleanly() {
    let mut g = ScriptGate::new(20_000_000, 1 << 20);
    g.refuse_writes = true;
    *g.retries.lock() = 2;
    let gate = Arc::new(g);
    let (server, dev) = gated_server(gate.clone());
    let (mut c, _, _) = Client::go(&server, "disk", false).await;
    let t0 = Instant::now();
    c.request(CMD_READ, 0, 1, 0, 4096).await;
    assert_eq!(c.simple(4096).await.error, 0);
    assert!(
        t0.elapsed() >= Duration::from_millis(40),
        "two retries of 20 ms"
    );
    assert_eq!(gate.asked.lock().len(), 3);
    c.write(2, 0, &[7u8; 4096], 0).await;
    assert_eq!(c.simple(0).await.error, EPERM);
    assert!(dev_bytes(&*dev).iter().all(|&b| b == 0), "nothing written");
    // The connection is still usable.
    c.request(CMD_READ, 0, 3, 0, 512).await;
    assert_eq!(c.simple(512).await.error, 0);
    assert!(c.disconnect().await.is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_tenant_holds_no_thread() {
    // One gated connection waits 2 s for its slot; meanwhile many requests on
    // another export (same 2-worker runtime) are answered promptly.
    let gate = Arc::new(ScriptGate::new(2_000_000_000, 1 << 20));
    let (server, _) = gated_server(gate);
    let (mut slow, _, _) = Client::go(&server, "disk", false).await;
    let (mut fast, _, _) = Client::go(&server, "plain", false).await;
    slow.request(CMD_READ, 0, 1, 0, 4096).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    let t0 = Instant::now();
    for i in 0..100 {
        fast.request(CMD_READ, 0, i, 0, 4096).await;
        assert_eq!(fast.simple(4096).await.error, 0);
    }
    assert!(t0.elapsed() < Duration::from_secs(1), "{:?}", t0.elapsed());
    assert_eq!(slow.simple(4096).await.error, 0);
    assert!(fast.disconnect().await.is_ok());
    assert!(slow.disconnect().await.is_ok());
}

// ---------------------------------------------------------------------------------
// One data path: no gate is the open gate
// ---------------------------------------------------------------------------------

/// How an export is admitted and paced in [`one_path_for_every_gate`].
#[derive(Clone, Copy, Debug)]
enum Admission {
    /// No gate: the open gate.
    Open,
    /// No gate, but paced by a clock (the device completes at once).
    Paced,
    /// A gate that admits every request at once, whole.
    AtOnce,
    /// A gate that splits requests into 16 KiB pieces, 1 ms apart.
    Pieces,
}

impl Admission {
    fn gate(self) -> Option<Arc<ScriptGate>> {
        match self {
            Self::Open | Self::Paced => None,
            Self::AtOnce => Some(Arc::new(ScriptGate::new(0, 1 << 30))),
            Self::Pieces => Some(Arc::new(ScriptGate::new(1_000_000, 16 * 1024))),
        }
    }

    fn export(self, name: &str, dev: Arc<dyn BlockDev>) -> (Export, Option<Arc<ScriptGate>>) {
        let mut e = export(name, dev);
        let gate = self.gate();
        e.gate = gate.clone().map(|g| g as Arc<dyn blockdev::Gate>);
        if matches!(self, Self::Paced) {
            e.pace = Some(Arc::new(MonotonicClock::new()));
        }
        (e, gate)
    }
}

/// Merges the device log's contiguous writes (other calls are kept as they are) with the same FUA flag (a gate's
/// pieces) back into the requests they came from.
fn merged_writes(log: Vec<String>) -> Vec<(u64, u64, String)> {
    let mut out: Vec<(u64, u64, String)> = Vec::new();
    for line in log {
        let f: Vec<&str> = line.split(' ').collect();
        if f[0] != "write" {
            out.push((0, 0, line));
            continue;
        }
        let (off, len, fua) = (f[1].parse().unwrap(), f[2].parse().unwrap(), f[3]);
        match out.last_mut() {
            Some((o, l, fl)) if *o + *l == off && fl == fua => *l += len,
            _ => out.push((off, len, fua.to_string())),
        }
    }
    out
}

fn pattern(n: usize, seed: u32) -> Vec<u8> {
    (0..n as u32)
        .map(|i| (i.wrapping_mul(31).wrapping_add(seed) >> 3) as u8)
        .collect()
}

/// The next reply, simple or structured: to a read of `read` bytes (`Some`) or
/// to another command, as (cookie, errno, data; for a structured reply its type
/// and payload).
async fn next_reply(c: &mut Client, reads: &[Option<usize>]) -> (u64, u32, Vec<u8>) {
    let mut magic = [0u8; 4];
    tokio::time::timeout(T, c.s.read_exact(&mut magic))
        .await
        .unwrap()
        .unwrap();
    let magic = u32::from_be_bytes(magic);
    if magic == SIMPLE_REPLY_MAGIC {
        let mut h = [0u8; 12];
        c.s.read_exact(&mut h).await.unwrap();
        let errno = u32::from_be_bytes(h[..4].try_into().unwrap());
        let cookie = u64::from_be_bytes(h[4..].try_into().unwrap());
        // Replies may come out of order: the cookie says what it answers.
        let read = reads.get(cookie as usize - 1).copied().flatten();
        let mut data = vec![0u8; if errno == 0 { read.unwrap_or(0) } else { 0 }];
        c.s.read_exact(&mut data).await.unwrap();
        return (cookie, errno, data);
    }
    assert_eq!(magic, STRUCTURED_REPLY_MAGIC);
    let mut h = [0u8; 16];
    c.s.read_exact(&mut h).await.unwrap();
    assert_eq!(u16::from_be_bytes([h[0], h[1]]), REPLY_FLAG_DONE);
    let kind = u16::from_be_bytes([h[2], h[3]]);
    let cookie = u64::from_be_bytes(h[4..12].try_into().unwrap());
    let mut p = vec![0u8; u32::from_be_bytes(h[12..].try_into().unwrap()) as usize];
    c.s.read_exact(&mut p).await.unwrap();
    let errno = if kind == REPLY_TYPE_ERROR {
        u32::from_be_bytes(p[..4].try_into().unwrap())
    } else {
        0
    };
    (cookie, errno, [&kind.to_be_bytes()[..], &p].concat())
}

type Outcome = (Vec<(u64, u32, Vec<u8>)>, Vec<u8>, Vec<(u64, u64, String)>);

/// Pipelines a script of reads and writes (small, large, over the input buffer,
/// empty, out of range, with FUA, on a failing device) and returns every reply,
/// the device's contents and its merged write log, and the gates asked.
async fn run_script(adm: Admission, structured: bool) -> (Outcome, Vec<Arc<ScriptGate>>) {
    let rec = Arc::new(Recorder::new(SIZE));
    let (disk, g1) = adm.export("disk", rec.clone());
    let (bad, g2) = adm.export("bad", Arc::new(Failing(IoError::Media("bad block".into()))));
    let server = server_with(vec![disk, bad], ServerConfig::default());
    let (mut c, _, _) = Client::go(&server, "disk", structured).await;
    c.write(1, 0, &pattern(4096, 1), CMD_FLAG_FUA).await;
    // Larger than the server's input buffer: read into the write buffer.
    c.write(2, 8192, &pattern(600_000, 2), 0).await;
    c.request(CMD_READ, 0, 3, 0, 4096).await;
    c.request(CMD_READ, 0, 4, 8192, 100_000).await;
    c.request(CMD_READ, 0, 5, 0, 0).await;
    c.request(CMD_READ, 0, 6, 8192, 600_000).await;
    c.write(7, 700_000, &pattern(40_000, 7), CMD_FLAG_FUA).await;
    c.request(CMD_READ, 0, 8, SIZE, 4096).await;
    c.request(CMD_FLUSH, 0, 9, 0, 0).await;
    let mut replies = Vec::new();
    // Read lengths by cookie.
    let mut reads = vec![
        None,
        None,
        Some(4096),
        Some(100_000),
        Some(0),
        Some(600_000),
        None,
        Some(4096),
        None,
    ];
    for _ in 0..reads.len() {
        replies.push(next_reply(&mut c, &reads).await);
    }
    assert!(c.disconnect().await.is_ok());
    let (mut c, _, _) = Client::go(&server, "bad", structured).await;
    c.write(10, 0, &pattern(4096, 10), 0).await;
    c.write(11, 0, &pattern(100_000, 11), CMD_FLAG_FUA).await;
    c.request(CMD_READ, 0, 12, 0, 4096).await;
    c.request(CMD_READ, 0, 13, 0, 100_000).await;
    reads.extend([None, None, Some(4096), Some(100_000)]);
    for _ in 0..4 {
        replies.push(next_reply(&mut c, &reads).await);
    }
    assert!(c.disconnect().await.is_ok());
    // Syncs reply when they finish, out of order.
    replies.sort_by_key(|r| r.0);
    let mut log = merged_writes(rec.take_log());
    let mut syncs: Vec<&str> = rec.take_syncs().into_iter().map(|s| s.0).collect();
    syncs.sort_unstable();
    log.extend(syncs.into_iter().map(|s| (0, 0, s.to_string())));
    let outcome = (replies, dev_bytes(&*rec), log);
    (outcome, g1.into_iter().chain(g2).collect())
}

/// Exports without a gate take the same read and write path as gated ones,
/// through the open gate: every kind of admission gives the same replies (data,
/// errors, structured or simple), the same device contents and the same writes
/// with their FUA flags; only a splitting gate cuts them into pieces.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_path_for_every_gate() {
    for structured in [false, true] {
        let (open, _) = run_script(Admission::Open, structured).await;
        let (replies, bytes, writes) = &open;
        assert_eq!(replies.len(), 13);
        for (i, (cookie, errno, _)) in replies.iter().enumerate() {
            let want = match cookie {
                8 => EINVAL,
                10.. => EIO,
                _ => 0,
            };
            assert_eq!((*cookie, *errno), (i as u64 + 1, want), "{structured}");
        }
        let data = |cookie: u64| -> &[u8] {
            let d = &replies[cookie as usize - 1].2;
            // Structured: chunk type, then the offset.
            if structured {
                &d[10..]
            } else {
                d
            }
        };
        assert_eq!(data(3), &pattern(4096, 1)[..]);
        assert_eq!(data(4), &pattern(600_000, 2)[..100_000]);
        assert_eq!(data(6), &pattern(600_000, 2)[..]);
        assert_eq!(&bytes[700_000..740_000], &pattern(40_000, 7)[..]);
        assert_eq!(
            writes,
            &[
                (0, 4096, "fua=false".to_string()),
                (8192, 600_000, "fua=false".into()),
                (700_000, 40_000, "fua=false".into()),
                (0, 0, "flush".into()),
                (0, 0, "sync".into()),
                (0, 0, "sync".into()),
            ]
        );
        for adm in [Admission::Paced, Admission::AtOnce, Admission::Pieces] {
            let (got, gates) = run_script(adm, structured).await;
            assert!(got == open, "{adm:?} (structured: {structured}) differs");
            let asked: Vec<u64> = gates
                .iter()
                .flat_map(|g| g.asked.lock().clone())
                .map(|a| a.1)
                .collect();
            match adm {
                Admission::Paced => assert!(gates.is_empty()),
                // Each read and write asked once, whole (the empty read too);
                // the failing device's first piece of each.
                Admission::AtOnce => assert_eq!(
                    asked,
                    [
                        4096, 600_000, 4096, 100_000, 0, 600_000, 40_000, 4096, 100_000, 4096,
                        100_000
                    ]
                ),
                Admission::Pieces => {
                    assert!(asked.iter().all(|&n| n <= 16 * 1024));
                    let disk: u64 = gates[0].asked.lock().iter().map(|a| a.1).sum();
                    assert_eq!(disk, 4096 + 600_000 + 4096 + 100_000 + 600_000 + 40_000);
                }
                Admission::Open => unreachable!(),
            }
        }
    }
}

mod authorization {
    //! No client ever lists or opens an export it may not see: random exports
    //! with random owners, a random client identity and TLS mode, driven through
    //! the real option haggling (`handshake::negotiate`, with the session as a
    //! finished TLS handshake would leave it).

    use super::*;
    use crate::handshake::{self, Outcome, Session};
    use crate::inbuf::InBuf;
    use crate::tls::{may_open, PskKeys, Tls, TlsMode, TlsSetup};
    use proptest::prelude::*;

    const TENANTS: [&str; 3] = ["alice", "bob", "carol"];

    fn owner() -> impl Strategy<Value = Option<String>> {
        prop_oneof![
            Just(None),
            (0..TENANTS.len()).prop_map(|i| Some(TENANTS[i].to_string()))
        ]
    }

    /// A handshake over an in-memory pipe with `exports` (name, owner)
    /// registered, past the greeting: the client, and the server's task, which
    /// says whether the handshake ended cleanly (rather than going on to
    /// transmission). The PSK file knows alice.
    async fn handshake_with(
        exports: &[(&str, Option<&str>)],
        mode: TlsMode,
        secure: bool,
        identity: Option<String>,
    ) -> (Client, tokio::task::JoinHandle<bool>) {
        let reg = MapRegistry::new();
        for (name, owner) in exports {
            reg.insert(Export {
                owner: owner.map(str::to_string),
                ..export(name, Arc::new(MemDev::new(1 << 20)))
            });
        }
        let tls = Tls::new(TlsSetup {
            mode,
            psk: Some(PskKeys::parse("alice:00112233").unwrap()),
            ..TlsSetup::default()
        })
        .unwrap()
        .map(Arc::new);
        let config = ServerConfig {
            tls,
            ..ServerConfig::default()
        };
        let (mut c, mut s) = tokio::io::duplex(1 << 20);
        let server = tokio::spawn(async move {
            let mut session = Session::default();
            session.secure = secure;
            session.identity = identity;
            let mut inbuf = InBuf::new(1 << 16);
            let r = handshake::negotiate(&reg, &config, &mut session, &mut inbuf, &mut s).await;
            matches!(r, Ok(Outcome::Closed))
        });
        let mut g = [0u8; 18];
        c.read_exact(&mut g).await.unwrap();
        c.write_all(&3u32.to_be_bytes()).await.unwrap();
        let client = Client {
            s: c,
            srv: tokio::spawn(async { Ok(()) }),
        };
        (client, server)
    }

    /// What the client got: the names LIST returned, and for each export
    /// whether INFO succeeded.
    async fn haggle(
        exports: &[(String, Option<String>)],
        mode: TlsMode,
        secure: bool,
        identity: Option<String>,
    ) -> (Vec<String>, Vec<bool>) {
        let named: Vec<(&str, Option<&str>)> = exports
            .iter()
            .map(|(n, o)| (n.as_str(), o.as_deref()))
            .collect();
        let (mut client, server) = handshake_with(&named, mode, secure, identity).await;
        client.option(OPT_LIST, &[]).await;
        let mut listed = Vec::new();
        loop {
            let (_, rep, data) = client.option_reply().await;
            if rep != REP_SERVER {
                break;
            }
            let n = u32::from_be_bytes(data[..4].try_into().unwrap()) as usize;
            listed.push(String::from_utf8(data[4..4 + n].to_vec()).unwrap());
        }
        let mut opened = Vec::new();
        for (name, _) in exports {
            let (rep, _) = client.info(OPT_INFO, name, &[]).await;
            opened.push(rep == REP_ACK);
        }
        client.option(OPT_ABORT, &[]).await;
        let _ = client.option_reply().await;
        assert!(server.await.unwrap(), "the handshake ended cleanly");
        (listed, opened)
    }

    /// Every reply, error message included, that alice (over TLS) gets for
    /// INFO and GO on `name`, with `name` itself written as `NAME`.
    async fn replies_as_alice(client: &mut Client, name: &str) -> Vec<(u32, u32, String)> {
        let mut got = Vec::new();
        for option in [OPT_INFO, OPT_GO] {
            let mut d = (name.len() as u32).to_be_bytes().to_vec();
            d.extend_from_slice(name.as_bytes());
            d.extend_from_slice(&2u16.to_be_bytes());
            d.extend_from_slice(&INFO_NAME.to_be_bytes());
            d.extend_from_slice(&INFO_DESCRIPTION.to_be_bytes());
            client.option(option, &d).await;
            loop {
                let (opt, rep, data) = client.option_reply().await;
                let text = String::from_utf8_lossy(&data).replace(name, "NAME");
                got.push((opt, rep, text));
                if rep != REP_INFO {
                    break;
                }
            }
        }
        got
    }

    #[tokio::test]
    async fn another_tenants_export_answers_exactly_as_an_unknown_one() {
        let (mut client, server) = handshake_with(
            &[("alice-db", Some("alice")), ("bob-db", Some("bob"))],
            TlsMode::Require,
            true,
            Some("alice".into()),
        )
        .await;
        let bobs = replies_as_alice(&mut client, "bob-db").await;
        let unknown = replies_as_alice(&mut client, "nobody-db").await;
        assert_eq!(
            bobs.iter().map(|r| r.1).collect::<Vec<_>>(),
            vec![REP_ERR_UNKNOWN, REP_ERR_UNKNOWN],
            "{bobs:?}"
        );
        assert_eq!(
            bobs, unknown,
            "bob's export must look like no export at all"
        );
        // Her own export opens, so the refusals above are about ownership.
        let own = replies_as_alice(&mut client, "alice-db").await;
        assert_eq!(own.last().map(|r| r.1), Some(REP_ACK), "{own:?}");
        // GO on her own export ended the haggling.
        assert!(
            !server.await.unwrap(),
            "the handshake went on to transmission"
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn a_client_sees_exactly_what_may_open_allows(
            owners in proptest::collection::vec(owner(), 1..6),
            mode in prop_oneof![Just(TlsMode::On), Just(TlsMode::Require)],
            secure in any::<bool>(),
            who in proptest::option::of(0..TENANTS.len()),
        ) {
            // Only a TLS session has an identity.
            let identity = who.filter(|_| secure).map(|i| TENANTS[i].to_string());
            let exports: Vec<(String, Option<String>)> = owners
                .into_iter()
                .enumerate()
                .map(|(i, o)| (format!("e{i}"), o))
                .collect();
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            let (listed, opened) = rt.block_on(haggle(&exports, mode, secure, identity.clone()));
            let tls_missing = mode == TlsMode::Require && !secure;
            for ((name, owner), ok) in exports.iter().zip(&opened) {
                let allowed = !tls_missing && may_open(mode, identity.as_deref(), owner.as_deref());
                prop_assert_eq!(*ok, allowed, "INFO {} (owner {:?}) as {:?}", name, owner, identity);
                prop_assert_eq!(listed.contains(name), allowed, "LIST {} (owner {:?}) as {:?}", name, owner, identity);
            }
        }
    }
}

mod handshake_cap {
    //! `max_handshakes_per_source`: a source that stalls its handshakes cannot
    //! open more than the cap at once, and nobody else is affected.

    use super::*;
    use crate::Source;
    use std::net::IpAddr;
    use tokio::net::{TcpSocket, TcpStream};

    async fn connect_from(ip: &str, port: u16) -> TcpStream {
        let s = TcpSocket::new_v4().unwrap();
        s.bind(format!("{ip}:0").parse().unwrap()).unwrap();
        s.connect(format!("127.0.0.1:{port}").parse().unwrap())
            .await
            .unwrap()
    }

    /// Whether the server greeted this connection (false: it closed it).
    async fn greeted(s: &mut TcpStream) -> bool {
        let mut g = [0u8; 18];
        let r = tokio::time::timeout(T, s.read_exact(&mut g))
            .await
            .expect("the server neither greeted nor closed the connection");
        match r {
            Ok(_) => {
                assert_eq!(&g[..16], b"NBDMAGICIHAVEOPT");
                true
            }
            Err(_) => false,
        }
    }

    /// Finishes the handshake of a greeted connection with GO on `disk`:
    /// whether the server acknowledged it.
    async fn go(s: &mut TcpStream) -> bool {
        let mut m = 3u32.to_be_bytes().to_vec();
        m.extend_from_slice(&IHAVEOPT.to_be_bytes());
        m.extend_from_slice(&OPT_GO.to_be_bytes());
        m.extend_from_slice(&10u32.to_be_bytes());
        m.extend_from_slice(&4u32.to_be_bytes());
        m.extend_from_slice(b"disk");
        m.extend_from_slice(&0u16.to_be_bytes());
        s.write_all(&m).await.unwrap();
        loop {
            let mut h = [0u8; 20];
            tokio::time::timeout(T, s.read_exact(&mut h))
                .await
                .unwrap()
                .unwrap();
            let rep = u32::from_be_bytes(h[12..16].try_into().unwrap());
            let len = u32::from_be_bytes(h[16..20].try_into().unwrap());
            let mut d = vec![0u8; len as usize];
            s.read_exact(&mut d).await.unwrap();
            if rep != REP_INFO {
                return rep == REP_ACK;
            }
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_source_over_its_handshake_cap_is_closed_and_others_are_not() {
        const CAP: usize = 3;
        let config = ServerConfig {
            max_handshakes_per_source: CAP,
            // Long enough that no stalled handshake times out during the test.
            handshake_timeout: Duration::from_secs(60),
            ..ServerConfig::default()
        };
        let server = server_with(vec![export("disk", Arc::new(MemDev::new(SIZE)))], config);
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = l.local_addr().unwrap().port();
        let (stop, rx) = tokio::sync::watch::channel(false);
        let task = tokio::spawn(async move { server.serve_tcp(l, rx).await });

        // CAP connections from 127.0.0.1 that take the greeting and stall.
        let mut stalled = Vec::new();
        for _ in 0..CAP {
            let mut s = connect_from("127.0.0.1", port).await;
            assert!(
                greeted(&mut s).await,
                "a connection within the cap is served"
            );
            stalled.push(s);
        }
        // One more from the same source is closed at once, without a greeting.
        let mut extra = connect_from("127.0.0.1", port).await;
        assert!(
            !greeted(&mut extra).await,
            "the connection over the cap was served"
        );
        // Another source is not affected.
        let mut other = connect_from("127.0.0.2", port).await;
        assert!(greeted(&mut other).await);
        assert!(
            go(&mut other).await,
            "another source finishes its handshake"
        );
        // Once one stalled handshake finishes, the source has room again (the
        // slot is given back just after the reply, so allow the server a moment).
        assert!(go(&mut stalled[0]).await);
        let mut again = None;
        for _ in 0..100 {
            let mut s = connect_from("127.0.0.1", port).await;
            if greeted(&mut s).await {
                again = Some(s);
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let mut again = again.expect("the source got no room back after a handshake ended");
        assert!(
            go(&mut again).await,
            "the source's new connection finishes its handshake"
        );
        // Connections in transmission do not count: two are, two are still
        // stalled, so one more fits and the next is over the cap again.
        let mut third = connect_from("127.0.0.1", port).await;
        assert!(
            greeted(&mut third).await,
            "a connection in transmission counted"
        );
        let mut fourth = connect_from("127.0.0.1", port).await;
        assert!(!greeted(&mut fourth).await, "the cap no longer holds");
        let _ = stop.send(true);
        drop((stalled, other, again, extra, third, fourth));
        task.await.unwrap().unwrap();
    }

    #[test]
    fn sources_group_ipv6_by_64_and_unmap_ipv4() {
        let v4: IpAddr = "192.0.2.7".parse().unwrap();
        let mapped: IpAddr = "::ffff:192.0.2.7".parse().unwrap();
        assert_eq!(Source::of_ip(mapped), Source::of_ip(v4));
        assert_eq!(Source::of_ip(v4).to_string(), "192.0.2.7");
        let a: IpAddr = "2001:db8:1:2:aaaa::1".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:bbbb::9".parse().unwrap();
        let c: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        assert_eq!(Source::of_ip(a), Source::of_ip(b), "one /64");
        assert_ne!(Source::of_ip(a), Source::of_ip(c), "another /64");
        assert_eq!(Source::of_ip(a).to_string(), "2001:db8:1:2::/64");
        assert_ne!(
            Source::of_ip("192.0.2.8".parse().unwrap()),
            Source::of_ip(v4)
        );
    }
}

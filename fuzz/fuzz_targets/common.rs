//! Shared by the fuzz targets: a guarded export and a way to run one connection.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use blockdev::{BlockDev, IoResult, MemDev};
use nbd::{Export, MapRegistry, Server, ServerConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Export size.
pub const N: u64 = 32 * 1024;
/// Guard zone on each side of the export.
pub const G: u64 = 8 * 1024;
const GUARD: u8 = 0x5a;
/// The server's payload limit in the fuzzed configuration.
pub const MAXP: u32 = 4096;

/// An `N`-byte window into a larger MemDev. Offsets are forwarded unchecked
/// (wrapping), so a request the server failed to bounds-check hits a guard zone.
pub struct Window {
    inner: MemDev,
}

impl Window {
    pub fn new() -> Self {
        let inner = MemDev::new(N + 2 * G);
        inner.write(0, &[GUARD; G as usize], false).unwrap();
        inner.write(G + N, &[GUARD; G as usize], false).unwrap();
        Self { inner }
    }

    pub fn assert_guards_intact(&self) {
        let mut b = [0u8; G as usize];
        self.inner.read(0, &mut b).unwrap();
        assert!(b.iter().all(|&x| x == GUARD), "bytes before the export changed");
        self.inner.read(G + N, &mut b).unwrap();
        assert!(b.iter().all(|&x| x == GUARD), "bytes after the export changed");
    }
}

impl BlockDev for Window {
    fn size(&self) -> u64 {
        N
    }
    fn read(&self, offset: u64, buf: &mut [u8]) -> IoResult {
        self.inner.read(offset.wrapping_add(G), buf)
    }
    fn write(&self, offset: u64, data: &[u8], fua: bool) -> IoResult {
        self.inner.write(offset.wrapping_add(G), data, fua)
    }
    fn flush(&self) -> IoResult {
        Ok(0)
    }
    fn trim(&self, offset: u64, len: u64) -> IoResult {
        self.inner.trim(offset.wrapping_add(G), len)
    }
    fn write_zeroes(&self, offset: u64, len: u64, fua: bool) -> IoResult {
        self.inner.write_zeroes(offset.wrapping_add(G), len, fua)
    }
}

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap())
}

/// Feeds `input` as the whole client side of one connection to a server that
/// exports a fresh [`Window`] as "w" (also the default export), discards the
/// replies, and checks that the connection ends and the guards are intact.
pub fn run_connection(input: Vec<u8>) {
    let dev = Arc::new(Window::new());
    let reg = MapRegistry::new();
    reg.insert(Export { name: "w".into(), description: "fuzz".into(), dev: dev.clone(), pace: None });
    reg.set_default(Some("w"));
    let server = Server::new(Arc::new(reg), ServerConfig { max_payload: MAXP, ..Default::default() });
    runtime().block_on(async move {
        let (client, end) = tokio::io::duplex(64 * 1024);
        let task = tokio::spawn(async move { server.handle(end).await });
        let (mut rd, mut wr) = tokio::io::split(client);
        let sink = tokio::spawn(async move {
            let mut buf = vec![0u8; 64 * 1024];
            while matches!(rd.read(&mut buf).await, Ok(n) if n > 0) {}
        });
        let _ = wr.write_all(&input).await;
        let _ = wr.shutdown().await;
        let joined = tokio::time::timeout(Duration::from_secs(30), task)
            .await
            .expect("connection did not end after the client closed its side");
        assert!(joined.is_ok(), "connection task panicked");
        drop(wr);
        let _ = sink.await;
    });
    dev.assert_guards_intact();
}

/// The client's side of a valid handshake into transmission on the default
/// export, with or without structured replies.
#[allow(dead_code)] // Used by nbd_request only.
pub fn handshake(structured: bool) -> Vec<u8> {
    let mut v = 3u32.to_be_bytes().to_vec();
    let mut opt = |o: u32, d: &[u8]| {
        v.extend_from_slice(&nbd::proto::IHAVEOPT.to_be_bytes());
        v.extend_from_slice(&o.to_be_bytes());
        v.extend_from_slice(&(d.len() as u32).to_be_bytes());
        v.extend_from_slice(d);
    };
    if structured {
        opt(nbd::proto::OPT_STRUCTURED_REPLY, &[]);
    }
    opt(nbd::proto::OPT_GO, &[0, 0, 0, 0, 0, 0]);
    v
}

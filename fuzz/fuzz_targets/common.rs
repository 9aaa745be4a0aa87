//! Shared by the fuzz targets: a guarded export and a way to run one connection.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use blockdev::GuardedWindow;
use nbd::{Export, MapRegistry, Server, ServerConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Export size.
pub const N: u64 = 32 * 1024;
/// Guard zone on each side of the export.
pub const G: u64 = 8 * 1024;
/// The server's payload limit in the fuzzed configuration.
pub const MAXP: u32 = 4096;


fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap())
}

/// Feeds `input` as the whole client side of one connection to a server that
/// exports a fresh [`GuardedWindow`] as "w" (also the default export), discards the
/// replies, and checks that the connection ends and the guards are intact.
pub fn run_connection(input: Vec<u8>) {
    let dev = Arc::new(GuardedWindow::new(N, G));
    let reg = MapRegistry::new();
    reg.insert(Export { name: "w".into(), description: "fuzz".into(), dev: dev.clone(), pace: None, gate: None, owner: None });
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
    assert!(dev.guards_intact(), "bytes outside the export changed");
}

/// The client's side of a valid handshake into transmission on the default
/// export, with or without structured replies, and with `meta` (and
/// structured replies) selecting `base:allocation` so block status is allowed.
#[allow(dead_code)] // Used by nbd_request only.
pub fn handshake(structured: bool, meta: bool) -> Vec<u8> {
    let mut v = 3u32.to_be_bytes().to_vec();
    let mut opt = |o: u32, d: &[u8]| {
        v.extend_from_slice(&nbd::proto::IHAVEOPT.to_be_bytes());
        v.extend_from_slice(&o.to_be_bytes());
        v.extend_from_slice(&(d.len() as u32).to_be_bytes());
        v.extend_from_slice(d);
    };
    if structured {
        opt(nbd::proto::OPT_STRUCTURED_REPLY, &[]);
        if meta {
            let q = nbd::proto::META_BASE_ALLOCATION.as_bytes();
            let mut d = 0u32.to_be_bytes().to_vec();
            d.extend_from_slice(&1u32.to_be_bytes());
            d.extend_from_slice(&(q.len() as u32).to_be_bytes());
            d.extend_from_slice(q);
            opt(nbd::proto::OPT_SET_META_CONTEXT, &d);
        }
    }
    opt(nbd::proto::OPT_GO, &[0, 0, 0, 0, 0, 0]);
    v
}

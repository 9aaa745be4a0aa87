//! Serves in-memory devices over NBD on a Unix socket, for benchmarks and manual
//! testing:
//!
//! ```text
//! cargo run --release -p nbd --example memserve -- /tmp/x.sock [SIZE_BYTES] [WORKERS]
//! fio --name=t --ioengine=nbd --uri='nbd+unix:///?socket=/tmp/x.sock' --rw=randread --bs=4k --iodepth=32 --size=256m
//! ```
//!
//! The export is named `mem` and is also the default export. SIZE_BYTES defaults
//! to 1 GiB; WORKERS (tokio worker threads) defaults to the number of CPUs.
//! Stops on Ctrl-C or SIGTERM.

use std::sync::Arc;

use blockdev::MemDev;
use nbd::{Export, MapRegistry, Server, ServerConfig};

fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let path = args
        .next()
        .unwrap_or_else(|| "/tmp/flexssd-nbd.sock".into());
    let size: u64 = args
        .next()
        .map(|s| s.parse().expect("SIZE_BYTES"))
        .unwrap_or(1 << 30);
    let workers: Option<usize> = args.next().map(|s| s.parse().expect("WORKERS"));
    let mut rt = tokio::runtime::Builder::new_multi_thread();
    rt.enable_all();
    if let Some(w) = workers {
        rt.worker_threads(w);
    }
    rt.build()?.block_on(async move {
        let registry = Arc::new(MapRegistry::new());
        registry.insert(Export {
            name: "mem".into(),
            description: format!("{size}-byte in-memory device"),
            dev: Arc::new(MemDev::new(size)),
            pace: None,
        });
        registry.set_default(Some("mem"));
        let _ = std::fs::remove_file(&path);
        let listener = tokio::net::UnixListener::bind(&path)?;
        let (tx, rx) = tokio::sync::watch::channel(false);
        tokio::spawn(async move {
            let mut term =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                    .expect("SIGTERM handler");
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            let _ = tx.send(true);
        });
        eprintln!("serving {size} bytes on {path}");
        Server::new(registry, ServerConfig::default())
            .serve_unix(listener, rx)
            .await?;
        let _ = std::fs::remove_file(&path);
        Ok(())
    })
}

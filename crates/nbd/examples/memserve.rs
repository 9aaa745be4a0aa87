//! Serves in-memory devices over NBD on a Unix socket, for benchmarks and manual
//! testing:
//!
//! ```text
//! cargo run --release -p nbd --example memserve -- /tmp/x.sock [SIZE_BYTES] [WORKERS]
//! fio --name=t --ioengine=nbd --uri='nbd+unix:///?socket=/tmp/x.sock' --rw=randread --bs=4k --iodepth=32 --size=256m
//! ```
//!
//! The export is named `mem` and is also the default export. SIZE_BYTES defaults
//! to 1 GiB; WORKERS (tokio worker threads of the listener's runtime; each
//! connection has a thread of its own) defaults to the number of CPUs. With
//! LATENCY_US, the export runs in emulation mode: every operation completes that
//! many microseconds after it is issued, on a monotonic clock. Stops on Ctrl-C or
//! SIGTERM.
//!
//! ```text
//! memserve SOCKET [SIZE_BYTES] [WORKERS] [LATENCY_US]
//! ```

use std::sync::Arc;

use blockdev::{BlockDev, IoResult, MemDev};
use clock::{Clock, MonotonicClock};
use nbd::{Export, MapRegistry, Server, ServerConfig};

/// A MemDev whose operations complete a fixed latency after they are issued.
struct FixedLatency {
    inner: MemDev,
    clock: Arc<dyn Clock>,
    latency_ns: u64,
}

impl FixedLatency {
    fn done(&self) -> u64 {
        self.clock.now() + self.latency_ns
    }
}

impl BlockDev for FixedLatency {
    fn size(&self) -> u64 {
        self.inner.size()
    }
    fn read(&self, offset: u64, buf: &mut [u8]) -> IoResult {
        self.inner.read(offset, buf).map(|_| self.done())
    }
    fn write(&self, offset: u64, data: &[u8], fua: bool) -> IoResult {
        self.inner.write(offset, data, fua).map(|_| self.done())
    }
    fn flush(&self) -> IoResult {
        Ok(self.done())
    }
    fn trim(&self, offset: u64, len: u64) -> IoResult {
        self.inner.trim(offset, len).map(|_| self.done())
    }
    fn write_zeroes(&self, offset: u64, len: u64, fua: bool) -> IoResult {
        self.inner
            .write_zeroes(offset, len, fua)
            .map(|_| self.done())
    }
}

fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let path = args
        .next()
        .unwrap_or_else(|| "/tmp/flexssd-nbd.sock".into());
    let size: u64 = args
        .next()
        .map(|s| s.parse().expect("SIZE_BYTES"))
        .unwrap_or(1 << 30);
    let workers: Option<usize> = args
        .next()
        .map(|s| s.parse().expect("WORKERS"))
        .filter(|&w| w > 0);
    let latency_us: Option<u64> = args.next().map(|s| s.parse().expect("LATENCY_US"));
    let mut rt = tokio::runtime::Builder::new_multi_thread();
    rt.enable_all();
    if let Some(w) = workers {
        rt.worker_threads(w);
    }
    rt.build()?.block_on(async move {
        let registry = Arc::new(MapRegistry::new());
        let export = match latency_us {
            None => Export {
                name: "mem".into(),
                description: format!("{size}-byte in-memory device"),
                dev: Arc::new(MemDev::new(size)),
                pace: None,
                gate: None,
                owner: None,
            },
            Some(us) => {
                let clock: Arc<dyn Clock> = Arc::new(MonotonicClock::new());
                Export {
                    name: "mem".into(),
                    description: format!("{size}-byte in-memory device, {us} us per operation"),
                    dev: Arc::new(FixedLatency {
                        inner: MemDev::new(size),
                        clock: clock.clone(),
                        latency_ns: us * 1000,
                    }),
                    pace: Some(clock),
                    gate: None,
                    owner: None,
                }
            }
        };
        registry.insert(export);
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

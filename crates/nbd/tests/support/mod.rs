//! Shared by the black-box tests: a server on its own tokio runtime in a
//! background thread, listening on a Unix socket, stopped on drop.

// Each test binary compiles this module and uses a part of it.
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use nbd::{Export, MapRegistry, Server, ServerConfig};

/// A server on `<dir>/nbd.sock`, serving until dropped.
pub struct Running {
    /// Its directory (the socket and any files a test puts beside it).
    pub dir: tempfile::TempDir,
    /// The Unix socket it listens on.
    pub sock: PathBuf,
    stop: tokio::sync::watch::Sender<bool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Running {
    /// Serves `exports` (the first is also the default export) with `config`.
    pub fn start(dir: tempfile::TempDir, exports: Vec<Export>, config: ServerConfig) -> Self {
        let sock = dir.path().join("nbd.sock");
        let reg = MapRegistry::new();
        let default = exports[0].name.clone();
        for e in exports {
            reg.insert(e);
        }
        reg.set_default(Some(&default));
        let server = Server::new(Arc::new(reg), config);
        let (stop, rx) = tokio::sync::watch::channel(false);
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let path = sock.clone();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let listener = tokio::net::UnixListener::bind(&path).unwrap();
                ready_tx.send(()).unwrap();
                server.serve_unix(listener, rx).await.unwrap();
            });
        });
        ready_rx.recv_timeout(Duration::from_secs(10)).unwrap();
        Self {
            dir,
            sock,
            stop,
            thread: Some(thread),
        }
    }

    /// Serves `exports` with the default configuration in a new directory.
    pub fn serve(exports: Vec<Export>) -> Self {
        Self::start(
            tempfile::tempdir().unwrap(),
            exports,
            ServerConfig::default(),
        )
    }

    /// The plain URI of `export`.
    pub fn uri(&self, export: &str) -> String {
        format!("nbd+unix:///{export}?socket={}", self.sock.display())
    }

    /// A path inside the server's directory.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

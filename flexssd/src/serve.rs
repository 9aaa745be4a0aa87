//! `flexssd serve`: the daemon.
//!
//! Startup order matters: the network addresses are bound first, before any
//! state exists (a second daemon started on a busy port must fail without
//! creating a data directory, a device file or a vSSD, and a daemon that cannot
//! serve should not have changed anything), then the data directory is locked
//! before anything in it is touched, the host manager recovers every vSSD before a client can connect, the
//! first admin token exists before the API listens (with `[api] auth = "token"`),
//! and the listeners are bound before the addresses are announced. Shutdown
//! reverses it: stop accepting, let the servers drain, then close every vSSD
//! (which checkpoints it).
//!
//! Nothing reachable from another host is served unprotected by accident: a
//! non-loopback NBD TCP address needs TLS, and a non-loopback API address needs
//! tokens and HTTPS, unless `--insecure` says the operator means it.

use std::fs::File;
use std::io::{IsTerminal, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clock::MonotonicClock;
use control::{ApiAuth, Config, HostManager, NbdTls};
use tokio::net::{TcpListener, UnixListener};
use tokio::sync::watch;
use tracing::{error, info, warn};

use crate::api;
use crate::ServeArgs;

/// Loads the configuration and applies the command-line overrides.
fn load_config(args: &ServeArgs) -> Result<Config> {
    let mut cfg = match &args.config {
        Some(path) => Config::load(path)?,
        None => Config::default(),
    };
    if let Some(d) = &args.data_dir {
        cfg.data_dir = d.clone();
    }
    if let Some(m) = args.mode {
        cfg.mode = m;
    }
    if let Some(a) = args.api_listen {
        cfg.api.listen = a;
    }
    if let Some(s) = &args.nbd_socket {
        cfg.nbd.socket = Some(s.clone());
    }
    if let Some(t) = args.nbd_tcp {
        cfg.nbd.tcp = Some(t);
    }
    // Absolute paths: what is logged and recorded does not depend on where the next
    // start runs from.
    cfg.data_dir = absolute(&cfg.data_dir);
    cfg.nbd.socket = Some(absolute(&cfg.nbd_socket()));
    for d in &mut cfg.devices {
        d.path = d.path.as_deref().map(absolute);
    }
    cfg.validate()?;
    if let Some(addr) = cfg.nbd.tcp {
        if !addr.ip().is_loopback() && cfg.nbd.tls != NbdTls::Require && !args.insecure {
            bail!(
                "refusing to serve NBD on {addr} without TLS: set [nbd] tls = \"require\" with \
                 tls_psk_file or tls_certificates, or pass --insecure to serve every export \
                 to anyone who reaches the port"
            );
        }
    }
    let api = &cfg.api;
    let protected = api.auth == ApiAuth::Token && api.tls();
    if !(api.listen.ip().is_loopback() || protected || args.insecure) {
        bail!(
            "refusing to serve the HTTP API on {} without authentication and TLS: set [api] \
             auth = \"token\" and tls_cert / tls_key, or pass --insecure to let anyone who \
             reaches the port read the traffic{}",
            api.listen,
            if api.auth == ApiAuth::Off {
                " and manage every vSSD"
            } else {
                ""
            }
        );
    }
    Ok(cfg)
}

/// The API's TLS settings from `[api] tls_cert` and `tls_key`, read and
/// checked at start so that a bad file stops the daemon naming it; `None` for
/// plain HTTP.
fn api_tls_config(cfg: &Config) -> Result<Option<Arc<rustls::ServerConfig>>> {
    let (Some(cert), Some(key)) = (&cfg.api.tls_cert, &cfg.api.tls_key) else {
        return Ok(None);
    };
    tls_server_config(cert, key, "[api] tls_cert", "[api] tls_key").map(Some)
}

/// An HTTPS server configuration from a PEM certificate chain and key; the
/// errors name the files by the settings `cert_name` and `key_name`.
pub(crate) fn tls_server_config(
    cert: &Path,
    key: &Path,
    cert_name: &str,
    key_name: &str,
) -> Result<Arc<rustls::ServerConfig>> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let certs = CertificateDer::pem_file_iter(cert)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .with_context(|| format!("{cert_name} {}", cert.display()))?;
    if certs.is_empty() {
        bail!(
            "{cert_name} {}: no PEM CERTIFICATE in the file",
            cert.display()
        );
    }
    let private = PrivateKeyDer::from_pem_file(key)
        .with_context(|| format!("{key_name} {}", key.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut sc = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("TLS protocol versions")?
        .with_no_client_auth()
        .with_single_cert(certs, private)
        .with_context(|| {
            format!(
                "{cert_name} {} and {key_name} {} do not make a usable certificate",
                cert.display(),
                key.display()
            )
        })?;
    sc.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(sc))
}

/// The file the first admin token is written to: `<data_dir>/admin.token`.
fn admin_token_path(cfg: &Config) -> PathBuf {
    cfg.data_dir.join("admin.token")
}

/// With `[api] auth = "token"` and no admin token in the store (first start,
/// or every admin token revoked), makes one and writes it to
/// `<data_dir>/admin.token`, readable by the daemon's user only (0600). Logs
/// the path, never the token.
fn bootstrap_admin_token(cfg: &Config, mgr: &HostManager) -> Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    if cfg.api.auth != ApiAuth::Token || mgr.has_admin_token()? {
        return Ok(());
    }
    let path = admin_token_path(cfg);
    let created_s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (token, rec) = mgr.create_api_token("admin", auth::Role::Admin, created_s)?;
    // A fresh file created 0600 (never a wider mode, even for a moment), then
    // renamed over any old one.
    let tmp = path.with_extension("token.tmp");
    let _ = std::fs::remove_file(&tmp);
    let write = || -> std::io::Result<()> {
        let mut f = File::options()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        writeln!(f, "{}", token.bearer())?;
        f.sync_all()?;
        std::fs::rename(&tmp, &path)
    };
    if let Err(e) = write() {
        // Without the file nobody could use the token: take it back.
        let _ = mgr.revoke_api_token(&rec.id);
        return Err(e)
            .with_context(|| format!("writing the first admin token to {}", path.display()));
    }
    info!(
        id = %rec.id,
        "created the first admin API token; it is in {} (mode 0600): use it with --token-file",
        path.display()
    );
    Ok(())
}

/// The NBD server's settings from `[nbd]`: TLS (key files read and checked
/// here, so a bad one stops the start with its path) and the limits.
fn nbd_server_config(cfg: &Config) -> Result<nbd::ServerConfig> {
    let n = &cfg.nbd;
    let psk = match &n.tls_psk_file {
        Some(path) => Some(nbd::PskKeys::load(path).context("[nbd] tls_psk_file")?),
        None => None,
    };
    let mode = match n.tls {
        NbdTls::Off => nbd::TlsMode::Off,
        NbdTls::On => nbd::TlsMode::On,
        NbdTls::Require => nbd::TlsMode::Require,
    };
    let tls = nbd::Tls::new(nbd::TlsSetup {
        mode,
        psk,
        certificates: n.tls_certificates.clone(),
        verify_peer: n.tls_verify_peer,
    })
    .context("[nbd] TLS")?;
    if let Some(t) = &tls {
        info!(mode = ?t.mode(), psk = n.tls_psk_file.is_some(), certificates = n.tls_certificates.is_some(), "NBD TLS on");
    }
    Ok(nbd::ServerConfig {
        tls: tls.map(Arc::new),
        handshake_timeout: Duration::from_millis(n.handshake_timeout_ms),
        max_connections: n.max_connections,
        max_connections_per_tenant: n.max_connections_per_tenant,
        max_handshakes_per_source: n.max_handshakes_per_source,
        spin_polls: n.spin_polls,
        ..nbd::ServerConfig::default()
    })
}

/// Takes an exclusive `flock` on `<data_dir>/flexssd.lock` for the daemon's life, so
/// that two daemons never manage the same flash.
fn lock_data_dir(cfg: &Config) -> Result<File> {
    let mut f = lock_data_dir_with(cfg, true)?;
    f.set_len(0)?;
    write!(f, "{}", std::process::id())?;
    Ok(f)
}

/// Takes the data directory's lock, creating the lock file only with `create`;
/// fails naming the daemon that holds it.
fn lock_data_dir_with(cfg: &Config, create: bool) -> Result<File> {
    let path = cfg.lock_path();
    let f = File::options()
        .create(create)
        .truncate(false)
        .read(true)
        .write(true)
        .open(&path)
        .with_context(|| format!("opening lock file {}", path.display()))?;
    // SAFETY: flock on a file descriptor we own.
    let rc = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc != 0 {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
            let holder = std::fs::read_to_string(&path).unwrap_or_default();
            let holder = holder.trim();
            bail!(
                "another flexssd daemon{} is using data directory {} (it holds {})",
                if holder.is_empty() {
                    String::new()
                } else {
                    format!(" (pid {holder})")
                },
                cfg.data_dir.display(),
                path.display()
            );
        }
        return Err(e).with_context(|| format!("locking {}", path.display()));
    }
    Ok(f)
}

fn absolute(p: &Path) -> PathBuf {
    std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf())
}

/// Runs the daemon until SIGINT or SIGTERM.
pub fn run(args: &ServeArgs) -> Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    let cfg = load_config(args)?;
    // Read the certificate before touching the data directory, so a bad file
    // stops the start at once, naming it.
    let api_tls = api_tls_config(&cfg)?;
    // The harvester trains its predictors (candle) in this process: one
    // thread per tiny matrix product and an allocator that keeps its heap.
    // Before any other thread starts.
    predict::tune_process_for_training();
    // Before any state: the addresses this daemon will serve on.
    let early = bind_early(&cfg)?;
    std::fs::create_dir_all(&cfg.data_dir)
        .with_context(|| format!("creating data directory {}", cfg.data_dir.display()))?;
    let _lock = lock_data_dir(&cfg)?;
    let mgr = Arc::new(
        HostManager::open(&cfg, Arc::new(MonotonicClock::new()))
            .with_context(|| format!("starting the host manager on {}", cfg.data_dir.display()))?,
    );
    bootstrap_admin_token(&cfg, &mgr)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting tokio")?;
    let result = rt.block_on(serve(&cfg, mgr.clone(), api_tls, early));
    // Close every vSSD (checkpoint) whatever happened to the servers.
    let closed = mgr.shutdown();
    rt.shutdown_timeout(Duration::from_secs(2));
    let sock = cfg.nbd_socket();
    let _ = std::fs::remove_file(&sock);
    result?;
    closed.context("closing the vSSDs")?;
    info!("flexssd stopped");
    Ok(())
}

/// The TCP listeners bound before the daemon touches any state.
struct EarlyListeners {
    api: std::net::TcpListener,
    nbd_tcp: Option<std::net::TcpListener>,
}

/// Binds the HTTP API and NBD TCP addresses, and checks that no server is
/// listening on the NBD unix socket, before any state is created: an address
/// that is taken stops the start here, naming it, with nothing changed. (The
/// unix socket itself is bound once the data directory is locked, since a
/// stale socket file there is removed first.)
fn bind_early(cfg: &Config) -> Result<EarlyListeners> {
    // A daemon already on this data directory is the likeliest reason for a busy
    // address: say so (checked without creating the directory or the lock file).
    if std::fs::exists(cfg.lock_path()).unwrap_or(false) {
        drop(lock_data_dir_with(cfg, false)?);
    }
    let bind = |addr: std::net::SocketAddr, what: &str| {
        let l = std::net::TcpListener::bind(addr).with_context(|| {
            format!("binding {what} on {addr} (is another daemon running? nothing was created)")
        })?;
        l.set_nonblocking(true)
            .with_context(|| format!("{what} on {addr}: setting non-blocking"))?;
        Ok::<_, anyhow::Error>(l)
    };
    let api = bind(cfg.api.listen, "the HTTP API")?;
    let nbd_tcp = match cfg.nbd.tcp {
        Some(addr) => Some(bind(addr, "the NBD TCP address")?),
        None => None,
    };
    let sock = cfg.nbd_socket();
    if std::os::unix::net::UnixStream::connect(&sock).is_ok() {
        bail!(
            "the NBD socket {} is in use: another server is listening on it (nothing was created)",
            sock.display()
        );
    }
    Ok(EarlyListeners { api, nbd_tcp })
}

async fn serve(
    cfg: &Config,
    mgr: Arc<HostManager>,
    api_tls: Option<Arc<rustls::ServerConfig>>,
    early: EarlyListeners,
) -> Result<()> {
    let (stop_tx, stop_rx) = watch::channel(false);

    // NBD on the unix socket. We hold the data-dir lock, so a socket file left there
    // is stale.
    let sock = cfg.nbd_socket();
    if sock.exists() {
        std::fs::remove_file(&sock)
            .with_context(|| format!("removing stale socket {}", sock.display()))?;
    }
    if let Some(dir) = sock.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let unix = UnixListener::bind(&sock)
        .with_context(|| format!("binding NBD socket {}", sock.display()))?;
    let tcp = match early.nbd_tcp {
        Some(l) => Some(TcpListener::from_std(l).context("the NBD TCP listener")?),
        None => None,
    };
    let api = TcpListener::from_std(early.api).context("the HTTP API's listener")?;
    let api_addr = api.local_addr()?;

    let registry: Arc<dyn nbd::ExportRegistry> = mgr.clone();
    let server = Arc::new(nbd::Server::new(registry, nbd_server_config(cfg)?));
    let mut tasks = tokio::task::JoinSet::new();
    {
        let (s, rx) = (server.clone(), stop_rx.clone());
        tasks.spawn(async move {
            let r = s.serve_unix(unix, rx).await;
            info!(result = ?r, "NBD unix server stopped");
        });
    }
    if let Some(l) = tcp {
        let addr = l.local_addr()?;
        let (s, rx) = (server.clone(), stop_rx.clone());
        tasks.spawn(async move {
            let r = s.serve_tcp(l, rx).await;
            info!(result = ?r, "NBD TCP server stopped");
        });
        info!("NBD listening on tcp {addr}: nbd://{addr}/default");
    }
    {
        let sampler = api::Sampler::new(cfg.api.dashboard);
        if cfg.api.dashboard.enabled {
            // The dashboard's rates: a sample of every vSSD's counters every
            // sample_ms, on the manager's clock.
            let h = sampler.spawn(mgr.clone(), stop_rx.clone());
            tasks.spawn(async move {
                let _ = h.await;
            });
            info!(
                "dashboard on {}://{api_addr}/dashboard",
                if api_tls.is_some() { "https" } else { "http" }
            );
        }
        let app = api::router_with(
            mgr.clone(),
            api::Info::new(cfg, &sock, api_addr),
            &cfg.api,
            sampler,
        );
        let mut rx = stop_rx.clone();
        match api_tls.clone() {
            None => {
                tasks.spawn(async move {
                    let r = axum::serve(api, app)
                        .with_graceful_shutdown(async move {
                            let _ = rx.wait_for(|s| *s).await;
                        })
                        .await;
                    if let Err(e) = r {
                        error!("HTTP API failed: {e}");
                    }
                });
            }
            Some(tls) => {
                let handle = axum_server::Handle::new();
                let server = axum_server::tls_rustls::from_tcp_rustls(
                    api.into_std().context("the HTTP API's listener")?,
                    axum_server::tls_rustls::RustlsConfig::from_config(tls),
                )
                .context("serving HTTPS")?
                .handle(handle.clone());
                tasks.spawn(async move {
                    let _ = rx.wait_for(|s| *s).await;
                    handle.graceful_shutdown(Some(Duration::from_secs(5)));
                });
                tasks.spawn(async move {
                    if let Err(e) = server.serve(app.into_make_service()).await {
                        error!("HTTPS API failed: {e}");
                    }
                });
            }
        }
    }
    if cfg.harvest.enabled {
        // The harvester: one period every tick_ms on a blocking thread (it erases
        // and copies flash); the manager reads time only from its clock.
        let (m, mut rx) = (mgr.clone(), stop_rx.clone());
        let period = Duration::from_millis(cfg.harvest.tick_ms);
        tasks.spawn(async move {
            let mut every = tokio::time::interval(period);
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = every.tick() => {}
                    _ = rx.wait_for(|s| *s) => break,
                }
                let m = m.clone();
                match tokio::task::spawn_blocking(move || m.harvest_tick()).await {
                    Ok(Ok(_)) => {}
                    Ok(Err(e)) => warn!("harvester: {e}"),
                    Err(e) => error!("harvester panicked: {e}"),
                }
            }
        });
        // Early reclamation between periods, when a home's write path asks
        // for its lent flash: a thread of its own, since writes waiting for
        // room may occupy the runtime's workers.
        let (m, rx) = (mgr.clone(), stop_rx.clone());
        std::thread::Builder::new()
            .name("flexssd-reclaim".into())
            .spawn(move || m.serve_pressure(|| *rx.borrow()))
            .context("starting the reclaim thread")?;
        info!(tick_ms = cfg.harvest.tick_ms, "harvester running");
    }
    if let Some(cl) = &cfg.cluster {
        // Fleet membership: register, publish, converge to the desired vSSDs.
        // etcd being down at start is retried (with a log line each second),
        // never fatal: the host serves its own vSSDs meanwhile.
        let mut agent_cfg = cluster::agent::AgentConfig::from_settings(cl);
        agent_cfg.nbd_tls = cfg.nbd.tls != NbdTls::Off;
        let agent = cluster::Agent::new(
            agent_cfg,
            Arc::new(cluster::host::ManagerHost::new(mgr.clone())),
            cluster::system_wall(),
        );
        let rx = stop_rx.clone();
        tasks.spawn(async move {
            if let Err(e) = agent.run(rx, 0).await {
                error!("fleet agent stopped: {e}");
            }
        });
        info!(host = %cl.host_id, endpoints = ?cl.endpoints, "joining the fleet");
    }
    info!(mode = %cfg.mode, data_dir = %cfg.data_dir.display(), "flexssd running");
    let scheme = if api_tls.is_some() { "https" } else { "http" };
    info!(
        auth = ?cfg.api.auth,
        "HTTP API listening on {scheme}://{api_addr} (try: flexssd --api {scheme}://{api_addr} vssd list)"
    );
    info!("NBD listening on unix socket {}", sock.display());
    let scheme = if cfg.nbd.tls == NbdTls::Off {
        "nbd+unix"
    } else {
        "nbds+unix"
    };
    for l in nbd::ExportRegistry::list(&*mgr) {
        println!("{scheme}:///{}?socket={}", l.name, sock.display());
    }
    info!(
        "inspect an export with: nbdinfo 'nbd+unix:///default?socket={}'",
        sock.display()
    );

    wait_for_signal().await?;
    info!("shutting down");
    let _ = stop_tx.send(true);
    let drain = async { while tasks.join_next().await.is_some() {} };
    if tokio::time::timeout(Duration::from_secs(10), drain)
        .await
        .is_err()
    {
        warn!("servers did not stop within 10 s; closing the vSSDs anyway");
    }
    Ok(())
}

pub(crate) async fn wait_for_signal() -> Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).context("installing SIGTERM handler")?;
    let mut int = signal(SignalKind::interrupt()).context("installing SIGINT handler")?;
    tokio::select! {
        _ = term.recv() => info!("received SIGTERM"),
        _ = int.recv() => info!("received SIGINT"),
    }
    Ok(())
}

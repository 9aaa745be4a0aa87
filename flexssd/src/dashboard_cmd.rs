//! `flexssd dashboard synthetic`: the dashboard page over SYNTHETIC data, to
//! measure how it copes with a host far bigger than a test can build (1,000
//! vSSDs, 10,000 gSSDs by default; `scripts/bench-dashboard.sh`). The page,
//! its script and the renderer are the daemon's own; only the data is made
//! up (seeded, `dashboard::synthetic`), and the page's title says so.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::{Context, Result};
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use clap::{Args, Subcommand};
use dashboard::synthetic::Shape;
use dashboard::{Snapshot, View};
use serde::Deserialize;

/// `flexssd dashboard ...`.
#[derive(Debug, Args)]
pub struct DashboardArgs {
    #[command(subcommand)]
    cmd: DashboardCmd,
}

#[derive(Debug, Subcommand)]
enum DashboardCmd {
    /// Serve the dashboard over synthetic data (for measuring it at scale).
    Synthetic(SyntheticArgs),
}

#[derive(Debug, Args)]
struct SyntheticArgs {
    /// vSSDs.
    #[arg(long, default_value_t = 1000)]
    vssds: usize,
    /// gSSDs.
    #[arg(long, default_value_t = 10_000)]
    gssds: usize,
    /// Seed of the generator.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Most rows of the long tables.
    #[arg(long, default_value_t = 200)]
    rows: usize,
    /// Where to listen (loopback by default: the data is made up, but the
    /// port is still open).
    #[arg(long, default_value = "127.0.0.1:8741")]
    listen: SocketAddr,
}

struct Synth {
    snap: Snapshot,
    rows: usize,
    /// Requests so far: each one sees the clock 2 s later and every vSSD's
    /// rates moved on by one sample, so that live updates have changes to
    /// draw (the flash map, the pool and the events stay as they are).
    served: std::sync::atomic::AtomicU64,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Q {
    #[serde(default)]
    vssd: Option<String>,
    #[serde(default)]
    rows: Option<usize>,
}

async fn fragment(
    State(s): State<Arc<Synth>>,
    q: Result<Query<Q>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let q = match q {
        Ok(Query(q)) => q,
        Err(e) => {
            return (
                StatusCode::BAD_REQUEST,
                format!("invalid query: {}", e.body_text()),
            )
                .into_response()
        }
    };
    let k = s.served.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut snap = s.snap.clone();
    snap.now_ns += k * 2_000_000_000;
    for v in &mut snap.vssds {
        let n = v.rates.len().max(1);
        v.rates.rotate_left(k as usize % n);
    }
    match View::parse(q.vssd, q.rows, s.rows) {
        Ok(view) => crate::api::dashboard_fragment(dashboard::render_body(&snap, &view)),
        Err(e) => (StatusCode::BAD_REQUEST, e.to_string()).into_response(),
    }
}

/// Runs `flexssd dashboard ...`.
pub fn run(a: &DashboardArgs) -> Result<()> {
    let DashboardCmd::Synthetic(a) = &a.cmd;
    anyhow::ensure!(
        a.vssds >= 1 && a.vssds <= 100_000,
        "--vssds {}: between 1 and 100000",
        a.vssds
    );
    anyhow::ensure!(a.gssds <= 1_000_000, "--gssds {}: at most 1000000", a.gssds);
    anyhow::ensure!(
        (1..=100_000).contains(&a.rows),
        "--rows {}: between 1 and 100000",
        a.rows
    );
    let shape = Shape {
        vssds: a.vssds,
        gssds: a.gssds,
        ..Shape::default()
    };
    let snap = dashboard::synthetic::snapshot(shape, a.seed, 100_000);
    let st = Arc::new(Synth {
        snap,
        rows: a.rows,
        served: std::sync::atomic::AtomicU64::new(0),
    });
    let title = format!(
        "flexssd dashboard: SYNTHETIC data ({} vSSDs, {} gSSDs)",
        a.vssds, a.gssds
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting tokio")?;
    rt.block_on(async move {
        let app =
            Router::new()
                .route(
                    "/dashboard",
                    get(move || async move {
                        crate::api::dashboard_page(&title, "/v1/dashboard", 2000)
                    }),
                )
                .route("/dashboard/app.js", get(crate::api::dashboard_app_js))
                .route("/dashboard/style.css", get(crate::api::dashboard_style_css))
                .route("/v1/dashboard", get(fragment))
                .with_state(st);
        let l = tokio::net::TcpListener::bind(a.listen)
            .await
            .with_context(|| format!("binding {}", a.listen))?;
        println!(
            "synthetic dashboard on http://{}/dashboard (SYNTHETIC data, not a host)",
            l.local_addr()?
        );
        axum::serve(l, app)
            .with_graceful_shutdown(async {
                let _ = crate::serve::wait_for_signal().await;
            })
            .await
            .context("serving")
    })
}

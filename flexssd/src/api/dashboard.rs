//! The operator dashboard's routes (rendering is the `dashboard` crate's).
//!
//! * `GET /dashboard`, `/dashboard/app.js`, `/dashboard/style.css`: the page
//!   and its two static files, compiled into the binary. They hold no data,
//!   so they are served without a token (a browser cannot send a bearer
//!   token on a plain navigation); the page's script asks for one when the
//!   API answers 401, keeps it in the tab's sessionStorage and sends it as
//!   `Authorization: Bearer` on every fetch. A strict content security policy
//!   lets the page run only its own script and style.
//! * `GET /v1/dashboard?vssd=NAME&rows=N`: the page's HTML fragment, built
//!   for the caller with the same filters as the JSON routes (a tenant sees
//!   its vSSDs, their harvest volumes and their events; the flash map and the
//!   gSSD pool are host-wide, for admins).
//! * `GET /v1/vssds/{name}/rates`: the rates behind the page's numbers.
//! * `GET /v1/devices/{name}/flash`: who owns every block, and its wear.
//!
//! [`Sampler`] keeps the counter history for the rates: the daemon samples
//! every `sample_ms` on the manager's clock; the history's lock guards an
//! in-memory update only (the stats are read before it is taken).

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::extract::{Query, State};
use axum::http::{header, HeaderName, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use control::{DashboardSettings, HostManager};
use dashboard::{History, Snapshot, View, Viewer, VssdRow};
use serde::{Deserialize, Serialize};

use super::{
    blocking, owned, require_admin, require_vssd, ApiError, ApiResult, Caller, Shared, UrlPath,
};

/// The counter history the dashboard's rates come from.
pub struct Sampler {
    history: Mutex<History>,
    settings: DashboardSettings,
}

impl Sampler {
    /// An empty history with `settings`' window.
    pub fn new(settings: DashboardSettings) -> Arc<Self> {
        Arc::new(Sampler {
            history: Mutex::new(History::new(settings.window_s * 1_000_000_000)),
            settings,
        })
    }

    fn history(&self) -> MutexGuard<'_, History> {
        // A panic while recording leaves a history that is still well formed.
        self.history.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes one sample of every active vSSD now (blocking: reads the stats).
    pub fn sample(&self, mgr: &HostManager) {
        let stats = mgr.stats();
        let now = mgr.clock().now();
        self.history().record(now, &stats.vssds);
    }

    /// Samples every `sample_ms` until `stop` turns true.
    pub fn spawn(
        self: &Arc<Self>,
        mgr: Arc<HostManager>,
        mut stop: tokio::sync::watch::Receiver<bool>,
    ) -> tokio::task::JoinHandle<()> {
        let me = self.clone();
        tokio::spawn(async move {
            let mut every = tokio::time::interval(Duration::from_millis(me.settings.sample_ms));
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = every.tick() => {}
                    _ = stop.wait_for(|s| *s) => break,
                }
                let (s, m) = (me.clone(), mgr.clone());
                if let Err(e) = tokio::task::spawn_blocking(move || s.sample(&m)).await {
                    tracing::error!("dashboard sampler panicked: {e}");
                }
            }
        })
    }
}

/// Headers every dashboard response carries: never cached (the fragment is
/// the caller's own), never framed, only the page's own script and style.
fn secure(mut r: Response, content_type: &'static str) -> Response {
    let h = r.headers_mut();
    let set = |h: &mut axum::http::HeaderMap, k: HeaderName, v: &'static str| {
        h.insert(k, axum::http::HeaderValue::from_static(v));
    };
    set(h, header::CONTENT_TYPE, content_type);
    set(h, header::CACHE_CONTROL, "no-store");
    set(h, header::X_CONTENT_TYPE_OPTIONS, "nosniff");
    set(h, header::REFERRER_POLICY, "no-referrer");
    set(h, header::X_FRAME_OPTIONS, "DENY");
    set(
        h,
        header::CONTENT_SECURITY_POLICY,
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
         connect-src 'self'; form-action 'none'; frame-ancestors 'none'; base-uri 'none'",
    );
    r
}

/// The page shell of `title`, fetching `data_path` every `refresh_ms`.
pub(crate) fn page_response(title: &str, data_path: &str, refresh_ms: u64) -> Response {
    secure(
        dashboard::page(title, data_path, refresh_ms).into_response(),
        "text/html; charset=utf-8",
    )
}

/// `/dashboard/app.js`.
pub(crate) async fn app_js() -> Response {
    secure(
        dashboard::APP_JS.into_response(),
        "text/javascript; charset=utf-8",
    )
}

/// `/dashboard/style.css`.
pub(crate) async fn style_css() -> Response {
    secure(
        dashboard::STYLE_CSS.into_response(),
        "text/css; charset=utf-8",
    )
}

/// An HTML fragment for the page.
pub(crate) fn fragment(html: String) -> Response {
    secure(html.into_response(), "text/html; charset=utf-8")
}

pub(super) async fn get_page(State(st): State<Shared>) -> Response {
    page_response(
        "flexssd dashboard",
        "/v1/dashboard",
        st.sampler.settings.refresh_ms,
    )
}

/// `GET /v1/dashboard` query.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct DashQuery {
    #[serde(default)]
    vssd: Option<String>,
    #[serde(default)]
    rows: Option<usize>,
}

pub(super) async fn get_fragment(
    State(st): State<Shared>,
    Caller(p): Caller,
    q: Result<Query<DashQuery>, axum::extract::rejection::QueryRejection>,
) -> ApiResult<Response> {
    let Query(q) = q.map_err(|e| {
        ApiError(
            StatusCode::BAD_REQUEST,
            format!("invalid query: {}", e.body_text()),
        )
    })?;
    let view = View::parse(q.vssd, q.rows, st.sampler.settings.rows)
        .map_err(|e| ApiError(StatusCode::BAD_REQUEST, e.to_string()))?;
    let st2 = st.clone();
    let v2 = view.clone();
    let snap = blocking(&st, move |m| Ok(snapshot(&st2, m, &p, &v2))).await?;
    Ok(fragment(dashboard::render_body(&snap, &view)))
}

/// What `p` may see, read from the manager (blocking).
fn snapshot(st: &Shared, m: &HostManager, p: &auth::Principal, view: &View) -> Snapshot {
    let admin = p.is_admin();
    let mine = owned(st, p);
    let stats = m.stats();
    let list = m.list();
    let mut rows: Vec<VssdRow> = {
        // The history's lock after the manager's, never around it.
        let h = st.sampler.history();
        list.into_iter()
            .filter(|v| admin || mine.vssds.contains(&v.name))
            .map(|info| VssdRow {
                stats: stats.vssds.iter().find(|s| s.name == info.name).cloned(),
                rates: h.rates(&info.name),
                info,
            })
            .collect()
    };
    rows.sort_by(|a, b| a.info.name.cmp(&b.info.name));
    let detail = view
        .vssd
        .as_ref()
        .filter(|n| rows.iter().any(|r| &r.info.name == *n))
        .and_then(|n| m.vssd_sla(n).ok());
    let flash = admin.then(|| {
        stats
            .devices
            .iter()
            .filter_map(|d| m.flash_map(&d.name).ok())
            .collect()
    });
    let mut volumes = m.harvest_volumes();
    volumes.retain(|v| admin || mine.volumes.contains(&v.name));
    let mut events = m.harvest_events(0);
    if !admin {
        events.retain(|e| {
            e.volume.as_ref().is_some_and(|v| mine.volumes.contains(v))
                || e.home.as_ref().is_some_and(|h| mine.vssds.contains(h))
        });
    }
    let events_total = events.len();
    let events = events.split_off(events_total.saturating_sub(view.rows));
    Snapshot {
        now_ns: m.clock().now(),
        viewer: if admin {
            Viewer::Admin
        } else {
            Viewer::Tenant(p.tenant.clone().unwrap_or_default())
        },
        flash,
        vssds: rows,
        detail,
        harvest_enabled: m.harvest_status().enabled,
        gssds: admin.then(|| m.gssds()),
        volumes,
        events,
        events_total,
    }
}

/// `GET /v1/vssds/{name}/rates`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RatesReply {
    /// vSSD name.
    pub name: String,
    /// How often the counters are sampled, ms.
    pub sample_ms: u64,
    /// How much history is kept, s.
    pub window_s: u64,
    /// Rates between consecutive samples, oldest first.
    pub rates: Vec<dashboard::Rate>,
}

pub(super) async fn get_rates(
    State(st): State<Shared>,
    Caller(p): Caller,
    UrlPath(name): UrlPath<String>,
) -> ApiResult<Json<RatesReply>> {
    require_vssd(&st, &p, &name)?;
    let rates = st.sampler.history().rates(&name);
    Ok(Json(RatesReply {
        name,
        sample_ms: st.sampler.settings.sample_ms,
        window_s: st.sampler.settings.window_s,
        rates,
    }))
}

pub(super) async fn get_flash(
    State(st): State<Shared>,
    Caller(p): Caller,
    UrlPath(name): UrlPath<String>,
) -> ApiResult<Json<control::FlashMap>> {
    require_admin(&p, &format!("read the flash map of device {name:?}"))?;
    Ok(Json(blocking(&st, move |m| m.flash_map(&name)).await?))
}

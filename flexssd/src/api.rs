//! The HTTP/JSON control API.
//!
//! A small REST surface over the [`HostManager`]; the CLI client uses nothing else.
//! Every error is `{"error": "..."}` with a status that says whose fault it is:
//! 400 bad input, 401 no valid token, 403 a route this token's role may not
//! use, 404 unknown name (or one this token may not see), 409 conflict, 413
//! body above `[api] max_body_bytes`, 507 not enough free flash, 500 anything
//! else. Lifecycle calls block (erasing flash takes a while), so they run on
//! the blocking pool, never on the async workers that serve NBD.
//!
//! **Who may do what.** With `[api] auth = "off"` every client is an admin. With
//! `auth = "token"` a middleware ([`authenticate`]) checks the bearer token of
//! every request against the control store (one lookup by the token's id, a
//! constant-time hash comparison; see the `auth` crate) before any handler runs,
//! and answers 401 with `WWW-Authenticate: Bearer` when it is missing, malformed,
//! unknown or revoked. Admin tokens may use every route. A tenant token sees and
//! changes only what its tenant owns: vSSDs whose `tenant` is its tenant, the
//! harvest volumes of those vSSDs, their SLAs, and events about them; lists are
//! filtered for it. Tenants are strangers, so another tenant's vSSD or harvest
//! volume does not exist for it: a read, change or delete that names one
//! answers exactly as for a name nobody uses (404, `no vSSD named "x"`), so
//! that names cannot be probed. A route that is host-wide (devices, curves,
//! tiers, gSSDs, the harvester, tokens, the flash map) is 403 naming what was
//! refused; that answer reveals no name, as it does not depend on one. Names
//! are global, so creating a vSSD or harvest volume under a name that another
//! tenant uses is a 409 (`a vSSD named "x" already exists`), the same as for
//! one's own name: that a name is taken is the one thing a create cannot hide
//! (see `create_vssd`). An explicit placement that meets another vSSD's flash
//! is a 409 naming the channel and the blocks asked for, not the owner or its
//! blocks. Nothing here logs a request's headers, so no token
//! reaches the log.
//!
//! | route | |
//! |---|---|
//! | `GET /v1/info` | daemon mode, NBD socket, API address |
//! | `GET /v1/devices`, `GET /v1/devices/{name}` | devices, free channels, wear |
//! | `GET /v1/vssds` | vSSDs |
//! | `POST /v1/vssds` | create (body: [`control::VssdSpec`]) |
//! | `GET /v1/vssds/{name}` | one vSSD with its counters |
//! | `GET /v1/vssds/{name}/stats` | its counters |
//! | `DELETE /v1/vssds/{name}` | delete (erases its flash) |
//! | `GET /v1/vssds/{name}/sla` | its SLA, scheduling unit and scheduler counters |
//! | `PUT /v1/vssds/{name}/sla` | set its SLA live (body: [`sched::TenantSla`], or `null` to clear) |
//! | `GET /v1/devices/{name}/curves` | the device's measured unit curves, by channel count |
//! | `PUT /v1/devices/{name}/curves/{channels}` | store a unit curve (body: [`control::measure::UnitCurve`]) |
//! | `DELETE /v1/devices/{name}/curves/{channels}` | forget it |
//! | `GET /v1/stats` | every vSSD's and device's counters |
//! | `GET /v1/tiers`, `GET /v1/tiers/{name}` | cache tiers: policy, sizes, zones, per-volume hits and misses |
//! | `PUT /v1/tiers/{name}/policy` | change a tier's policy live (body: `{"policy": "grem"}`) |
//! | `PUT /v1/tiers/{name}/size` | resize a tier's cache live (body: `{"size": "64M"}`) |
//! | `GET /v1/harvest` | the harvester: settings, gSSD counts, events by kind |
//! | `POST /v1/harvest/tick` | run one harvester period now (otherwise every `tick_ms`); 409 while the harvester is off, 500 if the period fails |
//! | `GET /v1/gssds` | every gSSD: shape, expiry, home, volume, state |
//! | `GET /v1/harvest/volumes`, `GET /v1/harvest/volumes/{name}` | harvest volumes: segments, migrations, eviction deadline |
//! | `POST /v1/harvest/volumes` | a harvest tenant asks for flash (body: [`control::HarvestRequest`]) |
//! | `DELETE /v1/harvest/volumes/{name}` | job end: give the volume back (its gSSDs are erased) |
//! | `GET /v1/events?since=N` | harvest events after sequence number N |
//! | `GET /v1/tokens` | API tokens: id, tenant, role, created (never the secret); admin only |
//! | `POST /v1/tokens` | make a token (body: `{"tenant", "role"}`); the reply holds it, once; admin only |
//! | `DELETE /v1/tokens/{id}` | revoke a token; admin only |
//! | `GET /metrics` | Prometheus / OpenMetrics text (an admin token with `metrics_auth = true`) |
//! | `GET /dashboard` | the operator dashboard's page (no data, no token: see [`dashboard`]) |
//! | `GET /v1/dashboard?vssd=NAME&rows=N` | the dashboard's HTML fragment, filtered for the caller |
//! | `GET /v1/vssds/{name}/rates` | its rates over the dashboard's window (throughput, IOPS, WA, GC) |
//! | `GET /v1/devices/{name}/flash` | who owns each block of the device, and its wear (admin) |

mod dashboard;
pub use self::dashboard::Sampler;
pub(crate) use self::dashboard::{
    app_js as dashboard_app_js, fragment as dashboard_fragment, page_response as dashboard_page,
    style_css as dashboard_style_css,
};

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use std::collections::BTreeSet;

use auth::{Presented, Principal, Role, TokenInfo};
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, FromRequest, FromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::http::{header, HeaderValue, Method, StatusCode, Uri};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post, put};
use axum::{Json, Router};
use control::{
    ApiAuth, ApiConfig, Config, ControlError, HostManager, Mode, VssdInfo, VssdSpec, VssdStats,
};
use serde::{Deserialize, Serialize};

/// What `GET /v1/info` reports: where the daemon serves.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Info {
    /// flexssd version.
    pub version: String,
    /// Reply timing.
    pub mode: Mode,
    /// Data directory.
    pub data_dir: String,
    /// NBD unix socket (absolute).
    pub nbd_socket: String,
    /// NBD TCP address, if any.
    pub nbd_tcp: Option<SocketAddr>,
    /// HTTP API address.
    pub api: SocketAddr,
}

impl Info {
    /// Describes a daemon running `cfg` with its socket at `sock` and its API on `api`.
    pub fn new(cfg: &Config, sock: &Path, api: SocketAddr) -> Self {
        Info {
            version: env!("CARGO_PKG_VERSION").into(),
            mode: cfg.mode,
            data_dir: cfg.data_dir.display().to_string(),
            nbd_socket: sock.display().to_string(),
            nbd_tcp: cfg.nbd.tcp,
            api,
        }
    }
}

/// `GET /v1/vssds/{name}`: the vSSD and, while it is active, its counters.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct VssdDetail {
    /// The vSSD.
    #[serde(flatten)]
    pub info: VssdInfo,
    /// Its counters (absent while it is being deleted).
    pub stats: Option<VssdStats>,
}

struct AppState {
    mgr: Arc<HostManager>,
    info: Info,
    metrics: prometheus_client::registry::Registry,
    /// `[api] auth`.
    auth: ApiAuth,
    /// `[api] metrics_auth`.
    metrics_auth: bool,
    /// `[api] max_body_bytes`.
    max_body: usize,
    /// The dashboard's counter history.
    sampler: Arc<Sampler>,
}

type Shared = Arc<AppState>;

/// An error response: `{"error": message}` with a status code.
pub struct ApiError(StatusCode, String);

impl ApiError {
    /// 403: the caller's token may not do this; `what` names what was refused.
    fn forbidden(p: &Principal, what: impl std::fmt::Display) -> Self {
        ApiError(
            StatusCode::FORBIDDEN,
            format!("forbidden: the {} may not {what}", p.describe()),
        )
    }

    /// 413 for a body above `[api] max_body_bytes`.
    fn too_large(limit: usize, len: Option<u64>) -> Self {
        let size = len.map_or(String::new(), |n| format!(" of {n} bytes"));
        ApiError(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "request body{size} is larger than the API's limit of {limit} bytes ([api] max_body_bytes)"
            ),
        )
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.0, Json(serde_json::json!({ "error": self.1 }))).into_response()
    }
}

impl From<ControlError> for ApiError {
    fn from(e: ControlError) -> Self {
        let status = StatusCode::from_u16(e.kind().http_status())
            .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        ApiError(status, e.to_string())
    }
}

type ApiResult<T> = Result<T, ApiError>;

/// Runs a blocking manager call on the blocking pool.
async fn blocking<T: Send + 'static>(
    st: &Shared,
    f: impl FnOnce(&HostManager) -> Result<T, ControlError> + Send + 'static,
) -> ApiResult<T> {
    blocking_with(st, f, ApiError::from).await
}

/// [`blocking`], its error turned into the answer by `answer`.
async fn blocking_with<T: Send + 'static>(
    st: &Shared,
    f: impl FnOnce(&HostManager) -> Result<T, ControlError> + Send + 'static,
    answer: impl FnOnce(ControlError) -> ApiError,
) -> ApiResult<T> {
    let mgr = st.mgr.clone();
    tokio::task::spawn_blocking(move || f(&mgr))
        .await
        .map_err(|e| {
            ApiError(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("internal error: {e}"),
            )
        })?
        .map_err(answer)
}

/// The API's router over `mgr`, with the authentication, authorization and
/// body-size rules of `api`, and a dashboard history nobody samples (tests).
#[cfg(test)]
pub fn router(mgr: Arc<HostManager>, info: Info, api: &ApiConfig) -> Router {
    router_with(mgr, info, api, Sampler::new(api.dashboard))
}

/// The API's router over `mgr`, with the authentication, authorization and
/// body-size rules of `api`; the dashboard's rates come from `sampler` (the
/// caller runs it: [`Sampler::spawn`]).
pub fn router_with(
    mgr: Arc<HostManager>,
    info: Info,
    api: &ApiConfig,
    sampler: Arc<Sampler>,
) -> Router {
    let mut metrics = prometheus_client::registry::Registry::default();
    metrics.register_collector(Box::new(crate::metrics::HostCollector::new(mgr.clone())));
    metrics.register_collector(Box::new(crate::metrics::TierCollector::new(mgr.clone())));
    metrics.register_collector(Box::new(crate::metrics::HarvestCollector::new(mgr.clone())));
    let max_body = usize::try_from(api.max_body_bytes.0).unwrap_or(usize::MAX);
    let state = Arc::new(AppState {
        mgr,
        info,
        metrics,
        auth: api.auth,
        metrics_auth: api.metrics_need_token(),
        max_body,
        sampler,
    });
    let mut r = Router::new();
    if api.dashboard.enabled {
        r = r
            .route("/dashboard", get(dashboard::get_page))
            .route("/dashboard/app.js", get(dashboard::app_js))
            .route("/dashboard/style.css", get(dashboard::style_css))
            .route("/v1/dashboard", get(dashboard::get_fragment))
            .route("/v1/vssds/:name/rates", get(dashboard::get_rates));
    }
    let r = r
        .route("/v1/devices/:name/flash", get(dashboard::get_flash))
        .route("/v1/info", get(get_info))
        .route("/v1/devices", get(list_devices))
        .route("/v1/devices/:name", get(get_device))
        .route("/v1/vssds", get(list_vssds).post(create_vssd))
        .route("/v1/vssds/:name", get(get_vssd).delete(delete_vssd))
        .route("/v1/vssds/:name/stats", get(get_vssd_stats))
        .route("/v1/vssds/:name/latency/reset", post(reset_latency))
        .route("/v1/vssds/:name/sla", get(get_sla).put(put_sla))
        .route("/v1/devices/:name/curves", get(get_curves))
        .route(
            "/v1/devices/:name/curves/:channels",
            put(put_curve).delete(delete_curve),
        )
        .route("/v1/stats", get(get_stats))
        .route("/v1/tiers", get(list_tiers))
        .route("/v1/tiers/:name", get(get_tier))
        .route("/v1/tiers/:name/policy", put(put_tier_policy))
        .route("/v1/tiers/:name/size", put(put_tier_size))
        .route("/v1/harvest", get(harvest_status))
        .route("/v1/harvest/tick", post(harvest_tick))
        .route("/v1/gssds", get(list_gssds))
        .route(
            "/v1/harvest/volumes",
            get(list_harvest_volumes).post(create_harvest_volume),
        )
        .route(
            "/v1/harvest/volumes/:name",
            get(get_harvest_volume).delete(release_harvest_volume),
        )
        .route("/v1/events", get(list_events))
        .route("/v1/tokens", get(list_tokens).post(create_token))
        .route("/v1/tokens/:id", delete(revoke_token))
        .route("/metrics", get(get_metrics))
        .fallback(not_found)
        // Outermost first: a body that is too big is refused before anything
        // else looks at the request, then the caller is authenticated.
        .layer(middleware::from_fn_with_state(state.clone(), authenticate))
        .layer(DefaultBodyLimit::max(max_body))
        .layer(middleware::from_fn_with_state(state.clone(), limit_body));
    // Around the whole router: a route's 405 gets its `Allow` header only
    // after the layers of the router itself have seen it.
    Router::new()
        .fallback_service(r.with_state(state))
        .layer(middleware::from_fn(method_not_allowed))
}

/// Refuses a request whose `Content-Length` is above the limit before its body
/// is read, so that a client that sends a huge body holds nothing for long and
/// a client that waits for `100 Continue` never sends it. Bodies without a
/// length are cut off by [`DefaultBodyLimit`] as they are read ([`Body`]).
async fn limit_body(State(st): State<Shared>, req: Request, next: Next) -> Response {
    let len = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    match len {
        Some(n) if n > st.max_body as u64 => {
            ApiError::too_large(st.max_body, Some(n)).into_response()
        }
        _ => next.run(req).await,
    }
}

/// A 401 with `WWW-Authenticate: Bearer` (RFC 6750); `error` is set when
/// credentials were sent but are not valid.
fn unauthorized(message: String, invalid: bool) -> Response {
    let challenge = if invalid {
        "Bearer realm=\"flexssd\", error=\"invalid_token\""
    } else {
        "Bearer realm=\"flexssd\""
    };
    let mut r = ApiError(StatusCode::UNAUTHORIZED, message).into_response();
    r.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static(challenge),
    );
    r
}

/// Who sends the request: with `auth = "token"`, the holder of a valid bearer
/// token (else 401); with `auth = "off"`, an admin. The [`Principal`] goes into
/// the request's extensions for the handlers ([`Caller`]). `/metrics` needs no
/// token unless `metrics_auth`, and then an admin's.
async fn authenticate(State(st): State<Shared>, mut req: Request, next: Next) -> Response {
    let metrics = req.uri().path() == "/metrics";
    // The dashboard's page and static files hold no data (its script fetches
    // the data with the token), and a browser cannot send a token with them.
    let static_page = matches!(
        req.uri().path(),
        "/dashboard" | "/dashboard/app.js" | "/dashboard/style.css"
    );
    if static_page {
        // No principal: these handlers read nothing of the host.
        return next.run(req).await;
    }
    if st.auth == ApiAuth::Off || (metrics && !st.metrics_auth) {
        req.extensions_mut()
            .insert(Principal::unauthenticated_admin());
        return next.run(req).await;
    }
    let Some(value) = req.headers().get(header::AUTHORIZATION) else {
        return unauthorized(
            "authentication required: send `Authorization: Bearer <token>` (the CLI reads \
             FLEXSSD_TOKEN or --token-file; an admin makes tokens with `flexssd token create`)"
                .into(),
            false,
        );
    };
    let Ok(value) = value.to_str() else {
        return unauthorized(
            "malformed credentials: the Authorization header is not visible ASCII".into(),
            true,
        );
    };
    let presented = match Presented::from_authorization(value) {
        Ok(p) => p,
        Err(e) => return unauthorized(e.to_string(), true),
    };
    // One read transaction by key: redb readers never wait for writers.
    let rec = match st.mgr.api_token(presented.id()) {
        Ok(r) => r,
        Err(e) => return ApiError::from(e).into_response(),
    };
    let Some(rec) = rec.filter(|r| r.verify(&presented)) else {
        return unauthorized(
            format!(
                "unknown or revoked API token (id {}): ask an admin for a new one (`flexssd token create`)",
                presented.id()
            ),
            true,
        );
    };
    let p = Principal::of(&rec);
    if metrics && !p.is_admin() {
        return ApiError::forbidden(
            &p,
            "read /metrics (it needs an admin token with [api] metrics_auth = true)",
        )
        .into_response();
    }
    req.extensions_mut().insert(p);
    next.run(req).await
}

/// The request's [`Principal`], as [`authenticate`] left it.
struct Caller(Principal);

#[axum::async_trait]
impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        parts
            .extensions
            .get::<Principal>()
            .cloned()
            .map(Caller)
            .ok_or_else(|| {
                ApiError(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "internal error: the request was not authenticated".into(),
                )
            })
    }
}

/// The request's path parameters, like axum's `Path`, but refused with a JSON
/// 400 that names the parameter and the problem (`{"error": ...}`).
pub(crate) struct UrlPath<T>(pub T);

#[axum::async_trait]
impl<S: Send + Sync, T: serde::de::DeserializeOwned + Send> FromRequestParts<S> for UrlPath<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, st: &S) -> Result<Self, ApiError> {
        match axum::extract::Path::<T>::from_request_parts(parts, st).await {
            Ok(axum::extract::Path(v)) => Ok(UrlPath(v)),
            Err(e) => Err(ApiError(
                e.status(),
                format!("invalid path {}: {}", parts.uri.path(), e.body_text()),
            )),
        }
    }
}

/// Gives the router's bodiless 405 (a known route, another method) a JSON
/// error naming the method and the methods the route has, keeping its `Allow`
/// header.
async fn method_not_allowed(req: Request, next: Next) -> Response {
    let (method, path) = (req.method().clone(), req.uri().path().to_owned());
    let r = next.run(req).await;
    if r.status() != StatusCode::METHOD_NOT_ALLOWED {
        return r;
    }
    let allow = r.headers().get(header::ALLOW).cloned();
    let allowed = allow
        .as_ref()
        .and_then(|v| v.to_str().ok())
        .map_or(String::new(), |a| format!(" (it allows {a})"));
    let mut out = ApiError(
        StatusCode::METHOD_NOT_ALLOWED,
        format!("method {method} is not allowed on {path}{allowed}"),
    )
    .into_response();
    if let Some(a) = allow {
        out.headers_mut().insert(header::ALLOW, a);
    }
    out
}

/// A request body within `[api] max_body_bytes` (413 naming the limit
/// otherwise).
struct Body(Bytes);

#[axum::async_trait]
impl FromRequest<Shared> for Body {
    type Rejection = ApiError;

    async fn from_request(req: Request, st: &Shared) -> Result<Self, ApiError> {
        match Bytes::from_request(req, st).await {
            Ok(b) => Ok(Body(b)),
            Err(e) if e.status() == StatusCode::PAYLOAD_TOO_LARGE => {
                Err(ApiError::too_large(st.max_body, None))
            }
            Err(e) => Err(ApiError(
                e.status(),
                format!("reading the request body: {}", e.body_text()),
            )),
        }
    }
}

/// 403 unless `p` is an admin; `what` names the refused operation.
fn require_admin(p: &Principal, what: &str) -> ApiResult<()> {
    if p.is_admin() {
        Ok(())
    } else {
        Err(ApiError::forbidden(
            p,
            format_args!("{what}: that needs an admin token"),
        ))
    }
}

/// The vSSD `name` if `p` may see it; else 404 with the manager's own
/// message for a missing vSSD, whether it is missing or another tenant's, so
/// that a tenant cannot tell the two apart.
fn require_vssd(st: &Shared, p: &Principal, name: &str) -> ApiResult<VssdInfo> {
    let v = st.mgr.get(name)?;
    if p.owns(v.tenant.as_deref()) {
        Ok(v)
    } else {
        Err(ControlError::NoSuchVssd(name.into()).into())
    }
}

/// What a tenant owns: the names of its vSSDs and of their harvest volumes.
struct Owned {
    vssds: BTreeSet<String>,
    volumes: BTreeSet<String>,
}

fn owned(st: &Shared, p: &Principal) -> Owned {
    let vssds: BTreeSet<String> = st
        .mgr
        .list()
        .into_iter()
        .filter(|v| p.owns(v.tenant.as_deref()))
        .map(|v| v.name)
        .collect();
    let volumes = st
        .mgr
        .harvest_volumes()
        .into_iter()
        .filter(|h| vssds.contains(&h.tenant))
        .map(|h| h.name)
        .collect();
    Owned { vssds, volumes }
}

/// The harvest volume `name` if `p` owns its harvest tenant's vSSD; else 404
/// with the manager's own message for a missing volume, whether it is missing
/// or another tenant's.
fn require_volume(st: &Shared, p: &Principal, name: &str) -> ApiResult<control::HarvestVolumeInfo> {
    let v = st.mgr.harvest_volume(name)?;
    let owner = st.mgr.get(&v.tenant).ok().and_then(|t| t.tenant);
    if p.owns(owner.as_deref()) {
        Ok(v)
    } else {
        Err(ControlError::NoSuchHarvestVolume(name.into()).into())
    }
}

async fn not_found(method: Method, uri: Uri) -> ApiError {
    ApiError(
        StatusCode::NOT_FOUND,
        format!("no such endpoint: {method} {uri}"),
    )
}

async fn get_info(State(st): State<Shared>) -> Json<Info> {
    Json(st.info.clone())
}

async fn list_devices(State(st): State<Shared>, Caller(p): Caller) -> ApiResult<impl IntoResponse> {
    require_admin(&p, "list the devices")?;
    Ok(Json(blocking(&st, |m| Ok(m.devices())).await?))
}

async fn get_device(
    State(st): State<Shared>,
    Caller(p): Caller,
    UrlPath(name): UrlPath<String>,
) -> ApiResult<impl IntoResponse> {
    require_admin(&p, &format!("read device {name:?}"))?;
    Ok(Json(blocking(&st, move |m| m.device(&name)).await?))
}

async fn list_vssds(State(st): State<Shared>, Caller(p): Caller) -> Json<Vec<VssdInfo>> {
    let mut list = st.mgr.list();
    list.retain(|v| p.owns(v.tenant.as_deref()));
    Json(list)
}

/// `POST /v1/vssds`. A tenant token creates for its own tenant only (403
/// otherwise, which depends on no existing name). vSSD names are global, so a
/// name already in use, by this tenant or another, is 409 with the same
/// message either way: unavoidable, as the name cannot be given twice, but it
/// says only that the name is taken, not whose it is.
async fn create_vssd(
    State(st): State<Shared>,
    Caller(p): Caller,
    Body(b): Body,
) -> ApiResult<impl IntoResponse> {
    let mut spec: VssdSpec = body(&b)?;
    if !p.is_admin() {
        // A tenant's vSSDs are its own; it cannot make one for anyone else.
        match (&spec.tenant, &p.tenant) {
            (None, Some(mine)) => spec.tenant = Some(mine.clone()),
            (Some(t), Some(mine)) if t == mine => {}
            (asked, _) => {
                return Err(ApiError::forbidden(
                    &p,
                    format_args!(
                        "create vSSD {:?} for tenant {:?}: a tenant token creates vSSDs only for its own tenant",
                        spec.name,
                        asked.as_deref().unwrap_or("")
                    ),
                ))
            }
        }
    }
    // An explicit placement that meets another vSSD's flash: the owner and
    // its blocks are another tenant's business, so a tenant hears only where.
    let hide = !p.is_admin();
    let info = blocking_with(
        &st,
        move |m| m.create_vssd(&spec),
        move |e| match e {
            ControlError::Overlap { channel, ours, .. } if hide => ApiError(
                StatusCode::CONFLICT,
                format!("placement overlaps flash another vSSD owns on channel {channel} (blocks {ours})"),
            ),
            e => e.into(),
        },
    )
    .await?;
    Ok((
        StatusCode::CREATED,
        [(header::LOCATION, format!("/v1/vssds/{}", info.name))],
        Json(info),
    ))
}

async fn get_vssd(
    State(st): State<Shared>,
    Caller(p): Caller,
    UrlPath(name): UrlPath<String>,
) -> ApiResult<Json<VssdDetail>> {
    require_vssd(&st, &p, &name)?;
    let d = blocking(&st, move |m| {
        let info = m.get(&name)?;
        Ok(VssdDetail {
            info,
            stats: m.vssd_stats(&name).ok(),
        })
    })
    .await?;
    Ok(Json(d))
}

async fn get_vssd_stats(
    State(st): State<Shared>,
    Caller(p): Caller,
    UrlPath(name): UrlPath<String>,
) -> ApiResult<Json<VssdStats>> {
    require_vssd(&st, &p, &name)?;
    Ok(Json(blocking(&st, move |m| m.vssd_stats(&name)).await?))
}

/// Starts a new window for the vSSD's modelled-latency percentiles
/// (`stats.io.read_latency` / `write_latency`; recorded in emulation mode).
async fn reset_latency(
    State(st): State<Shared>,
    Caller(p): Caller,
    UrlPath(name): UrlPath<String>,
) -> ApiResult<Json<serde_json::Value>> {
    require_vssd(&st, &p, &name)?;
    let n = name.clone();
    blocking(&st, move |m| m.reset_latency(&n)).await?;
    Ok(Json(serde_json::json!({ "reset": name })))
}

/// Decodes a JSON body, naming the problem on failure.
fn body<T: serde::de::DeserializeOwned>(b: &Bytes) -> ApiResult<T> {
    serde_json::from_slice(b).map_err(|e| {
        ApiError(
            StatusCode::BAD_REQUEST,
            format!("invalid request body: {e}"),
        )
    })
}

async fn get_sla(
    State(st): State<Shared>,
    Caller(p): Caller,
    UrlPath(name): UrlPath<String>,
) -> ApiResult<impl IntoResponse> {
    require_vssd(&st, &p, &name)?;
    Ok(Json(blocking(&st, move |m| m.vssd_sla(&name)).await?))
}

async fn put_sla(
    State(st): State<Shared>,
    Caller(p): Caller,
    UrlPath(name): UrlPath<String>,
    Body(b): Body,
) -> ApiResult<impl IntoResponse> {
    // The manager re-checks under its lifecycle lock that this is still the
    // vSSD whose owner was checked (not one re-created under its name since).
    let id = require_vssd(&st, &p, &name)?.id;
    let sla: Option<sched::TenantSla> = body(&b)?;
    Ok(Json(
        blocking(&st, move |m| m.set_vssd_sla_expecting(&name, Some(id), sla)).await?,
    ))
}

async fn get_curves(
    State(st): State<Shared>,
    Caller(p): Caller,
    UrlPath(name): UrlPath<String>,
) -> ApiResult<impl IntoResponse> {
    require_admin(&p, &format!("read the unit curves of device {name:?}"))?;
    Ok(Json(blocking(&st, move |m| m.unit_curves(&name)).await?))
}

/// The path of `/v1/devices/{name}/curves/{channels}`; by field, so that a
/// bad channel count is refused by its name.
#[derive(Deserialize)]
struct CurvePath {
    name: String,
    channels: u32,
}

async fn put_curve(
    State(st): State<Shared>,
    Caller(p): Caller,
    UrlPath(CurvePath { name, channels }): UrlPath<CurvePath>,
    Body(b): Body,
) -> ApiResult<impl IntoResponse> {
    require_admin(&p, &format!("store a unit curve of device {name:?}"))?;
    let c: control::measure::UnitCurve = body(&b)?;
    blocking(&st, move |m| m.set_unit_curve(&name, channels, Some(c))).await?;
    Ok(Json(serde_json::json!({ "stored": channels })))
}

async fn delete_curve(
    State(st): State<Shared>,
    Caller(p): Caller,
    UrlPath(CurvePath { name, channels }): UrlPath<CurvePath>,
) -> ApiResult<impl IntoResponse> {
    require_admin(&p, &format!("delete a unit curve of device {name:?}"))?;
    blocking(&st, move |m| m.set_unit_curve(&name, channels, None)).await?;
    Ok(Json(serde_json::json!({ "deleted": channels })))
}

async fn delete_vssd(
    State(st): State<Shared>,
    Caller(p): Caller,
    UrlPath(name): UrlPath<String>,
) -> ApiResult<impl IntoResponse> {
    let id = require_vssd(&st, &p, &name)?.id;
    let n = name.clone();
    blocking(&st, move |m| m.delete_vssd_expecting(&n, Some(id))).await?;
    Ok(Json(serde_json::json!({ "deleted": name })))
}

/// Every vSSD's and device's counters; a tenant gets its own vSSDs' only.
async fn get_stats(State(st): State<Shared>, Caller(p): Caller) -> ApiResult<impl IntoResponse> {
    let mut stats = blocking(&st, |m| Ok(m.stats())).await?;
    if !p.is_admin() {
        let mine = owned(&st, &p).vssds;
        stats.vssds.retain(|v| mine.contains(&v.name));
        stats.devices.clear();
    }
    Ok(Json(stats))
}

/// Body of `PUT /v1/tiers/{name}/policy`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TierPolicyBody {
    /// A policy name: glru, car, arc, vfrm, isolation, grem or dgrem.
    pub policy: String,
}

/// Body of `PUT /v1/tiers/{name}/size`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TierSizeBody {
    /// New cache size: bytes, or with a K/M/G/T suffix; a multiple of 4 KiB.
    pub size: control::ByteSize,
}

async fn harvest_status(
    State(st): State<Shared>,
    Caller(p): Caller,
) -> ApiResult<Json<control::HarvestStatus>> {
    require_admin(&p, "read the harvester's status")?;
    Ok(Json(st.mgr.harvest_status()))
}

async fn harvest_tick(
    State(st): State<Shared>,
    Caller(p): Caller,
) -> ApiResult<Json<serde_json::Value>> {
    require_admin(&p, "run a harvester period")?;
    // 409 while the harvester is off; 500 for any failure of the period.
    let n = blocking(&st, |m| m.harvest_tick_now()).await?;
    Ok(Json(serde_json::json!({ "events": n })))
}

async fn list_gssds(
    State(st): State<Shared>,
    Caller(p): Caller,
) -> ApiResult<Json<Vec<control::GssdInfo>>> {
    require_admin(&p, "list the gSSDs")?;
    Ok(Json(st.mgr.gssds()))
}

async fn list_harvest_volumes(
    State(st): State<Shared>,
    Caller(p): Caller,
) -> Json<Vec<control::HarvestVolumeInfo>> {
    let mut list = st.mgr.harvest_volumes();
    if !p.is_admin() {
        let mine = owned(&st, &p).volumes;
        list.retain(|v| mine.contains(&v.name));
    }
    Json(list)
}

async fn get_harvest_volume(
    State(st): State<Shared>,
    Caller(p): Caller,
    UrlPath(name): UrlPath<String>,
) -> ApiResult<Json<control::HarvestVolumeInfo>> {
    Ok(Json(require_volume(&st, &p, &name)?))
}

async fn create_harvest_volume(
    State(st): State<Shared>,
    Caller(p): Caller,
    Body(b): Body,
) -> ApiResult<impl IntoResponse> {
    let req: control::HarvestRequest = body(&b)?;
    // For a tenant token, the manager treats another tenant's harvest tenant
    // as a missing vSSD at the very point where it looks the tenant up, so
    // every answer (a bad name, a taken name, a missing tenant) is the same
    // as for a harvest tenant nobody has. Volume names are global: a taken
    // one is 409 whoever holds it.
    let caller = (!p.is_admin()).then(|| p.tenant.clone().unwrap_or_default());
    let info = blocking(&st, move |m| match caller {
        None => m.harvest_volume_create(&req),
        Some(t) => m.harvest_volume_create_as(&req, &t),
    })
    .await?;
    Ok((
        StatusCode::CREATED,
        [(
            header::LOCATION,
            format!("/v1/harvest/volumes/{}", info.name),
        )],
        Json(info),
    ))
}

async fn release_harvest_volume(
    State(st): State<Shared>,
    Caller(p): Caller,
    UrlPath(name): UrlPath<String>,
) -> ApiResult<Json<serde_json::Value>> {
    require_volume(&st, &p, &name)?;
    let n = name.clone();
    blocking(&st, move |m| m.harvest_volume_release(&n)).await?;
    Ok(Json(serde_json::json!({ "released": name })))
}

/// `GET /v1/events?since=N`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct EventsQuery {
    /// Parsed here rather than by serde, whose error would not name it.
    since: Option<String>,
}

/// Harvest events; a tenant gets those about its vSSDs (as a gSSD's home)
/// and its harvest volumes.
async fn list_events(
    State(st): State<Shared>,
    Caller(p): Caller,
    q: Result<axum::extract::Query<EventsQuery>, axum::extract::rejection::QueryRejection>,
) -> ApiResult<Json<Vec<control::HarvestEvent>>> {
    let q = q.map_err(|e| {
        ApiError(
            StatusCode::BAD_REQUEST,
            format!("invalid query: {}", e.body_text()),
        )
    })?;
    let since = match q.0.since {
        None => 0,
        Some(s) => s.parse::<u64>().map_err(|e| {
            ApiError(
                StatusCode::BAD_REQUEST,
                format!(
                    "invalid query: since = {s:?} is not a sequence number (0 to {}): {e}",
                    u64::MAX
                ),
            )
        })?,
    };
    let mut events = st.mgr.harvest_events(since);
    if !p.is_admin() {
        let mine = owned(&st, &p);
        events.retain(|e| {
            e.volume.as_ref().is_some_and(|v| mine.volumes.contains(v))
                || e.home.as_ref().is_some_and(|h| mine.vssds.contains(h))
        });
    }
    Ok(Json(events))
}

async fn list_tiers(
    State(st): State<Shared>,
    Caller(p): Caller,
) -> ApiResult<Json<Vec<control::TierInfo>>> {
    require_admin(&p, "list the cache tiers")?;
    Ok(Json(blocking(&st, |m| Ok(m.tiers())).await?))
}

async fn get_tier(
    State(st): State<Shared>,
    Caller(p): Caller,
    UrlPath(name): UrlPath<String>,
) -> ApiResult<Json<control::TierInfo>> {
    require_admin(&p, &format!("read cache tier {name:?}"))?;
    Ok(Json(blocking(&st, move |m| m.tier(&name)).await?))
}

async fn put_tier_policy(
    State(st): State<Shared>,
    Caller(p): Caller,
    UrlPath(name): UrlPath<String>,
    Body(b): Body,
) -> ApiResult<Json<control::TierInfo>> {
    require_admin(&p, &format!("change the policy of cache tier {name:?}"))?;
    let req: TierPolicyBody = body(&b)?;
    let policy: cache::PolicyKind = req
        .policy
        .parse()
        .map_err(|e: cache::CacheError| ApiError(StatusCode::BAD_REQUEST, e.to_string()))?;
    Ok(Json(
        blocking(&st, move |m| m.set_tier_policy(&name, policy)).await?,
    ))
}

async fn put_tier_size(
    State(st): State<Shared>,
    Caller(p): Caller,
    UrlPath(name): UrlPath<String>,
    Body(b): Body,
) -> ApiResult<Json<control::TierInfo>> {
    require_admin(&p, &format!("resize cache tier {name:?}"))?;
    let req: TierSizeBody = body(&b)?;
    Ok(Json(
        blocking(&st, move |m| m.resize_tier(&name, req.size.0)).await?,
    ))
}

/// Body of `POST /v1/tokens`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenRequest {
    /// The tenant the token acts for (for an admin token, who holds it).
    pub tenant: String,
    /// `admin` or `tenant`. Default `tenant`.
    #[serde(default = "tenant_role")]
    pub role: Role,
}

fn tenant_role() -> Role {
    Role::Tenant
}

/// Reply of `POST /v1/tokens`: the only time the token is shown.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CreatedToken {
    /// `fxs_<id>_<secret>`, for `Authorization: Bearer`.
    pub token: String,
    /// What `GET /v1/tokens` will show about it.
    #[serde(flatten)]
    pub info: TokenInfo,
}

async fn list_tokens(
    State(st): State<Shared>,
    Caller(p): Caller,
) -> ApiResult<Json<Vec<TokenInfo>>> {
    require_admin(&p, "list API tokens")?;
    let list = blocking(&st, |m| m.api_tokens()).await?;
    Ok(Json(list.iter().map(auth::TokenRecord::info).collect()))
}

async fn create_token(
    State(st): State<Shared>,
    Caller(p): Caller,
    Body(b): Body,
) -> ApiResult<impl IntoResponse> {
    require_admin(&p, "create API tokens")?;
    let req: TokenRequest = body(&b)?;
    let created_s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (token, rec) = blocking(&st, move |m| {
        m.create_api_token(&req.tenant, req.role, created_s)
    })
    .await?;
    Ok((
        StatusCode::CREATED,
        [(header::LOCATION, format!("/v1/tokens/{}", rec.id))],
        Json(CreatedToken {
            token: token.bearer(),
            info: rec.info(),
        }),
    ))
}

async fn revoke_token(
    State(st): State<Shared>,
    Caller(p): Caller,
    UrlPath(id): UrlPath<String>,
) -> ApiResult<Json<serde_json::Value>> {
    require_admin(&p, "revoke API tokens")?;
    let rec = blocking(&st, move |m| m.revoke_api_token(&id)).await?;
    Ok(Json(serde_json::json!({ "revoked": rec.id })))
}

async fn get_metrics(State(st): State<Shared>) -> ApiResult<Response> {
    let st2 = st.clone();
    let text = tokio::task::spawn_blocking(move || {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &st2.metrics).map(|_| out)
    })
    .await
    .map_err(|e| {
        ApiError(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("internal error: {e}"),
        )
    })?
    .map_err(|e| {
        ApiError(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("encoding metrics: {e}"),
        )
    })?;
    Ok((
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        text,
    )
        .into_response())
}

#[cfg(test)]
mod tests {
    //! Hostile bodies: random JSON at the create-vSSD, harvest-request and
    //! SLA routes, through the whole router (authentication, body decoding,
    //! the manager's checks). Whatever comes in, the daemon must not panic,
    //! and a refusal must be the client's fault (4xx), or 507 for a
    //! well-formed request that asks for more flash than is free, with a
    //! message saying why.

    use axum::body::Body as HttpBody;
    use axum::http::Request as HttpRequest;
    use proptest::prelude::*;
    use serde_json::Value;
    use tower::ServiceExt;

    use super::*;

    const CONFIG: &str = r#"
        data_dir = "/nonexistent"
        [[devices]]
        name = "ssd0"
        backend = "memory"
        [devices.geometry]
        channels = 8
        dies_per_channel = 2
        blocks_per_plane = 16
        pages_per_block = 64
        [[vssds]]
        name = "default"
        channels = 2
        tenant = "t1"
        [[vssds]]
        name = "hv"
        channels = 1
        role = "harvest"
        tenant = "t1"
        [harvest]
        enabled = true
        policy = "fixed"
        unsold = false
    "#;

    struct Fixture {
        rt: tokio::runtime::Runtime,
        mgr: Arc<HostManager>,
        open: Router,
        tokens: Router,
        tenant: String,
    }

    fn fixture() -> Fixture {
        let cfg = Config::from_toml(CONFIG).unwrap();
        let mgr = Arc::new(
            HostManager::open_with(
                &cfg,
                Arc::new(clock::VirtualClock::new(0)),
                control::ControlStore::memory().unwrap(),
                Arc::new(ftl::MemCheckpoints::default()),
            )
            .unwrap(),
        );
        let info = Info::new(
            &cfg,
            Path::new("/nonexistent/nbd.sock"),
            ([127, 0, 0, 1], 0).into(),
        );
        let open = router(mgr.clone(), info.clone(), &ApiConfig::default());
        let tokens = router(
            mgr.clone(),
            info,
            &ApiConfig {
                auth: ApiAuth::Token,
                ..ApiConfig::default()
            },
        );
        let (t, _) = mgr.create_api_token("t1", Role::Tenant, 0).unwrap();
        Fixture {
            rt: tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap(),
            mgr,
            open,
            tokens,
            tenant: t.bearer(),
        }
    }

    impl Fixture {
        /// (status, JSON body) of one request, as a tenant or as an admin
        /// with authentication off.
        fn call(&self, as_tenant: bool, method: &str, path: &str, body: &Value) -> (u16, Value) {
            let mut req = HttpRequest::builder()
                .method(method)
                .uri(path)
                .header(header::CONTENT_TYPE, "application/json");
            let app = if as_tenant {
                req = req.header(header::AUTHORIZATION, format!("Bearer {}", self.tenant));
                self.tokens.clone()
            } else {
                self.open.clone()
            };
            let req = req.body(HttpBody::from(body.to_string())).unwrap();
            self.rt.block_on(async move {
                let resp = app.oneshot(req).await.unwrap();
                let status = resp.status().as_u16();
                let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX)
                    .await
                    .unwrap();
                (
                    status,
                    serde_json::from_slice(&bytes).unwrap_or(Value::Null),
                )
            })
        }
    }

    /// Field names of the three bodies, and a few others, so that random
    /// objects often get past decoding into the manager's checks.
    fn key() -> impl Strategy<Value = String> {
        prop_oneof![
            prop::sample::select(vec![
                "name",
                "channels",
                "channel_ids",
                "blocks",
                "capacity",
                "gc",
                "device",
                "sla",
                "role",
                "tenant",
                "curve",
                "weight",
                "burst",
                "bandwidth",
                "duration_s",
            ])
            .prop_map(str::to_string),
            "[a-z_]{0,10}",
        ]
    }

    fn leaf() -> impl Strategy<Value = Value> {
        prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            (0u64..20).prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            any::<f64>()
                .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
            prop::sample::select(vec![
                "v1",
                "hv",
                "default",
                "t1",
                "t2",
                "ssd0",
                "1M",
                "4K",
                "64G",
                "0..4",
                "3..1",
                "greedy",
                "cost-benefit",
                "harvest",
                "regular",
                "",
                "a b",
            ])
            .prop_map(Value::from),
            ".{0,12}".prop_map(Value::from),
        ]
    }

    /// Any JSON value: leaves, arrays and objects, nested a few levels.
    fn json() -> impl Strategy<Value = Value> {
        leaf().prop_recursive(3, 48, 8, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                prop::collection::vec((key(), inner), 0..8)
                    .prop_map(|kv| Value::Object(kv.into_iter().collect())),
            ]
        })
    }

    /// Values a field might get that are mostly of the wrong shape: numbers,
    /// strings, lists, lists of pairs, nested lists.
    fn field_value() -> impl Strategy<Value = Value> {
        let pair = (0u64..50_000, 0u64..50_000).prop_map(|(w, r)| serde_json::json!([w, r]));
        prop_oneof![
            leaf(),
            prop::collection::vec((0u64..12).prop_map(Value::from), 0..5).prop_map(Value::Array),
            prop::collection::vec(pair, 0..5).prop_map(Value::Array),
            prop::collection::vec(
                prop::collection::vec(leaf(), 0..3).prop_map(Value::Array),
                0..4
            )
            .prop_map(Value::Array),
        ]
    }

    /// A value of the type `field` has, mostly within its range, sometimes
    /// not; now and then any value at all.
    fn typed(field: &'static str) -> BoxedStrategy<Value> {
        let n = |hi: u64| {
            prop_oneof![
                (0..hi).prop_map(Value::from),
                any::<u64>().prop_map(Value::from)
            ]
        };
        let pick = |v: Vec<&'static str>| prop::sample::select(v).prop_map(Value::from);
        // Mostly a valid curve (from w = 0, r not increasing), sometimes any pairs.
        let valid_curve = (
            1u64..50_000,
            prop::collection::vec((1u64..5_000, 0u64..5_000), 0..4),
        )
            .prop_map(|(r0, steps)| {
                let (mut w, mut r) = (0, r0);
                let mut pts = vec![serde_json::json!([0, r0])];
                for (dw, dr) in steps {
                    w += dw;
                    r = r.saturating_sub(dr);
                    pts.push(serde_json::json!([w, r]));
                }
                Value::Array(pts)
            });
        let any_pairs = prop::collection::vec(
            (0u64..50_000, 0u64..50_000).prop_map(|(w, r)| serde_json::json!([w, r])),
            0..5,
        )
        .prop_map(Value::Array);
        let curve = prop_oneof![4 => valid_curve, 1 => any_pairs];
        let typed: BoxedStrategy<Value> = match field {
            "channels" | "bandwidth" => n(10).boxed(),
            "duration_s" | "weight" => n(5000).boxed(),
            "channel_ids" => prop::collection::vec((0u64..10).prop_map(Value::from), 0..5)
                .prop_map(Value::Array)
                .boxed(),
            "blocks" => prop_oneof![
                4 => pick(vec!["0..4", "0..8", "8..16", "4..12"]),
                1 => pick(vec!["3..1", "8..64", "0..0", "x"]),
            ]
            .boxed(),
            "capacity" => prop_oneof![
                pick(vec!["1M", "4K", "2M", "64G", "0", "1X"]),
                (0u64..(64 << 20)).prop_map(Value::from),
            ]
            .boxed(),
            "gc" => prop_oneof![4 => pick(vec!["greedy", "cost-benefit"]), 1 => pick(vec!["lru"])]
                .boxed(),
            "device" => pick(vec!["ssd0", "ssd9"]).boxed(),
            "role" => pick(vec!["regular", "harvest", "owner"]).boxed(),
            "tenant" => pick(vec!["t1", "t2", "hv", "default", "a b"]).boxed(),
            "burst" => any::<bool>().prop_map(Value::from).boxed(),
            "curve" => curve.boxed(),
            "sla" => (curve, n(5), any::<bool>())
                .prop_map(|(c, w, b)| serde_json::json!({"curve": c, "weight": w, "burst": b}))
                .boxed(),
            _ => field_value().boxed(),
        };
        prop_oneof![19 => typed, 1 => field_value()].boxed()
    }

    /// An object of some of `fields` (always `name`, when it is one), each
    /// of its type, so that it often decodes and meets the manager's checks.
    fn shaped(fields: &'static [&'static str]) -> impl Strategy<Value = Value> {
        let parts: Vec<_> = fields
            .iter()
            .map(|&f| prop::option::weighted(0.5, typed(f)).prop_map(move |v| (f, v)))
            .collect();
        (
            parts,
            prop::sample::select(vec!["v1", "v2", "hv", "default", "gssd-1", "a b", ""]),
        )
            .prop_map(move |(parts, name)| {
                let mut o: serde_json::Map<String, Value> = parts
                    .into_iter()
                    .filter_map(|(k, v)| v.map(|v| (k.to_string(), v)))
                    .collect();
                if fields.contains(&"name") {
                    o.insert("name".into(), Value::from(name));
                }
                Value::Object(o)
            })
    }

    const VSSD_FIELDS: &[&str] = &[
        "channels",
        "channel_ids",
        "blocks",
        "capacity",
        "gc",
        "device",
        "sla",
        "role",
        "tenant",
        "name",
    ];
    const HARVEST_FIELDS: &[&str] = &["tenant", "capacity", "bandwidth", "duration_s", "name"];
    const SLA_FIELDS: &[&str] = &["curve", "weight", "burst"];

    fn assert_refusal_is_the_clients(what: &str, body: &Value, (code, reply): &(u16, Value)) {
        let msg = reply["error"].as_str().unwrap_or("");
        assert!(
            (400..500).contains(code) || *code == 507,
            "{what} {body}: HTTP {code} {reply}"
        );
        assert!(
            !msg.trim().is_empty(),
            "{what} {body}: HTTP {code} without a message: {reply}"
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 192, ..ProptestConfig::default() })]

        #[test]
        fn random_json_never_panics_and_refusals_are_4xx_with_a_message(
            vssd in prop_oneof![1 => json(), 3 => shaped(VSSD_FIELDS)],
            harvest in prop_oneof![1 => json(), 3 => shaped(HARVEST_FIELDS)],
            sla in prop_oneof![1 => json(), 3 => shaped(SLA_FIELDS)],
            as_tenant in any::<bool>(),
        ) {
            let f = FIXTURE.with(|f| f.clone());
            let r = f.call(as_tenant, "POST", "/v1/vssds", &vssd);
            if r.0 == 201 {
                let name = r.1["name"].as_str().unwrap().to_string();
                f.mgr.delete_vssd(&name).unwrap();
            } else {
                assert_refusal_is_the_clients("POST /v1/vssds", &vssd, &r);
            }
            let r = f.call(as_tenant, "POST", "/v1/harvest/volumes", &harvest);
            if r.0 == 201 {
                let name = r.1["name"].as_str().unwrap().to_string();
                f.mgr.harvest_volume_release(&name).unwrap();
            } else {
                assert_refusal_is_the_clients("POST /v1/harvest/volumes", &harvest, &r);
            }
            let r = f.call(as_tenant, "PUT", "/v1/vssds/default/sla", &sla);
            if r.0 != 200 {
                assert_refusal_is_the_clients("PUT /v1/vssds/default/sla", &sla, &r);
            }
        }
    }

    thread_local! {
        /// One daemon state for every case of a test thread.
        static FIXTURE: std::rc::Rc<Fixture> = std::rc::Rc::new(fixture());
    }

    #[test]
    fn the_routes_accept_a_valid_body_so_the_property_reaches_the_manager() {
        let f = fixture();
        let r = f.call(
            true,
            "POST",
            "/v1/vssds",
            &serde_json::json!({"name": "v1", "channels": 1}),
        );
        assert_eq!(r.0, 201, "{}", r.1);
        assert_eq!(r.1["tenant"], "t1");
        let sla = serde_json::json!({"curve": [[0, 1000], [100, 0]]});
        let r = f.call(true, "PUT", "/v1/vssds/v1/sla", &sla);
        assert_eq!(r.0, 200, "{}", r.1);
        // A harvest request reaches the harvester: nothing is lent yet, so it
        // is refused for want of flash, not for its form.
        let req = serde_json::json!({"name": "vol", "tenant": "hv", "capacity": "1M"});
        let r = f.call(true, "POST", "/v1/harvest/volumes", &req);
        assert_eq!(r.0, 507, "{}", r.1);
        // And random bodies are refused with 400 naming the problem.
        let r = f.call(false, "POST", "/v1/vssds", &serde_json::json!({"name": 3}));
        assert_eq!(r.0, 400);
        assert!(
            r.1["error"]
                .as_str()
                .unwrap()
                .contains("invalid request body"),
            "{}",
            r.1
        );
    }
}

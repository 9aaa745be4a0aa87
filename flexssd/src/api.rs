//! The HTTP/JSON control API.
//!
//! A small REST surface over the [`HostManager`]; the CLI client uses nothing else.
//! Every error is `{"error": "..."}` with a status that says whose fault it is:
//! 400 bad input, 404 unknown name, 409 conflict, 507 not enough free flash, 500
//! anything else. Lifecycle calls block (erasing flash takes a while), so they run on
//! the blocking pool, never on the async workers that serve NBD.
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
//! | `GET /metrics` | Prometheus / OpenMetrics text |

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path as UrlPath, State};
use axum::http::{header, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::{Json, Router};
use control::{Config, ControlError, HostManager, Mode, VssdInfo, VssdSpec, VssdStats};
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
}

type Shared = Arc<AppState>;

/// An error response: `{"error": message}` with a status code.
pub struct ApiError(StatusCode, String);

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
    let mgr = st.mgr.clone();
    tokio::task::spawn_blocking(move || f(&mgr))
        .await
        .map_err(|e| {
            ApiError(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("internal error: {e}"),
            )
        })?
        .map_err(ApiError::from)
}

/// The API's router over `mgr`.
pub fn router(mgr: Arc<HostManager>, info: Info) -> Router {
    let mut metrics = prometheus_client::registry::Registry::default();
    metrics.register_collector(Box::new(crate::metrics::HostCollector::new(mgr.clone())));
    metrics.register_collector(Box::new(crate::metrics::TierCollector::new(mgr.clone())));
    metrics.register_collector(Box::new(crate::metrics::HarvestCollector::new(mgr.clone())));
    let state = Arc::new(AppState { mgr, info, metrics });
    Router::new()
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
        .route("/metrics", get(get_metrics))
        .fallback(not_found)
        .with_state(state)
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

async fn list_devices(State(st): State<Shared>) -> ApiResult<impl IntoResponse> {
    Ok(Json(blocking(&st, |m| Ok(m.devices())).await?))
}

async fn get_device(
    State(st): State<Shared>,
    UrlPath(name): UrlPath<String>,
) -> ApiResult<impl IntoResponse> {
    Ok(Json(blocking(&st, move |m| m.device(&name)).await?))
}

async fn list_vssds(State(st): State<Shared>) -> Json<Vec<VssdInfo>> {
    Json(st.mgr.list())
}

async fn create_vssd(State(st): State<Shared>, body: Bytes) -> ApiResult<impl IntoResponse> {
    let spec: VssdSpec = serde_json::from_slice(&body).map_err(|e| {
        ApiError(
            StatusCode::BAD_REQUEST,
            format!("invalid request body: {e}"),
        )
    })?;
    let info = blocking(&st, move |m| m.create_vssd(&spec)).await?;
    Ok((
        StatusCode::CREATED,
        [(header::LOCATION, format!("/v1/vssds/{}", info.name))],
        Json(info),
    ))
}

async fn get_vssd(
    State(st): State<Shared>,
    UrlPath(name): UrlPath<String>,
) -> ApiResult<Json<VssdDetail>> {
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
    UrlPath(name): UrlPath<String>,
) -> ApiResult<Json<VssdStats>> {
    Ok(Json(blocking(&st, move |m| m.vssd_stats(&name)).await?))
}

/// Starts a new window for the vSSD's modelled-latency percentiles
/// (`stats.io.read_latency` / `write_latency`; recorded in emulation mode).
async fn reset_latency(
    State(st): State<Shared>,
    UrlPath(name): UrlPath<String>,
) -> ApiResult<Json<serde_json::Value>> {
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
    UrlPath(name): UrlPath<String>,
) -> ApiResult<impl IntoResponse> {
    Ok(Json(blocking(&st, move |m| m.vssd_sla(&name)).await?))
}

async fn put_sla(
    State(st): State<Shared>,
    UrlPath(name): UrlPath<String>,
    b: Bytes,
) -> ApiResult<impl IntoResponse> {
    let sla: Option<sched::TenantSla> = body(&b)?;
    Ok(Json(
        blocking(&st, move |m| m.set_vssd_sla(&name, sla)).await?,
    ))
}

async fn get_curves(
    State(st): State<Shared>,
    UrlPath(name): UrlPath<String>,
) -> ApiResult<impl IntoResponse> {
    Ok(Json(blocking(&st, move |m| m.unit_curves(&name)).await?))
}

async fn put_curve(
    State(st): State<Shared>,
    UrlPath((name, channels)): UrlPath<(String, u32)>,
    b: Bytes,
) -> ApiResult<impl IntoResponse> {
    let c: control::measure::UnitCurve = body(&b)?;
    blocking(&st, move |m| m.set_unit_curve(&name, channels, Some(c))).await?;
    Ok(Json(serde_json::json!({ "stored": channels })))
}

async fn delete_curve(
    State(st): State<Shared>,
    UrlPath((name, channels)): UrlPath<(String, u32)>,
) -> ApiResult<impl IntoResponse> {
    blocking(&st, move |m| m.set_unit_curve(&name, channels, None)).await?;
    Ok(Json(serde_json::json!({ "deleted": channels })))
}

async fn delete_vssd(
    State(st): State<Shared>,
    UrlPath(name): UrlPath<String>,
) -> ApiResult<impl IntoResponse> {
    let n = name.clone();
    blocking(&st, move |m| m.delete_vssd(&n)).await?;
    Ok(Json(serde_json::json!({ "deleted": name })))
}

async fn get_stats(State(st): State<Shared>) -> ApiResult<impl IntoResponse> {
    Ok(Json(blocking(&st, |m| Ok(m.stats())).await?))
}

/// Body of `PUT /v1/tiers/{name}/policy`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TierPolicyBody {
    /// A policy name: glru, car, arc, vfrm, grem or dgrem.
    pub policy: String,
}

/// Body of `PUT /v1/tiers/{name}/size`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TierSizeBody {
    /// New cache size: bytes, or with a K/M/G/T suffix; a multiple of 4 KiB.
    pub size: control::ByteSize,
}

async fn harvest_status(State(st): State<Shared>) -> Json<control::HarvestStatus> {
    Json(st.mgr.harvest_status())
}

async fn harvest_tick(State(st): State<Shared>) -> ApiResult<Json<serde_json::Value>> {
    // 409 while the harvester is off; 500 for any failure of the period.
    let n = blocking(&st, |m| m.harvest_tick_now()).await?;
    Ok(Json(serde_json::json!({ "events": n })))
}

async fn list_gssds(State(st): State<Shared>) -> Json<Vec<control::GssdInfo>> {
    Json(st.mgr.gssds())
}

async fn list_harvest_volumes(State(st): State<Shared>) -> Json<Vec<control::HarvestVolumeInfo>> {
    Json(st.mgr.harvest_volumes())
}

async fn get_harvest_volume(
    State(st): State<Shared>,
    UrlPath(name): UrlPath<String>,
) -> ApiResult<Json<control::HarvestVolumeInfo>> {
    Ok(Json(st.mgr.harvest_volume(&name)?))
}

async fn create_harvest_volume(State(st): State<Shared>, b: Bytes) -> ApiResult<impl IntoResponse> {
    let req: control::HarvestRequest = body(&b)?;
    let info = blocking(&st, move |m| m.harvest_volume_create(&req)).await?;
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
    UrlPath(name): UrlPath<String>,
) -> ApiResult<Json<serde_json::Value>> {
    let n = name.clone();
    blocking(&st, move |m| m.harvest_volume_release(&n)).await?;
    Ok(Json(serde_json::json!({ "released": name })))
}

/// `GET /v1/events?since=N`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct EventsQuery {
    #[serde(default)]
    since: u64,
}

async fn list_events(
    State(st): State<Shared>,
    q: Result<axum::extract::Query<EventsQuery>, axum::extract::rejection::QueryRejection>,
) -> ApiResult<Json<Vec<control::HarvestEvent>>> {
    let q = q.map_err(|e| ApiError(StatusCode::BAD_REQUEST, format!("invalid query: {e}")))?;
    Ok(Json(st.mgr.harvest_events(q.since)))
}

async fn list_tiers(State(st): State<Shared>) -> ApiResult<Json<Vec<control::TierInfo>>> {
    Ok(Json(blocking(&st, |m| Ok(m.tiers())).await?))
}

async fn get_tier(
    State(st): State<Shared>,
    UrlPath(name): UrlPath<String>,
) -> ApiResult<Json<control::TierInfo>> {
    Ok(Json(blocking(&st, move |m| m.tier(&name)).await?))
}

async fn put_tier_policy(
    State(st): State<Shared>,
    UrlPath(name): UrlPath<String>,
    b: Bytes,
) -> ApiResult<Json<control::TierInfo>> {
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
    UrlPath(name): UrlPath<String>,
    b: Bytes,
) -> ApiResult<Json<control::TierInfo>> {
    let req: TierSizeBody = body(&b)?;
    Ok(Json(
        blocking(&st, move |m| m.resize_tier(&name, req.size.0)).await?,
    ))
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

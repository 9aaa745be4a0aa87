//! The fleet API (`flexssd cluster serve`): routes, who may do what, and
//! forwarding of changes to the active scheduler.
//!
//! Authentication is the bootstrap admin token of `--api-token-file`, or a
//! fleet token (`flexssd --cluster URL token create`), the same kind of token
//! as a host's API, kept hashed in etcd. An admin sees and changes
//! everything. A tenant token sees and changes only its own tenant's vSSDs
//! and harvest volumes, sees only their events, and creates vSSDs for its own
//! tenant only; the fleet's hosts, status, gSSD pool and tokens are for
//! admins (403, naming what was refused, which depends on no name). Tenants
//! are strangers: for a tenant token, another tenant's vSSD, harvest volume
//! or harvest tenant answers exactly as one that does not exist (404 with the
//! scheduler's own message, [`ClusterError::no_vssd`] and its siblings), for
//! reads, deletes and harvest requests alike, so names cannot be probed.
//! Names are global, so creating a vSSD or harvest volume under a name in use
//! is 409 (`... already exists in the fleet`) whoever uses it: a create
//! cannot hide that a name is taken, only whose it is. Missing or bad
//! credentials are 401.
//! A follower forwards a change with the client's own Authorization header,
//! and the active scheduler checks it again.

use std::sync::Arc;

use auth::{Presented, Principal, Role, TokenInfo};
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use cluster::keys::FleetEvent;
use cluster::scheduler::{FleetHarvestStatus, FleetStatus, HostStatus, VssdStatus};
use cluster::{ClusterError, CreateRequest, Scheduler};
use serde::Deserialize;
use tracing::info;

use crate::api::{CreatedToken, TokenRequest};

/// What every handler shares.
#[derive(Clone)]
pub(crate) struct AppState {
    /// This scheduler.
    pub sched: Arc<Scheduler>,
    /// The bootstrap admin token (`--api-token-file`); `None`: authentication off.
    pub token: Option<Arc<str>>,
    /// HTTP client for forwarding changes to the active scheduler.
    pub forward: ureq::Agent,
}

struct FleetError(StatusCode, String);

impl IntoResponse for FleetError {
    fn into_response(self) -> Response {
        (self.0, Json(serde_json::json!({ "error": self.1 }))).into_response()
    }
}

impl From<ClusterError> for FleetError {
    fn from(e: ClusterError) -> Self {
        FleetError(
            StatusCode::from_u16(e.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            e.to_string(),
        )
    }
}

/// Who sends a request. With authentication off (no `--api-token-file`),
/// everyone is an admin (loopback only, which `serve` enforces). Otherwise
/// the bearer token is the bootstrap admin token, or a fleet token (`fxs_…`)
/// whose hash is in etcd.
async fn principal(st: &AppState, headers: &HeaderMap) -> Result<Principal, FleetError> {
    let Some(want) = &st.token else {
        return Ok(Principal::unauthenticated_admin());
    };
    let Some(header) = headers.get("authorization").and_then(|v| v.to_str().ok()) else {
        return Err(FleetError(
            StatusCode::UNAUTHORIZED,
            "missing credentials: send a fleet API token as a bearer token (--token-file or FLEXSSD_TOKEN)".into(),
        ));
    };
    let got = header
        .trim()
        .split_once(' ')
        .filter(|(s, _)| s.eq_ignore_ascii_case("bearer"))
        .map(|(_, t)| t.trim())
        .unwrap_or("");
    if auth::constant_time_eq(got.as_bytes(), want.as_bytes()) {
        return Ok(Principal {
            token_id: None,
            tenant: Some("fleet admin".into()),
            role: Role::Admin,
        });
    }
    let p = Presented::from_authorization(header)
        .map_err(|_| FleetError(StatusCode::UNAUTHORIZED, "invalid token".into()))?;
    match st.sched.token_check(&p).await? {
        Some(rec) => Ok(Principal::of(&rec)),
        None => Err(FleetError(
            StatusCode::UNAUTHORIZED,
            "invalid token: unknown or revoked".into(),
        )),
    }
}

fn forbidden(p: &Principal, what: &str) -> FleetError {
    FleetError(
        StatusCode::FORBIDDEN,
        format!("forbidden: a {} may not {what}", p.describe()),
    )
}

fn require_admin(p: &Principal, what: &str) -> Result<(), FleetError> {
    if p.is_admin() {
        Ok(())
    } else {
        Err(forbidden(p, &format!("{what} (an admin token may)")))
    }
}

/// A JSON body, or 400 naming what it should have been.
fn parse<T: serde::de::DeserializeOwned>(body: &[u8], what: &str) -> Result<T, FleetError> {
    serde_json::from_slice(body)
        .map_err(|e| FleetError(StatusCode::BAD_REQUEST, format!("invalid {what}: {e}")))
}

/// The reply to a change. `res` is the refusal of the checks made here, or
/// the scheduler's answer: `ok` with its value, or, when this scheduler is a
/// follower, the active one's reply to the same request, forwarded with the
/// client's own credentials (which the active one checks again).
async fn reply<T: serde::Serialize>(
    st: &AppState,
    res: Result<Result<T, ClusterError>, FleetError>,
    ok: StatusCode,
    method: Method,
    path: &str,
    headers: &HeaderMap,
    body: Option<Bytes>,
) -> Response {
    match res {
        Err(refused) => refused.into_response(),
        Ok(Ok(v)) => (ok, Json(v)).into_response(),
        Ok(Err(e)) => forward(st, method, path.to_string(), headers, body, e).await,
    }
}

/// A change this scheduler cannot make: send it to the active one.
async fn forward(
    st: &AppState,
    method: Method,
    path: String,
    headers: &HeaderMap,
    body: Option<Bytes>,
    err: ClusterError,
) -> Response {
    let ClusterError::NotLeader { leader } = &err else {
        return FleetError::from(err).into_response();
    };
    if leader == "none" {
        return FleetError::from(err).into_response();
    }
    let url = format!("{}{}", leader.trim_end_matches('/'), path);
    let agent = st.forward.clone();
    let auth = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let res = tokio::task::spawn_blocking(move || {
        let mut r = agent.request(method.as_str(), &url);
        if let Some(a) = auth {
            r = r.set("Authorization", &a);
        }
        let r = match body {
            Some(b) => r.set("Content-Type", "application/json").send_bytes(&b),
            None => r.call(),
        };
        match r {
            Ok(resp) | Err(ureq::Error::Status(_, resp)) => {
                let code = resp.status();
                Ok((code, resp.into_string().unwrap_or_default()))
            }
            Err(e) => Err(e.to_string()),
        }
    })
    .await;
    match res {
        Ok(Ok((code, text))) => (
            StatusCode::from_u16(code).unwrap_or(StatusCode::BAD_GATEWAY),
            [("content-type", "application/json")],
            text,
        )
            .into_response(),
        Ok(Err(e)) => FleetError(
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "the active scheduler at {leader} is unreachable ({e}); retry in a few seconds"
            ),
        )
        .into_response(),
        Err(e) => FleetError(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

async fn h_gssds(
    State(st): State<AppState>,
    headers: HeaderMap,
) -> Result<Json<Vec<cluster::scheduler::FleetGssd>>, FleetError> {
    let p = principal(&st, &headers).await?;
    require_admin(&p, "see the fleet's gSSD pool")?;
    Ok(Json(st.sched.gssds()))
}

/// The fleet's dashboard fragment: hosts with their state and links to
/// their own dashboards (the page at `/dashboard` fetches it with the fleet
/// token, like the host's page does). The fleet's hosts are for admins.
async fn h_dashboard(State(st): State<AppState>, headers: HeaderMap) -> Response {
    let p = match principal(&st, &headers).await {
        Ok(p) => p,
        Err(e) => return e.into_response(),
    };
    if let Err(e) = require_admin(&p, "see the fleet's dashboard") {
        return e.into_response();
    }
    let hosts: Vec<dashboard::FleetHost> = st
        .sched
        .hosts()
        .into_iter()
        .map(|h| dashboard::FleetHost {
            api: h.record.as_ref().map(|r| r.api.clone()),
            gssds: h.record.as_ref().map_or(0, |r| r.gssds.len()),
            id: h.id,
            state: h.state,
            vssds: h.vssds,
            booked_channels: h.booked_channels,
            total_channels: h.total_channels,
        })
        .collect();
    let leader = st
        .sched
        .status()
        .leader
        .map(|l| format!("{} ({})", l.id, l.api));
    crate::api::dashboard_fragment(dashboard::render_fleet(&hosts, leader.as_deref()))
}

async fn h_status(
    State(st): State<AppState>,
    headers: HeaderMap,
) -> Result<Json<FleetStatus>, FleetError> {
    let p = principal(&st, &headers).await?;
    require_admin(&p, "see the fleet's status")?;
    Ok(Json(st.sched.status()))
}

async fn h_hosts(
    State(st): State<AppState>,
    headers: HeaderMap,
) -> Result<Json<Vec<HostStatus>>, FleetError> {
    let p = principal(&st, &headers).await?;
    require_admin(&p, "see the fleet's hosts")?;
    Ok(Json(st.sched.hosts()))
}

async fn h_list(
    State(st): State<AppState>,
    headers: HeaderMap,
) -> Result<Json<Vec<VssdStatus>>, FleetError> {
    let p = principal(&st, &headers).await?;
    let mut l = st.sched.list().await?;
    l.retain(|v| p.owns(v.vssd.tenant.as_deref()));
    Ok(Json(l))
}

/// `POST /v1/vssds`. A tenant token creates for its own tenant only (403
/// otherwise, which depends on no existing name). Names are global: a name in
/// use, by any tenant, is the scheduler's 409, the same message whoever holds
/// it, so it tells that the name is taken and nothing about whose it is.
async fn h_create(State(st): State<AppState>, headers: HeaderMap, body: Bytes) -> Response {
    let res = async {
        let p = principal(&st, &headers).await?;
        let mut req: CreateRequest = parse(&body, "vSSD request")?;
        if !p.is_admin() {
            if req.tenant.is_some() && req.tenant != p.tenant {
                return Err(forbidden(&p, "create a vSSD for another tenant"));
            }
            req.tenant.clone_from(&p.tenant);
        }
        Ok(st.sched.create(&req).await)
    }
    .await;
    reply(
        &st,
        res,
        StatusCode::CREATED,
        Method::POST,
        "/v1/vssds",
        &headers,
        Some(body),
    )
    .await
}

async fn h_show(
    State(st): State<AppState>,
    headers: HeaderMap,
    Path(name): Path<String>,
) -> Result<Json<VssdStatus>, FleetError> {
    let p = principal(&st, &headers).await?;
    let v = st.sched.show(&name).await?;
    if !p.owns(v.vssd.tenant.as_deref()) {
        return Err(ClusterError::no_vssd(&name).into());
    }
    Ok(Json(v))
}

async fn h_delete(
    State(st): State<AppState>,
    headers: HeaderMap,
    Path(name): Path<String>,
) -> Response {
    let res = async {
        let p = principal(&st, &headers).await?;
        if !p.is_admin() && !p.owns(st.sched.show(&name).await?.vssd.tenant.as_deref()) {
            return Err(ClusterError::no_vssd(&name).into());
        }
        Ok(st
            .sched
            .delete(&name)
            .await
            .map(|()| serde_json::json!({ "deleted": name })))
    }
    .await;
    let path = format!("/v1/vssds/{name}");
    reply(
        &st,
        res,
        StatusCode::OK,
        Method::DELETE,
        &path,
        &headers,
        None,
    )
    .await
}

async fn h_harvest_list(
    State(st): State<AppState>,
    headers: HeaderMap,
) -> Result<Json<Vec<FleetHarvestStatus>>, FleetError> {
    let p = principal(&st, &headers).await?;
    let mut l = st.sched.harvest_list().await?;
    l.retain(|v| p.owns(v.volume.owner.as_deref()));
    Ok(Json(l))
}

async fn h_harvest_show(
    State(st): State<AppState>,
    headers: HeaderMap,
    Path(name): Path<String>,
) -> Result<Json<FleetHarvestStatus>, FleetError> {
    let p = principal(&st, &headers).await?;
    let v = st.sched.harvest_show(&name).await?;
    if !p.owns(v.volume.owner.as_deref()) {
        return Err(ClusterError::no_harvest_volume(&name).into());
    }
    Ok(Json(v))
}

async fn h_harvest_request(
    State(st): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let res = async {
        let p = principal(&st, &headers).await?;
        let req: control::HarvestRequest = parse(&body, "harvest request")?;
        // A tenant's own harvest tenant only: the scheduler answers another
        // tenant's exactly as an unknown one, at the same point of its checks.
        let caller = (!p.is_admin()).then(|| p.tenant.clone().unwrap_or_default());
        Ok(st.sched.harvest_request_as(&req, caller.as_deref()).await)
    }
    .await;
    let path = "/v1/harvest/volumes";
    reply(
        &st,
        res,
        StatusCode::CREATED,
        Method::POST,
        path,
        &headers,
        Some(body),
    )
    .await
}

async fn h_harvest_release(
    State(st): State<AppState>,
    headers: HeaderMap,
    Path(name): Path<String>,
) -> Response {
    let res = async {
        let p = principal(&st, &headers).await?;
        if !p.is_admin() && !p.owns(st.sched.harvest_show(&name).await?.volume.owner.as_deref()) {
            return Err(ClusterError::no_harvest_volume(&name).into());
        }
        Ok(st
            .sched
            .harvest_release(&name)
            .await
            .map(|()| serde_json::json!({ "released": name })))
    }
    .await;
    let path = format!("/v1/harvest/volumes/{name}");
    reply(
        &st,
        res,
        StatusCode::OK,
        Method::DELETE,
        &path,
        &headers,
        None,
    )
    .await
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EventsQuery {
    limit: Option<i64>,
    since: Option<u64>,
}

async fn h_events(
    State(st): State<AppState>,
    headers: HeaderMap,
    Query(q): Query<EventsQuery>,
) -> Result<Json<Vec<FleetEvent>>, FleetError> {
    let p = principal(&st, &headers).await?;
    let mut l = st
        .sched
        .events(
            q.limit.unwrap_or(100).clamp(1, 10_000),
            q.since.unwrap_or(0),
        )
        .await?;
    if !p.is_admin() {
        l.retain(|e| e.tenant.is_some() && p.owns(e.tenant.as_deref()));
    }
    Ok(Json(l))
}

async fn h_tokens_list(
    State(st): State<AppState>,
    headers: HeaderMap,
) -> Result<Json<Vec<TokenInfo>>, FleetError> {
    let p = principal(&st, &headers).await?;
    require_admin(&p, "list the fleet's API tokens")?;
    Ok(Json(st.sched.token_list().await?))
}

async fn h_token_create(
    State(st): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<(StatusCode, Json<CreatedToken>), FleetError> {
    let p = principal(&st, &headers).await?;
    require_admin(&p, "make API tokens")?;
    let req: TokenRequest = serde_json::from_slice(&body).map_err(|e| {
        FleetError(
            StatusCode::BAD_REQUEST,
            format!("invalid token request: {e}"),
        )
    })?;
    let (token, info) = st.sched.token_create(&req.tenant, req.role).await?;
    info!(id = %info.id, tenant = %info.tenant, role = %info.role, by = %p.describe(), "fleet API token created");
    Ok((StatusCode::CREATED, Json(CreatedToken { token, info })))
}

async fn h_token_revoke(
    State(st): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Json<serde_json::Value>, FleetError> {
    let p = principal(&st, &headers).await?;
    require_admin(&p, "revoke API tokens")?;
    st.sched.token_revoke(&id).await?;
    info!(id = %id, by = %p.describe(), "fleet API token revoked");
    Ok(Json(serde_json::json!({ "revoked": id })))
}

/// The fleet API's routes.
pub(crate) fn router(st: AppState) -> Router {
    Router::new()
        .route("/v1/cluster/status", get(h_status))
        .route("/v1/cluster/hosts", get(h_hosts))
        .route("/v1/vssds", get(h_list).post(h_create))
        .route("/v1/vssds/:name", get(h_show).delete(h_delete))
        .route("/v1/events", get(h_events))
        .route("/v1/gssds", get(h_gssds))
        .route(
            "/v1/harvest/volumes",
            get(h_harvest_list).post(h_harvest_request),
        )
        .route(
            "/v1/harvest/volumes/:name",
            get(h_harvest_show).delete(h_harvest_release),
        )
        .route("/v1/tokens", get(h_tokens_list).post(h_token_create))
        .route("/v1/tokens/:id", axum::routing::delete(h_token_revoke))
        .route("/v1/cluster/dashboard", get(h_dashboard))
        .route(
            "/dashboard",
            get(|| async {
                crate::api::dashboard_page("flexssd fleet", "/v1/cluster/dashboard", 2000)
            }),
        )
        .route("/dashboard/app.js", get(crate::api::dashboard_app_js))
        .route("/dashboard/style.css", get(crate::api::dashboard_style_css))
        .layer(axum::extract::DefaultBodyLimit::max(64 * 1024))
        .with_state(st)
}

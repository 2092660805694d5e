//! The web UI, served by the API process on the API port (HTTP/1.1 and
//! HTTP/2): a single page (`/ui/`) and its JSON routes (`/ui/api/...`).
//!
//! The JSON routes answer with the public API's own messages in their
//! proto3 JSON mapping (proto field names, enums as names, 64-bit integers
//! as strings), produced by calling the same service implementations the
//! gRPC clients reach. So the UI shows exactly what `paceline … -o json`
//! and every gRPC client see, and has no data model of its own:
//!
//! | route | answer | fields the page reads |
//! |---|---|---|
//! | `GET /ui/api/jobs` | `QueryJobsResponse` (every job, newest first, first page) | `jobs[].id`, `.spec.{name,kind,pool}`, `.status.{state,task_counts}` |
//! | `GET /ui/api/jobs/{id}` | `{"job": Job, "tasks": [Task], "events": [JobEvent], "events_hidden": why}` (events: `JobEvents`, the newest 100; empty, with `events_hidden` saying why, for a caller who may not read the job's pool) | `tasks[].{instance,state,host,run_id,pending_reason,reason,message}`, `events[].{last_seen_ms,type,reason,count,instance,message}` |
//! | `GET /ui/api/pools` | `ListPoolsResponse` (the tree, parents first, with entitlement, allocation and demand) | `capacity.{cpu_millis,memory_mib}`; `pools[].path`, `.spec.share`, `.{entitlement,allocation,demand}.{cpu,memory}` |
//! | `GET /ui/api/hosts` | `ListHostsResponse` | `hosts[].{hostname,state,reachable}`, `.{total,allocated}.{cpu_millis,memory_mib}` |
//! | `GET /ui/api/plugins` | `ListPluginsResponse` | `slots[].{slot,active}`, `.versions[].{id,state,calls,p99_us,batched}` |
//! | `POST /ui/api/plugins/rollback` `{"slot": "placement/batch"}` | the `PluginSlot` after the rollback | (re-renders) |
//! | `GET /ui/api/audit?principal=&job_id=&method=&since_ms=&until_ms=&limit=` | `ListAuditRecordsResponse` (newest first; a `user` sees their own) | `records[].{at_ms,principal,role,method,target,summary,code,message}` |
//!
//! Omitted fields are the proto3 defaults (0, "", false): the page reads a
//! missing number as 0.
//!
//! Errors are `{"error": "..."}` with an HTTP status that follows the gRPC
//! code (400 invalid, 404 not found, 409 failed precondition, 503
//! unavailable, 500 otherwise). Authentication and authorization happen in
//! [`crate::auth::AuthLayer`] before these handlers run: with a tokens file,
//! reads need a token and the rollback an operator's; the page itself and
//! its assets are open (they hold no data). The page is the only intended
//! client of these routes; programs should use gRPC.

use std::sync::Arc;

use axum::extract::{Extension, Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use paceline_proto::v1 as pb;
use pb::audit_service_server::AuditService;
use pb::host_service_server::HostService;
use pb::job_service_server::JobService;
use pb::plugin_service_server::PluginService;
use pb::pool_service_server::PoolService;
use pb::task_service_server::TaskService;
use tonic::{Request, Status};

use crate::audit::service::AuditApi;
use crate::{Roles, hosts::HostApi, jobs::JobApi, plugins::PluginApi, pools::PoolApi, tasks::TaskApi};

const INDEX: &str = include_str!("../web/index.html");
const APP_JS: &str = include_str!("../web/app.js");
const STYLE: &str = include_str!("../web/style.css");

/// The services the routes call.
struct Web {
    jobs: JobApi,
    tasks: TaskApi,
    pools: PoolApi,
    hosts: HostApi,
    plugins: PluginApi,
    audit: AuditApi,
}

/// The UI's routes over the cluster's roles.
pub fn routes(roles: Roles) -> Router {
    let web = Arc::new(Web {
        jobs: JobApi::new(roles.jobs.clone(), roles.hosts.clone()),
        tasks: TaskApi::new(roles.jobs.clone(), roles.hosts.clone()),
        pools: PoolApi::new(roles.resmgr.clone(), roles.store.clone()),
        hosts: HostApi::new(roles.hosts.clone()),
        plugins: PluginApi::new(roles.registry.clone()),
        audit: AuditApi::new(roles.store.clone()),
    });
    Router::new()
        .route("/", get(|| async { Redirect::temporary("/ui/") }))
        .route("/ui", get(|| async { Redirect::temporary("/ui/") }))
        .route("/ui/", get(|| async { asset("text/html; charset=utf-8", INDEX) }))
        .route("/ui/app.js", get(|| async { asset("text/javascript; charset=utf-8", APP_JS) }))
        .route("/ui/style.css", get(|| async { asset("text/css; charset=utf-8", STYLE) }))
        .route("/ui/api/jobs", get(jobs))
        .route("/ui/api/jobs/{id}", get(job))
        .route("/ui/api/pools", get(pools))
        .route("/ui/api/hosts", get(hosts))
        .route("/ui/api/plugins", get(plugins))
        .route("/ui/api/plugins/rollback", post(rollback))
        .route("/ui/api/audit", get(audit))
        .with_state(web)
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    ([(header::CONTENT_TYPE, content_type), (header::CACHE_CONTROL, "no-cache")], body).into_response()
}

/// A gRPC status as the UI's JSON error.
struct Failure(Status);

impl IntoResponse for Failure {
    fn into_response(self) -> Response {
        use tonic::Code;
        let code = match self.0.code() {
            Code::InvalidArgument | Code::OutOfRange => StatusCode::BAD_REQUEST,
            Code::NotFound => StatusCode::NOT_FOUND,
            Code::FailedPrecondition | Code::AlreadyExists | Code::Aborted => StatusCode::CONFLICT,
            Code::Unauthenticated => StatusCode::UNAUTHORIZED,
            Code::PermissionDenied => StatusCode::FORBIDDEN,
            Code::Unavailable | Code::DeadlineExceeded => StatusCode::SERVICE_UNAVAILABLE,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        let mut response = (code, Json(serde_json::json!({ "error": self.0.message() }))).into_response();
        // For the audit record of a changing route: the code, not only the HTTP status.
        response.extensions_mut().insert(crate::audit::WebOutcome {
            code: format!("{:?}", self.0.code()),
            message: self.0.message().to_string(),
        });
        response
    }
}

impl From<Status> for Failure {
    fn from(s: Status) -> Self {
        Failure(s)
    }
}

type Answer<T> = Result<Json<T>, Failure>;

async fn jobs(State(web): State<Arc<Web>>) -> Answer<pb::QueryJobsResponse> {
    Ok(Json(web.jobs.query_jobs(Request::new(pb::QueryJobsRequest::default())).await?.into_inner()))
}

async fn job(
    State(web): State<Arc<Web>>,
    Path(id): Path<String>,
    who: Option<Extension<Arc<crate::auth::Principal>>>,
) -> Answer<serde_json::Value> {
    let job = web.jobs.get_job(Request::new(pb::GetJobRequest { id: id.clone() })).await?.into_inner().job;
    let tasks = web
        .tasks
        .list_tasks(Request::new(pb::ListTasksRequest { job_id: id.clone(), states: vec![] }))
        .await?
        .into_inner()
        .tasks;
    // The events go through the same pool check as `JobEvents`: a user sees
    // another team's job and tasks, not its events (which carry messages).
    let mut events_request = Request::new(pb::JobEventsRequest { job_id: id, instance: None, limit: 0 });
    if let Some(Extension(who)) = who {
        events_request.extensions_mut().insert(who);
    }
    let (events, events_hidden) = match web.jobs.job_events(events_request).await {
        Ok(r) => (r.into_inner().events, String::new()),
        Err(e) if e.code() == tonic::Code::PermissionDenied => (Vec::new(), e.message().to_string()),
        Err(e) => return Err(e.into()),
    };
    Ok(Json(serde_json::json!({ "job": job, "tasks": tasks, "events": events, "events_hidden": events_hidden })))
}

async fn pools(State(web): State<Arc<Web>>) -> Answer<pb::ListPoolsResponse> {
    Ok(Json(web.pools.list_pools(Request::new(pb::ListPoolsRequest {})).await?.into_inner()))
}

async fn hosts(State(web): State<Arc<Web>>) -> Answer<pb::ListHostsResponse> {
    Ok(Json(web.hosts.list_hosts(Request::new(pb::ListHostsRequest {})).await?.into_inner()))
}

async fn plugins(State(web): State<Arc<Web>>) -> Answer<pb::ListPluginsResponse> {
    Ok(Json(web.plugins.list_plugins(Request::new(pb::ListPluginsRequest {})).await?.into_inner()))
}

/// `{"slot": "placement/batch"}`.
#[derive(serde::Deserialize)]
struct RollbackBody {
    slot: String,
}

async fn rollback(
    State(web): State<Arc<Web>>,
    body: Result<Json<RollbackBody>, axum::extract::rejection::JsonRejection>,
) -> Answer<pb::PluginSlot> {
    let Json(body) = body.map_err(|e| {
        Failure(Status::invalid_argument(format!("body: {e} (expected {{\"slot\": \"placement/batch\"}})")))
    })?;
    let slot = web.plugins.rollback_plugin(Request::new(pb::SlotRef { slot: body.slot.clone() })).await?.into_inner();
    tracing::info!(slot = %body.slot, "plugin rolled back from the web UI");
    Ok(Json(slot))
}

/// The audit route's filters: `ListAuditRecordsRequest`'s fields as query parameters.
#[derive(serde::Deserialize, Default)]
#[serde(default)]
struct AuditFilters {
    principal: String,
    job_id: String,
    method: String,
    since_ms: u64,
    until_ms: u64,
    limit: u32,
}

async fn audit(
    State(web): State<Arc<Web>>,
    who: Option<axum::Extension<Arc<crate::auth::Principal>>>,
    filters: Result<axum::extract::Query<AuditFilters>, axum::extract::rejection::QueryRejection>,
) -> Answer<pb::ListAuditRecordsResponse> {
    let axum::extract::Query(f) = filters.map_err(|e| Failure(Status::invalid_argument(format!("query: {e}"))))?;
    let mut request = Request::new(pb::ListAuditRecordsRequest {
        principal: f.principal,
        job_id: f.job_id,
        method: f.method,
        since_ms: f.since_ms,
        until_ms: f.until_ms,
        limit: f.limit,
    });
    // The layer's principal decides what a user may read, as on gRPC.
    if let Some(axum::Extension(who)) = who {
        request.extensions_mut().insert(who);
    }
    Ok(Json(web.audit.list_audit_records(request).await?.into_inner()))
}

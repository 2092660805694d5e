//! The web UI, served by the API process on the API port (HTTP/1.1 and
//! HTTP/2): a single page (`/ui/`) and its JSON routes (`/ui/api/...`).
//!
//! The JSON routes answer with the public API's own messages in their
//! proto3 JSON mapping (proto field names, enums as names, 64-bit integers
//! as strings), produced by calling the same service implementations the
//! gRPC clients reach. So the UI shows exactly what `paceline … -o json`
//! and every gRPC client see, and has no data model of its own:
//!
//! | route | answer |
//! |---|---|
//! | `GET /ui/api/whoami` | `{"name", "role", "pools", "tokens_required"}`: the caller |
//! | `GET /ui/api/events?from_revision=` | Server-Sent Events: `WatchEvent`s as JSON ([`live`]) |
//! | `GET /ui/api/jobs?state=&pool=&owner=&name_contains=&limit=&page_token=` | `QueryJobsResponse` (newest first, one page) |
//! | `POST /ui/api/jobs` (a job file's YAML) | `CreateJobResponse` |
//! | `POST /ui/api/jobs/validate` (a job file's YAML) | `{"ok": true, "name", "pool", "instances"}`, or 400 with `line`, `column` |
//! | `GET /ui/api/jobs/{id}?tasks_offset=&tasks_limit=` | `{"job": Job, "tasks": [Task], "tasks_total": n, "tasks_next_offset": n or null, "events": [JobEvent], "spec_yaml": text}` (tasks: one page from instance `tasks_offset`, default 500, at most 5,000; `tasks_next_offset` is the next page's `tasks_offset`, null after the last; events: `JobEvents`, the newest 100) |
//! | `POST /ui/api/jobs/{id}/{kill,restart,scale,pause,resume,abort}` | `{}`, `UpdateJobResponse` (scale, body `{"instances": N}`) or `UpdateControlResponse` |
//! | `GET /ui/api/tasks/{id}/{instance}` | `{"task": Task, "events": [TaskEvent]}` |
//! | `GET /ui/api/tasks/{id}/{instance}/logs?stream=&run=&offset=&follow=` | the log as a chunked `text/plain` body ([`live`]) |
//! | `POST /ui/api/tasks/{id}/{instance}/{kill,restart}` | `{}` |
//! | `GET /ui/api/pools` | `ListPoolsResponse` (the tree, parents first, with entitlement, allocation and demand) |
//! | `GET /ui/api/hosts` | `ListHostsResponse` |
//! | `POST /ui/api/hosts/{name}/{drain,down,up}` | `DrainHostResponse` |
//! | `GET /ui/api/plugins` | `ListPluginsResponse` (a slot's `shadow`: its shadow run's report so far, with the per-task disagreements) |
//! | `GET /ui/api/plugins/history?slot=` | `{"interval_ms", "versions": [{"id", "samples": [{"at_ms", "calls", "p50_us", "p99_us", "faults"}]}]}`: the last hour, a sample every 30 s ([`plugin_history`]) |
//! | `POST /ui/api/plugins/rollback` `{"slot"}` | the `PluginSlot` after the rollback |
//! | `POST /ui/api/plugins/activate` `{"slot", "id"}` | the `PluginSlot` after |
//! | `POST /ui/api/plugins/shadow` `{"slot", "id"}` or `{"slot", "stop": true}` | `ShadowPluginResponse` |
//! | `POST /ui/api/plugins/deploy?slot=&name=&version=&skip_self_test=` (body: the `.wasm`) | `DeployPluginResponse` |
//! | `GET /ui/api/sim-reports` | `{"dir", "reports": [{"name", "format", "bytes", "modified_ms"}]}`: `paceline sim` reports in `sim_reports_dir` ([`sim_reports`]) |
//! | `GET /ui/api/sim-reports/{name}` | the report (HTML or JSON), with a strict Content-Security-Policy |
//! | `GET /ui/api/audit?principal=&job_id=&method=&since_ms=&until_ms=&limit=` | `ListAuditRecordsResponse` (newest first; a `user` sees their own) |
//!
//! Every route calls the service methods as the caller the auth layer
//! admitted, so the role table and the pool checks are those of gRPC: a
//! `user` reads and changes only its pools' jobs and tasks (403 naming the
//! pool; the job list and the live stream leave the others out; decision
//! 0059), and each change is audited like its gRPC twin.
//!
//! Omitted fields are the proto3 defaults (0, "", false): the page reads a
//! missing number as 0.
//!
//! Errors are `{"error": "..."}` with an HTTP status that follows the gRPC
//! code (400 invalid, 404 not found, 409 failed precondition, 429 a limit
//! per caller reached, 503 unavailable, 500 otherwise). Authentication and authorization happen in
//! [`crate::auth::AuthLayer`] before these handlers run: with a tokens file,
//! reads need a token, host and plugin changes an operator's; the page
//! itself and its assets are open (they hold no data). The page is the only
//! intended client of these routes; programs should use gRPC.

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

mod actions;
mod history;
mod live;
mod plugin_history;
pub mod sim_reports;

/// The page's files, embedded in the binary (plain ES modules, no build
/// step; decision 0031): name under `/ui/`, content type, text.
const ASSETS: &[(&str, &str, &str)] = &[
    ("app.js", JS, include_str!("../web/app.js")),
    ("api.js", JS, include_str!("../web/api.js")),
    ("dom.js", JS, include_str!("../web/dom.js")),
    ("lists.js", JS, include_str!("../web/lists.js")),
    ("job.js", JS, include_str!("../web/job.js")),
    ("cluster.js", JS, include_str!("../web/cluster.js")),
    ("style.css", "text/css; charset=utf-8", include_str!("../web/style.css")),
];
const JS: &str = "text/javascript; charset=utf-8";
const INDEX: &str = include_str!("../web/index.html");

/// The services the routes call.
struct Web {
    jobs: JobApi,
    tasks: TaskApi,
    pools: PoolApi,
    hosts: HostApi,
    plugins: PluginApi,
    audit: AuditApi,
    watch: crate::watch::WatchApi,
    auth: Arc<crate::auth::Auth>,
    history: Arc<history::PoolHistory>,
    plugin_history: Arc<plugin_history::PluginHistory>,
    /// `sim_reports_dir`, when the server has one.
    sim_reports: Option<std::path::PathBuf>,
}

/// The UI's routes over the cluster's roles; `watch` feeds the page's
/// live stream (`/ui/api/events`); from `config`, `auth` answers who the
/// caller is, `sim_reports_dir` is where `paceline sim` reports are listed
/// from and `pool_history_file` keeps the pool charts across restarts.
pub fn routes(roles: Roles, watch: crate::watch::WatchApi, config: &crate::ApiConfig) -> Router {
    let upload_limit = roles.registry.runtime().config().max_upload_bytes;
    let web = Arc::new(Web {
        jobs: JobApi::new(roles.jobs.clone(), roles.hosts.clone()).with_quotas(config.quotas.clone()),
        tasks: TaskApi::new(roles.jobs.clone(), roles.hosts.clone()),
        pools: PoolApi::new(roles.resmgr.clone(), roles.pools.clone()),
        hosts: HostApi::new(roles.hosts.clone()),
        plugins: PluginApi::new(roles.registry.clone()),
        audit: AuditApi::new(roles.store.clone()),
        watch,
        auth: config.auth.clone(),
        history: Arc::new(match &config.pool_history_file {
            Some(file) => history::PoolHistory::kept_in(file, crate::audit::now_ms()),
            None => history::PoolHistory::default(),
        }),
        plugin_history: Arc::new(plugin_history::PluginHistory::default()),
        sim_reports: config.sim_reports_dir.clone(),
    });
    history::start(Arc::downgrade(&web.history), PoolApi::new(roles.resmgr.clone(), roles.pools.clone()));
    plugin_history::start(Arc::downgrade(&web.plugin_history), web.plugins.clone());
    Router::new()
        .route("/", get(|| async { Redirect::temporary("/ui/") }))
        .route("/ui", get(|| async { Redirect::temporary("/ui/") }))
        // Browsers ask for it on every page load; there is none, and
        // that is not worth a 404 (or a refusal in the log) each time.
        .route("/favicon.ico", get(|| async { StatusCode::NO_CONTENT }))
        .route("/ui/", get(|| async { asset("text/html; charset=utf-8", INDEX) }))
        .route("/ui/{file}", get(file))
        .route("/ui/api/whoami", get(actions::whoami))
        .route("/ui/api/events", get(live::events))
        .route("/ui/api/jobs", get(jobs).post(actions::create_job))
        .route("/ui/api/jobs/validate", post(actions::validate_job))
        .route("/ui/api/jobs/{id}", get(job))
        .route("/ui/api/jobs/{id}/{action}", post(actions::job_action))
        .route("/ui/api/jobs/{id}/versions/{version}", get(job_version))
        .route("/ui/api/tasks/{id}/{instance}", get(actions::task))
        .route("/ui/api/tasks/{id}/{instance}/logs", get(live::logs))
        .route("/ui/api/tasks/{id}/{instance}/{action}", post(actions::task_action))
        .route("/ui/api/pools", get(pools))
        .route("/ui/api/pools/history", get(pool_history))
        .route("/ui/api/hosts", get(hosts))
        .route("/ui/api/hosts/{name}/{action}", post(actions::host_action))
        .route("/ui/api/plugins", get(plugins))
        .route("/ui/api/plugins/history", get(plugin_history))
        .route("/ui/api/plugins/rollback", post(rollback))
        .route("/ui/api/plugins/activate", post(actions::activate))
        .route("/ui/api/plugins/shadow", post(actions::shadow))
        .route(
            "/ui/api/plugins/deploy",
            // A component may be larger than axum's default body limit (2 MiB).
            post(actions::deploy).layer(axum::extract::DefaultBodyLimit::max(upload_limit)),
        )
        .route("/ui/api/audit", get(audit))
        .route("/ui/api/sim-reports", get(sim_report_list))
        .route("/ui/api/sim-reports/{name}", get(sim_report))
        .with_state(web)
}

/// One of [`ASSETS`]; 404 for any other name.
async fn file(Path(name): Path<String>) -> Response {
    match ASSETS.iter().find(|(n, _, _)| *n == name) {
        Some((_, content_type, body)) => asset(content_type, body),
        None => (StatusCode::NOT_FOUND, "no such file").into_response(),
    }
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    ([(header::CONTENT_TYPE, content_type), (header::CACHE_CONTROL, "no-cache")], body).into_response()
}

/// A request to a service made for the caller the auth layer admitted
/// (the services' pool checks read it from the request).
fn as_caller<T>(message: T, who: &Option<Extension<Arc<crate::auth::Principal>>>) -> Request<T> {
    let mut request = Request::new(message);
    if let Some(Extension(who)) = who {
        request.extensions_mut().insert(who.clone());
    }
    request
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
            // A per-caller limit (concurrent job-file parses, plugin
            // validations, quotas): the caller may try again later.
            Code::ResourceExhausted => StatusCode::TOO_MANY_REQUESTS,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        let mut body = serde_json::json!({ "error": self.0.message() });
        // Where the error is (a job file's line), when the route said (see `Failure::with_detail`).
        if let Ok(serde_json::Value::Object(detail)) = serde_json::from_slice::<serde_json::Value>(self.0.details())
            && let Some(fields) = body.as_object_mut()
        {
            fields.extend(detail);
        }
        let mut response = (code, Json(body)).into_response();
        // For the audit record of a changing route: the code, not only the HTTP status.
        response.extensions_mut().insert(crate::audit::WebOutcome {
            code: format!("{:?}", self.0.code()),
            message: self.0.message().to_string(),
        });
        response
    }
}

impl Failure {
    /// An error with fields the page reads beside `error` (`line`,
    /// `column`). They ride in the status's details, which only this
    /// module's routes set, so every route keeps the one error type.
    fn with_detail(status: Status, detail: serde_json::Value) -> Failure {
        Failure(Status::with_details(status.code(), status.message(), detail.to_string().into_bytes().into()))
    }
}

impl From<Status> for Failure {
    fn from(s: Status) -> Self {
        Failure(s)
    }
}

type Answer<T> = Result<Json<T>, Failure>;

/// The jobs route's filters: `QueryJobsRequest`'s fields as query
/// parameters (`state` by name, e.g. `RUNNING`; `limit` and `page_token`
/// page through a long list).
#[derive(serde::Deserialize, Default)]
#[serde(default)]
struct JobFilters {
    state: String,
    owner: String,
    pool: String,
    name_contains: String,
    limit: u32,
    page_token: String,
}

async fn jobs(
    State(web): State<Arc<Web>>,
    who: Option<Extension<Arc<crate::auth::Principal>>>,
    filters: Result<axum::extract::Query<JobFilters>, axum::extract::rejection::QueryRejection>,
) -> Answer<pb::QueryJobsResponse> {
    let axum::extract::Query(f) = filters.map_err(|e| Failure(Status::invalid_argument(format!("query: {e}"))))?;
    let mut states = Vec::new();
    if !f.state.is_empty() {
        let name = format!("JOB_STATE_{}", f.state.to_ascii_uppercase());
        let state = pb::JobState::from_str_name(&name)
            .ok_or_else(|| Failure(Status::invalid_argument(format!("state: `{}` is not a job state", f.state))))?;
        states.push(state as i32);
    }
    let request = pb::QueryJobsRequest {
        states,
        owner: f.owner,
        pool: f.pool,
        name_contains: f.name_contains,
        limit: f.limit,
        page_token: f.page_token,
    };
    Ok(Json(web.jobs.query_jobs(as_caller(request, &who)).await?.into_inner()))
}

/// Tasks the job route returns when `tasks_limit` is left out: the page
/// shows these and a "more" control (a 100,000-task job in one answer was
/// 33 MB of JSON, and a hundred reads took the server to 1.65 GB).
const DEFAULT_UI_TASKS: u32 = 500;

/// The job route's task page: `tasks_offset` is the first instance shown,
/// `tasks_limit` how many (capped as `ListTasks` caps a page).
#[derive(serde::Deserialize, Default)]
#[serde(default)]
struct TaskPage {
    tasks_offset: u32,
    tasks_limit: u32,
}

async fn job(
    State(web): State<Arc<Web>>,
    Path(id): Path<String>,
    page: Result<axum::extract::Query<TaskPage>, axum::extract::rejection::QueryRejection>,
    who: Option<Extension<Arc<crate::auth::Principal>>>,
) -> Answer<serde_json::Value> {
    let axum::extract::Query(page) = page.map_err(|e| Failure(Status::invalid_argument(format!("query: {e}"))))?;
    // The same reads as gRPC's, as the caller: another team's job is refused
    // (decision 0059) before anything of it is read.
    let job = web
        .jobs
        .get_job(as_caller(pb::GetJobRequest { id: id.clone(), config_version: None }, &who))
        .await?
        .into_inner()
        .job;
    // The offset is an instance number, which is what a ListTasks token is.
    let listed = web
        .tasks
        .list_tasks(as_caller(
            pb::ListTasksRequest {
                job_id: id.clone(),
                states: vec![],
                limit: if page.tasks_limit == 0 { DEFAULT_UI_TASKS } else { page.tasks_limit },
                page_token: if page.tasks_offset == 0 { String::new() } else { page.tasks_offset.to_string() },
            },
            &who,
        ))
        .await?
        .into_inner();
    let tasks_next_offset = listed.next_page_token.parse::<u32>().ok();
    let (tasks, tasks_total) = (listed.tasks, listed.total);
    let events_request = as_caller(pb::JobEventsRequest { job_id: id, instance: None, limit: 0 }, &who);
    let events = web.jobs.job_events(events_request).await?.into_inner().events;
    let spec_yaml = spec_yaml(job.as_ref());
    Ok(Json(serde_json::json!({
        "job": job, "tasks": tasks, "tasks_total": tasks_total, "tasks_next_offset": tasks_next_offset,
        "events": events, "spec_yaml": spec_yaml,
    })))
}

/// A job's spec in the job file's form (what `job create` reads), to read
/// or copy into a new job; empty when it has none.
fn spec_yaml(job: Option<&pb::Job>) -> String {
    job.and_then(|j| j.spec.as_ref())
        .and_then(|s| paceline_proto::convert::job_config("spec", s).ok())
        .and_then(|c| serde_yaml::to_string(&c).ok())
        .unwrap_or_default()
}

/// `GET /ui/api/jobs/{id}/versions/{version}`: that config version's spec
/// in the job file's form.
async fn job_version(
    State(web): State<Arc<Web>>,
    Path((id, version)): Path<(String, u64)>,
    who: Option<Extension<Arc<crate::auth::Principal>>>,
) -> Answer<serde_json::Value> {
    let r = pb::GetJobRequest { id, config_version: Some(version) };
    let job = web.jobs.get_job(as_caller(r, &who)).await?.into_inner().job;
    Ok(Json(serde_json::json!({ "version": version, "spec_yaml": spec_yaml(job.as_ref()) })))
}

/// `GET /ui/api/pools/history?path=`: the pool's CPU and memory entitlement
/// and allocation over the last hour (a sample every 30 s).
async fn pool_history(
    State(web): State<Arc<Web>>,
    axum::extract::Query(q): axum::extract::Query<std::collections::HashMap<String, String>>,
) -> Answer<serde_json::Value> {
    let path = q.get("path").cloned().unwrap_or_else(|| "/".into());
    Ok(Json(web.history.of(&path)))
}

/// `GET /ui/api/plugins/history?slot=`: each of the slot's versions' calls,
/// p50/p99 latency and faults over the last hour (a sample every 30 s).
async fn plugin_history(
    State(web): State<Arc<Web>>,
    axum::extract::Query(q): axum::extract::Query<std::collections::HashMap<String, String>>,
) -> Answer<serde_json::Value> {
    let slot = q.get("slot").cloned().unwrap_or_default();
    Ok(Json(web.plugin_history.of(&slot)))
}

/// `GET /ui/api/sim-reports`: `{"dir": bool, "reports": [{"name", "format",
/// "bytes", "modified_ms"}]}`, newest first (`dir`: whether the server has
/// a reports directory).
async fn sim_report_list(State(web): State<Arc<Web>>) -> Answer<serde_json::Value> {
    let Some(dir) = web.sim_reports.clone() else {
        return Ok(Json(serde_json::json!({ "dir": false, "reports": [] })));
    };
    let listed = tokio::task::spawn_blocking(move || sim_reports::list(&dir))
        .await
        .map_err(|e| Failure(Status::internal(format!("listing reports: {e}"))))?
        .map_err(|e| Failure(Status::internal(format!("listing reports: {e}"))))?;
    Ok(Json(serde_json::json!({ "dir": true, "reports": listed })))
}

/// `GET /ui/api/sim-reports/{name}`: the report's bytes with a strict
/// Content-Security-Policy ([`sim_reports::response`]).
async fn sim_report(State(web): State<Arc<Web>>, Path(name): Path<String>) -> Response {
    let Some(dir) = web.sim_reports.clone() else {
        return Failure(Status::not_found("this server keeps no sim reports (sim_reports_dir)")).into_response();
    };
    let wanted = name.clone();
    let read = tokio::task::spawn_blocking(move || {
        let path = sim_reports::path_of(&dir, &wanted)?;
        std::fs::read(&path).map_err(|error| sim_reports::ServeError::Io { name: wanted, error })
    })
    .await;
    match read {
        Ok(Ok(bytes)) => sim_reports::response(&name, bytes),
        Ok(Err(e)) => (e.status(), Json(serde_json::json!({ "error": e.to_string() }))).into_response(),
        Err(e) => Failure(Status::internal(format!("reading report: {e}"))).into_response(),
    }
}

async fn pools(State(web): State<Arc<Web>>) -> Answer<pb::ListPoolsResponse> {
    Ok(Json(web.pools.list_pools(Request::new(pb::ListPoolsRequest {})).await?.into_inner()))
}

async fn hosts(State(web): State<Arc<Web>>) -> Answer<pb::ListHostsResponse> {
    Ok(Json(web.hosts.list_hosts(Request::new(pb::ListHostsRequest {})).await?.into_inner()))
}

async fn plugins(
    State(web): State<Arc<Web>>,
    who: Option<Extension<Arc<crate::auth::Principal>>>,
) -> Answer<pb::ListPluginsResponse> {
    Ok(Json(web.plugins.list_plugins(as_caller(pb::ListPluginsRequest {}, &who)).await?.into_inner()))
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

#[cfg(test)]
mod failure_tests {
    use super::*;

    #[test]
    fn a_limit_reached_is_429_and_the_other_codes_keep_their_status() {
        let status = |s: Status| Failure(s).into_response().status();
        assert_eq!(status(Status::resource_exhausted("2 parses at once")), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(status(Status::invalid_argument("x")), StatusCode::BAD_REQUEST);
        assert_eq!(status(Status::permission_denied("x")), StatusCode::FORBIDDEN);
        assert_eq!(status(Status::internal("x")), StatusCode::INTERNAL_SERVER_ERROR);
    }
}

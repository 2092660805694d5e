//! The page's actions and the reads behind them: who the caller is, a
//! task with its events, and the changes (submit, kill, restart, scale,
//! update control, host maintenance, plugin activation and shadowing).
//!
//! Every change calls the same service method a gRPC client reaches, as
//! the caller the auth layer admitted ([`super::as_caller`]), so the
//! server's authorization decides: the role table in
//! [`crate::auth::requirement`] first, then the job's pool in the service.
//! The page only hides what it knows will be refused.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Extension, Path, State};
use paceline_model::job::JobConfig;
use paceline_proto::v1 as pb;
use pb::host_service_server::HostService;
use pb::job_service_server::JobService;
use pb::plugin_service_server::PluginService;
use pb::task_service_server::TaskService;
use tonic::Status;

use super::{Answer, Failure, Web, as_caller};
use crate::auth::Principal;

type Who = Option<Extension<Arc<Principal>>>;

/// `GET /ui/api/whoami`: the caller's name, role and granted pools, and
/// whether the server asks for tokens at all (the page shows the
/// principal and hides what it may not do).
pub(super) async fn whoami(State(web): State<Arc<Web>>, who: Who) -> Answer<serde_json::Value> {
    let who = who.map(|Extension(w)| w).ok_or_else(|| Status::unauthenticated("no principal on this request"))?;
    Ok(Json(serde_json::json!({
        "name": who.name,
        "role": who.role.to_string(),
        "pools": who.pools,
        "tokens_required": web.auth.is_enforced(),
    })))
}

/// A job file that does not parse or validate: the message, and where in
/// the text the page should point (1-based line; 0 when unknown).
fn spec_error(message: String, line: usize, column: usize) -> Failure {
    Failure::with_detail(Status::invalid_argument(message), serde_json::json!({ "line": line, "column": column }))
}

/// Reads a job file's text as `paceline job create` does
/// ([`crate::jobfile::parse`]: size and nesting bounded first, then YAML in
/// the job file form), checked by the model, on a blocking thread and
/// within the caller's share of parses. A missing owner is left for the
/// server to fill in (the caller's name).
async fn parse_job(web: &Web, who: &Who, text: String) -> Result<JobConfig, Failure> {
    let name = who.as_ref().map_or_else(|| Principal::anonymous().name, |Extension(w)| w.name.clone());
    let parsed = match web.jobs.parse_job_file(&name, text.clone()).await {
        Ok(parsed) => parsed,
        Err(refused) => {
            tracing::warn!(caller = name, error = %refused.message(), "job file not parsed");
            return Err(Failure(refused));
        }
    };
    check_job(&text, parsed)
}

/// A parsed job file checked by the model, errors pointing at their line.
fn check_job(text: &str, parsed: Result<JobConfig, crate::jobfile::JobFileError>) -> Result<JobConfig, Failure> {
    let config = parsed.map_err(|e| {
        let (line, column) = e.location();
        spec_error(format!("invalid job spec: {e}"), line, column)
    })?;
    let mut checked = config.clone();
    if checked.owner.is_empty() {
        checked.owner = "-".into();
    }
    checked.validate().map_err(|e| {
        let message = e.to_string();
        let line = field_line(text, &message);
        spec_error(format!("invalid job spec: {message}"), line, 0)
    })?;
    Ok(config)
}

/// The line of the field a model error names (`` `default_task.command` must
/// not be empty`` → the line of `command:`), or 0.
fn field_line(text: &str, message: &str) -> usize {
    let Some(field) = message.split('`').nth(1) else { return 0 };
    let key = field.rsplit('.').next().unwrap_or(field);
    let key = key.split('[').next().unwrap_or(key);
    text.lines()
        .position(|l| l.trim_start().trim_start_matches("- ").starts_with(&format!("{key}:")))
        .map_or(0, |i| i + 1)
}

/// `POST /ui/api/jobs/validate` with a job file's text: the spec as the
/// server reads it, or a 400 naming the line.
pub(super) async fn validate_job(State(web): State<Arc<Web>>, who: Who, body: String) -> Answer<serde_json::Value> {
    let config = parse_job(&web, &who, body).await?;
    Ok(Json(
        serde_json::json!({ "ok": true, "name": config.name, "pool": config.pool, "instances": config.instance_count }),
    ))
}

/// `POST /ui/api/jobs` with a job file's text: creates the job as the
/// caller (`CreateJob`: a user only in granted pools).
pub(super) async fn create_job(
    State(web): State<Arc<Web>>,
    who: Who,
    note: Option<Extension<Arc<crate::audit::AuditNote>>>,
    body: String,
) -> Answer<pb::CreateJobResponse> {
    let config = parse_job(&web, &who, body).await?;
    let mut request =
        as_caller(pb::CreateJobRequest { spec: Some(paceline_proto::convert::job_spec_pb(&config)) }, &who);
    if let Some(Extension(note)) = note {
        // So the audit record names the job created.
        request.extensions_mut().insert(note);
    }
    let created = web.jobs.create_job(request).await?.into_inner();
    tracing::info!(job = %created.id, "job created from the web UI");
    Ok(Json(created))
}

/// The body of `scale` (the new instance count) and of `rollback` (the
/// config version to go back to).
#[derive(serde::Deserialize, Default)]
#[serde(default)]
struct ActionBody {
    instances: Option<u32>,
    version: Option<u64>,
}

/// `POST /ui/api/jobs/{id}/{action}`: `kill`, `restart`, `scale` (body
/// `{"instances": N}`: an update of the job's spec with only the count
/// changed), `rollback` (body `{"version": N}`: an update to config version
/// N's spec, which becomes a new version, as `kubectl rollout undo` does),
/// `pause`, `resume`, `abort` (its update).
pub(super) async fn job_action(
    State(web): State<Arc<Web>>,
    Path((id, action)): Path<(String, String)>,
    who: Who,
    body: axum::body::Bytes,
) -> Answer<serde_json::Value> {
    // Only `scale` reads a body; the others may send none at all.
    let body: ActionBody = if body.iter().all(u8::is_ascii_whitespace) {
        ActionBody::default()
    } else {
        serde_json::from_slice(&body)
            .map_err(|e| Failure(Status::invalid_argument(format!("body: {e} (expected {{\"instances\": 3}})"))))?
    };
    let control = || pb::UpdateControlRequest { id: id.clone() };
    let answer = match action.as_str() {
        "kill" => {
            web.jobs.kill_job(as_caller(pb::KillJobRequest { id: id.clone(), instances: vec![] }, &who)).await?;
            serde_json::json!({})
        }
        "restart" => {
            let r = pb::RestartJobRequest { id: id.clone(), instances: vec![], batch_size: 0 };
            web.jobs.restart_job(as_caller(r, &who)).await?;
            serde_json::json!({})
        }
        "scale" => {
            let instances = body
                .instances
                .ok_or_else(|| Failure(Status::invalid_argument("instances: must be set (the new count)")))?;
            let mut spec = spec_at(&web, &id, None, &who).await?;
            spec.instance_count = instances;
            update_to(&web, &id, spec, &who).await?
        }
        "rollback" => {
            let version = body
                .version
                .ok_or_else(|| Failure(Status::invalid_argument("version: must be set (the config version)")))?;
            let spec = spec_at(&web, &id, Some(version), &who).await?;
            update_to(&web, &id, spec, &who).await?
        }
        "pause" => json(web.jobs.pause_update(as_caller(control(), &who)).await?.into_inner())?,
        "resume" => json(web.jobs.resume_update(as_caller(control(), &who)).await?.into_inner())?,
        "abort" => json(web.jobs.abort_update(as_caller(control(), &who)).await?.into_inner())?,
        other => {
            return Err(Failure(Status::not_found(format!(
                "`{other}` is not a job action (kill, restart, scale, rollback, pause, resume, abort)"
            ))));
        }
    };
    tracing::info!(job = %id, %action, "job action from the web UI");
    Ok(Json(answer))
}

/// Job `id`'s spec at `version` (the desired one with `None`), read as the caller.
async fn spec_at(web: &Web, id: &str, version: Option<u64>, who: &Who) -> Result<pb::JobSpec, Failure> {
    let r = pb::GetJobRequest { id: id.to_string(), config_version: version };
    let job = web.jobs.get_job(as_caller(r, who)).await?.into_inner().job;
    job.and_then(|j| j.spec).ok_or_else(|| Failure(Status::not_found("job has no spec")))
}

/// A rolling update of job `id` to `spec`, as the caller.
async fn update_to(web: &Web, id: &str, spec: pb::JobSpec, who: &Who) -> Result<serde_json::Value, Failure> {
    let r = pb::UpdateJobRequest { id: id.to_string(), spec: Some(spec), update: None, dry_run: false };
    json(web.jobs.update_job(as_caller(r, who)).await?.into_inner())
}

fn json<T: serde::Serialize>(v: T) -> Result<serde_json::Value, Failure> {
    serde_json::to_value(v).map_err(|e| Failure(Status::internal(e.to_string())))
}

fn instance(raw: &str) -> Result<u32, Failure> {
    raw.parse().map_err(|_| Failure(Status::invalid_argument(format!("instance: `{raw}` is not a number"))))
}

/// `GET /ui/api/tasks/{id}/{instance}`: `{"task": Task, "events": [TaskEvent]}`
/// (events: every run's transitions, oldest first), read as the caller: 403
/// for another team's task (decision 0059).
pub(super) async fn task(
    State(web): State<Arc<Web>>,
    Path((id, raw)): Path<(String, String)>,
    who: Who,
) -> Answer<serde_json::Value> {
    let task_ref = pb::TaskRef { job_id: id, instance: instance(&raw)? };
    let task = web.tasks.get_task(as_caller(pb::GetTaskRequest { task: Some(task_ref.clone()) }, &who)).await?;
    let events =
        web.tasks.task_events(as_caller(pb::TaskEventsRequest { task: Some(task_ref), limit: 0 }, &who)).await?;
    Ok(Json(serde_json::json!({ "task": task.into_inner().task, "events": events.into_inner().events })))
}

/// `POST /ui/api/tasks/{id}/{instance}/{kill|restart}`.
pub(super) async fn task_action(
    State(web): State<Arc<Web>>,
    Path((id, raw, action)): Path<(String, String, String)>,
    who: Who,
) -> Answer<serde_json::Value> {
    let task_ref = pb::TaskRef { job_id: id, instance: instance(&raw)? };
    match action.as_str() {
        "kill" => drop(web.tasks.kill_task(as_caller(task_ref, &who)).await?),
        "restart" => drop(web.tasks.restart_task(as_caller(task_ref, &who)).await?),
        other => return Err(Failure(Status::not_found(format!("`{other}` is not a task action (kill, restart)")))),
    }
    Ok(Json(serde_json::json!({})))
}

/// `POST /ui/api/hosts/{name}/{drain|down|up}`: the host after the change
/// (an operator's; the role table refuses a user before this runs).
pub(super) async fn host_action(
    State(web): State<Arc<Web>>,
    Path((name, action)): Path<(String, String)>,
    who: Who,
) -> Answer<pb::DrainHostResponse> {
    let host = pb::HostRef { hostname: name.clone() };
    let answer = match action.as_str() {
        "drain" => {
            let r = pb::DrainHostRequest { hostname: name.clone(), then_down: false };
            web.hosts.drain_host(as_caller(r, &who)).await?
        }
        "down" => web.hosts.down_host(as_caller(host, &who)).await?,
        "up" => web.hosts.up_host(as_caller(host, &who)).await?,
        other => return Err(Failure(Status::not_found(format!("`{other}` is not a host action (drain, down, up)")))),
    };
    tracing::info!(host = %name, %action, "host action from the web UI");
    Ok(Json(answer.into_inner()))
}

/// `{"slot": "placement/batch", "id": "spread@9", "stop": false}`.
#[derive(serde::Deserialize)]
pub(super) struct PluginBody {
    slot: String,
    #[serde(default)]
    id: String,
    #[serde(default)]
    stop: bool,
}

type PluginJson = Result<Json<PluginBody>, axum::extract::rejection::JsonRejection>;

fn plugin_body(body: PluginJson) -> Result<PluginBody, Failure> {
    body.map(|Json(b)| b).map_err(|e| {
        Failure(Status::invalid_argument(format!(
            "body: {e} (expected {{\"slot\": \"placement/batch\", \"id\": \"spread@9\"}})"
        )))
    })
}

/// `POST /ui/api/plugins/activate` `{"slot", "id"}`: the slot after.
pub(super) async fn activate(State(web): State<Arc<Web>>, who: Who, body: PluginJson) -> Answer<pb::PluginSlot> {
    let b = plugin_body(body)?;
    let slot = web.plugins.activate_plugin(as_caller(pb::PluginRef { slot: b.slot, id: b.id }, &who)).await?;
    Ok(Json(slot.into_inner()))
}

/// `POST /ui/api/plugins/shadow` `{"slot", "id"}` (or `"stop": true`): the
/// shadow report (compared, differed, sample disagreements).
pub(super) async fn shadow(
    State(web): State<Arc<Web>>,
    who: Who,
    body: PluginJson,
) -> Answer<pb::ShadowPluginResponse> {
    let b = plugin_body(body)?;
    let r = pb::ShadowPluginRequest { plugin: Some(pb::PluginRef { slot: b.slot, id: b.id }), stop: b.stop };
    Ok(Json(web.plugins.shadow_plugin(as_caller(r, &who)).await?.into_inner()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_job(text: &str) -> Result<JobConfig, Failure> {
        check_job(text, crate::jobfile::parse(text))
    }

    #[test]
    fn a_deeply_nested_job_file_is_refused_naming_the_limit() {
        let text = format!("name: a\nlabels: {}", "[".repeat(200_000));
        let Err(Failure(status)) = parse_job(&text) else { panic!("refused") };
        assert_eq!(status.code(), tonic::Code::InvalidArgument);
        assert!(status.message().contains("nests deeper than 64 levels"), "{}", status.message());
        let detail: serde_json::Value = serde_json::from_slice(status.details()).expect("detail");
        assert_eq!(detail["line"], 2, "{detail}");
    }

    #[test]
    fn a_bad_job_file_points_at_its_line() {
        let text = "name: a\npool: /default\nkind: batch\ninstance_count: 1\ndefault_task:\n  command: \"\"\n  resources: {cpu_millis: 100, memory_mib: 32, disk_mib: 1, gpu_milli: 0, ports: 0}\n";
        let Err(Failure(status)) = parse_job(text) else { panic!("an empty command is refused") };
        assert_eq!(status.code(), tonic::Code::InvalidArgument);
        assert!(status.message().contains("command"), "{}", status.message());
        let detail: serde_json::Value = serde_json::from_slice(status.details()).expect("detail");
        assert_eq!(detail["line"], 6, "the line of `command:`");
        let Err(Failure(status)) = parse_job("name: a\nkind: [oops\n") else { panic!("bad YAML") };
        assert!(status.message().starts_with("invalid job spec"), "{}", status.message());
        let detail: serde_json::Value = serde_json::from_slice(status.details()).expect("detail");
        assert!(detail["line"].as_u64().is_some_and(|l| l >= 2), "{detail}");
    }
}

/// The upload route's parameters: `DeployPluginRequest.Meta`'s.
#[derive(serde::Deserialize, Default)]
#[serde(default)]
pub(super) struct DeployParams {
    slot: String,
    name: String,
    version: String,
    skip_self_test: bool,
}

/// `POST /ui/api/plugins/deploy?slot=&name=&version=` with the component's
/// bytes as the body (`paceline plugin deploy` from a browser's file
/// picker): `DeployPluginResponse`. The body may be as large as the
/// runtime's upload limit, no larger.
pub(super) async fn deploy(
    State(web): State<Arc<Web>>,
    params: Result<axum::extract::Query<DeployParams>, axum::extract::rejection::QueryRejection>,
    body: axum::body::Bytes,
) -> Answer<pb::DeployPluginResponse> {
    let axum::extract::Query(p) = params.map_err(|e| Failure(Status::invalid_argument(format!("query: {e}"))))?;
    for (field, value) in [("slot", &p.slot), ("name", &p.name), ("version", &p.version)] {
        crate::status::required(field, value)?;
    }
    let meta = pb::deploy_plugin_request::Meta {
        slot: p.slot,
        name: p.name,
        version: p.version,
        size: body.len() as u64,
        skip_self_test: p.skip_self_test,
        deadline_ms: 0,
        candidates: String::new(),
    };
    Ok(Json(web.plugins.deploy_bytes(meta, body.to_vec()).await?))
}

//! Who is calling, and what they may do.
//!
//! **Authentication** is by bearer token (`authorization: Bearer <token>`).
//! The server knows principals from a tokens file ([`Auth::load`]) that
//! holds each token's SHA-256, never the token itself, so the file can be
//! read by more people than the tokens it admits. Without a tokens file the
//! API is open: every caller acts as the built-in `anonymous` admin. That is
//! `paceline dev`'s default; a server reachable by others should have one.
//!
//! **Authorization** has two levels:
//! - by role, per method, in one table ([`requirement`]), enforced for every
//!   call by [`AuthLayer`] before any service sees the request: reads need
//!   any principal; validating a plugin needs `author`; hosts and plugins
//!   need `operator`; pools need `admin`; job and task changes, task logs
//!   and events need any role, and then
//! - by pool, in the job and task handlers ([`Principal::check_pool`],
//!   [`Principal::check_read_pool`]): a `user` may change jobs, and read
//!   their tasks' logs and events, only where the job's pool is inside one
//!   granted to them (a grant of `/a` covers `/a` and `/a/b`, not `/ab`);
//!   `operator` and `admin` may do so in every pool.
//!
//! A method the table does not know needs `admin`, so a service added later
//! is closed until someone decides who may call it. Health and reflection
//! stay open: load balancers and `grpcurl` use them before they have a token.

use std::collections::HashMap;
use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use sha2::{Digest, Sha256};
use tonic::Status;

/// A principal's role. Each role may do everything the one before it may.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Reads jobs, pools, hosts and plugins; changes jobs and tasks, and
    /// reads their logs and events, in granted pools.
    User,
    /// A user who may also validate plugins (`ValidatePlugin` compiles and
    /// runs untrusted Wasm on the server's shared runtime, so not everyone
    /// may; it is also rate-limited per principal).
    Author,
    /// A user in every pool (and an author), who also drains hosts and deploys, activates,
    /// rolls back and shadows plugins.
    Operator,
    /// An operator who also creates, changes and deletes pools.
    Admin,
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Role::User => "user",
            Role::Author => "author",
            Role::Operator => "operator",
            Role::Admin => "admin",
        })
    }
}

/// What a method needs, by role ([`requirement`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Requirement {
    /// Nothing: health checks and reflection.
    Open,
    /// Any principal: reads, streams of logs and changes, plugin validation.
    Read,
    /// Any role here; the handler then checks the job's pool.
    JobsInPool,
    /// Any role here; the handler then checks that the caller may read the
    /// job's pool (task logs and events, which may hold what a team would
    /// not show another). A read: not audited.
    ReadInPool,
    /// At least this role.
    AtLeast(Role),
}

/// A caller the server knows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Principal {
    /// Name used in logs and errors.
    pub name: String,
    /// Role.
    pub role: Role,
    /// Pools (with their subtrees) whose jobs a `user` may change.
    pub pools: Vec<String>,
}

impl Principal {
    /// The principal of an open API (no tokens file).
    pub fn anonymous() -> Principal {
        Principal { name: "anonymous".into(), role: Role::Admin, pools: vec!["/".into()] }
    }

    /// Whether the principal may change jobs in `pool`.
    pub fn may_change_jobs_in(&self, pool: &str) -> bool {
        self.role >= Role::Operator || self.pools.iter().any(|grant| pool_within(pool, grant))
    }

    /// Whether the principal may read the logs and events of jobs in `pool`:
    /// the same pools it may change (its team's), every pool from `operator` up.
    pub fn may_read_details_in(&self, pool: &str) -> bool {
        self.may_change_jobs_in(pool)
    }

    /// [`Principal::may_read_details_in`] as a gRPC answer.
    pub fn check_read_pool(&self, pool: &str) -> Result<(), Status> {
        if self.may_read_details_in(pool) { Ok(()) } else { Err(self.refusal("read task logs or events of", pool)) }
    }

    /// PERMISSION_DENIED: this principal may not `what` jobs in `pool`.
    fn refusal(&self, what: &str, pool: &str) -> Status {
        Status::permission_denied(format!(
            "{} (role {}) may not {what} jobs in pool {pool}; granted: {}",
            self.name,
            self.role,
            if self.pools.is_empty() { "none".to_string() } else { self.pools.join(", ") }
        ))
    }

    /// [`Principal::may_change_jobs_in`] as a gRPC answer.
    pub fn check_pool(&self, pool: &str) -> Result<(), Status> {
        if self.may_change_jobs_in(pool) { Ok(()) } else { Err(self.refusal("change", pool)) }
    }
}

/// Whether `pool` is `grant` or below it (`/a/b` is within `/a`; `/ab` is not).
pub fn pool_within(pool: &str, grant: &str) -> bool {
    let grant = grant.trim_end_matches('/');
    grant.is_empty() || pool == grant || pool.strip_prefix(grant).is_some_and(|rest| rest.starts_with('/'))
}

/// What the method at a request path needs. Paths are gRPC's
/// `/package.Service/Method`; the web UI's JSON routes are `/ui/api/...`
/// (their method matters: `POST` changes, `GET` reads).
pub fn requirement(http_method: &http::Method, path: &str) -> Requirement {
    if path.starts_with("/grpc.health.") || path.starts_with("/grpc.reflection.") {
        return Requirement::Open;
    }
    if let Some(route) = path.strip_prefix("/ui/api/") {
        return match (http_method == http::Method::GET, route) {
            (true, _) => Requirement::Read,
            // Checking a job file changes nothing.
            (false, "jobs/validate") => Requirement::Read,
            // Jobs and tasks: any role here, then the job's pool in the service.
            (false, r) if r == "jobs" || r.starts_with("jobs/") || r.starts_with("tasks/") => Requirement::JobsInPool,
            (false, r) if r.starts_with("plugins/") || r.starts_with("hosts/") => Requirement::AtLeast(Role::Operator),
            _ => Requirement::AtLeast(Role::Admin),
        };
    }
    if path == "/metrics" {
        // Prometheus metrics (served when the server adds them to the port):
        // figures about every pool and plugin, so a reader's, not open.
        return Requirement::Read;
    }
    if path == "/ui" || path.starts_with("/ui/") || path == "/" || path == "/favicon.ico" {
        // The web UI's page and assets hold no data; its JSON routes do.
        // Browsers ask for /favicon.ico on every page load.
        return Requirement::Open;
    }
    let Some((service, method)) = path.trim_start_matches('/').split_once('/') else {
        return Requirement::AtLeast(Role::Admin);
    };
    let read = |m: &str| ["Get", "List", "Query", "Watch"].iter().any(|p| m.starts_with(p));
    let details = |m: &str| m == "TaskLogs" || m == "TaskEvents" || m == "JobEvents";
    match service {
        "paceline.v1.JobService" | "paceline.v1.TaskService" if details(method) => Requirement::ReadInPool,
        "paceline.v1.JobService" | "paceline.v1.TaskService" if read(method) => Requirement::Read,
        "paceline.v1.JobService" | "paceline.v1.TaskService" => Requirement::JobsInPool,
        "paceline.v1.WatchService" => Requirement::Read,
        // Secrets: the handler checks the pool named in the request
        // (decision 0032); listing shows names only, but only to the team.
        "paceline.v1.SecretService" if read(method) => Requirement::ReadInPool,
        "paceline.v1.SecretService" => Requirement::JobsInPool,
        // Users read only their own records: the handler narrows the query.
        "paceline.v1.AuditService" if read(method) => Requirement::Read,
        "paceline.v1.PoolService" if read(method) => Requirement::Read,
        "paceline.v1.PoolService" => Requirement::AtLeast(Role::Admin),
        "paceline.v1.PluginService" if method == "ValidatePlugin" => Requirement::AtLeast(Role::Author),
        "paceline.v1.HostService" | "paceline.v1.PluginService" if read(method) => Requirement::Read,
        "paceline.v1.HostService" | "paceline.v1.PluginService" => Requirement::AtLeast(Role::Operator),
        // A snapshot holds every job's spec and every plugin: admins only.
        "paceline.v1.OperatorService" => Requirement::AtLeast(Role::Admin),
        _ => Requirement::AtLeast(Role::Admin),
    }
}

/// A tokens file that could not be used.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// The file could not be read.
    #[error("tokens file {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not valid YAML of the expected shape.
    #[error("tokens file: {0}")]
    Parse(String),
    /// An entry is wrong; the message names it (`principals[2].token_sha256`).
    #[error("tokens file: {0}")]
    Invalid(String),
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct TokensFile {
    /// Format version; only 1 exists.
    version: u32,
    #[serde(default)]
    principals: Vec<PrincipalEntry>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct PrincipalEntry {
    name: String,
    role: Role,
    #[serde(default)]
    pools: Vec<String>,
    token_sha256: String,
}

/// The server's principals, by token hash. Cheap to share (`Arc`).
#[derive(Clone, Debug)]
pub struct Auth {
    by_hash: Option<HashMap<[u8; 32], Arc<Principal>>>,
    anonymous: Arc<Principal>,
}

impl Auth {
    /// An open API: every caller is [`Principal::anonymous`].
    pub fn open() -> Auth {
        Auth { by_hash: None, anonymous: Arc::new(Principal::anonymous()) }
    }

    /// Whether callers must present a token.
    pub fn is_enforced(&self) -> bool {
        self.by_hash.is_some()
    }

    /// Reads a tokens file (see `docs/operations.md`, "Authentication").
    pub fn load(path: &Path) -> Result<Auth, AuthError> {
        let text = std::fs::read_to_string(path)
            .map_err(|source| AuthError::Read { path: path.display().to_string(), source })?;
        Auth::from_yaml(&text)
    }

    /// Parses a tokens file's text. Every entry is checked; the error names
    /// the first bad one. Duplicate names or token hashes are refused.
    pub fn from_yaml(text: &str) -> Result<Auth, AuthError> {
        let file: TokensFile = serde_yaml::from_str(text).map_err(|e| AuthError::Parse(e.to_string()))?;
        if file.version != 1 {
            return Err(AuthError::Invalid(format!("version: {} is not supported (only 1)", file.version)));
        }
        let mut by_hash = HashMap::new();
        let mut names = std::collections::HashSet::new();
        for (i, p) in file.principals.into_iter().enumerate() {
            let at = format!("principals[{i}]");
            if p.name.trim().is_empty() {
                return Err(AuthError::Invalid(format!("{at}.name: must not be empty")));
            }
            if !names.insert(p.name.clone()) {
                return Err(AuthError::Invalid(format!("{at}.name: `{}` appears twice", p.name)));
            }
            let hash =
                parse_hash(&p.token_sha256).map_err(|e| AuthError::Invalid(format!("{at}.token_sha256: {e}")))?;
            for (j, pool) in p.pools.iter().enumerate() {
                if !pool.starts_with('/') {
                    return Err(AuthError::Invalid(format!(
                        "{at}.pools[{j}]: `{pool}` is not a pool path (it starts with /)"
                    )));
                }
            }
            let principal = Arc::new(Principal { name: p.name, role: p.role, pools: p.pools });
            if by_hash.insert(hash, principal).is_some() {
                return Err(AuthError::Invalid(format!("{at}.token_sha256: the same token is given twice")));
            }
        }
        Ok(Auth { by_hash: Some(by_hash), anonymous: Arc::new(Principal::anonymous()) })
    }

    /// The principal behind a request's `authorization` header.
    pub fn authenticate(&self, headers: &http::HeaderMap) -> Result<Arc<Principal>, Status> {
        let Some(by_hash) = &self.by_hash else {
            return Ok(self.anonymous.clone());
        };
        let value = headers.get(http::header::AUTHORIZATION).ok_or_else(|| {
            Status::unauthenticated(
                "no token: send `authorization: Bearer <token>` (paceline --token or PACELINE_TOKEN)",
            )
        })?;
        let token = value
            .to_str()
            .ok()
            .and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")))
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .ok_or_else(|| Status::unauthenticated("authorization: expected `Bearer <token>`"))?;
        by_hash
            .get(&token_hash(token))
            .cloned()
            .ok_or_else(|| Status::unauthenticated("the token is not known to this server"))
    }

    /// Authenticates and checks the role-level requirement of a method.
    pub fn admit(
        &self,
        method: &http::Method,
        path: &str,
        headers: &http::HeaderMap,
    ) -> Result<Option<Arc<Principal>>, Status> {
        let need = requirement(method, path);
        if need == Requirement::Open {
            return Ok(None);
        }
        let who = self.authenticate(headers)?;
        if let Requirement::AtLeast(role) = need
            && who.role < role
        {
            return Err(Status::permission_denied(format!(
                "{path} needs role {role} or above; {} has role {}",
                who.name, who.role
            )));
        }
        Ok(Some(who))
    }
}

/// SHA-256 of a token, as the tokens file stores it.
pub fn token_hash(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// [`token_hash`] in lowercase hex.
pub fn token_hash_hex(token: &str) -> String {
    token_hash(token).iter().map(|b| format!("{b:02x}")).collect()
}

fn parse_hash(hex: &str) -> Result<[u8; 32], String> {
    let hex = hex.trim();
    if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err("expected 64 hex digits (the token's SHA-256; `paceline auth token` prints it)".into());
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).map_err(|e| e.to_string())?;
    }
    Ok(out)
}

/// The principal [`AuthLayer`] attached to a request. A request without one
/// did not pass the layer and is refused, so a wiring mistake closes the
/// API instead of opening it.
pub fn principal<T>(request: &tonic::Request<T>) -> Result<Arc<Principal>, Status> {
    request
        .extensions()
        .get::<Arc<Principal>>()
        .cloned()
        .ok_or_else(|| Status::permission_denied("no authenticated principal on this request"))
}

/// Refuses the request's caller unless they may change jobs in `pool`.
pub fn check_pool<T>(request: &tonic::Request<T>, pool: &str) -> Result<(), Status> {
    principal(request)?.check_pool(pool)
}

/// Refuses the request's caller unless they may change job `id` (its pool
/// is looked up only for callers whose role does not cover every pool).
pub async fn check_job<T>(
    request: &tonic::Request<T>,
    jobs: &paceline_jobmgr::JobManager,
    id: &str,
) -> Result<(), Status> {
    check_job_pool(request, jobs, id, Principal::check_pool).await
}

/// Refuses the request's caller unless they may read the logs and events of
/// job `id` ([`Principal::may_read_details_in`]).
pub async fn check_job_read<T>(
    request: &tonic::Request<T>,
    jobs: &paceline_jobmgr::JobManager,
    id: &str,
) -> Result<(), Status> {
    check_job_pool(request, jobs, id, Principal::check_read_pool).await
}

/// `check` on job `id`'s pool, looked up only for callers whose role does
/// not cover every pool.
async fn check_job_pool<T>(
    request: &tonic::Request<T>,
    jobs: &paceline_jobmgr::JobManager,
    id: &str,
    check: fn(&Principal, &str) -> Result<(), Status>,
) -> Result<(), Status> {
    let who = principal(request)?;
    if who.role >= Role::Operator {
        return Ok(());
    }
    let pool = jobs.pool_of(id).await.map_err(|e| crate::status::job(e, ""))?;
    check(&who, &pool)
}

/// Tower layer that admits each request ([`Auth::admit`]) before the
/// services see it and attaches its principal; tells the observer, if any,
/// of every call and its answer (refusals included); and hands the auditor,
/// if any, a record of every mutating call and every refused one
/// ([`crate::audit`]).
///
/// Before any of that, [`crate::browser::BrowserPolicy::check`] refuses what
/// a page of another site could have sent, and every `/ui` answer gets
/// [`crate::browser::harden`]'s headers.
#[derive(Clone, Debug)]
pub struct AuthLayer(
    pub Arc<Auth>,
    pub Option<Arc<dyn crate::CallObserver>>,
    pub Option<crate::audit::Auditor>,
    pub Arc<crate::browser::BrowserPolicy>,
);

impl<S> tower::Layer<S> for AuthLayer {
    type Service = AuthService<S>;

    fn layer(&self, inner: S) -> AuthService<S> {
        AuthService {
            auth: self.0.clone(),
            observer: self.1.clone(),
            auditor: self.2.clone(),
            browser: self.3.clone(),
            inner,
        }
    }
}

/// The service [`AuthLayer`] makes.
#[derive(Clone, Debug)]
pub struct AuthService<S> {
    auth: Arc<Auth>,
    observer: Option<Arc<dyn crate::CallObserver>>,
    auditor: Option<crate::audit::Auditor>,
    browser: Arc<crate::browser::BrowserPolicy>,
    inner: S,
}

/// The method label of a request path, from a bounded set: a gRPC method
/// (`/package.Service/Method`) of this API, a web UI route without its ids,
/// `/metrics`, or `other` (anything else a client may send, so unknown
/// paths cannot grow the label set).
pub fn method_label(path: &str) -> String {
    if let Some(route) = path.strip_prefix("/ui/api/") {
        let first = route.split('/').next().unwrap_or_default();
        return match first {
            "jobs" | "tasks" | "pools" | "hosts" | "plugins" | "audit" | "events" | "whoami" | "sim-reports" => {
                let rest = if route.len() > first.len() { "/…" } else { "" };
                format!("/ui/api/{first}{rest}")
            }
            _ => "other".into(),
        };
    }
    if path == "/metrics" {
        return path.into();
    }
    if (path.starts_with("/paceline.") || path.starts_with("/grpc."))
        && path.len() <= 96
        && path.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '/' | '_'))
    {
        return path.into();
    }
    if path == "/ui" || path.starts_with("/ui/") || path == "/" || path == "/favicon.ico" {
        return "/ui".into();
    }
    "other".into()
}

/// The answer's code for [`crate::CallObserver`]: the gRPC status when the
/// answer's head carries one (a refusal or an immediate error), else the
/// HTTP status (`200` for a gRPC call whose status comes in the trailers).
fn answer_code(response: &http::Response<tonic::body::Body>) -> String {
    match Status::from_header_map(response.headers()) {
        Some(status) => format!("{:?}", status.code()),
        None => response.status().as_u16().to_string(),
    }
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S> tower::Service<http::Request<tonic::body::Body>> for AuthService<S>
where
    S: tower::Service<http::Request<tonic::body::Body>, Response = http::Response<tonic::body::Body>>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = S::Error;
    type Future = BoxFuture<Result<Self::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: http::Request<tonic::body::Body>) -> Self::Future {
        let path = request.uri().path().to_owned();
        let started = std::time::Instant::now();
        let observer = self.observer.clone();
        let observe = move |path: &str, response: &http::Response<tonic::body::Body>| {
            if let Some(o) = &observer {
                o.observe(&method_label(path), &answer_code(response), started.elapsed());
            }
        };
        // What a page of another site could have sent is refused before
        // any token is looked at: tokens do not stop a browser that holds none.
        let admitted = self
            .browser
            .check(
                request.method(),
                &path,
                request.version(),
                request.uri().authority().map(|a| a.as_str()),
                request.headers(),
            )
            .and_then(|()| self.auth.admit(request.method(), &path, request.headers()));
        let ui = crate::browser::is_ui_path(&path);
        match admitted {
            Ok(who) => {
                let caller = who.as_ref().map(|w| w.name.clone()).unwrap_or_default();
                let audit = match &self.auditor {
                    Some(auditor) if crate::audit::is_audited(request.method(), &path) => {
                        Some(crate::audit::layer::Pending::start(auditor.clone(), &mut request, who.clone()))
                    }
                    _ => None,
                };
                if let Some(who) = who {
                    request.extensions_mut().insert(who);
                }
                // The clone took `poll_ready`'s place; swap so the ready one serves.
                let clone = self.inner.clone();
                let mut inner = std::mem::replace(&mut self.inner, clone);
                Box::pin(async move {
                    let mut response = inner.call(request).await?;
                    if ui {
                        crate::browser::harden(response.headers_mut());
                    }
                    // A call answered with an error status at once (every refusal:
                    // a bad field, an unknown job, a pool the caller may not use).
                    if let Some(status) = Status::from_header_map(response.headers())
                        && status.code() != tonic::Code::Ok
                    {
                        log_refusal(&path, &caller, &status);
                    }
                    observe(&path, &response);
                    if let Some(audit) = audit {
                        audit.finish(&response);
                    }
                    Ok(response)
                })
            }
            Err(status) => {
                log_refusal(&path, "", &status);
                if let Some(auditor) = &self.auditor
                    && crate::audit::is_public(&path)
                {
                    // Permission denied: the caller is known, only not allowed.
                    let who = self.auth.authenticate(request.headers()).ok();
                    crate::audit::layer::refused(auditor, &request, who.as_deref(), &status);
                }
                // Plain HTTP clients (the page, a Prometheus scraping
                // /metrics) read the HTTP status; gRPC clients the grpc-status.
                let plain_http = ui || path == "/metrics" || path == "/favicon.ico";
                let mut response = if plain_http { json_refusal(&status) } else { status.into_http() };
                if ui {
                    crate::browser::harden(response.headers_mut());
                }
                observe(&path, &response);
                if !plain_http {
                    return Box::pin(async move { Ok(response) });
                }
                // Answered before the body was read, an HTTP/2 request still
                // uploading ends in a stream reset the client reports instead
                // of this 401/403 (curl: "stream was not closed cleanly").
                // So the body is read first, within a bound; past it the
                // answer goes out all the same.
                let body = request.into_body();
                Box::pin(async move {
                    drain_refused(body).await;
                    Ok(response)
                })
            }
        }
    }
}

/// How much of a refused plain-HTTP request's body is read before the
/// answer (a job file or a component upload fits), and for how long.
const REFUSED_BODY_DRAIN_BYTES: usize = 64 << 20;
const REFUSED_BODY_DRAIN_TIME: std::time::Duration = std::time::Duration::from_secs(10);

/// Reads and drops a refused request's body, up to the bounds above.
async fn drain_refused(mut body: tonic::body::Body) {
    use http_body_util::BodyExt;
    let read = async {
        let mut seen = 0usize;
        while let Some(Ok(frame)) = body.frame().await {
            seen += frame.data_ref().map_or(0, |d| d.len());
            if seen > REFUSED_BODY_DRAIN_BYTES {
                break;
            }
        }
    };
    let _ = tokio::time::timeout(REFUSED_BODY_DRAIN_TIME, read).await;
}

/// One line per refused call at the default level: what was called, by
/// whom, and the answer. A failure of the server's own (internal, unknown,
/// data loss) is a warning.
fn log_refusal(path: &str, caller: &str, status: &Status) {
    let code = status.code();
    // Not `message`: that name is the event's own text in tracing.
    let answer = status.message();
    match code {
        tonic::Code::Internal | tonic::Code::Unknown | tonic::Code::DataLoss => {
            tracing::warn!(call = %path, caller = %caller, ?code, %answer, "request failed")
        }
        _ => tracing::info!(call = %path, caller = %caller, ?code, %answer, "request refused"),
    }
}

/// A refusal on the web UI's JSON routes: HTTP 401/403 with `{"error": ...}`.
fn json_refusal(status: &Status) -> http::Response<tonic::body::Body> {
    let code = if status.code() == tonic::Code::Unauthenticated {
        http::StatusCode::UNAUTHORIZED
    } else {
        http::StatusCode::FORBIDDEN
    };
    let body = serde_json::json!({ "error": status.message() }).to_string();
    let mut response = http::Response::new(tonic::body::Body::new(http_body_util::Full::new(bytes::Bytes::from(body))));
    *response.status_mut() = code;
    response.headers_mut().insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/json"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn method_labels_come_from_a_bounded_set() {
        for (path, label) in [
            ("/paceline.v1.JobService/CreateJob", "/paceline.v1.JobService/CreateJob"),
            ("/ui/api/jobs", "/ui/api/jobs"),
            ("/ui/api/jobs/job-123", "/ui/api/jobs/…"),
            ("/ui/api/secrets", "other"),
            ("/ui/app.js", "/ui"),
            ("/favicon.ico", "/ui"),
            ("/metrics", "/metrics"),
            ("/wp-admin/install.php", "other"),
            ("/paceline.v1.JobService/<script>", "other"),
        ] {
            assert_eq!(method_label(path), label, "{path}");
        }
    }

    #[test]
    fn metrics_need_a_reader() {
        assert_eq!(requirement(&http::Method::GET, "/metrics"), Requirement::Read);
    }

    fn headers(token: Option<&str>) -> http::HeaderMap {
        let mut h = http::HeaderMap::new();
        if let Some(t) = token {
            h.insert(http::header::AUTHORIZATION, format!("Bearer {t}").parse().expect("header"));
        }
        h
    }

    fn auth() -> Auth {
        let yaml = format!(
            "version: 1\nprincipals:\n  - {{name: alice, role: user, pools: [/team-a], token_sha256: {}}}\n  - {{name: bob, role: author, pools: [/team-b], token_sha256: {}}}\n  - {{name: ops, role: operator, token_sha256: {}}}\n  - {{name: root, role: admin, token_sha256: {}}}\n",
            token_hash_hex("alice-token"),
            token_hash_hex("bob-token"),
            token_hash_hex("ops-token"),
            token_hash_hex("root-token")
        );
        Auth::from_yaml(&yaml).expect("valid file")
    }

    /// Every rpc of `proto/paceline/v1`, with what it needs. A new rpc fails
    /// this test until it is given a line here, so nobody adds a method
    /// without deciding who may call it.
    #[test]
    fn every_rpc_in_the_protos_has_the_intended_requirement() {
        use Requirement::*;
        let expected: &[(&str, Requirement)] = &[
            ("AuditService/ListAuditRecords", Read),
            ("SecretService/PutSecret", JobsInPool),
            ("SecretService/ListSecrets", ReadInPool),
            ("SecretService/DeleteSecret", JobsInPool),
            ("HostService/ListHosts", Read),
            ("HostService/GetHost", Read),
            ("HostService/DrainHost", AtLeast(Role::Operator)),
            ("HostService/DownHost", AtLeast(Role::Operator)),
            ("HostService/UpHost", AtLeast(Role::Operator)),
            ("JobService/CreateJob", JobsInPool),
            ("JobService/GetJob", Read),
            ("JobService/QueryJobs", Read),
            ("JobService/UpdateJob", JobsInPool),
            ("JobService/KillJob", JobsInPool),
            ("JobService/RestartJob", JobsInPool),
            ("JobService/DeleteJob", JobsInPool),
            ("JobService/PauseUpdate", JobsInPool),
            ("JobService/ResumeUpdate", JobsInPool),
            ("JobService/AbortUpdate", JobsInPool),
            ("JobService/AddInstances", JobsInPool),
            ("JobService/RemoveInstances", JobsInPool),
            ("JobService/RenewOwnerLease", JobsInPool),
            ("PluginService/DeployPlugin", AtLeast(Role::Operator)),
            ("PluginService/ValidatePlugin", AtLeast(Role::Author)),
            ("PluginService/ListPlugins", Read),
            ("PluginService/ActivatePlugin", AtLeast(Role::Operator)),
            ("PluginService/RollbackPlugin", AtLeast(Role::Operator)),
            ("PluginService/ShadowPlugin", AtLeast(Role::Operator)),
            ("PoolService/CreatePool", AtLeast(Role::Admin)),
            ("PoolService/GetPool", Read),
            ("PoolService/UpdatePool", AtLeast(Role::Admin)),
            ("PoolService/DeletePool", AtLeast(Role::Admin)),
            ("PoolService/ListPools", Read),
            ("TaskService/ListTasks", Read),
            ("TaskService/GetTask", Read),
            ("TaskService/KillTask", JobsInPool),
            ("TaskService/RestartTask", JobsInPool),
            ("TaskService/TaskLogs", ReadInPool),
            ("TaskService/TaskEvents", ReadInPool),
            ("JobService/JobEvents", ReadInPool),
            ("WatchService/Watch", Read),
            ("OperatorService/Snapshot", AtLeast(Role::Admin)),
        ];
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../proto/paceline/v1");
        let mut found = Vec::new();
        for entry in std::fs::read_dir(&dir).expect("proto dir") {
            let text = std::fs::read_to_string(entry.expect("entry").path()).expect("proto file");
            let mut service = "";
            for line in text.lines().map(str::trim) {
                if let Some(rest) = line.strip_prefix("service ") {
                    service = rest.split_whitespace().next().unwrap_or_default();
                } else if let Some(rest) = line.strip_prefix("rpc ") {
                    let method = rest.split('(').next().unwrap_or_default().trim();
                    found.push(format!("{service}/{method}"));
                }
            }
        }
        found.sort();
        let mut listed: Vec<String> = expected.iter().map(|(m, _)| m.to_string()).collect();
        listed.sort();
        assert_eq!(found, listed, "the table above must list exactly the rpcs of proto/paceline/v1");
        for (method, need) in expected {
            assert_eq!(requirement(&http::Method::POST, &format!("/paceline.v1.{method}")), *need, "{method}");
        }
    }

    #[test]
    fn grants_cover_a_subtree_and_not_a_sibling_with_the_same_prefix() {
        assert!(pool_within("/a", "/a"));
        assert!(pool_within("/a/b", "/a"));
        assert!(pool_within("/a/b", "/a/"));
        assert!(!pool_within("/ab", "/a"));
        assert!(!pool_within("/b", "/a"));
        assert!(pool_within("/anything", "/"));
    }

    #[test]
    fn each_role_gets_what_the_table_says() {
        let a = auth();
        let post = http::Method::POST;
        let call =
            |token: &str, path: &str| a.admit(&post, path, &headers(Some(token))).map(|p| p.map(|p| p.name.clone()));
        // Reads: everyone.
        assert_eq!(call("alice-token", "/paceline.v1.JobService/GetJob").expect("read"), Some("alice".into()));
        assert!(call("alice-token", "/paceline.v1.WatchService/Watch").is_ok());
        // Validating a plugin compiles untrusted Wasm: authors and above.
        assert_eq!(
            call("alice-token", "/paceline.v1.PluginService/ValidatePlugin").expect_err("user refused").code(),
            tonic::Code::PermissionDenied
        );
        assert!(call("bob-token", "/paceline.v1.PluginService/ValidatePlugin").is_ok());
        assert!(call("bob-token", "/paceline.v1.HostService/DrainHost").is_err());
        assert!(call("ops-token", "/paceline.v1.PluginService/ValidatePlugin").is_ok());
        // Logs and events pass the layer for users; the handler checks the pool.
        assert!(call("alice-token", "/paceline.v1.TaskService/TaskLogs").is_ok());
        // Job changes pass the layer for users; the handler checks the pool.
        assert!(call("alice-token", "/paceline.v1.JobService/CreateJob").is_ok());
        // Hosts and plugins: operator and above.
        for path in [
            "/paceline.v1.HostService/DrainHost",
            "/paceline.v1.PluginService/ActivatePlugin",
            "/paceline.v1.PluginService/DeployPlugin",
        ] {
            assert_eq!(
                call("alice-token", path).expect_err("user refused").code(),
                tonic::Code::PermissionDenied,
                "{path}"
            );
            assert!(call("ops-token", path).is_ok(), "{path}");
        }
        // Pools: admin only.
        assert_eq!(
            call("ops-token", "/paceline.v1.PoolService/CreatePool").expect_err("operator refused").code(),
            tonic::Code::PermissionDenied
        );
        assert!(call("root-token", "/paceline.v1.PoolService/DeletePool").is_ok());
        assert!(call("alice-token", "/paceline.v1.PoolService/ListPools").is_ok());
        // Unknown methods are closed to all but admin.
        assert!(call("ops-token", "/paceline.v1.NewService/DoThing").is_err());
        assert!(call("root-token", "/paceline.v1.NewService/DoThing").is_ok());
    }

    #[test]
    fn the_web_ui_actions_follow_the_same_table() {
        let a = auth();
        let post = |token: &str, path: &str| a.admit(&http::Method::POST, path, &headers(Some(token)));
        // Job and task changes pass for a user (the service checks the pool).
        for path in ["/ui/api/jobs", "/ui/api/jobs/j1/kill", "/ui/api/jobs/j1/scale", "/ui/api/tasks/j1/0/restart"] {
            assert_eq!(requirement(&http::Method::POST, path), Requirement::JobsInPool, "{path}");
            assert!(post("alice-token", path).is_ok(), "{path}");
        }
        // Checking a job file is a read, not audited.
        assert_eq!(requirement(&http::Method::POST, "/ui/api/jobs/validate"), Requirement::Read);
        // Hosts and plugins: operator and above, as on gRPC.
        for path in ["/ui/api/hosts/h1/drain", "/ui/api/plugins/activate", "/ui/api/plugins/shadow"] {
            assert_eq!(post("alice-token", path).expect_err("user refused").code(), tonic::Code::PermissionDenied);
            assert!(post("ops-token", path).is_ok(), "{path}");
        }
        // Anything else that changes: admin.
        assert!(post("ops-token", "/ui/api/pools/new").is_err());
        // The live stream and whoami need a token like every read.
        let get = |path: &str| a.admit(&http::Method::GET, path, &headers(None));
        assert_eq!(get("/ui/api/events").expect_err("no token").code(), tonic::Code::Unauthenticated);
        assert_eq!(get("/ui/api/whoami").expect_err("no token").code(), tonic::Code::Unauthenticated);
        assert_eq!(method_label("/ui/api/tasks/j1/0/logs"), "/ui/api/tasks/…");
    }

    #[test]
    fn missing_wrong_or_malformed_tokens_are_unauthenticated_and_health_stays_open() {
        let a = auth();
        let post = http::Method::POST;
        for h in [headers(None), headers(Some("nope"))] {
            let e = a.admit(&post, "/paceline.v1.JobService/GetJob", &h).expect_err("refused");
            assert_eq!(e.code(), tonic::Code::Unauthenticated);
        }
        let mut basic = http::HeaderMap::new();
        basic.insert(http::header::AUTHORIZATION, "Basic abc".parse().expect("header"));
        assert_eq!(
            a.admit(&post, "/paceline.v1.JobService/GetJob", &basic).expect_err("refused").code(),
            tonic::Code::Unauthenticated
        );
        assert_eq!(a.admit(&post, "/grpc.health.v1.Health/Check", &headers(None)).expect("open"), None);
        assert_eq!(a.admit(&http::Method::GET, "/ui/", &headers(None)).expect("open"), None);
        assert_eq!(
            a.admit(&http::Method::GET, "/ui/api/jobs", &headers(None)).expect_err("data needs a token").code(),
            tonic::Code::Unauthenticated
        );
    }

    #[test]
    fn users_change_jobs_only_in_granted_pools() {
        let a = auth();
        let alice = a.authenticate(&headers(Some("alice-token"))).expect("known");
        assert!(alice.check_pool("/team-a").is_ok());
        assert!(alice.check_pool("/team-a/batch").is_ok());
        let e = alice.check_pool("/team-b").expect_err("not granted");
        assert_eq!(e.code(), tonic::Code::PermissionDenied);
        assert!(e.message().contains("/team-b") && e.message().contains("/team-a"), "{}", e.message());
        let ops = a.authenticate(&headers(Some("ops-token"))).expect("known");
        assert!(ops.check_pool("/team-b").is_ok());
    }

    #[test]
    fn an_open_api_makes_everyone_the_anonymous_admin() {
        let a = Auth::open();
        assert!(!a.is_enforced());
        let who = a
            .admit(&http::Method::POST, "/paceline.v1.PoolService/CreatePool", &headers(None))
            .expect("open")
            .expect("principal");
        assert_eq!(who.name, "anonymous");
        assert_eq!(who.role, Role::Admin);
    }

    #[test]
    fn bad_tokens_files_name_the_entry() {
        let cases = [
            ("version: 2\n", "version"),
            ("version: 1\nprincipals:\n  - {name: a, role: user, token_sha256: abc}\n", "principals[0].token_sha256"),
            ("version: 1\nprincipals:\n  - {name: a, role: king, token_sha256: abc}\n", "role"),
            (
                &format!(
                    "version: 1\nprincipals:\n  - {{name: a, role: user, token_sha256: {h}}}\n  - {{name: b, role: user, token_sha256: {h}}}\n",
                    h = token_hash_hex("same")
                ),
                "principals[1].token_sha256",
            ),
            (
                &format!(
                    "version: 1\nprincipals:\n  - {{name: a, role: user, pools: [team], token_sha256: {}}}\n",
                    token_hash_hex("t")
                ),
                "principals[0].pools[0]",
            ),
            ("version: 1\nprincipls: []\n", "principls"),
        ];
        for (text, field) in cases {
            let e = Auth::from_yaml(text).expect_err(text).to_string();
            assert!(e.contains(field), "{e} should name {field}");
        }
    }
}

//! Who may do what: roles, the per-method table ([`requirement`]) and pool grants.

use tonic::Status;

/// A principal's role. Each role may do everything the one before it may.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Reads pools, hosts and plugins (the cluster's inventory); reads and
    /// changes jobs and tasks (specs, states, logs, events) only in granted
    /// pools.
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

    /// Whether the principal reads every pool's jobs (`operator` and up), so
    /// that lists and streams need not look at a job's pool at all.
    pub fn reads_every_pool(&self) -> bool {
        self.role >= Role::Operator
    }

    /// Whether the principal may read jobs in `pool`: their specs, states,
    /// tasks, logs and events. The same pools it may change (its team's),
    /// every pool from `operator` up. A prefix check, allocating nothing:
    /// lists and watch streams call it per job.
    pub fn may_read_jobs_in(&self, pool: &str) -> bool {
        self.may_change_jobs_in(pool)
    }

    /// [`Principal::may_read_jobs_in`] (the name from when only logs and
    /// events were limited to the team's pools).
    pub fn may_read_details_in(&self, pool: &str) -> bool {
        self.may_read_jobs_in(pool)
    }

    /// [`Principal::may_read_jobs_in`] as a gRPC answer: PERMISSION_DENIED
    /// naming the pool, as for changes (decision 0059).
    pub fn check_read_pool(&self, pool: &str) -> Result<(), Status> {
        if self.may_read_jobs_in(pool) { Ok(()) } else { Err(self.refusal("read", pool)) }
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
        // Any role here; the handlers refuse another pool's job and narrow
        // lists and streams to the pools the caller may read (decision 0059).
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

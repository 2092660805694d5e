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
//!   need `operator`; pools need `admin`; job and task reads and changes
//!   need any role, and then
//! - by pool, in the job, task and watch handlers ([`Principal::check_pool`],
//!   [`Principal::check_read_pool`], [`Principal::may_read_jobs_in`]): a
//!   `user` may read and change jobs, their tasks, logs and events, only
//!   where the job's pool is inside one granted to them (a grant of `/a`
//!   covers `/a` and `/a/b`, not `/ab`); lists and streams leave the other
//!   jobs out (decision 0059); `operator` and `admin` may do so in every pool.
//!
//! A method the table does not know needs `admin`, so a service added later
//! is closed until someone decides who may call it. Health and reflection
//! stay open: load balancers and `grpcurl` use them before they have a token.
//!
//! The parts: `policy` (roles, the method table, pool grants), `tokens`
//! (the tokens file and authentication) and `layer` (the tower layer every
//! request passes). This file holds the checks handlers call on a request.

mod layer;
mod policy;
mod tokens;

use std::sync::Arc;

use tonic::Status;

pub use layer::{AuthLayer, AuthService, method_label};
pub use policy::{Principal, Requirement, Role, pool_within, requirement};
pub use tokens::{Auth, AuthError, new_token, token_hash, token_hash_hex, tokens_file_entry};

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

/// Refuses the request's caller unless they may read job `id`: its spec,
/// tasks, logs and events ([`Principal::may_read_jobs_in`]).
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

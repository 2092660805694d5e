//! Tenants cannot read each other's jobs and tasks (security issue 44,
//! decision 0059), through the real auth layer and a real tonic server over
//! the sim provider, with a tokens file: a `user` of one pool neither gets,
//! lists, queries nor watches another pool's job or its tasks (its spec's
//! `env` values included), over gRPC and the web UI's JSON routes on the
//! same port; a user still reads its own pool's; an operator reads both.

use std::io::{Read, Write};
use std::time::Duration;

use paceline_model::job::JobKind;
use paceline_proto::v1 as pb;
use pb::job_service_client::JobServiceClient;
use pb::pool_service_client::PoolServiceClient;
use pb::task_service_client::TaskServiceClient;
use pb::watch_service_client::WatchServiceClient;
use tonic::Code;

use crate::least_privilege::Api;
use crate::support::{POOL, job};

/// The other team's pool (carol's grant in [`Api::start`]).
const OTHER: &str = "/elsewhere";
/// An env value of alice's job that nobody outside `/team` may read.
const SECRET: &str = "hunter2-of-team-a";

/// The pool `/elsewhere` (by the admin) and a job in each pool: alice's in
/// `/team` with [`SECRET`] in its env, carol's in `/elsewhere`. Returns
/// their ids.
async fn two_teams(api: &Api) -> (String, String) {
    PoolServiceClient::new(api.as_("root-token"))
        .create_pool(pb::CreatePoolRequest { path: OTHER.into(), spec: Some(pb::PoolSpec::default()) })
        .await
        .expect("pool");
    let mut theirs = job(JobKind::Batch, 2);
    theirs.name = "team-a-job".into();
    theirs.owner = "alice".into();
    theirs.default_task.env.insert("DB_PASSWORD".into(), SECRET.into());
    let a = create(api, "alice-token", &theirs).await;
    let mut mine = job(JobKind::Batch, 1);
    mine.name = "team-b-job".into();
    mine.owner = "carol".into();
    mine.pool = OTHER.into();
    let b = create(api, "carol-token", &mine).await;
    (a, b)
}

async fn create(api: &Api, token: &str, config: &paceline_model::job::JobConfig) -> String {
    let spec = Some(paceline_api::convert::job_spec_pb(config));
    JobServiceClient::new(api.as_(token))
        .create_job(pb::CreateJobRequest { spec })
        .await
        .unwrap_or_else(|e| panic!("create as {token}: {e:?}"))
        .into_inner()
        .id
}

/// Every job id of a query, page after page of `limit`; also the size of
/// each page.
async fn query_all(api: &Api, token: &str, mut q: pb::QueryJobsRequest) -> (Vec<String>, Vec<usize>) {
    let (mut ids, mut sizes) = (Vec::new(), Vec::new());
    loop {
        let page = JobServiceClient::new(api.as_(token)).query_jobs(q.clone()).await.expect("query").into_inner();
        sizes.push(page.jobs.len());
        ids.extend(page.jobs.into_iter().map(|j| j.id));
        if page.next_page_token.is_empty() {
            return (ids, sizes);
        }
        q.page_token = page.next_page_token;
    }
}

/// The job ids of every job and task event a watch from revision 1 sends
/// (the feed replays the creations) until it has been quiet for a moment.
async fn watched(api: &Api, token: &str, job_id: &str) -> Result<Vec<String>, tonic::Status> {
    let request = pb::WatchRequest { from_revision: 1, job_id: job_id.into(), kinds: vec![] };
    let stream = WatchServiceClient::new(api.as_(token)).watch(request).await?.into_inner();
    Ok(ids_of(stream).await)
}

/// The job ids of the job and task events `stream` sends until it has been
/// quiet for a moment.
async fn ids_of(mut stream: tonic::Streaming<pb::WatchEvent>) -> Vec<String> {
    let mut ids = Vec::new();
    while let Ok(Ok(Some(ev))) = tokio::time::timeout(Duration::from_millis(700), stream.message()).await {
        match ev.change {
            Some(pb::watch_event::Change::Job(j)) => ids.push(j.id),
            Some(pb::watch_event::Change::Task(t)) => ids.push(t.job_id),
            _ => {}
        }
    }
    ids
}

/// A `GET` of the web UI's route `path` with a bearer token over plain
/// HTTP/1.1: the status and the body (read for at most `read_for`, for the
/// live stream that never ends by itself).
async fn web_get(api: &Api, token: &str, path: &str, read_for: Duration) -> (u16, String) {
    let (addr, token, path) = (api.addr, token.to_string(), path.to_string());
    tokio::task::spawn_blocking(move || {
        let mut s = std::net::TcpStream::connect(addr).expect("connect");
        s.set_read_timeout(Some(read_for)).expect("timeout");
        write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n")
            .expect("request");
        let mut got = Vec::new();
        let mut buf = [0u8; 8192];
        loop {
            match s.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
        let text = String::from_utf8_lossy(&got).to_string();
        let code = text.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
        let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
        (code, body)
    })
    .await
    .expect("http")
}

fn refused_as_another_pools<T: std::fmt::Debug>(what: &str, got: Result<T, tonic::Status>) {
    let e = got.expect_err(what);
    assert_eq!(e.code(), Code::PermissionDenied, "{what}: {e:?}");
    assert!(e.message().contains("may not read jobs in pool /team"), "{what}: {}", e.message());
    assert!(!e.message().contains(SECRET), "{what}: {}", e.message());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_cannot_get_list_or_watch_another_pools_job_or_tasks_over_grpc() {
    let api = Api::start().await;
    let (a, b) = two_teams(&api).await;
    let task = |id: &str| Some(pb::TaskRef { job_id: id.into(), instance: 0 });

    // carol (/elsewhere): alice's job is refused, however it is asked for.
    let mut jobs = JobServiceClient::new(api.as_("carol-token"));
    let mut tasks = TaskServiceClient::new(api.as_("carol-token"));
    refused_as_another_pools("GetJob", jobs.get_job(pb::GetJobRequest { id: a.clone(), config_version: None }).await);
    refused_as_another_pools(
        "GetJob of a version",
        jobs.get_job(pb::GetJobRequest { id: a.clone(), config_version: Some(1) }).await,
    );
    let list = pb::ListTasksRequest { job_id: a.clone(), ..Default::default() };
    refused_as_another_pools("ListTasks", tasks.list_tasks(list).await);
    refused_as_another_pools("GetTask", tasks.get_task(pb::GetTaskRequest { task: task(&a) }).await);
    // A dry-run update would answer with a diff of the spec: refused first.
    let spec = Some(paceline_api::convert::job_spec_pb(&job(JobKind::Batch, 2)));
    let e = jobs
        .update_job(pb::UpdateJobRequest { id: a.clone(), spec, update: None, dry_run: true })
        .await
        .expect_err("another team's dry run");
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
    // Her own job and task she reads.
    let own = jobs.get_job(pb::GetJobRequest { id: b.clone(), config_version: None }).await.expect("own job");
    assert_eq!(own.into_inner().job.and_then(|j| j.spec).map(|s| s.pool), Some(OTHER.to_string()));
    tasks.get_task(pb::GetTaskRequest { task: task(&b) }).await.expect("own task");

    // Queries leave alice's job out, before paging: a filter by alice's
    // pool finds nothing, a name both jobs share finds only carol's.
    let everything = pb::QueryJobsRequest::default();
    assert_eq!(query_all(&api, "carol-token", everything.clone()).await.0, vec![b.clone()]);
    let in_a = pb::QueryJobsRequest { pool: POOL.into(), ..Default::default() };
    assert_eq!(query_all(&api, "carol-token", in_a.clone()).await.0, Vec::<String>::new());
    let named = pb::QueryJobsRequest { name_contains: "team-".into(), ..Default::default() };
    assert_eq!(query_all(&api, "carol-token", named).await.0, vec![b.clone()]);
    assert_eq!(query_all(&api, "alice-token", everything.clone()).await.0, vec![a.clone()]);
    assert_eq!(query_all(&api, "alice-token", in_a).await.0, vec![a.clone()]);
    let mut both = vec![a.clone(), b.clone()];
    both.sort();
    assert_eq!(query_all(&api, "ops-token", everything).await.0, both, "an operator reads every pool");

    // Watches: carol's stream carries her job and tasks and none of alice's;
    // asking for alice's job by id is refused; an operator sees both.
    let seen = watched(&api, "carol-token", "").await.expect("carol's watch");
    assert!(seen.contains(&b), "her own job is in her stream: {seen:?}");
    assert!(!seen.contains(&a), "alice's job is not in carol's stream: {seen:?}");
    refused_as_another_pools("Watch of alice's job", watched(&api, "carol-token", &a).await);
    let seen = watched(&api, "alice-token", "").await.expect("alice's watch");
    assert!(seen.contains(&a) && !seen.contains(&b), "{seen:?}");
    let seen = watched(&api, "ops-token", "").await.expect("operator's watch");
    assert!(seen.contains(&a) && seen.contains(&b), "{seen:?}");
    // Live (not replayed) changes too: both teams kill their jobs while
    // carol watches from now.
    let live = WatchServiceClient::new(api.as_("carol-token"))
        .watch(pb::WatchRequest::default())
        .await
        .expect("carol's live watch")
        .into_inner();
    for (token, id) in [("alice-token", &a), ("carol-token", &b)] {
        let kill = pb::KillJobRequest { id: id.clone(), instances: vec![] };
        JobServiceClient::new(api.as_(token)).kill_job(kill).await.expect("kill own job");
    }
    let seen = ids_of(live).await;
    assert!(seen.contains(&b) && !seen.contains(&a), "carol's live stream: {seen:?}");

    // alice reads her job's env; so does an operator.
    for token in ["alice-token", "ops-token"] {
        let job = JobServiceClient::new(api.as_(token))
            .get_job(pb::GetJobRequest { id: a.clone(), config_version: None })
            .await
            .unwrap_or_else(|e| panic!("{token}: {e:?}"))
            .into_inner()
            .job;
        let env = job.and_then(|j| j.spec).and_then(|s| s.default_task).map(|t| t.env).unwrap_or_default();
        assert_eq!(env.get("DB_PASSWORD").map(String::as_str), Some(SECRET), "{token}");
        let listed = TaskServiceClient::new(api.as_(token))
            .list_tasks(pb::ListTasksRequest { job_id: a.clone(), ..Default::default() })
            .await
            .unwrap_or_else(|e| panic!("{token}: {e:?}"))
            .into_inner();
        assert_eq!(listed.tasks.len(), 2, "{token}");
    }
}

/// Pages of a user's query are full pages of its own jobs, with tokens that
/// lead on, however the store interleaves other teams' jobs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_users_query_pages_hold_only_its_jobs_and_stay_full() {
    let api = Api::start().await;
    let (a, b) = two_teams(&api).await;
    let (mut mine, mut theirs) = (vec![b], vec![a]);
    for i in 0..4 {
        let mut c = job(JobKind::Batch, 1);
        c.name = format!("a-{i}");
        c.owner = "alice".into();
        theirs.push(create(&api, "alice-token", &c).await);
        c.name = format!("b-{i}");
        c.owner = "carol".into();
        c.pool = OTHER.into();
        mine.push(create(&api, "carol-token", &c).await);
    }
    mine.sort();
    let (ids, sizes) = query_all(&api, "carol-token", pb::QueryJobsRequest { limit: 2, ..Default::default() }).await;
    assert_eq!(ids, mine, "every one of carol's jobs, once, in id order");
    assert_eq!(sizes, vec![2, 2, 1], "full pages until the last");
    let (ids, _) = query_all(&api, "ops-token", pb::QueryJobsRequest { limit: 3, ..Default::default() }).await;
    assert_eq!(ids.len(), mine.len() + theirs.len(), "an operator's pages hold both teams'");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_cannot_read_another_pools_job_through_the_web_ui() {
    let api = Api::start().await;
    let (a, b) = two_teams(&api).await;
    let quick = Duration::from_secs(5);

    let (code, body) = web_get(&api, "carol-token", "/ui/api/jobs", quick).await;
    assert_eq!(code, 200, "{body}");
    assert!(body.contains(&b) && !body.contains(&a), "carol's list holds her job only: {body}");
    for path in [
        format!("/ui/api/jobs/{a}"),
        format!("/ui/api/jobs/{a}/versions/1"),
        format!("/ui/api/tasks/{a}/0"),
        format!("/ui/api/tasks/{a}/0/logs"),
    ] {
        let (code, body) = web_get(&api, "carol-token", &path, quick).await;
        assert_eq!(code, 403, "{path}: {body}");
        assert!(body.contains("may not read jobs in pool /team") && !body.contains(SECRET), "{path}: {body}");
    }
    // The live stream leaves alice's job out (read for two seconds: the
    // replay of the creations comes first).
    let (code, body) = web_get(&api, "carol-token", "/ui/api/events?from_revision=1", Duration::from_secs(2)).await;
    assert_eq!(code, 200, "{body}");
    assert!(body.contains(&b) && !body.contains(&a), "carol's live stream: {body}");

    // alice reads her own job with its env; an operator reads both.
    let (code, body) = web_get(&api, "alice-token", &format!("/ui/api/jobs/{a}"), quick).await;
    assert!(code == 200 && body.contains(SECRET), "{code} {body}");
    let (code, body) = web_get(&api, "ops-token", "/ui/api/jobs", quick).await;
    assert!(code == 200 && body.contains(&a) && body.contains(&b), "{code} {body}");
    let (code, body) = web_get(&api, "ops-token", "/ui/api/events?from_revision=1", Duration::from_secs(2)).await;
    assert!(code == 200 && body.contains(&a) && body.contains(&b), "{code} {body}");
}

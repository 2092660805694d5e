//! Cassandra: a keyspace of an older schema upgraded in place by this
//! build, against the node of [`super::cassandra`].

use std::path::Path;
use std::sync::Arc;

use paceline_model::job::JobState;
use paceline_model::task::{TaskEvent, TaskState};
use paceline_storage::cassandra::{CassandraStore, SCHEMA_VERSION, schema};
use paceline_storage::{JobQuery, Store};

use crate::cassandra::{FIRST, config, drop_keyspace, keyspace};

/// A keyspace of schema 1 (`tests/fixtures/cassandra-schema-v1.cql`, the
/// first migration's tables), holding the jobs, tasks, hosts, pools and
/// provider id of the SQLite schema-1 fixture, is upgraded in place by a
/// connect of this build and reads back whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_v1_keyspace_is_upgraded_in_place() {
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    // The rows, from the SQLite fixture.
    let db = tempfile::tempdir().expect("tempdir");
    let conn = rusqlite::Connection::open(db.path().join("v1.db")).expect("sqlite");
    conn.execute_batch(&std::fs::read_to_string(fixtures.join("sqlite-schema-v1.sql")).expect("sqlite fixture"))
        .expect("v1 rows");

    let ks = format!("{}_v1", keyspace());
    let raw = {
        let _first = FIRST.lock().await;
        CassandraStore::connect(&config(keyspace())).await.expect("connect")
    };
    let s = raw.session();
    s.query_unpaged(
        format!("CREATE KEYSPACE IF NOT EXISTS {ks} WITH replication = {{'class': 'SimpleStrategy', 'replication_factor': 1}}"),
        &[],
    )
    .await
    .expect("keyspace");
    s.await_schema_agreement().await.expect("agreement");
    s.use_keyspace(ks.as_str(), false).await.expect("use");
    let cql = std::fs::read_to_string(fixtures.join("cassandra-schema-v1.cql")).expect("cql fixture");
    for stmt in cql.lines().filter(|l| !l.starts_with("--") && !l.trim().is_empty()) {
        s.query_unpaged(stmt.trim_end_matches(';'), &[]).await.unwrap_or_else(|e| panic!("{stmt}: {e}"));
    }
    s.await_schema_agreement().await.expect("agreement");

    type JobRow = (String, String, String, String, String, String, i32, i64, String, i64, String);
    let jobs: Vec<JobRow> = conn
        .prepare("SELECT * FROM jobs")
        .expect("jobs")
        .query_map([], |r| {
            Ok((
                r.get(0)?,
                r.get(1)?,
                r.get(2)?,
                r.get(3)?,
                r.get(4)?,
                r.get(5)?,
                r.get(6)?,
                r.get(7)?,
                r.get(8)?,
                r.get(9)?,
                r.get(10)?,
            ))
        })
        .expect("rows")
        .map(|r| r.expect("row"))
        .collect();
    for j in &jobs {
        s.query_unpaged(
            "INSERT INTO jobs (job_id, name, owner, pool, kind, labels, instance_count, latest_config_version, state, version, runtime)
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            j.clone(),
        )
        .await
        .expect("job");
    }
    let rows = |sql: &str| -> Vec<(String, i64, String)> {
        conn.prepare(sql)
            .expect("prepare")
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .expect("rows")
            .map(|r| r.expect("row"))
            .collect()
    };
    for (job, v, body) in rows("SELECT job_id, version, config FROM job_configs") {
        s.query_unpaged("INSERT INTO job_configs (job_id, version, config) VALUES (?, ?, ?)", (job, v, body))
            .await
            .expect("config");
    }
    let tasks: Vec<(String, i32, String, i64, String)> = conn
        .prepare("SELECT job_id, instance, state, version, runtime FROM tasks")
        .expect("tasks")
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)))
        .expect("rows")
        .map(|r| r.expect("row"))
        .collect();
    for (job, instance, state, version, runtime) in tasks {
        let bucket = instance / paceline_storage::cassandra::TASK_BUCKET as i32;
        s.query_unpaged("INSERT INTO job_task_buckets (job_id, bucket) VALUES (?, ?)", (job.clone(), bucket))
            .await
            .expect("bucket");
        s.query_unpaged(
            "INSERT INTO tasks (job_id, bucket, instance, state, version, runtime) VALUES (?, ?, ?, ?, ?, ?)",
            (job, bucket, instance, state, version, runtime),
        )
        .await
        .expect("task");
    }
    let pairs = |sql: &str| -> Vec<(String, String)> {
        conn.prepare(sql)
            .expect("prepare")
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .expect("rows")
            .map(|r| r.expect("row"))
            .collect()
    };
    for (name, record) in pairs("SELECT hostname, record FROM hosts") {
        s.query_unpaged("INSERT INTO hosts (hostname, record) VALUES (?, ?)", (name, record)).await.expect("host");
    }
    for (p, id) in pairs("SELECT provider, id FROM provider_ids") {
        s.query_unpaged("INSERT INTO provider_ids (provider, id) VALUES (?, ?)", (p, id)).await.expect("provider");
    }
    let pools: Vec<(String, Vec<u8>)> = conn
        .prepare("SELECT path, spec FROM pools")
        .expect("pools")
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .expect("rows")
        .map(|r| r.expect("row"))
        .collect();
    for (path, spec) in pools {
        s.query_unpaged("INSERT INTO pools (path, spec) VALUES (?, ?)", (path, spec)).await.expect("pool");
    }
    // Two events of task job-0001/1 in schema 1's table (a partition per task).
    for (at, to) in [(1_000u64, TaskState::Placed), (3_000, TaskState::Running)] {
        let body = serde_json::to_string(&task_event(at, to)).expect("event json");
        s.query_unpaged(
            "INSERT INTO task_events (job_id, instance, at_ms, run, to_state, event) VALUES (?, ?, ?, ?, ?, ?)",
            ("job-0001", 1i32, at as i64, 1i64, to.as_str(), body),
        )
        .await
        .expect("event");
    }
    drop(raw);

    // This build connects: it migrates 1 → current and reads everything.
    let store = CassandraStore::connect(&config(&ks)).await.expect("a newer build opens an older keyspace");
    assert_eq!(schema::recorded(store.session()).await.expect("recorded"), (1..=SCHEMA_VERSION).collect::<Vec<_>>());
    // The keyspace as it was, copied aside first: schema 1, every row.
    let copy = schema::pre_upgrade_keyspace(&ks, 1);
    let count = |table: &str| {
        let (session, q) = (store.session(), format!("SELECT COUNT(*) FROM {copy}.{table}"));
        async move {
            let rows = session.query_unpaged(q, &[]).await.expect("count").into_rows_result().expect("rows");
            rows.first_row::<(i64,)>().expect("one row").0
        }
    };
    assert_eq!(count("jobs").await, jobs.len() as i64);
    let fixture_tasks: i64 = conn.query_row("SELECT COUNT(*) FROM tasks", [], |r| r.get(0)).expect("count");
    assert_eq!(count("tasks").await, fixture_tasks);
    assert_eq!(count("schema_migrations").await, 1, "the copy is at schema 1");
    let tables: Vec<String> = store
        .session()
        .query_unpaged("SELECT table_name FROM system_schema.tables WHERE keyspace_name = ?", (copy.as_str(),))
        .await
        .expect("tables")
        .into_rows_result()
        .expect("rows")
        .rows::<(String,)>()
        .expect("typed")
        .map(|r| r.expect("row").0)
        .collect();
    assert!(!tables.iter().any(|t| t == "job_index"), "later schemas' tables are not in the copy: {tables:?}");
    let cassandra = Arc::new(store);
    let store: Arc<dyn Store> = cassandra.clone();
    assert_eq!(store.get_job_config("job-0001", None).await.expect("config").0, 2);
    assert_eq!(store.get_job_runtime("job-0001").await.expect("runtime").message, "job 1 said something");
    let tasks = store.tasks_of_job("job-0001", &[]).await.expect("tasks");
    assert_eq!(tasks.len(), 4);
    assert_eq!(tasks[1].runtime.ports["http"], 31000);
    // Schema 9 writes a runtime as a blob (`body`); a row of before keeps
    // its `runtime` text, read until the task is written again, and then
    // the blob is read, not the stale text.
    let mut rt = tasks[1].runtime.clone();
    rt.message = "written after the upgrade".into();
    store.cas_task("job-0001", 1, rt.version, &rt).await.expect("a task of schema 1 written");
    assert_eq!(store.get_task("job-0001", 1).await.expect("task").message, "written after the upgrade");
    let again = store.tasks_of_job("job-0001", &[]).await.expect("tasks");
    assert_eq!(again[1].runtime.message, "written after the upgrade");
    assert_eq!(again[2].runtime, tasks[2].runtime, "a task not written since is read from its text");
    let columns = |instance: i32| {
        let session = cassandra.session();
        async move {
            let q = "SELECT runtime, body FROM tasks WHERE job_id = 'job-0001' AND bucket = 0 AND instance = ?";
            let rows = session.query_unpaged(q, (instance,)).await.expect("row").into_rows_result().expect("rows");
            let (text, body) = rows.first_row::<(Option<String>, Option<Vec<u8>>)>().expect("one row");
            (text.is_some(), body.is_some())
        }
    };
    assert_eq!(columns(1).await, (true, true), "the old text stays beside the blob that is read");
    assert_eq!(columns(2).await, (true, false));
    assert_eq!(store.list_hosts().await.expect("hosts").len(), 3);
    assert_eq!(store.get_pool("/prod/web").await.expect("pool"), [0u8, 1, 2, 255]);
    assert_eq!(store.get_provider_id("mesos").await.expect("provider").as_deref(), Some("framework-7"));
    // What later schemas added works on it.
    store.claim_leadership(2).await.expect("leader fence (schema 2)");
    let e = paceline_model::event::JobEvent::new(
        "job-0001",
        None,
        paceline_model::event::EventReason::JobCompleted,
        "after the upgrade".into(),
        5,
    );
    store.record_job_events(&[e]).await.expect("job events (schema 3)");
    // Schema 6 filled the query index from the jobs already there.
    let by = |q: JobQuery| {
        let store = store.clone();
        async move {
            let page = store.query_jobs(&JobQuery { limit: 10, ..q }).await.expect("query");
            page.items.into_iter().map(|j| j.id).collect::<Vec<_>>()
        }
    };
    assert_eq!(by(JobQuery { owner: Some("owner-1".into()), ..Default::default() }).await, ["job-0001"]);
    assert_eq!(by(JobQuery { states: vec![JobState::Running], ..Default::default() }).await, ["job-0000"]);
    let t2 = JobQuery { labels: [("tier".to_string(), "t2".to_string())].into(), ..Default::default() };
    assert_eq!(by(t2).await, ["job-0001"]);
    let live: Vec<String> = store.live_jobs().await.expect("live").into_iter().map(|j| j.id).collect();
    assert_eq!(live, ["job-0000"]);
    // Schema 8 keeps task events a partition per bucket; the ones of schema
    // 1's table are read beside them, newest first, and go with their job.
    cassandra.append_task_events("job-0001", 1, &[task_event(2_000, TaskState::Launched)]).await.expect("new event");
    let at = |events: Vec<TaskEvent>| events.into_iter().map(|e| (e.at_ms, e.to)).collect::<Vec<_>>();
    assert_eq!(
        at(cassandra.task_events("job-0001", 1, 10).await.expect("events")),
        [(3_000, TaskState::Running), (2_000, TaskState::Launched), (1_000, TaskState::Placed)]
    );
    assert_eq!(at(cassandra.task_events("job-0001", 1, 2).await.expect("events")).len(), 2);
    let left_in = |table: &'static str| {
        let session = cassandra.session();
        async move {
            let q = format!("SELECT COUNT(*) FROM {table} WHERE job_id = 'job-0001' ALLOW FILTERING");
            let rows = session.query_unpaged(q, &[]).await.expect("count").into_rows_result().expect("rows");
            rows.first_row::<(i64,)>().expect("one row").0
        }
    };
    assert_eq!((left_in("task_events").await, left_in("task_events_by_bucket").await), (2, 1));
    cassandra.delete_job("job-0001").await.expect("delete");
    assert_eq!((left_in("task_events").await, left_in("task_events_by_bucket").await), (0, 0));
    drop((store, cassandra));
    drop_keyspace(&ks).await;
    drop_keyspace(&copy).await;
}

fn task_event(at_ms: u64, to: TaskState) -> TaskEvent {
    TaskEvent { run: 1, from: None, to, at_ms, host: None, reason: String::new(), message: String::new() }
}

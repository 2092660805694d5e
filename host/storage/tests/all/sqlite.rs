//! SQLite: the conformance suite, crash safety under SIGKILL, schema checks.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use paceline_model::job::JobRuntime;
use paceline_model::task::TaskRuntime;
use paceline_storage::sqlite::{SCHEMA_VERSION, SqliteStore};
use paceline_storage::{Store, StoreError};

async fn make() -> Arc<dyn Store> {
    // Leaked on purpose: the directory must outlive the store, and the OS
    // cleans temp dirs; tests are short-lived.
    let dir = tempfile::tempdir().expect("tempdir").keep();
    Arc::new(SqliteStore::open(dir.join("paceline.db")).expect("open"))
}

crate::conformance_suite!(make);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_fencing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("shared.db");
    let a: Arc<dyn Store> = Arc::new(SqliteStore::open(&path).expect("open a"));
    let b: Arc<dyn Store> = Arc::new(SqliteStore::open(&path).expect("open b"));
    crate::conformance::leader_fencing(a, b).await;
}

#[tokio::test]
async fn newer_schema_is_refused_unchanged() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("db");
    drop(SqliteStore::open(&path).expect("open"));
    let conn = rusqlite::Connection::open(&path).expect("raw");
    conn.execute_batch(&format!("PRAGMA user_version = {}", SCHEMA_VERSION + 5)).expect("bump");
    drop(conn);
    match SqliteStore::open(&path) {
        Err(StoreError::SchemaTooNew { found, supported, .. }) => {
            assert_eq!((found, supported), (SCHEMA_VERSION + 5, SCHEMA_VERSION));
        }
        other => panic!("expected SchemaTooNew, got {other:?}"),
    }
    let conn = rusqlite::Connection::open(&path).expect("raw");
    let v: u32 = conn.query_row("PRAGMA user_version", [], |r| r.get(0)).expect("version");
    assert_eq!(v, SCHEMA_VERSION + 5, "the newer database was not touched");
}

#[tokio::test]
async fn reopen_keeps_everything() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("db");
    {
        let s = SqliteStore::open(&path).expect("open");
        s.create_job("j", &crate::conformance::config("o", 2), &JobRuntime::initial(1, 0)).await.expect("job");
        s.create_tasks("j", &[(0, TaskRuntime::initial(1, 0)), (1, TaskRuntime::initial(1, 0))]).await.expect("tasks");
    }
    let s = SqliteStore::open(&path).expect("reopen");
    assert_eq!(s.tasks_of_job("j", &[]).await.expect("tasks").len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_writers_share_commits() {
    // Many concurrent single writes: all must land (group commit path).
    let s = make().await;
    s.create_job("g", &crate::conformance::config("o", 400), &JobRuntime::initial(1, 0)).await.expect("job");
    let mut handles = Vec::new();
    for i in 0..400u32 {
        let s = s.clone();
        handles.push(tokio::spawn(async move { s.create_tasks("g", &[(i, TaskRuntime::initial(1, 0))]).await }));
    }
    for h in handles {
        h.await.expect("join").expect("write");
    }
    assert_eq!(s.tasks_of_job("g", &[]).await.expect("tasks").len(), 400);
}

/// Event history is trimmed in steps, not on every append: appended one at
/// a time, a task's stored rows stay within the bound plus one step, reads
/// return exactly the bound, newest first; a reopened store (no counts)
/// trims on the task's first append.
#[tokio::test]
async fn event_history_stays_bounded_when_trimmed_in_steps() {
    use paceline_model::task::{TaskEvent, TaskState};
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("db");
    let max = paceline_storage::limits::MAX_EVENTS_PER_TASK;
    let event = |at_ms: u64| TaskEvent {
        run: 1,
        from: None,
        to: TaskState::Running,
        at_ms,
        host: None,
        reason: "HEALTHY".into(),
        message: String::new(),
    };
    let stored = || -> usize {
        let conn = rusqlite::Connection::open(&path).expect("raw");
        conn.query_row("SELECT COUNT(*) FROM task_events WHERE job_id = 'e' AND instance = 0", [], |r| r.get(0))
            .expect("count")
    };
    {
        let s = SqliteStore::open(&path).expect("open");
        s.create_job("e", &crate::conformance::config("o", 1), &JobRuntime::initial(1, 0)).await.expect("job");
        s.create_tasks("e", &[(0, TaskRuntime::initial(1, 0))]).await.expect("task");
        let mut most = 0;
        for at in 0..(3 * max as u64) {
            s.append_task_events("e", 0, &[event(at)]).await.expect("append");
            most = most.max(stored());
        }
        assert!(most > max, "trimmed in steps, not on every append ({most} rows at most)");
        assert!(most <= max + 26, "never more than one step over the bound: {most}");
        let got = s.task_events("e", 0, 1000).await.expect("events");
        assert_eq!(got.len(), max, "reads return the bound");
        assert_eq!(got[0].at_ms, 3 * max as u64 - 1, "newest first");
    }
    let s = SqliteStore::open(&path).expect("reopen");
    s.append_task_events("e", 0, &[event(10_000)]).await.expect("append");
    assert_eq!(stored(), max, "the first append after opening trims");
}

/// Thousands of separate commits leave a short WAL, not one that grows with
/// every commit (SQLite checkpoints at 1,000 pages, about 4 MB; a checkpoint
/// thread tried once let it grow to 25 MB here).
#[tokio::test]
async fn the_wal_stays_short_while_writes_go_on() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("db");
    let s = SqliteStore::open(&path).expect("open");
    s.create_job("w", &crate::conformance::config("o", 1), &JobRuntime::initial(1, 0)).await.expect("job");
    s.create_tasks("w", &[(0, TaskRuntime::initial(1, 0))]).await.expect("task");
    let mut rt = s.get_task("w", 0).await.expect("task");
    for i in 0..3_000u64 {
        rt.updated_at_ms = i;
        let v = s.cas_task("w", 0, rt.version, &rt).await.expect("cas");
        rt.version = v.version;
    }
    let wal = std::fs::metadata(format!("{}-wal", path.display()))
        .map(|m| m.len())
        .expect("the WAL exists while the store is open");
    // Never restarted: at least a 4 KiB page per commit, over 12 MB.
    assert!(wal < 6 << 20, "WAL of {wal} bytes after 3,000 commits");
    assert_eq!(s.get_task("w", 0).await.expect("task").updated_at_ms, 2_999);
}

const CHILD_DB: &str = "PACELINE_CRASH_DB";
const CHILD_LOG: &str = "PACELINE_CRASH_LOG";
const CRASH_JOB: &str = "crash-job";

/// Not a test on its own: the crash test runs this binary again with
/// `CHILD_DB` set, and this function then writes until it is killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn crash_child() {
    let (Ok(db), Ok(log)) = (std::env::var(CHILD_DB), std::env::var(CHILD_LOG)) else { return };
    let store = Arc::new(SqliteStore::open(&db).expect("child open"));
    match store.create_job(CRASH_JOB, &crate::conformance::config("crash", 1), &JobRuntime::initial(1, 0)).await {
        Ok(_) | Err(StoreError::AlreadyExists { .. }) => {}
        Err(e) => panic!("child: {e}"),
    }
    let start = store.tasks_of_job(CRASH_JOB, &[]).await.expect("tasks").last().map_or(0, |t| t.instance + 1);
    let next = Arc::new(std::sync::atomic::AtomicU32::new(start));
    let log =
        Arc::new(std::sync::Mutex::new(std::fs::OpenOptions::new().append(true).create(true).open(log).expect("log")));
    // Four concurrent writers: their batches share commits.
    let mut writers = Vec::new();
    for _ in 0..4 {
        let (store, next, log) = (store.clone(), next.clone(), log.clone());
        writers.push(tokio::spawn(async move {
            loop {
                let first = next.fetch_add(20, std::sync::atomic::Ordering::SeqCst);
                let batch: Vec<(u32, TaskRuntime)> =
                    (first..first + 20).map(|i| (i, TaskRuntime::initial(1, 0))).collect();
                store.create_tasks(CRASH_JOB, &batch).await.expect("write");
                // Acknowledged: record it in one write(2) (SIGKILL keeps the
                // page cache). `;` ends a complete record: a record cut by
                // the kill has none and is not counted.
                let line = format!("{first};\n");
                let mut f = log.lock().expect("log lock");
                f.write_all(line.as_bytes()).expect("log write");
            }
        }));
    }
    for w in writers {
        let _ = w.await;
    }
}

fn acked(log: &Path) -> Vec<u32> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().strip_suffix(';')?.parse().ok()) // a record cut by the kill is not an ack
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_safety_sigkill_20_times() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db: PathBuf = dir.path().join("crash.db");
    let log: PathBuf = dir.path().join("acks.log");
    let exe = std::env::current_exe().expect("exe");
    for round in 0..20 {
        // End any record the previous child left half-written.
        std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(&log)
            .and_then(|mut f| f.write_all(b"\n"))
            .expect("log");
        let mut child = std::process::Command::new(&exe)
            .args(["sqlite::crash_child", "--exact", "--nocapture", "--test-threads=1"])
            .env(CHILD_DB, &db)
            .env(CHILD_LOG, &log)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("spawn child");
        tokio::time::sleep(Duration::from_millis(fastrand::u64(150..600))).await;
        child.kill().expect("SIGKILL"); // std's kill is SIGKILL on Unix
        child.wait().expect("reap");

        let store = SqliteStore::open(&db).unwrap_or_else(|e| panic!("round {round}: reopen failed: {e}"));
        let have: std::collections::BTreeSet<u32> =
            store.tasks_of_job(CRASH_JOB, &[]).await.expect("tasks").into_iter().map(|t| t.instance).collect();
        for first in acked(&log) {
            for i in first..first + 20 {
                assert!(have.contains(&i), "round {round}: acknowledged instance {i} missing");
            }
        }
        drop(store);
        let conn = rusqlite::Connection::open(&db).expect("raw");
        let ok: String = conn.query_row("PRAGMA integrity_check", [], |r| r.get(0)).expect("integrity");
        assert_eq!(ok, "ok", "round {round}");
    }
    let n = acked(&log).len();
    assert!(n > 20, "the child acknowledged only {n} batches in 20 runs: the test proved little");
    println!("crash test: {n} acknowledged batches across 20 SIGKILLs, all present");
}

// ---- snapshots (decision 0030) ---------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_round_trip() {
    crate::snapshot::round_trip(make().await, make().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_bad_files_are_refused() {
    crate::snapshot::bad_files_are_refused(make().await, make().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_view_is_of_one_moment_and_leaves_no_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = SqliteStore::open(dir.path().join("paceline.db")).expect("open");
    crate::snapshot::populate(&store, 1).await;
    let view = store.consistent_view().await.expect("view").expect("sqlite has one");
    // Written after the view was taken: the view does not see it.
    store.create_job("late", &crate::conformance::config("o", 1), &JobRuntime::initial(1, 0)).await.expect("late job");
    assert!(view.store.get_job_runtime("late").await.expect_err("not in the view").is_not_found());
    assert!(view.store.get_job_runtime("job-0000").await.is_ok());
    let files = || std::fs::read_dir(dir.path()).expect("dir").count();
    let with_view = files();
    drop(view);
    assert!(files() < with_view, "the copy is removed with the view");
    assert!(
        std::fs::read_dir(dir.path()).expect("dir").all(|e| !e
            .expect("entry")
            .file_name()
            .to_string_lossy()
            .contains(".snapshot-")),
        "no copy is left behind"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_restore_into_a_file_is_all_or_nothing() {
    let src = make().await;
    crate::snapshot::populate(src.as_ref(), 3).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let file = crate::snapshot::save(src.as_ref(), dir.path()).await;
    let db = dir.path().join("restored/paceline.db");
    std::fs::create_dir_all(db.parent().expect("parent")).expect("mkdir");

    // A damaged file: no database appears, nothing is left beside it.
    let mut bytes = std::fs::read(&file).expect("read");
    bytes.truncate(bytes.len() - 10);
    let bad = dir.path().join("bad.snap");
    std::fs::write(&bad, &bytes).expect("write");
    let err = paceline_storage::snapshot::restore_sqlite_file(&bad, &db).await.expect_err("damaged");
    assert!(err.to_string().contains("damaged"), "{err}");
    assert_eq!(std::fs::read_dir(db.parent().expect("parent")).expect("dir").count(), 0, "nothing written");

    paceline_storage::snapshot::restore_sqlite_file(&file, &db).await.expect("restore");
    assert_eq!(std::fs::read_dir(db.parent().expect("parent")).expect("dir").count(), 1, "one file, WAL folded in");
    let restored: Arc<dyn Store> = Arc::new(SqliteStore::open(&db).expect("open restored"));
    assert_eq!(crate::snapshot::records(restored.as_ref()).await, crate::snapshot::records(src.as_ref()).await);
    drop(restored);
    let err = paceline_storage::snapshot::restore_sqlite_file(&file, &db).await.expect_err("not empty");
    assert!(matches!(err, paceline_storage::snapshot::SnapshotError::NotEmpty(_)), "{err}");
}

// ---- schema upgrades (decision 0030) -------------------------------------

/// The tables of schema version 1, the first release: what the fixture holds.
const V1_TABLES: &[&str] = &[
    "jobs",
    "job_labels",
    "job_configs",
    "tasks",
    "task_events",
    "updates",
    "update_progress",
    "pools",
    "plugins",
    "plugin_slots",
    "hosts",
    "provider_ids",
];

fn fixture_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/sqlite-schema-v1.sql")
}

/// Writes `tests/fixtures/sqlite-schema-v1.sql`: a store populated as the
/// snapshot tests do, cut down to the tables of schema 1 and marked
/// `user_version = 1`, dumped as SQL by the `sqlite3` shell. Run once when
/// the fixture is made (`cargo test -p paceline-storage --test all --
/// --ignored write_schema_v1_fixture`); the committed file is the fixture.
#[tokio::test]
#[ignore = "writes the committed fixture; run by hand"]
async fn write_schema_v1_fixture() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("v1.db");
    let store = SqliteStore::open(&path).expect("open");
    crate::snapshot::populate(&store, 2).await;
    drop(store);
    std::thread::sleep(Duration::from_millis(300));
    let out = std::process::Command::new("sqlite3")
        .arg(&path)
        .arg(format!(".dump {}", V1_TABLES.join(" ")))
        .output()
        .expect("the sqlite3 shell");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let mut sql = String::from(
        "-- A Paceline SQLite store at schema version 1 (the first release's tables),\n\
         -- written by `write_schema_v1_fixture` in tests/all/sqlite.rs. Do not edit:\n\
         -- `a_schema_v1_store_is_copied_then_upgraded_in_place` upgrades it.\n",
    );
    sql.push_str(&String::from_utf8(out.stdout).expect("utf8"));
    sql.push_str("PRAGMA user_version = 1;\n");
    std::fs::create_dir_all(fixture_path().parent().expect("dir")).expect("mkdir");
    std::fs::write(fixture_path(), sql).expect("write fixture");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_v1_store_is_copied_then_upgraded_in_place() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("paceline.db");
    let sql = std::fs::read_to_string(fixture_path()).expect("the committed fixture");
    let conn = rusqlite::Connection::open(&path).expect("raw");
    conn.execute_batch(&sql).expect("build the v1 store");
    let version = |p: &Path| -> u32 {
        rusqlite::Connection::open(p).expect("raw").query_row("PRAGMA user_version", [], |r| r.get(0)).expect("version")
    };
    drop(conn);
    assert_eq!(version(&path), 1);

    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(&path).expect("a newer server opens an older store"));
    assert_eq!(version(&path), SCHEMA_VERSION, "upgraded in place");
    // The copy taken first is at schema 1, beside the database.
    let backups: Vec<PathBuf> = std::fs::read_dir(dir.path())
        .expect("dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("paceline.db.pre-upgrade-v1-")))
        .collect();
    assert_eq!(backups.len(), 1, "one copy before the upgrade");
    assert_eq!(version(&backups[0]), 1, "the copy is the old schema, for the old build");

    // Everything of the first release reads back through the new build.
    assert_eq!(store.get_job_config("job-0001", None).await.expect("config").0, 2);
    assert_eq!(store.tasks_of_job("job-0001", &[]).await.expect("tasks").len(), 4);
    assert_eq!(store.task_events("job-0000", 1, 10).await.expect("events").len(), 3);
    assert_eq!(store.active_plugin("placement/batch").await.expect("slot").as_deref(), Some("binpack@2.0.0"));
    assert_eq!(store.plugin_bytes("placement/batch", "binpack", "2.0.0").await.expect("bytes").len(), 3000);
    assert_eq!(store.list_hosts().await.expect("hosts").len(), 3);
    assert_eq!(store.get_provider_id("mesos").await.expect("provider").as_deref(), Some("framework-7"));
    assert_eq!(store.updates_of_job("job-0000").await.expect("updates").len(), 1);
    // And what later schemas added works on it.
    let e = paceline_model::event::JobEvent::new(
        "job-0000",
        None,
        paceline_model::event::EventReason::JobCompleted,
        "after the upgrade".into(),
        5,
    );
    store.record_job_events(&[e]).await.expect("job events (schema 3)");
    store.claim_leadership(3).await.expect("leader fence (schema 2)");
    drop(store);

    // Opening it again neither migrates nor copies again.
    drop(SqliteStore::open(&path).expect("reopen"));
    let copies = std::fs::read_dir(dir.path())
        .expect("dir")
        .filter(|e| e.as_ref().expect("entry").file_name().to_string_lossy().contains("pre-upgrade"))
        .count();
    assert_eq!(copies, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrate_sqlite_to_sqlite_and_back() {
    crate::snapshot::migrate_there_and_back(make().await, make().await, make().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrate_resumes_and_refuses_strangers() {
    crate::snapshot::migrate_resumes_and_refuses_strangers(make().await, make().await, make().await).await;
}

#[tokio::test]
#[ignore = "the child of a_create_killed_midway_leaves_nothing"]
async fn create_crash_child() {
    let path = crate::crash::child_store_arg();
    crate::crash::child_create(Arc::new(SqliteStore::open(path).expect("open"))).await;
}

/// A writer killed inside the create's write, after the job's rows and
/// before its tasks': the transaction never commits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_killed_midway_leaves_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("paceline.db");
    drop(SqliteStore::open(&path).expect("create the file"));
    let (id, owner) = ("cut-short", "owner-crash");
    crate::crash::run_child(
        "sqlite::create_crash_child",
        "create-job.before-tasks",
        &path.to_string_lossy(),
        id,
        owner,
    );
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(&path).expect("reopen"));
    crate::crash::nothing_of_the_job_is_seen(store, id, owner).await;
}

/// The store holds every job's spec and environment: its file, the WAL and
/// the shared-memory file are the owner's alone (0600), in a directory
/// created 0700, whatever the umask would have given.
#[cfg(unix)]
#[tokio::test]
async fn the_database_and_its_wal_are_readable_by_their_owner_only() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("fresh").join("paceline.db");
    let s = SqliteStore::open(&path).expect("open");
    s.create_job("j", &crate::conformance::config("o", 1), &JobRuntime::initial(1, 0)).await.expect("a write");
    let mode = |p: &Path| std::fs::metadata(p).expect("exists").permissions().mode() & 0o777;
    assert_eq!(mode(path.parent().expect("dir")), 0o700, "the directory the store created");
    for suffix in ["", "-wal", "-shm"] {
        let file = PathBuf::from(format!("{}{suffix}", path.display()));
        assert_eq!(mode(&file), 0o600, "{}", file.display());
    }
    drop(s);
    let s = SqliteStore::open(&path).expect("reopen");
    assert_eq!(s.tasks_of_job("j", &[]).await.expect("read").len(), 0, "an empty job is still readable");
    assert_eq!(mode(&path), 0o600, "reopening keeps the mode");
}

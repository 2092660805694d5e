//! Snapshots (decision 0030): a populated store → a file → an empty store
//! of either backend holds the same records; a damaged, truncated, newer
//! or misplaced file is refused and nothing is written. Instantiated per
//! backend by the backend modules.

use std::io::BufReader;
use std::path::Path;
use std::sync::Arc;

use paceline_model::Resources;
use paceline_model::event::{EventReason, JobEvent};
use paceline_model::host::{HostRecord, MaintenanceState};
use paceline_model::job::{
    InstanceProgress, InstanceUpdateState, JobRuntime, JobState, Update, UpdateSpec, UpdateState,
};
use paceline_model::task::{TaskEvent, TaskRuntime, TaskState};
use paceline_storage::snapshot::{self, Record, SnapshotError, format::Decoder};
use paceline_storage::{PluginVersion, Store};
use sha2::{Digest, Sha256};

use crate::conformance::config;

/// Fills `s` with one of everything a snapshot carries: pools, hosts in
/// each maintenance state, a provider id, two plugin versions with an
/// active one, jobs with several config versions, tasks in several states
/// with events, an update with progress, job events.
pub async fn populate(s: &dyn Store, jobs: u32) {
    s.put_pool("/", b"{\"root\":true}").await.expect("pool");
    s.put_pool("/prod/web", &[0u8, 1, 2, 255]).await.expect("pool");
    for (i, state) in [MaintenanceState::Up, MaintenanceState::Draining, MaintenanceState::Down].into_iter().enumerate()
    {
        s.put_host(&HostRecord {
            hostname: format!("host-{i}"),
            provider: "agent".into(),
            agent_id: Some(format!("a{i}")),
            address: Some(format!("127.0.0.1:70{i}0")),
            total: Resources {
                cpu_millis: 8000,
                memory_mib: 16384,
                disk_mib: 100,
                gpu_milli: i as u64 * 1000,
                ports: 10,
            },
            attributes: [("zone".to_string(), format!("z{i}"))].into(),
            gpus: Vec::new(),
            state,
            registered_at_ms: 1 + i as u64,
            updated_at_ms: 2 + i as u64,
        })
        .await
        .expect("host");
    }
    s.put_provider_id("mesos", "framework-7").await.expect("provider");
    s.put_provider_id("kubernetes", "cluster-3").await.expect("provider");
    s.put_secret(&paceline_storage::secrets::SealedSecret {
        pool: "/prod/web".into(),
        name: "db-password".into(),
        version: 3,
        updated_at_ms: 42,
        updated_by: "alice".into(),
        size_bytes: 8,
        key_id: "0123456789abcdef".into(),
        nonce: "00".repeat(12),
        ciphertext: "ab".repeat(24),
    })
    .await
    .expect("secret");
    for (v, bytes) in [("1.0.0", b"\0asm-one".to_vec()), ("2.0.0", (0..3_000u32).map(|i| (i % 251) as u8).collect())] {
        let pv = PluginVersion {
            slot: "placement/batch".into(),
            name: "binpack".into(),
            version: v.into(),
            sha256: hex::encode(Sha256::digest(&bytes)),
            world: "placement".into(),
            deployed_at_ms: 10,
            state: if v == "2.0.0" { "active".into() } else { "retired".into() },
            size: bytes.len() as u64,
        };
        s.put_plugin_version(&pv, &bytes).await.expect("plugin");
    }
    s.set_slot_history("placement/batch", &["binpack@1.0.0".into(), "binpack@2.0.0".into()]).await.expect("slot");
    for j in 0..jobs {
        let id = format!("job-{j:04}");
        let mut rt = JobRuntime::initial(1, 100 + u64::from(j));
        s.create_job(&id, &config(&format!("owner-{}", j % 3), 4), &rt).await.expect("job");
        for v in 2..=(1 + j % 3) {
            let mut c = config(&format!("owner-{}", j % 3), 4 + v);
            c.name = format!("web-v{v}");
            c.labels.insert("tier".into(), format!("t{v}"));
            s.add_job_config(&id, u64::from(v), &c).await.expect("config");
        }
        rt.state = if j % 2 == 0 { JobState::Running } else { JobState::Succeeded };
        rt.message = format!("job {j} said something");
        let stored = s.get_job_runtime(&id).await.expect("rt");
        s.cas_job_runtime(&id, stored.version, &rt).await.expect("cas");
        let tasks: Vec<(u32, TaskRuntime)> = (0..4).map(|i| (i, TaskRuntime::initial(1, 7))).collect();
        s.create_tasks(&id, &tasks).await.expect("tasks");
        let mut t1 = TaskRuntime::initial(1, 7);
        t1.state = TaskState::Running;
        t1.run = 2;
        t1.host = Some("host-0".into());
        t1.ports.insert("http".into(), 31000);
        s.cas_task(&id, 1, 1, &t1).await.expect("cas task");
        let events: Vec<(u32, TaskEvent)> = (0..3)
            .map(|k| {
                (
                    1,
                    TaskEvent {
                        run: 2,
                        from: None,
                        to: TaskState::Running,
                        at_ms: 1000 + k,
                        host: Some("host-0".into()),
                        reason: "R".into(),
                        message: format!("event {k}"),
                    },
                )
            })
            .collect();
        s.append_job_events(&id, &events).await.expect("events");
        if j % 2 == 0 {
            let u = Update {
                id: format!("upd-{j}"),
                job_id: id.clone(),
                from_config_version: 1,
                to_config_version: 2,
                state: UpdateState::RollingForward,
                spec: UpdateSpec::default(),
                instances: vec![0, 1, 2],
                created_at_ms: 50,
                updated_at_ms: 60,
                message: "rolling".into(),
                version: 0,
            };
            s.create_update(&u).await.expect("update");
            let p =
                InstanceProgress { instance: 1, state: InstanceUpdateState::Succeeded, attempts: 2, updated_at_ms: 61 };
            s.put_update_progress(&u.id, &[p]).await.expect("progress");
        }
        let mut e = JobEvent::new(&id, Some(1), EventReason::Scheduled, "placed on host-0".into(), 2000);
        e.count = 3;
        e.last_seen_ms = 2500;
        s.record_job_events(&[e, JobEvent::new(&id, None, EventReason::JobCompleted, "succeeded".into(), 1900)])
            .await
            .expect("job events");
    }
}

/// A store's records as a snapshot holds them, with the compare-and-set
/// versions (which restore starts afresh) zeroed, sorted (backends list
/// jobs in different orders: SQLite by id, Cassandra by token).
pub async fn records(s: &dyn Store) -> Vec<Record> {
    let mut bytes = Vec::new();
    snapshot::export(s, &mut bytes).await.expect("export");
    let mut dec = Decoder::new(BufReader::new(&bytes[..])).expect("header");
    let mut out = Vec::new();
    while let Some(mut r) = dec.next_record().expect("record") {
        match &mut r {
            Record::Job(j) => j.runtime.version = 0,
            Record::Task { runtime, .. } => runtime.version = 0,
            Record::Update { update, .. } => update.version = 0,
            _ => {}
        }
        out.push(r);
    }
    out.sort_by_cached_key(|r| serde_json::to_string(r).expect("json"));
    out
}

/// Saves `src` to a file in `dir` and returns its path.
pub async fn save(src: &dyn Store, dir: &Path) -> std::path::PathBuf {
    let path = dir.join("cluster.snap");
    let file = std::fs::File::create(&path).expect("create");
    let mut sink = std::io::BufWriter::new(file);
    let trailer = snapshot::export(src, &mut sink).await.expect("export");
    std::io::Write::flush(&mut sink).expect("flush");
    assert_eq!(
        trailer.counts.get("job").copied(),
        Some(
            src.query_jobs(&paceline_storage::JobQuery { limit: 10_000, ..Default::default() })
                .await
                .expect("q")
                .items
                .len() as u64
        )
    );
    path
}

/// `src` → file → `dst` (empty) → the same records; then a second restore
/// into `dst` is refused as not empty, and changes nothing.
pub async fn round_trip(src: Arc<dyn Store>, dst: Arc<dyn Store>) {
    populate(src.as_ref(), 6).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let file = save(src.as_ref(), dir.path()).await;
    let (header, trailer) = snapshot::verify(&file).expect("verify");
    assert_eq!(header.source_backend, src.backend());
    assert_eq!(trailer.counts["task"], 24);
    assert_eq!(trailer.counts["host"], 3);
    snapshot::restore(&file, dst.as_ref()).await.expect("restore");
    let (want, got) = (records(src.as_ref()).await, records(dst.as_ref()).await);
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(&want) {
        assert_eq!(g, w);
    }
    // Spot checks through the store itself, not only through the export.
    assert_eq!(dst.active_plugin("placement/batch").await.expect("active").as_deref(), Some("binpack@2.0.0"));
    assert_eq!(dst.get_host("host-1").await.expect("host").state, MaintenanceState::Draining);
    assert_eq!(dst.get_job_config("job-0002", None).await.expect("config").0, 3);
    assert_eq!(dst.get_task("job-0002", 1).await.expect("task").ports["http"], 31000);
    assert_eq!(dst.task_events("job-0002", 1, 10).await.expect("events")[0].message, "event 2");
    assert_eq!(dst.get_provider_id("mesos").await.expect("provider").as_deref(), Some("framework-7"));
    assert_eq!(dst.get_provider_id("kubernetes").await.expect("provider").as_deref(), Some("cluster-3"));
    let secret = dst.get_secret("/prod/web", "db-password").await.expect("secret, still sealed");
    assert_eq!((secret.version, secret.ciphertext.as_str()), (3, "ab".repeat(24).as_str()));
    match snapshot::restore(&file, dst.as_ref()).await {
        Err(SnapshotError::NotEmpty(what)) => assert!(what.contains("jobs"), "{what}"),
        other => panic!("a second restore must be refused: {other:?}"),
    }
    assert_eq!(records(dst.as_ref()).await, want, "the refused restore changed nothing");
}

/// Every way a file can be wrong is refused before anything is written.
pub async fn bad_files_are_refused(src: Arc<dyn Store>, dst: Arc<dyn Store>) {
    populate(src.as_ref(), 2).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let good = std::fs::read(save(src.as_ref(), dir.path()).await).expect("read");
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("one byte changed", {
            let mut b = good.clone();
            let at = b.len() / 2;
            // A digit stays valid JSON: only the checksum can tell.
            let pos = (at..b.len()).find(|&i| b[i].is_ascii_digit()).expect("a digit");
            b[pos] = if b[pos] == b'9' { b'8' } else { b[pos] + 1 };
            b
        }),
        ("truncated", good[..good.len() * 2 / 3].to_vec()),
        ("no trailer", {
            let text = String::from_utf8(good.clone()).expect("utf8");
            let cut = text.trim_end().rfind('\n').expect("lines");
            text.as_bytes()[..=cut].to_vec()
        }),
        ("a line removed", {
            let text = String::from_utf8(good.clone()).expect("utf8");
            let mut lines: Vec<&str> = text.lines().collect();
            lines.remove(3);
            (lines.join("\n") + "\n").into_bytes()
        }),
        ("not a snapshot", b"hello\n".to_vec()),
        ("empty", Vec::new()),
    ];
    for (what, bytes) in cases {
        let path = dir.path().join("bad.snap");
        std::fs::write(&path, &bytes).expect("write");
        match snapshot::restore(&path, dst.as_ref()).await {
            Err(SnapshotError::Damaged(reason)) => assert!(!reason.is_empty(), "{what}"),
            other => panic!("{what}: expected Damaged, got {other:?}"),
        }
        assert_eq!(snapshot::contents(dst.as_ref()).await.expect("contents"), None, "{what}: nothing written");
    }
    // A newer format: refused as such, even though the rest is intact.
    let text = String::from_utf8(good).expect("utf8");
    let newer = text.replacen("\"version\":1,", "\"version\":2,", 1);
    assert_ne!(newer, text);
    let path = dir.path().join("newer.snap");
    std::fs::write(&path, newer).expect("write");
    match snapshot::restore(&path, dst.as_ref()).await {
        Err(e @ SnapshotError::TooNew { found: 2, supported: 1 }) => {
            assert!(e.to_string().contains("newer paceline"), "{e}")
        }
        other => panic!("expected TooNew, got {other:?}"),
    }
    assert_eq!(snapshot::contents(dst.as_ref()).await.expect("contents"), None, "nothing written");
}

/// `a` → `b` → `c` with `paceline storage migrate`'s copy: nothing lost on
/// the way (the same records in `a` and `c`), each step verified.
pub async fn migrate_there_and_back(a: Arc<dyn Store>, b: Arc<dyn Store>, c: Arc<dyn Store>) {
    use paceline_storage::snapshot::migrate;
    populate(a.as_ref(), 6).await;
    let mut ticks = 0;
    let there = migrate::migrate(a.as_ref(), b.as_ref(), "a", &mut |_| ticks += 1).await.expect("a → b");
    assert_eq!((there.jobs_copied, there.jobs_skipped, there.jobs_redone, there.resumed), (6, 0, 0, false));
    assert_eq!(there.verified["task"], 24);
    assert!(ticks >= 1, "progress was reported");
    let back = migrate::migrate(b.as_ref(), c.as_ref(), "b", &mut |_| {}).await.expect("b → c");
    assert_eq!(back.jobs_copied, 6);
    assert_eq!(records(a.as_ref()).await, records(c.as_ref()).await, "nothing lost there and back");
    assert_eq!(b.get_provider_id(migrate::MARKER).await.expect("marker").as_deref(), Some("complete from a"));
}

/// A target left by an interrupted run (a job cut short between its job
/// row and its tasks) is completed by the next run: the cut job is copied
/// again, complete ones are skipped; other targets are refused.
pub async fn migrate_resumes_and_refuses_strangers(src: Arc<dyn Store>, dst: Arc<dyn Store>, other: Arc<dyn Store>) {
    use paceline_storage::snapshot::migrate;
    populate(src.as_ref(), 6).await;
    // What an interrupted run leaves: its marker, two jobs whole, one cut.
    dst.put_provider_id(migrate::MARKER, "in progress from src").await.expect("marker");
    for id in ["job-0000", "job-0001"] {
        let mut one = SingleJob(Vec::new());
        let rt = src.get_job_runtime(id).await.expect("rt");
        let latest = src.get_job_config(id, None).await.expect("cfg").0;
        snapshot::walk_job(src.as_ref(), id, latest, rt, &mut one).await.expect("walk");
        copy_records(dst.as_ref(), one.0).await;
    }
    let (_, first) = src.get_job_config("job-0002", Some(1)).await.expect("cfg");
    dst.create_job("job-0002", &first, &src.get_job_runtime("job-0002").await.expect("rt")).await.expect("cut job");

    let report = migrate::migrate(src.as_ref(), dst.as_ref(), "src", &mut |_| {}).await.expect("resume");
    assert!(report.resumed);
    assert_eq!((report.jobs_skipped, report.jobs_redone, report.jobs_copied), (2, 1, 4));
    assert_eq!(records(src.as_ref()).await, records(dst.as_ref()).await);

    // Another source's migration, or a store that holds data, is refused.
    match migrate::migrate(src.as_ref(), dst.as_ref(), "elsewhere", &mut |_| {}).await {
        Err(SnapshotError::NotEmpty(m)) => assert!(m.contains("from src"), "{m}"),
        other => panic!("another source must be refused: {other:?}"),
    }
    other.put_pool("/mine", b"x").await.expect("pool");
    match migrate::migrate(src.as_ref(), other.as_ref(), "src", &mut |_| {}).await {
        Err(SnapshotError::NotEmpty(m)) => assert!(m.contains("pools"), "{m}"),
        other => panic!("a non-empty target must be refused: {other:?}"),
    }
    assert!(
        other
            .query_jobs(&paceline_storage::JobQuery { limit: 1, ..Default::default() })
            .await
            .expect("q")
            .items
            .is_empty()
    );
}

struct SingleJob(Vec<Record>);

#[async_trait::async_trait]
impl snapshot::RecordSink for SingleJob {
    async fn record(&mut self, record: Record) -> Result<(), SnapshotError> {
        self.0.push(record);
        Ok(())
    }
}

/// Writes one job's records as a run of the migration would have.
async fn copy_records(dst: &dyn Store, records: Vec<Record>) {
    for r in records {
        match r {
            Record::Job(j) => {
                let mut it = j.configs.into_iter();
                let (_, c) = it.next().expect("config");
                dst.create_job(&j.id, &c, &j.runtime).await.expect("job");
                for (v, c) in it {
                    dst.add_job_config(&j.id, v, &c).await.expect("config");
                }
            }
            Record::Task { job, instance, runtime } => {
                dst.create_tasks(&job, &[(instance, runtime)]).await.expect("task")
            }
            Record::TaskEvents { job, instance, events } => {
                dst.append_task_events(&job, instance, &events).await.expect("events")
            }
            Record::Update { update, progress } => {
                dst.create_update(&update).await.expect("update");
                dst.put_update_progress(&update.id, &progress).await.expect("progress");
            }
            Record::JobEvents { events, .. } => dst.record_job_events(&events).await.expect("job events"),
            _ => {}
        }
    }
}

//! Snapshots and migrations end to end, with the real binary (decision
//! 0030): a snapshot saved from a running `paceline dev` and restored into a
//! new store gives a server started on it the same API answers for every
//! job, task, pool, host and plugin; a damaged snapshot is refused; a
//! `paceline storage migrate` SIGKILLed in the middle resumes and finishes
//! with nothing lost.

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{BIN, Dev, cli, eventually, free_port, json, ok};
use paceline_storage::Store;
use paceline_storage::snapshot::{self, Record, RecordSink, SnapshotError, migrate};

/// Every answer of the API about the cluster's state that a restore must
/// keep: the jobs, each job and its tasks, pools, hosts, plugins.
fn answers(api: u16, jobs: &[String]) -> Vec<(String, serde_json::Value)> {
    let mut out = vec![
        ("job list".to_string(), json(api, &["job", "list"])),
        ("pool list".into(), json(api, &["pool", "list"])),
        ("host list".into(), json(api, &["host", "list"])),
        ("plugin list".into(), json(api, &["plugin", "list"])),
    ];
    for id in jobs {
        out.push((format!("job get {id}"), json(api, &["job", "get", id])));
        out.push((format!("task list {id}"), json(api, &["task", "list", id])));
    }
    out
}

/// Without what the server measures rather than stores: when each host
/// last spoke (a new server's hosts register anew) and each plugin
/// version's call figures (kept in memory).
fn without_measurements(v: &mut serde_json::Value) {
    match v {
        serde_json::Value::Object(o) => {
            o.retain(|k, _| !["last_heartbeat_ms", "calls", "errors", "p50_us", "p99_us"].contains(&k.as_str()));
            o.values_mut().for_each(without_measurements);
        }
        serde_json::Value::Array(a) => a.iter_mut().for_each(without_measurements),
        _ => {}
    }
}

#[test]
fn a_restored_snapshot_answers_like_the_cluster_it_was_taken_from() {
    let dir = tempfile::tempdir().expect("tempdir");
    let dir = dir.path();
    let hello = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/hello.yaml");
    let hello = hello.to_str().expect("utf-8");
    let snap = dir.join("cluster.snap");
    let (before, jobs) = {
        let api = free_port();
        let _dev = Dev::start(dir, api, 3, &[]);
        let mut jobs = Vec::new();
        for _ in 0..3 {
            let v: serde_json::Value =
                serde_json::from_str(&ok(cli(api, &["job", "create", hello, "-o", "json"]))).expect("json");
            jobs.push(v["id"].as_str().expect("id").to_string());
        }
        let pool = dir.join("pool.yaml");
        std::fs::write(&pool, "reservation: {cpu: 1000, memory: 1024, disk: 100}\n").expect("write");
        ok(cli(api, &["pool", "create", "/team-a", pool.to_str().expect("utf-8")]));
        // Settled: every job killed (tasks on simulated hosts run until
        // killed) and the drained host empty, so nothing changes between
        // the snapshot and the answers compared with the restored cluster's.
        for id in &jobs {
            ok(cli(api, &["job", "kill", id]));
        }
        eventually(60, "every job killed", || {
            jobs.iter().all(|id| json(api, &["job", "get", id])["status"]["state"] == "KILLED")
        });
        let hosts = json(api, &["host", "list"]);
        let host = hosts[0]["hostname"].as_str().expect("a host").to_string();
        ok(cli(api, &["host", "drain", &host]));
        eventually(30, "the host drained", || json(api, &["host", "list"]).to_string().contains("DRAINED"));
        let saved = ok(cli(api, &["operator", "snapshot", "save", snap.to_str().expect("utf-8")]));
        assert!(saved.contains("one point in time") && saved.contains("3 job"), "{saved}");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&snap).expect("saved").permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "only its owner reads a snapshot");
        }
        let refused = cli(api, &["operator", "snapshot", "save", snap.to_str().expect("utf-8")]);
        assert!(!refused.status.success(), "an existing file is not overwritten");
        (answers(api, &jobs), jobs)
    };

    // A damaged copy is refused and writes nothing.
    let mut bytes = std::fs::read(&snap).expect("read");
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x01;
    let bad = dir.join("bad.snap");
    std::fs::write(&bad, &bytes).expect("write");
    let target = dir.join("restored/dev/paceline.db");
    let out = cli(
        0,
        &[
            "operator",
            "snapshot",
            "restore",
            bad.to_str().expect("utf-8"),
            "--store",
            &format!("sqlite:{}", target.display()),
        ],
    );
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("damaged"), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!target.exists(), "nothing written");

    let restored = ok(cli(
        0,
        &[
            "operator",
            "snapshot",
            "restore",
            snap.to_str().expect("utf-8"),
            "--store",
            &format!("sqlite:{}", target.display()),
        ],
    ));
    assert!(restored.contains("restored"), "{restored}");
    let api = free_port();
    let _dev = Dev::start(&dir.join("restored"), api, 3, &[]);
    let after = answers(api, &jobs);
    assert_eq!(after.len(), before.len());
    for ((what, mut b), (_, mut a)) in before.into_iter().zip(after) {
        without_measurements(&mut b);
        without_measurements(&mut a);
        assert_eq!(a, b, "{what} differs after the restore");
    }
}

/// Per-kind sorted digests of every record of a store.
#[derive(Default)]
struct Digests(Vec<(String, [u8; 32])>);

#[tonic::async_trait]
impl RecordSink for Digests {
    async fn record(&mut self, record: Record) -> Result<(), SnapshotError> {
        self.0.push((record.kind().to_string(), migrate::record_digest(&record)?));
        Ok(())
    }
}

async fn digests(store: &dyn Store) -> Vec<(String, [u8; 32])> {
    let mut d = Digests::default();
    snapshot::walk(store, true, &mut d).await.expect("walk");
    d.0.sort();
    d.0
}

#[test]
fn a_migration_killed_in_the_middle_resumes_and_loses_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let src_path = dir.path().join("src.db");
    let dst_path = dir.path().join("dst.db");
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    // Enough for several progress lines (one a second) before the end: a
    // debug build on the two-core CI machine copies about 180 jobs of 40
    // tasks a second, so the first run is killed after about 150 and the
    // resumed one prints five lines (14.6 s with its verification). It was
    // 3,000: 70 s for this test alone (24 s now), the seeding, both runs and
    // both digests growing with it.
    let jobs = 1000u32;
    rt.block_on(async {
        let src = paceline_storage::sqlite::SqliteStore::open(&src_path).expect("open");
        let mut task = paceline_model::task::TaskRuntime::initial(1, 7);
        task.state = paceline_model::task::TaskState::Running;
        for j in 0..jobs {
            let id = format!("job-{j:05}");
            let cfg = paceline_model::job::JobConfig {
                name: "web".into(),
                owner: "o".into(),
                pool: "/default".into(),
                kind: paceline_model::job::JobKind::Stateless,
                instance_count: 40,
                default_task: paceline_model::task::TaskSpec { command: "serve".into(), ..Default::default() },
                ..Default::default()
            };
            src.create_job(&id, &cfg, &paceline_model::job::JobRuntime::initial(1, 0)).await.expect("job");
            let tasks: Vec<_> = (0..40).map(|i| (i, task.clone())).collect();
            src.create_tasks(&id, &tasks).await.expect("tasks");
        }
        src.put_pool("/default", b"spec").await.expect("pool");
    });
    let args = [
        "storage",
        "migrate",
        "--from",
        &format!("sqlite:{}", src_path.display()),
        "--to",
        &format!("sqlite:{}", dst_path.display()),
    ];

    // The first run: SIGKILLed once it has reported some progress.
    let mut child = Command::new(BIN).args(args).stdout(Stdio::piped()).stderr(Stdio::null()).spawn().expect("starts");
    let stdout = BufReader::new(child.stdout.take().expect("stdout"));
    let started = Instant::now();
    let mut killed_at = None;
    for line in stdout.lines().map_while(Result::ok) {
        if let Some(done) =
            line.strip_prefix("migrate: ").and_then(|l| l.split('/').next()).and_then(|n| n.parse::<u32>().ok())
            && done > 0
            && done < jobs
        {
            let _ = Command::new("kill").arg("-KILL").arg(child.id().to_string()).status();
            killed_at = Some(done);
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(300), "no progress");
    }
    let status = child.wait().expect("wait");
    let killed_at = killed_at.unwrap_or_else(|| panic!("the migration ended ({status}) before it could be killed"));
    assert!(!status.success(), "killed");

    // The second run resumes: the jobs written before the kill are found
    // complete, the one cut short (if any) is copied again.
    let out = ok(Command::new(BIN).args(args).output().expect("runs"));
    // Its rate, for sizing `jobs` (shown with --nocapture or on failure).
    eprintln!("killed at {killed_at} of {jobs} jobs; the resumed run said:\n{out}");
    assert!(out.contains("(resumed)"), "{out}");
    let found = out
        .split(" found complete")
        .next()
        .and_then(|s| s.rsplit(' ').next())
        .and_then(|n| n.parse::<u32>().ok())
        .unwrap_or_else(|| panic!("no count of complete jobs in {out}"));
    assert!(found + 1 >= killed_at, "jobs copied before the kill ({killed_at}) are not copied again: {out}");
    assert!(out.contains("verified"), "{out}");

    rt.block_on(async {
        let src = paceline_storage::sqlite::SqliteStore::open(&src_path).expect("open");
        let dst = paceline_storage::sqlite::SqliteStore::open(&dst_path).expect("open");
        assert_eq!(digests(&src).await, digests(&dst).await, "nothing lost, nothing extra");
    });
}

/// `restore --config` finds the store in a server config file; a second
/// restore into it is refused as not empty; `inspect` tells an intact file
/// from a cut one; a restore without a target is bad input (exit 2).
#[test]
fn restore_into_a_configured_store_and_inspect() {
    let dir = tempfile::tempdir().expect("tempdir");
    let snap = dir.path().join("s.snap");
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        let src = paceline_storage::sqlite::SqliteStore::open(dir.path().join("src.db")).expect("open");
        src.put_pool("/", b"root").await.expect("pool");
        src.put_provider_id("mesos", "fw-1").await.expect("provider");
        let mut sink = std::io::BufWriter::new(std::fs::File::create(&snap).expect("create"));
        snapshot::export(&src, &mut sink).await.expect("export");
        std::io::Write::flush(&mut sink).expect("flush");
    });
    let data = dir.path().join("data");
    let config = dir.path().join("server.yaml");
    std::fs::write(&config, format!("data_dir: {}\n", data.display())).expect("config");
    let restore = || {
        cli(
            0,
            &[
                "operator",
                "snapshot",
                "restore",
                snap.to_str().expect("utf-8"),
                "--config",
                config.to_str().expect("utf-8"),
            ],
        )
    };
    let out = ok(restore());
    assert!(out.contains("1 pool, 1 provider_id"), "{out}");
    assert!(data.join("paceline.db").exists());
    let again = restore();
    assert_eq!(again.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&again.stderr).contains("not empty"), "{}", String::from_utf8_lossy(&again.stderr));

    let inspected = ok(cli(0, &["operator", "snapshot", "inspect", snap.to_str().expect("utf-8")]));
    assert!(inspected.contains("intact, format version 1") && inspected.contains("UTC"), "{inspected}");
    let bytes = std::fs::read(&snap).expect("read");
    let cut = dir.path().join("cut.snap");
    std::fs::write(&cut, &bytes[..bytes.len() - 5]).expect("write");
    let out = cli(0, &["operator", "snapshot", "inspect", cut.to_str().expect("utf-8")]);
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("damaged"));

    let no_target = cli(0, &["operator", "snapshot", "restore", snap.to_str().expect("utf-8")]);
    assert_eq!(no_target.status.code(), Some(2), "clap refuses a restore without --store or --config");
}

/// Retention end to end: a server told to keep two finished jobs removes
/// the older ones of four once they end, and keeps the live one.
#[test]
fn a_server_keeps_only_as_many_finished_jobs_as_its_retention_says() {
    let dir = tempfile::tempdir().expect("tempdir");
    let api = free_port();
    let config = dir.path().join("server.yaml");
    std::fs::write(
        &config,
        format!(
            "data_dir: {}\napi_listen: 127.0.0.1:{api}\nagent_listen: 127.0.0.1:0\nhosts: {{provider: sim, hosts: 2, resources: {{cpu_millis: 4000, memory_mib: 8192, disk_mib: 10000, gpus: 0}}, zones: 1}}\nretention: {{max_age_days: 0, max_finished_jobs: 2, batch: 1, interval_secs: 1}}\n",
            dir.path().join("data").display()
        ),
    )
    .expect("write");
    let _server = Dev::spawn(&["server", "--config", config.to_str().expect("utf-8")], "API on");
    let job = |name: &str, millis: u32| {
        let path = dir.path().join(format!("{name}.yaml"));
        std::fs::write(
            &path,
            format!(
                "name: {name}\npool: /default\nkind: batch\ninstance_count: 1\ndefault_task:\n  command: sim\n  env: {{SIM_DURATION_MS: \"{millis}\"}}\n  resources: {{cpu_millis: 100, memory_mib: 32}}\n"
            ),
        )
        .expect("write");
        ok(cli(api, &["job", "create", path.to_str().expect("utf-8")]))
    };
    // One at a time, so their end times are in order.
    let mut finished = Vec::new();
    for i in 0..4 {
        let id = job(&format!("short-{i}"), 10);
        eventually(30, "the job ends", || {
            json(api, &["job", "get", &id])["status"]["state"].as_str().is_some_and(|s| s.ends_with("SUCCEEDED"))
        });
        finished.push(id);
    }
    let live = job("long", 600_000);
    eventually(30, "the sweep leaves the two newest finished jobs", || {
        let ids: Vec<String> = json(api, &["job", "list"])
            .as_array()
            .map(|a| a.iter().filter_map(|j| j["id"].as_str().map(str::to_string)).collect())
            .unwrap_or_default();
        ids.len() == 3 && ids.contains(&finished[2]) && ids.contains(&finished[3]) && ids.contains(&live)
    });
    // Removed for good: their job and tasks no longer answer.
    assert!(!cli(api, &["job", "get", &finished[0]]).status.success(), "the oldest finished job is gone");
    assert!(!cli(api, &["task", "list", &finished[1]]).status.success(), "and its tasks");
}

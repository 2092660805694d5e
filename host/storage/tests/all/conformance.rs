//! The conformance suite: every backend must pass these, unchanged.
//! Ids are unique per call so that backends sharing a keyspace across
//! tests (Cassandra) see no cross-talk.

use std::collections::BTreeSet;
use std::sync::Arc;

use paceline_model::Resources;
use paceline_model::host::{HostRecord, MaintenanceState};
use paceline_model::job::{
    InstanceProgress, InstanceUpdateState, JobConfig, JobKind, JobRuntime, JobState, Update, UpdateSpec, UpdateState,
};
use paceline_model::task::{TaskEvent, TaskRuntime, TaskSpec, TaskState};
use paceline_storage::{JobQuery, PluginVersion, Store, StoreError, TaskCas};
use sha2::{Digest, Sha256};

pub fn unique(prefix: &str) -> String {
    format!("{prefix}-{}-{}", std::process::id(), fastrand::u64(..))
}

pub fn config(owner: &str, instances: u32) -> JobConfig {
    JobConfig {
        name: "web".into(),
        owner: owner.into(),
        pool: "/prod/web".into(),
        kind: JobKind::Stateless,
        instance_count: instances,
        default_task: TaskSpec {
            command: "serve".into(),
            resources: Resources { cpu_millis: 1000, memory_mib: 512, disk_mib: 0, gpu_milli: 0, ports: 0 },
            ..Default::default()
        },
        ..Default::default()
    }
}

fn event(run: u64, to: TaskState, at_ms: u64) -> TaskEvent {
    TaskEvent { run, from: None, to, at_ms, host: Some("h1".into()), reason: "R".into(), message: String::new() }
}

pub async fn jobs_config_versions_and_cas(s: Arc<dyn Store>) {
    let id = unique("job");
    let owner = unique("owner");
    let rt = s.create_job(&id, &config(&owner, 3), &JobRuntime::initial(1, 5)).await.expect("create");
    assert_eq!(rt.version, 1);
    assert!(matches!(
        s.create_job(&id, &config(&owner, 3), &JobRuntime::initial(1, 5)).await,
        Err(StoreError::AlreadyExists { .. })
    ));

    let mut c2 = config(&owner, 5);
    c2.name = "web-v2".into();
    s.add_job_config(&id, 2, &c2).await.expect("v2");
    assert!(s.add_job_config(&id, 2, &c2).await.expect_err("v2 twice").is_conflict());
    assert!(s.add_job_config(&id, 4, &c2).await.expect_err("gap").is_conflict());
    assert!(s.add_job_config("no-such-job", 2, &c2).await.expect_err("unknown").is_not_found());
    let (v, latest) = s.get_job_config(&id, None).await.expect("latest");
    assert_eq!((v, latest.name.as_str(), latest.instance_count), (2, "web-v2", 5));
    let (v, first) = s.get_job_config(&id, Some(1)).await.expect("v1");
    assert_eq!((v, first.instance_count), (1, 3));
    assert!(s.get_job_config(&id, Some(9)).await.expect_err("v9").is_not_found());

    let mut next = s.get_job_runtime(&id).await.expect("runtime");
    assert_eq!(next.version, 1);
    next.state = JobState::Running;
    let written = s.cas_job_runtime(&id, 1, &next).await.expect("cas");
    assert_eq!(written.version, 2);
    assert_eq!(s.get_job_runtime(&id).await.expect("runtime"), written);
    match s.cas_job_runtime(&id, 1, &next).await {
        Err(StoreError::Conflict { expected: 1, found, .. }) => assert!(found.is_none() || found == Some(2)),
        other => panic!("stale cas: {other:?}"),
    }
    assert!(s.cas_job_runtime("no-such-job", 1, &next).await.expect_err("unknown").is_not_found());

    s.delete_job(&id).await.expect("delete");
    assert!(s.get_job_runtime(&id).await.expect_err("deleted").is_not_found());
    assert!(s.get_job_config(&id, None).await.expect_err("deleted").is_not_found());
}

pub async fn job_queries_paginate_and_filter(s: Arc<dyn Store>) {
    let owner = unique("owner");
    let mut ids = BTreeSet::new();
    for i in 0..7 {
        let id = unique("q");
        let mut c = config(&owner, 1);
        if i % 2 == 0 {
            c.labels.insert("tier".into(), "gold".into());
        }
        if i == 6 {
            c.pool = "/batch".into();
        }
        let mut rt = s.create_job(&id, &c, &JobRuntime::initial(1, 0)).await.expect("create");
        if i < 2 {
            rt.state = JobState::Succeeded;
            s.cas_job_runtime(&id, 1, &rt).await.expect("cas");
        }
        ids.insert(id);
    }
    // Paginate everything of this owner, 3 at a time.
    let mut seen = BTreeSet::new();
    let mut q = JobQuery { owner: Some(owner.clone()), limit: 3, ..Default::default() };
    let mut pages = 0;
    loop {
        let page = s.query_jobs(&q).await.expect("page");
        pages += 1;
        assert!(page.items.len() <= 3);
        for j in &page.items {
            assert!(seen.insert(j.id.clone()), "duplicate {} across pages", j.id);
        }
        match page.next {
            Some(c) => q.cursor = Some(c),
            None => break,
        }
        assert!(pages < 20, "pagination does not end");
    }
    assert_eq!(seen, ids);
    let count = |q: JobQuery| {
        let s = s.clone();
        async move { s.query_jobs(&q).await.expect("query").items.len() }
    };
    let base = JobQuery { owner: Some(owner.clone()), limit: 100, ..Default::default() };
    assert_eq!(count(JobQuery { labels: [("tier".to_string(), "gold".to_string())].into(), ..base.clone() }).await, 4);
    assert_eq!(count(JobQuery { pool: Some("/batch".into()), ..base.clone() }).await, 1);
    assert_eq!(count(JobQuery { states: vec![JobState::Succeeded], ..base.clone() }).await, 2);
    assert_eq!(count(JobQuery { states: vec![JobState::Initialized, JobState::Succeeded], ..base.clone() }).await, 7);
    assert_eq!(count(JobQuery { owner: Some(unique("nobody")), ..base.clone() }).await, 0);
    assert!(s.query_jobs(&JobQuery { limit: 0, ..base.clone() }).await.is_err());

    let live: BTreeSet<String> =
        s.live_jobs().await.expect("live").into_iter().filter(|j| j.owner == owner).map(|j| j.id).collect();
    assert_eq!(live.len(), 5, "terminal jobs are not live");
}

pub async fn job_create_with_tasks_is_all_or_nothing(s: Arc<dyn Store>) {
    let owner = unique("owner");
    let id = unique("atomic");
    let tasks: Vec<(u32, TaskRuntime)> = (0..250).map(|i| (i, TaskRuntime::initial(1, 0))).collect();
    let rt =
        s.create_job_with_tasks(&id, &config(&owner, 250), &JobRuntime::initial(1, 0), &tasks).await.expect("create");
    assert_eq!(rt.version, 1);
    let stored = s.tasks_of_job(&id, &[]).await.expect("tasks");
    assert_eq!(stored.len(), 250, "every task, across buckets");
    assert!(stored.iter().all(|t| t.runtime.version == 1));
    assert_eq!(s.get_job_config(&id, None).await.expect("config").0, 1);

    // The same id again: refused, and the first job is as it was.
    let other: Vec<(u32, TaskRuntime)> = (0..3).map(|i| (i, TaskRuntime::initial(7, 0))).collect();
    assert!(matches!(
        s.create_job_with_tasks(&id, &config(&owner, 3), &JobRuntime::initial(1, 0), &other).await,
        Err(StoreError::AlreadyExists { .. })
    ));
    assert_eq!(s.tasks_of_job(&id, &[]).await.expect("tasks").len(), 250);
    assert_eq!(s.get_task(&id, 0).await.expect("task").run, 1);

    // A task refused: nothing of the job is written.
    let bad = unique("atomic-bad");
    let dup = vec![(0, TaskRuntime::initial(1, 0)), (0, TaskRuntime::initial(1, 0))];
    assert!(s.create_job_with_tasks(&bad, &config(&owner, 2), &JobRuntime::initial(1, 0), &dup).await.is_err());
    assert!(s.get_job_runtime(&bad).await.expect_err("nothing written").is_not_found());
    assert!(s.get_job_config(&bad, None).await.expect_err("nothing written").is_not_found());
    let mine = s.query_jobs(&JobQuery { owner: Some(owner.clone()), limit: 10, ..Default::default() }).await;
    assert_eq!(mine.expect("query").items.iter().map(|j| j.id.as_str()).collect::<Vec<_>>(), vec![id.as_str()]);
    // The id is free: the refused create took nothing.
    s.create_job_with_tasks(&bad, &config(&owner, 1), &JobRuntime::initial(1, 0), &dup[..1]).await.expect("free id");
}

/// Queries follow a job through state, config and deletion; pages run over
/// more jobs than one read of a partition returns (Cassandra's index).
pub async fn job_queries_follow_changes(s: Arc<dyn Store>) {
    let owner = unique("owner");
    // More than one read of a shard returns (16 ids at a page of 3), so
    // pages must stitch reads of several rounds together.
    const N: usize = 150;
    let ids: Vec<String> = (0..N).map(|i| format!("{}-{i:03}", unique("follow"))).collect();
    for id in &ids {
        s.create_job(id, &config(&owner, 1), &JobRuntime::initial(1, 0)).await.expect("create");
    }
    let ids_of = |q: JobQuery| {
        let s = s.clone();
        async move {
            let mut q = JobQuery { limit: 3, ..q };
            let mut out = Vec::new();
            loop {
                let page = s.query_jobs(&q).await.expect("page");
                out.extend(page.items.into_iter().map(|j| j.id));
                match page.next {
                    Some(c) => q.cursor = Some(c),
                    None => break out.into_iter().collect::<BTreeSet<String>>(),
                }
            }
        }
    };
    let mine = JobQuery { owner: Some(owner.clone()), ..Default::default() };
    assert_eq!(ids_of(mine.clone()).await, ids.iter().cloned().collect());

    // State: RUNNING, back to PENDING, RUNNING again (an entry written
    // again must survive the removal of its earlier self).
    let a = &ids[0];
    let mut rt = s.get_job_runtime(a).await.expect("rt");
    for (v, state) in [(1, JobState::Running), (2, JobState::Pending), (3, JobState::Running)] {
        rt.state = state;
        rt = s.cas_job_runtime(a, v, &rt).await.expect("cas");
    }
    let running = JobQuery { states: vec![JobState::Running], ..mine.clone() };
    assert_eq!(ids_of(running.clone()).await, BTreeSet::from([a.clone()]));
    assert!(ids_of(JobQuery { states: vec![JobState::Pending], ..mine.clone() }).await.is_empty());
    let live: BTreeSet<String> =
        s.live_jobs().await.expect("live").into_iter().filter(|j| j.owner == owner).map(|j| j.id).collect();
    assert_eq!(live.len(), N);
    rt.state = JobState::Succeeded;
    s.cas_job_runtime(a, 4, &rt).await.expect("finish");
    assert!(ids_of(running).await.is_empty());
    let live: BTreeSet<String> =
        s.live_jobs().await.expect("live").into_iter().filter(|j| j.owner == owner).map(|j| j.id).collect();
    assert_eq!(live.len(), N - 1, "a finished job is not live");

    // Config: a new pool and label; the old pool no longer finds the job.
    let b = &ids[1];
    let mut c2 = config(&owner, 1);
    c2.pool = format!("/{}", unique("moved"));
    c2.labels.insert("tier".into(), "gold".into());
    s.add_job_config(b, 2, &c2).await.expect("v2");
    assert_eq!(
        ids_of(JobQuery { pool: Some(c2.pool.clone()), ..Default::default() }).await,
        BTreeSet::from([b.clone()])
    );
    let old_pool = JobQuery { pool: Some("/prod/web".into()), ..mine.clone() };
    assert_eq!(ids_of(old_pool).await.len(), N - 1);
    let gold = JobQuery { labels: [("tier".to_string(), "gold".to_string())].into(), ..mine.clone() };
    assert_eq!(ids_of(gold).await, BTreeSet::from([b.clone()]));

    // Deleted: gone from every query; the id created again is found once.
    s.delete_job(b).await.expect("delete");
    assert!(ids_of(JobQuery { pool: Some(c2.pool.clone()), ..Default::default() }).await.is_empty());
    assert_eq!(ids_of(mine.clone()).await.len(), N - 1);
    s.create_job(b, &config(&owner, 1), &JobRuntime::initial(1, 0)).await.expect("again");
    assert_eq!(ids_of(mine).await.len(), N);
}

pub async fn tasks_batch_create_query_and_cas(s: Arc<dyn Store>) {
    let id = unique("tasks");
    let mut c = config(&unique("owner"), 2000);
    let mut special = c.default_task.clone();
    special.command = "special".into();
    c.instance_overrides.insert(1500, special);
    s.create_job(&id, &c, &JobRuntime::initial(1, 0)).await.expect("job");
    // Instances in two partitions/buckets on Cassandra.
    let instances: Vec<u32> = (0..5).chain(1500..1505).collect();
    let tasks: Vec<(u32, TaskRuntime)> = instances.iter().map(|&i| (i, TaskRuntime::initial(1, 0))).collect();
    s.create_tasks(&id, &tasks).await.expect("create tasks");
    // A batch with one existing instance writes nothing.
    let again = vec![(10, TaskRuntime::initial(1, 0)), (3, TaskRuntime::initial(1, 0))];
    assert!(matches!(s.create_tasks(&id, &again).await, Err(StoreError::AlreadyExists { .. })));
    assert!(s.get_task(&id, 10).await.expect_err("not half-written").is_not_found());
    assert!(s.create_tasks("no-such-job", &again).await.expect_err("unknown job").is_not_found());

    let all = s.tasks_of_job(&id, &[]).await.expect("all");
    assert_eq!(all.iter().map(|t| t.instance).collect::<Vec<_>>(), instances);
    assert!(all.iter().all(|t| t.runtime.version == 1 && t.runtime.run == 1));

    let mut rt = s.get_task(&id, 1501).await.expect("get");
    rt.state = TaskState::Running;
    rt.host = Some("h7".into());
    let w = s.cas_task(&id, 1501, 1, &rt).await.expect("cas");
    assert_eq!(w.version, 2);
    assert_eq!(s.get_task(&id, 1501).await.expect("get"), w);
    assert!(s.cas_task(&id, 1501, 1, &rt).await.expect_err("stale").is_conflict());
    assert!(s.cas_task(&id, 999, 1, &rt).await.expect_err("unknown").is_not_found());

    let running = s.tasks_of_job(&id, &[TaskState::Running]).await.expect("running");
    assert_eq!(running.iter().map(|t| t.instance).collect::<Vec<_>>(), vec![1501]);
    let live: Vec<TaskState> = paceline_storage::types::live_task_states();
    assert_eq!(s.tasks_of_job(&id, &live).await.expect("live").len(), 10);

    // A batch of CAS writes: per-item outcomes.
    let mut done = TaskRuntime::initial(1, 0);
    done.state = TaskState::Succeeded;
    let writes = vec![
        TaskCas { instance: 0, expected_version: 1, runtime: done.clone() },
        TaskCas { instance: 1501, expected_version: 1, runtime: done.clone() },
        TaskCas { instance: 2, expected_version: 1, runtime: done.clone() },
        TaskCas { instance: 77, expected_version: 1, runtime: done.clone() },
    ];
    let r = s.cas_tasks(&id, &writes).await.expect("batch");
    assert_eq!(r[0].as_ref().ok(), Some(&2));
    assert!(r[1].as_ref().expect_err("stale").is_conflict());
    assert_eq!(r[2].as_ref().ok(), Some(&2));
    assert!(r[3].as_ref().expect_err("unknown").is_not_found());
    assert_eq!(s.tasks_of_job(&id, &[TaskState::Succeeded]).await.expect("succeeded").len(), 2);
    assert_eq!(s.tasks_of_job(&id, &live).await.expect("live").len(), 8);

    // Task configs are stored per job version.
    assert_eq!(s.task_spec(&id, 1, 1500).await.expect("spec").command, "special");
    assert_eq!(s.task_spec(&id, 1, 1).await.expect("spec").command, "serve");

    // A restart is a new run with its own run id.
    let cur = s.get_task(&id, 0).await.expect("get");
    let next = cur.next_run(9);
    let w = s.cas_task(&id, 0, cur.version, &next).await.expect("restart");
    assert_eq!((w.run, w.prev_run), (2, 1));
}

pub async fn task_events_are_bounded_newest_first(s: Arc<dyn Store>) {
    let id = unique("ev");
    s.create_job(&id, &config(&unique("o"), 1), &JobRuntime::initial(1, 0)).await.expect("job");
    let events: Vec<TaskEvent> = (0..120).map(|i| event(1, TaskState::Running, 1_000 + i)).collect();
    for chunk in events.chunks(40) {
        s.append_task_events(&id, 0, chunk).await.expect("append");
    }
    // A retried append does not duplicate.
    s.append_task_events(&id, 0, &events[119..]).await.expect("append again");
    let got = s.task_events(&id, 0, 1000).await.expect("events");
    assert_eq!(got.len(), paceline_storage::limits::MAX_EVENTS_PER_TASK);
    assert_eq!(got[0].at_ms, 1_119);
    assert!(got.windows(2).all(|w| w[0].at_ms > w[1].at_ms));
    assert_eq!(s.task_events(&id, 0, 5).await.expect("five").len(), 5);
    assert!(s.task_events(&id, 1, 5).await.expect("none").is_empty());
}

/// A task's events across many runs (a crash loop) come back newest
/// first, apart from another task's, and go with their job.
pub async fn task_events_of_many_runs_come_newest_first_and_go_with_the_job(s: Arc<dyn Store>) {
    let id = unique("evruns");
    s.create_job(&id, &config(&unique("o"), 1), &JobRuntime::initial(1, 0)).await.expect("job");
    // Instance 0: runs 1..=40, three events each; instance 150: runs 1..=3.
    let mut at = 10_000;
    for run in 1..=40u64 {
        let mut burst = Vec::new();
        for to in [TaskState::Launched, TaskState::Running, TaskState::Failed] {
            at += 1;
            burst.push((0, event(run, to, at)));
            if run <= 3 {
                burst.push((150, event(run, to, at)));
            }
        }
        s.append_job_events(&id, &burst).await.expect("append");
    }
    let got = s.task_events(&id, 0, 1000).await.expect("events");
    assert_eq!(got.len(), paceline_storage::limits::MAX_EVENTS_PER_TASK);
    assert_eq!((got[0].at_ms, got[0].run, got[0].to), (at, 40, TaskState::Failed));
    assert!(got.windows(2).all(|w| w[0].at_ms > w[1].at_ms), "newest first across runs");
    // The 100 newest of 120 events: run 7's last one, then runs 8 to 40.
    assert_eq!(got.last().map(|e| (e.run, e.to)), Some((7, TaskState::Failed)));
    let few = s.task_events(&id, 0, 4).await.expect("four");
    assert_eq!(few.iter().map(|e| e.run).collect::<Vec<_>>(), [40, 40, 40, 39]);
    let other = s.task_events(&id, 150, 100).await.expect("other task");
    assert_eq!(other.len(), 9);
    assert!(other.iter().all(|e| e.run <= 3));
    s.delete_job(&id).await.expect("delete");
    for instance in [0, 150] {
        match s.task_events(&id, instance, 100).await {
            Ok(left) => assert!(left.is_empty(), "events of a deleted job: {left:?}"),
            Err(e) => assert!(e.is_not_found(), "{e}"),
        }
    }
}

pub async fn updates_and_progress(s: Arc<dyn Store>) {
    let job = unique("upjob");
    s.create_job(&job, &config(&unique("o"), 3), &JobRuntime::initial(1, 0)).await.expect("job");
    let u = Update {
        id: unique("upd"),
        job_id: job.clone(),
        from_config_version: 1,
        to_config_version: 2,
        state: UpdateState::Initialized,
        spec: UpdateSpec::default(),
        instances: vec![0, 1, 2],
        created_at_ms: 10,
        updated_at_ms: 10,
        message: String::new(),
        version: 0,
    };
    let stored = s.create_update(&u).await.expect("create");
    assert_eq!(stored.version, 1);
    assert!(matches!(s.create_update(&u).await, Err(StoreError::AlreadyExists { .. })));
    let mut orphan = u.clone();
    orphan.id = unique("upd");
    orphan.job_id = "no-such-job".into();
    assert!(s.create_update(&orphan).await.expect_err("unknown job").is_not_found());
    let mut next = stored.clone();
    next.state = UpdateState::RollingForward;
    let w = s.cas_update(&u.id, 1, &next).await.expect("cas");
    assert_eq!(w.version, 2);
    assert!(s.cas_update(&u.id, 1, &next).await.expect_err("stale").is_conflict());
    assert_eq!(s.get_update(&u.id).await.expect("get"), w);
    assert_eq!(s.updates_of_job(&job).await.expect("of job"), vec![w]);

    let progress: Vec<InstanceProgress> = [0u32, 1, 2, 1200]
        .iter()
        .map(|&i| InstanceProgress {
            instance: i,
            state: InstanceUpdateState::InProgress,
            attempts: 1,
            updated_at_ms: 5,
        })
        .collect();
    s.put_update_progress(&u.id, &progress).await.expect("progress");
    let mut p1 = progress[1].clone();
    p1.state = InstanceUpdateState::Succeeded;
    s.put_update_progress(&u.id, &[p1.clone()]).await.expect("progress upsert");
    let got = s.update_progress(&u.id).await.expect("get progress");
    assert_eq!(got.len(), 4);
    assert_eq!(got[1], p1);
    assert_eq!(got[3].instance, 1200);
    assert!(s.put_update_progress("no-such-update", &progress).await.expect_err("unknown").is_not_found());
}

pub async fn pools_are_opaque_blobs(s: Arc<dyn Store>) {
    let root = format!("/{}", unique("pool"));
    let child = format!("{root}/batch");
    s.put_pool(&root, b"{\"reservation\":1}").await.expect("put");
    s.put_pool(&child, b"child").await.expect("put");
    s.put_pool(&child, b"child-v2").await.expect("overwrite");
    assert_eq!(s.get_pool(&child).await.expect("get"), b"child-v2");
    let listed: Vec<String> =
        s.list_pools().await.expect("list").into_iter().map(|p| p.0).filter(|p| p.starts_with(&root)).collect();
    assert_eq!(listed, vec![root.clone(), child.clone()]);
    s.delete_pool(&child).await.expect("delete");
    assert!(s.get_pool(&child).await.expect_err("gone").is_not_found());
    let big = vec![0u8; paceline_storage::limits::MAX_POOL_SPEC + 1];
    assert!(matches!(s.put_pool(&child, &big).await, Err(StoreError::TooLarge { .. })));
    assert!(s.get_pool(&child).await.expect_err("nothing written").is_not_found());
    assert!(matches!(s.put_pool("relative", b"x").await, Err(StoreError::Invalid(_))));
}

pub async fn secrets_are_sealed_records_per_pool(s: Arc<dyn Store>) {
    let dir = tempfile::tempdir().expect("dir");
    let key = paceline_storage::secrets::SecretKey::load_or_create(&dir.path().join("key")).expect("key");
    let pool = format!("/{}", unique("sec"));
    let other = format!("{pool}-other");
    let mut a = key.seal(&pool, "db-password", b"hunter2-conformance").expect("seal");
    a.version = 1;
    a.updated_by = "alice".into();
    s.put_secret(&a).await.expect("put");
    s.put_secret(&key.seal(&pool, "api-key", b"k1").expect("seal")).await.expect("put");
    s.put_secret(&key.seal(&other, "db-password", b"elsewhere").expect("seal")).await.expect("put");
    let got = s.get_secret(&pool, "db-password").await.expect("get");
    assert_eq!((got.version, got.updated_by.as_str()), (1, "alice"));
    assert_eq!(key.open(&got).expect("open").expose(), "hunter2-conformance");
    let names: Vec<String> = s.list_secrets(&pool).await.expect("list").into_iter().map(|x| x.name).collect();
    assert_eq!(names, vec!["api-key".to_string(), "db-password".to_string()]);
    // Replaced whole.
    let mut b = key.seal(&pool, "db-password", b"second").expect("seal");
    b.version = 2;
    s.put_secret(&b).await.expect("replace");
    assert_eq!(key.open(&s.get_secret(&pool, "db-password").await.expect("get")).expect("open").expose(), "second");
    s.delete_secret(&pool, "db-password").await.expect("delete");
    assert!(s.get_secret(&pool, "db-password").await.expect_err("gone").is_not_found());
    s.delete_secret(&pool, "db-password").await.expect("absent is fine");
    assert_eq!(s.get_secret(&other, "db-password").await.expect("other pool untouched").pool, other);
    // Bad names are refused whole.
    let mut bad = key.seal(&pool, "Bad Name", b"x").expect("seal");
    bad.version = 1;
    assert!(matches!(s.put_secret(&bad).await, Err(StoreError::Invalid(_))));
    assert!(s.get_secret(&pool, "Bad Name").await.expect_err("nothing written").is_not_found());
}

fn plugin(slot: &str, version: &str, bytes: &[u8], at: u64) -> PluginVersion {
    PluginVersion {
        slot: slot.into(),
        name: "binpack".into(),
        version: version.into(),
        sha256: hex::encode(Sha256::digest(bytes)),
        world: "placement".into(),
        deployed_at_ms: at,
        state: "ready".into(),
        size: bytes.len() as u64,
    }
}

pub async fn plugins_versions_bytes_and_active_slot(s: Arc<dyn Store>) {
    let slot = format!("placement/{}", unique("k"));
    // 2.5 MB: more than one chunk where the backend chunks.
    let big: Vec<u8> = (0..2_500_000u32).map(|i| (i % 251) as u8).collect();
    let v1 = plugin(&slot, "1.0.0", b"\0asm-one", 1);
    let v2 = plugin(&slot, "2.0.0", &big, 2);
    s.put_plugin_version(&v1, b"\0asm-one").await.expect("v1");
    s.put_plugin_version(&v2, &big).await.expect("v2");
    assert!(matches!(s.put_plugin_version(&v1, b"\0asm-one").await, Err(StoreError::AlreadyExists { .. })));
    let mut bad = plugin(&slot, "3.0.0", b"abc", 3);
    bad.sha256 = "00".repeat(32);
    assert!(matches!(s.put_plugin_version(&bad, b"abc").await, Err(StoreError::Invalid(_))));
    assert!(s.plugin_bytes(&slot, "binpack", "3.0.0").await.expect_err("nothing written").is_not_found());

    assert_eq!(s.plugin_bytes(&slot, "binpack", "2.0.0").await.expect("bytes"), big);
    let listed = s.plugin_versions(Some(&slot)).await.expect("versions");
    assert_eq!(listed.iter().map(|v| v.version.as_str()).collect::<Vec<_>>(), vec!["1.0.0", "2.0.0"]);
    assert!(s.plugin_versions(None).await.expect("all").iter().any(|v| v.slot == slot));

    s.set_plugin_state(&slot, "binpack", "2.0.0", "active").await.expect("state");
    assert_eq!(s.plugin_versions(Some(&slot)).await.expect("versions")[1].state, "active");
    assert!(s.set_plugin_state(&slot, "binpack", "9", "active").await.expect_err("unknown").is_not_found());

    assert_eq!(s.active_plugin(&slot).await.expect("none yet"), None);
    s.set_active_plugin(&slot, "binpack@1.0.0").await.expect("activate v1");
    s.set_active_plugin(&slot, "binpack@2.0.0").await.expect("activate v2");
    assert_eq!(s.active_plugin(&slot).await.expect("active").as_deref(), Some("binpack@2.0.0"));
    assert!(s.set_active_plugin(&slot, "binpack@9.9.9").await.expect_err("unknown").is_not_found());
    assert_eq!(s.slot_histories().await.expect("histories")[&slot], vec!["binpack@1.0.0", "binpack@2.0.0"]);
    // Rollback: the registry rewrites the history.
    s.set_slot_history(&slot, &["binpack@1.0.0".to_string()]).await.expect("rollback");
    assert_eq!(s.active_plugin(&slot).await.expect("active").as_deref(), Some("binpack@1.0.0"));
}

pub async fn hosts_and_provider_ids(s: Arc<dyn Store>) {
    let name = unique("host");
    let mut h = HostRecord {
        hostname: name.clone(),
        provider: "agent".into(),
        agent_id: Some("a1".into()),
        address: Some("127.0.0.1:7070".into()),
        total: Resources { cpu_millis: 8000, memory_mib: 16384, disk_mib: 100_000, gpu_milli: 1000, ports: 100 },
        attributes: [("zone".to_string(), "a".to_string())].into(),
        gpus: vec![paceline_model::gpu::GpuDevice { index: 0, model: "A100".into() }],
        state: MaintenanceState::Up,
        registered_at_ms: 1,
        updated_at_ms: 1,
    };
    s.put_host(&h).await.expect("put");
    h.state = MaintenanceState::Draining;
    s.put_host(&h).await.expect("update");
    assert_eq!(s.get_host(&name).await.expect("get"), h);
    assert!(s.list_hosts().await.expect("list").iter().any(|x| x == &h));
    s.delete_host(&name).await.expect("delete");
    assert!(s.get_host(&name).await.expect_err("gone").is_not_found());

    let provider = unique("mesos");
    assert_eq!(s.get_provider_id(&provider).await.expect("none"), None);
    s.put_provider_id(&provider, "framework-1").await.expect("put");
    s.put_provider_id(&provider, "framework-2").await.expect("put");
    assert_eq!(s.get_provider_id(&provider).await.expect("get").as_deref(), Some("framework-2"));
}

pub async fn bad_input_is_refused_whole(s: Arc<dyn Store>) {
    // A config over the size limit (each string is within its own limit).
    let id = unique("big");
    let mut c = config(&unique("o"), 1);
    c.default_task.args = vec!["x".repeat(60 * 1024); 100];
    assert!(matches!(s.create_job(&id, &c, &JobRuntime::initial(1, 0)).await, Err(StoreError::TooLarge { .. })));
    assert!(s.get_job_runtime(&id).await.expect_err("nothing written").is_not_found());
    assert!(s.get_job_config(&id, None).await.expect_err("nothing written").is_not_found());
    // An invalid config.
    let mut c = config(&unique("o"), 1);
    c.pool = "no-slash".into();
    assert!(matches!(s.create_job(&id, &c, &JobRuntime::initial(1, 0)).await, Err(StoreError::Invalid(_))));
    // Empty and oversize ids.
    assert!(matches!(s.create_job("", &config("o", 1), &JobRuntime::initial(1, 0)).await, Err(StoreError::Invalid(_))));
    let long = "j".repeat(paceline_storage::limits::MAX_ID + 1);
    assert!(matches!(
        s.create_job(&long, &config("o", 1), &JobRuntime::initial(1, 0)).await,
        Err(StoreError::TooLarge { .. })
    ));

    // A task batch with one oversize runtime writes none of the batch.
    let id = unique("badtasks");
    s.create_job(&id, &config(&unique("o"), 3), &JobRuntime::initial(1, 0)).await.expect("job");
    let mut huge = TaskRuntime::initial(1, 0);
    huge.message = "m".repeat(70 * 1024);
    let batch = vec![(0, TaskRuntime::initial(1, 0)), (1, huge.clone())];
    assert!(s.create_tasks(&id, &batch).await.is_err());
    assert!(s.tasks_of_job(&id, &[]).await.expect("none").is_empty());
    s.create_tasks(&id, &[(0, TaskRuntime::initial(1, 0))]).await.expect("ok");
    assert!(s.cas_task(&id, 0, 1, &huge).await.is_err());
    assert_eq!(s.get_task(&id, 0).await.expect("unchanged").version, 1);
    // Instance beyond the job limit.
    assert!(matches!(
        s.create_tasks(&id, &[(2_000_000, TaskRuntime::initial(1, 0))]).await,
        Err(StoreError::Invalid(_))
    ));
    // Unknown ids.
    assert!(s.get_task(&id, 2).await.expect_err("unknown").is_not_found());
    assert!(s.get_update("no-such-update").await.expect_err("unknown").is_not_found());
    assert!(s.get_host("no-such-host").await.expect_err("unknown").is_not_found());
    assert!(s.delete_job("no-such-job").await.expect_err("unknown").is_not_found());
    let mut r = TaskRuntime::initial(1, 0);
    r.run = 0;
    assert!(matches!(s.cas_task(&id, 0, 1, &r).await, Err(StoreError::Invalid(_))));
}

pub async fn cas_race_two_writers_exactly_one_wins(s: Arc<dyn Store>) {
    let id = unique("race");
    s.create_job(&id, &config(&unique("o"), 1), &JobRuntime::initial(1, 0)).await.expect("job");
    s.create_tasks(&id, &[(0, TaskRuntime::initial(1, 0))]).await.expect("task");
    let rounds = 1000u64;
    let mut version = 1u64;
    let mut wins = [0u32; 2];
    for round in 0..rounds {
        let attempt = |writer: usize| {
            let s = s.clone();
            let id = id.clone();
            let mut rt = TaskRuntime::initial(1, round);
            rt.message = format!("writer {writer} round {round}");
            tokio::spawn(async move { s.cas_task(&id, 0, version, &rt).await })
        };
        let (a, b) = (attempt(0), attempt(1));
        let (a, b) = (a.await.expect("join"), b.await.expect("join"));
        match (&a, &b) {
            (Ok(w), Err(e)) | (Err(e), Ok(w)) => {
                assert!(e.is_conflict(), "round {round}: loser got {e}");
                assert_eq!(w.version, version + 1);
                wins[usize::from(a.is_err())] += 1;
            }
            _ => panic!("round {round}: expected exactly one winner, got {a:?} and {b:?}"),
        }
        version += 1;
        let stored = s.get_task(&id, 0).await.expect("get");
        assert_eq!(stored.version, version, "round {round}");
    }
    assert_eq!(wins[0] + wins[1], rounds as u32);
    println!("{}: writer wins {wins:?} over {rounds} rounds", s.backend());
}

/// Job runtimes and creates under concurrent writers of one handle: two
/// compare-and-sets of one version, exactly one wins; two creates of one
/// id, exactly one is made and the other told it exists (Cassandra decides
/// both in the handle's cache, decision 0049).
pub async fn job_cas_and_create_races_have_one_winner(s: Arc<dyn Store>) {
    let id = unique("job-race");
    s.create_job(&id, &config(&unique("o"), 1), &JobRuntime::initial(1, 0)).await.expect("job");
    for round in 0..100u64 {
        let attempt = |writer: u64| {
            let (s, id) = (s.clone(), id.clone());
            let mut rt = JobRuntime::initial(1, round);
            rt.state = if writer == 0 { JobState::Running } else { JobState::Pending };
            rt.message = format!("writer {writer} round {round}");
            tokio::spawn(async move { s.cas_job_runtime(&id, round + 1, &rt).await })
        };
        let (a, b) = (attempt(0), attempt(1));
        let (a, b) = (a.await.expect("join"), b.await.expect("join"));
        let won = match (&a, &b) {
            (Ok(w), Err(e)) | (Err(e), Ok(w)) => {
                assert!(e.is_conflict(), "round {round}: loser got {e}");
                w.clone()
            }
            _ => panic!("round {round}: expected exactly one winner, got {a:?} and {b:?}"),
        };
        let stored = s.get_job_runtime(&id).await.expect("get");
        assert_eq!((stored.version, &stored.message), (round + 2, &won.message), "round {round}");
    }
    let by_state = |state| JobQuery { states: vec![state], limit: 1000, ..Default::default() };
    let last = s.get_job_runtime(&id).await.expect("get").state;
    let other = if last == JobState::Running { JobState::Pending } else { JobState::Running };
    let found = |p: paceline_storage::Page<paceline_storage::JobSummary>| p.items.iter().any(|j| j.id == id);
    assert!(found(s.query_jobs(&by_state(last)).await.expect("query")), "found by its state");
    assert!(!found(s.query_jobs(&by_state(other)).await.expect("query")), "not by the state it left");

    for round in 0..20 {
        let id = unique(&format!("create-race-{round}"));
        let create = |n: u32| {
            let (s, id) = (s.clone(), id.clone());
            tokio::spawn(async move { s.create_job(&id, &config("o", n), &JobRuntime::initial(1, 0)).await })
        };
        let (a, b) = (create(1), create(2));
        let (a, b) = (a.await.expect("join"), b.await.expect("join"));
        let winner = match (&a, &b) {
            (Ok(_), Err(StoreError::AlreadyExists { .. })) => 1,
            (Err(StoreError::AlreadyExists { .. }), Ok(_)) => 2,
            _ => panic!("round {round}: expected one create and one refusal, got {a:?} and {b:?}"),
        };
        assert_eq!(s.get_job_config(&id, None).await.expect("config").1.instance_count, winner, "round {round}");
    }
}

/// Leader fencing with two handles on the same database (two servers that
/// both believe they lead): the later claim fences the earlier handle, whose
/// writes then fail and change nothing, while reads go on.
pub async fn leader_fencing(a: Arc<dyn Store>, b: Arc<dyn Store>) {
    let base = 1_000;
    let id = unique("fenced");
    assert!(!a.is_fenced() && !b.is_fenced());
    a.claim_leadership(base + 5).await.expect("first claim");
    let rt = a.create_job(&id, &config("o", 1), &JobRuntime::initial(1, 0)).await.expect("the leader writes");
    a.claim_leadership(base + 5).await.expect("claiming the same epoch again is fine");

    // An older epoch cannot take over.
    match b.claim_leadership(base + 3).await {
        Err(StoreError::Fenced { mine, current }) => assert_eq!((mine, current), (base + 3, base + 5)),
        other => panic!("an older epoch must be refused, got {other:?}"),
    }
    // A newer one does, and from then on `a` writes nothing.
    b.claim_leadership(base + 7).await.expect("newer claim");
    let mut next = rt.clone();
    next.state = JobState::Running;
    match a.cas_job_runtime(&id, rt.version, &next).await {
        Err(StoreError::Fenced { mine, current }) => assert_eq!((mine, current), (base + 5, base + 7)),
        other => panic!("the old leader's write must be fenced, got {other:?}"),
    }
    assert!(a.is_fenced(), "fenced for good");
    assert!(
        a.create_job(&unique("late"), &config("o", 1), &JobRuntime::initial(1, 0))
            .await
            .expect_err("still fenced")
            .is_fenced()
    );
    assert!(a.put_pool(&format!("/{}", unique("p")), b"x").await.expect_err("every kind of write").is_fenced());
    assert_eq!(b.get_job_runtime(&id).await.expect("read").version, rt.version, "the fenced write changed nothing");
    assert_eq!(a.get_job_runtime(&id).await.expect("the fenced handle still reads").version, rt.version);
    assert!(a.claim_leadership(base + 6).await.expect_err("cannot come back with an older epoch").is_fenced());

    // The new leader writes.
    let done = b.cas_job_runtime(&id, rt.version, &next).await.expect("the new leader writes");
    assert_eq!(done.version, rt.version + 1);
    assert!(!b.is_fenced());
}

fn audit_record(id: &str, at_ms: u64, principal: &str, method: &str, job: &str) -> paceline_storage::AuditRecord {
    paceline_storage::AuditRecord {
        at_ms,
        id: id.into(),
        principal: principal.into(),
        role: "user".into(),
        method: method.into(),
        target: job.into(),
        job_id: job.into(),
        summary: "instances=[0]".into(),
        code: "OK".into(),
        message: String::new(),
    }
}

/// The audit log: duplicates stored once, filters, newest first, limits,
/// a bad batch refused whole, pruning by age and then by row count.
pub async fn audit_log_filters_newest_first_and_prunes(s: Arc<dyn Store>) {
    use paceline_storage::AuditQuery;
    const CREATE: &str = "/paceline.v1.JobService/CreateJob";
    const KILL: &str = "/paceline.v1.JobService/KillJob";
    let (p, p2, old, job) = (unique("alice"), unique("bob"), unique("old"), unique("job"));
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_millis() as u64;
    let base = now - 10_000;
    let ids: Vec<String> = (0..5).map(|i| unique(&format!("a{i}"))).collect();
    let records: Vec<_> = (0..5u64)
        .map(|i| {
            let who = if i % 2 == 0 { &p } else { &p2 };
            let method = if i == 1 { KILL } else { CREATE };
            let j = if i < 3 { job.as_str() } else { "" };
            audit_record(&ids[i as usize], base + i, who, method, j)
        })
        .collect();
    s.append_audit(&records[..3]).await.expect("append");
    s.append_audit(&records[2..]).await.expect("append with a duplicate");
    let at = |q: AuditQuery| {
        let s = s.clone();
        async move {
            s.query_audit(&q).await.expect("query").iter().map(|r| r.at_ms as i64 - base as i64).collect::<Vec<_>>()
        }
    };
    let mine = || AuditQuery { principal: Some(p.clone()), ..Default::default() };
    assert_eq!(at(mine()).await, vec![4, 2, 0], "by principal, newest first, the duplicate once");
    let got = s.query_audit(&mine()).await.expect("query");
    assert_eq!(got[2], records[0], "stored as written");
    assert_eq!(at(AuditQuery { job_id: Some(job.clone()), ..Default::default() }).await, vec![2, 1, 0]);
    for method in ["KillJob", KILL] {
        let q = AuditQuery { principal: Some(p2.clone()), method: Some(method.into()), ..Default::default() };
        assert_eq!(at(q).await, vec![1], "method {method}");
    }
    let window = AuditQuery { since_ms: Some(base + 1), until_ms: Some(base + 4), ..mine() };
    assert_eq!(at(window).await, vec![2], "since is inclusive, until exclusive");
    assert_eq!(at(AuditQuery { limit: 2, ..mine() }).await, vec![4, 2]);

    // A bad record refuses the whole batch.
    let bad = unique("bad");
    let mut too_long = audit_record(&unique("b"), base, &bad, CREATE, "");
    too_long.summary = "x".repeat(paceline_storage::audit::MAX_AUDIT_FIELD + 1);
    let batch = [audit_record(&unique("g"), base, &bad, CREATE, ""), too_long];
    assert!(matches!(s.append_audit(&batch).await, Err(StoreError::Invalid(_))));
    assert!(matches!(s.append_audit(&[audit_record("", base, &bad, CREATE, "")]).await, Err(StoreError::Invalid(_))));
    assert!(s.query_audit(&AuditQuery { principal: Some(bad), ..Default::default() }).await.expect("q").is_empty());

    // By age: records 40 days old go, today's stay.
    const DAY: u64 = 86_400_000;
    let olds = [
        audit_record(&unique("o1"), base - 40 * DAY, &old, CREATE, ""),
        audit_record(&unique("o2"), base - 41 * DAY, &old, CREATE, ""),
    ];
    s.append_audit(&olds).await.expect("append old");
    assert_eq!(at(AuditQuery { principal: Some(old.clone()), ..Default::default() }).await.len(), 2);
    let gone = s.prune_audit(base - 30 * DAY, u64::MAX).await.expect("prune by age");
    assert!(gone >= 2, "{gone} pruned");
    assert!(at(AuditQuery { principal: Some(old), ..Default::default() }).await.is_empty());
    assert_eq!(at(mine()).await, vec![4, 2, 0], "recent records stay");

    // By count: only the newest two remain.
    s.prune_audit(0, 2).await.expect("prune by count");
    assert_eq!(at(AuditQuery { since_ms: Some(base), ..Default::default() }).await, vec![4, 3]);
}

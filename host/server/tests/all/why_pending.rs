//! Issue 23 item 4, "why pending, always" (decision 0026), end to end: the
//! real job manager, resource manager, placement engine (Wasm policies) and
//! host manager over simulated hosts, read through the API's own services
//! (`JobService`, `TaskService`), one test per kind of wait, asserting on the
//! kind and on the words.

use crate::support;

use std::sync::Arc;

use paceline_api::auth::Principal;
use paceline_api::jobs::JobApi;
use paceline_api::tasks::TaskApi;
use paceline_model::job::{JobConfig, JobKind};
use paceline_model::pool::{PerKind, PoolSpec, UNLIMITED};
use paceline_model::{Constraint, Labels, Resources};
use paceline_plugin::DeployOptions;
use paceline_proto::v1 as pb;
use pb::job_service_server::JobService;
use pb::task_service_server::TaskService;
use support::*;

/// The API's job and task services over the test cluster.
struct Api {
    jobs: JobApi,
    tasks: TaskApi,
}

fn admin<T>(message: T) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request.extensions_mut().insert(Arc::new(Principal::anonymous()));
    request
}

impl Api {
    fn over(c: &SimCluster) -> Api {
        Api {
            jobs: JobApi::new(c.cluster.jobs.clone(), c.cluster.hosts.clone()),
            tasks: TaskApi::new(c.cluster.jobs.clone(), c.cluster.hosts.clone()),
        }
    }

    async fn create(&self, config: &JobConfig) -> pb::CreateJobResponse {
        let spec = Some(paceline_proto::convert::job_spec_pb(config));
        self.jobs.create_job(admin(pb::CreateJobRequest { spec })).await.expect("created").into_inner()
    }

    async fn task(&self, job_id: &str, instance: u32) -> pb::Task {
        let task = Some(pb::TaskRef { job_id: job_id.into(), instance });
        self.tasks.get_task(admin(pb::GetTaskRequest { task })).await.expect("task").into_inner().task.expect("task")
    }

    async fn status(&self, id: &str) -> pb::JobStatus {
        let job = self
            .jobs
            .get_job(admin(pb::GetJobRequest { id: id.into(), config_version: None }))
            .await
            .expect("job")
            .into_inner()
            .job;
        job.and_then(|j| j.status).expect("status")
    }

    /// Steps the cluster until instance `instance` of `job_id` waits for
    /// `kind`; returns the task as the API shows it then.
    async fn wait_for_kind(&self, c: &SimCluster, job_id: &str, instance: u32, kind: &str) -> pb::Task {
        for _ in 0..40 {
            let t = self.task(job_id, instance).await;
            if t.pending_kind == kind {
                return t;
            }
            c.step(250).await;
        }
        let t = self.task(job_id, instance).await;
        panic!("{job_id}/{instance} never waited for {kind}: {} {:?}", t.pending_kind, t.pending_reason);
    }
}

fn sized(kind: JobKind, n: u32, cpu_millis: u64) -> JobConfig {
    let mut spec = job(kind, n);
    spec.default_task.resources = Resources::new(cpu_millis, 256, 10, 0);
    spec
}

/// No sentence names a lease, a run, a handle or an internal gang number.
fn no_internal_ids(text: &str) {
    for word in ["lease", "run_id", "handle", "gang 0", "gang 1", "uuid"] {
        assert!(!text.contains(word), "internal word {word:?} in {text:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_that_can_never_fit_is_warned_at_submit_and_fits_once_a_big_host_joins() {
    let dir = tempfile::tempdir().expect("tempdir");
    let c = SimCluster::start(dir.path(), shapes(2)).await;
    let api = Api::over(&c);
    let created = api.create(&sized(JobKind::Batch, 2, 8_000)).await;
    assert_eq!(
        created.warnings,
        vec!["instances 0-1 can never fit on any host in the cluster: needs 8 cpu; largest host has 4 cpu".to_string()],
        "accepted, with a warning"
    );
    let id = created.id;

    let t = api.wait_for_kind(&c, &id, 0, "never_fits").await;
    assert_eq!(
        t.pending_reason,
        "can never fit on any host in the cluster: needs 8 cpu; largest host has 4 cpu (0/2 hosts fit: 2 too small (cpu))"
    );
    no_internal_ids(&t.pending_reason);
    let status = api.status(&id).await;
    assert_eq!(status.pending_summary, "2 pending: 2 never fit (needs 8 cpu; largest host has 4 cpu)");
    assert_eq!(status.warnings, created.warnings, "the job's state keeps the warning while it holds");

    // A host big enough joins: no longer "never fits", and the job runs.
    c.sim.add_host("big", Resources::new(16_000, 32_768, 100_000, 0), Labels::default()).await.expect("joins");
    c.step(250).await;
    let status = api.status(&id).await;
    assert!(status.warnings.is_empty(), "re-evaluated when the host joined: {:?}", status.warnings);
    assert!(!status.pending_summary.contains("never fit"), "{}", status.pending_summary);
    let placed = c
        .run_until(250, 80, async |c| {
            let info = c.cluster.jobs.get(&id).await.expect("job");
            info.tasks.iter().all(|t| t.host.as_deref() == Some("big"))
        })
        .await;
    assert!(placed, "both instances placed on the new host");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_waiting_for_room_counts_the_hosts_by_reason() {
    let dir = tempfile::tempdir().expect("tempdir");
    let c = SimCluster::start(dir.path(), two_zones()).await;
    let api = Api::over(&c);
    let zone_b = vec![Constraint::AttributeEquals { key: "zone".into(), value: "b".into() }];
    let mut filler = sized(JobKind::Stateless, 1, 4_000);
    filler.default_task.constraints = zone_b.clone();
    let filler = api.create(&filler).await.id;
    let up =
        c.run_until(250, 80, async |c| c.cluster.jobs.get(&filler).await.expect("job").tasks[0].host.is_some()).await;
    assert!(up, "the filler holds the one zone b host");

    let mut waiter = sized(JobKind::Batch, 1, 2_000);
    waiter.default_task.constraints = zone_b;
    let created = api.create(&waiter).await;
    assert!(created.warnings.is_empty(), "it fits the zone b host once that is free: {:?}", created.warnings);
    let t = api.wait_for_kind(&c, &created.id, 0, "waiting_for_capacity").await;
    assert!(
        t.pending_reason.starts_with("waiting for capacity: 0/3 hosts fit: 2 not zone=b, 1 insufficient cpu"),
        "{}",
        t.pending_reason
    );
    no_internal_ids(&t.pending_reason);
    let status = api.status(&created.id).await;
    assert_eq!(status.pending_summary, "1 pending: 1 waiting for capacity");
}

/// One pool entitled to the whole cluster (as on `paceline dev`): a task
/// waiting for room waits for the cluster, not for its pool's share.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_that_may_use_the_whole_cluster_waits_for_capacity_when_its_own_work_fills_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let c = SimCluster::start(dir.path(), shapes(2)).await;
    let api = Api::over(&c);
    let id = api.create(&sized(JobKind::Stateless, 3, 4_000)).await.id;
    let t = api.wait_for_kind(&c, &id, 2, "waiting_for_capacity").await;
    assert!(
        t.pending_reason.starts_with(
            "the cluster's cpu is all in use (4000 millicores short): pool /team may use all of it and its own work holds it"
        ),
        "{}",
        t.pending_reason
    );
    no_internal_ids(&t.pending_reason);
    assert_eq!(api.status(&id).await.pending_summary, "1 pending: 1 waiting for capacity");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_over_its_entitlement_holds_its_gang_and_the_gang_holds_the_next() {
    let dir = tempfile::tempdir().expect("tempdir");
    let c = SimCluster::start(dir.path(), shapes(3)).await;
    let small = PoolSpec { limit: PerKind { cpu: 2_000, ..PerKind::splat(UNLIMITED) }, ..PoolSpec::default() };
    c.cluster.resmgr.lock().expect("resmgr").create_pool("/small", small).expect("pool");
    let api = Api::over(&c);

    let mut big = sized(JobKind::Batch, 2, 2_000);
    big.pool = "/small".into();
    big.sla.min_running_instances = Some(2);
    let big = api.create(&big).await.id;
    let mut next = sized(JobKind::Batch, 1, 500);
    next.pool = "/small".into();
    // Preemptible: /small reserves nothing, so a non-preemptible job could
    // never run there whatever the head did, and would say that instead.
    next.sla.preemptible = true;
    let next = api.create(&next).await.id;

    let head = api.wait_for_kind(&c, &big, 0, "over_entitlement").await;
    // Pool /team reserves the whole cluster, so /small is entitled to none of it.
    assert!(
        head.pending_reason.starts_with("over entitlement by ")
            && head.pending_reason.ends_with(" millicores of cpu in pool /small"),
        "{}",
        head.pending_reason
    );
    let behind = api.wait_for_kind(&c, &next, 0, "blocked_by_gang").await;
    assert_eq!(
        behind.pending_reason,
        format!("queued in pool /small behind the gang of job {big} instances 0-1, which waits at the head")
    );
    no_internal_ids(&behind.pending_reason);
    let status = api.status(&big).await;
    assert_eq!(status.pending_summary, "2 pending: 2 held by their pool (entitlement of /small)");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gang_that_does_not_fit_whole_names_its_instances() {
    let dir = tempfile::tempdir().expect("tempdir");
    let c = SimCluster::start(dir.path(), shapes(3)).await;
    let api = Api::over(&c);
    // Four instances of 2.9 cpu, all or none, on three hosts of 4 cpu: each
    // host holds one, the cluster (and so the pool's entitlement) all four.
    let mut gang = sized(JobKind::Batch, 4, 2_900);
    gang.sla.min_running_instances = Some(4);
    let created = api.create(&gang).await;
    assert!(created.warnings.is_empty(), "each instance fits a host: {:?}", created.warnings);
    let t = api.wait_for_kind(&c, &created.id, 0, "blocked_by_gang").await;
    assert!(
        t.pending_reason.starts_with(&format!(
            "its gang (job {} instances 0-3) is placed all or none and did not fit whole in the last round (3/3 hosts fit",
            created.id
        )),
        "{}",
        t.pending_reason
    );
    no_internal_ids(&t.pending_reason);
    // Every member says the same, the one that found no room included.
    for i in 1..4 {
        assert_eq!(api.task(&created.id, i).await.pending_kind, "blocked_by_gang", "instance {i}");
    }
    let status = api.status(&created.id).await;
    assert_eq!(status.pending_summary, "4 pending: 4 blocked by a gang");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_the_placement_plugin_defers_says_so() {
    let dir = tempfile::tempdir().expect("tempdir");
    let c = SimCluster::start(dir.path(), shapes(1)).await;
    // A policy that leaves every task unplaced, "deferred".
    c.registry
        .deploy(
            "placement/defer",
            "entropy",
            "1",
            paceline_plugin_artifacts::GUEST_ENTROPY,
            DeployOptions { self_test: false },
        )
        .expect("deploys");
    c.registry.activate("placement/defer", "entropy@1").expect("activates");
    let api = Api::over(&c);
    let mut spec = sized(JobKind::Batch, 1, 1_000);
    spec.plugin_overrides.insert("placement/batch".into(), "placement/defer".into());
    let id = api.create(&spec).await.id;
    let t = api.wait_for_kind(&c, &id, 0, "deferred_by_plugin").await;
    assert_eq!(t.pending_reason, "the placement plugin deferred it in the last round (1/1 hosts fit)");
    let status = api.status(&id).await;
    assert_eq!(status.pending_summary, "1 pending: 1 deferred by the placement plugin");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_task_waits_its_turn_in_admission_order() {
    let dir = tempfile::tempdir().expect("tempdir");
    let c = SimCluster::start(dir.path(), shapes(1)).await;
    let api = Api::over(&c);
    let id = api.create(&sized(JobKind::Batch, 1, 1_000)).await.id;
    // No round has run yet: nothing is wrong, it waits its turn.
    let t = api.task(&id, 0).await;
    assert_eq!(t.pending_kind, "admission_order", "{}", t.pending_reason);
    assert!(
        [
            "submitted; waiting to be queued in its pool for admission",
            "queued in pool /team, waiting its turn in admission order",
            "admitted; waiting for the next placement round"
        ]
        .contains(&t.pending_reason.as_str()),
        "{}",
        t.pending_reason
    );
    // Once placed, nothing is pending.
    let placed =
        c.run_until(250, 80, async |c| c.cluster.jobs.get(&id).await.expect("job").tasks[0].host.is_some()).await;
    assert!(placed);
    let t = api.task(&id, 0).await;
    assert_eq!((t.pending_kind.as_str(), t.pending_reason.as_str()), ("", ""));
}

/// Issue 43 item 6: `examples/pools.yaml`'s shape. /team-a reserves, its leaf
/// /team-a/batch reserves nothing, and an ordinary (non-preemptible) job of
/// two instances there can never be admitted: non-preemptible work runs
/// only within its pool's reservation. Both instances say so (the second
/// is not "blocked by a gang": it has none), name the reservation, and say
/// what to do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_non_preemptible_job_in_a_pool_with_no_reservation_says_it_never_runs_and_what_to_do() {
    let dir = tempfile::tempdir().expect("tempdir");
    let c = SimCluster::start(dir.path(), shapes(2)).await;
    {
        let mut rm = c.cluster.resmgr.lock().expect("resmgr");
        let team_a = PoolSpec {
            reservation: PerKind { cpu: 4_000, memory: 8_192, disk: 20_000, gpu: 0 },
            limit: PerKind { cpu: 8_000, ..PerKind::splat(UNLIMITED) },
            share: PerKind::splat(2),
            ..PoolSpec::default()
        };
        rm.create_pool("/team-a", team_a).expect("/team-a");
        let batch = PoolSpec { slack_limit: PerKind { cpu: 2_000, ..PerKind::default() }, ..PoolSpec::default() };
        rm.create_pool("/team-a/batch", batch).expect("/team-a/batch");
    }
    let api = Api::over(&c);
    let mut spec = sized(JobKind::Batch, 2, 1_000);
    spec.pool = "/team-a/batch".into();
    assert!(!spec.sla.preemptible, "an ordinary job");
    let id = api.create(&spec).await.id;

    for instance in [1, 0] {
        let t = api.wait_for_kind(&c, &id, instance, "over_entitlement").await;
        let text = &t.pending_reason;
        for words in [
            "never",
            "non-preemptible jobs run only within their pool's reservation",
            "pool /team-a/batch reserves 0 cpu",
            "reservation.cpu_millis",
            "paceline pool update",
            "sla.preemptible: true",
        ] {
            assert!(text.contains(words), "instance {instance}: {words:?} not in {text:?}");
        }
        assert!(!text.contains("gang"), "instance {instance}: {text}");
        no_internal_ids(text);
    }
    let status = api.status(&id).await;
    assert!(!status.pending_summary.contains("gang"), "{}", status.pending_summary);
    assert_eq!(
        status.pending_summary,
        "2 pending: 2 held by their pool (reservation (non-preemptible work) of /team-a/batch)"
    );
    assert_eq!(status.warnings.len(), 1, "one warning for both instances: {:?}", status.warnings);
    let warning = &status.warnings[0];
    assert!(warning.starts_with("instances 0-1 can never run in pool /team-a/batch as it is: "), "{warning}");
    assert!(warning.contains("reservation.cpu_millis") && warning.contains("sla.preemptible: true"), "{warning}");
}

/// Issue 43 item 6: a pool reservation above what the cluster's hosts have is
/// accepted (hosts may join later) but said, in CreatePool's and
/// UpdatePool's answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_reservation_above_the_clusters_capacity_is_accepted_with_a_warning() {
    use paceline_api::pools::PoolApi;
    use pb::pool_service_server::PoolService;

    let dir = tempfile::tempdir().expect("tempdir");
    let c = SimCluster::start(dir.path(), shapes(2)).await;
    c.step(250).await;
    let pools = PoolApi::new(c.cluster.resmgr.clone(), c.cluster.pools.clone());
    let spec = |cpu| pb::PoolSpec {
        reservation: Some(pb::PerKind { cpu, memory: 8_192, ..pb::PerKind::default() }),
        ..pb::PoolSpec::default()
    };
    let path = "/team-a".to_string();
    let created = pools
        .create_pool(admin(pb::CreatePoolRequest { path: path.clone(), spec: Some(spec(4_000)) }))
        .await
        .expect("created")
        .into_inner();
    assert!(created.warnings.is_empty(), "4 of the cluster's 8 cpu: {:?}", created.warnings);
    let updated = pools
        .update_pool(admin(pb::UpdatePoolRequest { path: path.clone(), spec: Some(spec(20_000)) }))
        .await
        .expect("accepted all the same")
        .into_inner();
    assert_eq!(
        updated.warnings,
        vec![
            "pool /team-a: reservation.cpu_millis (20 cpu) is more than the cluster has (8 cpu, the hosts that take \
             work now): accepted, as hosts may join, but until they do the pool cannot be given all of it"
                .to_string()
        ]
    );
    let reserved = c.cluster.resmgr.lock().expect("resmgr").pool_status(&path).expect("pool").spec.reservation.cpu;
    assert_eq!(reserved, 20_000, "the reservation was applied");
    let again = pools
        .create_pool(admin(pb::CreatePoolRequest { path: "/team-b".into(), spec: Some(spec(9_000)) }))
        .await
        .expect("created")
        .into_inner();
    assert_eq!(again.warnings.len(), 1, "create warns too: {:?}", again.warnings);
}

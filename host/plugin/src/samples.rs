//! Sample inputs for the deploy-time self-test: small, but with a gang, a
//! constraint and a task that cannot fit, so a policy that ignores any of
//! them gives an answer that validation rejects.

use paceline_plugin_sdk::types::*;

pub(crate) fn placement() -> Vec<PlacementRequest> {
    let host =
        |cpu, mem| HostOffer { free: Resources::new(cpu, mem, 10_000, 0), total: Resources::new(cpu, mem, 10_000, 0) };
    let task = |job, gang, cpu, mem, constraints| Task {
        job,
        instance: gang,
        gang,
        demand: Resources::new(cpu, mem, 100, 0),
        constraints,
        preferred_host: None,
    };
    vec![PlacementRequest {
        round: 1,
        hosts: vec![host(4000, 8192), host(2000, 4096), host(1000, 2048)],
        attributes: vec![AttributeColumn { key: "zone".into(), values: vec![0, 1, 0] }],
        symbols: vec!["a".into(), "b".into()],
        jobs: vec![JobInfo::default(), JobInfo { max_per_host: 1, ..JobInfo::default() }],
        constraints: vec![
            ConstraintSet::default(),
            ConstraintSet { eligible: HostFilter::Only(vec![1]), preferences: vec![] },
        ],
        tasks: vec![
            task(0, 0, 1000, 1024, 0),
            task(0, 1, 1500, 1024, 0),
            task(0, 1, 1500, 1024, 0),
            task(1, 2, 500, 512, 1),
            task(1, 3, 64_000, 512, 0),
        ],
    }]
}

pub(crate) fn preemption() -> Vec<PreemptionRequest> {
    let r = |cpu| Resources::new(cpu, cpu, 0, 0);
    vec![PreemptionRequest {
        pools: vec![
            PoolView { path: "/a".into(), reservation: r(1000), entitlement: r(2000), allocation: r(4000) },
            PoolView { path: "/b".into(), reservation: r(2000), entitlement: r(2000), allocation: r(0) },
        ],
        running: (0..4)
            .map(|i| RunningTask {
                pool: 0,
                priority: i,
                preemptible: i != 0,
                revocable: false,
                started_at_ms: u64::from(i) * 10,
                resources: r(1000),
            })
            .collect(),
        needs: vec![Need { pool: 1, priority: 10, resources: r(2000), from_pools: vec![0] }],
    }]
}

pub(crate) fn lifecycle() -> Vec<(JobView, Vec<TaskView>, Event)> {
    let job = JobView { kind: JobKind::Batch, instance_count: 2, max_failures_per_instance: 1, ..JobView::default() };
    let tasks = (0..2).map(|i| TaskView { instance: i, ..TaskView::default() }).collect();
    vec![(job, tasks, Event::JobCreated)]
}

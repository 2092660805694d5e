//! wasmtime bindings for the three worlds (private), and the conversions
//! between them and the SDK's plain types, which are the crate's public face.
#![allow(missing_docs, missing_debug_implementations, clippy::all)]

use paceline_plugin_sdk::types as sdk;

macro_rules! resources_conversions {
    () => {
        impl From<sdk::Resources> for paceline::scheduler::types::Resources {
            fn from(r: sdk::Resources) -> Self {
                Self {
                    cpu_millis: r.cpu_millis,
                    memory_mib: r.memory_mib,
                    disk_mib: r.disk_mib,
                    gpus: r.gpus,
                    ports: r.ports,
                }
            }
        }
    };
}

pub(crate) mod placement {
    use super::sdk;
    wasmtime::component::bindgen!({ world: "placement", path: "../../wit" });
    resources_conversions!();
    use paceline::scheduler::placement_types as w;

    pub(crate) fn request(r: &sdk::PlacementRequest) -> w::PlacementRequest {
        w::PlacementRequest {
            round: r.round,
            hosts: r.hosts.iter().map(|h| w::HostOffer { free: h.free.into(), total: h.total.into() }).collect(),
            attributes: r
                .attributes
                .iter()
                .map(|c| w::AttributeColumn { key: c.key.clone(), values: c.values.clone() })
                .collect(),
            symbols: r.symbols.clone(),
            jobs: r
                .jobs
                .iter()
                .map(|j| w::JobInfo {
                    priority: j.priority,
                    max_per_host: j.max_per_host,
                    spread_over: j.spread_over,
                    existing: j.existing.iter().map(|e| w::HostCount { host: e.host, count: e.count }).collect(),
                })
                .collect(),
            constraints: r
                .constraints
                .iter()
                .map(|c| w::ConstraintSet {
                    eligible: match &c.eligible {
                        sdk::HostFilter::All => w::HostFilter::All,
                        sdk::HostFilter::Only(h) => w::HostFilter::Only(h.clone()),
                    },
                    preferences: c
                        .preferences
                        .iter()
                        .map(|p| w::Preference { attribute: p.attribute, value: p.value, weight: p.weight })
                        .collect(),
                })
                .collect(),
            tasks: r
                .tasks
                .iter()
                .map(|t| w::Task {
                    job: t.job,
                    instance: t.instance,
                    gang: t.gang,
                    demand: t.demand.into(),
                    constraints: t.constraints,
                    preferred_host: t.preferred_host,
                })
                .collect(),
        }
    }

    pub(crate) fn result(r: w::PlacementResult) -> sdk::PlacementResult {
        sdk::PlacementResult {
            grants: Vec::new(),
            assignments: r.assignments.into_iter().map(|a| sdk::Assignment { task: a.task, host: a.host }).collect(),
            unplaced: r
                .unplaced
                .into_iter()
                .map(|u| sdk::Unplaced {
                    task: u.task,
                    reason: match u.reason {
                        w::UnplacedReason::InsufficientResources => sdk::UnplacedReason::InsufficientResources,
                        w::UnplacedReason::ConstraintsUnsatisfiable => sdk::UnplacedReason::ConstraintsUnsatisfiable,
                        w::UnplacedReason::MaxPerHost => sdk::UnplacedReason::MaxPerHost,
                        w::UnplacedReason::GangIncomplete => sdk::UnplacedReason::GangIncomplete,
                        w::UnplacedReason::Deferred => sdk::UnplacedReason::Deferred,
                    },
                    detail: u.detail,
                })
                .collect(),
        }
    }
}

/// The `placement-gpu` world (0.1.2): the `placement` types and the GPU side.
pub(crate) mod placement_gpu {
    use super::sdk;
    wasmtime::component::bindgen!({
        world: "placement-gpu",
        path: "../../wit",
        with: {
            "paceline:scheduler/types": super::placement::paceline::scheduler::types,
            "paceline:scheduler/placement-types": super::placement::paceline::scheduler::placement_types,
        },
    });
    use paceline::scheduler::gpu_placement_types as g;

    pub(crate) fn gpu_request(r: &sdk::PlacementRequest) -> g::GpuRequest {
        g::GpuRequest {
            hosts: r
                .gpu_hosts
                .iter()
                .map(|h| g::GpuHost {
                    devices: h
                        .devices
                        .iter()
                        .map(|d| g::GpuDevice { free_milli: d.free_milli, model: d.model })
                        .collect(),
                })
                .collect(),
            tasks: r.gpu_tasks.iter().map(|t| g::GpuTask { milli: t.milli, models: t.models.clone() }).collect(),
            workload: r
                .gpu_workload
                .iter()
                .map(|c| g::TaskClass {
                    cpu_millis: c.cpu_millis,
                    memory_mib: c.memory_mib,
                    milli: c.milli,
                    weight: c.weight,
                })
                .collect(),
        }
    }

    pub(crate) fn result(r: g::GpuPlacementResult) -> sdk::PlacementResult {
        let mut out = super::placement::result(r.placement);
        out.grants = r.grants.into_iter().map(|g| sdk::DeviceGrant { task: g.task, devices: g.devices }).collect();
        out
    }
}

pub(crate) mod preemption {
    use super::sdk;
    wasmtime::component::bindgen!({ world: "preemption", path: "../../wit" });
    resources_conversions!();
    use paceline::scheduler::preemption_types as w;

    pub(crate) fn request(r: &sdk::PreemptionRequest) -> w::PreemptionRequest {
        w::PreemptionRequest {
            pools: r
                .pools
                .iter()
                .map(|p| w::PoolView {
                    path: p.path.clone(),
                    reservation: p.reservation.into(),
                    entitlement: p.entitlement.into(),
                    allocation: p.allocation.into(),
                })
                .collect(),
            running: r
                .running
                .iter()
                .map(|t| w::RunningTask {
                    pool: t.pool,
                    priority: t.priority,
                    preemptible: t.preemptible,
                    revocable: t.revocable,
                    started_at_ms: t.started_at_ms,
                    resources: t.resources.into(),
                })
                .collect(),
            needs: r
                .needs
                .iter()
                .map(|n| w::Need {
                    pool: n.pool,
                    priority: n.priority,
                    resources: n.resources.into(),
                    from_pools: n.from_pools.clone(),
                })
                .collect(),
        }
    }

    pub(crate) fn victims(v: Vec<w::Victim>) -> Vec<sdk::Victim> {
        v.into_iter()
            .map(|v| sdk::Victim {
                task: v.task,
                need: v.need,
                reason: match v.reason {
                    w::VictimReason::OverEntitlement => sdk::VictimReason::OverEntitlement,
                    w::VictimReason::HigherPriority => sdk::VictimReason::HigherPriority,
                    w::VictimReason::Revoked => sdk::VictimReason::Revoked,
                },
            })
            .collect()
    }
}

/// The `preemption-gpu` world (0.1.3): the `preemption` types and the GPU
/// side in milli-GPUs.
pub(crate) mod preemption_gpu {
    use super::sdk;
    wasmtime::component::bindgen!({
        world: "preemption-gpu",
        path: "../../wit",
        with: {
            "paceline:scheduler/types": super::preemption::paceline::scheduler::types,
            "paceline:scheduler/preemption-types": super::preemption::paceline::scheduler::preemption_types,
        },
    });
    use paceline::scheduler::gpu_preemption_types as g;

    pub(crate) fn gpu_request(r: &sdk::PreemptionRequest) -> g::GpuPreemptionRequest {
        g::GpuPreemptionRequest {
            pools: r
                .gpu_pools
                .iter()
                .map(|p| g::GpuPool {
                    reservation_milli: p.reservation_milli,
                    entitlement_milli: p.entitlement_milli,
                    allocation_milli: p.allocation_milli,
                })
                .collect(),
            running: r.gpu_running.clone(),
            needs: r.gpu_needs.clone(),
        }
    }
}

pub(crate) mod lifecycle {
    use super::sdk;
    wasmtime::component::bindgen!({ world: "lifecycle", path: "../../wit" });

    /// The 0.1.1 world that adds `on-events`; its types are the ones above.
    pub(crate) mod batched {
        wasmtime::component::bindgen!({
            world: "lifecycle-batched",
            path: "../../wit",
            with: { "paceline:scheduler": super::paceline::scheduler },
        });
    }
    resources_conversions!();
    use paceline::scheduler::lifecycle_types as w;

    macro_rules! map_enum {
        ($v:expr, $from:path => $to:path, [$($name:ident),*]) => {{
            use $from as F;
            use $to as T;
            match $v { $(F::$name => T::$name,)* }
        }};
    }

    fn task_state(s: sdk::TaskState) -> w::TaskState {
        map_enum!(s, sdk::TaskState => w::TaskState, [Initialized, Pending, Ready, Placing, Placed, Launching,
            Launched, Starting, Running, Succeeded, Failed, Lost, Killed, Preempting, Killing])
    }

    fn job_state_out(s: sdk::JobState) -> w::JobState {
        map_enum!(s, sdk::JobState => w::JobState, [Initialized, Pending, Running, Succeeded, Failed, Killed, Killing])
    }

    fn job_state_in(s: w::JobState) -> sdk::JobState {
        map_enum!(s, w::JobState => sdk::JobState, [Initialized, Pending, Running, Succeeded, Failed, Killed, Killing])
    }

    pub(crate) fn job(j: &sdk::JobView) -> w::JobView {
        w::JobView {
            kind: map_enum!(j.kind, sdk::JobKind => w::JobKind, [Batch, Stateless, Stateful, Daemon]),
            state: job_state_out(j.state),
            instance_count: j.instance_count,
            max_failures_per_instance: j.max_failures_per_instance,
            max_run_time_ms: j.max_run_time_ms,
            config_version: j.config_version,
            resources: j.resources.into(),
            update: j.update.as_ref().map(|u| w::UpdateView {
                target_version: u.target_version,
                batch_size: u.batch_size,
                max_unavailable: u.max_unavailable,
                max_failures: u.max_failures,
                rollback_on_failure: u.rollback_on_failure,
                paused: u.paused,
                done: u.done.clone(),
                in_flight: u.in_flight.clone(),
                failed: u.failed.clone(),
            }),
            matching_hosts: j.matching_hosts.clone(),
        }
    }

    pub(crate) fn tasks(t: &[sdk::TaskView]) -> Vec<w::TaskView> {
        t.iter()
            .map(|t| w::TaskView {
                instance: t.instance,
                state: task_state(t.state),
                run: t.run,
                failures: t.failures,
                healthy: t.healthy,
                config_version: t.config_version,
                host: t.host.clone(),
                running_for_ms: t.running_for_ms,
                exit_code: t.exit_code,
            })
            .collect()
    }

    pub(crate) fn events(e: &[sdk::Event]) -> Vec<w::Event> {
        e.iter().map(event).collect()
    }

    pub(crate) fn event(e: &sdk::Event) -> w::Event {
        match e {
            sdk::Event::JobCreated => w::Event::JobCreated,
            sdk::Event::TaskChanged(c) => {
                w::Event::TaskChanged(w::TaskChange { instance: c.instance, state: task_state(c.state) })
            }
            sdk::Event::Timer(i) => w::Event::Timer(*i),
            sdk::Event::UpdateChanged => w::Event::UpdateChanged,
            sdk::Event::HostsChanged => w::Event::HostsChanged,
            sdk::Event::Scaled => w::Event::Scaled,
            sdk::Event::KillRequested => w::Event::KillRequested,
        }
    }

    pub(crate) fn actions(a: Vec<w::Action>) -> Vec<sdk::Action> {
        a.into_iter()
            .map(|a| match a {
                w::Action::Launch(i) => sdk::Action::Launch(i),
                w::Action::Kill(i) => sdk::Action::Kill(i),
                w::Action::RestartAfter(r) => {
                    sdk::Action::RestartAfter(sdk::Restart { instance: r.instance, delay_ms: r.delay_ms })
                }
                w::Action::MarkJob(s) => sdk::Action::MarkJob(job_state_in(s)),
                w::Action::UpdateBatch(b) => sdk::Action::UpdateBatch(b),
                w::Action::UpdateFinished(r) => sdk::Action::UpdateFinished(r),
            })
            .collect()
    }
}

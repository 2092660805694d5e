//! Guest glue, compiled only for `wasm32`: the wit-bindgen output for each
//! world and the conversions between it and the SDK's plain types.
//!
//! Authors never touch this module; the `export_*!` macros use it.
#![allow(unsafe_code, missing_docs, clippy::all, missing_debug_implementations)]

use crate::types as sdk;

macro_rules! convert_resources {
    ($types:path) => {
        use $types as wit_types;
        impl From<wit_types::Resources> for sdk::Resources {
            fn from(r: wit_types::Resources) -> Self {
                sdk::Resources {
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

/// The `placement-gpu` world (0.1.2): `place` and `place-gpu`, so a policy
/// built with this SDK places GPU shares on a current runtime and whole-GPU
/// work on one that predates 0.1.2.
pub mod placement {
    use super::sdk;
    wit_bindgen::generate!({
        world: "placement-gpu",
        path: "../../wit",
        pub_export_macro: true,
        export_macro_name: "export_placement_world",
        default_bindings_module: "paceline_plugin_sdk::wasm::placement",
    });
    convert_resources!(self::paceline::scheduler::types);
    use self::paceline::scheduler::placement_types as w;

    fn filter(f: w::HostFilter) -> sdk::HostFilter {
        match f {
            w::HostFilter::All => sdk::HostFilter::All,
            w::HostFilter::Only(h) => sdk::HostFilter::Only(h),
        }
    }

    /// Lifts a request into SDK types.
    pub fn request(r: w::PlacementRequest) -> sdk::PlacementRequest {
        sdk::PlacementRequest {
            round: r.round,
            hosts: r.hosts.into_iter().map(|h| sdk::HostOffer { free: h.free.into(), total: h.total.into() }).collect(),
            attributes: r
                .attributes
                .into_iter()
                .map(|c| sdk::AttributeColumn { key: c.key, values: c.values })
                .collect(),
            symbols: r.symbols,
            jobs: r
                .jobs
                .into_iter()
                .map(|j| sdk::JobInfo {
                    priority: j.priority,
                    max_per_host: j.max_per_host,
                    spread_over: j.spread_over,
                    existing: j.existing.into_iter().map(|e| sdk::HostCount { host: e.host, count: e.count }).collect(),
                })
                .collect(),
            constraints: r
                .constraints
                .into_iter()
                .map(|c| sdk::ConstraintSet {
                    eligible: filter(c.eligible),
                    preferences: c
                        .preferences
                        .into_iter()
                        .map(|p| sdk::Preference { attribute: p.attribute, value: p.value, weight: p.weight })
                        .collect(),
                })
                .collect(),
            tasks: r
                .tasks
                .into_iter()
                .map(|t| sdk::Task {
                    job: t.job,
                    instance: t.instance,
                    gang: t.gang,
                    demand: t.demand.into(),
                    constraints: t.constraints,
                    preferred_host: t.preferred_host,
                })
                .collect(),
            gpu_hosts: Vec::new(),
            gpu_tasks: Vec::new(),
            gpu_workload: Vec::new(),
        }
    }

    /// Lowers an SDK result into the WIT type.
    pub fn result(r: sdk::PlacementResult) -> w::PlacementResult {
        w::PlacementResult {
            assignments: r.assignments.into_iter().map(|a| w::Assignment { task: a.task, host: a.host }).collect(),
            unplaced: r
                .unplaced
                .into_iter()
                .map(|u| w::Unplaced {
                    task: u.task,
                    reason: match u.reason {
                        sdk::UnplacedReason::InsufficientResources => w::UnplacedReason::InsufficientResources,
                        sdk::UnplacedReason::ConstraintsUnsatisfiable => w::UnplacedReason::ConstraintsUnsatisfiable,
                        sdk::UnplacedReason::MaxPerHost => w::UnplacedReason::MaxPerHost,
                        sdk::UnplacedReason::GangIncomplete => w::UnplacedReason::GangIncomplete,
                        sdk::UnplacedReason::Deferred => w::UnplacedReason::Deferred,
                    },
                    detail: u.detail,
                })
                .collect(),
        }
    }

    /// Runs a policy on a lifted request.
    pub fn run<P: crate::PlacementPolicy>(r: w::PlacementRequest) -> w::PlacementResult {
        result(P::place(&request(r)))
    }

    use self::paceline::scheduler::gpu_placement_types as g;

    /// Runs a policy on a lifted request with its GPU side.
    pub fn run_gpu<P: crate::PlacementPolicy>(r: w::PlacementRequest, gpu: g::GpuRequest) -> g::GpuPlacementResult {
        let mut req = request(r);
        req.gpu_hosts = gpu
            .hosts
            .into_iter()
            .map(|h| sdk::GpuHost {
                devices: h
                    .devices
                    .into_iter()
                    .map(|d| sdk::GpuDevice { free_milli: d.free_milli, model: d.model })
                    .collect(),
            })
            .collect();
        req.gpu_tasks = gpu.tasks.into_iter().map(|t| sdk::GpuTask { milli: t.milli, models: t.models }).collect();
        req.gpu_workload = gpu
            .workload
            .into_iter()
            .map(|c| sdk::TaskClass {
                cpu_millis: c.cpu_millis,
                memory_mib: c.memory_mib,
                milli: c.milli,
                weight: c.weight,
            })
            .collect();
        let mut out = P::place(&req);
        let grants = std::mem::take(&mut out.grants)
            .into_iter()
            .map(|g| g::DeviceGrant { task: g.task, devices: g.devices })
            .collect();
        g::GpuPlacementResult { placement: result(out), grants }
    }
}

/// The `preemption-gpu` world (0.1.3): `select-victims` and
/// `select-victims-gpu`, so a policy built with this SDK counts GPU shares
/// exactly on a current runtime and whole devices on one that predates 0.1.3.
pub mod preemption {
    use super::sdk;
    wit_bindgen::generate!({
        world: "preemption-gpu",
        path: "../../wit",
        pub_export_macro: true,
        export_macro_name: "export_preemption_world",
        default_bindings_module: "paceline_plugin_sdk::wasm::preemption",
    });
    convert_resources!(self::paceline::scheduler::types);
    use self::paceline::scheduler::preemption_types as w;

    /// Lifts a request into SDK types.
    pub fn request(r: w::PreemptionRequest) -> sdk::PreemptionRequest {
        sdk::PreemptionRequest {
            pools: r
                .pools
                .into_iter()
                .map(|p| sdk::PoolView {
                    path: p.path,
                    reservation: p.reservation.into(),
                    entitlement: p.entitlement.into(),
                    allocation: p.allocation.into(),
                })
                .collect(),
            running: r
                .running
                .into_iter()
                .map(|t| sdk::RunningTask {
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
                .into_iter()
                .map(|n| sdk::Need {
                    pool: n.pool,
                    priority: n.priority,
                    resources: n.resources.into(),
                    from_pools: n.from_pools,
                })
                .collect(),
            gpu_pools: Vec::new(),
            gpu_running: Vec::new(),
            gpu_needs: Vec::new(),
        }
    }

    /// Runs a policy on a lifted request.
    pub fn run<P: crate::PreemptionPolicy>(r: w::PreemptionRequest) -> Vec<w::Victim> {
        victims(P::select_victims(&request(r)))
    }

    use self::paceline::scheduler::gpu_preemption_types as g;

    /// Runs a policy on a lifted request with its GPU side (milli-GPUs).
    pub fn run_gpu<P: crate::PreemptionPolicy>(
        r: w::PreemptionRequest,
        gpu: g::GpuPreemptionRequest,
    ) -> Vec<w::Victim> {
        let mut req = request(r);
        req.gpu_pools = gpu
            .pools
            .into_iter()
            .map(|p| sdk::GpuPool {
                reservation_milli: p.reservation_milli,
                entitlement_milli: p.entitlement_milli,
                allocation_milli: p.allocation_milli,
            })
            .collect();
        req.gpu_running = gpu.running;
        req.gpu_needs = gpu.needs;
        victims(P::select_victims(&req))
    }

    fn victims(v: Vec<sdk::Victim>) -> Vec<w::Victim> {
        v.into_iter()
            .map(|v| w::Victim {
                task: v.task,
                need: v.need,
                reason: match v.reason {
                    sdk::VictimReason::OverEntitlement => w::VictimReason::OverEntitlement,
                    sdk::VictimReason::HigherPriority => w::VictimReason::HigherPriority,
                    sdk::VictimReason::Revoked => w::VictimReason::Revoked,
                },
            })
            .collect()
    }
}

/// The `lifecycle-batched` world (0.1.1): `on-event` and `on-events`. A
/// host that knows only 0.1.0's `lifecycle` world calls `on-event` and
/// ignores the other export, so one build serves both.
pub mod lifecycle {
    use super::sdk;
    wit_bindgen::generate!({
        world: "lifecycle-batched",
        path: "../../wit",
        pub_export_macro: true,
        export_macro_name: "export_lifecycle_world",
        default_bindings_module: "paceline_plugin_sdk::wasm::lifecycle",
    });
    convert_resources!(self::paceline::scheduler::types);
    use self::paceline::scheduler::lifecycle_types as w;

    macro_rules! map_enum {
        ($v:expr, $from:path => $to:path, [$($name:ident),*]) => {{
            use $from as F;
            use $to as T;
            match $v { $(F::$name => T::$name,)* }
        }};
    }

    fn task_state(s: w::TaskState) -> sdk::TaskState {
        map_enum!(s, w::TaskState => sdk::TaskState, [Initialized, Pending, Ready, Placing, Placed, Launching,
            Launched, Starting, Running, Succeeded, Failed, Lost, Killed, Preempting, Killing])
    }

    fn job_state_in(s: w::JobState) -> sdk::JobState {
        map_enum!(s, w::JobState => sdk::JobState, [Initialized, Pending, Running, Succeeded, Failed, Killed, Killing])
    }

    fn job_state_out(s: sdk::JobState) -> w::JobState {
        map_enum!(s, sdk::JobState => w::JobState, [Initialized, Pending, Running, Succeeded, Failed, Killed, Killing])
    }

    fn job(job: w::JobView) -> sdk::JobView {
        sdk::JobView {
            kind: map_enum!(job.kind, w::JobKind => sdk::JobKind, [Batch, Stateless, Stateful, Daemon]),
            state: job_state_in(job.state),
            instance_count: job.instance_count,
            max_failures_per_instance: job.max_failures_per_instance,
            max_run_time_ms: job.max_run_time_ms,
            config_version: job.config_version,
            resources: job.resources.into(),
            update: job.update.map(|u| sdk::UpdateView {
                target_version: u.target_version,
                batch_size: u.batch_size,
                max_unavailable: u.max_unavailable,
                max_failures: u.max_failures,
                rollback_on_failure: u.rollback_on_failure,
                paused: u.paused,
                done: u.done,
                in_flight: u.in_flight,
                failed: u.failed,
            }),
            matching_hosts: job.matching_hosts,
        }
    }

    fn tasks(tasks: Vec<w::TaskView>) -> Vec<sdk::TaskView> {
        tasks
            .into_iter()
            .map(|t| sdk::TaskView {
                instance: t.instance,
                state: task_state(t.state),
                run: t.run,
                failures: t.failures,
                healthy: t.healthy,
                config_version: t.config_version,
                host: t.host,
                running_for_ms: t.running_for_ms,
                exit_code: t.exit_code,
            })
            .collect()
    }

    fn event(event: w::Event) -> sdk::Event {
        match event {
            w::Event::JobCreated => sdk::Event::JobCreated,
            w::Event::TaskChanged(c) => {
                sdk::Event::TaskChanged(sdk::TaskChange { instance: c.instance, state: task_state(c.state) })
            }
            w::Event::Timer(i) => sdk::Event::Timer(i),
            w::Event::UpdateChanged => sdk::Event::UpdateChanged,
            w::Event::HostsChanged => sdk::Event::HostsChanged,
            w::Event::Scaled => sdk::Event::Scaled,
            w::Event::KillRequested => sdk::Event::KillRequested,
        }
    }

    fn actions(actions: Vec<sdk::Action>) -> Vec<w::Action> {
        actions
            .into_iter()
            .map(|a| match a {
                sdk::Action::Launch(i) => w::Action::Launch(i),
                sdk::Action::Kill(i) => w::Action::Kill(i),
                sdk::Action::RestartAfter(r) => {
                    w::Action::RestartAfter(w::Restart { instance: r.instance, delay_ms: r.delay_ms })
                }
                sdk::Action::MarkJob(s) => w::Action::MarkJob(job_state_out(s)),
                sdk::Action::UpdateBatch(b) => w::Action::UpdateBatch(b),
                sdk::Action::UpdateFinished(r) => w::Action::UpdateFinished(r),
            })
            .collect()
    }

    /// Runs a policy's `on_event` on lifted inputs.
    pub fn run<P: crate::LifecyclePolicy>(j: w::JobView, t: Vec<w::TaskView>, e: w::Event) -> Vec<w::Action> {
        actions(P::on_event(&job(j), &tasks(t), &event(e)))
    }

    /// Runs a policy's `on_events` on lifted inputs.
    pub fn run_batch<P: crate::LifecyclePolicy>(
        j: w::JobView,
        t: Vec<w::TaskView>,
        e: Vec<w::Event>,
    ) -> Vec<w::Action> {
        let events: Vec<sdk::Event> = e.into_iter().map(event).collect();
        actions(P::on_events(&job(j), &tasks(t), &events))
    }
}

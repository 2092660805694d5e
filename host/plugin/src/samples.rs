//! The deploy-time self-test's corpus: requests generated from a fixed seed.
//!
//! Hand-picked samples only catch the mistakes someone thought of. These
//! are drawn at random, but from [`SEED`], so every deploy of every version
//! sees the same corpus in the same order and a refusal names a case that
//! can be replayed (`case` is its position, the error carries its JSON).
//!
//! - Placement: 1–12 hosts with a zone and a rack attribute, jobs with and
//!   without a per-host maximum (some with tasks already on hosts), hard
//!   constraints (every host, a subset, none), gangs of 1–4, and demands
//!   from tiny to larger than any host.
//! - Preemption: 1–4 pools, 0–12 running tasks (preemptible, revocable or
//!   neither), 1–3 needs, some of which cannot be covered; every fourth
//!   case from the fourth on has a GPU side (WIT 0.1.3): tasks holding
//!   shares of a device, whole devices or none, needs of a share, a device
//!   or more (some asking for GPU only, so that only victims holding GPU
//!   free them), pools' GPU reservations. Judged in milli-GPUs for a
//!   `preemption-gpu` component, in whole devices for an older one.
//! - Lifecycle: event sequences over a job of every kind. Each sequence
//!   starts at `job-created`; the actions answered are applied to the views
//!   (launch → RUNNING, kill → KILLED, mark-job → the job's state) and the
//!   next event is a run of the job changing state, a timer, a scale or a
//!   kill request, so an answer is judged against views a real job could
//!   have reached.
//!
//! The first case of each world is the old hand-picked sample (a gang, a
//! constraint, a task that cannot fit; a need across pools; a new batch
//! job), kept so that what passed before is still asked.

use paceline_plugin_sdk::types::*;

/// The corpus seed. Changing it changes every deploy's corpus.
pub(crate) const SEED: u64 = 0x7061_6365_6c69_6e65;
/// Placement requests in the corpus.
pub(crate) const PLACEMENT_CASES: usize = 48;
/// Preemption requests in the corpus.
pub(crate) const PREEMPTION_CASES: usize = 64;
/// Of which generated with a GPU side: case 3, 7, 11, … (early, so that a
/// slow component's self-test, which runs a prefix, meets them too).
pub(crate) const GPU_PREEMPTION_CASES: usize = 16;
/// Lifecycle sequences in the corpus.
pub(crate) const LIFECYCLE_SEQUENCES: usize = 16;
/// Events per lifecycle sequence, at most.
pub(crate) const LIFECYCLE_STEPS: usize = 8;

/// A small deterministic generator (splitmix64): no dependency, and the
/// same numbers on every platform.
#[derive(Debug, Clone)]
pub(crate) struct Gen(u64);

impl Gen {
    pub(crate) fn new(seed: u64) -> Gen {
        Gen(seed)
    }
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in `lo..=hi`.
    pub(crate) fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }
    pub(crate) fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[(self.next() % items.len() as u64) as usize]
    }
}

fn hand_picked_placement() -> PlacementRequest {
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
    PlacementRequest {
        gpu_hosts: Vec::new(),
        gpu_tasks: Vec::new(),
        gpu_workload: Vec::new(),
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
    }
}

/// One generated placement request.
pub(crate) fn placement_case(g: &mut Gen, round: u64) -> PlacementRequest {
    let n_hosts = g.range(1, 12) as usize;
    let hosts: Vec<HostOffer> = (0..n_hosts)
        .map(|_| {
            let total = Resources::new(g.pick(&[1000, 2000, 4000, 8000]), g.pick(&[2048, 8192, 16384]), 100_000, {
                if g.chance(25) { g.range(1, 8) } else { 0 }
            });
            // Some hosts are partly used already.
            let used = if g.chance(50) {
                Resources::new(g.range(0, total.cpu_millis), g.range(0, total.memory_mib), 0, 0)
            } else {
                Resources::ZERO
            };
            HostOffer { free: total.saturating_sub(&used), total }
        })
        .collect();
    let zones = g.range(1, 3) as u32;
    let racks = g.range(1, 4) as u32;
    let symbols: Vec<String> =
        (0..zones).map(|z| format!("zone-{z}")).chain((0..racks).map(|r| format!("rack-{r}"))).collect();
    let attributes = vec![
        AttributeColumn {
            key: "zone".into(),
            values: (0..n_hosts).map(|_| g.range(0, u64::from(zones) - 1) as u32).collect(),
        },
        AttributeColumn {
            key: "rack".into(),
            values: (0..n_hosts)
                .map(|_| if g.chance(10) { NO_VALUE } else { zones + g.range(0, u64::from(racks) - 1) as u32 })
                .collect(),
        },
    ];
    let n_jobs = g.range(1, 4) as usize;
    let jobs: Vec<JobInfo> = (0..n_jobs)
        .map(|_| {
            let max_per_host = if g.chance(40) { g.range(1, 3) as u32 } else { 0 };
            let existing = if max_per_host > 0 && g.chance(50) {
                let mut hosts_used: Vec<u32> = (0..n_hosts as u32).filter(|_| g.chance(30)).collect();
                hosts_used.dedup();
                hosts_used
                    .into_iter()
                    .map(|host| HostCount { host, count: g.range(1, u64::from(max_per_host)) as u32 })
                    .collect()
            } else {
                Vec::new()
            };
            JobInfo {
                priority: g.range(0, 10) as u32,
                max_per_host,
                spread_over: if g.chance(30) { Some(g.range(0, 1) as u32) } else { None },
                existing,
            }
        })
        .collect();
    let mut constraints = vec![ConstraintSet::default()];
    for _ in 0..g.range(0, 3) {
        let only: Vec<u32> = (0..n_hosts as u32).filter(|_| g.chance(40)).collect();
        let preferences = if g.chance(50) {
            vec![Preference {
                attribute: 0,
                value: g.range(0, u64::from(zones) - 1) as u32,
                weight: g.range(1, 10) as i32,
            }]
        } else {
            Vec::new()
        };
        constraints.push(ConstraintSet { eligible: HostFilter::Only(only), preferences });
    }
    let mut tasks = Vec::new();
    let n_gangs = g.range(1, 10) as u32;
    for gang in 0..n_gangs {
        let job = g.range(0, n_jobs as u64 - 1) as u32;
        let size = if g.chance(30) { g.range(2, 4) } else { 1 };
        let demand = if g.chance(10) {
            // Larger than any host: can never fit.
            Resources::new(64_000, 1024, 10, 0)
        } else {
            Resources::new(g.pick(&[100, 250, 500, 1000, 2000]), g.pick(&[128, 512, 1024, 4096]), 10, {
                if g.chance(15) { 1 } else { 0 }
            })
        };
        let constraint = g.range(0, constraints.len() as u64 - 1) as u32;
        for _ in 0..size {
            let instance = tasks.iter().filter(|t: &&Task| t.job == job).count() as u32;
            let preferred_host = if g.chance(10) { Some(g.range(0, n_hosts as u64 - 1) as u32) } else { None };
            tasks.push(Task { job, instance, gang, demand, constraints: constraint, preferred_host });
        }
    }
    let mut request =
        PlacementRequest { round, hosts, attributes, symbols, jobs, constraints, tasks, ..Default::default() };
    add_gpu_side(g, &mut request);
    request
}

/// The GPU side (0.1.2) of a generated case with GPU hosts: devices partly
/// used by shares, whole-GPU tasks as asked, and some tasks asking for a
/// share, a few of them for one model only. Drawn after the rest of the
/// case, so the cases without GPUs are those of earlier corpora.
fn add_gpu_side(g: &mut Gen, r: &mut PlacementRequest) {
    if r.hosts.iter().all(|h| h.total.gpus == 0) {
        return;
    }
    let model = r.symbols.len() as u32;
    r.symbols.push("gpu-model-a".into());
    r.gpu_hosts = r
        .hosts
        .iter_mut()
        .map(|h| {
            let devices: Vec<GpuDevice> = (0..h.total.gpus)
                .map(|_| GpuDevice {
                    free_milli: if g.chance(30) { g.pick(&[0, 300, 500, 900]) } else { DEVICE_MILLI },
                    model: if g.chance(50) { model } else { NO_VALUE },
                })
                .collect();
            h.free.gpus = devices.iter().filter(|d| d.free_milli == DEVICE_MILLI).count() as u64;
            GpuHost { devices }
        })
        .collect();
    let tasks = r.tasks.clone();
    r.gpu_tasks = tasks
        .iter()
        .map(|t| {
            if t.demand.gpus > 0 {
                GpuTask { milli: t.demand.gpus as u32 * DEVICE_MILLI, models: Vec::new() }
            } else if g.chance(15) {
                let models = if g.chance(25) { vec![model] } else { Vec::new() };
                GpuTask { milli: g.pick(&[100, 250, 500, 700]), models }
            } else {
                GpuTask::default()
            }
        })
        .collect();
}

/// The placement corpus: the hand-picked case, then generated ones.
pub(crate) fn placement() -> impl Iterator<Item = PlacementRequest> {
    let mut g = Gen::new(SEED);
    std::iter::once(hand_picked_placement())
        .chain((1..PLACEMENT_CASES as u64).map(move |round| placement_case(&mut g, round + 1)))
}

fn hand_picked_preemption() -> PreemptionRequest {
    let r = |cpu| Resources::new(cpu, cpu, 0, 0);
    PreemptionRequest {
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
        ..PreemptionRequest::default()
    }
}

/// One generated preemption request.
pub(crate) fn preemption_case(g: &mut Gen) -> PreemptionRequest {
    let n_pools = g.range(1, 4) as u32;
    let running: Vec<RunningTask> = (0..g.range(0, 12))
        .map(|i| RunningTask {
            pool: g.range(0, u64::from(n_pools) - 1) as u32,
            priority: g.range(0, 5) as u32,
            preemptible: g.chance(70),
            revocable: g.chance(15),
            started_at_ms: i * 100,
            resources: Resources::new(g.pick(&[250, 500, 1000, 2000]), g.pick(&[256, 1024, 2048]), 0, 0),
        })
        .collect();
    let mut allocation = vec![Resources::ZERO; n_pools as usize];
    for t in running.iter().filter(|t| !t.revocable) {
        allocation[t.pool as usize] = allocation[t.pool as usize].saturating_add(&t.resources);
    }
    let pools = (0..n_pools)
        .map(|p| {
            let reservation = Resources::new(g.pick(&[0, 500, 2000]), g.pick(&[0, 1024, 4096]), 0, 0);
            PoolView {
                path: format!("/pool-{p}"),
                reservation,
                entitlement: reservation.saturating_add(&Resources::new(g.range(0, 2000), g.range(0, 2048), 0, 0)),
                allocation: allocation[p as usize],
            }
        })
        .collect();
    let needs = (0..g.range(1, 3))
        .map(|_| Need {
            pool: g.range(0, u64::from(n_pools) - 1) as u32,
            priority: g.range(0, 10) as u32,
            resources: Resources::new(g.pick(&[250, 1000, 3000, 50_000]), g.pick(&[0, 512, 2048]), 0, 0),
            from_pools: (0..n_pools).filter(|_| g.chance(50)).collect(),
        })
        .collect();
    PreemptionRequest { pools, running, needs, ..PreemptionRequest::default() }
}

/// The preemption corpus: the hand-picked cases, then generated ones,
/// every fourth with a GPU side. The GPU cases draw from a generator of
/// their own, so the others are those of earlier corpora, in order.
pub(crate) fn preemption() -> impl Iterator<Item = PreemptionRequest> {
    let mut g = Gen::new(SEED ^ 1);
    let mut gpu = Gen::new(SEED ^ 3);
    std::iter::once(hand_picked_preemption()).chain(std::iter::once(gpu_share_preemption())).chain(
        (2..PREEMPTION_CASES).map(move |case| {
            if case % (PREEMPTION_CASES / GPU_PREEMPTION_CASES) == 3 {
                gpu_preemption_case(&mut gpu)
            } else {
                preemption_case(&mut g)
            }
        }),
    )
}

/// One generated preemption case with a GPU side (WIT 0.1.3): the case's
/// tasks hold shares of a device (250, 500, 700), whole devices (1000,
/// 2000) or none; needs ask for a share, a device or more, half of them for
/// GPU only; pools reserve GPU and hold what their non-revocable tasks hold.
/// Every `gpus` field is the whole devices its milli-GPUs round up to, as
/// the resource manager sends them to a component built before 0.1.3.
pub(crate) fn gpu_preemption_case(g: &mut Gen) -> PreemptionRequest {
    let mut r = preemption_case(g);
    let devices = |milli: u64| milli.div_ceil(u64::from(DEVICE_MILLI));
    r.gpu_running = r.running.iter().map(|_| g.pick(&[0, 0, 250, 500, 500, 700, 1000, 2000])).collect();
    for (t, &m) in r.running.iter_mut().zip(&r.gpu_running) {
        t.resources.gpus = devices(m);
    }
    r.gpu_needs = r.needs.iter().map(|_| g.pick(&[0, 500, 1000, 1000, 1500, 2000])).collect();
    for (n, &m) in r.needs.iter_mut().zip(&r.gpu_needs) {
        n.resources.gpus = devices(m);
        if m > 0 && g.chance(50) {
            // GPU only: only victims that free the needed device count.
            n.resources.cpu_millis = 0;
            n.resources.memory_mib = 0;
        }
    }
    let mut held = vec![0u64; r.pools.len()];
    for (t, &m) in r.running.iter().zip(&r.gpu_running) {
        if !t.revocable {
            held[t.pool as usize] += m;
        }
    }
    r.gpu_pools = held
        .into_iter()
        .map(|allocation_milli| {
            let reservation_milli = g.pick(&[0, 0, 500, 1000, 2000]);
            GpuPool {
                reservation_milli,
                entitlement_milli: reservation_milli + g.pick(&[0, 500, 1000]),
                allocation_milli,
            }
        })
        .collect();
    for (p, q) in r.pools.iter_mut().zip(&r.gpu_pools) {
        p.reservation.gpus = devices(q.reservation_milli);
        p.entitlement.gpus = devices(q.entitlement_milli);
        p.allocation.gpus = devices(q.allocation_milli);
    }
    r
}

/// GPU shares (WIT 0.1.3): a need of one device where two tasks hold half a
/// device each and a third a whole one. In milli-GPUs the two halves or the
/// whole one cover it, never a half beside the whole; a component built
/// before 0.1.3 sees one device each and is judged in whole devices.
fn gpu_share_preemption() -> PreemptionRequest {
    let gpus = |n| Resources::new(0, 0, 0, n);
    PreemptionRequest {
        pools: vec![
            PoolView { path: "/a".into(), reservation: gpus(0), entitlement: gpus(0), allocation: gpus(2) },
            PoolView { path: "/b".into(), reservation: gpus(1), entitlement: gpus(1), allocation: gpus(0) },
        ],
        running: (0..3u32)
            .map(|i| RunningTask {
                pool: 0,
                priority: 1,
                preemptible: true,
                revocable: false,
                started_at_ms: u64::from(i) * 10,
                resources: gpus(1),
            })
            .collect(),
        needs: vec![Need { pool: 1, priority: 10, resources: gpus(1), from_pools: vec![0] }],
        gpu_pools: vec![
            GpuPool { reservation_milli: 0, entitlement_milli: 0, allocation_milli: 2000 },
            GpuPool { reservation_milli: 1000, entitlement_milli: 1000, allocation_milli: 0 },
        ],
        gpu_running: vec![500, 500, 1000],
        gpu_needs: vec![1000],
    }
}

/// The start of one lifecycle sequence: a job of some kind, its tasks as
/// created (INITIALIZED), and the generator that draws its next events.
#[derive(Debug, Clone)]
pub(crate) struct Sequence {
    pub(crate) job: JobView,
    pub(crate) tasks: Vec<TaskView>,
    pub(crate) rng: Gen,
}

/// The lifecycle corpus: sequences to drive with [`Sequence::apply`] and
/// [`Sequence::next_event`], starting at `job-created`.
pub(crate) fn lifecycle() -> impl Iterator<Item = Sequence> {
    let mut g = Gen::new(SEED ^ 2);
    (0..LIFECYCLE_SEQUENCES).map(move |i| {
        let kind = if i == 0 {
            JobKind::Batch
        } else {
            g.pick(&[JobKind::Batch, JobKind::Stateless, JobKind::Stateful, JobKind::Daemon])
        };
        let count = if i == 0 { 2 } else { g.range(1, 5) as u32 };
        let matching_hosts =
            if kind == JobKind::Daemon { (0..count).map(|h| format!("host-{h}")).collect() } else { Vec::new() };
        let job = JobView {
            kind,
            state: JobState::Pending,
            instance_count: count,
            max_failures_per_instance: if i == 0 { 1 } else { g.range(0, 2) as u32 },
            max_run_time_ms: if g.chance(30) { 1000 } else { 0 },
            config_version: 1,
            matching_hosts,
            ..JobView::default()
        };
        let tasks = (0..count).map(|n| TaskView { instance: n, config_version: 1, ..TaskView::default() }).collect();
        Sequence { job, tasks, rng: Gen::new(g.next()) }
    })
}

fn live(s: TaskState) -> bool {
    !matches!(
        s,
        TaskState::Initialized | TaskState::Succeeded | TaskState::Failed | TaskState::Lost | TaskState::Killed
    )
}

impl Sequence {
    /// Carries out actions on the views the way the job manager would, in
    /// short: launches run, kills end, the job takes the state it is marked.
    pub(crate) fn apply(&mut self, actions: &[Action]) {
        for a in actions {
            match a {
                Action::Launch(i) => {
                    if let Some(t) = self.tasks.iter_mut().find(|t| t.instance == *i) {
                        if !live(t.state) {
                            t.state = TaskState::Running;
                            t.run += 1;
                            t.host = Some(format!("host-{i}"));
                            t.running_for_ms = Some(0);
                        }
                    } else {
                        self.tasks.push(TaskView {
                            instance: *i,
                            state: TaskState::Running,
                            run: 1,
                            ..TaskView::default()
                        });
                    }
                }
                Action::Kill(i) => {
                    if let Some(t) = self.tasks.iter_mut().find(|t| t.instance == *i && live(t.state)) {
                        t.state = TaskState::Killed;
                    }
                }
                Action::RestartAfter(r) => {
                    if let Some(t) = self.tasks.iter_mut().find(|t| t.instance == r.instance && !live(t.state)) {
                        t.state = TaskState::Running;
                        t.run += 1;
                    }
                }
                Action::MarkJob(s) => {
                    if !matches!(self.job.state, JobState::Succeeded | JobState::Failed | JobState::Killed) {
                        self.job.state = *s;
                    }
                    if matches!(s, JobState::Failed | JobState::Killed | JobState::Succeeded) {
                        // The job manager stops what still runs of an ended job.
                        self.tasks.iter_mut().filter(|t| live(t.state)).for_each(|t| t.state = TaskState::Killed);
                    }
                }
                Action::UpdateBatch(_) | Action::UpdateFinished(_) => {}
            }
        }
        if self.job.state == JobState::Pending && self.tasks.iter().any(|t| live(t.state)) {
            self.job.state = JobState::Running;
        }
    }

    /// The next event: mostly a run of the job ending or starting, now and
    /// then a timer, a scale or a kill request. The views are changed to
    /// match before the event is returned.
    pub(crate) fn next_event(&mut self) -> Event {
        let g = &mut self.rng;
        let roll = g.range(0, 99);
        if roll < 5 {
            return Event::KillRequested;
        }
        if roll < 10 {
            return Event::Timer(g.range(0, u64::from(self.job.instance_count)) as u32);
        }
        if roll < 15 {
            // Grow by one; the runtime creates the instance first.
            let i = self.job.instance_count;
            self.job.instance_count += 1;
            if self.job.kind == JobKind::Daemon {
                self.job.matching_hosts.push(format!("host-{i}"));
            }
            self.tasks.push(TaskView { instance: i, config_version: 1, ..TaskView::default() });
            return Event::Scaled;
        }
        let n = self.tasks.len().max(1) as u64;
        let i = g.range(0, n - 1) as usize;
        let state = g.pick(&[
            TaskState::Succeeded,
            TaskState::Succeeded,
            TaskState::Failed,
            TaskState::Lost,
            TaskState::Running,
        ]);
        let Some(t) = self.tasks.get_mut(i) else { return Event::JobCreated };
        if state != TaskState::Running && !live(t.state) {
            // Only a live run can end; start it instead.
            t.state = TaskState::Running;
            return Event::TaskChanged(TaskChange { instance: t.instance, state: TaskState::Running });
        }
        t.state = state;
        if matches!(state, TaskState::Failed | TaskState::Lost) {
            t.failures += 1;
        }
        t.running_for_ms = t.running_for_ms.map(|ms| ms + 2000);
        Event::TaskChanged(TaskChange { instance: t.instance, state })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use paceline_plugin_sdk::PreemptionPolicy;
    use paceline_plugin_sdk::validate::check_victims;
    use plugin_priority_preempt::PriorityPreempt;

    /// The corpus has its GPU cases, and the default policy passes every
    /// case in milli-GPUs (as a `preemption-gpu` component is judged) and in
    /// whole devices (as an older one is); on the GPU cases it takes victims
    /// holding shares and whole devices for needs that ask for GPU.
    #[test]
    fn the_preemption_corpus_has_gpu_cases_the_default_policy_passes() {
        let cases: Vec<PreemptionRequest> = preemption().collect();
        assert_eq!(cases.len(), PREEMPTION_CASES);
        // The hand-picked share case and the generated ones.
        let gpu = cases.iter().filter(|r| r.has_gpu_side()).count();
        assert_eq!(gpu, GPU_PREEMPTION_CASES + 1);
        let (mut shares, mut whole, mut gpu_only) = (0, 0, 0);
        for (i, r) in cases.iter().enumerate() {
            let victims = PriorityPreempt::select_victims(r);
            check_victims(r, &victims).unwrap_or_else(|e| panic!("case {i}: {e}"));
            let old = r.in_whole_gpus();
            check_victims(&old, &PriorityPreempt::select_victims(&old)).unwrap_or_else(|e| panic!("case {i}: {e}"));
            if !r.has_gpu_side() || i < 2 {
                continue;
            }
            for v in &victims {
                let (held, asked) = (r.gpu_running[v.task as usize], r.gpu_needs[v.need as usize]);
                if asked == 0 || held == 0 {
                    continue;
                }
                if held < u64::from(DEVICE_MILLI) {
                    shares += 1;
                } else {
                    whole += 1;
                }
                let need = &r.needs[v.need as usize].resources;
                gpu_only += usize::from(need.cpu_millis == 0 && need.memory_mib == 0);
            }
        }
        eprintln!(
            "GPU victims in the corpus: {shares} holding shares, {whole} whole devices, {gpu_only} for GPU-only needs"
        );
        assert!(
            shares >= 3 && whole >= 3 && gpu_only >= 3,
            "shares {shares}, whole {whole}, GPU-only needs {gpu_only}"
        );
    }
}

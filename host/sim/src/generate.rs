//! Seeded synthetic traces: hosts of three shapes over zones, a small pool
//! tree, and jobs arriving as a Poisson process with a mix of batch,
//! service, gang and GPU work whose run times are heavy-tailed
//! (log-normal). The same [`GenConfig`] gives the same trace, byte for byte.
//!
//! Run times are scaled so that the work offered (CPU × time, services
//! included) is `load` of the cluster's CPU over `duration_ms`.

use paceline_model::Resources;
use paceline_model::job::{JobConfig, JobKind};
use paceline_model::pool::{Amount, KindValues, OneOrPerKind, PoolEntry};

use crate::rng::Rng;
use crate::trace::{Event, Header, HostEvent, JobEvent, KillEvent, RunScript, Timed, job_spec};

/// What to generate.
#[derive(Clone, Debug, PartialEq)]
pub struct GenConfig {
    /// Seed of every random choice.
    pub seed: u64,
    /// Hosts.
    pub hosts: usize,
    /// Tasks, summed over jobs (the last job may take it a little over).
    pub tasks: u64,
    /// Span of the arrivals, ms.
    pub duration_ms: u64,
    /// Work offered as a fraction of the cluster's CPU over the span.
    pub load: f64,
    /// Zones hosts are spread over (attribute `zone`: a, b, c, …).
    pub zones: u32,
    /// Share of tasks that are GPU work (hosts get GPUs in proportion).
    pub gpu_share: f64,
    /// Log-normal shape of run times: larger is heavier-tailed.
    pub sigma: f64,
}

impl Default for GenConfig {
    fn default() -> Self {
        GenConfig {
            seed: 1,
            hosts: 100,
            tasks: 2_000,
            duration_ms: 3_600_000,
            load: 0.7,
            zones: 3,
            gpu_share: 0.1,
            sigma: 1.5,
        }
    }
}

/// The kind of a generated job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mix {
    Batch,
    Service,
    Gang,
    Gpu,
}

struct Draft {
    arrival: u64,
    kind: Mix,
    spec: JobConfig,
    /// Run times relative to the median (scaled later).
    rel: Vec<f64>,
    fail_first: Vec<bool>,
}

/// Generates a trace: the header and its events in time order.
pub fn generate(cfg: &GenConfig) -> (Header, Vec<Timed>) {
    let mut rng = Rng::new(cfg.seed);
    let mut hosts: Vec<Timed> = Vec::new();
    let zones = cfg.zones.max(1);
    let gpu_hosts = ((cfg.hosts as f64) * cfg.gpu_share.clamp(0.0, 1.0)).round() as usize;
    let big_hosts = cfg.hosts.saturating_sub(gpu_hosts) / 4;
    let mut capacity = Resources::ZERO;
    for i in 0..cfg.hosts {
        let zone = zone_name(i as u32 % zones);
        let (resources, shape) = if i < gpu_hosts {
            (Resources::new(48_000, 393_216, 2_000_000, 8_000), "gpu")
        } else if i < gpu_hosts + big_hosts {
            (Resources::new(64_000, 262_144, 2_000_000, 0), "large")
        } else {
            (Resources::new(32_000, 131_072, 1_000_000, 0), "standard")
        };
        capacity = capacity.saturating_add(&resources);
        let mut attributes = paceline_model::Labels::new();
        attributes.insert("zone".into(), zone);
        attributes.insert("shape".into(), shape.into());
        if resources.gpu_milli > 0 {
            attributes.insert("gpu_model".into(), "G1".into());
        }
        hosts.push(Timed { at: 0, event: Event::Host(HostEvent { name: format!("h-{i:05}"), resources, attributes }) });
    }
    // Pools first, parents before children, then the hosts.
    let mut events: Vec<Timed> = pools(&capacity).into_iter().map(|p| Timed { at: 0, event: Event::Pool(p) }).collect();
    events.extend(hosts);

    // Jobs until the task count is reached.
    let mut drafts: Vec<Draft> = Vec::new();
    let mut tasks = 0u64;
    let gpu_weight = if gpu_hosts == 0 { 0.0 } else { cfg.gpu_share };
    let weights = [0.6, 0.1, 0.15, gpu_weight];
    while tasks < cfg.tasks {
        let n = drafts.len();
        let kind = [Mix::Batch, Mix::Service, Mix::Gang, Mix::Gpu][rng.weighted(&weights)];
        let draft = draft(&mut rng, n, kind, cfg.sigma);
        tasks += u64::from(draft.spec.instance_count);
        drafts.push(draft);
    }
    // Poisson arrivals over the span: exponential gaps, scaled to end there.
    let gaps: Vec<f64> = (0..=drafts.len()).map(|_| rng.exponential(1.0)).collect();
    let total_gap: f64 = gaps.iter().sum();
    let mut t = 0.0;
    for (d, gap) in drafts.iter_mut().zip(&gaps) {
        t += gap;
        d.arrival = ((t / total_gap) * cfg.duration_ms as f64) as u64;
    }
    // Scale run times so the work offered is `load` of the CPU.
    let cpu = |d: &Draft| d.spec.default_task.resources.cpu_millis as f64;
    let offered_rel: f64 = drafts.iter().map(|d| cpu(d) * d.rel.iter().sum::<f64>()).sum();
    let target = cfg.load.max(0.0) * capacity.cpu_millis as f64 * cfg.duration_ms as f64;
    let scale = if offered_rel > 0.0 { target / offered_rel } else { 1.0 };
    let cap = cfg.duration_ms.max(1) as f64;
    for (n, d) in drafts.into_iter().enumerate() {
        let id = format!("j-{n:06}");
        let runs: Vec<RunScript> = d
            .rel
            .iter()
            .zip(&d.fail_first)
            .map(|(r, fail)| RunScript {
                ms: Some(((r * scale).clamp(1_000.0, cap)) as u64),
                exit: 0,
                fail_runs: u32::from(*fail),
            })
            .collect();
        let gpu_milli = None;
        if d.kind == Mix::Service {
            // Services run until a kill: their "run time" is their lifetime.
            let life = runs.iter().filter_map(|r| r.ms).max().unwrap_or(1_000);
            let kill_at = (d.arrival + life).min(cfg.duration_ms);
            events.push(Timed {
                at: d.arrival,
                event: Event::Job(Box::new(JobEvent {
                    id: id.clone(),
                    spec: d.spec,
                    run: RunScript::default(),
                    runs: Vec::new(),
                    gpu_milli,
                })),
            });
            events.push(Timed { at: kill_at, event: Event::Kill(KillEvent { job: id, instances: None }) });
        } else {
            let uniform = runs.windows(2).all(|w| w[0] == w[1]);
            let (run, runs) = if uniform { (runs[0], Vec::new()) } else { (RunScript::default(), runs) };
            events.push(Timed {
                at: d.arrival,
                event: Event::Job(Box::new(JobEvent { id, spec: d.spec, run, runs, gpu_milli })),
            });
        }
    }
    // Stable: events of one time keep the order they were made in.
    events.sort_by_key(|e| e.at);
    let mut header = Header::new(
        format!("synthetic-{}h-{}tasks-{}hosts", cfg.duration_ms / 3_600_000, tasks, cfg.hosts),
        "generator",
    );
    header.seed = Some(cfg.seed);
    header.duration_ms = Some(cfg.duration_ms);
    header.notes = vec![format!(
        "generated: seed {}, {} hosts over {zones} zones ({gpu_hosts} with 8 GPUs), {tasks} tasks, load {:.2}, log-normal sigma {:.2}; jobs: 60% batch, 10% services (killed at the end of their life), 15% gangs, {:.0}% GPU by weight",
        cfg.seed,
        cfg.hosts,
        cfg.load,
        cfg.sigma,
        gpu_weight * 100.0
    )];
    (header, events)
}

fn zone_name(i: u32) -> String {
    let letters = b"abcdefghijklmnopqrstuvwxyz";
    match letters.get(i as usize) {
        Some(c) => (*c as char).to_string(),
        None => format!("z{i}"),
    }
}

/// /prod (services), /batch/a and /batch/b (shares 2:1), /ml (GPUs).
fn pools(capacity: &Resources) -> Vec<PoolEntry> {
    let pct = |v: u64, p: u64| Some(Amount(v / 100 * p));
    let entry = |path: &str| PoolEntry { path: path.into(), ..PoolEntry::default() };
    let mut prod = entry("/prod");
    // Services are not preemptible: they are admitted within the
    // reservation, in every kind they ask for.
    prod.reservation = KindValues {
        cpu_millis: pct(capacity.cpu_millis, 20),
        memory_mib: pct(capacity.memory_mib, 20),
        disk_mib: pct(capacity.disk_mib, 20),
        gpus: None,
        gpu_milli: None,
    };
    let batch = entry("/batch");
    let mut a = entry("/batch/a");
    a.share = Some(OneOrPerKind::All(2));
    let b = entry("/batch/b");
    let mut ml = entry("/ml");
    ml.reservation = KindValues { gpu_milli: pct(capacity.gpu_milli, 50), ..KindValues::default() };
    vec![prod, batch, a, b, ml]
}

fn draft(rng: &mut Rng, n: usize, kind: Mix, sigma: f64) -> Draft {
    let cores = [250u64, 500, 1_000, 2_000, 4_000, 8_000];
    let (job_kind, pool, instances, cpu, gpus, gang) = match kind {
        Mix::Batch => {
            let instances = (rng.exponential(8.0) as u32 + 1).min(200);
            let pool = if rng.chance(0.6) { "/batch/a" } else { "/batch/b" };
            (JobKind::Batch, pool, instances, cores[rng.weighted(&[3.0, 4.0, 4.0, 3.0, 2.0, 1.0])], 0, false)
        }
        Mix::Service => {
            let instances = rng.range(2, 20) as u32;
            (JobKind::Stateless, "/prod", instances, cores[rng.weighted(&[1.0, 3.0, 4.0, 3.0, 1.0, 0.0])], 0, false)
        }
        Mix::Gang => {
            let instances = [4u32, 8, 16, 32][rng.weighted(&[4.0, 3.0, 2.0, 1.0])];
            (JobKind::Batch, "/batch/a", instances, cores[rng.weighted(&[0.0, 1.0, 3.0, 3.0, 2.0, 1.0])], 0, true)
        }
        Mix::Gpu => {
            let gpus = [1u64, 2, 4, 8][rng.weighted(&[6.0, 2.0, 1.0, 1.0])];
            let instances = [1u32, 2, 4][rng.weighted(&[6.0, 2.0, 1.0])];
            (JobKind::Batch, "/ml", instances, 4_000 * gpus, gpus, instances > 1)
        }
    };
    let memory = cpu / 1_000 * 1_024 * rng.range(2, 8) + 256;
    let mut spec = job_spec(
        &format!("{}-{n}", kind_name(kind)),
        pool,
        job_kind,
        instances,
        Resources::new(cpu, memory, 1_024, gpus * 1_000),
    );
    spec.labels.insert("mix".into(), kind_name(kind).into());
    if gang {
        spec.sla.min_running_instances = Some(instances);
    }
    if job_kind == JobKind::Batch {
        spec.default_task.restart_policy.on_failure = true;
        spec.default_task.restart_policy.max_restarts = Some(2);
    }
    if kind == Mix::Service {
        spec.sla.priority = 10;
        spec.update.batch_size = 0;
    } else {
        spec.sla.preemptible = true;
    }
    // A gang's instances run about as long as each other; others vary.
    let base = rng.lognormal(1.0, sigma);
    let rel = (0..instances).map(|_| if gang { base } else { rng.lognormal(1.0, sigma) }).collect();
    let fail_first = (0..instances).map(|_| job_kind == JobKind::Batch && rng.chance(0.02)).collect();
    Draft { arrival: 0, kind, spec, rel, fail_first }
}

fn kind_name(kind: Mix) -> &'static str {
    match kind {
        Mix::Batch => "batch",
        Mix::Service => "service",
        Mix::Gang => "gang",
        Mix::Gpu => "gpu",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_gives_the_same_trace_and_another_seed_another() {
        let cfg = GenConfig { hosts: 20, tasks: 300, ..GenConfig::default() };
        let a = generate(&cfg);
        let b = generate(&cfg);
        assert_eq!(a, b);
        let c = generate(&GenConfig { seed: 2, ..cfg.clone() });
        assert_ne!(a.1, c.1);
        let jobs: Vec<&JobEvent> =
            a.1.iter()
                .filter_map(|e| match &e.event {
                    Event::Job(j) => Some(j.as_ref()),
                    _ => None,
                })
                .collect();
        let tasks: u64 = jobs.iter().map(|j| u64::from(j.spec.instance_count)).sum();
        assert!(tasks >= 300, "{tasks} tasks");
        assert!(a.1.windows(2).all(|w| w[0].at <= w[1].at), "time order");
        assert!(jobs.iter().any(|j| j.spec.kind == JobKind::Stateless), "services");
        assert!(jobs.iter().any(|j| j.spec.sla.min_running_instances.is_some()), "gangs");
        assert!(jobs.iter().all(|j| j.spec.validate().is_ok()));
    }
}

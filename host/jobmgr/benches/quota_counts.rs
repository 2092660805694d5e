//! What one quota check costs with many live jobs and tasks (security
//! issue 44): the full pass the API's quota check used to make on every
//! create, update and scale ([`JobManager::visit_live_jobs`]) against the
//! counts the job manager now keeps ([`JobManager::live_held`] and
//! [`JobManager::live_job`]). Prints figures; asserts nothing but that the
//! kept counts equal a recount.
//!
//! `cargo bench --workspace --bench quota_counts`; the cluster's size from
//! `QUOTA_BENCH_JOBS` (default 5,000) and `QUOTA_BENCH_TASKS` (tasks per
//! job, default 200): 1,000,000 live tasks by default, in the in-memory store.

use std::sync::Arc;
use std::time::Instant;

use paceline_jobmgr::scenario::Harness;
use paceline_model::Resources;
use paceline_model::job::{JobConfig, JobKind};
use paceline_model::task::TaskSpec;
use paceline_plugin::{MemoryStore, PluginRuntime, Registry, RuntimeConfig};
use paceline_storage::Store;

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// Median of `runs` timings of `f`, in microseconds.
fn median_us(runs: usize, mut f: impl FnMut()) -> f64 {
    let mut times: Vec<f64> = (0..runs)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64() * 1e6
        })
        .collect();
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), String> {
    let jobs = env("QUOTA_BENCH_JOBS", 5_000);
    let per_job = env("QUOTA_BENCH_TASKS", 200) as u32;
    let runtime = Arc::new(PluginRuntime::new(RuntimeConfig::default()).map_err(|e| e.to_string())?);
    let registry = Arc::new(Registry::open(runtime, Arc::new(MemoryStore::default())).map_err(|e| e.to_string())?);
    let store: Arc<dyn Store> = Arc::new(paceline_storage::memory::MemoryStore::new());
    let h = Harness::new(store, registry, &["h1"], 1_000);
    // 50 owners, so one owner's count is a fiftieth of the cluster's.
    let started = Instant::now();
    for j in 0..jobs {
        let config = JobConfig {
            name: "bench".into(),
            owner: format!("owner-{}", j % 50),
            pool: "/test".into(),
            kind: JobKind::Stateless,
            instance_count: per_job,
            default_task: TaskSpec {
                command: "serve".into(),
                resources: Resources::new(100, 64, 0, 0),
                ..TaskSpec::default()
            },
            ..JobConfig::default()
        };
        h.jm.create(&format!("job-{j}"), config).await.map_err(|e| e.to_string())?;
    }
    let create_s = started.elapsed().as_secs_f64();
    let tasks = jobs * u64::from(per_job);
    println!("quota counts: {jobs} live jobs, {tasks} live tasks (created in {create_s:.1} s, in-memory store)");

    // Before: a create's check passed once over every live job and task,
    // an update's or a scale's twice (find the job, then sum).
    let (owner, pool) = ("owner-7", "/test");
    let full_pass = || {
        let (mut oj, mut ot, mut pj, mut pt) = (0u64, 0u64, 0u64, 0u64);
        h.jm.visit_live_jobs(|_, o, p, t| {
            if o == owner {
                oj += 1;
                ot += t;
            }
            if p == pool {
                pj += 1;
                pt += t;
            }
        });
        std::hint::black_box((oj, ot, pj, pt));
    };
    let before = median_us(9, full_pass);
    // After: what `Quotas::check` reads now.
    let after = median_us(10_001, || {
        std::hint::black_box(h.jm.live_job("job-7"));
        std::hint::black_box(h.jm.live_held(owner, pool));
    });
    println!("  before (one full pass, a create's check): median {before:.0} µs; an update's or a scale's: two passes");
    println!("  after (live_job + live_held, O(1)):        median {after:.2} µs");
    println!("  ratio: {:.0}x", before / after.max(1e-9));

    let t = Instant::now();
    let kept = h.jm.live_counts();
    let recount = h.jm.recount_live();
    if kept != recount {
        return Err(format!("kept counts differ from a recount: {kept:?} vs {recount:?}"));
    }
    println!("  kept counts equal a recount ({:.0} ms for both)", t.elapsed().as_secs_f64() * 1e3);
    let (o, p) = h.jm.live_held(owner, pool);
    println!("  {owner}: {} jobs, {} tasks; pool {pool}: {} jobs, {} tasks", o.jobs, o.tasks, p.jobs, p.tasks);
    Ok(())
}

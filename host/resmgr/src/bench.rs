//! The benchmark workloads behind `paceline bench resmgr`.
//!
//! - Entitlement over a tree of 10,000 pools (depth 4: 10 · 10 · 10 · 10
//!   leaves under 1,110 interior pools), all four kinds non-zero, demand
//!   above capacity so every level is contended: full pass, and incremental
//!   passes after one leaf's demand changes (a leaf already above its fair
//!   share, which moves nothing; and a leaf below it, which moves the
//!   division on its whole path).
//! - Admission: 1,000,000 single-task gangs queued over 1,000 leaf pools,
//!   all within entitlement, moved to READY by one [`ResourceManager::admit`].
//! - Memory: bytes held by the queues and gang records with 100,000 gangs queued.
//!
//! Timings are wall-clock on the machine that runs it; build with `--release`.

use std::fmt::Write as _;
use std::time::Instant;

use paceline_model::Resources;
use paceline_model::pool::{PerKind, PoolSpec};

use crate::gang::GangSpec;
use crate::manager::{Config, ResourceManager};

/// Builds the depth-4 tree: `fanout` children per pool, `fanout^4` leaves.
/// Returns the manager and the leaf paths.
pub fn tree(fanout: usize) -> (ResourceManager, Vec<String>) {
    let mut rm = ResourceManager::new(Config::default());
    let leaves_n = fanout.pow(4) as u64;
    // Capacity below total demand so the division is contended at every level.
    rm.set_capacity(Resources::new(leaves_n * 4_000, leaves_n * 16_384, leaves_n * 100_000, leaves_n));
    let mut level = vec![String::new()];
    let mut leaves = Vec::new();
    for depth in 0..4 {
        let mut next = Vec::new();
        for parent in &level {
            for c in 0..fanout {
                let path = format!("{parent}/p{c}");
                let spec = spec_at(depth, fanout, c);
                if let Err(e) = rm.create_pool(&path, spec) {
                    // The workload is fixed; a refusal is a bug in it.
                    panic!("bench tree: {e}");
                }
                next.push(path);
            }
        }
        if depth == 3 {
            leaves = next.clone();
        }
        level = next;
    }
    (rm, leaves)
}

fn spec_at(depth: usize, fanout: usize, c: usize) -> PoolSpec {
    // Reservations shrink by the fan-out per level so children fit parents.
    let below = (fanout as u64).pow(3 - depth as u32);
    PoolSpec {
        reservation: PerKind { cpu: below * 1_000, memory: below * 4_096, disk: below * 10_000, gpu: 0 },
        share: PerKind::splat(1 + (c as u64 % 3)),
        ..PoolSpec::default()
    }
}

fn demand(rm: &mut ResourceManager, leaves: &[String]) {
    for (i, leaf) in leaves.iter().enumerate() {
        let per = Resources::new(500, 2_048, 10_000, (i % 2) as u64);
        let tasks = 4 + (i % 13) as u32;
        let spec = GangSpec { job: i as u64, tasks, per_task: per, ..GangSpec::default() };
        if let Err(e) = rm.submit(leaf, spec, 0) {
            panic!("bench demand: {e}");
        }
    }
}

fn micros(f: impl FnOnce()) -> f64 {
    let t = Instant::now();
    f();
    t.elapsed().as_secs_f64() * 1e6
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Entitlement figures: microseconds (median) and pools re-divided.
#[derive(Clone, Copy, Debug)]
pub struct EntitlementFigures {
    /// Pools in the tree, root excluded.
    pub pools: usize,
    /// Full pass.
    pub full_us: f64,
    /// Incremental, contended tree, a leaf already above its fair share.
    pub quiet_us: f64,
    /// Interior pools re-divided in that case.
    pub quiet_divided: usize,
    /// Incremental, contended tree, a leaf whose entitlement changes.
    pub moving_us: f64,
    /// Interior pools re-divided in that case.
    pub moving_divided: usize,
    /// Incremental, uncontended tree (idle capacity handed out), where any
    /// change moves every pool's share of the idle capacity.
    pub worst_us: f64,
    /// Interior pools re-divided in that case.
    pub worst_divided: usize,
    /// Incremental, contended tree, adversarial: one leaf's demand flips a
    /// top-level pool between satisfied and not, which moves the water level
    /// of all its siblings and so every subtree.
    pub flip_us: f64,
    /// Interior pools re-divided in that case.
    pub flip_divided: usize,
}

fn incremental_runs(
    rm: &mut ResourceManager,
    leaves: &[String],
    pick: impl Fn(usize) -> usize,
    per_task: Resources,
    tasks: u32,
) -> (f64, usize) {
    let mut divided = 0;
    let times = (0..30)
        .map(|i| {
            let spec = GangSpec { job: 1_000_000 + i as u64, tasks, per_task, ..GangSpec::default() };
            if let Err(e) = rm.submit(&leaves[pick(i)], spec, 0) {
                panic!("bench: {e}");
            }
            let us = micros(|| rm.recompute_entitlement_incremental());
            divided = divided.max(rm.last_pass_divisions());
            us
        })
        .collect();
    (median(times), divided)
}

/// Runs the entitlement workloads.
pub fn entitlement_figures() -> EntitlementFigures {
    let (mut rm, leaves) = tree(10);
    demand(&mut rm, &leaves);
    rm.recompute_entitlement_full();
    let full_us = median((0..15).map(|_| micros(|| rm.recompute_entitlement_full())).collect());
    let pools = rm.tree().len() - 1;
    // Leaf 12 asks for far more than its fair share: more demand moves nothing but its path.
    let (quiet_us, quiet_divided) = incremental_runs(&mut rm, &leaves, |_| 12, Resources::new(100, 0, 0, 0), 1);
    // Fresh tree: leaves that were below their fair share get a lot more work.
    let (mut rm, leaves) = tree(10);
    demand(&mut rm, &leaves);
    rm.recompute_entitlement_full();
    let (moving_us, moving_divided) =
        incremental_runs(&mut rm, &leaves, |i| (i * 37 + 3) % leaves.len(), Resources::new(1_000, 1_024, 0, 0), 64);
    // Uncontended: capacity far above demand, so idle capacity is spread by share everywhere.
    let (mut rm, leaves) = tree(10);
    rm.set_capacity(Resources::new(u64::MAX / 8, u64::MAX / 8, u64::MAX / 8, u64::MAX / 8));
    for p in leaves.iter().step_by(7) {
        let spec = GangSpec { per_task: Resources::new(1, 1, 1, 1), ..GangSpec::default() };
        if let Err(e) = rm.submit(p, spec, 0) {
            panic!("bench: {e}");
        }
    }
    rm.recompute_entitlement_full();
    let (worst_us, worst_divided) =
        incremental_runs(&mut rm, &leaves, |i| (i * 37) % leaves.len(), Resources::new(5, 5, 5, 5), 1);
    // Adversarial: no demand under /p0 except one leaf that toggles between nothing and a lot.
    let (mut rm, leaves) = tree(10);
    let others: Vec<String> = leaves.iter().filter(|p| !p.starts_with("/p0/")).cloned().collect();
    demand(&mut rm, &others);
    rm.recompute_entitlement_full();
    let mut flip_divided = 0;
    let mut times = Vec::new();
    for i in 0..30u64 {
        let spec = GangSpec {
            job: 3_000_000 + i,
            tasks: 1_000,
            per_task: Resources::new(4_000, 16_384, 100_000, 1_000),
            ..GangSpec::default()
        };
        let g = match rm.submit("/p0/p0/p0/p0", spec, 0) {
            Ok(g) => g,
            Err(e) => panic!("bench: {e}"),
        };
        times.push(micros(|| rm.recompute_entitlement_incremental()));
        flip_divided = flip_divided.max(rm.last_pass_divisions());
        rm.cancel(g);
        times.push(micros(|| rm.recompute_entitlement_incremental()));
    }
    let flip_us = median(times);
    EntitlementFigures {
        pools,
        full_us,
        quiet_us,
        quiet_divided,
        moving_us,
        moving_divided,
        worst_us,
        worst_divided,
        flip_us,
        flip_divided,
    }
}

/// Admission: (gangs, seconds, gangs per second).
pub fn admission_figures(gangs: usize) -> (usize, f64, f64) {
    let mut rm = ResourceManager::new(Config::default());
    let pools = 1_000;
    rm.set_capacity(Resources::new(u64::MAX / 4, u64::MAX / 4, u64::MAX / 4, u64::MAX / 4));
    let mut paths = Vec::with_capacity(pools);
    for i in 0..pools {
        let path = format!("/t{}/p{}", i / 100, i);
        if i % 100 == 0
            && let Err(e) = rm.create_pool(&format!("/t{}", i / 100), PoolSpec::default())
        {
            panic!("bench: {e}");
        }
        if let Err(e) = rm.create_pool(&path, PoolSpec::default()) {
            panic!("bench: {e}");
        }
        paths.push(rm.tree().id(&path).unwrap_or(crate::tree::PoolId::ROOT));
    }
    for g in 0..gangs {
        let spec = GangSpec {
            job: g as u64,
            priority: (g % 3) as u32,
            per_task: Resources::new(100, 64, 0, 0),
            ..GangSpec::default()
        };
        if let Err(e) = rm.submit_id(paths[g % pools], spec, 0) {
            panic!("bench: {e}");
        }
    }
    rm.recompute_entitlement();
    let t = Instant::now();
    let admitted = rm.admit(1);
    let secs = t.elapsed().as_secs_f64();
    assert_eq!(admitted, gangs, "every gang fits in this workload");
    (admitted, secs, admitted as f64 / secs)
}

/// Builds a manager holding `gangs` queued gangs of 8 tasks over 100 leaf pools.
pub fn queued(gangs: usize) -> ResourceManager {
    let mut rm = ResourceManager::new(Config::default());
    for i in 0..100 {
        if let Err(e) = rm.create_pool(&format!("/q{i}"), PoolSpec::default()) {
            panic!("bench: {e}");
        }
    }
    // No capacity: everything stays queued.
    for g in 0..gangs {
        let spec = GangSpec {
            job: g as u64,
            tasks: 8,
            priority: (g % 5) as u32,
            per_task: Resources::new(100, 64, 0, 0),
            ..GangSpec::default()
        };
        if let Err(e) = rm.submit(&format!("/q{}", g % 100), spec, 0) {
            panic!("bench: {e}");
        }
    }
    rm
}

/// Runs every workload and returns a printable report.
pub fn report() -> String {
    let mut out = String::new();
    let f = entitlement_figures();
    let _ = writeln!(out, "resmgr benchmark (depth-4 tree, 4 kinds; budgets from issue 5)");
    let _ = writeln!(
        out,
        "entitlement, {} pools, full pass:                          {:>9.1} us  (budget 10000 us)",
        f.pools, f.full_us
    );
    let _ = writeln!(
        out,
        "entitlement, incremental, leaf above its fair share:       {:>9.1} us  ({} pools re-divided; budget 1000 us)",
        f.quiet_us, f.quiet_divided
    );
    let _ = writeln!(
        out,
        "entitlement, incremental, leaf whose entitlement moves:    {:>9.1} us  ({} pools re-divided; budget 1000 us)",
        f.moving_us, f.moving_divided
    );
    let _ = writeln!(
        out,
        "entitlement, incremental, uncontended tree (idle spread):   {:>9.1} us  ({} pools re-divided; budget 1000 us)",
        f.worst_us, f.worst_divided
    );
    let _ = writeln!(
        out,
        "entitlement, incremental, adversarial (top level flips):   {:>9.1} us  ({} pools re-divided; budget 1000 us)",
        f.flip_us, f.flip_divided
    );
    let (n, secs, rate) = admission_figures(1_000_000);
    let _ = writeln!(
        out,
        "admission: {n} single-task gangs to READY in {:.3} s: {:>10.0} gangs/s (budget 1000000/s)",
        secs, rate
    );
    let rm = queued(100_000);
    let bytes = rm.queue_bytes();
    let _ = writeln!(
        out,
        "memory: 100000 queued gangs (8 tasks each) held in {:.1} MB ({} bytes/gang) (budget 200 MB)",
        bytes as f64 / 1e6,
        bytes / 100_000
    );
    out
}

//! Observation → figures: outcomes, wait percentiles, the sweep over samples for allocation
//! and stranded capacity, fairness against entitlement, the fill figures.

use std::collections::{BTreeMap, BTreeSet};

use paceline_model::Resources;

use super::figures::{
    Fill, GpuFillPoint, MeanPeak, NeverPlaced, NeverPlacedTask, Outcomes, Percentiles, PoolFairness, PoolSeries,
    Report, Series, Summary, WaitGroup,
};
use super::observed::{FillObserved, FillPoint, Observed, Outcome};
use super::{NEVER_PLACED_LISTED, REPORT_FORMAT, REPORT_VERSION};

/// Rounds to 4 decimals (stable text).
fn r4(v: f64) -> f64 {
    if v.is_finite() { (v * 10_000.0).round() / 10_000.0 } else { 0.0 }
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 { 0.0 } else { r4(a as f64 / b as f64) }
}

fn mean_peak(values: &[f64]) -> MeanPeak {
    if values.is_empty() {
        return MeanPeak::default();
    }
    let mean = values.iter().sum::<f64>() / values.len() as f64;
    let peak = values.iter().copied().fold(0.0, f64::max);
    MeanPeak { mean: r4(mean), peak: r4(peak) }
}

/// Minimal elements (no other waiting demand fits inside them): if none of
/// these fits a host, no waiting demand does.
fn minimal(demands: &BTreeMap<Resources4, u64>) -> Vec<Resources> {
    let mut keys: Vec<Resources> = demands.keys().map(|k| k.0).collect();
    keys.sort_by_key(|r| (r.cpu_millis, r.memory_mib, r.gpu_milli, r.disk_mib, r.ports));
    let mut out: Vec<Resources> = Vec::new();
    for k in keys {
        if !out.iter().any(|m| m.fits_in(&k)) {
            out.push(k);
        }
    }
    out
}

/// `Resources` ordered, as a map key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Resources4(Resources);

impl Ord for Resources4 {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        let k = |r: &Resources| (r.cpu_millis, r.memory_mib, r.disk_mib, r.gpu_milli, r.ports);
        k(&self.0).cmp(&k(&other.0))
    }
}

impl PartialOrd for Resources4 {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// A change at one time, for the sweep over samples.
enum Change {
    HostUp(usize),
    HostDown(usize),
    Place(usize, Resources),
    Free(usize, Resources),
    Wait(Resources),
    Unwait(Resources),
}

impl Observed {
    /// Builds the report (without [`Measured`]).
    pub fn report(&self) -> Report {
        let host_index: BTreeMap<&str, usize> =
            self.hosts.iter().enumerate().map(|(i, h)| (h.name.as_str(), i)).collect();
        // Outcomes, waits, placements, preemptions, makespan.
        let mut outcomes = Outcomes { tasks: self.tasks.len() as u64, ..Outcomes::default() };
        let mut waits_all = Vec::new();
        let mut groups: BTreeMap<(String, String), Vec<u64>> = BTreeMap::new();
        let mut never = NeverPlaced::default();
        let mut summary = Summary::default();
        let mut jobs: BTreeSet<&str> = BTreeSet::new();
        for t in &self.tasks {
            jobs.insert(&t.job);
            match t.outcome {
                Outcome::Succeeded => outcomes.succeeded += 1,
                Outcome::Failed => outcomes.failed += 1,
                Outcome::Killed => outcomes.killed += 1,
                Outcome::Lost => outcomes.lost += 1,
                Outcome::Running => outcomes.running += 1,
                Outcome::Waiting => outcomes.waiting += 1,
                Outcome::NeverPlaced => {
                    outcomes.never_placed += 1;
                    let reason = t.reason.clone().unwrap_or_else(|| "no reason observed".into());
                    *never.by_reason.entry(reason.clone()).or_default() += 1;
                    if never.tasks.len() < NEVER_PLACED_LISTED {
                        never.tasks.push(NeverPlacedTask {
                            job: t.job.clone(),
                            instance: t.instance,
                            pool: t.pool.clone(),
                            reason,
                        });
                    }
                }
            }
            for r in &t.runs {
                if let Some(p) = r.placed_ms {
                    summary.placements += 1;
                    let w = p.saturating_sub(r.queued_ms);
                    waits_all.push(w);
                    groups.entry((t.pool.clone(), t.kind.clone())).or_default().push(w);
                }
                summary.preemptions += u64::from(r.preempted);
                if t.kind == "batch"
                    && let Some(e) = r.ended_ms
                {
                    summary.makespan_ms = summary.makespan_ms.max(e);
                }
            }
        }
        summary.wait_ms = Percentiles::of(waits_all);
        let waits =
            groups.into_iter().map(|((pool, kind), v)| WaitGroup { pool, kind, wait_ms: Percentiles::of(v) }).collect();

        // Spread of each job's placed tasks over `spread_key`.
        let mut per_job: BTreeMap<&str, (u64, BTreeSet<&str>)> = BTreeMap::new();
        for t in &self.tasks {
            let first = t.runs.iter().find_map(|r| r.host.as_deref().filter(|_| r.placed_ms.is_some()));
            if let Some(h) = first {
                let e = per_job.entry(&t.job).or_default();
                e.0 += 1;
                if let Some(v) = host_index.get(h).and_then(|&i| self.hosts[i].attributes.get(&self.spread_key)) {
                    e.1.insert(v);
                }
            }
        }
        let multi: Vec<&(u64, BTreeSet<&str>)> = per_job.values().filter(|(n, _)| *n >= 2).collect();
        summary.spread_jobs = multi.len() as u64;
        if !multi.is_empty() {
            summary.spread_mean_values =
                r4(multi.iter().map(|(_, v)| v.len() as f64).sum::<f64>() / multi.len() as f64);
            summary.spread_multi_share =
                ratio(multi.iter().filter(|(_, v)| v.len() >= 2).count() as u64, multi.len() as u64);
        }

        // The sweep: changes in time order, applied up to each sample time.
        let mut changes: Vec<(u64, u8, Change)> = Vec::new();
        for (i, h) in self.hosts.iter().enumerate() {
            changes.push((h.joined_ms, 0, Change::HostUp(i)));
            if let Some(l) = h.left_ms {
                changes.push((l, 1, Change::HostDown(i)));
            }
        }
        for t in &self.tasks {
            for r in &t.runs {
                let wait_end = r.placed_ms.or(r.ended_ms).unwrap_or(u64::MAX);
                if wait_end > r.queued_ms {
                    changes.push((r.queued_ms, 2, Change::Wait(t.demand)));
                    if wait_end != u64::MAX {
                        changes.push((wait_end, 1, Change::Unwait(t.demand)));
                    }
                }
                if let (Some(p), Some(h)) = (r.placed_ms, r.host.as_deref().and_then(|h| host_index.get(h).copied())) {
                    let end = r.ended_ms.unwrap_or(u64::MAX);
                    if end > p {
                        changes.push((p, 2, Change::Place(h, t.demand)));
                        if end != u64::MAX {
                            changes.push((end, 1, Change::Free(h, t.demand)));
                        }
                    }
                }
            }
        }
        // At one time: frees and departures before arrivals and placements.
        changes.sort_by_key(|(t, order, _)| (*t, *order));
        let n = self.hosts.len();
        let mut alive = vec![false; n];
        let mut used = vec![Resources::ZERO; n];
        let mut capacity = Resources::ZERO;
        let mut allocated = Resources::ZERO;
        let mut waiting: BTreeMap<Resources4, u64> = BTreeMap::new();
        let (mut waiting_n, mut running_n) = (0u64, 0u64);
        let mut series = Series::default();
        let mut next = 0;
        let mut capacity_at: Vec<Resources> = Vec::with_capacity(self.samples_ms.len());
        let mut minimal_cache: Option<Vec<Resources>> = None;
        for &s in &self.samples_ms {
            while next < changes.len() && changes[next].0 <= s {
                match changes[next].2 {
                    Change::HostUp(i) => {
                        if !alive[i] {
                            alive[i] = true;
                            capacity = capacity.saturating_add(&self.hosts[i].resources);
                        }
                    }
                    Change::HostDown(i) => {
                        if alive[i] {
                            alive[i] = false;
                            capacity = capacity.saturating_sub(&self.hosts[i].resources);
                        }
                    }
                    Change::Place(i, d) => {
                        used[i] = used[i].saturating_add(&d);
                        allocated = allocated.saturating_add(&d);
                        running_n += 1;
                    }
                    Change::Free(i, d) => {
                        used[i] = used[i].saturating_sub(&d);
                        allocated = allocated.saturating_sub(&d);
                        running_n = running_n.saturating_sub(1);
                    }
                    Change::Wait(d) => {
                        *waiting.entry(Resources4(d)).or_default() += 1;
                        waiting_n += 1;
                        minimal_cache = None;
                    }
                    Change::Unwait(d) => {
                        if let Some(c) = waiting.get_mut(&Resources4(d)) {
                            *c -= 1;
                            if *c == 0 {
                                waiting.remove(&Resources4(d));
                                minimal_cache = None;
                            }
                        }
                        waiting_n = waiting_n.saturating_sub(1);
                    }
                }
                next += 1;
            }
            let mins = minimal_cache.get_or_insert_with(|| minimal(&waiting));
            let mut stranded = Resources::ZERO;
            if !mins.is_empty() {
                for i in 0..n {
                    if !alive[i] {
                        continue;
                    }
                    let free = self.hosts[i].resources.saturating_sub(&used[i]);
                    if !mins.iter().any(|m| m.fits_in(&free)) {
                        stranded = stranded.saturating_add(&free);
                    }
                }
            }
            series.t_ms.push(s);
            series.cpu.push(ratio(allocated.cpu_millis, capacity.cpu_millis));
            series.memory.push(ratio(allocated.memory_mib, capacity.memory_mib));
            series.gpu.push(ratio(allocated.gpu_milli, capacity.gpu_milli));
            series.stranded_cpu_cores.push(r4(stranded.cpu_millis as f64 / 1_000.0));
            series.stranded_gpus.push(r4(stranded.gpu_milli as f64 / 1_000.0));
            series.waiting.push(waiting_n);
            series.running.push(running_n);
            capacity_at.push(capacity);
            summary.stranded_memory_gib.peak =
                summary.stranded_memory_gib.peak.max(r4(stranded.memory_mib as f64 / 1_024.0));
            summary.stranded_memory_gib.mean += stranded.memory_mib as f64 / 1_024.0;
        }
        let samples = series.t_ms.len().max(1) as f64;
        summary.stranded_memory_gib.mean = r4(summary.stranded_memory_gib.mean / samples);
        summary.cpu_allocation = mean_peak(&series.cpu);
        summary.memory_allocation = mean_peak(&series.memory);
        summary.gpu_allocation = mean_peak(&series.gpu);
        summary.stranded_cpu_cores = mean_peak(&series.stranded_cpu_cores);
        summary.stranded_gpus = mean_peak(&series.stranded_gpus);

        // Pools against their entitlement.
        let mut fairness = Vec::new();
        let mut pool_series = Vec::new();
        for (pool, samples) in &self.pools {
            let mut ps = PoolSeries { pool: pool.clone(), ..PoolSeries::default() };
            let (mut dev_cpu, mut dev_gpu, mut n_gpu) = (0.0, 0.0, 0u64);
            for (s, cap) in samples.iter().zip(&capacity_at) {
                let a = ratio(s.allocation.cpu_millis, cap.cpu_millis);
                let e = ratio(s.entitlement.cpu_millis.min(cap.cpu_millis), cap.cpu_millis);
                ps.cpu_allocation.push(a);
                ps.cpu_entitlement.push(e);
                ps.cpu_deviation.push(r4(a - e));
                dev_cpu += (a - e).abs();
                if cap.gpu_milli > 0 {
                    let ag = ratio(s.allocation.gpu_milli, cap.gpu_milli);
                    let eg = ratio(s.entitlement.gpu_milli.min(cap.gpu_milli), cap.gpu_milli);
                    dev_gpu += (ag - eg).abs();
                    n_gpu += 1;
                }
            }
            let k = ps.cpu_allocation.len().max(1) as f64;
            fairness.push(PoolFairness {
                pool: pool.clone(),
                cpu_mean_abs_deviation: r4(dev_cpu / k),
                gpu_mean_abs_deviation: if n_gpu == 0 { 0.0 } else { r4(dev_gpu / n_gpu as f64) },
                cpu_mean_share: r4(ps.cpu_allocation.iter().sum::<f64>() / k),
                cpu_mean_entitlement: r4(ps.cpu_entitlement.iter().sum::<f64>() / k),
            });
            pool_series.push(ps);
        }

        Report {
            report: REPORT_FORMAT.into(),
            version: REPORT_VERSION,
            trace: self.trace.clone(),
            source: self.source.clone(),
            seed: self.seed,
            trace_seed: self.trace_seed,
            tick_ms: self.tick_ms,
            policies: self.policies.clone(),
            swaps: self.swaps.iter().map(|(at, slot, p)| format!("{at} ms: {slot} -> {p}")).collect(),
            end_ms: self.end_ms,
            // A host that failed and joined again is one host.
            hosts: self.hosts.iter().map(|h| h.name.as_str()).collect::<BTreeSet<_>>().len() as u64,
            jobs: jobs.len() as u64,
            outcomes,
            summary,
            waits,
            fairness,
            never_placed: never,
            plugins: self.plugins.clone(),
            series,
            pool_series,
            tasks: if self.list_tasks { self.tasks.clone() } else { Vec::new() },
            fill: self.fill.as_ref().map(|f| self.fill_figures(f)),
            measured: None,
        }
    }
}

fn gpu_fill_point(p: &FillPoint) -> GpuFillPoint {
    GpuFillPoint {
        arrived: ratio(p.arrived_milli, p.capacity_milli),
        allocated: ratio(p.allocated_milli, p.capacity_milli),
        unallocated_gpus: r4(p.capacity_milli.saturating_sub(p.allocated_milli) as f64 / 1_000.0),
    }
}

impl Observed {
    fn fill_figures(&self, f: &FillObserved) -> Fill {
        let mut held = Resources::default();
        let mut placed: BTreeMap<&str, bool> = BTreeMap::new();
        let mut tasks_placed = 0;
        for t in &self.tasks {
            let running = t.outcome == Outcome::Running;
            let whole = placed.entry(&t.job).or_insert(true);
            *whole &= running;
            if running {
                tasks_placed += 1;
                held = held.saturating_add(&t.demand);
            }
        }
        let capacity = self
            .hosts
            .iter()
            .filter(|h| h.left_ms.is_none())
            .fold(Resources::default(), |a, h| a.saturating_add(&h.resources));
        Fill {
            stop_at_first_unplaced: f.stop_at_first_unplaced,
            jobs_submitted: f.jobs_submitted,
            jobs_placed: placed.values().filter(|w| **w).count() as u64,
            tasks_placed,
            first_unplaced: f.first_unplaced.clone(),
            cpu_cores: r4(held.cpu_millis as f64 / 1_000.0),
            gpus: r4(held.gpu_milli as f64 / 1_000.0),
            cpu_share: ratio(held.cpu_millis, capacity.cpu_millis),
            memory_share: ratio(held.memory_mib, capacity.memory_mib),
            gpu_share: ratio(held.gpu_milli, capacity.gpu_milli),
            dropped: f.dropped.clone(),
            gpu_curve: f.gpu_curve.iter().map(gpu_fill_point).collect(),
            gpu_at_full: f.gpu_curve.iter().find(|p| p.arrived_milli >= p.capacity_milli).map(gpu_fill_point),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::observed::{HostLife, RunLife, TaskLife};
    use super::*;

    fn host(name: &str, zone: &str) -> HostLife {
        let mut attributes = paceline_model::Labels::new();
        attributes.insert("zone".into(), zone.into());
        HostLife {
            name: name.into(),
            resources: Resources::new(4_000, 8_192, 0, 0),
            attributes,
            joined_ms: 0,
            left_ms: None,
        }
    }

    fn task(job: &str, i: u32, cpu: u64, runs: Vec<RunLife>, outcome: Outcome) -> TaskLife {
        TaskLife {
            job: job.into(),
            instance: i,
            pool: "/p".into(),
            kind: "batch".into(),
            demand: Resources::new(cpu, 1_024, 0, 0),
            arrived_ms: 0,
            runs,
            outcome,
            reason: (outcome == Outcome::NeverPlaced).then(|| "insufficient_resources".into()),
        }
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let p = Percentiles::of((1..=100).collect());
        assert_eq!((p.p50, p.p95, p.p99, p.max, p.count), (50, 95, 99, 100, 100));
        assert_eq!(Percentiles::of(vec![]), Percentiles::default());
    }

    #[test]
    fn stranded_capacity_is_free_space_no_waiting_task_fits() {
        // Two hosts of 4 cores, each holding 3: 1 core free on each, and a
        // task of 2 cores waits. Both free cores are stranded.
        let placed = |h: &str| RunLife {
            run: 1,
            queued_ms: 0,
            placed_ms: Some(0),
            host: Some(h.into()),
            ended_ms: Some(10_000),
            end: Some("SUCCEEDED".into()),
            preempted: false,
        };
        let waiting = RunLife { run: 1, queued_ms: 0, ..RunLife::default() };
        let obs = Observed {
            hosts: vec![host("a", "z1"), host("b", "z2")],
            tasks: vec![
                task("j", 0, 3_000, vec![placed("a")], Outcome::Succeeded),
                task("j", 1, 3_000, vec![placed("b")], Outcome::Succeeded),
                task("k", 0, 2_000, vec![waiting], Outcome::NeverPlaced),
            ],
            samples_ms: vec![5_000, 20_000],
            spread_key: "zone".into(),
            ..Observed::default()
        };
        let r = obs.report();
        assert_eq!(
            r.series.stranded_cpu_cores,
            vec![2.0, 0.0],
            "after the frees the 2-core task fits: nothing stranded"
        );
        assert_eq!(r.outcomes.accounted(), r.outcomes.tasks);
        assert_eq!(r.never_placed.by_reason.get("insufficient_resources"), Some(&1));
        assert_eq!(r.summary.spread_jobs, 1);
        assert_eq!(r.summary.spread_mean_values, 2.0);
        assert_eq!(r.series.cpu, vec![0.75, 0.0]);
    }
}

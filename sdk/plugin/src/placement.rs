//! Helpers for placement policies: a working copy of free capacity, per-job
//! host counts, eligibility, preferences and gang bookkeeping.
//!
//! They keep the hot loop over hosts flat: free capacity lives in one
//! `Vec<Resources>`, scores are integers, and nothing allocates per
//! (task, host) pair.

use std::collections::BTreeMap;

use crate::resources::ScoreScale;
use crate::types::{
    Assignment, DEVICE_MILLI, DeviceGrant, GpuTask, HostFilter, PlacementRequest, PlacementResult, Resources, Task,
    Unplaced, UnplacedReason,
};

/// Mutable state of one placement round: what is still free on each host,
/// how many tasks of each job each host holds, and the answer being built.
#[derive(Debug)]
pub struct Round<'a> {
    /// The request being answered.
    pub request: &'a PlacementRequest,
    /// Free capacity per host, updated as tasks are assigned.
    pub free: Vec<Resources>,
    /// Fullness weights per host (see [`ScoreScale`]).
    pub scales: Vec<ScoreScale>,
    /// (job, host) → tasks of the job on the host, kept only for jobs that
    /// have a per-host maximum or spread, so other jobs pay nothing.
    counts: BTreeMap<(u32, u32), u32>,
    tracked_jobs: Vec<bool>,
    journal: Vec<u32>,
    result: PlacementResult,
    /// Milli-GPUs free per device, per host (empty when the round has no
    /// GPU host), updated as tasks are assigned.
    pub gpu_free: Vec<Vec<u32>>,
}

/// A task that asks for no GPU.
static NO_GPU: GpuTask = GpuTask { milli: 0, models: Vec::new() };

impl<'a> Round<'a> {
    /// Starts a round over `request`, counting tasks per (job, host) only for
    /// jobs with a per-host maximum or a spread attribute.
    pub fn new(request: &'a PlacementRequest) -> Self {
        Self::with_tracking(request, false)
    }

    /// Starts a round that counts tasks per (job, host) for every job, for
    /// policies that score hosts by how many of a job's tasks they hold.
    pub fn tracking_every_job(request: &'a PlacementRequest) -> Self {
        Self::with_tracking(request, true)
    }

    fn with_tracking(request: &'a PlacementRequest, every_job: bool) -> Self {
        let free = request.hosts.iter().map(|h| h.free).collect();
        let scales = request.hosts.iter().map(|h| ScoreScale::for_total(&h.total)).collect();
        let tracked_jobs: Vec<bool> =
            request.jobs.iter().map(|j| every_job || j.max_per_host > 0 || j.spread_over.is_some()).collect();
        let mut counts = BTreeMap::new();
        for (j, job) in request.jobs.iter().enumerate() {
            if tracked_jobs[j] {
                for hc in &job.existing {
                    *counts.entry((j as u32, hc.host)).or_insert(0) += hc.count;
                }
            }
        }
        Round {
            request,
            free,
            scales,
            counts,
            tracked_jobs,
            journal: Vec::new(),
            result: PlacementResult {
                assignments: Vec::with_capacity(request.tasks.len()),
                unplaced: Vec::new(),
                grants: Vec::new(),
            },
            gpu_free: request.gpu_hosts.iter().map(|h| h.devices.iter().map(|d| d.free_milli).collect()).collect(),
        }
    }

    /// Task `task`'s GPU ask (none when the round carries no GPU side).
    pub fn gpu_task(&self, task: u32) -> &'a GpuTask {
        self.request.gpu_tasks.get(task as usize).unwrap_or(&NO_GPU)
    }

    /// Whether task `task` fits on `host`: its demand within the host's free
    /// capacity and, when it asks for GPU, devices that take it.
    pub fn fits(&self, task: u32, host: u32) -> bool {
        let Some(free) = self.free.get(host as usize) else { return false };
        self.request.tasks.get(task as usize).is_some_and(|t| t.demand.fits_in(free)) && self.gpu_fits(task, host)
    }

    /// Whether `host` has devices for task `task`'s GPU ask (true for a task
    /// that asks for none).
    pub fn gpu_fits(&self, task: u32, host: u32) -> bool {
        let ask = self.gpu_task(task);
        let (count, _) = ask.shape();
        if count == 0 {
            return true;
        }
        let (Some(devices), Some(free)) = (self.request.gpu_hosts.get(host as usize), self.gpu_free.get(host as usize))
        else {
            return false;
        };
        devices.devices.iter().zip(free).filter(|(d, f)| ask.takes(d, **f)).take(count as usize).count()
            == count as usize
    }

    /// The devices the runtime's default would give task `task` on `host`:
    /// whole devices from the lowest wholly free ones, a share on the
    /// device it fills best (least free that takes it, lowest index on
    /// ties). `None` when the host has none that take it.
    pub fn default_devices(&self, task: u32, host: u32) -> Option<Vec<u32>> {
        let ask = self.gpu_task(task);
        let (count, each) = ask.shape();
        if count == 0 {
            return Some(Vec::new());
        }
        let devices = &self.request.gpu_hosts.get(host as usize)?.devices;
        let free = self.gpu_free.get(host as usize)?;
        let takes = |i: usize| ask.takes(&devices[i], free[i]);
        if each == DEVICE_MILLI {
            let picked: Vec<u32> =
                (0..devices.len()).filter(|&i| takes(i)).take(count as usize).map(|i| i as u32).collect();
            (picked.len() == count as usize).then_some(picked)
        } else {
            (0..devices.len()).filter(|&i| takes(i)).min_by_key(|&i| (free[i], i)).map(|i| vec![i as u32])
        }
    }

    /// Tasks of `job` per host that holds any, counting this round's
    /// assignments (tracked jobs only).
    pub fn job_hosts(&self, job: u32) -> impl Iterator<Item = (u32, u32)> + '_ {
        self.counts.range((job, 0)..=(job, u32::MAX)).map(|(&(_, h), &c)| (h, c)).filter(|&(_, c)| c > 0)
    }

    /// Tasks of `job` on `host`, counting this round's assignments.
    pub fn job_count(&self, job: u32, host: u32) -> u32 {
        self.counts.get(&(job, host)).copied().unwrap_or(0)
    }

    /// The job has a per-host maximum that `host` has reached.
    pub fn at_max_per_host(&self, job: u32, host: u32) -> bool {
        match self.request.jobs.get(job as usize) {
            Some(j) if j.max_per_host > 0 => self.job_count(job, host) >= j.max_per_host,
            _ => false,
        }
    }

    /// Records `task` (an index into the request) on `host` and takes its
    /// demand; a GPU ask gets [`Round::default_devices`] (none when no
    /// device takes it: the runtime then refuses the answer).
    pub fn assign(&mut self, task: u32, host: u32) {
        let devices = self.default_devices(task, host).unwrap_or_default();
        self.assign_with_devices(task, host, devices);
    }

    /// [`Round::assign`] with the policy's own choice of devices (indices
    /// into the host's devices; empty for a task that asks for no GPU).
    pub fn assign_with_devices(&mut self, task: u32, host: u32, devices: Vec<u32>) {
        let t = &self.request.tasks[task as usize];
        let (_, each) = self.gpu_task(task).shape();
        if !devices.is_empty() {
            if let Some(free) = self.gpu_free.get_mut(host as usize) {
                for &d in &devices {
                    if let Some(f) = free.get_mut(d as usize) {
                        *f = f.saturating_sub(each);
                    }
                }
                // Whole free devices, as the host offer counts them.
                let whole = free.iter().filter(|&&f| f == DEVICE_MILLI).count() as u64;
                let f = &mut self.free[host as usize];
                *f = f.saturating_sub(&t.demand);
                f.gpus = whole;
            }
            self.result.grants.push(DeviceGrant { task, devices });
        } else {
            let f = &mut self.free[host as usize];
            *f = f.saturating_sub(&t.demand);
        }
        if self.tracked_jobs.get(t.job as usize).copied().unwrap_or(false) {
            *self.counts.entry((t.job, host)).or_insert(0) += 1;
        }
        self.journal.push(host);
        self.result.assignments.push(Assignment { task, host });
    }

    /// Marks `task` unplaced.
    pub fn leave(&mut self, task: u32, reason: UnplacedReason, detail: impl Into<String>) {
        self.result.unplaced.push(Unplaced { task, reason, detail: detail.into() });
    }

    /// Number of assignments made so far; pass it to [`Round::undo_since`].
    pub fn checkpoint(&self) -> usize {
        self.result.assignments.len()
    }

    /// Undoes every assignment made since `checkpoint` (a gang that failed),
    /// giving their resources back. Returns the tasks that were undone.
    pub fn undo_since(&mut self, checkpoint: usize) -> Vec<u32> {
        let undone: Vec<Assignment> = self.result.assignments.drain(checkpoint..).collect();
        let mut tasks = Vec::with_capacity(undone.len());
        for a in undone {
            let t = &self.request.tasks[a.task as usize];
            let f = &mut self.free[a.host as usize];
            *f = f.saturating_add(&t.demand);
            if let Some(g) = self.result.grants.iter().rposition(|g| g.task == a.task) {
                let grant = self.result.grants.swap_remove(g);
                let (_, each) = self.gpu_task(a.task).shape();
                if let Some(free) = self.gpu_free.get_mut(a.host as usize) {
                    for d in grant.devices {
                        if let Some(f) = free.get_mut(d as usize) {
                            *f = (*f + each).min(DEVICE_MILLI);
                        }
                    }
                    self.free[a.host as usize].gpus = free.iter().filter(|&&f| f == DEVICE_MILLI).count() as u64;
                }
            }
            self.journal.push(a.host);
            if self.tracked_jobs.get(t.job as usize).copied().unwrap_or(false)
                && let Some(c) = self.counts.get_mut(&(t.job, a.host))
            {
                *c = c.saturating_sub(1);
            }
            tasks.push(a.task);
        }
        tasks
    }

    /// Every host whose free capacity changed (by an assignment or an undo),
    /// in order. A policy that keeps its own copy of free capacity (in a
    /// layout of its choosing) replays the entries it has not seen yet.
    pub fn journal(&self) -> &[u32] {
        &self.journal
    }

    /// The hosts `task` may use after its hard constraints.
    pub fn eligible(&self, task: &Task) -> &'a HostFilter {
        match self.request.constraints.get(task.constraints as usize) {
            Some(c) => &c.eligible,
            None => &HostFilter::All,
        }
    }

    /// Sum of the weights of `task`'s soft preferences that `host` matches.
    pub fn preference_score(&self, task: &Task, host: u32) -> i64 {
        let Some(set) = self.request.constraints.get(task.constraints as usize) else { return 0 };
        set.preferences
            .iter()
            .filter(|p| self.attribute(p.attribute, host) == Some(p.value))
            .map(|p| i64::from(p.weight))
            .sum()
    }

    /// The value (a symbol index) of attribute column `column` on `host`.
    pub fn attribute(&self, column: u32, host: u32) -> Option<u32> {
        let v = *self.request.attributes.get(column as usize)?.values.get(host as usize)?;
        (v != crate::types::NO_VALUE).then_some(v)
    }

    /// The eligible host where task `t` fits and its job is below its
    /// per-host maximum that has the smallest `key(host)`; ties go to the
    /// lowest index. Without such a host, the reason: no eligible host at
    /// all, only hosts at the job's maximum, or not enough resources.
    ///
    /// For policies that score each candidate; a policy with a tighter loop
    /// (see `binpack`) walks hosts itself.
    pub fn pick_min_by_key<K: Ord>(&self, t: u32, mut key: impl FnMut(u32) -> K) -> Result<u32, UnplacedReason> {
        let task = &self.request.tasks[t as usize];
        let hosts: Box<dyn Iterator<Item = u32> + '_> = match self.eligible(task) {
            HostFilter::All => Box::new(0..self.free.len() as u32),
            HostFilter::Only(h) if h.is_empty() => return Err(UnplacedReason::ConstraintsUnsatisfiable),
            HostFilter::Only(h) => Box::new(h.iter().copied()),
        };
        let mut best: Option<(K, u32)> = None;
        let mut blocked_by_max = false;
        for h in hosts {
            if !self.fits(t, h) {
                continue;
            }
            if self.at_max_per_host(task.job, h) {
                blocked_by_max = true;
                continue;
            }
            let k = key(h);
            if best.as_ref().is_none_or(|(b, _)| k < *b) {
                best = Some((k, h));
            }
        }
        match best {
            Some((_, h)) => Ok(h),
            None if blocked_by_max => Err(UnplacedReason::MaxPerHost),
            None => Err(UnplacedReason::InsufficientResources),
        }
    }

    /// Finishes the round.
    pub fn finish(self) -> PlacementResult {
        self.result
    }
}

/// Gives every assigned task that asks for GPU and holds no grant the
/// runtime's default devices ([`Round::default_devices`], after the grants
/// the answer already makes, in assignment order). The runtime runs it on
/// every answer before checking it, so a policy built against the API
/// before GPU shares (or one that leaves device choice to the runtime)
/// still places GPU tasks; a task no device of its host takes keeps no
/// grant, and the check refuses the answer.
pub fn complete_grants(request: &PlacementRequest, result: &mut PlacementResult) {
    if request.gpu_tasks.iter().all(|t| t.milli == 0) {
        return;
    }
    let mut round = Round::new(request);
    let mut granted = vec![false; request.tasks.len()];
    let explicit = std::mem::take(&mut result.grants);
    let host_of: std::collections::HashMap<u32, u32> = result.assignments.iter().map(|a| (a.task, a.host)).collect();
    for g in &explicit {
        if let Some(&host) = host_of.get(&g.task)
            && let Some(seen) = granted.get_mut(g.task as usize)
        {
            *seen = true;
            round.assign_with_devices(g.task, host, g.devices.clone());
        }
    }
    let mut grants = explicit;
    for a in &result.assignments {
        if granted.get(a.task as usize).copied().unwrap_or(true) || round.gpu_task(a.task).milli == 0 {
            continue;
        }
        if let Some(devices) = round.default_devices(a.task, a.host) {
            round.assign_with_devices(a.task, a.host, devices.clone());
            grants.push(DeviceGrant { task: a.task, devices });
        }
    }
    result.grants = grants;
}

/// Splits the request's tasks into gangs: runs of consecutive tasks with the
/// same gang id, as `(start, end)` index ranges.
pub fn gangs(tasks: &[Task]) -> impl Iterator<Item = (usize, usize)> + '_ {
    let mut start = 0;
    std::iter::from_fn(move || {
        if start >= tasks.len() {
            return None;
        }
        let gang = tasks[start].gang;
        let mut end = start + 1;
        while end < tasks.len() && tasks[end].gang == gang {
            end += 1;
        }
        let range = (start, end);
        start = end;
        Some(range)
    })
}

/// Places each gang with `choose`, all or nothing: when `choose` finds no host
/// for a task, the gang's earlier assignments are undone, that task is left
/// with the returned reason and its gang-mates with `GangIncomplete`.
///
/// `choose(round, task_index)` returns the host or the reason it found none;
/// a GPU ask gets the runtime's default devices ([`Round::assign`]).
pub fn place_gangs<F>(round: Round<'_>, mut choose: F) -> PlacementResult
where
    F: FnMut(&Round<'_>, u32) -> Result<u32, UnplacedReason>,
{
    place_gangs_on_devices(round, |r, t| choose(r, t).map(|h| (h, None)))
}

/// [`place_gangs`] for a policy that chooses GPU devices too: `choose`
/// returns the host and, for a GPU ask, `Some(devices)` (indices into the
/// host's devices) or `None` for the runtime's default.
pub fn place_gangs_on_devices<F>(mut round: Round<'_>, mut choose: F) -> PlacementResult
where
    F: FnMut(&Round<'_>, u32) -> Result<(u32, Option<Vec<u32>>), UnplacedReason>,
{
    let request = round.request;
    for (start, end) in gangs(&request.tasks) {
        let checkpoint = round.checkpoint();
        let mut failed = None;
        for t in start as u32..end as u32 {
            match choose(&round, t) {
                Ok((host, Some(devices))) => round.assign_with_devices(t, host, devices),
                Ok((host, None)) => round.assign(t, host),
                Err(reason) => {
                    failed = Some((t, reason));
                    break;
                }
            }
        }
        if let Some((culprit, reason)) = failed {
            round.undo_since(checkpoint);
            for t in start as u32..end as u32 {
                if t == culprit {
                    round.leave(t, reason, "");
                } else {
                    round.leave(
                        t,
                        UnplacedReason::GangIncomplete,
                        format!("task {culprit} of the gang could not be placed"),
                    );
                }
            }
        }
    }
    round.finish()
}

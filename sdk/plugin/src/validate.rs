//! Checks a policy's answer against its request.
//!
//! The host runtime never trusts a plugin: it runs these checks on every
//! answer, and the native test harness runs them too, so an author sees the
//! same verdict before deploying.

use std::fmt;

use crate::types::{
    HostFilter, PlacementRequest, PlacementResult, PreemptionRequest, Resources, UnplacedReason, Victim,
};

/// What is wrong with an answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Violation {
    /// An index that is not in the request.
    UnknownTask(u32),
    /// A host index that is not in the request.
    UnknownHost(u32),
    /// The same task appears twice in the answer.
    TaskTwice(u32),
    /// A task is neither assigned nor unplaced.
    TaskMissing(u32),
    /// The tasks assigned to a host need more than it has free.
    OverCapacity {
        /// The host.
        host: u32,
        /// What was assigned to it.
        assigned: Resources,
        /// What it had free.
        free: Resources,
    },
    /// A task was put on a host its hard constraints exclude.
    Ineligible {
        /// The task.
        task: u32,
        /// The host.
        host: u32,
    },
    /// A job has more tasks on a host than its per-host maximum.
    MaxPerHost {
        /// The job.
        job: u32,
        /// The host.
        host: u32,
        /// Tasks of the job on the host, existing included.
        count: u32,
    },
    /// Part of a gang was placed and part was not.
    PartialGang(u32),
    /// A victim is not preemptible.
    NotPreemptible(u32),
    /// A victim refers to a need that does not exist.
    UnknownNeed(u32),
    /// A victim comes from a pool its need does not allow.
    WrongPool {
        /// The victim task.
        task: u32,
        /// The need it was chosen for.
        need: u32,
    },
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::UnknownTask(t) => write!(f, "task index {t} is not in the request"),
            Self::UnknownHost(h) => write!(f, "host index {h} is not in the request"),
            Self::TaskTwice(t) => write!(f, "task {t} appears more than once in the answer"),
            Self::TaskMissing(t) => write!(f, "task {t} is neither assigned nor unplaced"),
            Self::OverCapacity { host, assigned, free } => {
                write!(f, "host {host} is over capacity: assigned {assigned:?}, free {free:?}")
            }
            Self::Ineligible { task, host } => {
                write!(f, "task {task} was put on host {host}, which its hard constraints exclude")
            }
            Self::MaxPerHost { job, host, count } => {
                write!(f, "job {job} has {count} tasks on host {host}, above its per-host maximum")
            }
            Self::PartialGang(g) => write!(f, "gang {g} was placed only in part"),
            Self::NotPreemptible(t) => write!(f, "victim {t} is not preemptible"),
            Self::UnknownNeed(n) => write!(f, "need index {n} is not in the request"),
            Self::WrongPool { task, need } => write!(f, "victim {task} is from a pool that need {need} does not allow"),
        }
    }
}

impl std::error::Error for Violation {}

/// Checks a placement answer: known indices, every task exactly once, hosts
/// within free capacity, hard constraints, per-host maxima, whole gangs.
pub fn check_placement(request: &PlacementRequest, result: &PlacementResult) -> Result<(), Violation> {
    let n_tasks = request.tasks.len();
    let n_hosts = request.hosts.len();
    // 0 = unseen, 1 = assigned, 2 = unplaced.
    let mut seen = vec![0u8; n_tasks];
    let mut used = vec![Resources::ZERO; n_hosts];
    for a in &result.assignments {
        let t = *request.tasks.get(a.task as usize).ok_or(Violation::UnknownTask(a.task))?;
        if a.host as usize >= n_hosts {
            return Err(Violation::UnknownHost(a.host));
        }
        if seen[a.task as usize] != 0 {
            return Err(Violation::TaskTwice(a.task));
        }
        seen[a.task as usize] = 1;
        let u = &mut used[a.host as usize];
        *u = u.saturating_add(&t.demand);
        if let Some(set) = request.constraints.get(t.constraints as usize)
            && let HostFilter::Only(hosts) = &set.eligible
            && hosts.binary_search(&a.host).is_err()
        {
            return Err(Violation::Ineligible { task: a.task, host: a.host });
        }
    }
    for u in &result.unplaced {
        if u.task as usize >= n_tasks {
            return Err(Violation::UnknownTask(u.task));
        }
        if seen[u.task as usize] != 0 {
            return Err(Violation::TaskTwice(u.task));
        }
        seen[u.task as usize] = 2;
    }
    if let Some(missing) = seen.iter().position(|s| *s == 0) {
        return Err(Violation::TaskMissing(missing as u32));
    }
    for (h, assigned) in used.iter().enumerate() {
        let free = request.hosts[h].free;
        if !assigned.fits_in(&free) {
            return Err(Violation::OverCapacity { host: h as u32, assigned: *assigned, free });
        }
    }
    check_max_per_host(request, result)?;
    check_gangs(request, &seen)
}

fn check_max_per_host(request: &PlacementRequest, result: &PlacementResult) -> Result<(), Violation> {
    if request.jobs.iter().all(|j| j.max_per_host == 0) {
        return Ok(());
    }
    let mut counts = std::collections::BTreeMap::<(u32, u32), u32>::new();
    for (j, job) in request.jobs.iter().enumerate() {
        if job.max_per_host > 0 {
            for hc in &job.existing {
                *counts.entry((j as u32, hc.host)).or_default() += hc.count;
            }
        }
    }
    for a in &result.assignments {
        let job = request.tasks[a.task as usize].job;
        let Some(info) = request.jobs.get(job as usize) else { continue };
        if info.max_per_host == 0 {
            continue;
        }
        let c = counts.entry((job, a.host)).or_default();
        *c += 1;
        if *c > info.max_per_host {
            return Err(Violation::MaxPerHost { job, host: a.host, count: *c });
        }
    }
    Ok(())
}

fn check_gangs(request: &PlacementRequest, seen: &[u8]) -> Result<(), Violation> {
    for (start, end) in crate::placement::gangs(&request.tasks) {
        let first = seen[start];
        if seen[start..end].iter().any(|s| *s != first) {
            return Err(Violation::PartialGang(request.tasks[start].gang));
        }
    }
    Ok(())
}

/// Checks a preemption answer: known indices, no victim twice, only
/// preemptible tasks, only from the pools each need allows.
pub fn check_victims(request: &PreemptionRequest, victims: &[Victim]) -> Result<(), Violation> {
    let mut seen = vec![false; request.running.len()];
    for v in victims {
        let task = request.running.get(v.task as usize).ok_or(Violation::UnknownTask(v.task))?;
        let need = request.needs.get(v.need as usize).ok_or(Violation::UnknownNeed(v.need))?;
        if std::mem::replace(&mut seen[v.task as usize], true) {
            return Err(Violation::TaskTwice(v.task));
        }
        if !task.preemptible && !task.revocable {
            return Err(Violation::NotPreemptible(v.task));
        }
        if !need.from_pools.is_empty() && !need.from_pools.contains(&task.pool) {
            return Err(Violation::WrongPool { task: v.task, need: v.need });
        }
    }
    Ok(())
}

/// Counts unplaced tasks by reason, for reports.
pub fn unplaced_by_reason(result: &PlacementResult) -> Vec<(UnplacedReason, usize)> {
    let mut out: Vec<(UnplacedReason, usize)> = Vec::new();
    for u in &result.unplaced {
        match out.iter_mut().find(|(r, _)| *r == u.reason) {
            Some((_, n)) => *n += 1,
            None => out.push((u.reason, 1)),
        }
    }
    out
}

/// Checks lifecycle actions: every instance they name exists (below the
/// larger of the job's instance count and its task list).
pub fn check_actions(
    job: &crate::types::JobView,
    tasks: &[crate::types::TaskView],
    actions: &[crate::types::Action],
) -> Result<(), Violation> {
    use crate::types::Action;
    let bound = (job.instance_count as usize).max(tasks.len()) as u32;
    let known = |i: u32| if i < bound { Ok(()) } else { Err(Violation::UnknownTask(i)) };
    for a in actions {
        match a {
            Action::Launch(i) | Action::Kill(i) => known(*i)?,
            Action::RestartAfter(r) => known(r.instance)?,
            Action::UpdateBatch(b) => b.iter().try_for_each(|i| known(*i))?,
            Action::MarkJob(_) | Action::UpdateFinished(_) => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::*;

    fn request() -> PlacementRequest {
        let host = HostOffer { free: Resources::new(1000, 1000, 0, 0), total: Resources::new(1000, 1000, 0, 0) };
        let task = |gang| Task { demand: Resources::new(600, 100, 0, 0), gang, ..Task::default() };
        PlacementRequest {
            hosts: vec![host, host],
            jobs: vec![JobInfo::default()],
            constraints: vec![ConstraintSet::default()],
            tasks: vec![task(0), task(1), task(1)],
            ..PlacementRequest::default()
        }
    }

    fn assign(pairs: &[(u32, u32)], unplaced: &[u32]) -> PlacementResult {
        PlacementResult {
            assignments: pairs.iter().map(|&(task, host)| Assignment { task, host }).collect(),
            unplaced: unplaced
                .iter()
                .map(|&task| Unplaced { task, reason: UnplacedReason::Deferred, detail: String::new() })
                .collect(),
        }
    }

    #[test]
    fn table() {
        let req = request();
        let cases: &[(&str, PlacementResult, Result<(), Violation>)] = &[
            ("valid", assign(&[(0, 0)], &[1, 2]), Ok(())),
            ("unknown task", assign(&[(7, 0)], &[]), Err(Violation::UnknownTask(7))),
            ("unknown host", assign(&[(0, 9)], &[1, 2]), Err(Violation::UnknownHost(9))),
            ("twice", assign(&[(0, 0), (0, 1)], &[1, 2]), Err(Violation::TaskTwice(0))),
            ("missing", assign(&[(0, 0)], &[1]), Err(Violation::TaskMissing(2))),
            ("partial gang", assign(&[(0, 0), (1, 1)], &[2]), Err(Violation::PartialGang(1))),
            (
                "over capacity",
                assign(&[(0, 0), (1, 0), (2, 1)], &[]),
                Err(Violation::OverCapacity {
                    host: 0,
                    assigned: Resources::new(1200, 200, 0, 0),
                    free: Resources::new(1000, 1000, 0, 0),
                }),
            ),
        ];
        for (name, result, expected) in cases {
            assert_eq!(&check_placement(&req, result), expected, "case {name}");
        }
    }

    #[test]
    fn ineligible_and_max_per_host() {
        let mut req = request();
        req.constraints[0].eligible = HostFilter::Only(vec![1]);
        assert_eq!(check_placement(&req, &assign(&[(0, 0)], &[1, 2])), Err(Violation::Ineligible { task: 0, host: 0 }));
        let mut req = request();
        req.tasks.iter_mut().for_each(|t| t.demand = Resources::new(1, 1, 0, 0));
        req.jobs[0].max_per_host = 1;
        req.jobs[0].existing = vec![HostCount { host: 1, count: 1 }];
        assert_eq!(
            check_placement(&req, &assign(&[(0, 1)], &[1, 2])),
            Err(Violation::MaxPerHost { job: 0, host: 1, count: 2 })
        );
    }
}

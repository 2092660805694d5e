//! Checks a policy's answer against its request: the one place where the
//! cluster's invariants are written as code for plugin answers.
//!
//! The host runtime never trusts a plugin: it runs these checks on every
//! answer (before any of it is applied), on every case of the generated
//! deploy self-test, and the native test harness runs them too, so an author
//! sees the same verdict before deploying. A failed check is a fault of the
//! version that answered (docs/invariants.md lists the invariants and where
//! each is enforced).
//!
//! - Placement ([`check_placement`]): every task exactly once; known indices;
//!   no host given more than it has free (so no host is used twice beyond
//!   what fits); hard constraints; per-host maxima, existing tasks counted;
//!   a gang placed whole or not at all; GPU devices (0.1.2): every assigned
//!   task that asks for GPU holds devices of its host that take it (whole
//!   devices wholly free, a share within what its device has left, an
//!   accepted model), and no other task holds any.
//! - Preemption ([`check_victims`]): known indices, no victim twice, only
//!   preemptible (or revocable) tasks, only from the pools the need allows,
//!   and no more than needed: a need's victims cover it, and none of them
//!   could be spared.
//! - Lifecycle ([`check_actions`]): actions name only instances of the job
//!   asked about, in legal transitions: nothing but kills once the job has
//!   ended; launches, restarts and update batches only below the job's
//!   count; no job state moved backwards; SUCCEEDED only once every counted
//!   instance has succeeded and nothing still runs. FAILED and KILLED are
//!   accepted with live tasks: the job manager stops them (decision 0023).

use std::fmt;

use crate::types::{
    Action, HostFilter, JobState, JobView, PlacementRequest, PlacementResult, PreemptionRequest, Resources, TaskState,
    TaskView, UnplacedReason, Victim,
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
    /// A task's GPU devices are wrong (missing, unknown, repeated, shared
    /// when whole, overcommitted, of a model it does not accept) or were
    /// granted to a task that is not assigned or asks for no GPU.
    BadGrant {
        /// The task.
        task: u32,
        /// What is wrong.
        why: String,
    },
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
    /// A need's victims together do not free what it asks for: killing them
    /// would make no room.
    NotEnough(u32),
    /// A need would still be covered without this victim.
    NotNeeded {
        /// The victim task.
        task: u32,
        /// The need it was chosen for.
        need: u32,
    },
    /// An action other than a kill for a job that has already ended.
    JobEnded(JobState),
    /// A launch, restart or update batch names an instance at or above the
    /// job's count (or a restart names one the job does not have).
    OutsideJob(u32),
    /// The job would move to a state it cannot be moved to by a lifecycle.
    IllegalJobState {
        /// The job's state.
        from: JobState,
        /// The state asked for.
        to: JobState,
    },
    /// SUCCEEDED while an instance has not succeeded (never started, still
    /// running, or ended otherwise).
    PrematureSuccess {
        /// The first such instance.
        instance: u32,
        /// Its state.
        state: TaskState,
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
            Self::BadGrant { task, why } => write!(f, "task {task}'s GPU devices: {why}"),
            Self::NotPreemptible(t) => write!(f, "victim {t} is not preemptible"),
            Self::UnknownNeed(n) => write!(f, "need index {n} is not in the request"),
            Self::WrongPool { task, need } => write!(f, "victim {task} is from a pool that need {need} does not allow"),
            Self::NotEnough(n) => write!(f, "the victims of need {n} do not free what it asks for"),
            Self::NotNeeded { task, need } => {
                write!(f, "victim {task} is not needed: need {need} is covered without it")
            }
            Self::JobEnded(s) => write!(f, "the job has ended ({s:?}); only kills are allowed"),
            Self::OutsideJob(i) => write!(f, "instance {i} is outside the job's instances"),
            Self::IllegalJobState { from, to } => write!(f, "the job cannot be marked {to:?} from {from:?}"),
            Self::PrematureSuccess { instance, state } => {
                write!(f, "the job cannot succeed while instance {instance} is {state:?}")
            }
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
    check_gangs(request, &seen)?;
    check_grants(request, result)
}

/// GPU grants: each assigned task that asks for GPU has exactly one grant,
/// on devices of its host that take it given the grants before it; no
/// other task has one.
fn check_grants(request: &PlacementRequest, result: &PlacementResult) -> Result<(), Violation> {
    let bad = |task: u32, why: String| Err(Violation::BadGrant { task, why });
    if request.gpu_tasks.is_empty() && result.grants.is_empty() {
        return Ok(());
    }
    let mut host_of = vec![None; request.tasks.len()];
    for a in &result.assignments {
        host_of[a.task as usize] = Some(a.host);
    }
    let mut free: Vec<Vec<u32>> =
        request.gpu_hosts.iter().map(|h| h.devices.iter().map(|d| d.free_milli).collect()).collect();
    let mut granted = vec![false; request.tasks.len()];
    for g in &result.grants {
        let Some(&host) = host_of.get(g.task as usize) else { return bad(g.task, "not a task of the request".into()) };
        let Some(host) = host else { return bad(g.task, "granted devices but not assigned".into()) };
        if std::mem::replace(&mut granted[g.task as usize], true) {
            return bad(g.task, "granted devices twice".into());
        }
        let Some(ask) = request.gpu_tasks.get(g.task as usize).filter(|a| a.milli > 0) else {
            return bad(g.task, "granted devices but asks for no GPU".into());
        };
        let (count, each) = ask.shape();
        if g.devices.len() != count as usize {
            return bad(g.task, format!("asks for {count} device(s), granted {}", g.devices.len()));
        }
        let devices = request.gpu_hosts.get(host as usize).map(|h| h.devices.as_slice()).unwrap_or_default();
        for (i, &d) in g.devices.iter().enumerate() {
            let Some(device) = devices.get(d as usize) else {
                return bad(g.task, format!("device {d} does not exist on host {host}"));
            };
            if g.devices[..i].contains(&d) {
                return bad(g.task, format!("device {d} granted twice"));
            }
            let left = free[host as usize][d as usize];
            if !ask.takes(device, left) {
                let why = if !ask.models.is_empty() && !ask.models.contains(&device.model) {
                    format!("device {d} of host {host} is not of a model the task accepts")
                } else if each == crate::types::DEVICE_MILLI {
                    format!("whole device {d} of host {host} is not wholly free ({left} milli-GPU free)")
                } else {
                    format!("device {d} of host {host} has {left} milli-GPU free, the share needs {each}")
                };
                return bad(g.task, why);
            }
            free[host as usize][d as usize] = left - each;
        }
    }
    for (t, host) in host_of.iter().enumerate() {
        let asks = request.gpu_tasks.get(t).is_some_and(|a| a.milli > 0);
        if host.is_some() && asks && !granted[t] {
            return bad(t as u32, "assigned without GPU devices (none of its host takes it)".into());
        }
    }
    Ok(())
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
/// preemptible tasks, only from the pools each need allows, and for each
/// need with victims: they cover it, and none of them could be spared.
/// No victims at all is always allowed.
///
/// GPU is counted in milli-GPUs when the request carries its GPU side
/// (0.1.3, [`PreemptionRequest::in_milli_gpus`]): two 500-milli victims
/// cover a need of 1000, and a 1000-milli victim beside a 500-milli one for
/// a need of 500 is one too many. To judge an answer of a component that saw
/// whole devices only, pass [`PreemptionRequest::in_whole_gpus`].
pub fn check_victims(request: &PreemptionRequest, victims: &[Victim]) -> Result<(), Violation> {
    let request = &*request.in_milli_gpus();
    check_victim_indices(request, victims)?;
    for (n, need) in request.needs.iter().enumerate() {
        let n = n as u32;
        let mine = || victims.iter().filter(move |v| v.need == n);
        if mine().next().is_none() {
            continue;
        }
        let freed =
            mine().fold(Resources::ZERO, |acc, v| acc.saturating_add(&request.running[v.task as usize].resources));
        if !need.resources.fits_in(&freed) {
            return Err(Violation::NotEnough(n));
        }
        for v in mine() {
            let without = freed.saturating_sub(&request.running[v.task as usize].resources);
            if need.resources.fits_in(&without) {
                return Err(Violation::NotNeeded { task: v.task, need: n });
            }
        }
    }
    Ok(())
}

fn check_victim_indices(request: &PreemptionRequest, victims: &[Victim]) -> Result<(), Violation> {
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

/// Checks lifecycle actions against the views they answer.
///
/// - Once the job has ended, only kills (they are harmless: the runtime
///   ignores a kill of a run that has ended).
/// - `launch`, `restart-after` and `update-batch` only below the job's count
///   (for a daemon job, its matching hosts); a restart only of an instance
///   the job has; a kill of any instance the job has or counts.
/// - `mark-job`: never back to INITIALIZED or PENDING; SUCCEEDED only when
///   every instance below the count has succeeded. FAILED and KILLED (and
///   SUCCEEDED, for live instances above the count) are accepted with live
///   tasks: the runtime stops them (decision 0023).
pub fn check_actions(job: &JobView, tasks: &[TaskView], actions: &[Action]) -> Result<(), Violation> {
    let ended = matches!(job.state, JobState::Succeeded | JobState::Failed | JobState::Killed);
    let count = job.instance_count.max(job.matching_hosts.len() as u32);
    let bound = (count as usize).max(tasks.len()) as u32;
    let known = |i: u32| if i < bound { Ok(()) } else { Err(Violation::UnknownTask(i)) };
    let counted = |i: u32| if i < count { Ok(()) } else { Err(Violation::OutsideJob(i)) };
    let has = |i: u32| if tasks.iter().any(|t| t.instance == i) { Ok(()) } else { Err(Violation::OutsideJob(i)) };
    for a in actions {
        if ended && !matches!(a, Action::Kill(_)) {
            return Err(Violation::JobEnded(job.state));
        }
        match a {
            Action::Kill(i) => known(*i)?,
            Action::Launch(i) => counted(*i)?,
            Action::RestartAfter(r) => {
                counted(r.instance)?;
                has(r.instance)?;
            }
            Action::UpdateBatch(b) => b.iter().try_for_each(|i| counted(*i))?,
            Action::MarkJob(to @ (JobState::Initialized | JobState::Pending)) => {
                return Err(Violation::IllegalJobState { from: job.state, to: *to });
            }
            Action::MarkJob(JobState::Succeeded) => check_success(job, tasks)?,
            Action::MarkJob(_) | Action::UpdateFinished(_) => {}
        }
    }
    Ok(())
}

/// SUCCEEDED needs every counted instance succeeded. Live instances above
/// the count (a job that shrank) are being removed; the runtime stops them.
fn check_success(job: &JobView, tasks: &[TaskView]) -> Result<(), Violation> {
    for i in 0..job.instance_count {
        let state = tasks.iter().find(|t| t.instance == i).map_or(TaskState::Initialized, |t| t.state);
        if state != TaskState::Succeeded {
            return Err(Violation::PrematureSuccess { instance: i, state });
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

    /// Two hosts of two devices (host 0: one wholly free, one with 400
    /// free and model `m`; host 1: two wholly free); tasks 0–2 ask for
    /// 500, 500 and one whole GPU, task 3 for 300 of model `m`.
    fn gpu_request() -> PlacementRequest {
        let host = HostOffer { free: Resources::new(8000, 8000, 0, 0), total: Resources::new(8000, 8000, 0, 2) };
        let mut r = PlacementRequest {
            hosts: vec![host, host],
            symbols: vec!["m".into()],
            jobs: vec![JobInfo::default()],
            constraints: vec![ConstraintSet::default()],
            tasks: (0..4)
                .map(|g| Task { demand: Resources::new(100, 100, 0, 0), gang: g, ..Task::default() })
                .collect(),
            ..PlacementRequest::default()
        };
        r.hosts[0].free.gpus = 1;
        r.hosts[1].free.gpus = 2;
        r.tasks[2].demand.gpus = 1;
        let dev = |free_milli, model| GpuDevice { free_milli, model };
        r.gpu_hosts = vec![
            GpuHost { devices: vec![dev(1000, NO_VALUE), dev(400, 0)] },
            GpuHost { devices: vec![dev(1000, NO_VALUE), dev(1000, NO_VALUE)] },
        ];
        let ask = |milli, models: Vec<u32>| GpuTask { milli, models };
        r.gpu_tasks = vec![ask(500, vec![]), ask(500, vec![]), ask(1000, vec![]), ask(300, vec![0])];
        r
    }

    fn with_grants(pairs: &[(u32, u32)], grants: &[(u32, &[u32])]) -> PlacementResult {
        let mut out = assign(pairs, &[]);
        let placed: Vec<u32> = pairs.iter().map(|p| p.0).collect();
        out.unplaced = (0..4)
            .filter(|t| !placed.contains(t))
            .map(|task| Unplaced { task, reason: UnplacedReason::Deferred, detail: String::new() })
            .collect();
        out.grants = grants.iter().map(|&(task, d)| DeviceGrant { task, devices: d.to_vec() }).collect();
        out
    }

    #[test]
    fn gpu_grants_are_checked_per_device() {
        let r = gpu_request();
        let ok = with_grants(&[(0, 1), (1, 1), (2, 0), (3, 0)], &[(0, &[0]), (1, &[0]), (2, &[0]), (3, &[1])]);
        assert_eq!(
            check_placement(&r, &ok),
            Ok(()),
            "two halves share host 1's device 0; the whole GPU and the m-share on host 0"
        );
        let bad = |pairs: &[(u32, u32)], grants: &[(u32, &[u32])], needle: &str| {
            let e = check_placement(&r, &with_grants(pairs, grants)).expect_err(needle);
            assert!(matches!(e, Violation::BadGrant { .. }) && e.to_string().contains(needle), "{needle}: {e}");
        };
        bad(&[(0, 1), (1, 1)], &[(0, &[0]), (1, &[0]), (1, &[1])], "twice");
        bad(&[(0, 0), (1, 0)], &[(0, &[1]), (1, &[1])], "400 milli-GPU free");
        bad(&[(0, 1), (2, 1)], &[(0, &[0]), (2, &[0])], "not wholly free");
        bad(&[(3, 1)], &[(3, &[0])], "not of a model");
        bad(&[(0, 1)], &[(0, &[5])], "does not exist");
        bad(&[(0, 1)], &[], "without GPU devices");
        bad(&[(0, 1)], &[(0, &[0]), (1, &[0])], "not assigned");
        bad(&[(2, 1)], &[(2, &[0, 1])], "asks for 1 device");
    }

    #[test]
    fn missing_grants_are_completed_with_the_runtime_default() {
        let r = gpu_request();
        // No grants at all (a policy from before 0.1.2): whole GPUs to the
        // lowest wholly free device, shares to the fullest device they fit.
        let mut out = with_grants(&[(0, 0), (1, 1), (2, 1), (3, 0)], &[]);
        crate::placement::complete_grants(&r, &mut out);
        assert_eq!(check_placement(&r, &out), Ok(()), "{out:?}");
        let of = |t: u32| out.grants.iter().find(|g| g.task == t).map(|g| g.devices.clone());
        assert_eq!(
            (of(0), of(3)),
            (Some(vec![0]), Some(vec![1])),
            "the share on host 0's wholly free device, the m-share on the model-m one"
        );
        assert_ne!(of(1), of(2), "the whole GPU does not take the shared device");
        // A whole GPU that no device of its host takes (the share took the
        // wholly free one) keeps no grant: refused.
        let mut crowded = with_grants(&[(0, 0), (2, 0)], &[]);
        crate::placement::complete_grants(&r, &mut crowded);
        assert!(check_placement(&r, &crowded).is_err(), "{crowded:?}");
    }

    fn assign(pairs: &[(u32, u32)], unplaced: &[u32]) -> PlacementResult {
        PlacementResult {
            assignments: pairs.iter().map(|&(task, host)| Assignment { task, host }).collect(),
            unplaced: unplaced
                .iter()
                .map(|&task| Unplaced { task, reason: UnplacedReason::Deferred, detail: String::new() })
                .collect(),
            grants: Vec::new(),
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

    fn preemption() -> PreemptionRequest {
        let task = |preemptible, cpu| RunningTask {
            preemptible,
            resources: Resources::new(cpu, 0, 0, 0),
            ..RunningTask::default()
        };
        PreemptionRequest {
            pools: vec![PoolView::default(), PoolView::default()],
            running: vec![task(true, 10), task(true, 10), task(false, 10), task(true, 5)],
            needs: vec![Need { pool: 1, resources: Resources::new(10, 0, 0, 0), ..Need::default() }],
            ..PreemptionRequest::default()
        }
    }

    /// GPU shares: victims holding 500, 500 and 1000 milli-GPUs (each one
    /// device in whole units), a need of `need` milli-GPUs.
    fn gpu_preemption(need: u64) -> PreemptionRequest {
        let task = |gpus| RunningTask {
            preemptible: true,
            resources: Resources::new(0, 0, 0, gpus),
            ..RunningTask::default()
        };
        PreemptionRequest {
            pools: vec![PoolView::default(), PoolView::default()],
            running: vec![task(1), task(1), task(1)],
            needs: vec![Need { pool: 1, resources: Resources::new(0, 0, 0, need.div_ceil(1000)), ..Need::default() }],
            gpu_pools: vec![GpuPool::default(); 2],
            gpu_running: vec![500, 500, 1000],
            gpu_needs: vec![need],
        }
    }

    #[test]
    fn victims_count_gpu_shares_in_milli() {
        let v = |task| Victim { task, need: 0, reason: VictimReason::OverEntitlement };
        type Case = (&'static str, u64, Vec<Victim>, Result<(), Violation>);
        let cases: &[Case] = &[
            ("two halves free a device", 1000, vec![v(0), v(1)], Ok(())),
            ("one half does not", 1000, vec![v(0)], Err(Violation::NotEnough(0))),
            ("a whole device does", 1000, vec![v(2)], Ok(())),
            ("a half for a half", 500, vec![v(0)], Ok(())),
            ("a whole for a half", 500, vec![v(2)], Ok(())),
            (
                "a whole beside a half is one too many",
                500,
                vec![v(0), v(2)],
                Err(Violation::NotNeeded { task: 0, need: 0 }),
            ),
            ("three for one and a half", 1500, vec![v(0), v(1), v(2)], Err(Violation::NotNeeded { task: 0, need: 0 })),
        ];
        for (name, need, victims, expected) in cases {
            assert_eq!(&check_victims(&gpu_preemption(*need), victims), expected, "case {name}");
        }
        // In whole devices (a component built before 0.1.3), one half
        // "covers" a device and two are one too many.
        let req = gpu_preemption(1000);
        assert_eq!(check_victims(&req.in_whole_gpus(), &[v(0)]), Ok(()));
        assert_eq!(check_victims(&req.in_whole_gpus(), &[v(0), v(1)]), Err(Violation::NotNeeded { task: 0, need: 0 }));
    }

    #[test]
    fn victims_table() {
        let req = preemption();
        let v = |task| Victim { task, need: 0, reason: VictimReason::OverEntitlement };
        let cases: &[(&str, Vec<Victim>, Result<(), Violation>)] = &[
            ("none", vec![], Ok(())),
            ("one covers", vec![v(0)], Ok(())),
            ("two small ones cover", vec![v(3), v(3)], Err(Violation::TaskTwice(3))),
            ("not preemptible", vec![v(2)], Err(Violation::NotPreemptible(2))),
            ("more than needed", vec![v(0), v(1)], Err(Violation::NotNeeded { task: 0, need: 0 })),
            ("not enough", vec![v(3)], Err(Violation::NotEnough(0))),
            ("unknown need", vec![Victim { need: 4, ..v(0) }], Err(Violation::UnknownNeed(4))),
        ];
        for (name, victims, expected) in cases {
            assert_eq!(&check_victims(&req, victims), expected, "case {name}");
        }
    }

    #[test]
    fn actions_table() {
        let job = |state, count| JobView { state, instance_count: count, ..JobView::default() };
        let tasks = |states: &[TaskState]| -> Vec<TaskView> {
            states
                .iter()
                .enumerate()
                .map(|(i, &state)| TaskView { instance: i as u32, state, ..TaskView::default() })
                .collect()
        };
        use TaskState::{Initialized, Running, Succeeded};
        let restart = |instance| Action::RestartAfter(Restart { instance, delay_ms: 1 });
        type Case = (&'static str, JobView, Vec<TaskView>, Vec<Action>, Result<(), Violation>);
        let cases: Vec<Case> = vec![
            (
                "launch all",
                job(JobState::Pending, 2),
                tasks(&[Initialized, Initialized]),
                vec![Action::Launch(0), Action::Launch(1)],
                Ok(()),
            ),
            (
                "launch past the count",
                job(JobState::Running, 2),
                tasks(&[Running, Running, Running]),
                vec![Action::Launch(2)],
                Err(Violation::OutsideJob(2)),
            ),
            (
                "kill past the count",
                job(JobState::Running, 2),
                tasks(&[Running, Running, Running]),
                vec![Action::Kill(2)],
                Ok(()),
            ),
            (
                "kill unknown",
                job(JobState::Running, 2),
                tasks(&[Running, Running]),
                vec![Action::Kill(9)],
                Err(Violation::UnknownTask(9)),
            ),
            (
                "restart a missing instance",
                job(JobState::Running, 3),
                tasks(&[Running]),
                vec![restart(2)],
                Err(Violation::OutsideJob(2)),
            ),
            (
                "success too early",
                job(JobState::Running, 2),
                tasks(&[Succeeded, Running]),
                vec![Action::MarkJob(JobState::Succeeded)],
                Err(Violation::PrematureSuccess { instance: 1, state: Running }),
            ),
            (
                "success before start",
                job(JobState::Pending, 1),
                tasks(&[]),
                vec![Action::MarkJob(JobState::Succeeded)],
                Err(Violation::PrematureSuccess { instance: 0, state: Initialized }),
            ),
            (
                "success",
                job(JobState::Running, 2),
                tasks(&[Succeeded, Succeeded, Running]),
                vec![Action::MarkJob(JobState::Succeeded)],
                Ok(()),
            ),
            (
                "failed with live tasks",
                job(JobState::Running, 2),
                tasks(&[Running, Running]),
                vec![Action::MarkJob(JobState::Failed)],
                Ok(()),
            ),
            (
                "backwards",
                job(JobState::Running, 1),
                tasks(&[Running]),
                vec![Action::MarkJob(JobState::Pending)],
                Err(Violation::IllegalJobState { from: JobState::Running, to: JobState::Pending }),
            ),
            (
                "launch after the end",
                job(JobState::Succeeded, 1),
                tasks(&[Succeeded]),
                vec![Action::Launch(0)],
                Err(Violation::JobEnded(JobState::Succeeded)),
            ),
            ("kill after the end", job(JobState::Failed, 1), tasks(&[Running]), vec![Action::Kill(0)], Ok(())),
        ];
        for (name, job, tasks, actions, expected) in cases {
            assert_eq!(check_actions(&job, &tasks, &actions), expected, "case {name}");
        }
    }
}

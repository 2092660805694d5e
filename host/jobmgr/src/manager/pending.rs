//! "Why pending, always" (decision 0026): for every instance not yet placed,
//! a [`Why`] — a stable [`PendingKind`] and a sentence with no internal
//! identifier in it — from what the job manager and the resource manager
//! know of it and a census of the hosts the caller passes (the host
//! manager's view, now).
//!
//! Read-time only: nothing here runs in a placement round. A census is taken
//! once per distinct task shape (demand and constraints) per call, so a job
//! of 10,000 identical instances costs one pass over the hosts.

use std::collections::HashMap;

use paceline_model::pending::{Census, CensusHost, PendingKind, Shape, Why, instance_ranges};
use paceline_model::task::TaskState;
use paceline_model::{Constraint, Resources, UnplacedReason};
use paceline_resmgr::{PendingInfo, PendingReason, TaskWait};

use super::JobManager;

/// Where an instance waits, as the managers know it (before hosts are counted).
enum Stage {
    /// Queued in the resource manager (not admitted).
    /// `head`: what waits at the head of its lane when it is queued behind
    /// something else, and how many tasks that is (one: a task, not a gang).
    Queued { info: PendingInfo, head: Option<(GangName, u32)> },
    /// Admitted; back from a round that could not place it, or before its first.
    Admitted { last: Option<UnplacedReason>, gang: Option<GangName>, placing: bool },
    /// Neither queued nor admitted yet (just created, or between the two).
    Submitted,
}

/// A gang as people know it: its job's id and instance numbers.
struct GangName {
    job: String,
    instances: String,
}

impl std::fmt::Display for GangName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "job {} instances {}", self.job, self.instances)
    }
}

struct Waiting {
    instance: u32,
    demand: Resources,
    constraints: Vec<Constraint>,
    stage: Stage,
}

/// Instance numbers and their reasons, and the job's summary of them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PendingReport {
    /// Each waiting instance (of those asked about), in instance order.
    pub tasks: Vec<(u32, Why)>,
}

impl PendingReport {
    /// "3 pending: 2 never fit (needs 64 cpu; largest host has 32 cpu), 1
    /// waiting for capacity"; empty when nothing waits.
    pub fn summary(&self) -> String {
        if self.tasks.is_empty() {
            return String::new();
        }
        let mut by_kind: Vec<(PendingKind, u32, &str)> = Vec::new();
        for (_, why) in &self.tasks {
            match by_kind.iter_mut().find(|(k, _, _)| *k == why.kind) {
                Some(entry) => entry.1 += 1,
                None => by_kind.push((why.kind, 1, detail(why))),
            }
        }
        by_kind.sort_by_key(|(k, _, _)| *k);
        let parts: Vec<String> = by_kind
            .iter()
            .map(|(kind, n, detail)| {
                if detail.is_empty() {
                    format!("{n} {}", kind.summary_phrase())
                } else {
                    format!("{n} {} ({detail})", kind.summary_phrase())
                }
            })
            .collect();
        format!("{} pending: {}", self.tasks.len(), parts.join(", "))
    }

    /// One warning per distinct reason of the instances that can never fit:
    /// "instances 0-2 can never fit on any host in the cluster: needs 64
    /// cpu; largest host has 32 cpu".
    pub fn never_fit_warnings(&self) -> Vec<String> {
        let mut groups: Vec<(&str, Vec<u32>)> = Vec::new();
        for (i, why) in self.tasks.iter().filter(|(_, w)| w.kind == PendingKind::NeverFits) {
            let d = detail(why);
            match groups.iter_mut().find(|(g, _)| *g == d) {
                Some((_, v)) => v.push(*i),
                None => groups.push((d, vec![*i])),
            }
        }
        groups
            .into_iter()
            .map(|(d, instances)| {
                let word = if instances.len() == 1 { "instance" } else { "instances" };
                format!("{word} {} can never fit on any host in the cluster: {d}", instance_ranges(instances))
            })
            .collect()
    }
}

/// The short detail of a reason: the part of a never-fits reason before the
/// census, the pool's bound for a task its pool holds, else empty.
fn detail(why: &Why) -> &str {
    if why.kind != PendingKind::NeverFits {
        return &why.detail;
    }
    let rest = why.text.strip_prefix(NEVER_FITS).unwrap_or(&why.text);
    rest.split(" (").next().unwrap_or(rest)
}

const NEVER_FITS: &str = "can never fit on any host in the cluster: ";

impl JobManager {
    /// Why each waiting instance of job `id` (all of them, or those in
    /// `only`) is not running yet, counted against `hosts`. Empty for an
    /// unknown job or one with nothing waiting.
    /// `hosts` is called only if something waits.
    pub fn why_pending(
        &self,
        id: &str,
        only: Option<&[u32]>,
        hosts: impl FnOnce() -> Vec<CensusHost>,
    ) -> PendingReport {
        let waiting = self.waiting(id, only);
        if waiting.is_empty() {
            return PendingReport::default();
        }
        let hosts = hosts();
        // One census per distinct shape, worded once.
        let mut censuses: HashMap<(Resources, &[Constraint]), (Census, String)> = HashMap::new();
        let tasks = waiting
            .iter()
            .map(|w| {
                let (census, words) = censuses.entry((w.demand, w.constraints.as_slice())).or_insert_with(|| {
                    let census = Census::of(Shape { job: id, demand: &w.demand, constraints: &w.constraints }, &hosts);
                    let words = census.to_string();
                    (census, words)
                });
                (w.instance, explain(&w.stage, census, words))
            })
            .collect();
        PendingReport { tasks }
    }

    /// The never-fit warnings of a job's waiting instances (what CreateJob
    /// answers), as [`JobManager::why_pending`] words them. But when some
    /// host `could_take` each distinct shape of them, there are none, and
    /// neither the hosts nor the resource manager's tasks are read: on a
    /// cluster where the work fits, that is one host looked at per shape.
    pub fn never_fit_warnings(
        &self,
        id: &str,
        could_take: impl Fn(&Shape<'_>) -> bool,
        hosts: impl FnOnce() -> Vec<CensusHost>,
    ) -> Vec<String> {
        // The shapes under the mirror's lock; the hosts asked without it.
        let shapes: Vec<(Resources, Vec<Constraint>)> = {
            let m = self.mem();
            let Some(job) = m.key_of(id).and_then(|k| m.jobs.get(&k)) else {
                return Vec::new();
            };
            let mut shapes: Vec<(Resources, Vec<Constraint>)> = Vec::new();
            for (i, t) in job.tasks.iter().enumerate() {
                if !waits(t.rt.state) {
                    continue;
                }
                let spec = job.config_at(t.rt.desired_config_version).task_spec(i as u32);
                if !shapes.iter().any(|(d, c)| *d == spec.resources && *c == spec.constraints) {
                    shapes.push((spec.resources, spec.constraints.clone()));
                }
            }
            shapes
        };
        if shapes.iter().all(|(demand, constraints)| could_take(&Shape { job: id, demand, constraints })) {
            return Vec::new();
        }
        self.why_pending(id, None, hosts).never_fit_warnings()
    }

    /// The waiting instances of a job with what the managers know of them.
    /// Locks the resource manager, then the mirror (the crate's order).
    fn waiting(&self, id: &str, only: Option<&[u32]>) -> Vec<Waiting> {
        let rm = self.rm();
        let m = self.mem();
        let Some(job) = m.key_of(id).and_then(|k| m.jobs.get(&k)) else {
            return Vec::new();
        };
        let only: Option<std::collections::HashSet<u32>> = only.map(|o| o.iter().copied().collect());
        let wanted = |i: u32| only.as_ref().is_none_or(|o| o.contains(&i));
        // Nothing waits (a running job, the usual GetJob): no need to read
        // the resource manager's tasks at all.
        if !job.tasks.iter().enumerate().any(|(i, t)| wanted(i as u32) && waits(t.rt.state)) {
            return Vec::new();
        }
        let name_of = |key: u64| m.jobs.get(&key).map_or_else(|| "(deleted)".to_string(), |j| j.id.clone());
        // The job's live tasks in the resource manager (its per-job list).
        let admitted: HashMap<u32, TaskWait> =
            rm.job_task_waits(job.key).into_iter().map(|w| (w.instance, w)).collect();
        // Each gang's members, in one pass; a gang is named once, however
        // many of its tasks wait, and a gang of one is not named at all.
        let mut members: HashMap<u64, Vec<u32>> = HashMap::new();
        for w in admitted.values() {
            members.entry(w.gang).or_default().push(w.instance);
        }
        let mut gang_names: HashMap<u64, Option<String>> = HashMap::new();
        let mut gang_of = |gang: u64| {
            gang_names
                .entry(gang)
                .or_insert_with(|| {
                    let mut of_gang = members.get(&gang).cloned().unwrap_or_default();
                    of_gang.sort_unstable();
                    (of_gang.len() > 1).then(|| instance_ranges(of_gang))
                })
                .clone()
        };
        let mut out = Vec::new();
        for (i, t) in job.tasks.iter().enumerate() {
            let instance = i as u32;
            let state = t.rt.state;
            if !wanted(instance) || !waits(state) {
                continue;
            }
            let spec = job.config_at(t.rt.desired_config_version).task_spec(instance);
            let queued = t.gang.and_then(|g| rm.why_pending(g).map(|info| (g, info)));
            let stage = match queued {
                Some((gang, info)) => {
                    let head = match info.reason {
                        PendingReason::BehindHead { head } if head != gang => {
                            rm.gang_span(head).map(|(key, first, n)| {
                                let name = GangName {
                                    job: name_of(key),
                                    instances: instance_ranges(first..first.saturating_add(n)),
                                };
                                (name, n)
                            })
                        }
                        _ => None,
                    };
                    Stage::Queued { info, head }
                }
                None => match admitted.get(&instance) {
                    None => Stage::Submitted,
                    Some(found) => {
                        let last = found.last_unplaced;
                        let gang = last
                            .and_then(|_| gang_of(found.gang))
                            .map(|instances| GangName { job: job.id.clone(), instances });
                        let placing = found.state == paceline_resmgr::TaskState::Placing;
                        Stage::Admitted { last, gang, placing }
                    }
                },
            };
            out.push(Waiting { instance, demand: spec.resources, constraints: spec.constraints.clone(), stage });
        }
        out
    }
}

/// The states in which a task waits to run (what "why pending" explains).
fn waits(state: TaskState) -> bool {
    matches!(state, TaskState::Initialized | TaskState::Pending | TaskState::Ready | TaskState::Placing)
}

/// The kind and sentence of one waiting instance.
/// `census` is the census of the instance's shape, `words` its wording.
fn explain(stage: &Stage, census: &Census, words: &str) -> Why {
    let why = |kind, text: String| Why { kind, text, detail: String::new() };
    // Whatever the managers say, a task no host could ever hold is told so
    // first: that is the one a person must act on.
    if census.never_fits() {
        return why(PendingKind::NeverFits, format!("{NEVER_FITS}{} ({words})", census.shortfall()));
    }
    match stage {
        Stage::Queued { info, head } => match info.reason {
            PendingReason::OverEntitlement { .. }
            | PendingReason::WaitingOnReservation { .. }
            | PendingReason::OverSlackEntitlement { .. }
            | PendingReason::OverControllerLimit { .. }
            | PendingReason::PoolCannotHold { .. } => {
                let bound = info.reason.bound().unwrap_or("entitlement");
                Why {
                    kind: PendingKind::OverEntitlement,
                    text: info.to_string(),
                    detail: format!("{bound} of {}", info.pool),
                }
            }
            PendingReason::ClusterFull { .. } | PendingReason::ClusterUsedUp { .. } => {
                why(PendingKind::WaitingForCapacity, format!("{info} ({words})"))
            }
            PendingReason::BehindHead { .. } => match head {
                // One task ahead is no gang (the job may have none): it
                // waits its turn behind that task.
                Some((head, 1)) => why(
                    PendingKind::AdmissionOrder,
                    format!(
                        "queued in pool {} behind job {} instance {}, which waits at the head of the pool's queue",
                        info.pool, head.job, head.instances
                    ),
                ),
                Some((head, _)) => why(
                    PendingKind::BlockedByGang,
                    format!("queued in pool {} behind the gang of {head}, which waits at the head", info.pool),
                ),
                None => why(PendingKind::AdmissionOrder, info.to_string()),
            },
            PendingReason::NotEvaluated => why(PendingKind::AdmissionOrder, info.to_string()),
        },
        Stage::Submitted => {
            why(PendingKind::AdmissionOrder, "submitted; waiting to be queued in its pool for admission".to_string())
        }
        Stage::Admitted { placing: true, .. } => {
            why(PendingKind::AdmissionOrder, "admitted; a placement round is placing it now".to_string())
        }
        Stage::Admitted { last: None, .. } => {
            why(PendingKind::AdmissionOrder, "admitted; waiting for the next placement round".to_string())
        }
        Stage::Admitted { last: Some(reason), gang, .. } => match reason {
            // Nothing about the task was tried: it waits its turn in the next
            // round, and what a person can act on is the host manager.
            UnplacedReason::HostManagerUnreachable => why(
                PendingKind::AdmissionOrder,
                "admitted; the host manager could not be reached in the last placement round (down or failing \
                 over), retrying shortly; if this lasts, check that a host manager is running and reachable"
                    .to_string(),
            ),
            UnplacedReason::Deferred => why(
                PendingKind::DeferredByPlugin,
                format!("the placement plugin deferred it in the last round ({words})"),
            ),
            // A gang's member that found no room while hosts fit it alone:
            // what holds it is its gang, placed whole or not at all.
            UnplacedReason::InsufficientResources | UnplacedReason::ConstraintsUnsatisfiable
                if census.fit_now > 0 && gang.is_some() =>
            {
                why(
                    PendingKind::BlockedByGang,
                    format!(
                        "its gang ({}) is placed all or none and did not fit whole in the last round ({words})",
                        gang.as_ref().map(ToString::to_string).unwrap_or_default()
                    ),
                )
            }
            UnplacedReason::GangIncomplete => match gang {
                Some(gang) => why(
                    PendingKind::BlockedByGang,
                    format!(
                        "its gang ({gang}) is placed all or none and did not fit whole in the last round ({words})"
                    ),
                ),
                None => why(
                    PendingKind::BlockedByGang,
                    format!("its gang is placed all or none and did not fit whole in the last round ({words})"),
                ),
            },
            UnplacedReason::InsufficientResources
            | UnplacedReason::ConstraintsUnsatisfiable
            | UnplacedReason::MaxPerHost => why(
                PendingKind::WaitingForCapacity,
                format!("waiting for capacity: {words} (the placement plugin's reason: {})", reason.as_str()),
            ),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unreachable_host_manager_is_told_as_such_not_as_the_plugins_deferral() {
        let admitted = |reason| Stage::Admitted { last: Some(reason), gang: None, placing: false };
        let why = explain(&admitted(UnplacedReason::HostManagerUnreachable), &Census::default(), "2 hosts fit now");
        assert_eq!(why.kind, PendingKind::AdmissionOrder);
        assert!(why.text.contains("host manager could not be reached"), "{}", why.text);
        assert!(why.text.contains("retrying"), "{}", why.text);
        let why = explain(&admitted(UnplacedReason::Deferred), &Census::default(), "2 hosts fit now");
        assert_eq!(why.kind, PendingKind::DeferredByPlugin);
    }

    /// Issue 43: a job without a gang read "2 blocked by a gang" when its
    /// second instance waited behind its first. One task at the head is
    /// admission order; a real gang there still blocks.
    #[test]
    fn waiting_behind_one_task_is_admission_order_and_behind_a_gang_is_blocked_by_it() {
        let queued = |n: u32| Stage::Queued {
            info: PendingInfo {
                gang: paceline_resmgr::GangId(7),
                pool: "/team-a/batch".into(),
                reason: PendingReason::BehindHead { head: paceline_resmgr::GangId(3) },
                queued_at_ms: 0,
            },
            head: Some((
                GangName { job: "web-1".into(), instances: if n == 1 { "0".into() } else { "0-3".into() } },
                n,
            )),
        };
        let one = explain(&queued(1), &Census::default(), "2 hosts fit now");
        assert_eq!(one.kind, PendingKind::AdmissionOrder, "{}", one.text);
        assert!(one.text.contains("behind job web-1 instance 0"), "{}", one.text);
        assert!(!one.text.contains("gang"), "{}", one.text);
        let four = explain(&queued(4), &Census::default(), "2 hosts fit now");
        assert_eq!(four.kind, PendingKind::BlockedByGang);
        assert!(four.text.contains("behind the gang of job web-1 instances 0-3"), "{}", four.text);
    }
}

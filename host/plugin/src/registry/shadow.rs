//! Shadow runs: a candidate version answers the same inputs as the active
//! one on a worker of its own, and the differences are kept as a report.

use std::collections::BTreeMap;
use std::sync::mpsc::TrySendError;
use std::sync::{Arc, Mutex};

use paceline_plugin_sdk::types as sdk;

use super::{Registry, Shadow, Slot, Version};
use crate::error::PluginError;
/// Decision differences between a shadowed candidate and the active version.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct ShadowReport {
    /// The candidate.
    pub candidate: String,
    /// Inputs compared.
    pub compared: u64,
    /// Inputs where the decisions were identical.
    pub identical: u64,
    /// Placement: tasks whose host (or placed/unplaced status) differed, summed.
    pub tasks_differing: u64,
    /// Calls where the candidate failed.
    pub candidate_faults: u64,
    /// Inputs skipped because the shadow worker was busy.
    pub skipped: u64,
    /// Up to ten examples of differences, as text.
    pub samples: Vec<String>,
    /// The latest [`MAX_DISAGREEMENTS`] differing decisions, one per task,
    /// oldest first (a readable diff: what each version chose).
    pub disagreements: Vec<Disagreement>,
}

/// Disagreements a shadow report keeps (the newest; older ones are dropped).
pub const MAX_DISAGREEMENTS: usize = 50;

/// One task the active and the shadowed version decided differently.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Disagreement {
    /// When it was compared, milliseconds since the Unix epoch.
    pub at_ms: u64,
    /// `placement` or `preemption`.
    pub kind: &'static str,
    /// The placement round (0 for preemption).
    pub round: u64,
    /// The task: its name from the caller's [`Names`] (`job/instance`), or
    /// its place in the request when the caller named none.
    pub task: String,
    /// What the active version decided for it: a host, `not placed (reason)`;
    /// `preempted (reason)` or `kept`.
    pub active: String,
    /// What the shadowed version decided, in the same words.
    pub shadow: String,
}

/// Names of a placement request's tasks and hosts, in the request's order,
/// for the shadow report's rows. Either may be empty (or short): a task or
/// host without a name is shown by its place in the request.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Names {
    /// One per `PlacementRequest::tasks`, e.g. `job-id/3`.
    pub tasks: Vec<String>,
    /// One per `PlacementRequest::hosts`: the host name.
    pub hosts: Vec<String>,
}

impl ShadowReport {
    /// Keeps `rows`, dropping the oldest beyond [`MAX_DISAGREEMENTS`].
    pub(super) fn keep(&mut self, rows: impl IntoIterator<Item = Disagreement>) {
        self.disagreements.extend(rows);
        let over = self.disagreements.len().saturating_sub(MAX_DISAGREEMENTS);
        self.disagreements.drain(..over);
    }
}

pub(super) type ShadowJob = Box<dyn FnOnce() + Send>;

impl Registry {
    /// Starts comparing `id`'s decisions with the active version's on every
    /// call, on a background thread; the candidate's answers are never used.
    pub fn shadow(&self, slot_name: &str, id: &str) -> Result<(), PluginError> {
        let slot = self.slot(slot_name)?;
        let version = slot
            .find(id)
            .ok_or_else(|| PluginError::UnknownVersion { slot: slot_name.to_string(), version: id.to_string() })?;
        let (tx, rx) = std::sync::mpsc::sync_channel::<ShadowJob>(16);
        std::thread::Builder::new()
            .name(format!("shadow-{slot_name}"))
            .spawn(move || {
                for job in rx {
                    job();
                }
            })
            .map_err(|e| PluginError::Runtime(e.to_string()))?;
        let report = Arc::new(Mutex::new(ShadowReport { candidate: id.to_string(), ..ShadowReport::default() }));
        slot.shadow.store(Some(Arc::new(Shadow { version, jobs: tx, report })));
        Ok(())
    }

    /// Stops the slot's shadow run and returns its final report.
    pub fn stop_shadow(&self, slot_name: &str) -> Result<Option<ShadowReport>, PluginError> {
        let slot = self.slot(slot_name)?;
        Ok(slot.shadow.swap(None).and_then(|s| s.report.lock().ok().map(|r| r.clone())))
    }

    /// The slot's shadow report so far.
    pub fn shadow_report(&self, slot_name: &str) -> Result<Option<ShadowReport>, PluginError> {
        let slot = self.slot(slot_name)?;
        Ok(slot.shadow.load_full().and_then(|s| s.report.lock().ok().map(|r| r.clone())))
    }
    pub(super) fn send_shadow(slot: &Slot, job: impl FnOnce(&Arc<Version>, &Mutex<ShadowReport>) + Send + 'static) {
        let Some(shadow) = slot.shadow.load_full() else { return };
        let (version, report) = (shadow.version.clone(), shadow.report.clone());
        let boxed: ShadowJob = Box::new(move || job(&version, &report));
        if let Err(TrySendError::Full(_)) = shadow.jobs.try_send(boxed)
            && let Ok(mut r) = shadow.report.lock()
        {
            r.skipped += 1;
        }
    }

    /// Whether the slot has a shadow run (so a caller knows [`Names`] are
    /// worth building).
    pub fn is_shadowed(&self, slot_name: &str) -> bool {
        self.slot(slot_name).is_ok_and(|s| s.shadow.load().is_some())
    }
}

/// The tasks whose outcome differs between two placement answers (`a` the
/// active version's, `b` the shadow's), one row each, in task order.
pub(super) fn placement_disagreements(
    request: &sdk::PlacementRequest,
    names: &Names,
    a: &sdk::PlacementResult,
    b: &sdk::PlacementResult,
    at_ms: u64,
) -> Vec<Disagreement> {
    // What an answer did with each task: a host index, or why not.
    let outcome = |r: &sdk::PlacementResult| -> BTreeMap<u32, Result<u32, sdk::UnplacedReason>> {
        let placed = r.assignments.iter().map(|x| (x.task, Ok(x.host)));
        placed.chain(r.unplaced.iter().map(|u| (u.task, Err(u.reason)))).collect()
    };
    let (oa, ob) = (outcome(a), outcome(b));
    let host = |h: u32| match names.hosts.get(h as usize) {
        Some(name) => name.clone(),
        None => format!("host #{h}"),
    };
    let said = |o: Option<&Result<u32, sdk::UnplacedReason>>| match o {
        Some(Ok(h)) => host(*h),
        Some(Err(reason)) => format!("not placed ({})", reason.as_str()),
        None => "not placed".to_string(),
    };
    let task = |t: u32| match (names.tasks.get(t as usize), request.tasks.get(t as usize)) {
        (Some(name), _) => name.clone(),
        (None, Some(x)) => format!("job #{} instance {}", x.job, x.instance),
        (None, None) => format!("task #{t}"),
    };
    let tasks: std::collections::BTreeSet<u32> = oa.keys().chain(ob.keys()).copied().collect();
    tasks
        .into_iter()
        // Two unplaced answers differ only in wording: not a disagreement.
        .filter(|t| oa.get(t).and_then(|o| o.ok()) != ob.get(t).and_then(|o| o.ok()))
        .map(|t| Disagreement {
            at_ms,
            kind: "placement",
            round: request.round,
            task: task(t),
            active: said(oa.get(&t)),
            shadow: said(ob.get(&t)),
        })
        .collect()
}

/// The running tasks one preemption answer takes as victims and the other
/// does not (or for another reason), one row each.
pub(super) fn victim_disagreements(
    request: &sdk::PreemptionRequest,
    a: &[sdk::Victim],
    b: &[sdk::Victim],
    at_ms: u64,
) -> Vec<Disagreement> {
    let chosen =
        |vs: &[sdk::Victim]| -> BTreeMap<u32, sdk::VictimReason> { vs.iter().map(|v| (v.task, v.reason)).collect() };
    let (ca, cb) = (chosen(a), chosen(b));
    let said = |r: Option<&sdk::VictimReason>| match r {
        Some(reason) => format!("preempted ({})", victim_reason(*reason)),
        None => "kept".to_string(),
    };
    // The request has no task names: the task's place, pool and priority.
    let task = |t: u32| match request.running.get(t as usize) {
        Some(x) => {
            let pool = request.pools.get(x.pool as usize).map_or("?", |p| p.path.as_str());
            format!("running task #{t} (pool {pool}, priority {})", x.priority)
        }
        None => format!("running task #{t}"),
    };
    let tasks: std::collections::BTreeSet<u32> = ca.keys().chain(cb.keys()).copied().collect();
    tasks
        .into_iter()
        .filter(|t| ca.get(t) != cb.get(t))
        .map(|t| Disagreement {
            at_ms,
            kind: "preemption",
            round: 0,
            task: task(t),
            active: said(ca.get(&t)),
            shadow: said(cb.get(&t)),
        })
        .collect()
}

fn victim_reason(r: sdk::VictimReason) -> &'static str {
    match r {
        sdk::VictimReason::OverEntitlement => "over_entitlement",
        sdk::VictimReason::HigherPriority => "higher_priority",
        sdk::VictimReason::Revoked => "revoked",
    }
}

#[cfg(test)]
mod shadow_diff_tests {
    use super::*;

    fn request(tasks: u32, hosts: usize) -> sdk::PlacementRequest {
        sdk::PlacementRequest {
            round: 7,
            hosts: vec![sdk::HostOffer::default(); hosts],
            tasks: (0..tasks).map(|i| sdk::Task { job: 0, instance: i, ..Default::default() }).collect(),
            ..Default::default()
        }
    }

    fn placed(hosts: &[Option<u32>]) -> sdk::PlacementResult {
        let mut r = sdk::PlacementResult::default();
        for (t, h) in hosts.iter().enumerate() {
            match h {
                Some(h) => r.assignments.push(sdk::Assignment { task: t as u32, host: *h }),
                None => r.unplaced.push(sdk::Unplaced {
                    task: t as u32,
                    reason: sdk::UnplacedReason::InsufficientResources,
                    detail: String::new(),
                }),
            }
        }
        r
    }

    #[test]
    fn placement_rows_name_each_differing_task_with_both_hosts() {
        let names =
            Names { tasks: vec!["j/0".into(), "j/1".into(), "j/2".into()], hosts: vec!["h-a".into(), "h-b".into()] };
        let rows = placement_disagreements(
            &request(3, 2),
            &names,
            &placed(&[Some(0), Some(0), None]),
            &placed(&[Some(0), Some(1), Some(1)]),
            5,
        );
        assert_eq!(
            rows,
            vec![
                Disagreement {
                    at_ms: 5,
                    kind: "placement",
                    round: 7,
                    task: "j/1".into(),
                    active: "h-a".into(),
                    shadow: "h-b".into()
                },
                Disagreement {
                    at_ms: 5,
                    kind: "placement",
                    round: 7,
                    task: "j/2".into(),
                    active: "not placed (insufficient_resources)".into(),
                    shadow: "h-b".into()
                },
            ]
        );
        // Without names, the request's places; the same answers agree.
        let unnamed =
            placement_disagreements(&request(2, 2), &Names::default(), &placed(&[Some(1)]), &placed(&[None]), 0);
        assert_eq!((unnamed[0].task.as_str(), unnamed[0].active.as_str()), ("job #0 instance 0", "host #1"));
        let same = placed(&[Some(0), None]);
        assert!(placement_disagreements(&request(2, 2), &names, &same, &same, 0).is_empty());
    }

    #[test]
    fn victim_rows_say_who_each_version_preempts() {
        let request = sdk::PreemptionRequest {
            pools: vec![sdk::PoolView { path: "/a".into(), ..Default::default() }],
            running: vec![sdk::RunningTask { priority: 3, ..Default::default() }; 3],
            needs: vec![],
            ..Default::default()
        };
        let v = |task| sdk::Victim { task, need: 0, reason: sdk::VictimReason::HigherPriority };
        let rows = victim_disagreements(&request, &[v(0), v(1)], &[v(1), v(2)], 9);
        let got: Vec<_> = rows.iter().map(|r| (r.task.as_str(), r.active.as_str(), r.shadow.as_str())).collect();
        assert_eq!(
            got,
            vec![
                ("running task #0 (pool /a, priority 3)", "preempted (higher_priority)", "kept"),
                ("running task #2 (pool /a, priority 3)", "kept", "preempted (higher_priority)"),
            ]
        );
    }

    #[test]
    fn a_report_keeps_the_newest_disagreements() {
        let mut r = ShadowReport::default();
        let row = |i: usize| Disagreement { task: format!("t{i}"), ..Default::default() };
        r.keep((0..MAX_DISAGREEMENTS + 7).map(row));
        r.keep([row(1000)]);
        assert_eq!(r.disagreements.len(), MAX_DISAGREEMENTS);
        assert_eq!(r.disagreements[0].task, "t8", "the oldest went");
        assert_eq!(r.disagreements[MAX_DISAGREEMENTS - 1].task, "t1000");
    }
}

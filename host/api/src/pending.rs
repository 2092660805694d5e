//! "Why pending" in the API's messages (decision 0026): `Task.pending_kind`
//! and `Task.pending_reason` for every waiting task, `JobStatus.pending_summary`
//! and `JobStatus.warnings` for a job, `CreateJobResponse.warnings` at
//! submission. Computed when read, against the host manager's hosts of the
//! moment (one census per distinct task shape), so a warning that a job can
//! never fit goes away by itself once a big enough host joins.

use paceline_hostmgr::HostAccess;
use paceline_jobmgr::{JobManager, PendingReport};
use paceline_model::pending::{Census, CensusHost, instance_ranges};
use paceline_proto::v1 as pb;
use paceline_resmgr::reason::NEVER_RUNS_IN_POOL;

/// The hosts as the census counts them (the host manager's views, shared,
/// taken only when some task waits).
fn census_hosts(hosts: &dyn HostAccess) -> Vec<CensusHost> {
    hosts.census()
}

/// What CreateJob warns of: the instances of `job_id` no host could ever
/// hold. Asks the host manager for one host per task shape first; the full
/// census only when a shape finds none.
pub(crate) fn never_fit_warnings(jobs: &JobManager, hosts: &dyn HostAccess, job_id: &str) -> Vec<String> {
    let could_take = |shape: &paceline_model::pending::Shape<'_>| {
        hosts.any_host(&mut |view, state, reachable| Census::could_ever_take(shape, view, state, reachable))
    };
    jobs.never_fit_warnings(job_id, could_take, || census_hosts(hosts))
}

/// Why each waiting instance of `job_id` waits (all, or those in `only`).
pub(crate) fn report(jobs: &JobManager, hosts: &dyn HostAccess, job_id: &str, only: Option<&[u32]>) -> PendingReport {
    jobs.why_pending(job_id, only, || census_hosts(hosts))
}

/// Fills `pending_kind` and `pending_reason` of the waiting tasks among
/// `tasks` (all of job `job_id`).
pub(crate) fn fill_tasks(jobs: &JobManager, hosts: &dyn HostAccess, job_id: &str, tasks: &mut [pb::Task]) {
    let waiting: Vec<u32> = tasks.iter().filter(|t| waits(t)).map(|t| t.instance).collect();
    if waiting.is_empty() {
        return;
    }
    let report = report(jobs, hosts, job_id, Some(&waiting));
    // Position by instance, so a job of many waiting tasks is matched in one pass.
    let at: std::collections::HashMap<u32, usize> = tasks.iter().enumerate().map(|(i, t)| (t.instance, i)).collect();
    for (instance, why) in report.tasks {
        if let Some(t) = at.get(&instance).and_then(|&i| tasks.get_mut(i)) {
            t.pending_kind = why.kind.as_str().to_string();
            t.pending_reason = why.text;
        }
    }
}

/// Fills a job's `pending_summary` and `warnings`.
pub(crate) fn fill_job(jobs: &JobManager, hosts: &dyn HostAccess, job: &mut pb::Job) {
    let Some(status) = job.status.as_mut() else { return };
    // `task_counts` is keyed by the model's state names.
    let waiting = ["INITIALIZED", "PENDING", "READY", "PLACING"]
        .iter()
        .any(|s| status.task_counts.get(*s).is_some_and(|n| *n > 0));
    if !waiting {
        return;
    }
    let report = report(jobs, hosts, &job.id, None);
    status.pending_summary = report.summary();
    status.warnings = report.never_fit_warnings();
    status.warnings.extend(never_run_warnings(&report));
}

/// One warning per distinct reason of the instances their pool can never
/// admit as it is (non-preemptible work needing more than the pool
/// reserves): "instances 0-1 can never run in pool /team-a/batch as it is:
/// …", with the two ways out. Computed on read like the never-fit warnings,
/// so it goes away by itself once the pool or the job is changed.
fn never_run_warnings(report: &PendingReport) -> Vec<String> {
    let mut groups: Vec<(&str, Vec<u32>)> = Vec::new();
    for (i, why) in &report.tasks {
        if !why.text.starts_with(NEVER_RUNS_IN_POOL) {
            continue;
        }
        match groups.iter_mut().find(|(text, _)| *text == why.text) {
            Some((_, instances)) => instances.push(*i),
            None => groups.push((&why.text, vec![*i])),
        }
    }
    groups
        .into_iter()
        .map(|(text, instances)| {
            let word = if instances.len() == 1 { "instance" } else { "instances" };
            format!("{word} {} {text}", instance_ranges(instances))
        })
        .collect()
}

fn waits(t: &pb::Task) -> bool {
    [pb::TaskState::Initialized, pb::TaskState::Pending, pb::TaskState::Ready, pb::TaskState::Placing]
        .iter()
        .any(|s| t.state == *s as i32)
}

#[cfg(test)]
mod tests {
    use super::*;
    use paceline_model::pending::{PendingKind, Why};
    use paceline_model::pool::ResourceKind;
    use paceline_resmgr::{GangId, PendingInfo, PendingReason};

    fn held(reason: PendingReason) -> Why {
        let info = PendingInfo { gang: GangId(0), pool: "/team-a/batch".into(), reason, queued_at_ms: 0 };
        Why { kind: PendingKind::OverEntitlement, text: info.to_string(), detail: String::new() }
    }

    #[test]
    fn instances_their_pool_can_never_admit_get_one_warning_with_what_to_do() {
        let never =
            PendingReason::WaitingOnReservation { kind: ResourceKind::Cpu, by: 1_000, reservation: 0, need: 1_000 };
        let waits =
            PendingReason::WaitingOnReservation { kind: ResourceKind::Cpu, by: 500, reservation: 4_000, need: 1_000 };
        let report = PendingReport { tasks: vec![(0, held(never)), (1, held(never)), (2, held(waits))] };
        let warnings = never_run_warnings(&report);
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0].starts_with(
                "instances 0-1 can never run in pool /team-a/batch as it is: non-preemptible jobs run only within \
                 their pool's reservation, and pool /team-a/batch reserves 0 cpu"
            ),
            "{}",
            warnings[0]
        );
        assert!(warnings[0].contains("sla.preemptible: true"), "{}", warnings[0]);
        assert!(never_run_warnings(&PendingReport { tasks: vec![(2, held(waits))] }).is_empty());
    }
}

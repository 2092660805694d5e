//! "Why pending" in the API's messages (decision 0026): `Task.pending_kind`
//! and `Task.pending_reason` for every waiting task, `JobStatus.pending_summary`
//! and `JobStatus.warnings` for a job, `CreateJobResponse.warnings` at
//! submission. Computed when read, against the host manager's hosts of the
//! moment (one census per distinct task shape), so a warning that a job can
//! never fit goes away by itself once a big enough host joins.

use paceline_hostmgr::HostAccess;
use paceline_jobmgr::{JobManager, PendingReport};
use paceline_model::pending::{Census, CensusHost};
use paceline_proto::v1 as pb;

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
}

fn waits(t: &pb::Task) -> bool {
    [pb::TaskState::Initialized, pb::TaskState::Pending, pb::TaskState::Ready, pb::TaskState::Placing]
        .iter()
        .any(|s| t.state == *s as i32)
}

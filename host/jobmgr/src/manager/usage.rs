//! What live jobs hold, for quotas kept by the API (security issue 44):
//! counted from the in-memory mirror, never from storage, so a check costs
//! one pass over the live jobs and no store read.

use super::JobManager;

impl JobManager {
    /// Calls `visit(id, owner, pool, live_tasks)` for every job not yet in a
    /// terminal state, with its latest spec's owner and pool (an update in
    /// progress counts as what it asks for). `live_tasks` is the number of
    /// its tasks not in a terminal state, plus the instances its latest spec
    /// asks for that have no task yet. The mirror's lock is held during the
    /// visit: `visit` must be quick and must not call back into the manager.
    pub fn visit_live_jobs(&self, mut visit: impl FnMut(&str, &str, &str, u64)) {
        let m = self.mem();
        for job in m.jobs.values().filter(|j| !j.runtime.state.is_terminal()) {
            let latest = job.latest_config();
            let live = job.tasks.iter().filter(|t| !t.rt.state.is_terminal()).count() as u64;
            let not_yet = u64::from(latest.instance_count).saturating_sub(job.tasks.len() as u64);
            visit(&job.id, &latest.owner, &latest.pool, live + not_yet);
        }
    }

    /// The live-job and live-task limits pool `pool`'s own spec sets
    /// (`max_live_jobs`, `max_live_tasks`; `None` where it sets none, or
    /// where there is no such pool).
    pub fn pool_limits(&self, pool: &str) -> (Option<u64>, Option<u64>) {
        let rm = self.rm();
        let tree = rm.tree();
        tree.id(pool).and_then(|id| tree.spec(id)).map_or((None, None), |s| (s.max_live_jobs, s.max_live_tasks))
    }
}

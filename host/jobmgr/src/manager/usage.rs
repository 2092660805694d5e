//! What live jobs hold, for quotas kept by the API (security issue 44).
//! [`JobManager::live_job`] and [`JobManager::live_held`] read the counts
//! the mirror keeps as it changes (live_counts.rs): O(1) per question.
//! [`JobManager::visit_live_jobs`] and [`JobManager::recount_live`] pass over
//! every live job and task: the definition the counts must match, for tests
//! and the quota benchmark's comparison.

use std::collections::HashMap;

use super::JobManager;
use crate::live_counts::{Held, LiveJob};

impl JobManager {
    /// Calls `visit(id, owner, pool, live_tasks)` for every job not yet in a
    /// terminal state, with its latest spec's owner and pool (an update in
    /// progress counts as what it asks for). `live_tasks` is the number of
    /// its tasks not in a terminal state, plus the instances its latest spec
    /// asks for that have no task yet. The mirror's lock is held during the
    /// visit: `visit` must be quick and must not call back into the manager.
    /// A full pass (O(live tasks)): quotas use [`JobManager::live_held`].
    pub fn visit_live_jobs(&self, mut visit: impl FnMut(&str, &str, &str, u64)) {
        let m = self.mem();
        for job in m.jobs.values().filter(|j| !j.runtime.state.is_terminal()) {
            let latest = job.latest_config();
            let live = job.tasks.iter().filter(|t| !t.rt.state.is_terminal()).count() as u64;
            let not_yet = u64::from(latest.instance_count).saturating_sub(job.tasks.len() as u64);
            visit(&job.id, &latest.owner, &latest.pool, live + not_yet);
        }
    }

    /// Job `id` as the live counts hold it (owner, pool, live tasks as
    /// [`JobManager::visit_live_jobs`] defines them); `None` when it is
    /// terminal or unknown. O(1).
    pub fn live_job(&self, id: &str) -> Option<LiveJob> {
        let m = self.mem();
        m.live.job(m.key_of(id)?)
    }

    /// What principal (job owner) `owner` and pool `pool` hold in live jobs
    /// and their live tasks, from the counts kept as jobs change. O(1).
    pub fn live_held(&self, owner: &str, pool: &str) -> (Held, Held) {
        self.mem().live.held(owner, pool)
    }

    /// [`JobManager::live_held`] and, read under the same lock, each job of
    /// `ids` as [`JobManager::live_job`] gives it: the quota check uses the
    /// two together to count a change it admitted exactly once, whether or
    /// not the change has been made yet.
    pub fn live_held_with_jobs(&self, owner: &str, pool: &str, ids: &[&str]) -> (Held, Held, Vec<Option<LiveJob>>) {
        let m = self.mem();
        let (by_owner, by_pool) = m.live.held(owner, pool);
        let jobs = ids.iter().map(|id| m.key_of(id).and_then(|key| m.live.job(key))).collect();
        (by_owner, by_pool, jobs)
    }

    /// Every owner's and pool's live counts as kept (for comparison with
    /// [`JobManager::recount_live`]).
    pub fn live_counts(&self) -> (HashMap<String, Held>, HashMap<String, Held>) {
        self.mem().live.all()
    }

    /// The same counts, recounted by a full pass over the live jobs and their
    /// tasks (O(live tasks)): what [`JobManager::live_counts`] must equal.
    pub fn recount_live(&self) -> (HashMap<String, Held>, HashMap<String, Held>) {
        let mut owners: HashMap<String, Held> = HashMap::new();
        let mut pools: HashMap<String, Held> = HashMap::new();
        self.visit_live_jobs(|_, owner, pool, tasks| {
            for h in [owners.entry(owner.to_string()).or_default(), pools.entry(pool.to_string()).or_default()] {
                h.jobs += 1;
                h.tasks += tasks;
            }
        });
        (owners, pools)
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

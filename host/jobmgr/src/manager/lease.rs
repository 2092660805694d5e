//! Owner leases (decision 0041): a job with `owner_lease_secs` is killed
//! when its owner stops renewing it. The renewal times live only in memory:
//! a job manager that takes over starts every lease afresh, so a lapse is
//! never charged across a restart or failover (the owner could not reach a
//! leader meanwhile), at the cost of one more lease length before a dead
//! owner's job is found.

use paceline_model::job::JobGoal;

use super::JobManager;
use crate::error::JobError;

impl JobManager {
    /// Renews the owner lease of job `id`; returns the lease's length in
    /// seconds. Refused for a job without a lease, and for one that is
    /// ending: its owner should stop rather than keep renewing.
    pub async fn renew_owner_lease(&self, id: &str) -> Result<u32, JobError> {
        let now = self.now();
        let mut m = self.mem();
        let key = m.key_of(id).ok_or_else(|| JobError::NotFound(format!("job {id}")))?;
        let job = m.jobs.get(&key).ok_or_else(|| JobError::NotFound(format!("job {id}")))?;
        let Some(secs) = job.latest_config().owner_lease_secs else {
            return Err(JobError::State(format!("job {id} has no owner lease (JobSpec.owner_lease_secs)")));
        };
        if job.runtime.state.is_terminal() || job.runtime.goal == JobGoal::Kill {
            return Err(JobError::State(format!("job {id} is {} ({})", job.runtime.state, job.runtime.message)));
        }
        m.owner_renewed.insert(key, now);
        Ok(secs)
    }

    /// Starts job `key`'s owner lease now if its latest spec has one and
    /// none is being counted yet: at create, at recovery, and when an update
    /// adds a lease. A lease already being counted keeps its last renewal.
    pub(crate) fn start_owner_lease(&self, key: u64) {
        let now = self.now();
        let mut m = self.mem();
        let leased = m.jobs.get(&key).is_some_and(|j| j.latest_config().owner_lease_secs.is_some());
        if leased {
            m.owner_renewed.entry(key).or_insert(now);
        }
    }

    /// Kills every live job whose owner lease ran out by `now_ms`. Called
    /// from [`JobManager::tick`] under the operations lock; looks only at
    /// the jobs that have a lease.
    pub(crate) async fn expire_owner_leases(&self, now_ms: u64) -> Result<(), JobError> {
        let lapsed: Vec<(u64, String, u32)> = {
            let mut m = self.mem();
            let mut gone = Vec::new();
            let mut lapsed = Vec::new();
            for (&key, &renewed) in &m.owner_renewed {
                let Some(job) = m.jobs.get(&key) else {
                    gone.push(key);
                    continue;
                };
                let ending = job.runtime.state.is_terminal() || job.runtime.goal == JobGoal::Kill;
                match job.latest_config().owner_lease_secs {
                    None => gone.push(key),
                    Some(_) if ending => gone.push(key),
                    Some(secs) if renewed.saturating_add(u64::from(secs) * 1000) <= now_ms => {
                        lapsed.push((key, job.id.clone(), secs));
                    }
                    Some(_) => {}
                }
            }
            for key in gone {
                m.owner_renewed.remove(&key);
            }
            lapsed
        };
        for (key, id, secs) in lapsed {
            tracing::warn!(job = %id, lease_secs = secs, "owner lease expired: killing the job");
            let message = format!("owner lease expired: not renewed for {secs} s");
            match self.kill_locked(&id, None, &message).await {
                // Deleted meanwhile: nothing left to stop.
                Ok(()) | Err(JobError::NotFound(_)) => {
                    self.mem().owner_renewed.remove(&key);
                }
                // The lease stays lapsed and the next tick tries again.
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

//! The job manager's side of the resource manager's availability gate
//! (decision 0046): a preemption round asks, once for every stateless job
//! it could take instances from, which of them may go, and the answer is
//! the same count of unavailable instances drains and updates ask
//! ([`crate::availability::grant`]).

use std::sync::{Arc, Weak};

use paceline_model::task::TaskState;
use paceline_resmgr::gate::Choose;
use paceline_resmgr::{AvailabilityGate, GateAsk};

use super::JobManager;
use crate::availability;

/// The gate over a job manager. Weak: the resource manager holding it must
/// not keep the job manager (which holds the resource manager) alive.
struct Gate(Weak<JobManager>);

impl JobManager {
    /// Makes this job manager the gate its resource manager asks before it
    /// preempts an instance of a stateless job. Called where the roles are
    /// assembled, once the job manager is shared.
    pub fn install_availability_gate(self: &Arc<Self>) {
        let gate: Arc<dyn AvailabilityGate> = Arc::new(Gate(Arc::downgrade(self)));
        self.rm().set_availability_gate(gate);
    }
}

impl AvailabilityGate for Gate {
    fn round(&self, asks: &[GateAsk], choose: &mut Choose<'_>) {
        let Some(jm) = self.0.upgrade() else {
            // No job manager: nothing keeps a count to protect.
            choose(&asks.iter().map(|a| a.instances.clone()).collect::<Vec<_>>());
            return;
        };
        // Drains and updates hold the operation lock from their grant until
        // their kills are written; while one does, the count in the mirror
        // may not show its kills yet, so only instances already down (free
        // whatever the count) may go this round. The caller holds the
        // resource manager's lock, which every holder of the operation lock
        // may wait for: so try, never wait.
        let op = jm.ops.try_lock();
        let granted: Vec<Vec<u32>> = {
            let m = jm.mem();
            asks.iter()
                .map(|a| {
                    let Some(job) = m.jobs.get(&a.job) else {
                        return a.instances.clone();
                    };
                    // A job that promises an SLA (`max_unavailable_instances`)
                    // or says how to tell a serving instance (a health check)
                    // is held to its count against preemption; the others
                    // are preempted as before (their instances still count
                    // while down, for drains and updates), since the count's
                    // default limit (the update's batch size) was never a
                    // promise about preemption.
                    let promised = job.config().sla.max_unavailable_instances.is_some()
                        || a.instances.iter().any(|&i| {
                            job.tasks
                                .get(i as usize)
                                .is_some_and(|t| job.config_at(t.rt.config_version).task_spec(i).health_check.is_some())
                        });
                    if !promised {
                        a.instances.clone()
                    } else if op.is_ok() {
                        availability::grant(job, &a.instances)
                    } else {
                        availability::free(job, &a.instances)
                    }
                })
                .collect()
        };
        let refused: usize = asks.iter().zip(&granted).map(|(a, g)| a.instances.len() - g.len()).sum();
        if refused > 0 {
            tracing::debug!(
                refused,
                busy = op.is_err(),
                "preemption held back: the jobs have as many instances unavailable as they may"
            );
        }
        let victims = choose(&granted);
        // Counted as down from now: the kills reach the job manager after
        // the round (`on_resmgr_kills`), and a drain or an update in between
        // must see them.
        let mut m = jm.mem();
        for (job, i) in victims {
            if let Some(t) = m.jobs.get_mut(&job).and_then(|j| j.tasks.get_mut(i as usize))
                && t.rt.state == TaskState::Running
            {
                t.preempted = true;
            }
        }
        drop(op);
    }
}

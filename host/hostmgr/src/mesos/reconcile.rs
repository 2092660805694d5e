//! Explicit reconciliation: the runs that still owe an answer after a
//! SUBSCRIBED (or a manager's request), asked for with backoff until each
//! has answered. (The implicit RECONCILE is sent at SUBSCRIBED and by the
//! ticker.)

use std::time::{Duration, Instant};

use paceline_proto::mesos::v1 as mesos;
use paceline_proto::mesos::v1::scheduler::call;

use super::{Inner, St, agent_id, call_of};

impl Inner {
    /// Sends the explicit reconciliation if it is due.
    pub(super) fn reconcile_due(&self) {
        let now = Instant::now();
        let c = {
            let mut st = self.st();
            if !st.subscribed {
                return;
            }
            let St { reconciling, runs, .. } = &mut *st;
            let Some(r) = reconciling else { return };
            r.runs.retain(|id| runs.get(id).is_some_and(|run| !run.terminal));
            if r.runs.is_empty() {
                *reconciling = None;
                return;
            }
            if r.next_at > now {
                return;
            }
            r.next_at = now + r.backoff;
            r.backoff = (r.backoff * 2).min(Duration::from_secs(60));
            let tasks = r
                .runs
                .iter()
                .map(|id| call::reconcile::Task {
                    task_id: mesos::TaskId { value: id.clone() },
                    agent_id: runs.get(id).map(|run| agent_id(&run.agent_id)),
                })
                .collect();
            let mut c = call_of(call::Type::Reconcile);
            c.reconcile = Some(call::Reconcile { tasks });
            c
        };
        self.queue(c);
    }
}

//! Kills asked through the API, combined: callers that arrive while another
//! holds the operations lock leave their kill in a queue, and whoever takes
//! the lock next handles every queued kill, distinct jobs at once. Killing
//! a thousand jobs from many clients then costs a few rounds of group
//! commits, not six commits per job one after another (decision 0061).

use std::collections::HashSet;

use futures::StreamExt;

use super::JobManager;
use crate::error::JobError;

/// One queued kill and where its answer goes.
pub(crate) struct KillAsk {
    id: String,
    instances: Option<Vec<u32>>,
    answer: tokio::sync::oneshot::Sender<Result<(), JobError>>,
}

impl JobManager {
    /// Kills a job's instances (`None`: all, and the job's goal becomes KILL).
    /// Runs on hosts go KILLING then KILLED; runs not yet on a host are
    /// withdrawn from the resource manager at once. Returns once the kill
    /// is durable (the goals and KILLING states written, the hosts asked).
    pub async fn kill(&self, id: &str, instances: Option<Vec<u32>>) -> Result<(), JobError> {
        let (answer, answered) = tokio::sync::oneshot::channel();
        self.queued_kills().push(KillAsk { id: id.to_string(), instances: instances.clone(), answer });
        {
            let _op = self.ops.lock().await;
            let asks = std::mem::take(&mut *self.queued_kills());
            self.kill_queued(asks).await;
        }
        match answered.await {
            Ok(result) => result,
            // The caller that took this kill was dropped before answering
            // (its client went away): the kill may be half done. A kill is
            // idempotent (instances already meant to die are left alone),
            // so it is done again here, alone.
            Err(_) => {
                let _op = self.ops.lock().await;
                self.kill_locked(id, instances, "kill requested").await
            }
        }
    }

    fn queued_kills(&self) -> std::sync::MutexGuard<'_, Vec<KillAsk>> {
        self.kill_asks.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Handles queued kills under the operations lock, in rounds: each
    /// round takes at most one kill per job (in the order asked) and runs
    /// them concurrently, so their writes share group commits; a second
    /// kill of the same job waits for the next round.
    async fn kill_queued(&self, mut asks: Vec<KillAsk>) {
        while !asks.is_empty() {
            let mut jobs = HashSet::new();
            let (round, later): (Vec<KillAsk>, Vec<KillAsk>) =
                asks.into_iter().partition(|a| jobs.insert(a.id.clone()));
            futures::stream::iter(round)
                .map(|a| async move {
                    let result = self.kill_locked(&a.id, a.instances, "kill requested").await;
                    // The asker may be gone; its kill is done all the same.
                    let _ = a.answer.send(result);
                })
                .buffer_unordered(self.config.concurrent_jobs.max(1))
                .collect::<()>()
                .await;
            asks = later;
        }
    }
}

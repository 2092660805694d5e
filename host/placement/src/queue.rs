//! Where a round's tasks come from and where their outcome goes: the
//! resource manager, with each task's need from the job manager.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use paceline_plugin_sdk::types::{JobKind, UnplacedReason};
use paceline_resmgr::{ReadyTask, ResourceManager, TaskEvent, TaskId};
use tracing::{debug, warn};

use crate::{Need, NeedSource};

/// What one [`ReadyQueue::take_ready`] handed out. Every task is PLACING
/// until it is reported [`ReadyQueue::placed`] or [`ReadyQueue::unplaced`]
/// (or the resource manager's PLACING timeout sends it back to READY).
#[derive(Clone, Debug, Default)]
pub struct Taken {
    /// Tasks to place, with what each needs.
    pub ready: Vec<(ReadyTask, Need)>,
    /// Tasks whose job is gone: to be sent back deferred.
    pub orphans: Vec<ReadyTask>,
}

/// The resource manager's ready queues as the engine sees them. Each call
/// covers a whole batch: a round makes one `take_ready` per job kind, one
/// `placed` and one `unplaced` per group, whatever the number of tasks.
#[async_trait]
pub trait ReadyQueue: Send + Sync {
    /// Takes up to `max` READY tasks of `kind` (whole gangs, so possibly
    /// more) and marks them PLACING.
    async fn take_ready(&self, kind: JobKind, max: usize, now_ms: u64) -> Taken;
    /// Marks tasks PLACED; per task, whether it still was PLACING (false:
    /// killed or preempted while the engine decided; do not launch it).
    async fn placed(&self, tasks: &[TaskId], now_ms: u64) -> Vec<bool>;
    /// Sends tasks back to READY with the reason; returns how many still
    /// were PLACING.
    async fn unplaced(&self, tasks: &[(TaskId, UnplacedReason)], now_ms: u64) -> usize;
}

/// The resource manager in this process, with needs from the job manager
/// ([`NeedSource`]).
pub struct LocalQueue {
    resmgr: Arc<Mutex<ResourceManager>>,
    needs: Arc<dyn NeedSource>,
}

impl std::fmt::Debug for LocalQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalQueue").finish_non_exhaustive()
    }
}

impl LocalQueue {
    /// Over the process's resource manager and job manager.
    pub fn new(resmgr: Arc<Mutex<ResourceManager>>, needs: Arc<dyn NeedSource>) -> LocalQueue {
        LocalQueue { resmgr, needs }
    }
}

#[async_trait]
impl ReadyQueue for LocalQueue {
    async fn take_ready(&self, kind: JobKind, max: usize, now_ms: u64) -> Taken {
        let mut ready = Vec::new();
        {
            let Ok(mut rm) = self.resmgr.lock() else {
                warn!("resource manager lock poisoned; nothing taken");
                return Taken::default();
            };
            rm.take_ready(kind, max, now_ms, &mut ready);
        }
        let mut taken = Taken { ready: Vec::with_capacity(ready.len()), orphans: Vec::new() };
        for t in ready {
            match self.needs.need(t.job, t.instance) {
                Some(need) => taken.ready.push((t, need)),
                None => taken.orphans.push(t),
            }
        }
        taken
    }

    async fn placed(&self, tasks: &[TaskId], now_ms: u64) -> Vec<bool> {
        let Ok(mut rm) = self.resmgr.lock() else { return vec![false; tasks.len()] };
        tasks
            .iter()
            .map(|id| match rm.task_event(*id, TaskEvent::Placed, now_ms) {
                Ok(_) => true,
                Err(e) => {
                    debug!(task = ?id, error = %e, "placed task no longer placing");
                    false
                }
            })
            .collect()
    }

    async fn unplaced(&self, tasks: &[(TaskId, UnplacedReason)], now_ms: u64) -> usize {
        let Ok(mut rm) = self.resmgr.lock() else { return 0 };
        tasks
            .iter()
            .filter(|(id, reason)| match rm.placement_failed(*id, *reason, now_ms) {
                Ok(()) => true,
                Err(e) => {
                    debug!(task = ?id, error = %e, "unplaced task no longer placing");
                    false
                }
            })
            .count()
    }
}

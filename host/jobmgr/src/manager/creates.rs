//! Creates, combined after their store write: a create whose job and tasks
//! are written leaves the rest (entering the job in memory, queueing its
//! gangs, the lifecycle's `job-created` and the runtime it writes) in a
//! queue, and whoever takes the operations lock next does it for every
//! queued create, distinct jobs at once. A thousand one-task jobs from many
//! clients (the pod scheduler's pods, decision 0055) then share group
//! commits instead of queueing behind each other's under the lock
//! (decision 0062).

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::StreamExt;
use paceline_model::job::{JobConfig, JobRuntime};
use paceline_model::task::TaskRuntime;
use paceline_plugin_sdk::types as sdk;

use super::JobManager;
use crate::error::JobError;
use crate::state::{JobEntry, TaskEntry};

/// What is left of a create once its job and tasks are stored.
pub(crate) struct CreateWork {
    pub(crate) id: String,
    pub(crate) config: JobConfig,
    /// The runtime as the store wrote it.
    pub(crate) stored: JobRuntime,
    /// The tasks as written (instance, runtime).
    pub(crate) rows: Vec<(u32, TaskRuntime)>,
    pub(crate) daemon_hosts: Vec<String>,
}

/// One queued create and where its answer goes.
pub(crate) struct CreateAsk {
    work: CreateWork,
    answer: tokio::sync::oneshot::Sender<Result<u64, JobError>>,
}

impl JobManager {
    /// Enters a stored job and drives its `job-created`, combined with
    /// the other creates waiting for the operations lock. Returns the
    /// job's key.
    pub(crate) async fn enter_and_drive(&self, work: CreateWork) -> Result<u64, JobError> {
        let id = work.id.clone();
        let (answer, answered) = tokio::sync::oneshot::channel();
        self.queued_creates().push(CreateAsk { work, answer });
        {
            let _op = self.ops.lock().await;
            let asks = std::mem::take(&mut *self.queued_creates());
            self.create_queued(asks).await;
        }
        match answered.await {
            Ok(result) => result,
            // Whoever took this create was dropped (its client went away)
            // after entering it: every create it took is entered before
            // its first await, so what may be missing is the lifecycle's
            // answer. `job-created` converges the job to its config, so it
            // is asked again here, alone.
            Err(_) => {
                let _op = self.ops.lock().await;
                let key = self.mem().key_of(&id);
                match key {
                    Some(key) => {
                        self.drive(key, sdk::Event::JobCreated).await?;
                        Ok(key)
                    }
                    // Refused by the resource manager, and the refusal was
                    // lost with its taker: the store's copy is removed again.
                    None => {
                        let _ = self.store.delete_job(&id).await;
                        Err(JobError::State(format!("job {id} was not created: its create was interrupted")))
                    }
                }
            }
        }
    }

    fn queued_creates(&self) -> std::sync::MutexGuard<'_, Vec<CreateAsk>> {
        self.create_asks.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Handles queued creates under the operations lock: enters every job
    /// (no await until all are entered, so a dropped caller never leaves
    /// one stored and unknown), then removes the refused ones from the
    /// store and drives the others' `job-created` concurrently, so their
    /// writes share group commits. Ids are distinct: the store refused a
    /// second create of one.
    async fn create_queued(&self, asks: Vec<CreateAsk>) {
        let mut entered = Vec::with_capacity(asks.len());
        let mut refused = Vec::new();
        for CreateAsk { work, answer } in asks {
            let id = work.id.clone();
            match self.enter_created(work) {
                Ok(key) => entered.push((key, answer)),
                Err(e) => refused.push((id, e, answer)),
            }
        }
        for (id, e, answer) in refused {
            let _ = self.store.delete_job(&id).await;
            let _ = answer.send(Err(e));
        }
        futures::stream::iter(entered)
            .map(|(key, answer)| async move {
                let result = self.drive(key, sdk::Event::JobCreated).await.map(|()| key);
                // The asker may be gone; its job is created all the same.
                let _ = answer.send(result);
            })
            .buffer_unordered(self.config.concurrent_jobs.max(1))
            .collect::<()>()
            .await;
    }

    /// Puts a stored job in memory, queues its gangs with the resource
    /// manager, announces it on the feed and starts its owner lease. A
    /// refusal by the resource manager takes it out of memory again; the
    /// caller removes it from the store.
    fn enter_created(&self, work: CreateWork) -> Result<u64, JobError> {
        let CreateWork { id, config, stored, rows, daemon_hosts } = work;
        let key = {
            let mut m = self.mem();
            let key = m.next_key;
            m.next_key += 1;
            let mut configs = BTreeMap::new();
            configs.insert(1, Arc::new(config));
            let entry = JobEntry {
                id: id.clone(),
                key,
                configs,
                latest_version: 1,
                runtime: stored,
                tasks: rows
                    .into_iter()
                    .map(|(_, mut rt)| {
                        rt.version = 1;
                        TaskEntry::new(rt)
                    })
                    .collect(),
                update: None,
                daemon_hosts,
                marked: false,
                unfinished: 0,
            };
            let entry = JobEntry { unfinished: JobEntry::count_unfinished(&entry.tasks), ..entry };
            m.keys.insert(id.clone(), key);
            m.jobs.insert(key, entry);
            m.refresh_live(key);
            key
        };
        let queued = {
            let mut rm = self.rm();
            let mut m = self.mem();
            let job = m.jobs.get_mut(&key).ok_or_else(|| JobError::NotFound(id.clone()))?;
            let all: Vec<u32> = (0..job.tasks.len() as u32).collect();
            self.queue_gangs(&mut rm, job, &all)
        };
        if let Err(e) = queued {
            let entry = {
                let mut m = self.mem();
                m.keys.remove(&id);
                let entry = m.jobs.remove(&key);
                m.refresh_live(key);
                entry
            };
            if let Some(entry) = entry {
                let mut rm = self.rm();
                for g in entry.tasks.iter().filter_map(|t| t.gang) {
                    rm.cancel(g);
                }
            }
            return Err(e);
        }
        let feed_id: Arc<str> = Arc::from(id.as_str());
        let n = self.mem().jobs.get(&key).map_or(0, |j| j.tasks.len() as u32);
        self.feed.publish(
            std::iter::once(crate::feed::Change::Job(feed_id.clone()))
                .chain((0..n).map(|i| crate::feed::Change::Task(feed_id.clone(), i))),
        );
        self.start_owner_lease(key);
        Ok(key)
    }
}

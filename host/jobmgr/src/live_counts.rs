//! Live jobs and live tasks per owner and per pool, kept as the mirror
//! changes, so a quota check (security issue 44) reads two map entries
//! instead of passing over every live job and task.
//!
//! What counts is what [`JobManager::visit_live_jobs`](crate::JobManager::visit_live_jobs)
//! sees (a full pass, kept for recounts and comparisons): a job counts while
//! its runtime state is not terminal, under its latest spec's owner and pool;
//! its live tasks are its tasks not in a terminal state plus the instances
//! its latest spec asks for that have no task yet.
//!
//! How it stays right: every [`JobEntry`] keeps the number of its tasks not
//! in a terminal state ([`JobEntry::unfinished`]), changed only through
//! [`JobEntry::set_task_runtime`] and [`JobEntry::push_task`]; after any
//! change of a job in the mirror (create, task writes, new tasks, a new
//! config, a new job runtime, delete, recovery) the writer calls
//! [`Mem::refresh_live`](crate::state::Mem::refresh_live), which compares what
//! the job adds now with what it added before and moves the difference: O(1),
//! no allocation unless an owner or pool appears for the first time.

use std::collections::HashMap;
use std::sync::Arc;

use paceline_model::job::JobConfig;

use crate::state::JobEntry;

/// Live jobs and their live tasks held by one owner or in one pool.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Held {
    /// Jobs not in a terminal state.
    pub jobs: u64,
    /// Their live tasks.
    pub tasks: u64,
}

/// One live job as the counts hold it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LiveJob {
    /// Its latest spec's owner.
    pub owner: String,
    /// Its latest spec's pool.
    pub pool: String,
    /// Its live tasks.
    pub tasks: u64,
}

/// What one live job adds: its latest spec (owner and pool) and its live tasks.
#[derive(Debug)]
struct Share {
    config: Arc<JobConfig>,
    tasks: u64,
}

/// The counts. Lives in the mirror (`Mem`), under its lock.
#[derive(Debug, Default)]
pub(crate) struct LiveCounts {
    owners: HashMap<String, Held>,
    pools: HashMap<String, Held>,
    jobs: HashMap<u64, Share>,
}

impl LiveCounts {
    /// Brings job `key`'s share in line with `job` (`None`: it is gone).
    pub fn refresh(&mut self, key: u64, job: Option<&JobEntry>) {
        let want = job.and_then(JobEntry::live_share);
        let LiveCounts { owners, pools, jobs } = self;
        if let (Some(s), Some((cfg, tasks))) = (jobs.get_mut(&key), want)
            && s.config.owner == cfg.owner
            && s.config.pool == cfg.pool
        {
            // The hot path (a task write): same owner and pool, tasks move.
            if s.tasks != tasks {
                move_tasks(owners, &cfg.owner, s.tasks, tasks);
                move_tasks(pools, &cfg.pool, s.tasks, tasks);
                s.tasks = tasks;
            }
            if !Arc::ptr_eq(&s.config, cfg) {
                s.config = cfg.clone();
            }
            return;
        }
        if let Some(old) = jobs.remove(&key) {
            take(owners, &old.config.owner, old.tasks);
            take(pools, &old.config.pool, old.tasks);
        }
        if let Some((cfg, tasks)) = want {
            add(owners, &cfg.owner, tasks);
            add(pools, &cfg.pool, tasks);
            jobs.insert(key, Share { config: cfg.clone(), tasks });
        }
    }

    /// What `owner` and `pool` hold.
    pub fn held(&self, owner: &str, pool: &str) -> (Held, Held) {
        (self.owners.get(owner).copied().unwrap_or_default(), self.pools.get(pool).copied().unwrap_or_default())
    }

    /// Job `key`'s share, when it is live.
    pub fn job(&self, key: u64) -> Option<LiveJob> {
        self.jobs.get(&key).map(|s| LiveJob {
            owner: s.config.owner.clone(),
            pool: s.config.pool.clone(),
            tasks: s.tasks,
        })
    }

    /// Every owner's and pool's counts (for comparisons with a recount).
    pub fn all(&self) -> (HashMap<String, Held>, HashMap<String, Held>) {
        (self.owners.clone(), self.pools.clone())
    }
}

fn add(map: &mut HashMap<String, Held>, name: &str, tasks: u64) {
    match map.get_mut(name) {
        Some(h) => {
            h.jobs += 1;
            h.tasks += tasks;
        }
        None => {
            map.insert(name.to_string(), Held { jobs: 1, tasks });
        }
    }
}

fn take(map: &mut HashMap<String, Held>, name: &str, tasks: u64) {
    if let Some(h) = map.get_mut(name) {
        h.jobs = h.jobs.saturating_sub(1);
        h.tasks = h.tasks.saturating_sub(tasks);
        if h.jobs == 0 {
            // An owner or pool with no live job left is forgotten, so the
            // maps hold only who holds something.
            map.remove(name);
        }
    }
}

fn move_tasks(map: &mut HashMap<String, Held>, name: &str, from: u64, to: u64) {
    if let Some(h) = map.get_mut(name) {
        h.tasks = h.tasks.saturating_sub(from).saturating_add(to);
    }
}

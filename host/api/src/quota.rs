//! Quotas on live jobs and tasks (security issue 44): how many jobs not yet
//! in a terminal state, and how many of their tasks, one principal and one
//! pool may hold. One principal used to be able to create 10 jobs of
//! 100,000 tasks in 5 s, taking the server from 63 to 726 MB; now the
//! second such job is refused.
//!
//! The principal is the job's owner: a `user` can only create jobs it owns
//! (`jobs::check_owner`), and an operator creating a job for someone else
//! spends that owner's quota. The pool is the job's own pool path (its
//! parent pools are not summed); a pool's spec may set its own limits
//! (`max_live_jobs`, `max_live_tasks`), which replace the server's per-pool
//! defaults for it.
//!
//! What counts: a job not in a terminal state counts under its latest
//! spec's owner and pool; its live tasks are its tasks not in a terminal
//! state plus the instances its latest spec asks for that have no task yet
//! (a batch job's finished tasks stop counting before the job ends).
//!
//! Counts come from the job manager, which keeps them per owner and per pool
//! as jobs change ([`JobManager::live_held`], [`JobManager::live_job`]:
//! created, scaled, tasks ending, the job ending, deleted, rebuilt from the
//! store at recovery), so a check costs O(1) whatever the cluster holds; it
//! used to pass over every live job and task ([`JobManager::visit_live_jobs`],
//! kept as the recount tests compare against).
//!
//! Concurrent changes cannot overshoot: [`Quotas::admit`] checks and, in the
//! same step, reserves what the change adds ([`Admitted`]). Later checks
//! count a reservation until the job manager's counts hold its change (the
//! two read under one lock), so a change is never counted twice and a
//! limit can be reached exactly; the reservation is dropped once the change
//! is made or has failed. Only the check is one at a time, not the change:
//! the first version held one lock across the store write of every create,
//! which made 1,000 concurrent creates 3.7x slower (`bench server`,
//! docs/benchmarks.md).

use std::sync::{Mutex, PoisonError};

use paceline_jobmgr::JobManager;
use paceline_jobmgr::live_counts::Held;
use tonic::Status;

/// The limits (`quotas:` in the server's config file). 0 turns a limit off.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct QuotaLimits {
    /// Live jobs one principal (job owner) may hold (default 1,000).
    pub max_live_jobs_per_principal: u64,
    /// Live tasks of one principal's live jobs (default 100,000: one job of
    /// the largest size a job may have by default).
    pub max_live_tasks_per_principal: u64,
    /// Live jobs in one pool (default 10,000).
    pub max_live_jobs_per_pool: u64,
    /// Live tasks in one pool (default 1,000,000).
    pub max_live_tasks_per_pool: u64,
}

impl Default for QuotaLimits {
    fn default() -> Self {
        QuotaLimits {
            max_live_jobs_per_principal: 1_000,
            max_live_tasks_per_principal: 100_000,
            max_live_jobs_per_pool: 10_000,
            max_live_tasks_per_pool: 1_000_000,
        }
    }
}

/// The limits and the changes admitted but not yet made. Shared by every
/// `JobApi` of a server (gRPC and the web UI).
#[derive(Debug, Default)]
pub struct Quotas {
    limits: QuotaLimits,
    reserved: Mutex<Reserved>,
}

/// The changes admitted and not yet known to be made.
#[derive(Debug, Default)]
struct Reserved {
    next: u64,
    open: Vec<Reservation>,
}

/// One admitted change: what it adds to its owner and pool, and how to tell
/// that the job manager's counts already hold it (job `job` live under that
/// owner and pool with at least `tasks` live tasks).
#[derive(Debug)]
struct Reservation {
    token: u64,
    job: String,
    owner: String,
    pool: String,
    add: Held,
    tasks: u64,
}

impl Reserved {
    /// The kept counts of `owner` and `pool` plus what their open
    /// reservations add, read under one lock with the jobs' shares: a change
    /// already made is in the counts and is not added again.
    fn held(&self, jobs: &JobManager, owner: &str, pool: &str) -> (Held, Held) {
        let mine: Vec<&Reservation> = self.open.iter().filter(|r| r.owner == owner || r.pool == pool).collect();
        let ids: Vec<&str> = mine.iter().map(|r| r.job.as_str()).collect();
        let (mut by_owner, mut by_pool, shares) = jobs.live_held_with_jobs(owner, pool, &ids);
        for (r, share) in mine.iter().zip(shares) {
            let made = share.is_some_and(|j| j.owner == r.owner && j.pool == r.pool && j.tasks >= r.tasks);
            if made {
                continue;
            }
            for (held, applies) in [(&mut by_owner, r.owner == owner), (&mut by_pool, r.pool == pool)] {
                if applies {
                    held.jobs += r.add.jobs;
                    held.tasks = held.tasks.saturating_add(r.add.tasks);
                }
            }
        }
        (by_owner, by_pool)
    }
}

/// An admitted change's reservation: hold it until the change is made (or
/// has failed); dropping it gives the room back to the counts it came from.
#[must_use = "the reservation ends when dropped: hold it until the change is made"]
#[derive(Debug)]
pub struct Admitted<'a> {
    quotas: &'a Quotas,
    token: Option<u64>,
}

impl Drop for Admitted<'_> {
    fn drop(&mut self) {
        if let Some(token) = self.token {
            self.quotas.reserved().open.retain(|r| r.token != token);
        }
    }
}

/// What a change asks for.
#[derive(Clone, Copy, Debug)]
pub enum Ask<'a> {
    /// A new job `job` of `owner` in `pool` with `tasks` instances (or an
    /// ended job made live again).
    New {
        /// Its id.
        job: &'a str,
        /// Its owner.
        owner: &'a str,
        /// Its pool.
        pool: &'a str,
        /// Its instance count.
        tasks: u64,
    },
    /// Job `job` is to have this owner, pool and instance count.
    Update {
        /// The job's id.
        job: &'a str,
        /// Its new owner.
        owner: &'a str,
        /// Its new pool.
        pool: &'a str,
        /// Its new instance count.
        tasks: u64,
    },
    /// Job `job` is to grow by `add` instances.
    Grow {
        /// The job's id.
        job: &'a str,
        /// Instances added.
        add: u64,
    },
}

/// What the live jobs hold, except the job being changed.
#[derive(Debug, Default)]
struct Usage {
    owner_jobs: u64,
    owner_tasks: u64,
    pool_jobs: u64,
    pool_tasks: u64,
}

impl Quotas {
    /// Quotas with these limits.
    pub fn new(limits: QuotaLimits) -> Quotas {
        Quotas { limits, reserved: Mutex::new(Reserved::default()) }
    }

    fn reserved(&self) -> std::sync::MutexGuard<'_, Reserved> {
        // The list is whole after every step (no await, no panic mid-change).
        self.reserved.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The limits.
    pub fn limits(&self) -> &QuotaLimits {
        &self.limits
    }

    /// Checks `ask` against the limits, counting the changes admitted and
    /// not yet made; on success reserves what it adds and returns the
    /// reservation, to hold until the change is made (so concurrent checks
    /// see it). Refusals are RESOURCE_EXHAUSTED naming the limit, the count
    /// and where it is set. An update or growth is refused only when it adds
    /// to what the job holds (or moves it to another owner or pool): a
    /// principal already over a lowered limit can still change and shrink
    /// its jobs.
    pub fn admit(&self, jobs: &JobManager, ask: Ask<'_>) -> Result<Admitted<'_>, Status> {
        let mut reserved = self.reserved();
        let Some(mut reservation) = self.check(jobs, ask, &reserved)? else {
            return Ok(Admitted { quotas: self, token: None });
        };
        // Another change of the same job still open: this one counts as made
        // only once the job holds both, so neither is taken as made too early.
        let open_target = reserved.open.iter().filter(|r| r.job == reservation.job).map(|r| r.tasks).max();
        if let Some(target) = open_target {
            reservation.tasks = reservation.tasks.max(target.saturating_add(reservation.add.tasks));
        }
        reserved.next += 1;
        reservation.token = reserved.next;
        let token = Some(reservation.token);
        reserved.open.push(reservation);
        Ok(Admitted { quotas: self, token })
    }

    /// The change's reservation when it is within the limits and adds
    /// something, `None` when there is nothing to check.
    fn check(&self, jobs: &JobManager, ask: Ask<'_>, reserved: &Reserved) -> Result<Option<Reservation>, Status> {
        // The job being changed, as it is now: (owner, pool, live tasks).
        let (id, job) = match ask {
            Ask::New { job, .. } => (job, None),
            Ask::Update { job, .. } | Ask::Grow { job, .. } => (job, jobs.live_job(job)),
        };
        let (owner, pool, tasks) = match ask {
            Ask::New { owner, pool, tasks, .. } => (owner.to_string(), pool.to_string(), tasks),
            Ask::Update { owner, pool, tasks, .. } => (owner.to_string(), pool.to_string(), tasks),
            Ask::Grow { add, .. } => match &job {
                Some(j) => (j.owner.clone(), j.pool.clone(), j.tasks.saturating_add(add)),
                // Not live (or unknown): the job manager answers for it.
                None => return Ok(None),
            },
        };
        if let Some(j) = &job
            && j.owner == owner
            && j.pool == pool
            && tasks <= j.tasks
        {
            return Ok(None);
        }
        // What the change adds to this owner and pool: a job staying where
        // it is adds its growth; a new or moved one all of itself.
        let add = match &job {
            Some(j) if j.owner == owner && j.pool == pool => Held { jobs: 0, tasks: tasks - j.tasks },
            _ => Held { jobs: 1, tasks },
        };
        // What the owner and the pool hold, with the changes admitted and
        // not yet made, less the job being changed.
        let (held_owner, held_pool) = reserved.held(jobs, &owner, &pool);
        let mut usage = Usage {
            owner_jobs: held_owner.jobs,
            owner_tasks: held_owner.tasks,
            pool_jobs: held_pool.jobs,
            pool_tasks: held_pool.tasks,
        };
        if let Some(j) = &job {
            if j.owner == owner {
                usage.owner_jobs = usage.owner_jobs.saturating_sub(1);
                usage.owner_tasks = usage.owner_tasks.saturating_sub(j.tasks);
            }
            if j.pool == pool {
                usage.pool_jobs = usage.pool_jobs.saturating_sub(1);
                usage.pool_tasks = usage.pool_tasks.saturating_sub(j.tasks);
            }
        }
        let l = &self.limits;
        // A pool's own limits (its spec's max_live_jobs, max_live_tasks)
        // replace the server's per-pool defaults.
        let server = "in the `quotas:` section of the server's config file";
        let own = format!("in pool {pool}'s spec (`paceline pool get {pool}`)");
        let (own_jobs, own_tasks) = jobs.pool_limits(&pool);
        let (pool_jobs_limit, pool_jobs_key, pool_jobs_from) = match own_jobs {
            Some(n) => (n, "max_live_jobs", own.as_str()),
            None => (l.max_live_jobs_per_pool, "max_live_jobs_per_pool", server),
        };
        let (pool_tasks_limit, pool_tasks_key, pool_tasks_from) = match own_tasks {
            Some(n) => (n, "max_live_tasks", own.as_str()),
            None => (l.max_live_tasks_per_pool, "max_live_tasks_per_pool", server),
        };
        // A job already live keeps counting as one job; only a new one adds.
        let counted = |s: &str| if job.is_none() { format!("a new {s}") } else { format!("this {s}") };
        over(l.max_live_jobs_per_principal, "max_live_jobs_per_principal", server, usage.owner_jobs + 1, || {
            format!(
                "principal `{owner}` has {} live jobs; {} would make {}",
                usage.owner_jobs,
                counted("job"),
                usage.owner_jobs + 1
            )
        })?;
        over(
            l.max_live_tasks_per_principal,
            "max_live_tasks_per_principal",
            server,
            usage.owner_tasks.saturating_add(tasks),
            || {
                format!(
                    "principal `{owner}` has {} live tasks in other jobs; this job's {tasks} would make {}",
                    usage.owner_tasks,
                    usage.owner_tasks.saturating_add(tasks)
                )
            },
        )?;
        over(pool_jobs_limit, pool_jobs_key, pool_jobs_from, usage.pool_jobs + 1, || {
            format!(
                "pool {pool} has {} live jobs; {} would make {}",
                usage.pool_jobs,
                counted("job"),
                usage.pool_jobs + 1
            )
        })?;
        over(pool_tasks_limit, pool_tasks_key, pool_tasks_from, usage.pool_tasks.saturating_add(tasks), || {
            format!(
                "pool {pool} has {} live tasks in other jobs; this job's {tasks} would make {}",
                usage.pool_tasks,
                usage.pool_tasks.saturating_add(tasks)
            )
        })?;
        Ok(Some(Reservation { token: 0, job: id.to_string(), owner, pool, add, tasks }))
    }
}

/// RESOURCE_EXHAUSTED when `would` passes `limit` (0: no limit); `from`
/// says where the limit is set.
fn over(limit: u64, key: &str, from: &str, would: u64, what: impl FnOnce() -> String) -> Result<(), Status> {
    if limit == 0 || would <= limit {
        return Ok(());
    }
    tracing::info!(quota = key, limit, would, "quota refused a change");
    Err(Status::resource_exhausted(format!(
        "quota: {}, over the limit of {limit} live (not yet finished) {} ({key} {from}; see docs/operations.md). Kill jobs no longer needed (or wait for some to finish), or ask an operator to raise it",
        what(),
        if key.contains("jobs") { "jobs" } else { "tasks" },
    )))
}

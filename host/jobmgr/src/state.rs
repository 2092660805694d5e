//! The in-memory mirror of every live job: configs, runtime, task runtimes
//! as last written, the update in progress, and what the engine tracks
//! beside storage (resource-manager handles, last run-update sequence,
//! health). Storage stays the truth: everything here is rebuilt by
//! `JobManager::recover`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::num::NonZeroU32;
use std::sync::Arc;

use paceline_model::Labels;
use paceline_model::job::{InstanceProgress, InstanceUpdateState, JobConfig, JobKind, JobRuntime, Update, UpdateState};
use paceline_model::task::{TaskEvent, TaskGoal, TaskRuntime, TaskState};
use paceline_resmgr::GangId;

use crate::deadline::DeadlineQueue;

/// The reason a run gets when its host accepted its launch.
pub(crate) const LAUNCHED: &str = "LAUNCHED";

/// The reason a run gets when a kill was asked for it.
pub(crate) const KILL_REQUESTED: &str = "KILL_REQUESTED";

/// Everything the job manager holds in memory.
#[derive(Debug, Default)]
pub(crate) struct Mem {
    pub jobs: HashMap<u64, JobEntry>,
    pub keys: HashMap<String, u64>,
    pub next_key: u64,
    pub deadlines: DeadlineQueue,
    /// The last host list the wiring reported: (name, attributes, accepts tasks).
    pub hosts: Vec<(String, Labels, bool)>,
    pub draining: BTreeSet<String>,
    /// Jobs with an owner lease → when it was last renewed (or started),
    /// ms since the epoch (manager/lease.rs). Memory only, on purpose.
    pub owner_renewed: HashMap<u64, u64>,
    /// Live jobs and tasks per owner and pool, for quotas (live_counts.rs).
    pub live: crate::live_counts::LiveCounts,
}

impl Mem {
    pub fn key_of(&self, job_id: &str) -> Option<u64> {
        self.keys.get(job_id).copied()
    }

    /// Brings the live counts in line with job `key` as the mirror now holds
    /// it (gone: its share is removed). Every writer of a job's runtime,
    /// tasks or configs calls it after the change.
    pub fn refresh_live(&mut self, key: u64) {
        let Mem { jobs, live, .. } = self;
        live.refresh(key, jobs.get(&key));
    }
}

/// One job.
#[derive(Debug)]
pub(crate) struct JobEntry {
    pub id: String,
    pub key: u64,
    /// Config versions tasks refer to (at least the desired one).
    pub configs: BTreeMap<u64, Arc<JobConfig>>,
    pub latest_version: u64,
    pub runtime: JobRuntime,
    /// Indexed by instance, dense.
    pub tasks: Vec<TaskEntry>,
    pub update: Option<UpdateEntry>,
    /// Daemon jobs: instance → bound host, `""` when that host no longer matches.
    pub daemon_hosts: Vec<String>,
    /// The lifecycle plugin marked the job terminal (SUCCEEDED / FAILED).
    pub marked: bool,
    /// How many of `tasks` are not in a terminal state: kept by
    /// `set_task_runtime` and `push_task`, read by the live counts.
    pub unfinished: u64,
}

impl JobEntry {
    /// The number of `tasks` not in a terminal state (for `unfinished`).
    pub fn count_unfinished(tasks: &[TaskEntry]) -> u64 {
        tasks.iter().filter(|t| !t.rt.state.is_terminal()).count() as u64
    }

    /// Replaces a task's runtime with one the store holds (just written, or
    /// read back), keeping `unfinished`. Every write of a task's runtime in
    /// the mirror goes through here (or only moves between states that are
    /// not terminal, as `kill_in_memory` does), so a KILLING kept in memory
    /// only ends here.
    pub fn set_task_runtime(&mut self, instance: usize, rt: TaskRuntime) {
        let Some(t) = self.tasks.get_mut(instance) else {
            return;
        };
        t.unwritten_killing_from = None;
        t.unwritten_launched = None;
        match (t.rt.state.is_terminal(), rt.state.is_terminal()) {
            (true, false) => self.unfinished += 1,
            (false, true) => self.unfinished = self.unfinished.saturating_sub(1),
            _ => {}
        }
        t.rt = rt;
    }

    /// Gives every task of a job whose goal is KILL the goal KILL in memory,
    /// without a store write (decision 0064): the job's goal, written first,
    /// is what makes the kill durable (recovery finishes it). A run on a host
    /// goes KILLING, its stored state remembered for the event its next write
    /// records. Returns the instances changed.
    pub fn kill_in_memory(&mut self, now_ms: u64) -> Vec<u32> {
        let mut changed = Vec::new();
        for (i, t) in self.tasks.iter_mut().enumerate() {
            if t.rt.goal == TaskGoal::Kill {
                continue;
            }
            let killing = t.goes_killing();
            t.rt.goal = TaskGoal::Kill;
            if killing {
                t.unwritten_killing_from = Some(t.rt.state);
                t.rt.state = TaskState::Killing;
                t.rt.reason = KILL_REQUESTED.to_string();
                t.rt.message.clear();
                t.rt.updated_at_ms = now_ms;
            }
            changed.push(i as u32);
        }
        changed
    }

    /// Task counts as they will be once `kill_in_memory` has run: what the
    /// kill's write of the job's runtime records, so that the job is not
    /// written a second time for them.
    pub fn counts_after_kill(&self) -> BTreeMap<TaskState, u32> {
        let mut m = BTreeMap::new();
        let n = self.instance_count() as usize;
        for t in self.tasks.iter().take(n) {
            let state = if t.goes_killing() { TaskState::Killing } else { t.rt.state };
            *m.entry(state).or_insert(0) += 1;
        }
        m
    }

    /// Appends a task, keeping `unfinished`.
    pub fn push_task(&mut self, task: TaskEntry) {
        if !task.rt.state.is_terminal() {
            self.unfinished += 1;
        }
        self.tasks.push(task);
    }

    /// What the job adds to its owner's and pool's live counts: its latest
    /// spec and its live tasks (those not terminal, plus the instances the
    /// latest spec asks for that have no task yet); `None` once the job is
    /// terminal. O(1).
    pub fn live_share(&self) -> Option<(&Arc<JobConfig>, u64)> {
        if self.runtime.state.is_terminal() {
            return None;
        }
        let latest = self.latest_config();
        let not_yet = u64::from(latest.instance_count).saturating_sub(self.tasks.len() as u64);
        Some((latest, self.unfinished + not_yet))
    }

    /// The config instances should run.
    pub fn config(&self) -> &Arc<JobConfig> {
        self.configs
            .get(&self.runtime.desired_config_version)
            .or_else(|| self.configs.values().next_back())
            .expect("a job entry always holds its desired config")
    }

    /// The job's latest spec (an update in progress included): what its
    /// owner last asked for.
    pub fn latest_config(&self) -> &Arc<JobConfig> {
        self.configs.get(&self.latest_version).unwrap_or_else(|| self.config())
    }

    pub fn config_at(&self, version: u64) -> &Arc<JobConfig> {
        self.configs.get(&version).unwrap_or_else(|| self.config())
    }

    pub fn kind(&self) -> JobKind {
        self.config().kind
    }

    /// Desired instance count (daemon: one per bound host slot).
    pub fn instance_count(&self) -> u32 {
        if self.kind() == JobKind::Daemon { self.daemon_hosts.len() as u32 } else { self.config().instance_count }
    }

    /// Task counts per state over the instances below the count.
    pub fn counts(&self) -> BTreeMap<TaskState, u32> {
        let mut m = BTreeMap::new();
        let n = self.instance_count() as usize;
        for t in self.tasks.iter().take(n) {
            *m.entry(t.rt.state).or_insert(0) += 1;
        }
        m
    }

    /// The version an update moves instances to (the desired one).
    pub fn target_version(&self) -> u64 {
        self.runtime.desired_config_version
    }
}

/// One task.
#[derive(Debug, Clone)]
pub(crate) struct TaskEntry {
    pub rt: TaskRuntime,
    /// The queued gang holding this run, while the resource manager queues it.
    pub gang: Option<GangId>,
    /// The resource manager's handle, once placed.
    pub rm_task: Option<paceline_joints::TaskHandle>,
    /// Highest run-update sequence handled for the current run.
    pub last_seq: u64,
    pub healthy: Option<bool>,
    pub exit_code: Option<i32>,
    /// The current run is being preempted: the resource manager requeues
    /// the task itself when the kill is confirmed, so the next run is not
    /// submitted again.
    pub preempted: bool,
    /// The host where this run's launch was refused: the next placement
    /// avoids it (in memory only; a restart forgets it). A boxed `str`:
    /// 8 bytes less than a `String` in every task entry (a million of them).
    pub avoid_host: Option<Box<str>>,
    /// A whole-job kill moved this run to KILLING in memory only (decision
    /// 0064): the store still holds the state named here, and the KILLING
    /// transition (at `rt.updated_at_ms`) is recorded as an event with the
    /// task's next write. One byte, in padding the entry already has.
    pub unwritten_killing_from: Option<TaskState>,
    /// This run's LAUNCHED is in memory only (decision 0073): the store
    /// holds LAUNCHING, which recovery treats alike, and the LAUNCHED event
    /// is stored with the task's next write. Its time, as milliseconds
    /// after the job's creation plus one: four bytes, in padding the entry
    /// already has, where a time would take sixteen.
    pub unwritten_launched: Option<NonZeroU32>,
    /// Launches of this task refused in a row since one last reached
    /// RUNNING: from the second on, the next run waits a backoff before it
    /// is submitted again (`launch::refusal_backoff_ms`). In memory only.
    pub launch_refusals: u8,
}

impl TaskEntry {
    pub fn new(rt: TaskRuntime) -> Self {
        TaskEntry {
            rt,
            gang: None,
            rm_task: None,
            last_seq: 0,
            healthy: None,
            exit_code: None,
            preempted: false,
            avoid_host: None,
            unwritten_killing_from: None,
            unwritten_launched: None,
            launch_refusals: 0,
        }
    }

    /// Whether a kill of this task (its goal becoming KILL) moves its run to
    /// KILLING: a run on a host, not yet meant to die.
    pub fn goes_killing(&self) -> bool {
        self.rt.goal != TaskGoal::Kill
            && self.rt.host.is_some()
            && crate::table::action(self.rt.state, TaskGoal::Kill) == crate::table::GoalAction::KillRun
    }

    /// The event of a KILLING kept in memory only (`kill_in_memory`): shown
    /// by `task_events` until stored with the task's next write.
    fn unwritten_killing_event(&self) -> Option<TaskEvent> {
        self.unwritten_killing_from.map(|from| TaskEvent {
            run: self.rt.run,
            from: Some(from),
            to: TaskState::Killing,
            at_ms: self.rt.updated_at_ms,
            host: self.rt.host.clone(),
            reason: KILL_REQUESTED.to_string(),
            message: String::new(),
        })
    }

    /// Keeps this run's LAUNCHED at `at_ms` in memory only, to be stored
    /// with the task's next write; false (nothing kept) where its time
    /// cannot be held (before the job's creation by this clock, or 49 days
    /// after it): the caller stores the event at once.
    pub fn keep_launched(&mut self, created_at_ms: u64, at_ms: u64) -> bool {
        let offset = at_ms.checked_sub(created_at_ms).and_then(|d| d.checked_add(1));
        match offset.and_then(|d| u32::try_from(d).ok()).and_then(NonZeroU32::new) {
            Some(at) => {
                self.unwritten_launched = Some(at);
                true
            }
            None => false,
        }
    }

    /// The events kept in memory only, oldest first: this run's LAUNCHED
    /// ([`TaskEntry::keep_launched`]) and a whole-job kill's KILLING. The
    /// task's next write stores them before its own event; `task_events`
    /// shows them until then.
    pub fn unwritten_events(&self, created_at_ms: u64) -> impl Iterator<Item = TaskEvent> + use<> {
        let launched = self.unwritten_launched.map(|at| TaskEvent {
            run: self.rt.run,
            from: Some(TaskState::Launching),
            to: TaskState::Launched,
            at_ms: created_at_ms + u64::from(at.get()) - 1,
            host: self.rt.host.clone(),
            reason: LAUNCHED.to_string(),
            message: String::new(),
        });
        launched.into_iter().chain(self.unwritten_killing_event())
    }

    /// Wants runs (as opposed to being stopped or removed).
    pub fn wants_run(&self) -> bool {
        matches!(self.rt.goal, TaskGoal::Run | TaskGoal::Succeed)
    }
}

/// The update in progress.
#[derive(Debug, Clone)]
pub(crate) struct UpdateEntry {
    pub update: Update,
    pub progress: BTreeMap<u32, InstanceProgress>,
}

impl UpdateEntry {
    pub fn of_state(&self, s: InstanceUpdateState) -> Vec<u32> {
        self.progress.values().filter(|p| p.state == s).map(|p| p.instance).collect()
    }

    pub fn is_active(&self) -> bool {
        !self.update.state.is_terminal()
    }

    pub fn paused(&self) -> bool {
        self.update.state == UpdateState::Paused
    }
}

#[cfg(test)]
mod tests {
    use paceline_model::task::{TaskRuntime, TaskState};

    use super::TaskEntry;

    #[test]
    fn a_kept_launched_comes_back_at_its_time_and_one_that_cannot_be_kept_is_refused() {
        let created = 1_700_000_000_000;
        let mut t =
            TaskEntry::new(TaskRuntime { run: 3, state: TaskState::Launched, ..TaskRuntime::initial(1, created) });
        // At the job's creation, and 49 days after it (the last millisecond a u32 holds).
        for at in [created, created + u64::from(u32::MAX) - 1] {
            assert!(t.keep_launched(created, at));
            let got: Vec<(u64, TaskState, u64)> = t.unwritten_events(created).map(|e| (e.run, e.to, e.at_ms)).collect();
            assert_eq!(got, [(3, TaskState::Launched, at)]);
        }
        // Before the job's creation (a clock that went back) or later than a u32 holds: stored at once.
        let mut fresh = TaskEntry::new(TaskRuntime::initial(1, created));
        assert!(!fresh.keep_launched(created, created - 1));
        assert!(!fresh.keep_launched(created, created + u64::from(u32::MAX)));
        assert_eq!(fresh.unwritten_events(created).count(), 0);
    }

    /// The kept LAUNCHED takes four bytes of padding the entry had
    /// (decision 0073): 312 bytes before it and after, on 64-bit targets.
    /// A field that makes every entry larger (a million of them in a large
    /// cluster) should be a decision of its own, and this figure with it.
    #[cfg(target_pointer_width = "64")]
    #[test]
    fn a_task_entry_stays_within_its_size() {
        assert_eq!(std::mem::size_of::<TaskEntry>(), 312);
    }
}

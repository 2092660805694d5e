//! Task states inside the resource manager, as an explicit transition table.
//!
//! ```text
//! PENDING ─admit─▶ READY ─start_placing─▶ PLACING ─placed─▶ PLACED ─start_launch─▶ LAUNCHING ─running─▶ RUNNING
//!                    ▲                      │ placement_failed / unreachable / timeout │ timeout           │
//!                    └──────────────────────┴──────────────────────────────────────────┘                   │
//!   RUNNING, LAUNCHING, PLACED ─preempt─▶ PREEMPTING ─kill_confirmed─▶ (requeued as PENDING, or KILLED)
//!   PREEMPTING ─timeout─▶ READY          any live state ─kill─▶ KILLING ─kill_confirmed─▶ KILLED
//!   LAUNCHING, RUNNING ─succeeded / failed / lost─▶ SUCCEEDED / FAILED / LOST
//! ```
//!
//! The states are the model's ([`TaskState`]); only the table here is the
//! resource manager's own.
//!
//! PLACING, LAUNCHING and PREEMPTING have timeouts ([`Timeouts`]); when one
//! runs out the task falls back to READY. A task holds its pool's allocation
//! from READY until it ends or is requeued.

/// Where a task is: the model's states, of which the resource manager uses
/// PENDING through KILLED as drawn above (never INITIALIZED, LAUNCHED or
/// STARTING, which are the job manager's finer steps of a run).
pub use paceline_model::task::TaskState;

/// An input to the transition table: what happens to a task, which moves
/// it from one state to the next. (Not the model's `TaskEvent`, which is a
/// record in a task's history.)
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Transition {
    /// Its gang was admitted.
    Admit,
    /// The placement engine took it.
    StartPlacing,
    /// A host was chosen.
    Placed,
    /// No host this round: a placement attempt, backed off.
    PlacementFailed,
    /// The engine could not reach the host manager, so nothing was tried:
    /// no attempt counted, retried after [`Timeouts::unreachable_retry_ms`].
    HostManagerUnreachable,
    /// Launch began.
    StartLaunch,
    /// It runs.
    Running,
    /// Ended well.
    Succeeded,
    /// Ended badly.
    Failed,
    /// Host lost.
    Lost,
    /// Chosen as a preemption victim.
    Preempt,
    /// Kill requested.
    Kill,
    /// The kill is confirmed.
    KillConfirmed,
    /// The state's timeout ran out.
    Timeout,
}

use TaskState as S;
use Transition as E;

/// The transition table: (from, transition, to). Anything not listed is refused.
pub const TRANSITIONS: &[(TaskState, Transition, TaskState)] = &[
    (S::Pending, E::Admit, S::Ready),
    (S::Ready, E::StartPlacing, S::Placing),
    (S::Placing, E::Placed, S::Placed),
    (S::Placing, E::PlacementFailed, S::Ready),
    (S::Placing, E::HostManagerUnreachable, S::Ready),
    (S::Placing, E::Timeout, S::Ready),
    (S::Placed, E::StartLaunch, S::Launching),
    (S::Launching, E::Running, S::Running),
    (S::Launching, E::Timeout, S::Ready),
    (S::Launching, E::Failed, S::Failed),
    (S::Launching, E::Lost, S::Lost),
    (S::Running, E::Succeeded, S::Succeeded),
    (S::Running, E::Failed, S::Failed),
    (S::Running, E::Lost, S::Lost),
    (S::Placed, E::Preempt, S::Preempting),
    (S::Launching, E::Preempt, S::Preempting),
    (S::Running, E::Preempt, S::Preempting),
    (S::Preempting, E::KillConfirmed, S::Killed),
    (S::Preempting, E::Timeout, S::Ready),
    (S::Preempting, E::Lost, S::Lost),
    (S::Ready, E::Kill, S::Killing),
    (S::Placing, E::Kill, S::Killing),
    (S::Placed, E::Kill, S::Killing),
    (S::Launching, E::Kill, S::Killing),
    (S::Running, E::Kill, S::Killing),
    (S::Preempting, E::Kill, S::Killing),
    (S::Killing, E::KillConfirmed, S::Killed),
    (S::Killing, E::Lost, S::Lost),
];

/// The state `event` leads to from `state`, if the table allows it.
pub fn next(state: TaskState, event: Transition) -> Option<TaskState> {
    TRANSITIONS.iter().find(|(f, e, _)| *f == state && *e == event).map(|&(_, _, t)| t)
}

/// How long a task may stay in a state with a timeout, and placement backoff.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timeouts {
    /// PLACING → READY after this.
    pub placing_ms: u64,
    /// LAUNCHING → READY after this.
    pub launching_ms: u64,
    /// PREEMPTING → READY after this.
    pub preempting_ms: u64,
    /// First placement backoff; doubles per failed attempt.
    pub backoff_base_ms: u64,
    /// Backoff ceiling.
    pub backoff_max_ms: u64,
    /// A task sent back because the engine could not reach the host manager
    /// is READY again after this fixed delay, with no attempt counted and no
    /// doubling: the lease failed, not the task (decision 0040). Short, so a
    /// host manager's failover costs its tasks little more than the failover
    /// itself; not zero, so an engine whose host manager is down does not
    /// spin on it.
    pub unreachable_retry_ms: u64,
}

impl Default for Timeouts {
    fn default() -> Self {
        // The state table's timeouts (`TaskState::timeout`), one definition.
        let ms = |state: TaskState| state.timeout().map_or(0, |(after, _)| after.as_millis() as u64);
        Timeouts {
            placing_ms: ms(TaskState::Placing),
            launching_ms: ms(TaskState::Launching),
            preempting_ms: ms(TaskState::Preempting),
            backoff_base_ms: 1_000,
            backoff_max_ms: 60_000,
            unreachable_retry_ms: 250,
        }
    }
}

impl Timeouts {
    /// The timeout of `state`, if it has one.
    pub fn of(&self, state: TaskState) -> Option<u64> {
        match state {
            S::Placing => Some(self.placing_ms),
            S::Launching => Some(self.launching_ms),
            S::Preempting => Some(self.preempting_ms),
            _ => None,
        }
    }

    /// Backoff after `attempts` failed placements (1 = first failure).
    pub fn backoff(&self, attempts: u32) -> u64 {
        let shift = attempts.saturating_sub(1).min(20);
        self.backoff_base_ms.saturating_mul(1u64 << shift).min(self.backoff_max_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_a_function() {
        for (i, a) in TRANSITIONS.iter().enumerate() {
            for b in &TRANSITIONS[i + 1..] {
                assert!(!(a.0 == b.0 && a.1 == b.1), "duplicate transition {a:?} / {b:?}");
            }
        }
    }

    #[test]
    fn timeouts_fall_back_to_ready_and_terminal_states_are_final() {
        for s in [S::Placing, S::Launching, S::Preempting] {
            assert_eq!(next(s, E::Timeout), Some(S::Ready), "{s:?}");
            assert!(Timeouts::default().of(s).is_some());
        }
        for s in [S::Succeeded, S::Failed, S::Lost, S::Killed] {
            assert!(TRANSITIONS.iter().all(|(f, _, _)| *f != s), "{s:?} must be final");
        }
        assert_eq!(next(S::Ready, E::Running), None);
        assert_eq!(next(S::Pending, E::Placed), None);
    }

    #[test]
    fn backoff_doubles_up_to_the_ceiling() {
        let t = Timeouts::default();
        assert_eq!((t.backoff(1), t.backoff(2), t.backoff(3)), (1_000, 2_000, 4_000));
        assert_eq!(t.backoff(40), 60_000);
    }
}

//! The goal-state table: for a task's (state, goal), the one thing the
//! engine does next. Declarative on purpose: every combination is listed
//! once, so "why did the engine do X" is answered by one row.
//!
//! The resource manager owns READY and PLACING (the job manager sees a task
//! again at PLACED, through the ready queue's commit); hosts own everything from
//! LAUNCHED on (through run updates). The engine acts only where a row
//! says so.

use paceline_model::task::{TaskGoal, TaskState};

/// What the engine does for a task.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GoalAction {
    /// Nothing to do until something reports.
    Wait,
    /// Hand the run to the resource manager (state → PENDING).
    Submit,
    /// Launch on the placed host (state → LAUNCHING → LAUNCHED).
    Launch,
    /// Withdraw a run that never reached a host (state → KILLED).
    Release,
    /// Ask the host to stop the run (state → KILLING).
    KillRun,
    /// Re-send a kill that is under way (kill retry deadline).
    ResendKill,
    /// The run is over and the goal needs no more runs.
    Done,
}

use GoalAction as A;
use TaskGoal as G;
use TaskState as S;

/// The table itself: `(states, goals, action)`. First match wins; the
/// unit test checks every (state, goal) pair matches exactly one row.
pub const TABLE: &[(&[TaskState], &[TaskGoal], GoalAction)] = &[
    (&[S::Initialized], &[G::Run, G::Succeed], A::Submit),
    (&[S::Pending, S::Ready, S::Placing], &[G::Run, G::Succeed], A::Wait),
    (&[S::Placed], &[G::Run, G::Succeed], A::Launch),
    (&[S::Launching, S::Launched, S::Starting, S::Running, S::Preempting], &[G::Run, G::Succeed], A::Wait),
    (&[S::Killing], &[G::Run, G::Succeed, G::Kill, G::Delete], A::ResendKill),
    (&[S::Initialized, S::Pending, S::Ready, S::Placing, S::Placed], &[G::Kill, G::Delete], A::Release),
    (&[S::Launching, S::Launched, S::Starting, S::Running, S::Preempting], &[G::Kill, G::Delete], A::KillRun),
    (&[S::Succeeded, S::Failed, S::Lost, S::Killed], &[G::Run, G::Succeed, G::Kill, G::Delete], A::Done),
];

/// The row for `(state, goal)`.
pub fn action(state: TaskState, goal: TaskGoal) -> GoalAction {
    // A dense lookup built from TABLE would be faster still; the linear scan
    // over eight rows already runs at tens of millions per second.
    for (states, goals, action) in TABLE {
        if states.contains(&state) && goals.contains(&goal) {
            return *action;
        }
    }
    A::Wait
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOALS: [TaskGoal; 4] = [G::Run, G::Succeed, G::Kill, G::Delete];

    #[test]
    fn every_pair_has_exactly_one_row() {
        for s in TaskState::ALL {
            for g in GOALS {
                let n = TABLE.iter().filter(|(ss, gg, _)| ss.contains(&s) && gg.contains(&g)).count();
                assert_eq!(n, 1, "({s}, {g:?}) matches {n} rows");
            }
        }
    }

    #[test]
    fn rows() {
        let cases = [
            (S::Initialized, G::Run, A::Submit),
            (S::Placed, G::Run, A::Launch),
            (S::Running, G::Run, A::Wait),
            (S::Running, G::Kill, A::KillRun),
            (S::Pending, G::Delete, A::Release),
            (S::Killed, G::Run, A::Done),
            (S::Killing, G::Kill, A::ResendKill),
        ];
        for (s, g, a) in cases {
            assert_eq!(action(s, g), a, "({s}, {g:?})");
        }
    }
}

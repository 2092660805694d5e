//! The simulated tasks: a task's script read into a [`Plan`], its status
//! updates queued and re-sent until acknowledged (one in flight per task),
//! and the clock's step that ends tasks whose plan or kill is due.

use std::time::{Duration, Instant};

use paceline_proto::mesos::v1 as mesos;
use paceline_proto::mesos::v1::scheduler::event;

use crate::state::{Master, ev, now_secs};

#[derive(Debug)]
pub(crate) enum Plan {
    /// Ends at this instant with this status.
    Exit(Instant, i32),
    /// Runs until killed.
    Forever,
}

/// Parses a task's script into when it ends and how.
pub(crate) fn plan(script: &str, now: Instant) -> Plan {
    let mut at = now;
    for step in script.split([';', '&']).map(str::trim).filter(|s| !s.is_empty()) {
        let mut words = step.split_whitespace();
        match (words.next(), words.next()) {
            (Some("sleep"), Some(s)) => {
                let secs: f64 = s.parse().unwrap_or(0.0);
                at += Duration::from_secs_f64(secs.clamp(0.0, 1e6));
            }
            (Some("exit"), Some(n)) => return Plan::Exit(at, n.parse().unwrap_or(1)),
            (Some("exit"), None) | (Some("true"), _) => return Plan::Exit(at, 0),
            (Some("false"), _) => return Plan::Exit(at, 1),
            _ => return Plan::Forever,
        }
    }
    Plan::Exit(at, 0)
}

pub(crate) fn script_of(info: &mesos::TaskInfo) -> String {
    let Some(c) = &info.command else { return String::new() };
    if c.shell.unwrap_or(true) || c.arguments.is_empty() {
        c.value.clone().unwrap_or_default()
    } else {
        c.arguments.join(" ")
    }
}

pub(crate) fn is_terminal(s: mesos::TaskState) -> bool {
    use mesos::TaskState as T;
    matches!(
        s,
        T::TaskFinished
            | T::TaskFailed
            | T::TaskKilled
            | T::TaskError
            | T::TaskLost
            | T::TaskDropped
            | T::TaskGone
            | T::TaskGoneByOperator
    )
}

impl Master {
    pub(crate) fn status(
        &mut self,
        task_id: &str,
        state: mesos::TaskState,
        message: &str,
        reason: Option<mesos::task_status::Reason>,
        uuid: bool,
    ) -> mesos::TaskStatus {
        let agent = self.tasks.get(task_id).map(|t| t.agent_id.clone());
        let uuid = uuid.then(|| {
            self.next_id += 1;
            format!("uuid-{}-{}", self.next_id, fastrand::u64(..)).into_bytes()
        });
        mesos::TaskStatus {
            task_id: mesos::TaskId { value: task_id.into() },
            state: state as i32,
            message: (!message.is_empty()).then(|| message.to_string()),
            source: Some(if uuid.is_some() {
                mesos::task_status::Source::Executor
            } else {
                mesos::task_status::Source::Master
            } as i32),
            reason: reason.map(|r| r as i32),
            agent_id: agent.map(|value| mesos::AgentId { value }),
            timestamp: Some(now_secs()),
            uuid,
            ..Default::default()
        }
    }

    /// Moves a task to `state` and queues the update (sent when it reaches the head).
    pub(crate) fn transition(
        &mut self,
        task_id: &str,
        state: mesos::TaskState,
        message: &str,
        reason: Option<mesos::task_status::Reason>,
    ) {
        let st = self.status(task_id, state, message, reason, true);
        if let Some(t) = self.tasks.get_mut(task_id) {
            t.state = state;
            t.queue.push_back(st);
        }
    }

    /// Sends heads of queues that are new or due again.
    pub(crate) fn pump(&mut self, now: Instant, retry: Duration) {
        if !self.connected() {
            return;
        }
        let mut due = Vec::new();
        for t in self.tasks.values_mut() {
            if let Some(head) = t.queue.front()
                && t.last_sent.is_none_or(|s| now.duration_since(s) >= retry)
            {
                t.last_sent = Some(now);
                due.push(head.clone());
            }
        }
        for st in due {
            let mut e = ev(event::Type::Update);
            e.update = Some(event::Update { status: st });
            self.send(&e);
        }
    }

    pub(crate) fn progress(&mut self, now: Instant) {
        let mut ends = Vec::new();
        for (id, t) in &self.tasks {
            if is_terminal(t.state) {
                continue;
            }
            if !self.agents.get(&t.agent_id).is_some_and(|a| a.alive) {
                continue;
            }
            if let Some(k) = t.kill_at
                && k <= now
            {
                ends.push((id.clone(), None));
            } else if let Plan::Exit(at, code) = t.plan
                && at <= now
                && t.state == mesos::TaskState::TaskRunning
            {
                ends.push((id.clone(), Some(code)));
            }
        }
        for (id, code) in ends {
            match code {
                None => self.transition(
                    &id,
                    mesos::TaskState::TaskKilled,
                    "Command terminated with signal Terminated",
                    None,
                ),
                Some(0) => self.transition(&id, mesos::TaskState::TaskFinished, "Command exited with status 0", None),
                Some(c) => {
                    self.transition(&id, mesos::TaskState::TaskFailed, &format!("Command exited with status {c}"), None)
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scripts_from_command_lines() {
        let now = Instant::now();
        let ends = |s: &str| match plan(s, now) {
            Plan::Exit(at, code) => Some(((at - now).as_millis(), code)),
            Plan::Forever => None,
        };
        assert_eq!(ends("sleep 0.5"), Some((500, 0)));
        assert_eq!(ends("exit 3"), Some((0, 3)));
        assert_eq!(ends("sleep 1; exit 2"), Some((1000, 2)));
        assert_eq!(ends("sleep 1 && false"), Some((1000, 1)));
        assert_eq!(ends("true"), Some((0, 0)));
        assert_eq!(ends("serve --port 80"), None);
        assert_eq!(ends("sleep 1; serve"), None);
    }
}

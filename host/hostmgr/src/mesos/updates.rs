//! Task status updates: each `UPDATE` becomes a [`RunUpdate`] with the
//! run's next `seq` (a re-sent one keeps its seq; one already acknowledged
//! is acknowledged again), and the updates we make up ourselves.

use std::collections::{BTreeMap, VecDeque};

use paceline_model::Resources;
use paceline_model::run::{RunState, RunUpdate};
use paceline_proto::mesos::v1 as mesos;
use paceline_proto::mesos::v1::scheduler::call;
use tracing::{debug, info};

use super::{Inner, Run, St, agent_id, call_of, convert, unix_ms};
use crate::provider::ProviderEvent;

impl Inner {
    pub(super) fn on_update(&self, status: mesos::TaskStatus) -> Vec<ProviderEvent> {
        let mut out = Vec::new();
        let mut st = self.st();
        let run_id = status.task_id.value.clone();
        let aid = status.agent_id.as_ref().map(|a| a.value.clone());
        let Some(aid) = aid.or_else(|| st.runs.get(&run_id).map(|r| r.agent_id.clone())) else {
            debug!(run_id, "mesos: update without an agent for an unknown run; dropped");
            return out;
        };
        let Some(host) =
            st.agents.get(&aid).map(|a| a.hostname.clone()).or_else(|| st.known_hostnames.get(&aid).cloned())
        else {
            // It comes again (re-sent until acknowledged, or asked for by reconciliation).
            debug!(run_id, agent_id = aid, "mesos: update from an agent not offered yet; dropped");
            return out;
        };
        if let Some(r) = &mut st.reconciling {
            r.runs.remove(&run_id);
        }
        let mstate = mesos::TaskState::try_from(status.state).unwrap_or(mesos::TaskState::TaskUnknown);
        let state = convert::run_state(mstate);
        let run = st.runs.entry(run_id.clone()).or_insert_with(|| Run {
            agent_id: aid.clone(),
            task_id: convert::task_of_run(&run_id),
            resources: Resources::ZERO,
            ports: BTreeMap::new(),
            // A run we did not launch in this process (we restarted): its seqs
            // start past any an earlier process gave it (those began at its
            // own start time, or at 1 for runs it launched).
            seq: unix_ms(),
            state: None,
            terminal: false,
            unacked: VecDeque::new(),
            acked: VecDeque::new(),
        });
        let uuid = status.uuid.clone().filter(|u| !u.is_empty());
        if let Some(u) = &uuid
            && run.acked.contains(u)
        {
            let mut c = call_of(call::Type::Acknowledge);
            c.acknowledge =
                Some(call::Acknowledge { agent_id: agent_id(&aid), task_id: status.task_id.clone(), uuid: u.clone() });
            self.queue(c);
            return out;
        }
        // A re-sent update keeps its seq.
        if let Some(u) = &uuid
            && let Some(&(seq, _)) = run.unacked.iter().find(|(_, x)| x == u)
        {
            out.push(ProviderEvent::RunUpdate(convert::run_update(&host, &run.task_id, seq, &status, &run.ports)));
            return out;
        }
        if run.terminal && !state.is_terminal() {
            // We gave the run up (LOST) and it is back: Paceline has replaced it.
            info!(run_id, "mesos: a run given up as lost is alive again; killing it");
            let mut c = call_of(call::Type::Kill);
            c.kill =
                Some(call::Kill { task_id: status.task_id.clone(), agent_id: Some(agent_id(&aid)), kill_policy: None });
            self.queue(c);
        }
        if uuid.is_none() && run.state == Some(state) && run.terminal == state.is_terminal() {
            // A reconciliation answer that says nothing new.
            return out;
        }
        run.seq += 1;
        let seq = run.seq;
        run.state = Some(state);
        run.terminal |= state.is_terminal();
        run.agent_id = aid.clone();
        if let Some(u) = uuid {
            run.unacked.push_back((seq, u));
        }
        let update = convert::run_update(&host, &run.task_id, seq, &status, &run.ports);
        let ended = run.terminal;
        out.push(ProviderEvent::RunUpdate(update));
        if ended {
            self.maybe_accept_inverse(&mut st, &aid);
        }
        out
    }

    /// An update we make up (no uuid: nothing to acknowledge to the master).
    pub(super) fn synth(
        st: &mut St,
        run_id: &str,
        host: &str,
        state: RunState,
        reason: &str,
        message: &str,
    ) -> Option<ProviderEvent> {
        let run = st.runs.get_mut(run_id)?;
        if run.terminal {
            return None;
        }
        run.seq += 1;
        run.state = Some(state);
        run.terminal |= state.is_terminal();
        Some(ProviderEvent::RunUpdate(RunUpdate {
            host: host.to_string(),
            run_id: run_id.to_string(),
            task_id: run.task_id.clone(),
            seq: run.seq,
            state,
            healthy: None,
            exit_code: None,
            signal: None,
            reason: reason.to_string(),
            message: message.to_string(),
            at_ms: unix_ms(),
            ports: run.ports.clone(),
        }))
    }
}

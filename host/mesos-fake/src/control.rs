//! The test-control API of [`FakeMaster`]: agents (add, fail, take away,
//! schedule maintenance), the master's own conditions (not the leader,
//! unavailable, silent, a broken stream), and what tests inspect (calls,
//! tasks, offers, acknowledgements).

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use paceline_proto::mesos::v1 as mesos;
use paceline_proto::mesos::v1::scheduler::{Event, event};

use crate::state::{SimAgent, ev};
use crate::tasks::is_terminal;
use crate::{AgentSpec, CallRecord, FakeMaster};

impl FakeMaster {
    /// Adds an agent; returns its id. It is offered at the next allocation.
    pub fn add_agent(&self, spec: AgentSpec) -> String {
        let mut m = self.lock();
        let id = format!("agent-{}-S{}", spec.hostname, m.agents.len());
        m.agents.insert(
            id.clone(),
            SimAgent { id: id.clone(), spec, alive: true, offer: None, filtered_until: None, taken_until: None },
        );
        id
    }

    /// Adds many agents at once (offered together at the next allocation).
    pub fn add_agents(&self, specs: impl IntoIterator<Item = AgentSpec>) {
        let mut m = self.lock();
        for spec in specs {
            let id = format!("agent-{}-S{}", spec.hostname, m.agents.len());
            m.agents.insert(
                id.clone(),
                SimAgent { id, spec, alive: true, offer: None, filtered_until: None, taken_until: None },
            );
        }
    }

    /// The id of the agent on `hostname`.
    pub fn agent_id(&self, hostname: &str) -> Option<String> {
        self.lock().agents.values().find(|a| a.spec.hostname == hostname).map(|a| a.id.clone())
    }

    /// The agent fails: FAILURE goes out, its offer is rescinded and its
    /// running tasks become TASK_UNREACHABLE (TASK_LOST if not partition-aware).
    pub fn fail_agent(&self, agent_id: &str) {
        let mut m = self.lock();
        let Some(a) = m.agents.get_mut(agent_id) else { return };
        a.alive = false;
        let offer = a.offer.take();
        if let Some(o) = offer {
            m.offers.remove(&o);
            let mut e = ev(event::Type::Rescind);
            e.rescind = Some(event::Rescind { offer_id: mesos::OfferId { value: o } });
            m.send(&e);
        }
        let mut e = ev(event::Type::Failure);
        e.failure = Some(event::Failure {
            agent_id: Some(mesos::AgentId { value: agent_id.into() }),
            executor_id: None,
            status: None,
        });
        m.send(&e);
        let pa = m.partition_aware(self.shared.config.partition_aware_default);
        let state = if pa { mesos::TaskState::TaskUnreachable } else { mesos::TaskState::TaskLost };
        let ids: Vec<String> = m
            .tasks
            .iter()
            .filter(|(_, t)| t.agent_id == agent_id && !is_terminal(t.state))
            .map(|(id, _)| id.clone())
            .collect();
        for id in ids {
            if let Some(t) = m.tasks.get_mut(&id) {
                t.queue.clear();
                t.last_sent = None;
            }
            m.transition(&id, state, "Agent removed", Some(mesos::task_status::Reason::AgentRemoved));
        }
    }

    /// Rescinds every outstanding offer (RESCIND each); the agents are not
    /// offered again for `refuse`.
    pub fn rescind_all(&self, refuse: Duration) {
        let mut m = self.lock();
        let until = Instant::now() + refuse;
        let offers: Vec<(String, String)> = m.offers.drain().map(|(o, (a, _))| (o, a)).collect();
        for (o, a) in offers {
            if let Some(ag) = m.agents.get_mut(&a) {
                ag.offer = None;
                ag.filtered_until = Some(until);
            }
            let mut e = ev(event::Type::Rescind);
            e.rescind = Some(event::Rescind { offer_id: mesos::OfferId { value: o } });
            m.send(&e);
        }
    }

    /// Another framework takes an agent's resources for `hold`: its
    /// outstanding offer is rescinded (RESCIND) and it is not offered to us
    /// again until then, REVIVE or not.
    pub fn take_agent(&self, agent_id: &str, hold: Duration) {
        let mut m = self.lock();
        let until = Instant::now() + hold;
        let offer = m.agents.get_mut(agent_id).and_then(|a| {
            a.taken_until = Some(until);
            a.offer.take()
        });
        if let Some(o) = offer {
            m.offers.remove(&o);
            let mut e = ev(event::Type::Rescind);
            e.rescind = Some(event::Rescind { offer_id: mesos::OfferId { value: o } });
            m.send(&e);
        }
    }

    /// Schedules maintenance of an agent: sends an inverse offer; returns its id.
    pub fn schedule_maintenance(&self, agent_id: &str) -> String {
        let mut m = self.lock();
        let id = m.id("inverse-offer");
        m.inverse_offers.insert(id.clone(), agent_id.into());
        let fid = m.framework.as_ref().map(|f| f.id.clone()).unwrap_or_default();
        let start = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as i64) + 3_600_000_000_000;
        let mut e = ev(event::Type::InverseOffers);
        e.inverse_offers = Some(event::InverseOffers {
            inverse_offers: vec![mesos::InverseOffer {
                id: mesos::OfferId { value: id.clone() },
                framework_id: mesos::FrameworkId { value: fid },
                agent_id: Some(mesos::AgentId { value: agent_id.into() }),
                unavailability: mesos::Unavailability { start: mesos::TimeInfo { nanoseconds: start }, duration: None },
                resources: Vec::new(),
            }],
        });
        m.send(&e);
        id
    }

    /// Answers to inverse offers: (id, accepted).
    pub fn inverse_offer_responses(&self) -> Vec<(String, bool)> {
        self.lock().inverse_responses.clone()
    }

    /// Not the leader: every request is redirected (307) to `leader`; `None`: leader again.
    pub fn redirect_to(&self, leader: Option<String>) {
        let mut m = self.lock();
        m.leader = leader;
        if m.leader.is_some()
            && let Some(f) = m.framework.as_mut()
        {
            f.tx = None;
        }
    }

    /// How many requests were redirected (307) while not the leader.
    pub fn redirects(&self) -> u32 {
        self.lock().redirects
    }

    /// While set, every request is answered 503.
    pub fn set_unavailable(&self, on: bool) {
        self.lock().unavailable = on;
    }

    /// Stops (or resumes) heartbeats, to test a framework's watchdog.
    pub fn pause_heartbeats(&self, on: bool) {
        self.lock().heartbeats_paused = on;
    }

    /// Writes raw bytes on the subscription stream (bad input), then closes it if `close`.
    pub fn inject_raw(&self, bytes: &[u8], close: bool) {
        let mut m = self.lock();
        if let Some(f) = m.framework.as_mut()
            && let Some(tx) = &f.tx
        {
            let _ = tx.send(Bytes::copy_from_slice(bytes));
            if close {
                f.tx = None;
            }
        }
    }

    /// Sends an event as is (encoded as the framework asked).
    pub fn inject_event(&self, e: &Event) {
        self.lock().send(e);
    }

    /// Closes the subscription stream (as a network failure would).
    pub fn close_stream(&self) {
        if let Some(f) = self.lock().framework.as_mut() {
            f.tx = None;
        }
    }

    /// The subscribed framework's id.
    pub fn framework_id(&self) -> Option<String> {
        self.lock().framework.as_ref().map(|f| f.id.clone())
    }

    /// The current stream id, while a stream is open.
    pub fn stream_id(&self) -> Option<String> {
        self.lock().framework.as_ref().filter(|f| f.tx.is_some()).map(|f| f.stream_id.clone())
    }

    /// SUBSCRIBE calls answered with a stream so far.
    pub fn subscriptions(&self) -> u32 {
        self.lock().subscriptions
    }

    /// Every call handled, in order.
    pub fn calls(&self) -> Vec<CallRecord> {
        self.lock().calls.clone()
    }

    /// Calls of one type handled so far.
    pub fn count_calls(&self, kind: &str) -> usize {
        self.lock().calls.iter().filter(|c| c.kind == kind).count()
    }

    /// How many times a task id was launched.
    pub fn launches(&self, task_id: &str) -> u32 {
        self.lock().tasks.get(task_id).map_or(0, |t| t.launches)
    }

    /// A task's state.
    pub fn task_state(&self, task_id: &str) -> Option<mesos::TaskState> {
        self.lock().tasks.get(task_id).map(|t| t.state)
    }

    /// A task's script, as the fake read it.
    pub fn task_script(&self, task_id: &str) -> Option<String> {
        self.lock().tasks.get(task_id).map(|t| t.script.clone())
    }

    /// Non-terminal tasks.
    pub fn live_tasks(&self) -> Vec<String> {
        let mut v: Vec<String> =
            self.lock().tasks.iter().filter(|(_, t)| !is_terminal(t.state)).map(|(id, _)| id.clone()).collect();
        v.sort();
        v
    }

    /// Status updates sent or queued and not yet acknowledged.
    pub fn unacked_updates(&self) -> usize {
        self.lock().tasks.values().map(|t| t.queue.len()).sum()
    }

    /// Offers outstanding now.
    pub fn outstanding_offers(&self) -> usize {
        self.lock().offers.len()
    }

    /// Whether the framework suppressed offers.
    pub fn suppressed(&self) -> bool {
        self.lock().framework.as_ref().is_some_and(|f| f.suppressed)
    }
}

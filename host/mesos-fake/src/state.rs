//! The simulated master's state: the framework and its stream, agents,
//! outstanding offers, tasks, and the record of calls; [`Shared`] is what
//! the HTTP handlers, the clock and the test-control API share. What moves
//! tasks along lives in `tasks`, what is offered in `offers`.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use paceline_proto::mesos::v1 as mesos;
use paceline_proto::mesos::v1::scheduler::{Event, event};
use tokio::sync::mpsc;

use crate::tasks::Plan;
use crate::{AgentSpec, CallRecord, FakeConfig, encode_event, recordio};

#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct Amounts {
    pub(crate) cpus: f64,
    pub(crate) mem: f64,
    pub(crate) disk: f64,
    pub(crate) gpus: f64,
}

#[derive(Debug)]
pub(crate) struct SimAgent {
    pub(crate) id: String,
    pub(crate) spec: AgentSpec,
    pub(crate) alive: bool,
    pub(crate) offer: Option<String>,
    pub(crate) filtered_until: Option<Instant>,
    /// Its resources are held by another framework until then: not offered
    /// to us, whatever our REVIVE says.
    pub(crate) taken_until: Option<Instant>,
}

#[derive(Debug)]
pub(crate) struct SimTask {
    pub(crate) agent_id: String,
    pub(crate) used: Amounts,
    pub(crate) ports: Vec<u64>,
    pub(crate) state: mesos::TaskState,
    pub(crate) plan: Plan,
    pub(crate) grace: Duration,
    pub(crate) kill_at: Option<Instant>,
    /// Status updates not yet acknowledged; the head is the one in flight.
    pub(crate) queue: VecDeque<mesos::TaskStatus>,
    pub(crate) last_sent: Option<Instant>,
    pub(crate) launches: u32,
    pub(crate) script: String,
}

#[derive(Debug)]
pub(crate) struct Framework {
    pub(crate) id: String,
    pub(crate) info: mesos::FrameworkInfo,
    pub(crate) stream_id: String,
    pub(crate) tx: Option<mpsc::UnboundedSender<Bytes>>,
    pub(crate) json: bool,
    pub(crate) suppressed: bool,
    pub(crate) last_heartbeat: Instant,
}

#[derive(Debug, Default)]
pub(crate) struct Master {
    pub(crate) leader: Option<String>,
    /// Requests answered 307 while not the leader.
    pub(crate) redirects: u32,
    pub(crate) unavailable: bool,
    pub(crate) heartbeats_paused: bool,
    pub(crate) framework: Option<Framework>,
    pub(crate) agents: BTreeMap<String, SimAgent>,
    pub(crate) offers: HashMap<String, (String, Vec<mesos::Resource>)>,
    pub(crate) tasks: HashMap<String, SimTask>,
    pub(crate) inverse_offers: HashMap<String, String>,
    pub(crate) inverse_responses: Vec<(String, bool)>,
    pub(crate) calls: Vec<CallRecord>,
    pub(crate) subscriptions: u32,
    pub(crate) next_id: u64,
    pub(crate) last_allocation: Option<Instant>,
}

#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) config: FakeConfig,
    pub(crate) addr: SocketAddr,
    pub(crate) m: Mutex<Master>,
}

impl Shared {
    pub(crate) fn lock(&self) -> MutexGuard<'_, Master> {
        self.m.lock().unwrap_or_else(|e| e.into_inner())
    }
}

pub(crate) fn now_secs() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())
}

pub(crate) fn ev(kind: event::Type) -> Event {
    Event { r#type: Some(kind as i32), ..Event::default() }
}

impl Master {
    pub(crate) fn id(&mut self, prefix: &str) -> String {
        self.next_id += 1;
        format!("{prefix}-{}", self.next_id)
    }

    pub(crate) fn role(&self) -> String {
        self.framework.as_ref().and_then(|f| f.info.roles.first().cloned()).unwrap_or_else(|| "*".into())
    }

    pub(crate) fn partition_aware(&self, default: bool) -> bool {
        self.framework.as_ref().map_or(default, |f| {
            f.info
                .capabilities
                .iter()
                .any(|c| c.r#type == Some(mesos::framework_info::capability::Type::PartitionAware as i32))
        })
    }

    pub(crate) fn send(&mut self, e: &Event) {
        let Some(f) = self.framework.as_mut() else { return };
        let Some(tx) = &f.tx else { return };
        if tx.send(recordio(&encode_event(e, f.json))).is_err() {
            f.tx = None;
        }
    }

    pub(crate) fn connected(&self) -> bool {
        self.framework.as_ref().is_some_and(|f| f.tx.is_some())
    }
}

//! # paceline-mesos-fake
//!
//! A fake Apache Mesos master speaking the v1 scheduler HTTP API
//! (`POST /api/v1/scheduler`), in process, with simulated agents, for
//! testing Paceline's `mesos` host provider without a real master.
//!
//! What it enforces, as a real master does:
//! - **HTTP**: `405` for a method other than POST, `415` for a body that is
//!   neither `application/json` nor `application/x-protobuf`, `406` for an
//!   `Accept` it cannot produce, `400` for a body that does not decode or a
//!   call that is malformed, `503` while "unavailable", `307` with a
//!   `Location` of `//host:port/api/v1/scheduler` while it is not the leader.
//! - **Streams**: SUBSCRIBE answers `200` with a RecordIO stream and a
//!   `Mesos-Stream-Id`; a SUBSCRIBE carrying that header is a `400`. Every
//!   other call needs the header (`400` when missing or not the current
//!   stream's) and a subscribed framework (`403` otherwise); accepted calls
//!   answer `202`. The stream starts with SUBSCRIBED and an immediate
//!   HEARTBEAT, then one every `heartbeat_interval`.
//! - **Failover**: a SUBSCRIBE with the id of a framework whose stream is
//!   open sends ERROR `Framework failed over` on the old stream and closes
//!   it; the new stream gets a new id; outstanding offers are rescinded and
//!   offered again on the new stream.
//! - **Offers**: at most one outstanding offer per agent, holding all its
//!   unused resources; DECLINE and ACCEPT set a refuse filter
//!   (`refuse_seconds`, default 5 s) on the agent; REVIVE clears filters
//!   and SUPPRESS; SUPPRESS stops offers.
//! - **ACCEPT**: the offers must exist, be ours and be of one agent (else
//!   every task is TASK_DROPPED, REASON_INVALID_OFFERS, and the valid offers
//!   go back); each task's resources must be contained in what is left of
//!   the offers and its id must be new (else TASK_ERROR, REASON_TASK_INVALID).
//! - **Tasks**: each simulated agent runs its tasks from a script in the
//!   command (below) and keeps a queue of status updates per task: the head
//!   is sent, and re-sent every `status_retry` until ACKNOWLEDGEd by uuid;
//!   only then is the next one sent. KILL → TASK_KILLING, then TASK_KILLED
//!   after the grace period (the call's kill policy, else the task's).
//! - **Reconciliation**: an empty RECONCILE answers every non-terminal task;
//!   an explicit one answers each task named (TASK_UNKNOWN when unknown,
//!   TASK_UNREACHABLE when its agent failed), without uuid, with
//!   REASON_RECONCILIATION.
//! - **Agents**: [`FakeMaster::fail_agent`] sends FAILURE and moves its
//!   tasks to TASK_UNREACHABLE (the framework is partition-aware; TASK_LOST
//!   otherwise); [`FakeMaster::schedule_maintenance`] sends INVERSE_OFFERS.
//!
//! # Task scripts
//! The script is the command line: `value` for a shell command, else the
//! `arguments` joined by spaces (or `value` when there are none). Steps are
//! separated by `;` or `&&`:
//!
//! | step | effect |
//! |---|---|
//! | `sleep S` | waits S seconds (decimals allowed) |
//! | `exit N` | ends with status N (0: TASK_FINISHED, else TASK_FAILED) |
//! | `true` / `false` | ends with 0 / 1 |
//! | anything else | runs until killed |
//!
//! A script whose steps all pass ends with status 0. Updates: TASK_STARTING,
//! TASK_RUNNING, then the end (`Command exited with status N`).
//!
//! One framework at a time (a SUBSCRIBE without an id while one is
//! registered replaces it). Not simulated: roles other than the framework's
//! first, reservations, operations other than LAUNCH, executors, quota,
//! and agent re-registration with running tasks.
//!
//! # Layout
//! - `lib.rs`: [`FakeMaster`] (start, address, stop on drop), its settings
//!   ([`FakeConfig`], [`AgentSpec`]), [`CallRecord`], and the RecordIO
//!   framing ([`recordio`], [`encode_event`]).
//! - `http`: the one route: method, media types, leadership, availability.
//! - `calls`: SUBSCRIBE and the other scheduler calls.
//! - `offers`: allocation of offers, and ACCEPT carving tasks from them.
//! - `tasks`: task scripts, status updates until acknowledged, progress.
//! - `state`: the master's state, shared by the handlers, the clock and
//!   the test-control API.
//! - `control`: the test-control API ([`FakeMaster::fail_agent`], …).

mod calls;
mod control;
mod http;
mod offers;
mod state;
mod tasks;

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::Bytes;
use paceline_proto::mesos::v1::scheduler::{Call, Event, event};
use prost::Message;

use http::scheduler;
use state::{Master, Shared, ev};

/// Path of the scheduler API.
pub const API_PATH: &str = "/api/v1/scheduler";

/// Settings of the fake master.
#[derive(Clone, Debug)]
pub struct FakeConfig {
    /// Told to the framework in SUBSCRIBED; a HEARTBEAT goes out this often.
    pub heartbeat_interval: Duration,
    /// An unacknowledged status update is sent again after this long.
    pub status_retry: Duration,
    /// How often free resources are offered.
    pub allocation_interval: Duration,
    /// Whether the framework gets TASK_UNREACHABLE (partition-aware) or TASK_LOST.
    pub partition_aware_default: bool,
}

impl Default for FakeConfig {
    fn default() -> Self {
        FakeConfig {
            heartbeat_interval: Duration::from_secs(1),
            status_retry: Duration::from_millis(500),
            allocation_interval: Duration::from_millis(50),
            partition_aware_default: true,
        }
    }
}

/// A simulated agent.
#[derive(Clone, Debug)]
pub struct AgentSpec {
    /// Its hostname.
    pub hostname: String,
    /// Cores.
    pub cpus: f64,
    /// Memory in MB.
    pub mem: f64,
    /// Disk in MB.
    pub disk: f64,
    /// GPUs.
    pub gpus: f64,
    /// One range of ports, inclusive.
    pub ports: (u64, u64),
    /// Text attributes.
    pub attributes: Vec<(String, String)>,
}

impl AgentSpec {
    /// An agent of `cpus` cores and `mem` MB, 10 GB disk, ports 31000–31099.
    pub fn new(hostname: &str, cpus: f64, mem: f64) -> Self {
        AgentSpec {
            hostname: hostname.into(),
            cpus,
            mem,
            disk: 10_000.0,
            gpus: 0.0,
            ports: (31_000, 31_099),
            attributes: Vec::new(),
        }
    }

    /// Adds a text attribute.
    pub fn attribute(mut self, k: &str, v: &str) -> Self {
        self.attributes.push((k.into(), v.into()));
        self
    }
}

/// A call the master handled, for tests to inspect.
#[derive(Clone, Debug, PartialEq)]
pub struct CallRecord {
    /// Its type (`ACCEPT`, …).
    pub kind: String,
    /// The HTTP status answered.
    pub status: u16,
    /// The decoded call.
    pub call: Call,
    /// The body as received.
    pub body: Bytes,
    /// Its `Content-Type`.
    pub content_type: String,
}

/// A running fake master. Dropping it stops the server.
#[derive(Debug)]
pub struct FakeMaster {
    shared: Arc<Shared>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for FakeMaster {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
        if let Some(f) = self.shared.lock().framework.as_mut() {
            f.tx = None;
        }
    }
}

/// Frames one record.
pub fn recordio(record: &[u8]) -> Bytes {
    let mut out = format!("{}\n", record.len()).into_bytes();
    out.extend_from_slice(record);
    Bytes::from(out)
}

/// Encodes an event as the framework asked.
pub fn encode_event(ev: &Event, json: bool) -> Vec<u8> {
    if json { serde_json::to_vec(ev).unwrap_or_default() } else { ev.encode_to_vec() }
}

impl FakeMaster {
    /// Starts a master on a free loopback port.
    pub async fn start(config: FakeConfig) -> std::io::Result<FakeMaster> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared { config, addr, m: Mutex::new(Master::default()) });
        let app = axum::Router::new().fallback(scheduler).with_state(shared.clone());
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        let clock = {
            let shared = shared.clone();
            tokio::spawn(async move {
                let mut every = tokio::time::interval(Duration::from_millis(10));
                every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    every.tick().await;
                    let now = Instant::now();
                    let mut m = shared.lock();
                    if m.leader.is_some() {
                        continue;
                    }
                    m.progress(now);
                    m.pump(now, shared.config.status_retry);
                    if m.last_allocation.is_none_or(|t| now.duration_since(t) >= shared.config.allocation_interval) {
                        m.last_allocation = Some(now);
                        m.allocate(now);
                    }
                    let beat = shared.config.heartbeat_interval;
                    let due = !m.heartbeats_paused
                        && m.framework
                            .as_ref()
                            .is_some_and(|f| f.tx.is_some() && now.duration_since(f.last_heartbeat) >= beat);
                    if due {
                        if let Some(f) = m.framework.as_mut() {
                            f.last_heartbeat = now;
                        }
                        m.send(&ev(event::Type::Heartbeat));
                    }
                }
            })
        };
        Ok(FakeMaster { shared, tasks: vec![server, clock] })
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.shared.addr)
    }

    fn lock(&self) -> MutexGuard<'_, Master> {
        self.shared.lock()
    }
}

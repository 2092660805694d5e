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

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures::StreamExt;
use paceline_proto::mesos::v1 as mesos;
use paceline_proto::mesos::v1::scheduler::{Call, Event, call, event};
use prost::Message;
use tokio::sync::mpsc;
use tracing::{debug, info};

/// Path of the scheduler API.
pub const API_PATH: &str = "/api/v1/scheduler";
const JSON: &str = "application/json";
const PROTOBUF: &str = "application/x-protobuf";

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

#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Amounts {
    cpus: f64,
    mem: f64,
    disk: f64,
    gpus: f64,
}

#[derive(Debug)]
struct SimAgent {
    id: String,
    spec: AgentSpec,
    alive: bool,
    offer: Option<String>,
    filtered_until: Option<Instant>,
    /// Its resources are held by another framework until then: not offered
    /// to us, whatever our REVIVE says.
    taken_until: Option<Instant>,
}

#[derive(Debug)]
enum Plan {
    /// Ends at this instant with this status.
    Exit(Instant, i32),
    /// Runs until killed.
    Forever,
}

#[derive(Debug)]
struct SimTask {
    agent_id: String,
    used: Amounts,
    ports: Vec<u64>,
    state: mesos::TaskState,
    plan: Plan,
    grace: Duration,
    kill_at: Option<Instant>,
    /// Status updates not yet acknowledged; the head is the one in flight.
    queue: VecDeque<mesos::TaskStatus>,
    last_sent: Option<Instant>,
    launches: u32,
    script: String,
}

#[derive(Debug)]
struct Framework {
    id: String,
    info: mesos::FrameworkInfo,
    stream_id: String,
    tx: Option<mpsc::UnboundedSender<Bytes>>,
    json: bool,
    suppressed: bool,
    last_heartbeat: Instant,
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

#[derive(Debug, Default)]
struct Master {
    leader: Option<String>,
    /// Requests answered 307 while not the leader.
    redirects: u32,
    unavailable: bool,
    heartbeats_paused: bool,
    framework: Option<Framework>,
    agents: BTreeMap<String, SimAgent>,
    offers: HashMap<String, (String, Vec<mesos::Resource>)>,
    tasks: HashMap<String, SimTask>,
    inverse_offers: HashMap<String, String>,
    inverse_responses: Vec<(String, bool)>,
    calls: Vec<CallRecord>,
    subscriptions: u32,
    next_id: u64,
    last_allocation: Option<Instant>,
}

#[derive(Debug)]
struct Shared {
    config: FakeConfig,
    addr: SocketAddr,
    m: Mutex<Master>,
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

fn now_secs() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())
}

fn scalar(name: &str, v: f64, role: &str) -> mesos::Resource {
    #[allow(deprecated)]
    mesos::Resource {
        name: name.into(),
        r#type: mesos::value::Type::Scalar as i32,
        scalar: Some(mesos::value::Scalar { value: v }),
        allocation_info: Some(mesos::resource::AllocationInfo { role: Some(role.into()) }),
        ..Default::default()
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

fn ev(kind: event::Type) -> Event {
    Event { r#type: Some(kind as i32), ..Event::default() }
}

/// Parses a task's script into when it ends and how.
fn plan(script: &str, now: Instant) -> Plan {
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

fn script_of(info: &mesos::TaskInfo) -> String {
    let Some(c) = &info.command else { return String::new() };
    if c.shell.unwrap_or(true) || c.arguments.is_empty() {
        c.value.clone().unwrap_or_default()
    } else {
        c.arguments.join(" ")
    }
}

fn is_terminal(s: mesos::TaskState) -> bool {
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
    fn id(&mut self, prefix: &str) -> String {
        self.next_id += 1;
        format!("{prefix}-{}", self.next_id)
    }

    fn role(&self) -> String {
        self.framework.as_ref().and_then(|f| f.info.roles.first().cloned()).unwrap_or_else(|| "*".into())
    }

    fn partition_aware(&self, default: bool) -> bool {
        self.framework.as_ref().map_or(default, |f| {
            f.info
                .capabilities
                .iter()
                .any(|c| c.r#type == Some(mesos::framework_info::capability::Type::PartitionAware as i32))
        })
    }

    fn send(&mut self, e: &Event) {
        let Some(f) = self.framework.as_mut() else { return };
        let Some(tx) = &f.tx else { return };
        if tx.send(recordio(&encode_event(e, f.json))).is_err() {
            f.tx = None;
        }
    }

    fn connected(&self) -> bool {
        self.framework.as_ref().is_some_and(|f| f.tx.is_some())
    }

    fn used_on(&self, agent: &str) -> (Amounts, Vec<u64>) {
        let mut a = Amounts::default();
        let mut ports = Vec::new();
        for t in self.tasks.values().filter(|t| t.agent_id == agent && !is_terminal(t.state)) {
            a.cpus += t.used.cpus;
            a.mem += t.used.mem;
            a.disk += t.used.disk;
            a.gpus += t.used.gpus;
            ports.extend(t.ports.iter().copied());
        }
        (a, ports)
    }

    fn free_resources(&self, agent: &SimAgent, role: &str) -> Vec<mesos::Resource> {
        let (used, ports) = self.used_on(&agent.id);
        let mut out = Vec::new();
        for (name, total, used) in [
            ("cpus", agent.spec.cpus, used.cpus),
            ("mem", agent.spec.mem, used.mem),
            ("disk", agent.spec.disk, used.disk),
            ("gpus", agent.spec.gpus, used.gpus),
        ] {
            let left = ((total - used) * 1000.0).round() / 1000.0;
            if left > 0.0005 {
                out.push(scalar(name, left, role));
            }
        }
        let mut ranges = Vec::new();
        let mut start: Option<u64> = None;
        for p in agent.spec.ports.0..=agent.spec.ports.1 {
            let free = !ports.contains(&p);
            match (free, start) {
                (true, None) => start = Some(p),
                (false, Some(s)) => {
                    ranges.push(mesos::value::Range { begin: s, end: p - 1 });
                    start = None;
                }
                _ => {}
            }
        }
        if let Some(s) = start {
            ranges.push(mesos::value::Range { begin: s, end: agent.spec.ports.1 });
        }
        if !ranges.is_empty() {
            let mut r = scalar("ports", 0.0, role);
            r.r#type = mesos::value::Type::Ranges as i32;
            r.scalar = None;
            r.ranges = Some(mesos::value::Ranges { range: ranges });
            out.push(r);
        }
        out
    }

    fn allocate(&mut self, now: Instant) {
        let Some(f) = &self.framework else { return };
        if f.tx.is_none() || f.suppressed {
            return;
        }
        let fid = f.id.clone();
        let role = self.role();
        let ids: Vec<String> = self
            .agents
            .values()
            .filter(|a| {
                a.alive
                    && a.offer.is_none()
                    && a.filtered_until.is_none_or(|t| t <= now)
                    && a.taken_until.is_none_or(|t| t <= now)
            })
            .map(|a| a.id.clone())
            .collect();
        let mut offers = Vec::new();
        for aid in ids {
            let Some(agent) = self.agents.get(&aid) else { continue };
            let resources = self.free_resources(agent, &role);
            if !resources.iter().any(|r| r.name == "cpus" || r.name == "mem") {
                continue;
            }
            let attributes = agent
                .spec
                .attributes
                .iter()
                .map(|(k, v)| mesos::Attribute {
                    name: k.clone(),
                    r#type: mesos::value::Type::Text as i32,
                    text: Some(mesos::value::Text { value: v.clone() }),
                    ..Default::default()
                })
                .collect();
            let hostname = agent.spec.hostname.clone();
            let oid = self.id("offer");
            offers.push(mesos::Offer {
                id: mesos::OfferId { value: oid.clone() },
                framework_id: mesos::FrameworkId { value: fid.clone() },
                agent_id: mesos::AgentId { value: aid.clone() },
                hostname,
                resources: resources.clone(),
                attributes,
                allocation_info: Some(mesos::resource::AllocationInfo { role: Some(role.clone()) }),
                ..Default::default()
            });
            self.offers.insert(oid.clone(), (aid.clone(), resources));
            if let Some(a) = self.agents.get_mut(&aid) {
                a.offer = Some(oid);
                a.filtered_until = None;
            }
        }
        if !offers.is_empty() {
            let mut e = ev(event::Type::Offers);
            e.offers = Some(event::Offers { offers });
            self.send(&e);
        }
    }

    fn status(
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
    fn transition(
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
    fn pump(&mut self, now: Instant, retry: Duration) {
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

    fn progress(&mut self, now: Instant) {
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

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Master> {
        self.m.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn text(status: StatusCode, body: impl Into<String>) -> Response {
    (status, body.into()).into_response()
}

fn media(h: Option<&header::HeaderValue>) -> Option<&str> {
    h.and_then(|v| v.to_str().ok()).map(|s| s.split(';').next().unwrap_or("").trim())
}

async fn scheduler(State(shared): State<Arc<Shared>>, method: Method, headers: HeaderMap, body: Bytes) -> Response {
    if method != Method::POST {
        return text(StatusCode::METHOD_NOT_ALLOWED, "Expecting 'POST'");
    }
    {
        let mut m = shared.lock();
        if m.unavailable {
            return text(StatusCode::SERVICE_UNAVAILABLE, "Master is not available");
        }
        if m.leader.is_some() {
            m.redirects += 1;
        }
        if let Some(leader) = &m.leader {
            let host = leader.trim_start_matches("http://").trim_start_matches("https://").trim_end_matches('/');
            return Response::builder()
                .status(StatusCode::TEMPORARY_REDIRECT)
                .header(header::LOCATION, format!("//{host}{API_PATH}"))
                .body(Body::empty())
                .unwrap_or_else(|_| text(StatusCode::INTERNAL_SERVER_ERROR, "redirect"));
        }
    }
    let json = match media(headers.get(header::CONTENT_TYPE)) {
        Some(JSON) => true,
        Some(PROTOBUF) => false,
        other => {
            return text(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                format!("Expecting 'Content-Type' of {JSON} or {PROTOBUF}, got {other:?}"),
            );
        }
    };
    let decoded: Result<Call, String> = if json {
        serde_json::from_slice(&body).map_err(|e| e.to_string())
    } else {
        Call::decode(&body[..]).map_err(|e| e.to_string())
    };
    let c = match decoded {
        Ok(c) => c,
        Err(e) => return text(StatusCode::BAD_REQUEST, format!("Failed to parse body into Call protobuf: {e}")),
    };
    let kind = c.r#type.and_then(|t| call::Type::try_from(t).ok()).unwrap_or(call::Type::Unknown);
    let stream_header = headers.get("Mesos-Stream-Id").and_then(|v| v.to_str().ok()).map(str::to_string);
    let resp = if kind == call::Type::Subscribe {
        let accept_json = match media(headers.get(header::ACCEPT)) {
            None | Some("*/*") => json,
            Some(JSON) => true,
            Some(PROTOBUF) => false,
            Some(other) => return text(StatusCode::NOT_ACCEPTABLE, format!("Unsupported 'Accept' {other}")),
        };
        if stream_header.is_some() {
            text(StatusCode::BAD_REQUEST, "Subscribe calls should not include the 'Mesos-Stream-Id' header")
        } else {
            subscribe(&shared, &c, accept_json)
        }
    } else {
        other_call(&shared, &c, kind, stream_header.as_deref())
    };
    shared.lock().calls.push(CallRecord {
        kind: kind.as_str_name().to_string(),
        status: resp.status().as_u16(),
        call: c,
        body,
        content_type: if json { JSON } else { PROTOBUF }.to_string(),
    });
    resp
}

fn subscribe(shared: &Shared, c: &Call, json: bool) -> Response {
    let Some(sub) = &c.subscribe else {
        return text(StatusCode::BAD_REQUEST, "Expecting 'subscribe' to be present");
    };
    let info = sub.framework_info.clone();
    if let (Some(a), Some(b)) = (&c.framework_id, &info.id)
        && a.value != b.value
    {
        return text(StatusCode::BAD_REQUEST, "'framework_id' differs from 'subscribe.framework_info.id'");
    }
    if info.name.is_empty() {
        return text(StatusCode::BAD_REQUEST, "'framework_info.name' must be set");
    }
    let (tx, rx) = mpsc::unbounded_channel::<Bytes>();
    let mut m = shared.lock();
    let wanted = info.id.as_ref().map(|i| i.value.clone());
    let fid = match (&m.framework, wanted) {
        (Some(f), Some(w)) if f.id == w => {
            // Failover: the old stream hears it and closes.
            if f.tx.is_some() {
                let mut e = ev(event::Type::Error);
                e.error = Some(event::Error { message: "Framework failed over".into() });
                m.send(&e);
            }
            w
        }
        (_, Some(w)) => w,
        (_, None) => m.id("framework"),
    };
    // Offers of the old stream are rescinded (offered again below).
    let agents: Vec<String> = m.agents.keys().cloned().collect();
    for aid in agents {
        if let Some(a) = m.agents.get_mut(&aid)
            && let Some(o) = a.offer.take()
        {
            m.offers.remove(&o);
        }
    }
    let stream_id = format!("stream-{}-{}", m.subscriptions + 1, fastrand::u32(..));
    let heartbeat = shared.config.heartbeat_interval;
    m.framework = Some(Framework {
        id: fid.clone(),
        info: mesos::FrameworkInfo { id: Some(mesos::FrameworkId { value: fid.clone() }), ..info },
        stream_id: stream_id.clone(),
        tx: Some(tx),
        json,
        suppressed: sub.suppressed_roles.iter().any(|_| true),
        last_heartbeat: Instant::now(),
    });
    m.subscriptions += 1;
    // Updates in flight go again on the new stream.
    for t in m.tasks.values_mut() {
        t.last_sent = None;
    }
    let mut e = ev(event::Type::Subscribed);
    e.subscribed = Some(event::Subscribed {
        framework_id: mesos::FrameworkId { value: fid.clone() },
        heartbeat_interval_seconds: Some(heartbeat.as_secs_f64()),
        master_info: Some(mesos::MasterInfo {
            id: "fake-master".into(),
            ip: 0x0100_007f,
            port: u32::from(shared.addr.port()),
            hostname: Some("127.0.0.1".into()),
            version: Some("1.11.0".into()),
            ..Default::default()
        }),
    });
    m.send(&e);
    m.send(&ev(event::Type::Heartbeat));
    info!(framework_id = fid, stream_id, "fake master: framework subscribed");
    let content = if json { JSON } else { PROTOBUF };
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, content)
        .header("Mesos-Stream-Id", stream_id)
        .body(Body::from_stream(tokio_stream::wrappers::UnboundedReceiverStream::new(rx).map(Ok::<_, Infallible>)))
        .unwrap_or_else(|_| text(StatusCode::INTERNAL_SERVER_ERROR, "stream"))
}

fn other_call(shared: &Shared, c: &Call, kind: call::Type, stream: Option<&str>) -> Response {
    let mut m = shared.lock();
    let Some(fid) = c.framework_id.as_ref().map(|f| f.value.clone()) else {
        return text(StatusCode::BAD_REQUEST, "Expecting 'framework_id' to be present");
    };
    let Some(f) = &m.framework else {
        return text(StatusCode::FORBIDDEN, "Framework is not subscribed");
    };
    if f.id != fid {
        return text(StatusCode::BAD_REQUEST, "Framework cannot be found");
    }
    if f.tx.is_none() {
        return text(StatusCode::FORBIDDEN, "Framework is not subscribed");
    }
    match stream {
        None => {
            return text(
                StatusCode::BAD_REQUEST,
                "All non-subscribe calls should include the 'Mesos-Stream-Id' header",
            );
        }
        Some(s) if s != f.stream_id => {
            return text(
                StatusCode::BAD_REQUEST,
                format!(
                    "The stream ID '{s}' included in this request didn't match the stream ID currently associated with framework ID {fid}"
                ),
            );
        }
        Some(_) => {}
    }
    let now = Instant::now();
    let refuse = |fl: &Option<mesos::Filters>| {
        Duration::from_secs_f64(fl.as_ref().and_then(|f| f.refuse_seconds).unwrap_or(5.0).clamp(0.0, 1e9))
    };
    match kind {
        call::Type::Accept => {
            let Some(a) = &c.accept else { return text(StatusCode::BAD_REQUEST, "Expecting 'accept' to be present") };
            accept(&mut m, a, now, refuse(&a.filters), shared.config.partition_aware_default);
        }
        call::Type::Decline => {
            let Some(d) = &c.decline else { return text(StatusCode::BAD_REQUEST, "Expecting 'decline' to be present") };
            let until = now + refuse(&d.filters);
            for o in &d.offer_ids {
                if let Some((aid, _)) = m.offers.remove(&o.value)
                    && let Some(a) = m.agents.get_mut(&aid)
                {
                    a.offer = None;
                    a.filtered_until = Some(until);
                }
            }
        }
        call::Type::Revive => {
            for a in m.agents.values_mut() {
                a.filtered_until = None;
            }
            if let Some(f) = m.framework.as_mut() {
                f.suppressed = false;
            }
        }
        call::Type::Suppress => {
            if let Some(f) = m.framework.as_mut() {
                f.suppressed = true;
            }
        }
        call::Type::Kill => {
            let Some(k) = &c.kill else { return text(StatusCode::BAD_REQUEST, "Expecting 'kill' to be present") };
            let id = k.task_id.value.clone();
            match m.tasks.get_mut(&id) {
                Some(t) if !is_terminal(t.state) => {
                    let grace = k
                        .kill_policy
                        .as_ref()
                        .and_then(|p| p.grace_period.as_ref())
                        .map_or(t.grace, |g| Duration::from_nanos(g.nanoseconds.max(0) as u64));
                    if t.kill_at.is_none() {
                        t.kill_at = Some(now + grace);
                        m.transition(&id, mesos::TaskState::TaskKilling, "", None);
                    }
                }
                Some(_) => {}
                None => {
                    let pa = m.partition_aware(shared.config.partition_aware_default);
                    let state = if pa { mesos::TaskState::TaskUnknown } else { mesos::TaskState::TaskLost };
                    let st = m.status(
                        &id,
                        state,
                        "Attempted to kill an unknown task",
                        Some(mesos::task_status::Reason::Reconciliation),
                        false,
                    );
                    let mut e = ev(event::Type::Update);
                    e.update = Some(event::Update { status: st });
                    m.send(&e);
                }
            }
        }
        call::Type::Acknowledge => {
            let Some(a) = &c.acknowledge else {
                return text(StatusCode::BAD_REQUEST, "Expecting 'acknowledge' to be present");
            };
            let mut next = None;
            if let Some(t) = m.tasks.get_mut(&a.task_id.value)
                && t.queue.front().and_then(|h| h.uuid.as_ref()) == Some(&a.uuid)
            {
                t.queue.pop_front();
                t.last_sent = None;
                next = t.queue.front().map(|_| ());
            }
            if next.is_some() {
                m.pump(now, shared.config.status_retry);
            }
        }
        call::Type::Reconcile => {
            let Some(r) = &c.reconcile else {
                return text(StatusCode::BAD_REQUEST, "Expecting 'reconcile' to be present");
            };
            reconcile(&mut m, r, shared.config.partition_aware_default);
        }
        call::Type::AcceptInverseOffers | call::Type::DeclineInverseOffers => {
            let (ids, accepted) = match (&c.accept_inverse_offers, &c.decline_inverse_offers) {
                (Some(a), _) if kind == call::Type::AcceptInverseOffers => (a.inverse_offer_ids.clone(), true),
                (_, Some(d)) => (d.inverse_offer_ids.clone(), false),
                _ => return text(StatusCode::BAD_REQUEST, "Expecting the inverse offer ids"),
            };
            for id in ids {
                if m.inverse_offers.remove(&id.value).is_some() {
                    m.inverse_responses.push((id.value, accepted));
                }
            }
        }
        call::Type::Teardown => {
            let ids: Vec<String> = m.tasks.keys().cloned().collect();
            for id in ids {
                if m.tasks.get(&id).is_some_and(|t| !is_terminal(t.state)) {
                    m.transition(
                        &id,
                        mesos::TaskState::TaskKilled,
                        "Framework removed",
                        Some(mesos::task_status::Reason::FrameworkRemoved),
                    );
                }
            }
            m.framework = None;
        }
        _ => {
            return text(
                StatusCode::BAD_REQUEST,
                format!("Call {} is not supported by the fake master", kind.as_str_name()),
            );
        }
    }
    StatusCode::ACCEPTED.into_response()
}

fn accept(m: &mut Master, a: &call::Accept, now: Instant, refuse: Duration, pa_default: bool) {
    let tasks: Vec<mesos::TaskInfo> = a
        .operations
        .iter()
        .filter(|op| op.r#type == Some(mesos::offer::operation::Type::Launch as i32))
        .flat_map(|op| op.launch.iter().flat_map(|l| l.task_infos.iter().cloned()))
        .collect();
    // Offers: exist, ours, one agent.
    let mut agent: Option<String> = None;
    let mut valid = !a.offer_ids.is_empty();
    let mut pool: Vec<mesos::Resource> = Vec::new();
    for o in &a.offer_ids {
        match m.offers.get(&o.value) {
            Some((aid, res)) => {
                if agent.as_ref().is_some_and(|x| x != aid) {
                    valid = false;
                }
                agent = Some(aid.clone());
                pool.extend(res.iter().cloned());
            }
            None => valid = false,
        }
    }
    // The offers are used up either way (valid ones go back on failure).
    for o in &a.offer_ids {
        if let Some((aid, _)) = m.offers.remove(&o.value)
            && let Some(ag) = m.agents.get_mut(&aid)
        {
            ag.offer = None;
            ag.filtered_until = if valid && refuse > Duration::ZERO { Some(now + refuse) } else { None };
        }
    }
    let pa = m.partition_aware(pa_default);
    if !valid {
        let state = if pa { mesos::TaskState::TaskDropped } else { mesos::TaskState::TaskLost };
        for t in tasks {
            let st = m.status(
                &t.task_id.value,
                state,
                "Task launched with invalid offers",
                Some(mesos::task_status::Reason::InvalidOffers),
                true,
            );
            let mut e = ev(event::Type::Update);
            e.update = Some(event::Update { status: mesos::TaskStatus { agent_id: Some(t.agent_id.clone()), ..st } });
            m.send(&e);
        }
        return;
    }
    let Some(aid) = agent else { return };
    let mut left = Amounts::default();
    let mut ports: Vec<u64> = Vec::new();
    for r in &pool {
        let v = r.scalar.as_ref().map_or(0.0, |s| s.value);
        match r.name.as_str() {
            "cpus" => left.cpus += v,
            "mem" => left.mem += v,
            "disk" => left.disk += v,
            "gpus" => left.gpus += v,
            "ports" => {
                for rg in r.ranges.iter().flat_map(|x| x.range.iter()) {
                    ports.extend(rg.begin..=rg.end.min(rg.begin + 65_535));
                }
            }
            _ => {}
        }
    }
    for t in tasks {
        let id = t.task_id.value.clone();
        let mut need = Amounts::default();
        let mut want_ports = Vec::new();
        for r in &t.resources {
            let v = r.scalar.as_ref().map_or(0.0, |s| s.value);
            match r.name.as_str() {
                "cpus" => need.cpus += v,
                "mem" => need.mem += v,
                "disk" => need.disk += v,
                "gpus" => need.gpus += v,
                "ports" => want_ports.extend(
                    r.ranges
                        .iter()
                        .flat_map(|x| x.range.iter())
                        .flat_map(|rg| rg.begin..=rg.end.min(rg.begin + 65_535)),
                ),
                _ => {}
            }
        }
        const EPS: f64 = 1e-6;
        let error = if m.tasks.get(&id).is_some_and(|x| !is_terminal(x.state)) {
            Some(format!("Task {id} already exists"))
        } else if t.agent_id.value != aid {
            Some(format!("Task uses agent {} but the offers are of {aid}", t.agent_id.value))
        } else if need.cpus > left.cpus + EPS
            || need.mem > left.mem + EPS
            || need.disk > left.disk + EPS
            || need.gpus > left.gpus + EPS
        {
            Some("Task uses more resources than available in the offers".into())
        } else if !want_ports.iter().all(|p| ports.contains(p)) {
            Some("Task uses ports not in the offers".into())
        } else if need.cpus <= EPS && need.mem <= EPS {
            Some("Task uses no cpus or mem".into())
        } else {
            None
        };
        if let Some(msg) = error {
            let st =
                m.status(&id, mesos::TaskState::TaskError, &msg, Some(mesos::task_status::Reason::TaskInvalid), true);
            let st = mesos::TaskStatus { agent_id: Some(t.agent_id.clone()), ..st };
            debug!(task = id, msg, "fake master: task refused");
            // Queued like any update: re-sent until acknowledged.
            let launches = m.tasks.get(&id).map_or(0, |x| x.launches);
            if m.tasks.get(&id).is_none_or(|x| is_terminal(x.state)) {
                m.tasks.insert(
                    id.clone(),
                    SimTask {
                        agent_id: t.agent_id.value.clone(),
                        used: Amounts::default(),
                        ports: Vec::new(),
                        state: mesos::TaskState::TaskError,
                        plan: Plan::Forever,
                        grace: Duration::ZERO,
                        kill_at: None,
                        queue: VecDeque::from([st]),
                        last_sent: None,
                        launches,
                        script: String::new(),
                    },
                );
            } else {
                let mut e = ev(event::Type::Update);
                e.update = Some(event::Update { status: mesos::TaskStatus { uuid: None, ..st } });
                m.send(&e);
            }
            continue;
        }
        left.cpus -= need.cpus;
        left.mem -= need.mem;
        left.disk -= need.disk;
        left.gpus -= need.gpus;
        ports.retain(|p| !want_ports.contains(p));
        let script = script_of(&t);
        let grace = t
            .kill_policy
            .as_ref()
            .and_then(|p| p.grace_period.as_ref())
            .map_or(Duration::from_secs(3), |g| Duration::from_nanos(g.nanoseconds.max(0) as u64));
        let launches = m.tasks.get(&id).map_or(0, |x| x.launches) + 1;
        m.tasks.insert(
            id.clone(),
            SimTask {
                agent_id: aid.clone(),
                used: need,
                ports: want_ports,
                state: mesos::TaskState::TaskStaging,
                plan: plan(&script, now),
                grace,
                kill_at: None,
                queue: VecDeque::new(),
                last_sent: None,
                launches,
                script,
            },
        );
        m.transition(&id, mesos::TaskState::TaskStarting, "", None);
        m.transition(&id, mesos::TaskState::TaskRunning, "", None);
    }
}

fn reconcile(m: &mut Master, r: &call::Reconcile, pa_default: bool) {
    let pa = m.partition_aware(pa_default);
    let answers: Vec<(String, mesos::TaskState, Option<String>)> = if r.tasks.is_empty() {
        m.tasks
            .iter()
            .filter(|(_, t)| !is_terminal(t.state))
            .map(|(id, t)| (id.clone(), t.state, Some(t.agent_id.clone())))
            .collect()
    } else {
        r.tasks
            .iter()
            .map(|q| {
                let id = q.task_id.value.clone();
                match m.tasks.get(&id) {
                    Some(t) if !m.agents.get(&t.agent_id).is_some_and(|a| a.alive) && !is_terminal(t.state) => (
                        id,
                        if pa { mesos::TaskState::TaskUnreachable } else { mesos::TaskState::TaskLost },
                        Some(t.agent_id.clone()),
                    ),
                    Some(t) => (id, t.state, Some(t.agent_id.clone())),
                    None => (
                        id,
                        if pa { mesos::TaskState::TaskUnknown } else { mesos::TaskState::TaskLost },
                        q.agent_id.as_ref().map(|a| a.value.clone()),
                    ),
                }
            })
            .collect()
    };
    for (id, state, agent) in answers {
        let st = m.status(&id, state, "Reconciliation", Some(mesos::task_status::Reason::Reconciliation), false);
        let st = mesos::TaskStatus { agent_id: agent.map(|value| mesos::AgentId { value }), ..st };
        let mut e = ev(event::Type::Update);
        e.update = Some(event::Update { status: st });
        m.send(&e);
    }
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

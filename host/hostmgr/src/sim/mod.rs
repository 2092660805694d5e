//! The `sim` provider: simulated hosts and runs on a virtual clock.
//!
//! Hosts come from shapes (resources and attributes); runs follow the script
//! in their environment (see [`script::vars`] and the crate docs) or the
//! configured random distributions. Nothing happens until the owner moves
//! the clock ([`SimProvider::advance`], [`SimProvider::run_until_idle`]) or
//! starts real-time mode ([`SimProvider::spawn_realtime`]).
//!
//! The simulator does not check capacity: the manager's allocation does.
//! A host costs one small struct, so 50,000 hosts are cheap; a run costs one
//! map entry, a timer while it has an end, and its unacknowledged updates.

pub mod script;

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use paceline_model::run::{LaunchRequest, RunState, RunUpdate};
use paceline_model::{Labels, Resources};
use tokio::sync::mpsc;

use crate::error::ProviderError;
use crate::provider::{HostRegistration, LogChunk, LogStream, Provider, ProviderEvent};
use paceline_joints::{Clock, ManualClock};
pub use script::RandomRuns;
use script::Script;

const NAME: &str = "sim";

/// `count` hosts alike, named `<prefix><index>`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostShape {
    /// How many.
    pub count: usize,
    /// Name prefix; the index (zero-padded to 5 digits) follows.
    pub prefix: String,
    /// Capacity of each.
    pub total: Resources,
    /// Attributes of each (e.g. `zone`).
    pub attributes: Labels,
}

impl HostShape {
    /// `count` hosts of `total` with no attributes, named `<prefix>00000`, ….
    pub fn new(count: usize, prefix: impl Into<String>, total: Resources) -> Self {
        HostShape { count, prefix: prefix.into(), total, attributes: Labels::new() }
    }

    /// Adds an attribute.
    pub fn attribute(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.attributes.insert(key.into(), value.into());
        self
    }
}

/// Simulator settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SimConfig {
    /// The hosts present from the start.
    pub shapes: Vec<HostShape>,
    /// Seed for the random distributions.
    pub seed: u64,
    /// Virtual ms between heartbeats of every live host.
    pub heartbeat_interval_ms: u64,
    /// Virtual ms after which an unacknowledged update is sent again.
    pub redeliver_after_ms: u64,
    /// Behaviour of runs whose environment scripts nothing.
    pub random: RandomRuns,
    /// Virtual time at start.
    pub start_ms: u64,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            shapes: Vec::new(),
            seed: 0,
            heartbeat_interval_ms: 5_000,
            redeliver_after_ms: 10_000,
            random: RandomRuns::default(),
            start_ms: 1_000_000,
        }
    }
}

#[derive(Debug)]
struct SimHost {
    name: String,
    agent_id: String,
    total: Resources,
    attributes: Labels,
    alive: bool,
    heartbeating: bool,
    next_port: u16,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum End {
    Exit(i32),
    Killed,
}

#[derive(Debug)]
struct SimRun {
    host: u32,
    task_id: String,
    seq: u64,
    terminal: bool,
    end_at: Option<u64>,
    end: End,
    grace_ms: u64,
    resources: Resources,
    /// GPU grant and ports, boxed: most runs have neither, and a million
    /// runs would carry 56 bytes each of empty collections.
    extras: Option<Box<RunExtras>>,
    /// Sent and not yet acknowledged, oldest first. Kept compact (the
    /// update is rebuilt to re-send it) so the hot path clones nothing.
    unacked: VecDeque<Sent>,
}

/// What few runs have.
#[derive(Debug, Default)]
struct RunExtras {
    gpu: paceline_model::gpu::GpuGrant,
    ports: BTreeMap<String, u16>,
}

/// One update as sent; with the run's fields it rebuilds the [`RunUpdate`].
#[derive(Clone, Copy, Debug)]
struct Sent {
    seq: u64,
    state: RunState,
    healthy: Option<bool>,
    exit_code: Option<i32>,
    reason: &'static str,
    message: &'static str,
    at_ms: u64,
    sent_at_ms: u64,
}

impl SimRun {
    fn gpu(&self) -> paceline_model::gpu::GpuGrant {
        self.extras.as_ref().map(|e| e.gpu.clone()).unwrap_or_default()
    }

    fn ports(&self) -> BTreeMap<String, u16> {
        self.extras.as_ref().map(|e| e.ports.clone()).unwrap_or_default()
    }

    fn rebuild(&self, host: &str, run_id: &str, s: &Sent) -> RunUpdate {
        RunUpdate {
            host: host.to_string(),
            run_id: run_id.to_string(),
            task_id: self.task_id.clone(),
            seq: s.seq,
            state: s.state,
            healthy: s.healthy,
            exit_code: s.exit_code,
            signal: None,
            reason: s.reason.to_string(),
            message: s.message.to_string(),
            at_ms: s.at_ms,
            ports: self.ports(),
        }
    }
}

#[derive(Debug)]
struct SimState {
    hosts: Vec<SimHost>,
    by_name: HashMap<String, u32>,
    /// Boxed, as the host manager's runs are (see its `State::runs`).
    runs: HashMap<String, Box<SimRun>>,
    /// (due, run id); stale entries (the run's `end_at` moved) are skipped.
    timers: BinaryHeap<Reverse<(u64, String)>>,
    rng: fastrand::Rng,
    launched: usize,
    last_heartbeat_ms: u64,
    next_redelivery_scan_ms: u64,
}

#[derive(Debug)]
struct Inner {
    config: SimConfig,
    clock: ManualClock,
    state: Mutex<SimState>,
    /// Held while events are collected and sent, so that two operations
    /// cannot interleave one run's updates out of order.
    events: tokio::sync::Mutex<Option<mpsc::Sender<ProviderEvent>>>,
}

/// The simulated provider. Cheap to clone; clones share the cluster.
#[derive(Clone, Debug)]
pub struct SimProvider {
    inner: Arc<Inner>,
}

impl SimProvider {
    /// A simulated cluster of `config.shapes`.
    pub fn new(config: SimConfig) -> Self {
        let clock = ManualClock::new(config.start_ms);
        let mut state = SimState {
            hosts: Vec::new(),
            by_name: HashMap::new(),
            runs: HashMap::new(),
            timers: BinaryHeap::new(),
            rng: fastrand::Rng::with_seed(config.seed),
            launched: 0,
            last_heartbeat_ms: config.start_ms,
            next_redelivery_scan_ms: config.start_ms.saturating_add(config.redeliver_after_ms),
        };
        for shape in &config.shapes {
            for i in 0..shape.count {
                state.insert_host(format!("{}{i:05}", shape.prefix), shape.total, shape.attributes.clone());
            }
        }
        SimProvider {
            inner: Arc::new(Inner { config, clock, state: Mutex::new(state), events: tokio::sync::Mutex::new(None) }),
        }
    }

    /// The virtual clock; give it to the manager so its deadlines run on it.
    pub fn clock(&self) -> ManualClock {
        self.inner.clock.clone()
    }

    /// Virtual now.
    pub fn now_ms(&self) -> u64 {
        self.inner.clock.now_ms()
    }

    /// Hosts alive.
    pub fn host_count(&self) -> usize {
        self.state().hosts.iter().filter(|h| h.alive).count()
    }

    /// Runs launched since the simulator was made (each run id once),
    /// whichever manager launched them.
    pub fn run_count(&self) -> usize {
        self.state().launched
    }

    /// Runs the simulator still tracks (live, or ended with updates unacknowledged).
    pub fn tracked_run_count(&self) -> usize {
        self.state().runs.len()
    }

    /// When the next scripted run end (or kill grace) is due on the virtual
    /// clock, if any: a driver can jump straight there.
    pub fn next_due_ms(&self) -> Option<u64> {
        self.state().next_due()
    }

    /// Updates sent and not yet acknowledged, over all runs.
    pub fn unacked_count(&self) -> usize {
        self.state().runs.values().map(|r| r.unacked.len()).sum()
    }

    /// Adds (or revives) a host; it registers at once.
    pub async fn add_host(&self, name: &str, total: Resources, attributes: Labels) -> Result<(), ProviderError> {
        self.emit(|st, _now, out| {
            let i = match st.by_name.get(name) {
                Some(&i) => {
                    let h = &mut st.hosts[i as usize];
                    h.total = total;
                    h.attributes = attributes;
                    h.alive = true;
                    h.heartbeating = true;
                    i
                }
                None => st.insert_host(name.to_string(), total, attributes),
            };
            out.push(ProviderEvent::HostRegistered(st.registration(i)));
            Ok(())
        })
        .await
    }

    /// Removes a host: its runs end LOST (reason HOST_REMOVED) and it disconnects.
    pub async fn remove_host(&self, name: &str) -> Result<(), ProviderError> {
        self.emit(|st, now, out| {
            let i = st.live_host(name)?;
            let lost: Vec<String> =
                st.runs.iter().filter(|(_, r)| r.host == i && !r.terminal).map(|(id, _)| id.clone()).collect();
            for id in lost {
                st.finish(&id, now, RunState::Lost, None, "HOST_REMOVED", "the simulated host was removed", out);
            }
            let h = &mut st.hosts[i as usize];
            h.alive = false;
            out.push(ProviderEvent::HostDisconnected { host: h.name.clone(), reason: "removed".into() });
            Ok(())
        })
        .await
    }

    /// Silences a host (no heartbeats, no re-sent updates), or lets it speak
    /// again; its runs carry on.
    pub fn set_heartbeating(&self, name: &str, on: bool) -> Result<(), ProviderError> {
        let mut st = self.state();
        let i = st.live_host(name)?;
        st.hosts[i as usize].heartbeating = on;
        Ok(())
    }

    /// Re-registers a live host as an agent would after a reconnect,
    /// reporting the runs it still supervises.
    pub async fn reregister(&self, name: &str) -> Result<(), ProviderError> {
        self.emit(|st, _now, out| {
            let i = st.live_host(name)?;
            st.hosts[i as usize].heartbeating = true;
            out.push(ProviderEvent::HostRegistered(st.registration(i)));
            Ok(())
        })
        .await
    }

    /// Moves the virtual clock forward by `ms`, ending runs that are due (in
    /// time order), sending heartbeats and re-sending unacknowledged updates.
    pub async fn advance(&self, ms: u64) {
        let target = self.now_ms().saturating_add(ms);
        self.advance_to(target).await;
    }

    /// Advances to each next run end until none is left within `max_ms`;
    /// runs scripted to run forever do not count. Returns virtual now.
    pub async fn run_until_idle(&self, max_ms: u64) -> u64 {
        let limit = self.now_ms().saturating_add(max_ms);
        loop {
            let next = self.state().next_due();
            match next {
                Some(t) if t <= limit => self.advance_to(t).await,
                _ => break,
            }
        }
        self.now_ms()
    }

    /// Real-time mode: moves the virtual clock by `period` every `period` of
    /// wall time until the returned task is aborted.
    pub fn spawn_realtime(&self, period: Duration) -> tokio::task::JoinHandle<()> {
        let sim = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(period);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                sim.advance(period.as_millis() as u64).await;
            }
        })
    }

    async fn advance_to(&self, target: u64) {
        let config = &self.inner.config;
        let _ = self
            .emit(|st, _now, out| {
                // Ends in time order, each stamped with its own due time.
                while let Some(Reverse((due, _))) = st.timers.peek() {
                    if *due > target {
                        break;
                    }
                    let Some(Reverse((due, id))) = st.timers.pop() else { break };
                    st.fire(&id, due, out);
                }
                if target >= st.last_heartbeat_ms.saturating_add(config.heartbeat_interval_ms) {
                    st.last_heartbeat_ms = target;
                    for h in st.hosts.iter().filter(|h| h.alive && h.heartbeating) {
                        out.push(ProviderEvent::Heartbeat { host: h.name.clone() });
                    }
                }
                if target >= st.next_redelivery_scan_ms {
                    st.next_redelivery_scan_ms = target.saturating_add(config.redeliver_after_ms / 2).max(target + 1);
                    st.redeliver(target, config.redeliver_after_ms, out);
                }
                Ok(())
            })
            .await;
        self.inner.clock.advance_to(target);
    }

    fn state(&self) -> MutexGuard<'_, SimState> {
        // A panic while holding the lock leaves plain data behind; keep going.
        self.inner.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs `f` on the state, then sends what it produced, in order.
    async fn emit<F>(&self, f: F) -> Result<(), ProviderError>
    where
        F: FnOnce(&mut SimState, u64, &mut Vec<ProviderEvent>) -> Result<(), ProviderError>,
    {
        let tx = self.inner.events.lock().await;
        let Some(tx) = tx.as_ref() else {
            return Err(ProviderError::NotRunning(NAME));
        };
        let mut out = Vec::new();
        {
            let mut st = self.state();
            f(&mut st, self.inner.clock.now_ms(), &mut out)?;
        }
        for ev in out {
            if tx.send(ev).await.is_err() {
                // The manager is gone; the simulation has nobody to tell.
                break;
            }
        }
        Ok(())
    }
}

impl SimState {
    fn insert_host(&mut self, name: String, total: Resources, attributes: Labels) -> u32 {
        let i = self.hosts.len() as u32;
        self.by_name.insert(name.clone(), i);
        self.hosts.push(SimHost {
            agent_id: format!("sim-agent-{i}"),
            name,
            total,
            attributes,
            alive: true,
            heartbeating: true,
            next_port: 31_000,
        });
        i
    }

    fn live_host(&self, name: &str) -> Result<u32, ProviderError> {
        match self.by_name.get(name) {
            Some(&i) if self.hosts[i as usize].alive => Ok(i),
            _ => Err(ProviderError::HostNotConnected { provider: NAME, host: name.to_string() }),
        }
    }

    fn registration(&self, i: u32) -> HostRegistration {
        let h = &self.hosts[i as usize];
        HostRegistration {
            hostname: h.name.clone(),
            agent_id: h.agent_id.clone(),
            total: h.total,
            attributes: h.attributes.clone(),
            running: self
                .runs
                .iter()
                .filter(|(_, r)| r.host == i && !r.terminal)
                .map(|(id, r)| crate::provider::RunningRun {
                    run_id: id.clone(),
                    task_id: r.task_id.clone(),
                    resources: r.resources,
                    gpu: r.gpu(),
                })
                .collect(),
            gpus: Vec::new(),
        }
    }

    fn next_due(&self) -> Option<u64> {
        self.timers.peek().map(|Reverse((t, _))| *t)
    }

    /// Appends the run's next update (and keeps it until acknowledged).
    #[allow(clippy::too_many_arguments)]
    fn update(
        &mut self,
        id: &str,
        now: u64,
        state: RunState,
        healthy: Option<bool>,
        exit_code: Option<i32>,
        reason: &'static str,
        message: &'static str,
        out: &mut Vec<ProviderEvent>,
    ) {
        let Some(run) = self.runs.get_mut(id) else { return };
        run.seq += 1;
        run.terminal |= state.is_terminal();
        let sent = Sent { seq: run.seq, state, healthy, exit_code, reason, message, at_ms: now, sent_at_ms: now };
        run.unacked.push_back(sent);
        out.push(ProviderEvent::RunUpdate(run.rebuild(&self.hosts[run.host as usize].name, id, &sent)));
    }

    #[allow(clippy::too_many_arguments)]
    fn finish(
        &mut self,
        id: &str,
        now: u64,
        state: RunState,
        exit_code: Option<i32>,
        reason: &'static str,
        message: &'static str,
        out: &mut Vec<ProviderEvent>,
    ) {
        if let Some(run) = self.runs.get_mut(id) {
            run.end_at = None;
        }
        self.update(id, now, state, None, exit_code, reason, message, out);
    }

    fn fire(&mut self, id: &str, due: u64, out: &mut Vec<ProviderEvent>) {
        let Some(run) = self.runs.get(id) else { return };
        if run.terminal || run.end_at != Some(due) || !self.hosts[run.host as usize].alive {
            return;
        }
        match run.end {
            End::Exit(0) => self.finish(id, due, RunState::Succeeded, Some(0), "EXITED", "", out),
            End::Exit(code) => self.finish(id, due, RunState::Failed, Some(code), "EXITED", "", out),
            End::Killed => self.finish(id, due, RunState::Killed, None, "KILLED_BY_REQUEST", "", out),
        }
    }

    /// Ends every run due at or before `now` (used after launch and kill so
    /// that a zero duration or grace takes effect at once).
    fn fire_due(&mut self, now: u64, out: &mut Vec<ProviderEvent>) {
        while let Some(Reverse((due, _))) = self.timers.peek() {
            if *due > now {
                break;
            }
            let Some(Reverse((due, id))) = self.timers.pop() else { break };
            self.fire(&id, due, out);
        }
    }

    fn redeliver(&mut self, now: u64, after: u64, out: &mut Vec<ProviderEvent>) {
        for (id, run) in self.runs.iter_mut() {
            let host = &self.hosts[run.host as usize];
            // A silent host (not heartbeating) re-sends nothing either.
            if !host.alive || !host.heartbeating {
                continue;
            }
            for i in 0..run.unacked.len() {
                let sent = run.unacked[i];
                if sent.sent_at_ms.saturating_add(after) <= now {
                    run.unacked[i].sent_at_ms = now;
                    out.push(ProviderEvent::RunUpdate(run.rebuild(&host.name, id, &sent)));
                }
            }
        }
    }

    fn launch_one(
        &mut self,
        host: u32,
        req: LaunchRequest,
        random: &RandomRuns,
        now: u64,
        out: &mut Vec<ProviderEvent>,
    ) {
        if self.runs.contains_key(&req.run_id) {
            return; // idempotent by run id
        }
        let script = match script::parse(&req.run_id, &req.spec.env, &req.env, random, &mut self.rng) {
            Ok(s) => s,
            Err(error) => {
                out.push(ProviderEvent::LaunchRejected {
                    host: self.hosts[host as usize].name.clone(),
                    run_id: req.run_id,
                    error,
                });
                return;
            }
        };
        self.launched += 1;
        let Script { duration_ms, exit_code, unhealthy } = script;
        let mut ports = BTreeMap::new();
        let h = &mut self.hosts[host as usize];
        for name in &req.spec.ports {
            ports.insert(name.clone(), h.next_port);
            h.next_port = if h.next_port >= 32_999 { 31_000 } else { h.next_port + 1 };
        }
        let end_at = duration_ms.map(|d| now.saturating_add(d));
        let id = req.run_id;
        self.runs.insert(
            id.clone(),
            Box::new(SimRun {
                host,
                task_id: req.task_id,
                seq: 0,
                terminal: false,
                end_at,
                end: End::Exit(exit_code),
                grace_ms: u64::from(req.spec.kill_grace_period_secs) * 1000,
                resources: req.spec.resources,
                extras: (!ports.is_empty() || !req.gpu.is_empty())
                    .then(|| Box::new(RunExtras { gpu: req.gpu.clone(), ports })),
                unacked: VecDeque::new(),
            }),
        );
        self.update(&id, now, RunState::Starting, None, None, "", "", out);
        self.update(&id, now, RunState::Running, None, None, "", "", out);
        if req.spec.health_check.is_some() {
            self.update(&id, now, RunState::Running, Some(!unhealthy), None, "HEALTH_CHANGED", "", out);
        }
        if let Some(t) = end_at {
            self.timers.push(Reverse((t, id)));
        }
    }
}

#[async_trait]
impl Provider for SimProvider {
    fn name(&self) -> &'static str {
        NAME
    }

    async fn start(&self, events: mpsc::Sender<ProviderEvent>) -> Result<(), ProviderError> {
        *self.inner.events.lock().await = Some(events);
        self.emit(|st, _now, out| {
            out.reserve(st.hosts.len());
            for i in 0..st.hosts.len() as u32 {
                if st.hosts[i as usize].alive {
                    out.push(ProviderEvent::HostRegistered(st.registration(i)));
                }
            }
            Ok(())
        })
        .await
    }

    async fn launch(&self, host: &str, runs: Vec<LaunchRequest>) -> Result<(), ProviderError> {
        let random = self.inner.config.random;
        self.emit(|st, now, out| {
            let i = st.live_host(host)?;
            for req in runs {
                st.launch_one(i, req, &random, now, out);
            }
            st.fire_due(now, out);
            Ok(())
        })
        .await
    }

    async fn kill(&self, host: &str, run_id: &str, grace_override: Option<Duration>) -> Result<(), ProviderError> {
        self.emit(|st, now, out| {
            st.live_host(host)?;
            let Some(run) = st.runs.get_mut(run_id) else { return Ok(()) };
            if run.terminal {
                return Ok(());
            }
            let grace = grace_override.map_or(run.grace_ms, |g| g.as_millis() as u64);
            let at = now.saturating_add(grace);
            // A natural end due before the grace is over wins, as it would on a real host.
            if run.end_at.is_none_or(|t| at < t) {
                run.end_at = Some(at);
                run.end = End::Killed;
                st.timers.push(Reverse((at, run_id.to_string())));
            }
            st.fire_due(now, out);
            Ok(())
        })
        .await
    }

    async fn acknowledge(&self, _host: &str, run_id: &str, seq: u64) -> Result<(), ProviderError> {
        let mut st = self.state();
        if let Some(run) = st.runs.get_mut(run_id) {
            while run.unacked.front().is_some_and(|s| s.seq <= seq) {
                run.unacked.pop_front();
            }
            if run.terminal && run.unacked.is_empty() {
                st.runs.remove(run_id);
            } else if run.unacked.is_empty() {
                // A live run keeps no capacity for updates it no longer holds
                // (a few hundred bytes each, a million runs at scale).
                run.unacked = VecDeque::new();
            }
        }
        Ok(())
    }

    async fn reconcile(&self, host: &str, expected_run_ids: Vec<String>) -> Result<(), ProviderError> {
        // Re-sends what is unacknowledged; the simulator reports only runs it knows.
        self.emit(|st, _now, out| {
            let i = st.live_host(host)?;
            for id in &expected_run_ids {
                if let Some(run) = st.runs.get(id).filter(|r| r.host == i) {
                    let host = &st.hosts[i as usize].name;
                    out.extend(run.unacked.iter().map(|s| ProviderEvent::RunUpdate(run.rebuild(host, id, s))));
                }
            }
            Ok(())
        })
        .await
    }

    async fn read_log(
        &self,
        _host: &str,
        _run_id: &str,
        _stream: LogStream,
        _offset: u64,
        _max_bytes: u64,
    ) -> Result<LogChunk, ProviderError> {
        Err(ProviderError::Unsupported { provider: NAME, what: "read_log" })
    }
}

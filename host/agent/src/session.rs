//! The agent's side of `AgentService.Session`: dial the host manager, keep
//! one bidirectional stream, and redial with exponential backoff and jitter
//! when it breaks.
//!
//! Per stream: `Register` (with the runs being supervised) first; after
//! `Registered`, heartbeats and every unacknowledged status update in order
//! per run, then new ones as the outbox gets them. Each update is sent at
//! most once per stream; an update that was not acknowledged is sent again
//! on the next stream (the manager drops duplicates by `seq`).
//!
//! Every connection is TLS with the agent's client certificate
//! ([`crate::identity`]); an agent that has none joins first with the
//! settings given to [`Agent::join_with`].

use std::collections::HashMap;
use std::future::Future;
use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use paceline_proto::agent::v1 as pb;
use paceline_proto::agent::v1::agent_message::Body as Out;
use paceline_proto::agent::v1::agent_service_client::AgentServiceClient;
use paceline_proto::agent::v1::manager_message::Body as In;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use crate::config::{AgentConfig, HostInfo};
use crate::error::{AgentError, io_ctx};
use crate::identity::{Identity, JoinSettings, tls_uri};
use crate::supervisor::{Supervisor, SupervisorConfig};
use paceline_proto::convert::resources_pb as proto_resources;

/// Runs the agent until `shutdown` resolves: detects the host, opens the
/// supervisor on the data dir (re-adopting what still runs), and keeps a
/// session with the host manager. Tasks keep running after shutdown; the
/// next agent on the same data dir takes them over.
pub async fn run(
    config: AgentConfig,
    join: Option<JoinSettings>,
    shutdown: impl Future<Output = ()>,
) -> Result<(), AgentError> {
    Agent::start(config).await?.join_with(join).serve(shutdown).await
}

/// A started agent: host detected, supervisor open, not yet connected.
#[derive(Debug)]
pub struct Agent {
    config: AgentConfig,
    host: HostInfo,
    supervisor: Supervisor,
    agent_id: String,
    identity: Mutex<Option<Identity>>,
    join: Option<JoinSettings>,
}

impl Agent {
    /// Detects the host and opens the supervisor.
    pub async fn start(config: AgentConfig) -> Result<Self, AgentError> {
        let mut host =
            config.detect_host().map_err(io_ctx(format!("detecting the host in {}", config.data_dir.display())))?;
        tracing::info!(
            hostname = host.hostname,
            cpu_millis = host.total.cpu_millis,
            memory_mib = host.total.memory_mib,
            disk_mib = host.total.disk_mib,
            gpu_milli = host.total.gpu_milli,
            isolation = host.isolation.name(),
            "agent host"
        );
        match &host.task_users {
            crate::TaskUsers::PerRun { first, last, .. } => {
                tracing::info!(first, last, "task isolation: each run under a uid of its own");
            }
            crate::TaskUsers::Agent { why } => tracing::warn!(
                why,
                "task isolation: same user as the agent: a task can read other tasks' environment and files and this agent's key (host attribute task_user=same-as-agent)"
            ),
        }
        let supervisor = Supervisor::open(SupervisorConfig::from_host(&config, &host)).await?;
        let agent_id = agent_id(&config.data_dir)?;
        let identity = Identity::load(&config.data_dir)?;
        // A certificate issued before names were canonical may spell the
        // same name otherwise (`NODE-A`): keep the spelling it certifies.
        if let Some(id) = identity.as_ref().filter(|id| {
            id.hostname != host.hostname
                && paceline_model::host::canonical_hostname(&id.hostname).is_ok_and(|c| c == host.hostname)
        }) {
            host.hostname = id.hostname.clone();
        }
        if let Some(id) = identity.as_ref().filter(|id| id.hostname != host.hostname) {
            return Err(AgentError::Identity(format!(
                "this agent joined as host {:?} but now reports {:?}; keep the name, or remove {} and join again",
                id.hostname,
                host.hostname,
                crate::identity::dir(&config.data_dir).display()
            )));
        }
        Ok(Self { config, host, supervisor, agent_id, identity: Mutex::new(identity), join: None })
    }

    /// What to join with when the agent has no certificate yet (ignored when it has one).
    pub fn join_with(mut self, join: Option<JoinSettings>) -> Self {
        self.join = join;
        self
    }

    /// Whether the agent holds a certificate.
    pub fn has_identity(&self) -> bool {
        self.identity.lock().unwrap_or_else(|e| e.into_inner()).is_some()
    }

    /// The agent's identity, joining through `manager` first when it has none.
    async fn identity(&self, manager: &str) -> Result<Identity, AgentError> {
        if let Some(id) = self.identity.lock().unwrap_or_else(|e| e.into_inner()).clone() {
            return Ok(id);
        }
        let Some(join) = &self.join else {
            return Err(AgentError::Identity(format!(
                "this agent has no certificate in {}: join the cluster once with `paceline agent --join TOKEN --ca-hash sha256:…` (`paceline agent-token create` on the server prints both)",
                crate::identity::dir(&self.config.data_dir).display()
            )));
        };
        let id = crate::identity::join(manager, join, &self.host.hostname).await?;
        id.store(&self.config.data_dir)?;
        *self.identity.lock().unwrap_or_else(|e| e.into_inner()) = Some(id.clone());
        Ok(id)
    }

    /// The supervisor (for tests and local tooling).
    pub fn supervisor(&self) -> &Supervisor {
        &self.supervisor
    }

    /// What was detected about the host.
    pub fn host(&self) -> &HostInfo {
        &self.host
    }

    /// The stable id of this agent installation.
    pub fn agent_id(&self) -> &str {
        &self.agent_id
    }

    /// The `Register` message for a new stream.
    pub fn register_message(&self) -> pb::Register {
        pb::Register {
            protocol_version: pb::PROTOCOL_VERSION,
            agent_id: self.agent_id.clone(),
            hostname: self.host.hostname.clone(),
            total: Some(proto_resources(&self.host.total)),
            attributes: self.host.attributes.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            running: self.supervisor.registration_runs(),
            isolation: self.host.isolation.proto() as i32,
            port_range_first: u32::from(self.config.port_range_first),
            port_range_last: u32::from(self.config.port_range_last),
            features: vec![pb::FEATURE_SECRETS.to_owned(), pb::FEATURE_GANG.to_owned()],
            gpus: self.host.gpus.iter().map(paceline_proto::convert::gpu_device_pb).collect(),
        }
    }

    /// Keeps a session with the manager until `shutdown` resolves.
    pub async fn serve(self, shutdown: impl Future<Output = ()>) -> Result<(), AgentError> {
        tokio::pin!(shutdown);
        let gc = {
            let sup = self.supervisor.clone();
            let after = Duration::from_secs(self.config.gc_after_secs);
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(Duration::from_secs(600));
                loop {
                    tick.tick().await;
                    sup.gc(after);
                }
            })
        };
        // One sampling pass for all runs; 0 turns measuring off.
        let sampler = (self.config.usage_interval_ms > 0).then(|| {
            let every = Duration::from_millis(self.config.usage_interval_ms.max(100));
            tokio::spawn(self.supervisor.clone().sample_usage_every(every))
        });
        let result = self.reconnect_loop(&mut shutdown).await;
        gc.abort();
        if let Some(sampler) = sampler {
            sampler.abort();
        }
        result
    }

    async fn reconnect_loop(
        &self,
        shutdown: &mut std::pin::Pin<&mut impl Future<Output = ()>>,
    ) -> Result<(), AgentError> {
        let managers = self.config.managers();
        if managers.is_empty() {
            return Err(AgentError::Config("no manager address configured".to_owned()));
        }
        // Which manager to dial: stays on one while it works, moves to the next when a
        // dial or a session fails (the leader of highly available servers is the only one
        // listening for agents).
        let mut index = 0usize;
        let mut attempt: u32 = 0;
        // When the last registered session ended (the failover window's start).
        let mut lost_at: Option<std::time::Instant> = None;
        loop {
            let manager = &managers[index % managers.len()];
            let result = tokio::select! {
                r = self.session(manager) => r,
                () = shutdown.as_mut() => {
                    tracing::info!("agent shutting down; tasks keep running");
                    self.supervisor.detach();
                    return Ok(());
                }
            };
            match result {
                Ok(true) => {
                    tracing::warn!("manager closed the session; reconnecting");
                    attempt = 0;
                    lost_at = Some(std::time::Instant::now());
                }
                Ok(false) => {
                    tracing::warn!(manager, "session ended before registration");
                    index += 1;
                }
                // The manager refused this agent's own report (resources,
                // host name, protocol version): retrying cannot fix it.
                Err(AgentError::Session(status)) if status.code() == tonic::Code::InvalidArgument => {
                    tracing::error!(error = %status.message(), "the host manager refused this agent's registration");
                    self.supervisor.detach();
                    return Err(AgentError::Config(format!(
                        "the host manager refused the registration: {}",
                        status.message()
                    )));
                }
                // Its certificate or join was refused (no certificate, another
                // host's, revoked; a bad, expired or spent token): retrying
                // cannot fix that either.
                // (InvalidArgument, the other refusal, is the arm above.)
                Err(AgentError::Session(status)) if is_refusal(status.code()) => {
                    tracing::error!(error = %status.message(), "the host manager refused this agent");
                    self.supervisor.detach();
                    return Err(AgentError::Identity(format!(
                        "the host manager refused this agent: {}",
                        status.message()
                    )));
                }
                Err(e @ AgentError::Identity(_)) => {
                    tracing::error!(error = %e, "no certificate");
                    self.supervisor.detach();
                    return Err(e);
                }
                Err(e) => {
                    tracing::warn!(manager, error = %e, attempt, "session failed");
                    index += 1;
                }
            }
            let delay = redial_delay(&self.config, attempt / managers.len() as u32, lost_at.map(|t| t.elapsed()));
            attempt = attempt.saturating_add(1);
            tokio::select! {
                () = tokio::time::sleep(delay) => {}
                () = shutdown.as_mut() => {
                    self.supervisor.detach();
                    return Ok(());
                }
            }
        }
    }

    /// One stream. `Ok(true)` when it was registered before it ended.
    async fn session(&self, manager: &str) -> Result<bool, AgentError> {
        // Keepalives notice a manager that vanished without closing the
        // connection (host down, network partition) so the agent redials.
        let identity = self.identity(manager).await?;
        let channel = tonic::transport::Endpoint::from_shared(tls_uri(manager))?
            .tls_config(identity.client_tls())?
            .connect_timeout(Duration::from_secs(5))
            .http2_keep_alive_interval(Duration::from_secs(10))
            .keep_alive_timeout(Duration::from_secs(20))
            .keep_alive_while_idle(true)
            .connect()
            .await?;
        let mut client = AgentServiceClient::new(channel);
        let (tx, rx) = mpsc::channel::<pb::AgentMessage>(1024);
        let send = |body: Out| {
            let tx = tx.clone();
            async move { tx.send(pb::AgentMessage { body: Some(body) }).await.is_ok() }
        };
        send(Out::Register(self.register_message())).await;
        let mut inbound = client.session(ReceiverStream::new(rx)).await?.into_inner();
        let mut registered = false;
        let mut sent: HashMap<String, u64> = HashMap::new();
        let mut heartbeat_seq = 0u64;
        let mut heartbeat = tokio::time::interval(self.config.heartbeat_interval());
        heartbeat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                msg = inbound.message() => {
                    let msg = match msg {
                        Ok(msg) => msg,
                        // A registered session cut off (the manager died, the network broke)
                        // ended like a closed one: redial at once, a successor may lead.
                        // Refusals stay errors: the loop gives up on those.
                        Err(status) if registered && !is_refusal(status.code()) => {
                            tracing::warn!(manager, error = %status, "lost the session with the host manager");
                            return Ok(true);
                        }
                        Err(status) => return Err(status.into()),
                    };
                    let Some(msg) = msg else { return Ok(registered) };
                    let Some(body) = msg.body else { continue };
                    match body {
                        In::Registered(r) => {
                            tracing::info!(agent_id = self.agent_id, manager, "registered with the host manager");
                            registered = true;
                            if r.heartbeat_interval_ms > 0 {
                                heartbeat = tokio::time::interval(Duration::from_millis(r.heartbeat_interval_ms.max(100)));
                                heartbeat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                            }
                            if !self.flush(&send, &mut sent).await {
                                return Ok(registered);
                            }
                        }
                        In::Launch(launch) => {
                            let run_id = launch.run_id.clone();
                            if let Err(e) = self.supervisor.launch(&launch).await {
                                tracing::warn!(run_id, error = %e, "launch rejected");
                                send(Out::LaunchRejected(pb::LaunchRejected { run_id, error: e.to_string() })).await;
                            }
                        }
                        In::Kill(kill) => {
                            if let Err(e) = self.supervisor.kill(&kill.run_id, kill.grace_period_secs) {
                                tracing::warn!(run_id = kill.run_id, error = %e, "kill of a run this agent does not know");
                            }
                        }
                        In::Ack(ack) => {
                            if let Err(e) = self.supervisor.ack(&ack.run_id, ack.seq) {
                                tracing::error!(run_id = ack.run_id, error = %e, "persisting an ack");
                            }
                        }
                        In::ReadLog(req) => {
                            send(Out::LogChunk(self.supervisor.handle_read_log(&req))).await;
                        }
                    }
                }
                _ = heartbeat.tick(), if registered => {
                    heartbeat_seq += 1;
                    if !send(Out::Heartbeat(pb::Heartbeat { seq: heartbeat_seq, usage: self.supervisor.usage() })).await {
                        return Ok(registered);
                    }
                }
                () = self.supervisor.outbox_changed(), if registered => {
                    if !self.flush(&send, &mut sent).await {
                        return Ok(registered);
                    }
                }
            }
        }
    }

    /// Sends every unacknowledged update not yet sent on this stream.
    async fn flush<F, Fut>(&self, send: &F, sent: &mut HashMap<String, u64>) -> bool
    where
        F: Fn(Out) -> Fut,
        Fut: Future<Output = bool>,
    {
        for update in self.supervisor.outbox().pending_after(sent) {
            sent.insert(update.run_id.clone(), update.seq);
            if !send(Out::Status(update)).await {
                return false;
            }
        }
        true
    }
}

/// Codes with which a manager refuses this agent itself (its report, its
/// certificate, its join): redialling cannot fix them.
fn is_refusal(code: tonic::Code) -> bool {
    matches!(
        code,
        tonic::Code::InvalidArgument
            | tonic::Code::Unauthenticated
            | tonic::Code::PermissionDenied
            | tonic::Code::AlreadyExists
    )
}

/// The wait before the next dial. `round`: failed rounds over every manager
/// (the backoff grows per round, not per address); `since_lost`: time since
/// a registered session ended, if one did. Within `failover_redial_ms` of
/// that the agent redials at its first delay, so it finds a successor leader
/// as soon as it listens; otherwise, and at first start, it backs off.
pub fn redial_delay(config: &AgentConfig, round: u32, since_lost: Option<Duration>) -> Duration {
    let fast = since_lost.is_some_and(|t| t < Duration::from_millis(config.failover_redial_ms));
    backoff(config.reconnect_initial_ms, config.reconnect_max_ms, if fast { 0 } else { round })
}

/// Exponential backoff with jitter: uniform in [d/2, d] where d doubles per
/// attempt up to `max_ms`, so a fleet of agents does not redial in step.
pub fn backoff(initial_ms: u64, max_ms: u64, attempt: u32) -> Duration {
    let d = initial_ms.max(1).saturating_mul(1u64 << attempt.min(20)).min(max_ms.max(1));
    Duration::from_millis(d / 2 + fastrand::u64(0..=d / 2))
}

/// The agent id kept in `<data>/agent-id`, created on first start.
fn agent_id(data_dir: &Path) -> Result<String, AgentError> {
    let path = data_dir.join("agent-id");
    if let Ok(id) = std::fs::read_to_string(&path) {
        let id = id.trim();
        if !id.is_empty() {
            return Ok(id.to_owned());
        }
    }
    let id = format!("agent-{:016x}{:016x}", fastrand::u64(..), fastrand::u64(..));
    let tmp = data_dir.join("agent-id.tmp");
    std::fs::write(&tmp, &id).map_err(io_ctx(format!("writing {}", tmp.display())))?;
    std::fs::rename(&tmp, &path).map_err(io_ctx(format!("writing {}", path.display())))?;
    Ok(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redials_fast_right_after_losing_a_registered_session_then_backs_off() {
        let config = AgentConfig::default();
        let first = Duration::from_millis(config.reconnect_initial_ms);
        let window = Duration::from_millis(config.failover_redial_ms);
        for round in [0, 3, 8, 20] {
            // Within the window: the first delay, whatever the round.
            assert!(redial_delay(&config, round, Some(window / 2)) <= first);
            // Never registered, or the window passed: the backoff of the round.
            let slow = Duration::from_millis(config.reconnect_initial_ms << round.min(20))
                .min(Duration::from_millis(config.reconnect_max_ms))
                / 2;
            assert!(redial_delay(&config, round, None) >= slow);
            assert!(redial_delay(&config, round, Some(window * 2)) >= slow);
        }
        let off = AgentConfig { failover_redial_ms: 0, ..AgentConfig::default() };
        assert!(redial_delay(&off, 8, Some(Duration::ZERO)) >= Duration::from_millis(off.reconnect_max_ms) / 2);
    }

    #[test]
    fn managers_are_a_comma_separated_list() {
        let config = AgentConfig { manager: "http://a:1, b:2,,https://c:3".to_owned(), ..AgentConfig::default() };
        assert_eq!(config.managers(), vec!["http://a:1", "http://b:2", "https://c:3"]);
        assert_eq!(AgentConfig::default().managers(), vec!["http://127.0.0.1:7070"]);
    }

    #[test]
    fn backoff_grows_and_is_capped() {
        for attempt in 0..30 {
            let d = backoff(100, 5000, attempt).as_millis() as u64;
            let full = (100u64 << attempt.min(20)).min(5000);
            assert!(d >= full / 2 && d <= full, "attempt {attempt}: {d} not in [{}, {full}]", full / 2);
        }
    }
}

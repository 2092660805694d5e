//! The [`Provider`] impl: what the host manager asks of the provider
//! (start, launch, kill, acknowledge, reconcile), each a change to the
//! provider's state and the calls it queues.

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use paceline_model::run::{LaunchRequest, RunState};
use paceline_proto::mesos::v1 as mesos;
use paceline_proto::mesos::v1::scheduler::call;
use tokio::sync::mpsc;
use tracing::{debug, warn};

use super::{
    Inner, MesosProvider, NAME, Outgoing, PendingLaunch, Reconciling, Run, STORE_KEY, agent_id, call_of, convert, lock,
};
use crate::error::ProviderError;
use crate::provider::{LogChunk, LogStream, Provider, ProviderEvent};

#[async_trait]
impl Provider for MesosProvider {
    fn name(&self) -> &'static str {
        NAME
    }

    async fn start(&self, events: mpsc::Sender<ProviderEvent>) -> Result<(), ProviderError> {
        *lock(&self.inner.events) = Some(events);
        if let Some(store) = &self.inner.store {
            match store.get_provider_id(STORE_KEY).await {
                Ok(id) => self.inner.st().framework_id = id,
                Err(e) => warn!(error = %e, "mesos: stored framework id not read; registering anew"),
            }
            if let Ok(hosts) = store.list_hosts().await {
                let mut st = self.inner.st();
                for h in hosts.into_iter().filter(|h| h.provider == NAME) {
                    if let Some(aid) = h.agent_id {
                        st.known_hostnames.insert(aid, h.hostname);
                    }
                }
            }
        }
        let Some(rx) = lock(&self.inner.calls_rx).take() else {
            return Err(ProviderError::NotRunning(NAME));
        };
        let mut tasks = lock(&self.inner.tasks);
        tasks.push(tokio::spawn(self.inner.clone().run_calls(rx)));
        tasks.push(tokio::spawn(self.inner.clone().run_driver()));
        tasks.push(tokio::spawn(self.inner.clone().run_ticker()));
        Ok(())
    }

    async fn launch(&self, host: &str, runs: Vec<LaunchRequest>) -> Result<(), ProviderError> {
        let mut rejected = Vec::new();
        let (accept, reject_on_failure) = {
            let mut st = self.inner.st();
            if !st.subscribed {
                return Err(ProviderError::NotRunning(NAME));
            }
            let aid = st
                .by_host
                .get(host)
                .cloned()
                .filter(|a| st.agents.get(a).is_some_and(|a| a.alive))
                .ok_or_else(|| ProviderError::HostNotConnected { provider: NAME, host: host.to_string() })?;
            st.last_demand = Some(Instant::now());
            let mut fresh = Vec::with_capacity(runs.len());
            for r in runs {
                if st.runs.contains_key(&r.run_id) {
                    continue; // idempotent by run id
                }
                if let Err(error) = convert::check_launch(&r) {
                    rejected.push(ProviderEvent::LaunchRejected { host: host.to_string(), run_id: r.run_id, error });
                    continue;
                }
                if r.spec.health_check.is_some() {
                    debug!(
                        run_id = r.run_id,
                        "mesos: health checks are not passed to Mesos; RUNNING counts as healthy"
                    );
                }
                st.runs.insert(
                    r.run_id.clone(),
                    Run {
                        agent_id: aid.clone(),
                        task_id: r.task_id.clone(),
                        resources: r.spec.resources,
                        ports: BTreeMap::new(),
                        seq: 0,
                        state: None,
                        terminal: false,
                        unacked: VecDeque::new(),
                        acked: VecDeque::new(),
                    },
                );
                fresh.push(r);
            }
            if fresh.is_empty() {
                (None, Vec::new())
            } else if let Some(c) = self.inner.build_accept(&mut st, &aid, &fresh) {
                let reject: Vec<(String, String)> =
                    fresh.iter().map(|r| (host.to_string(), r.run_id.clone())).collect();
                (Some(c), reject)
            } else {
                // Wait for an offer; ask for one.
                let deadline = Instant::now() + self.inner.config.launch_offer_wait;
                st.pending
                    .entry(aid)
                    .or_insert_with(|| PendingLaunch { host: host.to_string(), runs: Vec::new(), deadline })
                    .runs
                    .extend(fresh);
                st.suppressed = false;
                let mut c = call_of(call::Type::Revive);
                c.revive = Some(call::Revive { roles: vec![self.inner.config.role.clone()] });
                self.inner.queue(c);
                (None, Vec::new())
            }
        };
        self.inner.emit(rejected).await;
        if let Some(c) = accept {
            // In order with the other calls; a failure rejects the runs.
            let _ = self.inner.calls.send(Outgoing { call: c, reject_on_failure });
        }
        Ok(())
    }

    async fn kill(&self, host: &str, run_id: &str, grace_override: Option<Duration>) -> Result<(), ProviderError> {
        let mut synthesized = Vec::new();
        let c = {
            let mut st = self.inner.st();
            let mut was_pending = false;
            for p in st.pending.values_mut() {
                let before = p.runs.len();
                p.runs.retain(|r| r.run_id != run_id);
                was_pending |= p.runs.len() != before;
            }
            st.pending.retain(|_, p| !p.runs.is_empty());
            if was_pending {
                // It never reached Mesos: it ends here.
                synthesized.extend(Inner::synth(
                    &mut st,
                    run_id,
                    host,
                    RunState::Killed,
                    "KILLED_BY_REQUEST",
                    "killed before an offer came",
                ));
                None
            } else if !st.subscribed {
                return Err(ProviderError::NotRunning(NAME));
            } else {
                let aid = st.runs.get(run_id).map(|r| r.agent_id.clone()).or_else(|| st.by_host.get(host).cloned());
                let mut c = call_of(call::Type::Kill);
                c.kill = Some(call::Kill {
                    task_id: mesos::TaskId { value: run_id.to_string() },
                    agent_id: aid.map(|a| agent_id(&a)),
                    kill_policy: grace_override.map(|g| mesos::KillPolicy {
                        grace_period: Some(mesos::DurationInfo {
                            nanoseconds: g.as_nanos().min(i64::MAX as u128) as i64,
                        }),
                    }),
                });
                Some(c)
            }
        };
        self.inner.emit(synthesized).await;
        if let Some(c) = c {
            self.inner.queue(c);
        }
        Ok(())
    }

    async fn acknowledge(&self, _host: &str, run_id: &str, seq: u64) -> Result<(), ProviderError> {
        let mut acks = Vec::new();
        {
            let mut st = self.inner.st();
            let Some(run) = st.runs.get_mut(run_id) else { return Ok(()) };
            while run.unacked.front().is_some_and(|(s, _)| *s <= seq) {
                if let Some((_, uuid)) = run.unacked.pop_front() {
                    if run.acked.len() >= 8 {
                        run.acked.pop_front();
                    }
                    run.acked.push_back(uuid.clone());
                    acks.push((run.agent_id.clone(), uuid));
                }
            }
            if run.terminal && run.unacked.is_empty() && run.seq <= seq {
                st.runs.remove(run_id);
            }
        }
        for (aid, uuid) in acks {
            let mut c = call_of(call::Type::Acknowledge);
            c.acknowledge = Some(call::Acknowledge {
                agent_id: agent_id(&aid),
                task_id: mesos::TaskId { value: run_id.to_string() },
                uuid,
            });
            self.inner.queue(c);
        }
        Ok(())
    }

    async fn reconcile(&self, _host: &str, expected_run_ids: Vec<String>) -> Result<(), ProviderError> {
        let mut st = self.inner.st();
        let now = Instant::now();
        let r = st.reconciling.get_or_insert_with(|| Reconciling {
            runs: HashSet::new(),
            next_at: now,
            backoff: Duration::from_secs(1),
        });
        r.runs.extend(expected_run_ids);
        r.next_at = now;
        Ok(())
    }

    async fn read_log(
        &self,
        _host: &str,
        _run_id: &str,
        _stream: LogStream,
        _offset: u64,
        _max_bytes: u64,
    ) -> Result<LogChunk, ProviderError> {
        Err(ProviderError::Unsupported { provider: NAME, what: "read_log (the agent's /files API is not used)" })
    }
}

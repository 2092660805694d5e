//! The subscription: SUBSCRIBE with our framework id, the RecordIO event
//! stream read until it ends or goes silent, resubscription with backoff
//! over the masters (following redirects and ZooKeeper), and each event
//! handed to the module that owns it.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http_body_util::BodyExt;
use paceline_proto::mesos::v1 as mesos;
use paceline_proto::mesos::v1::scheduler::{Call, Event, call, event};
use tracing::{debug, info, warn};

use super::calls::base_of_location;
use super::{Inner, MesosError, Reconciling, STORE_KEY, call_of, decode_event, encode_call, recordio, zk};

impl Inner {
    pub(super) fn subscribe_call(&self) -> Call {
        let st = self.st();
        let id = st.framework_id.clone().map(|value| mesos::FrameworkId { value });
        use mesos::framework_info::capability::Type as Cap;
        let caps = [Cap::MultiRole, Cap::PartitionAware, Cap::GpuResources, Cap::TaskKillingState];
        #[allow(deprecated)]
        let info = mesos::FrameworkInfo {
            role: None,
            user: self.config.user.clone(),
            name: self.config.framework_name.clone(),
            id: id.clone(),
            failover_timeout: Some(self.config.failover_timeout.as_secs_f64()),
            checkpoint: Some(true),
            roles: vec![self.config.role.clone()],
            hostname: None,
            principal: self.config.principal.clone(),
            webui_url: None,
            capabilities: caps.iter().map(|c| mesos::framework_info::Capability { r#type: Some(*c as i32) }).collect(),
            labels: None,
        };
        Call {
            framework_id: id,
            r#type: Some(call::Type::Subscribe as i32),
            subscribe: Some(call::Subscribe { framework_info: info, suppressed_roles: Vec::new() }),
            ..Call::default()
        }
    }

    /// The subscription loop: subscribe, read events, resubscribe with backoff.
    pub(super) async fn run_driver(self: Arc<Self>) {
        let mut backoff = self.config.backoff_initial;
        let mut next_master = 0usize;
        loop {
            if self.st().stopped {
                return;
            }
            let base = {
                let st = self.st();
                match st.leader.clone() {
                    Some(l) => l,
                    None if self.config.masters.is_empty() => {
                        warn!("mesos: no masters configured");
                        return;
                    }
                    None => {
                        self.config.masters[next_master % self.config.masters.len()].trim_end_matches('/').to_string()
                    }
                }
            };
            // `zk://hosts/path`: ask ZooKeeper which master leads.
            let base = match zk::ZkUrl::parse(&base) {
                None => base,
                Some(parsed) => {
                    let found = match parsed {
                        Ok(url) => zk::leading_master(&url, self.config.backoff_max.max(Duration::from_secs(5))).await,
                        Err(e) => Err(e),
                    };
                    match found {
                        Ok(leader) => {
                            info!(from = base, master = leader, "mesos: ZooKeeper names the leading master");
                            leader
                        }
                        Err(e) => {
                            warn!(master = base, error = e, "mesos: cannot find the leading master; retrying");
                            next_master += 1;
                            tokio::time::sleep(backoff).await;
                            backoff = (backoff * 2).min(self.config.backoff_max);
                            continue;
                        }
                    }
                }
            };
            let result = self.subscription(&base).await;
            let was_subscribed = {
                let mut st = self.st();
                let was = st.subscribed;
                if was {
                    st.disconnected_at = Some(Instant::now());
                }
                st.subscribed = false;
                st.stream_id = None;
                st.registration_open = false;
                st.register_after = None;
                for a in st.agents.values_mut() {
                    // The master rescinds a disconnected framework's offers.
                    a.offers.clear();
                }
                was
            };
            match result {
                Err(MesosError::Redirect(leader)) => {
                    info!(from = base, to = leader, "mesos: following the redirect to the leading master");
                    self.st().leader = Some(leader);
                    continue;
                }
                Err(MesosError::Master(msg)) => {
                    warn!(message = msg, "mesos: the master ended our subscription; not resubscribing");
                    self.st().stopped = true;
                    return;
                }
                Err(MesosError::Stopped) => return,
                Err(MesosError::Resubscribe) => {
                    // To the leader a 307 named, if one did; at once.
                    info!("mesos: resubscribing after a refused call");
                    tokio::time::sleep(self.config.backoff_initial).await;
                    continue;
                }
                Err(e) => {
                    warn!(master = base, error = %e, "mesos: subscription ended; resubscribing");
                    // Try another master next time (a leader we were sent to may be gone).
                    self.st().leader = None;
                    next_master += 1;
                }
                Ok(()) => {}
            }
            if was_subscribed {
                backoff = self.config.backoff_initial;
            }
            let jitter = Duration::from_millis(fastrand::u64(0..=backoff.as_millis() as u64 / 4 + 1));
            tokio::time::sleep(backoff + jitter).await;
            backoff = (backoff * 2).min(self.config.backoff_max);
        }
    }

    /// One subscription, until it ends.
    pub(super) async fn subscription(&self, base: &str) -> Result<(), MesosError> {
        let body = encode_call(&self.subscribe_call(), self.config.encoding)?;
        let req = self.request(base, body, None)?;
        let resp = tokio::time::timeout(self.config.call_timeout, self.client.request(req))
            .await
            .map_err(|_| MesosError::Http(format!("no answer within {:?}", self.config.call_timeout)))?
            .map_err(|e| MesosError::Http(e.to_string()))?;
        let status = resp.status().as_u16();
        if status == 307 {
            let loc = resp.headers().get(hyper::header::LOCATION).and_then(|v| v.to_str().ok()).unwrap_or_default();
            return Err(MesosError::Redirect(base_of_location(loc)));
        }
        if status != 200 {
            let body = resp.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
            return Err(MesosError::Status { status, body: String::from_utf8_lossy(&body).into_owned() });
        }
        let stream_id = resp.headers().get("Mesos-Stream-Id").and_then(|v| v.to_str().ok()).map(str::to_string);
        {
            let mut st = self.st();
            st.leader = Some(base.to_string());
            st.stream_id = stream_id;
        }
        let mut body = resp.into_body();
        let mut decoder = recordio::Decoder::new();
        loop {
            // Pending records first.
            while let Some(record) = decoder.next_record()? {
                let at = Instant::now();
                let ev = decode_event(&record, self.config.encoding)?;
                if ev.offers.is_some() {
                    self.st().first_offers_at.get_or_insert(at);
                }
                self.on_event(ev).await?;
            }
            let silence = {
                let st = self.st();
                if st.stopped {
                    return Err(MesosError::Stopped);
                }
                st.heartbeat_interval.map_or(self.config.call_timeout * 3, |h| h * 5)
            };
            tokio::select! {
                frame = tokio::time::timeout(silence, body.frame()) => match frame {
                    Err(_) => return Err(MesosError::Silent(silence)),
                    Ok(None) => {
                        decoder.finish()?;
                        return Err(MesosError::Closed);
                    }
                    Ok(Some(Err(e))) => return Err(MesosError::Http(e.to_string())),
                    Ok(Some(Ok(frame))) => {
                        if let Ok(data) = frame.into_data() {
                            decoder.push(&data);
                        }
                    }
                },
                () = self.restart.notified() => {
                    let mut st = self.st();
                    if st.restart_stream.is_some() && st.restart_stream == st.stream_id {
                        st.restart_stream = None;
                        return Err(MesosError::Resubscribe);
                    }
                }
            }
        }
    }

    pub(super) async fn on_event(&self, ev: Event) -> Result<(), MesosError> {
        let kind = ev.r#type.and_then(|t| event::Type::try_from(t).ok()).unwrap_or(event::Type::Unknown);
        match kind {
            event::Type::Subscribed => {
                let s = ev.subscribed.ok_or(MesosError::MissingPayload("SUBSCRIBED"))?;
                self.on_subscribed(s).await;
            }
            event::Type::Heartbeat => {}
            event::Type::Offers => {
                let o = ev.offers.ok_or(MesosError::MissingPayload("OFFERS"))?;
                let out = self.on_offers(o.offers);
                self.emit(out).await;
            }
            event::Type::Rescind => {
                let r = ev.rescind.ok_or(MesosError::MissingPayload("RESCIND"))?;
                let mut st = self.st();
                for a in st.agents.values_mut() {
                    a.offers.remove(&r.offer_id.value);
                }
            }
            event::Type::Update => {
                let u = ev.update.ok_or(MesosError::MissingPayload("UPDATE"))?;
                let out = self.on_update(u.status);
                self.emit(out).await;
            }
            event::Type::Failure => {
                let f = ev.failure.ok_or(MesosError::MissingPayload("FAILURE"))?;
                let out = self.on_failure(f);
                self.emit(out).await;
            }
            event::Type::InverseOffers => {
                let io = ev.inverse_offers.ok_or(MesosError::MissingPayload("INVERSE_OFFERS"))?;
                let out = self.on_inverse_offers(io.inverse_offers);
                self.emit(out).await;
            }
            event::Type::RescindInverseOffer => {
                let r = ev.rescind_inverse_offer.ok_or(MesosError::MissingPayload("RESCIND_INVERSE_OFFER"))?;
                let mut st = self.st();
                for a in st.agents.values_mut() {
                    a.inverse_offers.retain(|id| *id != r.inverse_offer_id.value);
                }
            }
            event::Type::Error => {
                let msg = ev.error.map(|e| e.message).unwrap_or_default();
                return Err(MesosError::Master(msg));
            }
            event::Type::Message | event::Type::UpdateOperationStatus => {
                debug!(kind = kind.as_str_name(), "mesos: event ignored");
            }
            event::Type::Unknown => return Err(MesosError::UnknownEvent(ev.r#type.unwrap_or(0))),
        }
        Ok(())
    }

    pub(super) async fn on_subscribed(&self, s: event::Subscribed) {
        let id = s.framework_id.value;
        let changed = {
            let mut st = self.st();
            let changed = st.framework_id.as_deref() != Some(id.as_str());
            st.framework_id = Some(id.clone());
            st.subscribed = true;
            st.heartbeat_interval = s
                .heartbeat_interval_seconds
                .filter(|h| h.is_finite() && *h > 0.0)
                .map(|h| Duration::from_secs_f64(h.min(3600.0)));
            let now = Instant::now();
            st.last_subscribed = Some(now);
            st.register_after = Some(now + self.config.registration_delay);
            st.next_implicit = Some(now + self.config.reconcile_interval);
            st.suppressed = false;
            // Every run the master should know: launched (ACCEPT sent) and not ended.
            let queued: HashSet<&str> =
                st.pending.values().flat_map(|p| p.runs.iter().map(|r| r.run_id.as_str())).collect();
            let runs: HashSet<String> = st
                .runs
                .iter()
                .filter(|(id, r)| !r.terminal && !queued.contains(id.as_str()))
                .map(|(id, _)| id.clone())
                .collect();
            st.reconciling = Some(Reconciling { runs, next_at: now, backoff: Duration::from_secs(1) });
            changed
        };
        info!(framework_id = id, "mesos: subscribed");
        if changed
            && let Some(store) = &self.store
            && let Err(e) = store.put_provider_id(STORE_KEY, &id).await
        {
            warn!(error = %e, "mesos: framework id not stored; a restart will register a new framework");
        }
        // Implicit reconciliation: the master reports every task it knows of ours.
        let mut c = call_of(call::Type::Reconcile);
        c.reconcile = Some(call::Reconcile { tasks: Vec::new() });
        self.queue(c);
        self.reconcile_due();
    }
}

//! Periodic work, every 50 ms: registrations once the delay after
//! SUBSCRIBED has passed, host heartbeats, launches that found no offer in
//! time, declining old offers, idle suppression, implicit reconciliation.

use std::sync::Arc;
use std::time::{Duration, Instant};

use paceline_proto::mesos::v1 as mesos;
use paceline_proto::mesos::v1::scheduler::call;

use super::{Inner, St, call_of, filters};
use crate::provider::ProviderEvent;

impl Inner {
    /// Periodic work: registrations after the delay, heartbeats, expired
    /// launches, old offers, idle suppression, reconciliation.
    pub(super) async fn run_ticker(self: Arc<Self>) {
        let period = Duration::from_millis(50);
        let mut every = tokio::time::interval(period);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            every.tick().await;
            let out = self.tick(Instant::now());
            self.emit(out).await;
            self.reconcile_due();
        }
    }

    pub(super) fn tick(&self, now: Instant) -> Vec<ProviderEvent> {
        let mut out = Vec::new();
        let mut calls = Vec::new();
        {
            let mut st = self.st();
            if st.stopped {
                return out;
            }
            // Registrations open once reconciliation had its chance.
            if st.subscribed && !st.registration_open && st.register_after.is_some_and(|t| t <= now) {
                st.registration_open = true;
                let agents: Vec<String> = st.agents.keys().cloned().collect();
                for aid in agents {
                    self.maybe_register(&mut st, &aid, &mut out);
                }
            }
            // Agents alive as far as the master says, while we are subscribed
            // or away for less than the failover timeout (our tasks live on).
            let within_failover = st.subscribed
                || st.disconnected_at.is_some_and(|t| now.duration_since(t) < self.config.failover_timeout);
            if within_failover && st.last_heartbeat.is_none_or(|t| now.duration_since(t) >= self.config.host_heartbeat)
            {
                st.last_heartbeat = Some(now);
                for a in st.agents.values().filter(|a| a.alive && a.registered_total.is_some()) {
                    out.push(ProviderEvent::Heartbeat { host: a.hostname.clone() });
                }
            }
            // Launches that found no offer in time.
            let expired: Vec<String> =
                st.pending.iter().filter(|(_, p)| p.deadline <= now).map(|(a, _)| a.clone()).collect();
            for aid in expired {
                if let Some(p) = st.pending.remove(&aid) {
                    for r in p.runs {
                        if st.runs.get(&r.run_id).is_some_and(|x| x.seq == 0) {
                            st.runs.remove(&r.run_id);
                            out.push(ProviderEvent::LaunchRejected {
                                host: p.host.clone(),
                                run_id: r.run_id,
                                error: format!(
                                    "resources: no offer of agent {aid} held them within {} ms",
                                    self.config.launch_offer_wait.as_millis()
                                ),
                            });
                        }
                    }
                }
            }
            if st.subscribed {
                // Unused offers go back.
                let hold = self.config.offer_hold;
                let St { agents, pending, .. } = &mut *st;
                let mut declined = Vec::new();
                for (aid, a) in agents.iter_mut() {
                    if pending.contains_key(aid) {
                        continue;
                    }
                    let old: Vec<String> = a
                        .offers
                        .iter()
                        .filter(|(_, o)| now.duration_since(o.at) >= hold)
                        .map(|(id, _)| id.clone())
                        .collect();
                    for id in old {
                        a.offers.remove(&id);
                        declined.push(mesos::OfferId { value: id });
                    }
                }
                if !declined.is_empty() {
                    let mut c = call_of(call::Type::Decline);
                    c.decline =
                        Some(call::Decline { offer_ids: declined, filters: filters(self.config.decline_refuse) });
                    calls.push(c);
                }
                // No demand for a while: stop offers until a launch revives them.
                if let Some(idle) = self.config.idle_suppress
                    && !st.suppressed
                    && st.pending.is_empty()
                    && st.last_demand.is_none_or(|t| now.duration_since(t) >= idle)
                    && st.last_subscribed.is_some_and(|t| now.duration_since(t) >= idle)
                {
                    st.suppressed = true;
                    let mut c = call_of(call::Type::Suppress);
                    c.suppress = Some(call::Suppress { roles: vec![self.config.role.clone()] });
                    calls.push(c);
                }
                if st.next_implicit.is_some_and(|t| t <= now) {
                    st.next_implicit = Some(now + self.config.reconcile_interval);
                    let mut c = call_of(call::Type::Reconcile);
                    c.reconcile = Some(call::Reconcile { tasks: Vec::new() });
                    calls.push(c);
                }
            }
        }
        for c in calls {
            self.queue(c);
        }
        out
    }
}

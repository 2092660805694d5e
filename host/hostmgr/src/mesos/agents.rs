//! Agents failing and going into maintenance: FAILURE disconnects the
//! host and its runs are LOST; INVERSE_OFFERS ask the manager to drain the
//! host, and are accepted once none of our runs is left there.

use paceline_model::run::RunState;
use paceline_proto::mesos::v1 as mesos;
use paceline_proto::mesos::v1::scheduler::{call, event};
use tracing::{info, warn};

use super::{Inner, St, call_of};
use crate::provider::ProviderEvent;

impl Inner {
    pub(super) fn on_failure(&self, f: event::Failure) -> Vec<ProviderEvent> {
        let mut out = Vec::new();
        let Some(aid) = f.agent_id.map(|a| a.value) else { return out };
        if f.executor_id.is_some() {
            // An executor ended; its tasks' own updates follow.
            return out;
        }
        let mut st = self.st();
        let Some(a) = st.agents.get_mut(&aid) else { return out };
        a.alive = false;
        a.offers.clear();
        a.registered_total = None;
        let host = a.hostname.clone();
        warn!(host, agent_id = aid, "mesos: agent failed; its runs are lost");
        out.push(ProviderEvent::HostDisconnected { host: host.clone(), reason: "mesos agent failed".into() });
        let runs: Vec<String> =
            st.runs.iter().filter(|(_, r)| r.agent_id == aid && !r.terminal).map(|(id, _)| id.clone()).collect();
        for id in runs {
            out.extend(Self::synth(
                &mut st,
                &id,
                &host,
                RunState::Lost,
                "AGENT_FAILED",
                "the Mesos master reported the agent failed",
            ));
        }
        out
    }

    pub(super) fn on_inverse_offers(&self, ios: Vec<mesos::InverseOffer>) -> Vec<ProviderEvent> {
        let mut out = Vec::new();
        let mut st = self.st();
        for io in ios {
            let Some(aid) = io.agent_id.map(|a| a.value) else { continue };
            let Some(a) = st.agents.get_mut(&aid) else {
                // Not a host of ours: nothing of ours runs there.
                let mut c = call_of(call::Type::AcceptInverseOffers);
                c.accept_inverse_offers =
                    Some(call::AcceptInverseOffers { inverse_offer_ids: vec![io.id], filters: None });
                self.queue(c);
                continue;
            };
            a.inverse_offers.push(io.id.value.clone());
            info!(host = a.hostname, "mesos: maintenance scheduled (inverse offer); draining");
            out.push(ProviderEvent::HostDrainRequested {
                host: a.hostname.clone(),
                reason: format!("Mesos maintenance from {} ns", io.unavailability.start.nanoseconds),
            });
            self.maybe_accept_inverse(&mut st, &aid);
        }
        out
    }

    /// Accepts an agent's inverse offers once none of our runs is left there.
    pub(super) fn maybe_accept_inverse(&self, st: &mut St, aid: &str) {
        let busy = st.runs.values().any(|r| r.agent_id == aid && !r.terminal);
        let Some(a) = st.agents.get_mut(aid) else { return };
        if busy || a.inverse_offers.is_empty() {
            return;
        }
        let ids = std::mem::take(&mut a.inverse_offers);
        let mut c = call_of(call::Type::AcceptInverseOffers);
        c.accept_inverse_offers = Some(call::AcceptInverseOffers {
            inverse_offer_ids: ids.into_iter().map(|value| mesos::OfferId { value }).collect(),
            filters: None,
        });
        self.queue(c);
    }
}

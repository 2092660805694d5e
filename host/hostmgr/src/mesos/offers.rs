//! Offers and the inventory: offers held per agent, an agent registered
//! as a host (capacity: its offers plus our runs on it) once registration
//! is open, launches waiting for an offer, and the ACCEPT that carves
//! runs from an agent's offers.

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};

use paceline_model::Resources;
use paceline_model::run::LaunchRequest;
use paceline_proto::mesos::v1 as mesos;
use paceline_proto::mesos::v1::scheduler::{Call, call};
use tracing::{info, warn};

use super::{Agent, HeldOffer, Inner, Outgoing, St, call_of, convert, filters};
use crate::provider::{HostRegistration, ProviderEvent, RunningRun};

impl Inner {
    pub(super) fn registration(st: &St, agent_id: &str, total: Resources) -> Option<HostRegistration> {
        let a = st.agents.get(agent_id)?;
        Some(HostRegistration {
            hostname: a.hostname.clone(),
            agent_id: agent_id.to_string(),
            total,
            attributes: a.attributes.clone(),
            running: st
                .runs
                .iter()
                .filter(|(_, r)| r.agent_id == agent_id && !r.terminal)
                .map(|(id, r)| RunningRun {
                    run_id: id.clone(),
                    task_id: r.task_id.clone(),
                    resources: r.resources,
                    gpu: Default::default(),
                })
                .collect(),
            // Mesos reports a count of GPUs, not devices.
            gpus: Vec::new(),
        })
    }

    /// Capacity of an agent: what its held offers hold plus what our runs hold.
    pub(super) fn capacity(st: &St, agent_id: &str, role: &str) -> Resources {
        let Some(a) = st.agents.get(agent_id) else { return Resources::ZERO };
        let mut total = Resources::ZERO;
        for o in a.offers.values() {
            total = total.saturating_add(&convert::offer_resources(&o.offer, role));
        }
        for r in st.runs.values().filter(|r| r.agent_id == agent_id && !r.terminal) {
            total = total.saturating_add(&r.resources);
        }
        total
    }

    /// (Re)registers an agent whose capacity changed, once registration is open.
    pub(super) fn maybe_register(&self, st: &mut St, agent_id: &str, out: &mut Vec<ProviderEvent>) {
        if !st.registration_open {
            return;
        }
        let total = Self::capacity(st, agent_id, &self.config.role);
        let Some(a) = st.agents.get_mut(agent_id) else { return };
        if !a.alive || a.offers.is_empty() || a.registered_total == Some(total) {
            return;
        }
        a.registered_total = Some(total);
        if let Some(reg) = Self::registration(st, agent_id, total) {
            out.push(ProviderEvent::HostRegistered(reg));
        }
    }

    pub(super) fn on_offers(&self, offers: Vec<mesos::Offer>) -> Vec<ProviderEvent> {
        let mut out = Vec::new();
        let mut touched: Vec<String> = Vec::new();
        let mut seen: HashSet<String> = HashSet::new();
        let now = Instant::now();
        let mut st = self.st();
        st.offers_seen += offers.len() as u64;
        for offer in offers {
            let aid = offer.agent_id.value.clone();
            if offer.hostname.is_empty() || aid.is_empty() {
                warn!(offer = offer.id.value, "mesos: offer without agent id or hostname ignored");
                continue;
            }
            if let Some(previous) = st.by_host.get(&offer.hostname)
                && *previous != aid
            {
                // The agent restarted with a new id: the host's old runs are gone with it.
                info!(host = offer.hostname, old = previous.as_str(), new = aid.as_str(), "mesos: agent id changed");
            }
            st.by_host.insert(offer.hostname.clone(), aid.clone());
            st.known_hostnames.insert(aid.clone(), offer.hostname.clone());
            let attrs = convert::attributes(&offer.attributes);
            let a = st.agents.entry(aid.clone()).or_insert_with(|| Agent {
                hostname: offer.hostname.clone(),
                attributes: attrs.clone(),
                offers: BTreeMap::new(),
                registered_total: None,
                alive: true,
                inverse_offers: Vec::new(),
            });
            if a.attributes != attrs || a.hostname != offer.hostname {
                a.attributes = attrs;
                a.hostname = offer.hostname.clone();
                a.registered_total = None;
            }
            if !a.alive {
                a.alive = true;
                a.registered_total = None;
            }
            a.offers.insert(offer.id.value.clone(), HeldOffer { offer, at: now });
            if seen.insert(aid.clone()) {
                touched.push(aid);
            }
        }
        for aid in &touched {
            self.maybe_register(&mut st, aid, &mut out);
        }
        // Launches waiting for these agents.
        let waiting: Vec<String> = touched.into_iter().filter(|a| st.pending.contains_key(a)).collect();
        for aid in waiting {
            if let Some(p) = st.pending.remove(&aid) {
                match self.build_accept(&mut st, &aid, &p.runs) {
                    Some(c) => {
                        let reject = p.runs.iter().map(|r| (p.host.clone(), r.run_id.clone())).collect();
                        let _ = self.calls.send(Outgoing { call: c, reject_on_failure: reject });
                    }
                    None => {
                        st.pending.insert(aid, p);
                    }
                }
            }
        }
        out
    }

    /// ACCEPT of every held offer of `agent_id` launching `runs`, if they fit.
    /// Takes the offers and records the runs' resources and ports.
    pub(super) fn build_accept(&self, st: &mut St, agent_id: &str, runs: &[LaunchRequest]) -> Option<Call> {
        let a = st.agents.get(agent_id)?;
        if a.offers.is_empty() {
            return None;
        }
        let mut carver = convert::Carver::new(a.offers.values().map(|h| &h.offer), &self.config.role);
        let mut infos = Vec::with_capacity(runs.len());
        let mut ports = Vec::with_capacity(runs.len());
        for r in runs {
            let carved = carver.carve(&r.spec.resources)?;
            let (info, p) = convert::task_info(r, agent_id, carved);
            infos.push(info);
            ports.push(p);
        }
        let a = st.agents.get_mut(agent_id)?;
        let offer_ids: Vec<mesos::OfferId> =
            std::mem::take(&mut a.offers).into_keys().map(|value| mesos::OfferId { value }).collect();
        for (r, p) in runs.iter().zip(ports) {
            if let Some(run) = st.runs.get_mut(&r.run_id) {
                run.ports = p;
            }
        }
        let mut c = call_of(call::Type::Accept);
        c.accept = Some(call::Accept {
            offer_ids,
            operations: vec![mesos::offer::Operation {
                r#type: Some(mesos::offer::operation::Type::Launch as i32),
                launch: Some(mesos::offer::operation::Launch { task_infos: infos }),
            }],
            // The rest of the offers comes back at the next allocation.
            filters: filters(Duration::ZERO),
        });
        Some(c)
    }
}

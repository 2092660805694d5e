//! The host inventory: host slots and records, the subscriber, usage
//! measurements, what the API and "why pending" read, and maintenance.

use super::*;

impl State {
    pub(super) fn host_slot(&mut self, name: &str, now: u64) -> u32 {
        if let Some(&i) = self.by_name.get(name) {
            return i;
        }
        let i = self.hosts.len() as u32;
        self.by_name.insert(name.to_string(), i);
        self.hosts.push(HostEntry {
            view: Arc::new(HostView::new(name, Resources::ZERO)),
            agent_id: None,
            state: MaintenanceState::Up,
            liveness: Liveness::Never,
            last_seen_ms: now,
            registered_at_ms: now,
            lease: None,
            runs: HashSet::new(),
            label_counts: HashMap::new(),
            durable: false,
            reregister_asked_ms: None,
            provider_drained: false,
        });
        self.seen_at(now);
        i
    }

    /// Loads a stored record (at start, before any registration).
    pub fn load_record(&mut self, r: HostRecord, now: u64) {
        let i = self.host_slot(&r.hostname, now);
        let h = &mut self.hosts[i as usize];
        let view = Arc::make_mut(&mut h.view);
        view.total = r.total;
        view.attributes = r.attributes;
        h.agent_id = r.agent_id;
        h.state = r.state;
        h.registered_at_ms = r.registered_at_ms;
        h.durable = true;
        self.set_devices(i, &r.gpus);
    }

    /// Sets host `i`'s GPU devices (the listed ones, or devices 0..n of its
    /// total and `gpu_model` attribute) and what its live runs hold of them.
    pub(super) fn set_devices(&mut self, i: u32, listed: &[GpuDevice]) {
        let h = &self.hosts[i as usize];
        let devices = gpu::devices_of(&h.view.total, listed, h.view.attributes.get("gpu_model").map(String::as_str));
        let unchanged =
            h.view.gpus.len() == devices.len() && h.view.gpus.iter().zip(&devices).all(|(s, d)| s.device == *d);
        if unchanged {
            return;
        }
        let mut slots: Vec<GpuSlot> = devices.into_iter().map(|device| GpuSlot { device, used_milli: 0 }).collect();
        for run in &h.runs {
            if let Some(r) = self.runs.get(run) {
                gpu::apply(&mut slots, &r.gpu, false);
            }
        }
        let h = &mut self.hosts[i as usize];
        Arc::make_mut(&mut h.view).gpus = slots;
    }

    /// The durable record of a host as it is now.
    pub fn record_of(&self, host: &str, now: u64) -> Option<HostRecord> {
        self.by_name.get(host).map(|&i| self.record(i, now))
    }

    pub(super) fn record(&self, i: u32, now: u64) -> HostRecord {
        let h = &self.hosts[i as usize];
        HostRecord {
            hostname: h.view.name.clone(),
            provider: self.provider.to_string(),
            agent_id: h.agent_id.clone(),
            address: None,
            total: h.view.total,
            attributes: h.view.attributes.clone(),
            gpus: h.view.gpus.iter().map(|s| s.device.clone()).collect(),
            state: h.state,
            registered_at_ms: h.registered_at_ms,
            updated_at_ms: now,
        }
    }

    pub(super) fn emit(&mut self, ev: HostEvent) {
        if let Some(tx) = &self.subscriber
            && tx.send(ev).is_err()
        {
            self.subscriber = None;
        }
    }

    pub fn subscribe(&mut self, now: u64) -> mpsc::UnboundedReceiver<HostEvent> {
        let (tx, rx) = mpsc::unbounded_channel();
        // Everything not yet acknowledged goes to the new subscriber first.
        let mut replay: Vec<&Pending> = self.runs.values().flat_map(|r| r.pending.iter()).collect();
        replay.sort_by(|a, b| {
            (a.sent_at_ms, &a.update.run_id, a.update.seq).cmp(&(b.sent_at_ms, &b.update.run_id, b.update.seq))
        });
        for p in replay {
            let _ = tx.send(HostEvent::Run(p.update.clone()));
        }
        for r in self.runs.values_mut() {
            for p in &mut r.pending {
                p.sent_at_ms = now;
            }
        }
        self.runs_due_by(now.saturating_add(self.config.redeliver_after_ms));
        self.subscriber = Some(tx);
        rx
    }

    pub fn census(&self) -> Vec<paceline_model::pending::CensusHost> {
        self.hosts
            .iter()
            .map(|h| paceline_model::pending::CensusHost {
                view: h.view.clone(),
                state: h.state,
                reachable: h.liveness == Liveness::Up,
            })
            .collect()
    }

    pub fn any_host(
        &self,
        pred: &mut dyn FnMut(&paceline_model::view::HostView, paceline_model::host::MaintenanceState, bool) -> bool,
    ) -> bool {
        self.hosts.iter().any(|h| pred(&h.view, h.state, h.liveness == Liveness::Up))
    }

    pub fn run_count(&self) -> usize {
        self.runs.len()
    }

    /// Keeps the use a host measured of its runs; a run id that is not a
    /// live run on that host is ignored (a host speaks for its own runs).
    pub(super) fn record_usage(&mut self, host: u32, usage: Vec<RunUsage>) {
        for u in usage {
            if let Some((id, r)) = self.runs.get_key_value(u.run_id.as_str())
                && r.host == host
                && !r.terminal
                && self.hosts[host as usize].runs.contains(id)
            {
                let id = id.clone();
                if let Some(r) = self.runs.get_mut(&id) {
                    r.used = Some(u.used);
                }
                self.measured.insert(id);
            }
        }
    }

    /// Every live run whose host measured its use.
    pub fn measured_use(&self) -> Vec<MeasuredRun> {
        self.measured
            .iter()
            .filter_map(|id| {
                let r = self.runs.get(id).filter(|r| !r.terminal)?;
                Some(MeasuredRun {
                    run_id: id.to_string(),
                    task_id: r.task_id.to_string(),
                    host: self.hosts[r.host as usize].view.name.clone(),
                    reserved: r.resources,
                    used: r.used?,
                })
            })
            .collect()
    }

    /// What a live run holds on its host and its latest measured use.
    pub fn run_holding(&self, run_id: &str) -> Option<RunHolding> {
        let r = self.runs.get(run_id).filter(|r| !r.terminal)?;
        Some(RunHolding { host: self.hosts[r.host as usize].view.name.clone(), reserved: r.resources, used: r.used })
    }

    pub fn host_info(&self, name: &str) -> Option<HostInfo> {
        self.by_name.get(name).map(|&i| self.info(i))
    }

    pub fn hosts_info(&self) -> Vec<HostInfo> {
        (0..self.hosts.len() as u32).map(|i| self.info(i)).collect()
    }

    pub(super) fn info(&self, i: u32) -> HostInfo {
        let h = &self.hosts[i as usize];
        let mut runs: Vec<String> = h.runs.iter().map(|id| id.to_string()).collect();
        runs.sort();
        HostInfo {
            view: HostView::clone(&h.view),
            agent_id: h.agent_id.clone(),
            state: h.state,
            reachable: h.liveness == Liveness::Up,
            last_heartbeat_ms: h.last_seen_ms,
            lease: h.lease,
            runs,
        }
    }

    pub fn run_host(&self, run_id: &str) -> Result<Option<String>, HostError> {
        let r = self.runs.get(run_id).ok_or_else(|| HostError::UnknownRun(run_id.to_string()))?;
        if r.terminal {
            return Ok(None);
        }
        let h = &self.hosts[r.host as usize];
        if h.liveness != Liveness::Up {
            return Err(HostError::HostUnreachable(h.view.name.clone()));
        }
        Ok(Some(h.view.name.clone()))
    }

    /// Moves a host to `to`; returns the previous state (for an undo) or
    /// `None` when nothing changed.
    pub fn set_maintenance(
        &mut self,
        host: &str,
        to: MaintenanceState,
        fx: &mut Vec<Effect>,
    ) -> Result<Option<MaintenanceState>, HostError> {
        let &i = self.by_name.get(host).ok_or_else(|| HostError::UnknownHost(host.to_string()))?;
        let from = self.hosts[i as usize].state;
        // Whoever changes it now owns it (the provider's handler marks its own).
        self.hosts[i as usize].provider_drained = false;
        if from == to {
            return Ok(None);
        }
        if !from.can_transition(to) {
            return Err(HostError::InvalidTransition { host: host.to_string(), from, to });
        }
        if !to.accepts_tasks() {
            self.unlease(i);
        }
        self.change_state(i, to, fx);
        if to == MaintenanceState::Draining && self.hosts[i as usize].runs.is_empty() {
            self.drained(i, fx);
        }
        Ok(Some(from))
    }

    /// Puts a host back in `state` after a failed write, telling the
    /// subscriber (which saw the change) that it is undone.
    pub fn restore_maintenance(&mut self, host: &str, state: MaintenanceState) {
        let Some(&i) = self.by_name.get(host) else { return };
        let from = self.hosts[i as usize].state;
        self.hosts[i as usize].state = state;
        if from != state {
            self.emit(HostEvent::HostStateChanged { host: host.to_string(), from, to: state, runs: Vec::new() });
        }
    }
}

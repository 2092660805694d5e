//! What a provider reports (registrations, heartbeats, run updates), and
//! the expectations the job manager hands over after a restart.

use super::*;

impl State {
    pub fn apply(&mut self, ev: ProviderEvent, now: u64, fx: &mut Vec<Effect>) {
        match ev {
            ProviderEvent::RunUpdate(u) => self.on_run_update(u, now, fx),
            ProviderEvent::Usage { host, usage } => {
                if let Some(&i) = self.by_name.get(&host) {
                    self.record_usage(i, usage);
                }
            }
            ProviderEvent::Heartbeat { host } => {
                let Some(&i) = self.by_name.get(&host) else { return };
                let timeout = self.config.heartbeat_timeout_ms;
                let h = &mut self.hosts[i as usize];
                match h.liveness {
                    Liveness::Up => {
                        h.last_seen_ms = now;
                        self.seen_at(now);
                    }
                    // Its heartbeats were late, not gone (a stalled manager,
                    // a slow network): the connection stayed open. Its runs
                    // were declared LOST, so taking it back needs what it
                    // runs now, which only a registration reports: it is
                    // asked to register again, as a reconnecting agent does.
                    Liveness::Lost => {
                        if h.reregister_asked_ms.is_none_or(|at| now.saturating_sub(at) >= timeout) {
                            h.reregister_asked_ms = Some(now);
                            info!(host, "a lost host heartbeats again; asking it to register again");
                            fx.push(Effect::Reregister(host));
                        }
                    }
                    Liveness::Never | Liveness::Disconnected => {}
                }
            }
            ProviderEvent::HostRegistered(r) => self.on_register(r, now, fx),
            ProviderEvent::HostDisconnected { host, reason } => {
                let Some(&i) = self.by_name.get(&host) else { return };
                if self.hosts[i as usize].liveness != Liveness::Up {
                    return;
                }
                self.hosts[i as usize].liveness = Liveness::Disconnected;
                self.unlease(i);
                info!(host, reason, "host disconnected");
                self.emit(HostEvent::HostLeft { host, reason });
            }
            ProviderEvent::LaunchRejected { host, run_id, error } => {
                if self.runs.get(run_id.as_str()).is_some_and(|r| r.state.is_none()) {
                    warn!(host, run_id, error, "launch rejected");
                    self.synthesize(&run_id, RunState::Failed, "LAUNCH_REJECTED", error, now, fx);
                }
            }
            ProviderEvent::HostDrainRequested { host, reason } => {
                let up = self.by_name.get(&host).is_some_and(|&i| self.hosts[i as usize].state == MaintenanceState::Up);
                if up {
                    info!(host, reason, "the provider asks for a drain");
                    match self.set_maintenance(&host, MaintenanceState::Draining, fx) {
                        Ok(_) => {
                            if let Some(&i) = self.by_name.get(&host) {
                                self.hosts[i as usize].provider_drained = true;
                            }
                        }
                        Err(e) => warn!(host, error = %e, "drain requested by the provider not applied"),
                    }
                }
            }
            ProviderEvent::HostUndrainRequested { host, reason } => {
                let Some(&i) = self.by_name.get(&host) else { return };
                let h = &self.hosts[i as usize];
                if !h.provider_drained || h.state == MaintenanceState::Up {
                    info!(host, reason, state = %h.state, "the provider no longer asks for a drain; the host's state is an operator's, left as it is");
                    return;
                }
                info!(host, reason, "the provider no longer asks for a drain; the host is up again");
                if let Err(e) = self.set_maintenance(&host, MaintenanceState::Up, fx) {
                    warn!(host, error = %e, "undrain requested by the provider not applied");
                }
            }
        }
    }

    pub(super) fn on_register(&mut self, r: HostRegistration, now: u64, fx: &mut Vec<Effect>) {
        let i = self.host_slot(&r.hostname, now);
        let h = &mut self.hosts[i as usize];
        let changed = !h.durable
            || h.view.total != r.total
            || h.view.attributes != r.attributes
            || h.agent_id.as_deref() != Some(r.agent_id.as_str());
        if !h.durable {
            h.registered_at_ms = now;
        }
        let view = Arc::make_mut(&mut h.view);
        view.total = r.total;
        view.attributes = r.attributes;
        h.agent_id = Some(r.agent_id);
        h.liveness = Liveness::Up;
        h.reregister_asked_ms = None;
        h.last_seen_ms = now;
        h.durable = true;
        let before: Vec<GpuDevice> = self.hosts[i as usize].view.gpus.iter().map(|s| s.device.clone()).collect();
        self.set_devices(i, &r.gpus);
        let changed = changed || self.hosts[i as usize].view.gpus.iter().map(|s| &s.device).ne(before.iter());
        if changed {
            fx.push(Effect::Persist(r.hostname.clone()));
        }
        self.seen_at(now);
        let host = r.hostname;
        self.emit(HostEvent::HostJoined {
            host: host.clone(),
            total: self.hosts[i as usize].view.total,
            attributes: self.hosts[i as usize].view.attributes.clone(),
        });

        // Reconcile: what the host runs against what the manager expects there.
        let mut reported: HashSet<&str> = HashSet::with_capacity(r.running.len());
        for run in &r.running {
            reported.insert(run.run_id.as_str());
            match self.runs.get(run.run_id.as_str()) {
                Some(e) if e.host == i && !e.terminal => {}
                Some(_) => fx.push(Effect::Kill { host: host.clone(), run_id: run.run_id.clone() }),
                None if self.expectations_loaded => {
                    info!(host, run_id = run.run_id, "host runs a run the manager does not expect; killing it");
                    fx.push(Effect::Kill { host: host.clone(), run_id: run.run_id.clone() });
                }
                None => {
                    // Held until the owner says what it expects (see `expect_runs`).
                    let mut e = RunEntry::new(i, &run.task_id, run.resources, run.gpu.clone(), Vec::new(), now, true);
                    e.state = Some(RunState::Running);
                    self.runs.insert(Id::from(run.run_id.as_str()), Box::new(e));
                    self.hold(&run.run_id);
                }
            }
        }
        let missing: Vec<String> = self.hosts[i as usize]
            .runs
            .iter()
            .filter(|&id| !reported.contains(&**id))
            .filter(|&id| self.runs.get(&**id).is_some_and(|e| !e.orphan && e.state.is_some()))
            .map(|id| id.to_string())
            .collect();
        for id in missing {
            self.synthesize(
                &id,
                RunState::Lost,
                "RUN_MISSING",
                format!("host {host} does not report the run"),
                now,
                fx,
            );
        }
    }

    pub fn expect_runs(&mut self, expected: Vec<ExpectedRun>, now: u64, fx: &mut Vec<Effect>) {
        self.expectations_loaded = true;
        let mut wanted: HashSet<String> = HashSet::with_capacity(expected.len());
        for e in expected {
            wanted.insert(e.run_id.clone());
            let i = self.host_slot(&e.host, now);
            if let Some(r) = self.runs.get_mut(e.run_id.as_str()) {
                if r.orphan && r.host == i {
                    // The host reported it before we knew: adopt it, then hand
                    // the owner what the host said meanwhile and it has not seen.
                    r.orphan = false;
                    r.task_id = Id::from(e.task_id);
                    r.state = Some(RunState::Running);
                    r.last_seq = r.last_seq.max(e.last_seq);
                    r.acked_seq = r.acked_seq.max(e.last_seq);
                    let held = std::mem::take(&mut r.held);
                    for u in held {
                        self.on_run_update(u, now, fx);
                    }
                }
                continue;
            }
            let mut r = RunEntry::new(i, &e.task_id, e.resources, e.gpu.clone(), Vec::new(), now, false);
            r.state = Some(RunState::Running);
            r.last_seq = e.last_seq;
            r.acked_seq = e.last_seq;
            self.runs.insert(Id::from(e.run_id.as_str()), Box::new(r));
            self.hold(&e.run_id);
            if self.hosts[i as usize].liveness == Liveness::Up {
                // Registered already, and did not report it.
                self.synthesize(
                    &e.run_id,
                    RunState::Lost,
                    "RUN_MISSING",
                    format!("host {} does not report the run", e.host),
                    now,
                    fx,
                );
            }
        }
        let orphans: Vec<(String, String)> = self
            .runs
            .iter()
            .filter(|&(id, r)| r.orphan && !wanted.contains(&**id))
            .map(|(id, r)| (self.hosts[r.host as usize].view.name.clone(), id.to_string()))
            .collect();
        for (host, run_id) in orphans {
            // What the host said while the run was held is handled now as for
            // any orphan being killed: acknowledged, and a terminal update
            // frees the run. Dropping it left a run that had already ended
            // held for ever (the agent had nothing left to kill and nothing
            // new to say), and its task could never launch again: found by
            // scripts/torture ("already has the live run").
            let held = self.runs.get_mut(run_id.as_str()).map(|r| std::mem::take(&mut r.held)).unwrap_or_default();
            for u in held {
                self.on_run_update(u, now, fx);
            }
            if self.runs.contains_key(run_id.as_str()) {
                info!(host, run_id, "run not expected by the owner; killing it");
                fx.push(Effect::Kill { host, run_id });
            } else {
                info!(host, run_id, "run not expected by the owner had already ended; released");
            }
        }
    }
}

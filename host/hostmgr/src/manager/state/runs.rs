//! Runs on hosts: holding and freeing their resources, and the status
//! pipeline (delivery, made-up updates, acknowledgement).

use super::*;

impl State {
    pub(super) fn hold(&mut self, run_id: &str) {
        let Some((id, r)) = self.runs.get_key_value(run_id) else { return };
        self.live_task_runs.insert(r.task_id.clone(), id.clone());
        let h = &mut self.hosts[r.host as usize];
        h.runs.insert(id.clone());
        if h.liveness == Liveness::Never {
            // A host never seen becomes one that can be lost (see `tick`).
            self.hosts_due_ms = 0;
        }
        // Copies the view only if a lease still holds this one.
        let view = Arc::make_mut(&mut h.view);
        view.allocated = view.allocated.saturating_add(&r.resources);
        gpu::apply(&mut view.gpus, &r.gpu, false);
        let job = r.job();
        *view.job_counts.entry(job.to_string()).or_insert(0) += 1;
        *self.job_hosts.entry(job.to_string()).or_default().entry(r.host).or_insert(0) += 1;
        for l in &r.labels {
            let n = h.label_counts.entry(l.clone()).or_insert(0);
            *n += 1;
            if *n == 1 {
                view.task_labels.insert(l.clone());
            }
        }
    }

    /// Gives a run's resources back; moves a draining host on once it is empty.
    pub(super) fn free(&mut self, run_id: &str, fx: &mut Vec<Effect>) {
        let Some(r) = self.runs.get(run_id) else { return };
        let i = r.host;
        let h = &mut self.hosts[i as usize];
        if !h.runs.remove(run_id) {
            return;
        }
        self.measured.remove(run_id);
        if self.live_task_runs.get(&r.task_id).is_some_and(|live| &**live == run_id) {
            self.live_task_runs.remove(&r.task_id);
        }
        let h = &mut self.hosts[i as usize];
        let view = Arc::make_mut(&mut h.view);
        view.allocated = view.allocated.saturating_sub(&r.resources);
        gpu::apply(&mut view.gpus, &r.gpu, true);
        if let Some(n) = view.job_counts.get_mut(r.job()) {
            *n -= 1;
            if *n == 0 {
                view.job_counts.remove(r.job());
            }
        }
        if let Some(on) = self.job_hosts.get_mut(r.job()) {
            if let Some(n) = on.get_mut(&i) {
                *n -= 1;
                if *n == 0 {
                    on.remove(&i);
                }
            }
            if on.is_empty() {
                self.job_hosts.remove(r.job());
            }
        }
        for l in &r.labels {
            if let Some(n) = h.label_counts.get_mut(l) {
                *n -= 1;
                if *n == 0 {
                    h.label_counts.remove(l);
                    view.task_labels.remove(l);
                }
            }
        }
        if h.state == MaintenanceState::Draining && h.runs.is_empty() {
            self.drained(i, fx);
        }
    }

    pub(super) fn drained(&mut self, i: u32, fx: &mut Vec<Effect>) {
        self.change_state(i, MaintenanceState::Drained, fx);
        if self.config.auto_down_when_drained {
            self.change_state(i, MaintenanceState::Down, fx);
        }
    }

    pub(super) fn change_state(&mut self, i: u32, to: MaintenanceState, fx: &mut Vec<Effect>) {
        let h = &mut self.hosts[i as usize];
        let from = h.state;
        h.state = to;
        let host = h.view.name.clone();
        let mut runs: Vec<String> = if to == MaintenanceState::Draining {
            h.runs.iter().map(|id| id.to_string()).collect()
        } else {
            Vec::new()
        };
        runs.sort();
        info!(host, %from, %to, "maintenance state changed");
        fx.push(Effect::Persist(host.clone()));
        self.emit(HostEvent::HostStateChanged { host, from, to, runs });
    }

    /// Records an update, frees resources when it ends the run, and sends it on.
    pub(super) fn deliver(&mut self, update: RunUpdate, now: u64, fx: &mut Vec<Effect>) {
        let Some(r) = self.runs.get_mut(update.run_id.as_str()) else { return };
        r.last_seq = update.seq;
        r.state = Some(update.state);
        let ended = update.state.is_terminal() && !r.terminal;
        r.terminal |= update.state.is_terminal();
        r.pending.push_back(Pending { update: update.clone(), sent_at_ms: now });
        self.runs_due_by(now.saturating_add(self.config.redeliver_after_ms));
        let id = update.run_id.clone();
        self.emit(HostEvent::Run(update));
        if ended {
            self.free(&id, fx);
        }
    }

    /// An update the manager makes up (LOST, launch rejected): next seq of the run.
    pub(super) fn synthesize(
        &mut self,
        run_id: &str,
        state: RunState,
        reason: &str,
        message: String,
        now: u64,
        fx: &mut Vec<Effect>,
    ) {
        let Some(r) = self.runs.get(run_id) else { return };
        if r.terminal {
            return;
        }
        let update = RunUpdate {
            host: self.hosts[r.host as usize].view.name.clone(),
            run_id: run_id.to_string(),
            task_id: r.task_id.to_string(),
            seq: r.last_seq + 1,
            state,
            healthy: None,
            exit_code: None,
            signal: None,
            reason: reason.to_string(),
            message,
            at_ms: now,
            ports: BTreeMap::new(),
        };
        debug!(run_id, reason, "synthesized {state}");
        self.deliver(update, now, fx);
    }

    pub(super) fn on_run_update(&mut self, u: RunUpdate, now: u64, fx: &mut Vec<Effect>) {
        let ack = |fx: &mut Vec<Effect>, u: &RunUpdate| {
            fx.push(Effect::Ack { host: u.host.clone(), run_id: u.run_id.clone(), seq: u.seq })
        };
        let Some(r) = self.runs.get_mut(u.run_id.as_str()) else {
            // Finished and acknowledged, or never ours: nobody is waiting for it.
            ack(fx, &u);
            return;
        };
        if self.hosts[r.host as usize].view.name != u.host {
            warn!(run_id = u.run_id, host = u.host, "update from a host the run is not on; dropped");
            ack(fx, &u);
            return;
        }
        r.provider_seq = r.provider_seq.max(u.seq);
        // Any word from a host shows it is alive.
        let h = &mut self.hosts[r.host as usize];
        if h.liveness == Liveness::Up {
            h.last_seen_ms = now;
            self.hosts_due_ms = self.hosts_due_ms.min(now.saturating_add(self.config.heartbeat_timeout_ms));
        }
        if u.seq <= r.last_seq {
            // A duplicate: acknowledge again if the subscriber already has.
            if u.seq <= r.acked_seq {
                r.provider_acked = r.provider_acked.max(u.seq);
                ack(fx, &u);
            }
            return;
        }
        if r.orphan && !self.expectations_loaded {
            // Held until the owner says whether it expects the run (see `expect_runs`).
            if r.held.last().is_none_or(|h| h.seq < u.seq) {
                r.held.push(u);
            }
            return;
        }
        if r.orphan || r.terminal {
            // An orphan being killed, or a run already declared LOST: not the subscriber's business.
            r.last_seq = u.seq;
            r.provider_acked = u.seq;
            ack(fx, &u);
            if u.state.is_terminal() {
                let id = u.run_id.clone();
                self.free(&id, fx);
                if self.runs.get(id.as_str()).is_some_and(|r| r.pending.is_empty()) {
                    self.runs.remove(id.as_str());
                }
            }
            return;
        }
        self.deliver(u, now, fx);
    }

    /// Returns the host and seq to acknowledge to the provider, if any.
    pub fn acknowledge(&mut self, run_id: &str, seq: u64) -> Option<(String, u64)> {
        let r = self.runs.get_mut(run_id)?;
        while r.pending.front().is_some_and(|p| p.update.seq <= seq) {
            r.pending.pop_front();
        }
        r.acked_seq = r.acked_seq.max(seq);
        let to_provider = seq.min(r.provider_seq);
        let upstream = if to_provider > r.provider_acked {
            r.provider_acked = to_provider;
            Some((self.hosts[r.host as usize].view.name.clone(), to_provider))
        } else {
            None
        };
        if r.terminal && r.pending.is_empty() {
            self.runs.remove(run_id);
        } else if r.pending.is_empty() {
            // A running task keeps no capacity for updates it no longer
            // holds: about 800 bytes a run, 0.8 GB at a million runs.
            r.pending = VecDeque::new();
        }
        upstream
    }
}

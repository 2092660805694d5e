//! Time: the periodic tick (redelivery, launch timeouts, silent hosts)
//! and the loss of a host.

use super::*;

impl State {
    pub fn tick(&mut self, now: u64, fx: &mut Vec<Effect>) {
        let expired: Vec<LeaseId> =
            self.leases.iter().filter(|(_, l)| l.expires_at_ms <= now).map(|(id, _)| *id).collect();
        for id in expired {
            debug!(%id, "lease expired");
            self.drop_lease(id);
        }
        let deadline = self.config.heartbeat_timeout_ms;
        // Skipped until some host could be overdue: on a large cluster this
        // scan every second was a tenth of a replay's time.
        let scan_hosts = now > self.hosts_due_ms;
        let mut next_due = u64::MAX;
        for i in 0..if scan_hosts { self.hosts.len() as u32 } else { 0 } {
            let h = &self.hosts[i as usize];
            let overdue = h.last_seen_ms.saturating_add(deadline) < now;
            let lose = match h.liveness {
                Liveness::Up | Liveness::Disconnected => overdue,
                // Never seen since start: only matters when runs are expected there.
                Liveness::Never => overdue && !h.runs.is_empty(),
                Liveness::Lost => false,
            };
            if lose {
                self.lose_host(i, now, fx);
            } else {
                let h = &self.hosts[i as usize];
                // A lost host, or one never seen that holds no runs, cannot be
                // lost by waiting; `seen_at` and `hold` bring it back in.
                let can_be_lost = match h.liveness {
                    Liveness::Up | Liveness::Disconnected => true,
                    Liveness::Never => !h.runs.is_empty(),
                    Liveness::Lost => false,
                };
                if can_be_lost {
                    next_due = next_due.min(h.last_seen_ms.saturating_add(deadline));
                }
            }
        }
        if scan_hosts {
            self.hosts_due_ms = next_due;
        }
        let timeout = self.config.launch_timeout_ms;
        let redeliver = self.config.redeliver_after_ms;
        let mut unconfirmed = Vec::new();
        let mut resend = Vec::new();
        // Skipped until some run could be due: with thousands of runs this
        // scan every second was a seventh of a replay's time.
        if now >= self.runs_due_ms {
            let mut next_due = u64::MAX;
            for (id, r) in &mut self.runs {
                if r.state.is_none() {
                    let times_out = r.launched_at_ms.saturating_add(timeout);
                    if times_out < now {
                        unconfirmed.push(id.clone());
                    } else {
                        next_due = next_due.min(times_out.saturating_add(1));
                    }
                }
                for p in &mut r.pending {
                    if p.sent_at_ms.saturating_add(redeliver) <= now {
                        p.sent_at_ms = now;
                        resend.push(p.update.clone());
                    }
                    next_due = next_due.min(p.sent_at_ms.saturating_add(redeliver));
                }
            }
            self.runs_due_ms = next_due;
        }
        for u in resend {
            self.emit(HostEvent::Run(u));
        }
        for id in unconfirmed {
            self.synthesize(
                &id,
                RunState::Lost,
                "LAUNCH_TIMEOUT",
                format!("no update within {timeout} ms of launch"),
                now,
                fx,
            );
        }
    }

    /// Something in the runs may be due at `at` (see `tick`).
    pub(super) fn runs_due_by(&mut self, at: u64) {
        self.runs_due_ms = self.runs_due_ms.min(at);
    }

    /// A host was created or heard from at `now`.
    pub(super) fn seen_at(&mut self, now: u64) {
        self.hosts_due_ms = self.hosts_due_ms.min(now.saturating_add(self.config.heartbeat_timeout_ms));
    }

    pub(super) fn lose_host(&mut self, i: u32, now: u64, fx: &mut Vec<Effect>) {
        let was = self.hosts[i as usize].liveness;
        self.hosts[i as usize].liveness = Liveness::Lost;
        self.unlease(i);
        let host = self.hosts[i as usize].view.name.clone();
        warn!(host, "host lost: no heartbeat within {} ms", self.config.heartbeat_timeout_ms);
        if was == Liveness::Up {
            self.emit(HostEvent::HostLeft { host: host.clone(), reason: "missed heartbeats".into() });
        }
        let mut runs: Vec<String> = self.hosts[i as usize].runs.iter().map(|id| id.to_string()).collect();
        runs.sort();
        for id in runs {
            if self.runs.get(id.as_str()).is_some_and(|r| r.orphan) {
                self.free(&id, fx);
                self.runs.remove(id.as_str());
                continue;
            }
            self.synthesize(&id, RunState::Lost, "HOST_LOST", format!("host {host} missed its heartbeats"), now, fx);
        }
    }
}

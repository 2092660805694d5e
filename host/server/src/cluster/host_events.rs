//! The host-event fan-out: run updates to the job manager (acknowledged to
//! the host manager only once written), and inventory changes to the
//! resource manager's capacity and the job manager's view of hosts, once
//! per burst of events.

use paceline_hostmgr::HostEvent;
use paceline_model::Resources;
use tracing::warn;

use super::Cluster;

impl Cluster {
    /// Handles every host event waiting now; returns how many. Inventory
    /// changes are applied once per call, not once per event: a cluster
    /// starting with thousands of hosts registers them in one burst, and
    /// recomputing per event would be quadratic.
    pub async fn pump_host_events(&self) -> usize {
        let mut events = self.events.lock().await;
        let mut n = 0;
        let mut inventory_changed = false;
        let mut joined = Vec::new();
        let mut draining = Vec::new();
        let mut runs = Vec::new();
        while let Some(ev) = events.try_recv() {
            n += 1;
            match ev {
                HostEvent::Run(update) => runs.push(update),
                HostEvent::HostJoined { host, total, .. } => {
                    inventory_changed = true;
                    joined.push((host, total));
                }
                HostEvent::HostLeft { .. } => inventory_changed = true,
                HostEvent::HostStateChanged { host, to, .. } => {
                    inventory_changed = true;
                    if to == paceline_model::host::MaintenanceState::Draining {
                        draining.push(host);
                    }
                }
            }
        }
        // One call for the whole burst: the job manager writes each job's
        // updates together. Each is acknowledged only once it is written.
        let run_updates = runs.len();
        let mut failed = 0;
        if !runs.is_empty() {
            let results = self.jobs.on_run_updates(&runs).await;
            let mut written = Vec::with_capacity(runs.len());
            for (update, result) in runs.into_iter().zip(results) {
                match result {
                    Ok(()) => written.push((update.run_id, update.seq)),
                    Err(e) => {
                        failed += 1;
                        warn!(run = update.run_id, seq = update.seq, error = %e, "run update not handled; it will come again")
                    }
                }
            }
            // One call for the burst (one round trip to a host manager in its own process).
            self.hosts.acknowledge_all(&written).await;
        }
        if inventory_changed {
            let room = self.hosts_changed(&joined).await;
            // Hosts (re)joined: tasks backing off that one of them could take
            // go back to READY now, the rest keep their backoff (after a host
            // manager's failover every host joins again).
            if !joined.is_empty()
                && let Ok(mut rm) = self.resmgr.lock()
            {
                let back = rm.retry_backed_off(&room);
                tracing::debug!(joined = joined.len(), back, "backed-off tasks re-offered after hosts joined");
            }
        }
        for host in draining {
            self.jobs.on_host_draining(&host).await;
        }
        if let Some(m) = &self.metrics
            && n > 0
        {
            m.host_events(n, run_updates, failed);
        }
        n
    }

    /// Recomputes capacity from the inventory and tells the job manager which
    /// hosts take tasks. Returns the most any one of the `joined` hosts (name,
    /// capacity) could take, kind by kind: the component-wise maximum of
    /// their free resources, so a task that fits none of them does not fit
    /// it either. A joined host that does not take tasks (draining, gone
    /// again) adds nothing; one the inventory does not list yet adds its
    /// whole capacity, erring towards a retry.
    pub(super) async fn hosts_changed(&self, joined: &[(String, Resources)]) -> Resources {
        let infos = self.hosts.hosts();
        let mut unseen: std::collections::HashMap<&str, Resources> =
            joined.iter().map(|(name, total)| (name.as_str(), *total)).collect();
        let mut total = Resources::default();
        let mut room = Resources::default();
        let mut view = Vec::with_capacity(infos.len());
        for h in &infos {
            let accepts = h.reachable && h.state.accepts_tasks();
            let was_joined = !unseen.is_empty() && unseen.remove(h.view.name.as_str()).is_some();
            if accepts {
                total = total.saturating_add(&h.view.total);
                if was_joined {
                    room = room.max(&h.view.free());
                }
            }
            view.push((h.view.name.clone(), h.view.attributes.clone(), accepts));
        }
        for capacity in unseen.values() {
            room = room.max(capacity);
        }
        if let Ok(mut rm) = self.resmgr.lock() {
            rm.set_capacity(total);
        }
        self.jobs.on_hosts_changed(view).await;
        // A drain that was under way when this job manager started (after a
        // restart or a failover): the host manager restored DRAINING, and
        // the job manager must go on moving the host's instances (decision 0046).
        for h in &infos {
            if h.state == paceline_model::host::MaintenanceState::Draining && !self.jobs.is_draining(&h.view.name) {
                self.jobs.on_host_draining(&h.view.name).await;
            }
        }
        room
    }
}

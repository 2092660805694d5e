//! Offer leases to placement, and launches on leased hosts.

use super::*;

impl State {
    pub(super) fn unlease(&mut self, i: u32) {
        if let Some(id) = self.hosts[i as usize].lease.take()
            && let Some(l) = self.leases.get_mut(&id)
        {
            l.hosts.retain(|&h| h != i);
        }
    }

    pub(super) fn drop_lease(&mut self, id: LeaseId) -> bool {
        let Some(l) = self.leases.remove(&id) else { return false };
        for i in l.hosts {
            let h = &mut self.hosts[i as usize];
            if h.lease == Some(id) {
                h.lease = None;
            }
        }
        true
    }

    pub fn lease(&mut self, req: &LeaseRequest, now: u64) -> Result<Lease, HostError> {
        if req.max_hosts == 0 {
            return Err(HostError::InvalidRequest { field: "max_hosts", reason: "must be at least 1".into() });
        }
        if req.ttl_ms == 0 {
            return Err(HostError::InvalidRequest { field: "ttl_ms", reason: "must be at least 1".into() });
        }
        let expired: Vec<LeaseId> =
            self.leases.iter().filter(|(_, l)| l.expires_at_ms <= now).map(|(id, _)| *id).collect();
        for id in expired {
            self.drop_lease(id);
        }
        let id = LeaseId(self.next_lease);
        let eligible = |h: &HostEntry| {
            h.liveness == Liveness::Up
                && h.state.accepts_tasks()
                && h.lease.is_none()
                && req.min_free.fits_in(&h.view.free())
                && req.constraints.iter().all(|c| c.admits(&h.view) != Some(false))
        };
        let mut picked: Vec<u32> = Vec::new();
        // Preferred hosts first (few: checked against each other linearly),
        // then the pinned set or the whole cluster.
        let only: Vec<u32> = req.only_hosts.iter().filter_map(|n| self.by_name.get(n).copied()).collect();
        for name in &req.prefer_hosts {
            if let Some(&i) = self.by_name.get(name)
                && (req.only_hosts.is_empty() || only.contains(&i))
                && picked.len() < req.max_hosts
                && !picked.contains(&i)
                && eligible(&self.hosts[i as usize])
            {
                picked.push(i);
            }
        }
        let preferred = picked.len();
        if !req.only_hosts.is_empty() {
            for &i in &only {
                if picked.len() < req.max_hosts && !picked.contains(&i) && eligible(&self.hosts[i as usize]) {
                    picked.push(i);
                }
            }
        } else {
            // Round-robin start so that successive leases spread over the cluster.
            let n = self.hosts.len();
            let start = if n == 0 { 0 } else { self.cursor % n };
            let mut last = start;
            for k in 0..n {
                if picked.len() >= req.max_hosts {
                    break;
                }
                let i = (start + k) % n;
                if eligible(&self.hosts[i]) && !picked[..preferred].contains(&(i as u32)) {
                    picked.push(i as u32);
                    last = i;
                }
            }
            self.cursor = last + 1;
        }
        let expires_at_ms = now.saturating_add(req.ttl_ms);
        let offers = picked.iter().map(|&i| Arc::clone(&self.hosts[i as usize].view)).collect();
        if !picked.is_empty() {
            self.next_lease += 1;
            for &i in &picked {
                self.hosts[i as usize].lease = Some(id);
            }
        }
        let job_hosts = Some(self.job_hosts_among(&req.jobs, &picked));
        if !picked.is_empty() {
            self.leases.insert(id, LeaseEntry { expires_at_ms, hosts: picked });
        }
        Ok(Lease { id, expires_at_ms, hosts: offers, job_hosts })
    }

    /// For each of `jobs`, the hosts of `picked` already running its tasks,
    /// as indices into `picked`: from the job index, so the cost follows the
    /// jobs' tasks, not the size of the lease.
    pub(super) fn job_hosts_among(&self, jobs: &[String], picked: &[u32]) -> Vec<JobHosts> {
        let running: Vec<(&String, &BTreeMap<u32, u32>)> =
            jobs.iter().filter_map(|j| self.job_hosts.get(j).map(|on| (j, on))).collect();
        if running.is_empty() {
            return Vec::new();
        }
        // Host index → position in the lease; u32::MAX for hosts not in it.
        let mut position = vec![u32::MAX; self.hosts.len()];
        for (k, &i) in picked.iter().enumerate() {
            position[i as usize] = k as u32;
        }
        running
            .into_iter()
            .map(|(job, on)| {
                let mut hosts: Vec<(u32, u32)> = on
                    .iter()
                    .filter_map(|(&i, &n)| position.get(i as usize).filter(|&&k| k != u32::MAX).map(|&k| (k, n)))
                    .collect();
                hosts.sort_unstable();
                JobHosts { job: job.clone(), hosts }
            })
            .filter(|j| !j.hosts.is_empty())
            .collect()
    }

    pub fn release(&mut self, id: LeaseId) -> Result<(), HostError> {
        if self.drop_lease(id) { Ok(()) } else { Err(HostError::UnknownLease(id)) }
    }

    /// Checks a launch and, if it passes, records the runs and holds their
    /// resources. A fault of the request as a whole (the lease, the host, no
    /// runs, an empty id, a run or task named twice in it, the batch over
    /// what the host has free) refuses every run: `Err`. A run that conflicts
    /// only with what the manager holds (its run id already known, its task
    /// with a live run, no GPU device for it) is taken out of `runs` and
    /// returned with its error, and the others go on; when none is left, the
    /// first such error is the batch's.
    pub fn begin_launch(
        &mut self,
        lease: LeaseId,
        host: &str,
        runs: &mut Vec<LaunchRequest>,
        now: u64,
    ) -> Result<Vec<(String, HostError)>, HostError> {
        let l = self.leases.get(&lease).ok_or(HostError::UnknownLease(lease))?;
        if l.expires_at_ms <= now {
            self.drop_lease(lease);
            return Err(HostError::LeaseExpired(lease));
        }
        let &i = self.by_name.get(host).ok_or_else(|| HostError::UnknownHost(host.to_string()))?;
        if !l.hosts.contains(&i) {
            return Err(HostError::HostNotInLease { host: host.to_string(), lease });
        }
        let h = &self.hosts[i as usize];
        if h.liveness != Liveness::Up {
            return Err(HostError::HostUnreachable(host.to_string()));
        }
        if !h.state.accepts_tasks() {
            return Err(HostError::HostNotAcceptingTasks { host: host.to_string(), state: h.state });
        }
        check_request(runs)?;
        let mut refused: Vec<(String, HostError)> = Vec::new();
        runs.retain(|r| {
            let conflict = if self.runs.contains_key(r.run_id.as_str()) {
                Some(HostError::DuplicateRunId(r.run_id.clone()))
            } else {
                self.live_task_runs
                    .get(r.task_id.as_str())
                    .map(|live| HostError::DuplicateTaskId { task: r.task_id.clone(), live_run: live.to_string() })
            };
            conflict.map(|e| refused.push((r.run_id.clone(), e))).is_none()
        });
        // GPU devices: each run's grant (the host's default choice for a
        // launch that names none) must fit what the devices have left,
        // counting the grants before it.
        let mut slots = h.view.gpus.clone();
        runs.retain_mut(|r| match grant_gpus(&mut slots, r, host) {
            Ok(()) => true,
            Err(e) => {
                refused.push((r.run_id.clone(), e));
                false
            }
        });
        if runs.is_empty() {
            let first = refused.into_iter().next().map(|(_, e)| e);
            return Err(
                first.unwrap_or(HostError::InvalidRequest { field: "runs", reason: "no runs to launch".into() })
            );
        }
        let need = runs.iter().fold(Resources::ZERO, |need, r| need.saturating_add(&r.spec.resources));
        if let Some((field, requested, free)) = over(&need, &h.view.free()) {
            return Err(HostError::OverCapacity { host: host.to_string(), field, requested, free });
        }
        // The host stays in the lease until it is released or expires: the
        // job manager may launch several groups of one placement round on it
        // (one per job), each checked against what is still free.
        for r in runs.iter() {
            let labels = r.spec.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
            let entry = RunEntry::new(i, &r.task_id, r.spec.resources, r.gpu.clone(), labels, now, false);
            self.runs.insert(Id::from(r.run_id.as_str()), Box::new(entry));
            self.hold(&r.run_id);
        }
        // Unconfirmed after the launch timeout is LOST (see `tick`).
        self.runs_due_by(now.saturating_add(self.config.launch_timeout_ms).saturating_add(1));
        Ok(refused)
    }

    /// Undoes `begin_launch` when the provider refused the launch outright.
    pub fn abort_launch(&mut self, run_ids: &[String], fx: &mut Vec<Effect>) {
        for id in run_ids {
            if self.runs.get(id.as_str()).is_some_and(|e| e.state.is_none()) {
                self.free(id, fx);
                self.runs.remove(id.as_str());
            }
        }
    }
}

/// The faults of a launch request in itself, whatever the manager holds:
/// no runs, an empty id, a run or a task named twice. Each refuses the
/// whole batch (the caller built it wrong).
fn check_request(runs: &[LaunchRequest]) -> Result<(), HostError> {
    if runs.is_empty() {
        return Err(HostError::InvalidRequest { field: "runs", reason: "no runs to launch".into() });
    }
    let mut seen: HashSet<&str> = HashSet::with_capacity(runs.len());
    let mut tasks: HashSet<&str> = HashSet::with_capacity(runs.len());
    for r in runs {
        if r.run_id.is_empty() {
            return Err(HostError::InvalidRequest { field: "run_id", reason: "must not be empty".into() });
        }
        if !seen.insert(r.run_id.as_str()) {
            return Err(HostError::DuplicateRunId(r.run_id.clone()));
        }
        if r.task_id.is_empty() {
            return Err(HostError::InvalidRequest { field: "task_id", reason: "must not be empty".into() });
        }
        if !tasks.insert(r.task_id.as_str()) {
            return Err(HostError::DuplicateTaskId { task: r.task_id.clone(), live_run: r.run_id.clone() });
        }
    }
    Ok(())
}

/// Picks (when the launch names none) and checks one run's GPU devices
/// against what `slots` have left, and takes them from `slots`.
fn grant_gpus(slots: &mut [gpu::GpuSlot], r: &mut LaunchRequest, host: &str) -> Result<(), HostError> {
    if r.gpu.is_empty() && r.spec.resources.gpu_milli > 0 {
        r.gpu = gpu::pick(slots, &r.spec.resources, &r.spec.gpu_models).ok_or_else(|| HostError::InvalidRequest {
            field: "gpu",
            reason: format!("no GPU device of host {host} takes {} milli-GPU", r.spec.resources.gpu_milli),
        })?;
    }
    if r.spec.resources.gpu_milli > 0 || !r.gpu.is_empty() {
        gpu::check_grant(slots, &r.spec.resources, &r.spec.gpu_models, &r.gpu)
            .map_err(|e| HostError::InvalidRequest { field: "gpu", reason: format!("host {host}: {e}") })?;
        gpu::apply(slots, &r.gpu, false);
    }
    Ok(())
}

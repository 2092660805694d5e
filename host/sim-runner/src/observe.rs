//! What the runner observes for the report: why tasks wait, pool samples,
//! and the fill of "arrive until full".

use super::*;

impl Runner {
    /// Why instance `i` of a job waits, as the report words it.
    pub(crate) fn why_waiting(&self, id: &str, i: u32, state: Option<TaskState>) -> String {
        self.cluster
            .jobs
            .admission_info(id, i)
            .map(|info| pending_category(&info))
            .or_else(|| self.cluster.jobs.placement_failure(id, i).map(|r| format!("placement: {}", r.as_str())))
            .unwrap_or_else(|| {
                format!("waiting ({}) with no reason recorded yet", state.map_or("unknown", TaskState::as_str))
            })
    }

    /// Takes a job that did not fit whole out of a fill that goes on: left
    /// waiting, it would hold the head of its pool's queue (admission is in
    /// order) and keep its placed tasks' resources. Its tasks are reported
    /// never placed, with why the first one waited.
    pub(crate) async fn withdraw(&mut self, id: &str, now: u64) {
        let tasks = match self.cluster.jobs.get(id).await {
            Ok(info) => info.tasks,
            Err(_) => return, // rejected at submission: nothing to take out
        };
        let why = tasks
            .iter()
            .enumerate()
            .find(|(_, t)| !(t.state.is_on_host() || t.state == TaskState::Placed))
            .map(|(i, t)| self.why_waiting(id, i as u32, Some(t.state)))
            .unwrap_or_else(|| "no task waiting".into());
        if let Err(e) = self.cluster.jobs.kill(id, None).await {
            tracing::warn!(job = id, error = %e, "withdrawing a job that did not fit");
        }
        self.step(BASE_MS + now).await;
        self.observe();
        if let Some(meta) = self.jobs.get_mut(id) {
            meta.rejected = Some(format!("did not fit whole when it arrived (withdrawn): {why}"));
        }
    }

    /// Whether every task of a submitted job is on a host (or placed on its way there).
    pub(crate) async fn placed_whole(&self, id: &str) -> bool {
        if self.jobs.get(id).is_none_or(|m| m.rejected.is_some()) {
            return false;
        }
        match self.cluster.jobs.get(id).await {
            Ok(info) => {
                !info.tasks.is_empty()
                    && info.tasks.iter().all(|t| t.state.is_on_host() || t.state == TaskState::Placed)
            }
            Err(_) => false,
        }
    }

    /// "Arrive until full" ([`Arrival::UntilFull`]): the trace's lines in
    /// order with their times ignored; each job is stepped until it is placed
    /// whole, or until two steps in a row change nothing (it does not fit).
    /// Returns the virtual time reached, the steps taken and what the mode saw.
    pub(crate) async fn fill<R: BufRead>(
        &mut self,
        reader: &mut Reader<R>,
        tick: u64,
        sample_every: u64,
        mode: FillMode,
        progress: &mut Option<Progress>,
    ) -> Result<(u64, u64, FillObserved), SimError> {
        let FillMode { stop_at_first_unplaced, until_gpu_pct, shuffle } = mode;
        let mut seen = FillObserved { stop_at_first_unplaced, ..FillObserved::default() };
        let (mut now, mut steps) = (0u64, 0u64);
        let mut last_progress = Instant::now();
        // The GPU curve: capacity from host lines, arrived and held per job.
        let (mut capacity, mut arrived, mut held, mut next_point) = (0u64, 0u64, 0u64, 0u64);
        // The trace's jobs, kept to be offered again (`until_gpu_pct`).
        let mut offered: Vec<(u64, paceline_sim::trace::JobEvent)> = Vec::new();
        let mut trace_done = false;
        let (mut pass, mut replay) = (1u32, 0usize);
        // Shuffled: the whole trace read first, its jobs put after the rest
        // in a random order.
        let mut shuffled = match shuffle {
            Some(seed) => {
                let (mut first, mut jobs) = (VecDeque::new(), Vec::new());
                while let Some((line, timed)) = next_event(reader)? {
                    match timed.event {
                        Event::Job(_) => jobs.push((line, timed)),
                        _ => first.push_back((line, timed)),
                    }
                }
                let mut rng = paceline_sim::rng::Rng::new(seed);
                shuffle_in_place(&mut jobs, &mut rng);
                first.extend(jobs);
                Some((first, rng))
            }
            None => None,
        };
        loop {
            let target_reached =
                until_gpu_pct.is_none_or(|pct| capacity > 0 && arrived >= capacity / 100 * u64::from(pct));
            let next = match (&mut shuffled, trace_done) {
                (_, true) => None,
                (Some((queue, _)), false) => queue.pop_front(),
                (None, false) => next_event(reader)?,
            };
            let (line, mut job) = match next {
                Some((line, timed)) => match timed.event {
                    Event::Pool(_) | Event::Host(_) => {
                        if let Event::Host(h) = &timed.event {
                            capacity += h.resources.gpu_milli;
                        }
                        self.apply(line, now, timed.event).await?;
                        continue;
                    }
                    Event::End => {
                        trace_done = true;
                        continue;
                    }
                    Event::Job(j) => {
                        if until_gpu_pct.is_some() {
                            offered.push((line, (*j).clone()));
                        }
                        (line, j)
                    }
                    other => {
                        *seen.dropped.entry(other.name().to_string()).or_default() += 1;
                        continue;
                    }
                },
                None => {
                    trace_done = true;
                    // Offer the trace's jobs again until the target is met.
                    if target_reached || offered.is_empty() {
                        break;
                    }
                    if replay == offered.len() {
                        replay = 0;
                        pass += 1;
                    }
                    if replay == 0 && pass == 1 {
                        pass = 2;
                    }
                    if replay == 0
                        && let Some((_, rng)) = &mut shuffled
                    {
                        shuffle_in_place(&mut offered, rng);
                    }
                    let (line, mut j) = offered[replay].clone();
                    replay += 1;
                    j.id = format!("{}.r{pass}", j.id);
                    j.spec.name = j.id.clone();
                    (line, Box::new(j))
                }
            };
            if !trace_done && until_gpu_pct.is_some() && target_reached {
                break;
            }
            let job_gpu = job.spec.default_task.resources.gpu_milli.saturating_mul(u64::from(job.spec.instance_count));
            // Nothing ends: the cluster only fills.
            job.run = RunScript::default();
            job.runs.clear();
            let id = job.id.clone();
            self.apply(line, now, Event::Job(job)).await?;
            seen.jobs_submitted += 1;
            let mut idle = 0;
            let placed = loop {
                let changed = self.step(BASE_MS + now).await;
                steps += 1;
                self.observe();
                self.sample_until(now + tick, sample_every);
                self.sim.advance(tick).await;
                now += tick;
                if self.placed_whole(&id).await {
                    break true;
                }
                // A rejected job changes nothing; a job that waits for room
                // goes through admission and a round, then the cluster is quiet.
                idle = if changed { 0 } else { idle + 1 };
                if idle >= 2 {
                    break false;
                }
            };
            if let Some(cb) = progress.as_mut()
                && last_progress.elapsed() >= Duration::from_millis(200)
            {
                cb(now, None, self.tasks_arrived);
                last_progress = Instant::now();
            }
            arrived += job_gpu;
            if placed {
                held += job_gpu;
            }
            if capacity > 0 {
                while arrived * 50 >= next_point * capacity {
                    seen.gpu_curve.push(paceline_sim::report::FillPoint {
                        arrived_milli: arrived,
                        allocated_milli: held,
                        capacity_milli: capacity,
                    });
                    next_point += 1;
                }
            }
            if !placed {
                if seen.first_unplaced.is_none() {
                    seen.first_unplaced = Some(id.clone());
                }
                if stop_at_first_unplaced {
                    break;
                }
                self.withdraw(&id, now).await;
            }
        }
        Ok((now, steps, seen))
    }
}

//! How a trace's events are fed to the runner: by their times, the clock
//! jumping to the next thing due, or until the cluster is full.

use super::*;

/// How "arrive until full" goes ([`Arrival::UntilFull`]'s fields).
#[derive(Clone, Copy, Debug)]
pub(crate) struct FillMode {
    pub(crate) stop_at_first_unplaced: bool,
    pub(crate) until_gpu_pct: Option<u32>,
    pub(crate) shuffle: Option<u64>,
}

/// Fisher–Yates with the simulator's own generator, so an order depends on
/// the seed alone.
pub(crate) fn shuffle_in_place<T>(items: &mut [T], rng: &mut paceline_sim::rng::Rng) {
    for i in (1..items.len()).rev() {
        let j = rng.range(0, i as u64) as usize;
        items.swap(i, j);
    }
}

/// The next event of the trace with its line number.
pub(crate) fn next_event<R: BufRead>(reader: &mut Reader<R>) -> Result<Option<(u64, paceline_sim::Timed)>, SimError> {
    match reader.next() {
        None => Ok(None),
        Some(Ok(t)) => Ok(Some((reader.line(), t))),
        Some(Err(e)) => Err(e.into()),
    }
}

pub(crate) fn crate_version_label() -> String {
    paceline_plugin::builtins::BUILTIN_VERSION.to_string()
}

pub(crate) fn peak_rss_mib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1_024)
}

/// The replay by time ([`Arrival::ByTime`]): events at their times, the
/// clock jumping to the next thing due. Returns the virtual time reached and
/// the steps taken.
pub(crate) async fn by_time<R: BufRead>(
    runner: &mut Runner,
    reader: &mut Reader<R>,
    header: &paceline_sim::Header,
    tick: u64,
    sample_every: u64,
    options: &mut Options,
) -> Result<(u64, u64), SimError> {
    let mut pending = next_event(reader)?;
    let mut now = 0u64; // trace time
    let mut steps = 0u64;
    let mut ended = false;
    let mut last_progress = Instant::now();
    loop {
        // Events due now.
        let mut applied = false;
        let mut arrived_now: Vec<String> = Vec::new();
        while let Some((line, timed)) = pending.take() {
            if timed.at > now {
                pending = Some((line, timed));
                break;
            }
            if matches!(timed.event, Event::End) {
                ended = true;
                break;
            }
            // A kill or update of a job that arrives in this same step waits
            // for the next one: a server places a new job as soon as it is
            // created, so a kill that came later in real time found its tasks
            // placed. Applied together, the kill would come first and the
            // replay would place nothing (a recorded `paceline dev` session
            // showed it: a job killed 230 ms after its creation).
            let same_step = match &timed.event {
                Event::Kill(k) => arrived_now.contains(&k.job),
                Event::Update(u) => arrived_now.contains(&u.job),
                _ => false,
            };
            if same_step {
                pending = Some((line, timed));
                break;
            }
            if let Event::Job(j) = &timed.event {
                arrived_now.push(j.id.clone());
            }
            // Arrivals count from the trace's time; they take effect at this step.
            runner.apply(line, timed.at, timed.event).await?;
            applied = true;
            pending = next_event(reader)?;
        }
        let changed = runner.step(BASE_MS + now).await || applied;
        steps += 1;
        runner.observe();
        if let Some(cb) = options.progress.as_mut()
            && last_progress.elapsed() >= Duration::from_millis(200)
        {
            cb(now, header.duration_ms, runner.tasks_arrived);
            last_progress = Instant::now();
        }
        if ended || options.until_ms.is_some_and(|u| now >= u) {
            break;
        }
        // When is the next step?
        let next_event = pending.as_ref().map(|(_, t)| t.at);
        let due = [
            runner.sim.next_due_ms().map(rel),
            runner.cluster.jobs.next_deadline_ms().map(rel),
            runner.cluster.resmgr.lock().ok().and_then(|rm| rm.next_wake_ms()).map(rel),
        ]
        .into_iter()
        .flatten()
        .min();
        let at_next_tick = now + tick;
        let target = if changed || runner.preemption_pending() {
            Some(at_next_tick)
        } else {
            match (next_event, due) {
                (None, None) => None,
                (a, b) => a.into_iter().chain(b).min().map(|t| t.max(at_next_tick).div_ceil(tick) * tick),
            }
        };
        // Nothing left that could change anything: the trace is read, no
        // run will end, no deadline is due, and the last step was idle.
        let stalled = next_event.is_none()
            && runner.sim.next_due_ms().is_none()
            && runner.cluster.jobs.next_deadline_ms().is_none()
            && !changed;
        let Some(mut target) = target.filter(|_| !stalled) else { break };
        if let Some(u) = options.until_ms {
            target = target.min(u.max(now + 1));
        }
        runner.sample_until(target, sample_every);
        runner.sim.advance(target - now).await;
        now = target;
    }
    Ok((now, steps))
}

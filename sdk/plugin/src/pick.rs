//! [`RunPicker`]: choosing hosts for a run of alike tasks in O(log H) each
//! instead of a scan of every host per task.
//!
//! A round often holds many tasks of one job one after another, all with
//! the same demand and constraints (100 instances of a service, 1,200 of a
//! Nomad job). For a policy whose score of a host depends only on that
//! host (its free capacity, its count of the job's tasks, its attributes)
//! and on the task's demand, placing a task changes the score of the one
//! host it went to and of no other. So the first task of a run scans the
//! hosts as [`Round::pick_min_by_key`] does; from the second on, the
//! candidates sit in a heap, and each placement re-scores the one host it
//! changed. The choices are the same as a scan's: least key, ties to the
//! lowest host index.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::placement::Round;
use crate::types::{HostFilter, Resources, UnplacedReason};

/// What makes two tasks alike for the picker: the same job (per-host
/// counts), demand and constraint set, no preferred host, no GPU ask.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Alike {
    job: u32,
    constraints: u32,
    demand: Resources,
}

/// Reusable state of one policy's round: keep one per `place` call.
///
/// Use it only with a key that depends on the host's own state and the
/// task: a key that reads other hosts (such as a zone's count of the job's
/// tasks, which a placement on another host of the zone changes) needs
/// [`Round::pick_min_by_key`].
#[derive(Debug)]
pub struct RunPicker<K: Ord + Copy> {
    run: Option<Alike>,
    /// Candidates for the run: (key, host), least first. Built at the run's
    /// second task.
    heap: Option<BinaryHeap<Reverse<(K, u32)>>>,
    /// The round's journal length after the last pick's assignment is
    /// expected to be this, with `last` at its end; anything else (an undo,
    /// an assignment the picker did not choose) ends the run.
    expect_journal: usize,
    last: u32,
}

impl<K: Ord + Copy> Default for RunPicker<K> {
    fn default() -> Self {
        RunPicker { run: None, heap: None, expect_journal: usize::MAX, last: u32::MAX }
    }
}

impl<K: Ord + Copy> RunPicker<K> {
    /// A picker with no run yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// The host with the least `key` for task `t` among the eligible hosts
    /// it fits and whose job maximum it does not reach (ties to the lowest
    /// index), or why there is none: what [`Round::pick_min_by_key`]
    /// returns, faster for runs of alike tasks. The caller assigns `t` to
    /// the host returned (or ends the run by assigning elsewhere).
    pub fn pick(&mut self, round: &Round<'_>, t: u32, key: impl Fn(u32) -> K) -> Result<u32, UnplacedReason> {
        self.pick_or_scan(round, t, &key, || round.pick_min_by_key(t, &key))
    }

    /// [`RunPicker::pick`] with the policy's own scan for a run's first
    /// task (and for the reason when no host is left): `scan` must choose
    /// as the least `key` would, ties to the lowest index, among the hosts
    /// [`RunPicker::pick`] considers.
    pub fn pick_or_scan(
        &mut self,
        round: &Round<'_>,
        t: u32,
        key: impl Fn(u32) -> K,
        scan: impl FnOnce() -> Result<u32, UnplacedReason>,
    ) -> Result<u32, UnplacedReason> {
        let task = &round.request.tasks[t as usize];
        let alike = Alike { job: task.job, constraints: task.constraints, demand: task.demand };
        let cacheable = task.preferred_host.is_none() && round.gpu_task(t).milli == 0;
        let journal = round.journal();
        let continues = cacheable
            && self.run == Some(alike)
            && journal.len() == self.expect_journal
            && journal.last() == Some(&self.last);
        if !continues {
            // A new run (or none): one scan, as without the picker.
            self.heap = None;
            self.run = cacheable.then_some(alike);
            let h = scan()?;
            self.remember(round, h);
            return Ok(h);
        }
        let heap = match &mut self.heap {
            Some(heap) => {
                // Only the last host changed: score it again if it still qualifies.
                let h = self.last;
                if round.fits(t, h) && !round.at_max_per_host(task.job, h) {
                    heap.push(Reverse((key(h), h)));
                }
                heap
            }
            None => {
                let mut all = Vec::new();
                let mut add = |h: u32| {
                    if round.fits(t, h) && !round.at_max_per_host(task.job, h) {
                        all.push(Reverse((key(h), h)));
                    }
                };
                match round.eligible(task) {
                    HostFilter::All => (0..round.free.len() as u32).for_each(&mut add),
                    HostFilter::Only(hosts) => hosts.iter().copied().for_each(&mut add),
                }
                self.heap.insert(BinaryHeap::from(all))
            }
        };
        match heap.pop() {
            Some(Reverse((_, h))) => {
                self.remember(round, h);
                Ok(h)
            }
            None => {
                // Nothing left: the scan says why (full, or at the maximum).
                self.run = None;
                self.heap = None;
                scan()
            }
        }
    }

    fn remember(&mut self, round: &Round<'_>, host: u32) {
        self.expect_journal = round.journal().len() + 1;
        self.last = host;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::placement::Round;
    use crate::types::*;

    fn request(hosts: &[(u64, u64)], tasks: u32, max_per_host: u32) -> PlacementRequest {
        PlacementRequest {
            hosts: hosts
                .iter()
                .map(|&(cpu, total)| HostOffer {
                    free: Resources::new(cpu, 1 << 20, 1 << 20, 0),
                    total: Resources::new(total, 1 << 20, 1 << 20, 0),
                })
                .collect(),
            jobs: vec![JobInfo { max_per_host, ..JobInfo::default() }],
            constraints: vec![ConstraintSet::default()],
            tasks: (0..tasks)
                .map(|i| Task {
                    job: 0,
                    instance: i,
                    gang: i,
                    demand: Resources::new(1_000, 1, 0, 0),
                    ..Task::default()
                })
                .collect(),
            ..PlacementRequest::default()
        }
    }

    /// Every task placed by the picker and by the scan, side by side.
    fn both(req: &PlacementRequest, key: impl Fn(&Round<'_>, u32) -> (u64, u64)) -> (Vec<String>, Vec<String>) {
        let run = |picker: bool| {
            let mut round = Round::tracking_every_job(req);
            let mut p = RunPicker::new();
            let mut out = Vec::new();
            for t in 0..req.tasks.len() as u32 {
                let chosen = if picker {
                    let r = &round;
                    p.pick(r, t, |h| key(r, h))
                } else {
                    let r = &round;
                    r.pick_min_by_key(t, |h| key(r, h))
                };
                match chosen {
                    Ok(h) => {
                        round.assign(t, h);
                        out.push(format!("{t}->{h}"));
                    }
                    Err(reason) => out.push(format!("{t}:{reason:?}")),
                }
            }
            out
        };
        (run(true), run(false))
    }

    #[test]
    fn a_run_goes_where_a_scan_would() {
        // Fullest first (binpack-like), then emptiest first (spread-like).
        let req = request(&[(4_000, 8_000), (2_000, 8_000), (8_000, 8_000), (3_000, 4_000)], 20, 0);
        let fullest = |r: &Round<'_>, h: u32| (r.free[h as usize].cpu_millis, 0);
        let (picked, scanned) = both(&req, fullest);
        assert_eq!(picked, scanned);
        assert!(picked.iter().filter(|s| s.contains(':')).count() == 3, "17 fit in 17 cores: {picked:?}");
        let emptiest = |r: &Round<'_>, h: u32| (u64::MAX - r.free[h as usize].cpu_millis, 0);
        assert_eq!(both(&req, emptiest).0, both(&req, emptiest).1);
    }

    #[test]
    fn the_job_maximum_and_the_reason_match_a_scan() {
        let req = request(&[(4_000, 8_000), (4_000, 8_000), (4_000, 8_000)], 5, 1);
        let (picked, scanned) = both(&req, |r, h| (r.free[h as usize].cpu_millis, u64::from(h)));
        assert_eq!(picked, scanned);
        assert_eq!(&picked[3..], ["3:MaxPerHost", "4:MaxPerHost"]);
    }

    #[test]
    fn an_assignment_it_did_not_choose_ends_the_run() {
        let req = request(&[(4_000, 8_000), (3_000, 8_000)], 4, 0);
        let mut round = Round::new(&req);
        let mut p = RunPicker::new();
        let key = |r: &Round<'_>, h: u32| r.free[h as usize].cpu_millis;
        let h = p.pick(&round, 0, |h| key(&round, h)).expect("fits");
        round.assign(0, h);
        let h = p.pick(&round, 1, |h| key(&round, h)).expect("fits");
        assert_eq!(h, 1);
        // The caller puts task 1 elsewhere: the picker's heap must not trust host 1's old key.
        round.assign(1, 0);
        let r = &round;
        let next = p.pick(r, 2, |h| key(r, h)).expect("fits");
        assert_eq!(Ok(next), r.pick_min_by_key(2, |h| key(r, h)));
    }
}

//! Fuzz target `validate`: host-side validation of plugin answers against
//! their requests, with generated (often nonsensical) requests and answers.
//!
//! Properties: the checks never panic, whatever the indices; and an answer
//! they accept really keeps the invariants, recomputed here independently
//! (every task once, capacity, gangs whole, victims preemptible and
//! needed). `scripts/fuzz validate MINUTES` runs it long with fresh seeds;
//! the normal test run does a short pass.
#![cfg(not(target_arch = "wasm32"))]

use paceline_plugin_sdk::types::*;
use paceline_plugin_sdk::validate::{check_actions, check_placement, check_victims};
use proptest::prelude::*;

fn resources() -> impl Strategy<Value = Resources> {
    (0u64..3000, 0u64..3000, 0u64..3).prop_map(|(c, m, g)| Resources::new(c, m, 0, g))
}

fn placement_request() -> impl Strategy<Value = PlacementRequest> {
    let host =
        (resources(), resources()).prop_map(|(free, extra)| HostOffer { free, total: free.saturating_add(&extra) });
    let task = (0u32..3, 0u32..4, resources(), 0u32..3, proptest::option::of(0u32..6)).prop_map(
        |(job, gang, demand, constraints, preferred_host)| Task {
            job,
            instance: 0,
            gang,
            demand,
            constraints,
            preferred_host,
        },
    );
    let job =
        (0u32..3, proptest::collection::vec((0u32..6, 0u32..3), 0..3)).prop_map(|(max_per_host, existing)| JobInfo {
            max_per_host,
            existing: existing.into_iter().map(|(host, count)| HostCount { host, count }).collect(),
            ..JobInfo::default()
        });
    let set = proptest::option::of(proptest::collection::btree_set(0u32..6, 0..5)).prop_map(|only| ConstraintSet {
        eligible: only.map_or(HostFilter::All, |s| HostFilter::Only(s.into_iter().collect())),
        preferences: Vec::new(),
    });
    (
        proptest::collection::vec(host, 0..6),
        proptest::collection::vec(job, 0..3),
        proptest::collection::vec(set, 0..3),
        proptest::collection::vec(task, 0..10),
    )
        .prop_map(|(hosts, jobs, constraints, mut tasks)| {
            // Gangs are contiguous in a real request: sort by gang.
            tasks.sort_by_key(|t| t.gang);
            PlacementRequest { hosts, jobs, constraints, tasks, ..PlacementRequest::default() }
        })
}

fn placement_result() -> impl Strategy<Value = PlacementResult> {
    (proptest::collection::vec((0u32..12, 0u32..8), 0..12), proptest::collection::vec(0u32..12, 0..12)).prop_map(
        |(a, u)| PlacementResult {
            assignments: a.into_iter().map(|(task, host)| Assignment { task, host }).collect(),
            unplaced: u
                .into_iter()
                .map(|task| Unplaced { task, reason: UnplacedReason::Deferred, detail: String::new() })
                .collect(),
            grants: Vec::new(),
        },
    )
}

proptest! {
    // Cases from PROPTEST_CASES (scripts/fuzz), else proptest's 256.
    #![proptest_config(ProptestConfig::default())]

    #[test]
    fn accepted_placements_keep_the_invariants(req in placement_request(), res in placement_result()) {
        if check_placement(&req, &res).is_ok() {
            let mut seen = vec![0u32; req.tasks.len()];
            let mut used = vec![Resources::ZERO; req.hosts.len()];
            for a in &res.assignments {
                seen[a.task as usize] += 1;
                used[a.host as usize] = used[a.host as usize].saturating_add(&req.tasks[a.task as usize].demand);
            }
            for u in &res.unplaced {
                seen[u.task as usize] += 1;
            }
            prop_assert!(seen.iter().all(|&n| n == 1), "every task exactly once");
            for (h, u) in used.iter().enumerate() {
                prop_assert!(u.fits_in(&req.hosts[h].free), "host {h} within its free capacity");
            }
            let placed: std::collections::BTreeSet<u32> = res.assignments.iter().map(|a| a.task).collect();
            for t in 0..req.tasks.len() {
                for o in 0..req.tasks.len() {
                    if req.tasks[t].gang == req.tasks[o].gang {
                        prop_assert_eq!(placed.contains(&(t as u32)), placed.contains(&(o as u32)), "gang whole");
                    }
                }
            }
        }
    }

    #[test]
    fn accepted_victims_are_preemptible_and_needed(
        running in proptest::collection::vec((any::<bool>(), any::<bool>(), resources(), 0u32..3), 0..8),
        needs in proptest::collection::vec((resources(), proptest::collection::vec(0u32..3, 0..3)), 0..3),
        victims in proptest::collection::vec((0u32..10, 0u32..4), 0..8),
    ) {
        let req = PreemptionRequest {
            pools: vec![PoolView::default(); 3],
            running: running.into_iter().map(|(preemptible, revocable, resources, pool)| RunningTask { pool, preemptible, revocable, resources, ..RunningTask::default() }).collect(),
            needs: needs.into_iter().map(|(resources, from_pools)| Need { resources, from_pools, ..Need::default() }).collect(),
            ..PreemptionRequest::default()
        };
        let victims: Vec<Victim> = victims.into_iter().map(|(task, need)| Victim { task, need, reason: VictimReason::OverEntitlement }).collect();
        if check_victims(&req, &victims).is_ok() {
            for v in &victims {
                let t = &req.running[v.task as usize];
                prop_assert!(t.preemptible || t.revocable);
                let need = &req.needs[v.need as usize];
                let freed = victims.iter().filter(|o| o.need == v.need && o.task != v.task)
                    .fold(Resources::ZERO, |acc, o| acc.saturating_add(&req.running[o.task as usize].resources));
                prop_assert!(!need.resources.fits_in(&freed), "victim {} was needed", v.task);
            }
        }
    }

    #[test]
    fn actions_never_panic_and_success_needs_every_instance(
        count in 0u32..5,
        states in proptest::collection::vec(0usize..15, 0..6),
        job_state in 0usize..7,
        actions in proptest::collection::vec((0usize..6, 0u32..8, 0usize..7), 0..6),
    ) {
        const TASK: [TaskState; 15] = [TaskState::Initialized, TaskState::Pending, TaskState::Ready, TaskState::Placing, TaskState::Placed, TaskState::Launching, TaskState::Launched, TaskState::Starting, TaskState::Running, TaskState::Succeeded, TaskState::Failed, TaskState::Lost, TaskState::Killed, TaskState::Preempting, TaskState::Killing];
        const JOB: [JobState; 7] = [JobState::Initialized, JobState::Pending, JobState::Running, JobState::Succeeded, JobState::Failed, JobState::Killed, JobState::Killing];
        let job = JobView { state: JOB[job_state], instance_count: count, ..JobView::default() };
        let tasks: Vec<TaskView> = states.iter().enumerate().map(|(i, &s)| TaskView { instance: i as u32, state: TASK[s], ..TaskView::default() }).collect();
        let actions: Vec<Action> = actions.into_iter().map(|(k, i, s)| match k {
            0 => Action::Launch(i),
            1 => Action::Kill(i),
            2 => Action::RestartAfter(Restart { instance: i, delay_ms: 0 }),
            3 => Action::MarkJob(JOB[s]),
            4 => Action::UpdateBatch(vec![i]),
            _ => Action::UpdateFinished(i % 2 == 0),
        }).collect();
        if check_actions(&job, &tasks, &actions).is_ok() && actions.contains(&Action::MarkJob(JobState::Succeeded)) {
            for i in 0..count {
                prop_assert!(tasks.iter().any(|t| t.instance == i && t.state == TaskState::Succeeded));
            }
        }
    }
}

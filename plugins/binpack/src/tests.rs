use super::*;
use paceline_plugin_sdk::harness::{load_dir, run_placement};

#[test]
fn scenarios() {
    for s in load_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/scenarios")).expect("scenario table") {
        run_placement::<Binpack>(&s).unwrap_or_else(|e| panic!("{}: {e}", s.name));
    }
}

#[test]
fn best_fit_all_picks_tightest_and_breaks_ties_low() {
    let total = Resources::new(4000, 4096, 0, 0);
    let host = |cpu, mem| HostOffer { free: Resources::new(cpu, mem, 0, 0), total };
    // Seven hosts: the loop's four-at-a-time body and its tail both run.
    let mut hosts = vec![host(4000, 4096), host(1000, 1024), host(1000, 1024)];
    hosts.extend([host(4000, 4096); 3]);
    hosts.push(host(600, 600));
    let req = PlacementRequest { hosts, ..PlacementRequest::default() };
    let c = Compact::new(&req);
    assert_eq!(best_fit_all(&c.slots, [500, 512, 0]), Some(6), "the tail host fits best");
    assert_eq!(best_fit_all(&c.slots, [700, 512, 0]), Some(1), "tie between 1 and 2 goes to 1");
    assert_eq!(best_fit_all(&c.slots, [2000, 512, 0]), Some(0));
    assert_eq!(best_fit_all(&c.slots, [5000, 0, 0]), None);
}

#[test]
fn the_compact_copy_follows_assignments_and_undone_gangs() {
    // A gang of two that cannot fit whole, then a task that needs the space it released.
    let total = Resources::new(2000, 2048, 0, 0);
    let req = PlacementRequest {
        hosts: vec![HostOffer { free: total, total }],
        jobs: vec![JobInfo::default()],
        constraints: vec![ConstraintSet::default()],
        tasks: vec![
            Task { gang: 0, demand: Resources::new(1500, 10, 0, 0), ..Task::default() },
            Task { gang: 0, demand: Resources::new(1500, 10, 0, 0), ..Task::default() },
            Task { gang: 1, demand: Resources::new(2000, 10, 0, 0), ..Task::default() },
        ],
        ..PlacementRequest::default()
    };
    let r = Binpack::place(&req);
    assert_eq!(r.assignments, vec![Assignment { task: 2, host: 0 }]);
}

/// Binpack with a scan for every task: what the run picker must match.
fn scanning(req: &PlacementRequest) -> PlacementResult {
    let mut compact = Compact::new(req);
    place_gangs(Round::new(req), |round, t| {
        compact.sync(round);
        best_fit(round, &compact, &mut RunPicker::new(), t)
    })
}

#[test]
fn runs_of_alike_tasks_go_where_a_scan_per_task_would() {
    // Hosts of three sizes, some partly used; jobs of 1 to 40 alike tasks:
    // some limited per host, some constrained to half the hosts, some with
    // a preference, one gang of three that cannot fit whole.
    let sizes = [Resources::new(8_000, 16_384, 100_000, 0), Resources::new(16_000, 32_768, 100_000, 0)];
    let hosts: Vec<HostOffer> = (0..60u64)
        .map(|i| {
            let total = sizes[(i % 2) as usize];
            let used = Resources::new((i * 700) % 6_000, (i * 1_300) % 9_000, 0, 0);
            HostOffer { free: total.saturating_sub(&used), total }
        })
        .collect();
    let half: Vec<u32> = (0..60).filter(|h| h % 2 == 0).collect();
    let rack = AttributeColumn { key: "rack".into(), values: (0..60).map(|h| h % 3).collect() };
    let mut req = PlacementRequest {
        hosts,
        attributes: vec![rack],
        symbols: vec!["a".into(), "b".into(), "c".into()],
        jobs: vec![
            JobInfo::default(),
            JobInfo { max_per_host: 1, ..JobInfo::default() },
            JobInfo { max_per_host: 2, ..JobInfo::default() },
            JobInfo::default(),
        ],
        constraints: vec![
            ConstraintSet::default(),
            ConstraintSet { eligible: HostFilter::Only(half), preferences: Vec::new() },
            ConstraintSet {
                eligible: HostFilter::All,
                preferences: vec![Preference { attribute: 0, value: 1, weight: 5 }],
            },
        ],
        ..PlacementRequest::default()
    };
    let mut gang = 0;
    let mut add = |job: u32, constraints: u32, count: u32, demand: Resources, together: bool| {
        for i in 0..count {
            req.tasks.push(Task { job, instance: i, gang, demand, constraints, preferred_host: None });
            if !together {
                gang += 1;
            }
        }
        if together {
            gang += 1;
        }
    };
    add(0, 0, 40, Resources::new(1_000, 2_048, 0, 0), false);
    add(1, 1, 35, Resources::new(2_000, 1_024, 0, 0), false);
    add(2, 2, 30, Resources::new(500, 512, 0, 0), false);
    add(3, 0, 3, Resources::new(15_000, 1_024, 0, 0), true);
    add(0, 0, 1, Resources::new(3_000, 1_000, 0, 0), false);
    add(3, 1, 25, Resources::new(1_500, 4_096, 0, 0), false);
    add(0, 0, 200, Resources::new(2_000, 2_048, 0, 0), false);
    let picked = Binpack::place(&req);
    let scanned = scanning(&req);
    assert_eq!(picked, scanned);
    assert!(picked.assignments.len() > 100, "{} placed", picked.assignments.len());
    assert!(!picked.unplaced.is_empty(), "the last job does not all fit");
}

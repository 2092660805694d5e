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

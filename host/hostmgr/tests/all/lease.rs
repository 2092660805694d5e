//! Leases: exclusivity, expiry, and the launch checks.

use std::collections::HashSet;

use paceline_hostmgr::{HostError, LeaseRequest};
use paceline_model::Constraint;
use paceline_model::Resources;

use crate::support::*;

#[tokio::test]
async fn a_host_is_never_in_two_live_leases() {
    let (_sim, manager, _events) = sim_manager(10, config()).await;
    let a = manager.lease(&LeaseRequest::new(SMALL, 6, 60_000)).unwrap();
    let b = manager.lease(&LeaseRequest::new(SMALL, 6, 60_000)).unwrap();
    assert_eq!((a.hosts.len(), b.hosts.len()), (6, 4));
    let names: HashSet<&str> = a.hosts.iter().chain(&b.hosts).map(|o| o.name.as_str()).collect();
    assert_eq!(names.len(), 10, "no host in both");
    assert!(manager.lease(&LeaseRequest::new(SMALL, 6, 60_000)).unwrap().hosts.is_empty());
    manager.release(a.id).unwrap();
    assert_eq!(manager.lease(&LeaseRequest::new(SMALL, 10, 60_000)).unwrap().hosts.len(), 6);
    assert!(matches!(manager.release(a.id), Err(HostError::UnknownLease(id)) if id == a.id));
}

#[tokio::test]
async fn filters_free_resources_and_constraints() {
    let (sim, manager, _events) = sim_manager(2, config()).await;
    sim.add_host("b0", HOST, [("zone".to_string(), "b".to_string())].into()).await.unwrap();
    manager.sync().await.unwrap();
    let mut r = LeaseRequest::new(SMALL, 10, 60_000);
    r.constraints =
        vec![Constraint::AttributeEquals { key: "zone".into(), value: "b".into() }, Constraint::MaxPerHost { max: 1 }];
    let l = manager.lease(&r).unwrap();
    assert_eq!(l.hosts.iter().map(|o| o.name.as_str()).collect::<Vec<_>>(), vec!["b0"]);
    let mut pinned = LeaseRequest::new(SMALL, 10, 60_000);
    pinned.only_hosts = vec!["h00001".into(), "nowhere".into(), "b0".into()];
    let n = manager.lease(&pinned).unwrap();
    assert_eq!(n.hosts.iter().map(|o| o.name.as_str()).collect::<Vec<_>>(), vec!["h00001"], "b0 is leased already");
    manager.release(n.id).unwrap();
    let mut preferred = LeaseRequest::new(SMALL, 1, 60_000);
    preferred.prefer_hosts = vec!["h00001".into()];
    let p = manager.lease(&preferred).unwrap();
    assert_eq!(p.hosts.iter().map(|o| o.name.as_str()).collect::<Vec<_>>(), vec!["h00001"]);
    preferred.max_hosts = 5;
    preferred.prefer_hosts = vec!["h00000".into()];
    let p = manager.lease(&preferred).unwrap();
    assert_eq!(p.hosts[0].name, "h00000", "preferred first, then the rest");
    assert!(p.hosts.iter().all(|o| o.name != "b0" && o.name != "h00001"));
    let too_big = LeaseRequest::new(Resources::new(5000, 1, 0, 0), 10, 60_000);
    assert!(manager.lease(&too_big).unwrap().hosts.is_empty());
    assert!(matches!(
        manager.lease(&LeaseRequest::new(SMALL, 0, 1)),
        Err(HostError::InvalidRequest { field: "max_hosts", .. })
    ));
}

#[tokio::test]
async fn expired_leases_return_their_hosts() {
    let (sim, manager, _events) = sim_manager(3, config()).await;
    let a = manager.lease(&LeaseRequest::new(SMALL, 3, 1_000)).unwrap();
    assert_eq!(a.hosts.len(), 3);
    assert!(manager.lease(&LeaseRequest::new(SMALL, 3, 1_000)).unwrap().hosts.is_empty());
    sim.advance(1_000).await;
    manager.tick().await;
    assert!(manager.hosts().iter().all(|h| h.lease.is_none()));
    let b = manager.lease(&LeaseRequest::new(SMALL, 3, 1_000)).unwrap();
    assert_eq!(b.hosts.len(), 3);
    let err = manager.launch(a.id, "h00000", vec![req("e-0-1", SMALL, &[])]).await.unwrap_err();
    assert!(matches!(err, HostError::UnknownLease(id) if id == a.id), "{err}");
    // A lease that expires without a tick is refused as expired.
    sim.advance(1_000).await;
    let err = manager.launch(b.id, "h00000", vec![req("e-0-1", SMALL, &[])]).await.unwrap_err();
    assert!(matches!(err, HostError::LeaseExpired(id) if id == b.id), "{err}");
}

#[tokio::test]
async fn launch_errors_name_what_is_wrong() {
    let (_sim, manager, _events) = sim_manager(3, config()).await;
    let lease = manager.lease(&LeaseRequest::new(SMALL, 2, 60_000)).unwrap();
    let inside = lease.hosts[0].name.clone();
    let other = lease.hosts[1].name.clone();
    manager.launch(lease.id, &other, vec![req("dup-0-1", SMALL, &[])]).await.unwrap();
    let outside = manager.hosts().into_iter().find(|h| h.lease.is_none() && h.view.name != other).unwrap().view.name;
    let big = Resources::new(3000, 1024, 0, 0);

    type Check = fn(&HostError) -> bool;
    let cases: Vec<(&str, &str, Vec<paceline_model::run::LaunchRequest>, Check)> = vec![
        ("over capacity", &inside, vec![req("a-0-1", big, &[]), req("a-1-1", big, &[])], |e| {
            matches!(e, HostError::OverCapacity { field: "cpu_millis", requested: 6000, free: 4000, .. })
        }),
        (
            "unknown host",
            "nowhere",
            vec![req("b-0-1", SMALL, &[])],
            |e| matches!(e, HostError::UnknownHost(h) if h == "nowhere"),
        ),
        ("host not in lease", &outside, vec![req("c-0-1", SMALL, &[])], |e| {
            matches!(e, HostError::HostNotInLease { .. })
        }),
        (
            "duplicate run id (known)",
            &inside,
            vec![req("dup-0-1", SMALL, &[])],
            |e| matches!(e, HostError::DuplicateRunId(r) if r == "dup-0-1"),
        ),
        (
            "duplicate run id (in request)",
            &inside,
            vec![req("d-0-1", SMALL, &[]), req("d-0-1", SMALL, &[])],
            |e| matches!(e, HostError::DuplicateRunId(r) if r == "d-0-1"),
        ),
    ];
    for (name, host, runs, check) in cases {
        let err = manager.launch(lease.id, host, runs).await.unwrap_err();
        assert!(check(&err), "{name}: {err}");
    }
    assert_eq!(manager.host(&inside).unwrap().view.allocated, Resources::ZERO, "failed launches hold nothing");
    // A host stays in its lease after a launch: a second group of the same
    // round launches there too, checked against what is left.
    manager.launch(lease.id, &other, vec![req("f-0-1", SMALL, &[])]).await.unwrap();
    assert_eq!(manager.host(&other).unwrap().view.allocated, SMALL.saturating_add(&SMALL));
    let err = manager.launch(lease.id, &other, vec![req("h-0-1", big, &[]), req("h-1-1", big, &[])]).await.unwrap_err();
    assert!(matches!(err, HostError::OverCapacity { .. }), "the first launches count: {err}");

    manager.drain(&inside).await.unwrap();
    let err = manager.launch(lease.id, &inside, vec![req("g-0-1", SMALL, &[])]).await.unwrap_err();
    assert!(
        matches!(
            &err,
            HostError::HostNotAcceptingTasks { .. } | HostError::HostNotInLease { .. } | HostError::UnknownLease(_)
        ),
        "draining: {err}"
    );
    // A draining host is not offered again.
    let l = manager.lease(&LeaseRequest::new(SMALL, 10, 60_000)).unwrap();
    assert!(l.hosts.iter().all(|o| o.name != inside));
}

/// A run that conflicts only with what the manager holds is refused alone:
/// its batch-mates launch and hold their resources; the refused run holds
/// nothing. A batch whose every run is refused is an error.
#[tokio::test]
async fn a_run_that_conflicts_is_refused_alone_and_its_batch_mates_launch() {
    let (_sim, manager, _events) = sim_manager(2, config()).await;
    let lease = manager.lease(&LeaseRequest::new(SMALL, 2, 60_000)).unwrap();
    let (a, b) = (lease.hosts[0].name.clone(), lease.hosts[1].name.clone());
    assert!(manager.launch(lease.id, &a, vec![req("x-0-1", SMALL, &[])]).await.unwrap().is_empty());

    let refused = manager.launch(lease.id, &b, vec![req("x-0-2", SMALL, &[]), req("y-0-1", SMALL, &[])]).await.unwrap();
    let names: Vec<(&str, String)> = refused.iter().map(|(run, e)| (run.as_str(), e.to_string())).collect();
    assert_eq!(names, [("x-0-2", "task x-0: already has the live run x-0-1".to_string())]);
    assert_eq!(manager.host(&b).unwrap().view.allocated, SMALL, "the refused run holds nothing");
    assert!(manager.run_holding("y-0-1").is_some() && manager.run_holding("x-0-2").is_none());

    let refused = manager.launch(lease.id, &b, vec![req("z-0-1", SMALL, &[]), req("y-0-1", SMALL, &[])]).await.unwrap();
    assert!(matches!(refused.as_slice(), [(run, HostError::DuplicateRunId(_))] if run == "y-0-1"), "{refused:?}");
    assert_eq!(manager.host(&b).unwrap().view.allocated, SMALL.saturating_add(&SMALL));

    let err = manager.launch(lease.id, &b, vec![req("x-0-3", SMALL, &[])]).await.unwrap_err();
    assert!(matches!(err, HostError::DuplicateTaskId { .. }), "every run refused: {err}");
    assert_eq!(manager.host(&b).unwrap().view.allocated, SMALL.saturating_add(&SMALL));
}

/// The lease's job index says where each asked-for job runs, and agrees
/// with every leased host's own `job_counts`, also after a run ends.
#[tokio::test]
async fn a_lease_says_where_its_jobs_already_run() {
    let (sim, manager, mut events) = sim_manager(3, config()).await;
    for (host, runs) in [("h00000", &["a-0-1", "a-1-1"][..]), ("h00001", &["b-0-1"]), ("h00002", &["a-2-1"])] {
        let lease = lease_host(&manager, host).await;
        manager.launch(lease, host, runs.iter().map(|r| req(r, SMALL, &[])).collect()).await.unwrap();
        manager.release(lease).unwrap();
    }
    let mut request = LeaseRequest::new(SMALL, 10, 60_000);
    request.jobs = vec!["a".into(), "b".into(), "c".into()];
    let where_jobs_run = |lease: &paceline_hostmgr::Lease| -> Vec<(String, Vec<(String, u32)>)> {
        let index = lease.job_hosts.as_ref().expect("the host manager keeps a job index");
        for j in index {
            for &(k, n) in &j.hosts {
                assert_eq!(lease.hosts[k as usize].job_counts.get(&j.job), Some(&n), "index agrees with the view");
            }
            let on_views = lease.hosts.iter().filter(|h| h.job_counts.contains_key(&j.job)).count();
            assert_eq!(on_views, j.hosts.len(), "every host running {} is in the index", j.job);
        }
        index
            .iter()
            .map(|j| {
                let hosts = j.hosts.iter().map(|&(k, n)| (lease.hosts[k as usize].name.clone(), n)).collect();
                (j.job.clone(), hosts)
            })
            .collect()
    };
    let lease = manager.lease(&request).unwrap();
    assert_eq!(
        where_jobs_run(&lease)
            .into_iter()
            .map(|(j, mut h)| {
                h.sort();
                (j, h)
            })
            .collect::<Vec<_>>(),
        vec![
            ("a".to_string(), vec![("h00000".to_string(), 2), ("h00002".to_string(), 1)]),
            ("b".to_string(), vec![("h00001".to_string(), 1)]),
        ],
        "c runs nowhere and is left out"
    );
    manager.release(lease.id).unwrap();

    // a-2-1 ends: h00002 no longer runs any of a.
    manager.kill("a-2-1").await.unwrap();
    sim.advance(60_000).await;
    manager.sync().await.unwrap();
    while let Some(ev) = events.try_recv() {
        drop(ev);
    }
    let lease = manager.lease(&request).unwrap();
    let index = where_jobs_run(&lease);
    let a = index.iter().find(|(j, _)| j == "a").expect("a still runs");
    assert_eq!(a.1, vec![("h00000".to_string(), 2)]);
    // Nothing asked, nothing answered.
    manager.release(lease.id).unwrap();
    let plain = manager.lease(&LeaseRequest::new(SMALL, 10, 60_000)).unwrap();
    assert_eq!(plain.job_hosts, Some(Vec::new()));
}

//! The sim provider through the manager: the status pipeline end to end.

use std::sync::Arc;
use std::time::Duration;

use paceline_hostmgr::{HostEvent, HostManager, LeaseRequest, Provider, ProviderEvent, SimProvider};
use paceline_model::Resources;
use paceline_model::run::RunState;
use paceline_model::task::HealthCheck;
use tokio::sync::mpsc;

use crate::support::*;

#[tokio::test]
async fn launch_delivers_updates_with_increasing_seq_and_frees_on_end() {
    let (sim, manager, mut events) = sim_manager(2, config()).await;
    let lease = lease_host(&manager, "h00000").await;
    manager.launch(lease, "h00000", vec![req("job-0-1", SMALL, &[("SIM_DURATION_MS", "100")])]).await.unwrap();
    assert_eq!(manager.host("h00000").unwrap().view.allocated, SMALL);

    let a = next_run(&mut events).await;
    let b = next_run(&mut events).await;
    assert_eq!((a.state, a.seq, a.host.as_str(), a.task_id.as_str()), (RunState::Starting, 1, "h00000", "job-0"));
    assert_eq!((b.state, b.seq), (RunState::Running, 2));
    manager.acknowledge("job-0-1", 2).await;

    sim.advance(100).await;
    let c = next_run(&mut events).await;
    assert_eq!((c.state, c.seq, c.exit_code, c.reason.as_str()), (RunState::Succeeded, 3, Some(0), "EXITED"));
    assert_eq!(manager.host("h00000").unwrap().view.allocated, Resources::ZERO, "freed on the terminal update");
    manager.acknowledge("job-0-1", 3).await;
    assert_eq!(sim.tracked_run_count(), 0, "the sim forgets a run once its end is acknowledged");
    assert_eq!(sim.run_count(), 1, "but counts it");
}

#[tokio::test]
async fn scripted_failures() {
    let (sim, manager, mut events) = sim_manager(1, config()).await;
    type Env<'a> = &'a [(&'a str, &'a str)];
    let cases: &[(&str, Env<'_>, RunState, Option<i32>)] = &[
        ("a-0-1", &[("SIM_EXIT_CODE", "3")], RunState::Failed, Some(3)),
        ("b-0-1", &[("SIM_FAIL_RUNS", "1"), ("SIM_DURATION_MS", "10")], RunState::Failed, Some(1)),
        ("b-0-2", &[("SIM_FAIL_RUNS", "1"), ("SIM_DURATION_MS", "10")], RunState::Succeeded, Some(0)),
        ("c-0-1", &[("SIM_DURATION_MS", "10"), ("SIM_EXIT_CODE", "0")], RunState::Succeeded, Some(0)),
    ];
    for (run, env, want, code) in cases {
        let lease = lease_host(&manager, "h00000").await;
        manager.launch(lease, "h00000", vec![req(run, SMALL, env)]).await.unwrap();
        sim.advance(10).await;
        let end = loop {
            let u = next_run(&mut events).await;
            manager.acknowledge(&u.run_id, u.seq).await;
            if u.state.is_terminal() {
                break u;
            }
        };
        assert_eq!((end.run_id.as_str(), end.state, end.exit_code), (*run, *want, *code), "{run}");
    }
}

#[tokio::test]
async fn bad_script_is_rejected_naming_the_variable() {
    let (_sim, manager, mut events) = sim_manager(1, config()).await;
    let lease = lease_host(&manager, "h00000").await;
    manager.launch(lease, "h00000", vec![req("x-0-1", SMALL, &[("SIM_DURATION_MS", "soon")])]).await.unwrap();
    let u = next_run(&mut events).await;
    assert_eq!((u.state, u.reason.as_str(), u.seq), (RunState::Failed, "LAUNCH_REJECTED", 1));
    assert!(u.message.contains("SIM_DURATION_MS"), "{}", u.message);
    assert_eq!(manager.host("h00000").unwrap().view.allocated, Resources::ZERO);
}

#[tokio::test]
async fn health_reported_after_running() {
    let (_sim, manager, mut events) = sim_manager(1, config()).await;
    let check = HealthCheck {
        command: "true".into(),
        args: Vec::new(),
        http: None,
        tcp: None,
        initial_delay_secs: 0,
        interval_secs: 1,
        timeout_secs: 1,
        max_consecutive_failures: 1,
    };
    for (run, env, healthy) in [("u-0-1", &[("SIM_UNHEALTHY", "1")][..], false), ("u-1-1", &[][..], true)] {
        let lease = lease_host(&manager, "h00000").await;
        let mut r = req(run, SMALL, env);
        r.spec.health_check = Some(check.clone());
        manager.launch(lease, "h00000", vec![r]).await.unwrap();
        let _ = next_run(&mut events).await;
        let running = next_run(&mut events).await;
        assert_eq!((running.state, running.healthy), (RunState::Running, None));
        let health = next_run(&mut events).await;
        assert_eq!((health.state, health.healthy, health.seq), (RunState::Running, Some(healthy), 3), "{run}");
    }
}

#[tokio::test]
async fn kill_ends_killed_after_grace_on_the_virtual_clock() {
    let (sim, manager, mut events) = sim_manager(1, config()).await;
    let lease = lease_host(&manager, "h00000").await;
    let mut r = req("k-0-1", SMALL, &[]);
    r.spec.kill_grace_period_secs = 2;
    manager.launch(lease, "h00000", vec![r]).await.unwrap();
    next_run(&mut events).await;
    next_run(&mut events).await;
    manager.kill("k-0-1").await.unwrap();
    sim.advance(1_999).await;
    manager.sync().await.unwrap();
    no_run_update(&mut events);
    sim.advance(1).await;
    let u = next_run(&mut events).await;
    assert_eq!((u.state, u.seq, u.reason.as_str()), (RunState::Killed, 3, "KILLED_BY_REQUEST"));
    assert!(
        matches!(manager.kill("nope-0-1").await, Err(paceline_hostmgr::HostError::UnknownRun(r)) if r == "nope-0-1")
    );
}

/// A run's ports and GPU grant (kept aside from the common fields) reach
/// its updates, their redelivery and the host's re-registration; a run
/// without them reports none.
#[tokio::test]
async fn ports_and_gpu_grants_are_reported_and_runs_without_them_have_none() {
    let sim = SimProvider::new(sim_config(1));
    let (tx, mut rx) = mpsc::channel(1024);
    sim.start(tx.clone()).await.unwrap();
    assert!(matches!(rx.recv().await, Some(ProviderEvent::HostRegistered(_))));
    let mut with = req("web-0-1", SMALL, &[]);
    with.spec.ports = vec!["http".into(), "admin".into()];
    with.gpu = paceline_model::gpu::GpuGrant { devices: vec![0], milli_each: 500 };
    sim.launch("h00000", vec![with, req("plain-0-1", SMALL, &[])]).await.unwrap();
    let mut ports = std::collections::BTreeMap::new();
    while let Ok(ProviderEvent::RunUpdate(u)) = rx.try_recv() {
        ports.insert(u.run_id.clone(), u.ports.clone());
    }
    let web = &ports["web-0-1"];
    assert_eq!(web.keys().collect::<Vec<_>>(), vec!["admin", "http"]);
    assert!(ports["plain-0-1"].is_empty());
    // Redelivered (not acknowledged): the same ports again.
    sim.advance(10_000).await;
    let mut again = None;
    while let Ok(ev) = rx.try_recv() {
        if let ProviderEvent::RunUpdate(u) = ev
            && u.run_id == "web-0-1"
        {
            again = Some(u.ports);
        }
    }
    assert_eq!(again.as_ref(), Some(web));
    // Registering again lists the runs with their grants.
    sim.start(tx).await.unwrap();
    let Some(ProviderEvent::HostRegistered(reg)) = rx.recv().await else { panic!("a registration") };
    let grants: std::collections::BTreeMap<_, _> =
        reg.running.iter().map(|r| (r.run_id.clone(), r.gpu.clone())).collect();
    assert_eq!(grants["web-0-1"], paceline_model::gpu::GpuGrant { devices: vec![0], milli_each: 500 });
    assert!(grants["plain-0-1"].is_empty());
}

#[tokio::test]
async fn sim_redelivers_unacknowledged_updates_only() {
    let sim = SimProvider::new(sim_config(1));
    let (tx, mut rx) = mpsc::channel(1024);
    sim.start(tx).await.unwrap();
    assert!(matches!(rx.recv().await, Some(ProviderEvent::HostRegistered(_))));
    sim.launch("h00000", vec![req("r-0-1", SMALL, &[])]).await.unwrap();
    let mut seqs = Vec::new();
    while let Ok(ProviderEvent::RunUpdate(u)) = rx.try_recv() {
        seqs.push(u.seq);
    }
    assert_eq!(seqs, vec![1, 2]);
    sim.acknowledge("h00000", "r-0-1", 1).await.unwrap();
    sim.advance(10_000).await;
    let mut again = Vec::new();
    while let Ok(ev) = rx.try_recv() {
        if let ProviderEvent::RunUpdate(u) = ev {
            again.push(u.seq);
        }
    }
    assert_eq!(again, vec![2], "only the unacknowledged update comes again");
    sim.acknowledge("h00000", "r-0-1", 2).await.unwrap();
    sim.advance(20_000).await;
    while let Ok(ev) = rx.try_recv() {
        assert!(!matches!(ev, ProviderEvent::RunUpdate(_)), "acknowledged updates are not resent: {ev:?}");
    }
}

#[tokio::test]
async fn manager_redelivers_to_subscriber_until_acknowledged_and_drops_duplicates() {
    let (sim, manager, mut events) = sim_manager(1, config()).await;
    let lease = lease_host(&manager, "h00000").await;
    manager.launch(lease, "h00000", vec![req("r-0-1", SMALL, &[])]).await.unwrap();
    assert_eq!(next_run(&mut events).await.seq, 1);
    assert_eq!(next_run(&mut events).await.seq, 2);
    manager.acknowledge("r-0-1", 1).await;
    // The sim re-sends seq 2 (not acked upstream): the manager drops the duplicate.
    sim.advance(10_000).await;
    manager.sync().await.unwrap();
    no_run_update(&mut events);
    // The manager's own redelivery to the subscriber.
    sim.advance(20_000).await;
    manager.tick().await;
    let u = next_run(&mut events).await;
    assert_eq!(u.seq, 2);
    no_run_update(&mut events);
    // A new subscriber gets the pending update replayed.
    let mut events = manager.subscribe();
    assert_eq!(next_run(&mut events).await.seq, 2);
    manager.acknowledge("r-0-1", 2).await;
    assert_eq!(sim.unacked_count(), 0, "the provider is acknowledged once the subscriber is");
    sim.advance(40_000).await;
    manager.tick().await;
    no_run_update(&mut events);
}

#[tokio::test]
async fn removed_host_loses_its_runs() {
    let (sim, manager, mut events) = sim_manager(2, config()).await;
    let lease = lease_host(&manager, "h00001").await;
    manager.launch(lease, "h00001", vec![req("l-0-1", SMALL, &[])]).await.unwrap();
    manager.release(lease).unwrap();
    next_run(&mut events).await;
    next_run(&mut events).await;
    sim.remove_host("h00001").await.unwrap();
    let u = next_run(&mut events).await;
    assert_eq!((u.state, u.seq, u.reason.as_str()), (RunState::Lost, 3, "HOST_REMOVED"));
    manager.sync().await.unwrap();
    let h = manager.host("h00001").unwrap();
    assert!(!h.reachable);
    assert_eq!(h.view.allocated, Resources::ZERO);
    let lease = manager.lease(&LeaseRequest::new(Resources::ZERO, 10, 1000)).unwrap();
    assert_eq!(lease.hosts.iter().map(|o| o.name.as_str()).collect::<Vec<_>>(), vec!["h00000"]);
}

#[tokio::test]
async fn silent_host_is_lost_after_missed_heartbeats() {
    let (sim, manager, mut events) = sim_manager(2, config()).await;
    let lease = lease_host(&manager, "h00000").await;
    manager.launch(lease, "h00000", vec![req("s-0-1", SMALL, &[])]).await.unwrap();
    next_run(&mut events).await;
    next_run(&mut events).await;
    sim.set_heartbeating("h00000", false).unwrap();
    for _ in 0..3 {
        sim.advance(5_000).await;
        manager.tick().await;
    }
    assert!(manager.host("h00000").unwrap().reachable, "within the deadline");
    sim.advance(5_000).await;
    manager.tick().await;
    let mut left = false;
    let lost = loop {
        match tokio::time::timeout(Duration::from_secs(5), events.recv()).await.expect("an event within 5 s").unwrap() {
            HostEvent::HostLeft { host, .. } => left |= host == "h00000",
            HostEvent::Run(u) => break u,
            _ => {}
        }
    };
    assert!(left);
    assert_eq!(
        (lost.run_id.as_str(), lost.state, lost.seq, lost.reason.as_str()),
        ("s-0-1", RunState::Lost, 3, "HOST_LOST")
    );
    assert!(manager.host("h00001").unwrap().reachable, "the heartbeating host stays");
}

#[tokio::test]
async fn fifty_thousand_hosts_register_and_are_leasable() {
    let (_sim, manager, _events) = sim_manager(50_000, config()).await;
    assert_eq!(manager.hosts().len(), 50_000);
    let lease = manager.lease(&LeaseRequest::new(SMALL, 50_000, 60_000)).unwrap();
    assert_eq!(lease.hosts.len(), 50_000);
    manager.release(lease.id).unwrap();
    let lease = manager.lease(&LeaseRequest::new(SMALL, 100, 60_000)).unwrap();
    assert_eq!(lease.hosts.len(), 100);
}

#[tokio::test]
async fn restarted_manager_reconciles_against_expectations() {
    let sim = SimProvider::new(sim_config(2));
    {
        let m1 = HostManager::builder(Arc::new(sim.clone()))
            .clock(Arc::new(sim.clock()))
            .config(config())
            .start()
            .await
            .unwrap();
        m1.sync().await.unwrap();
        m1.expect_runs(Vec::new()).await;
        let lease = m1.lease(&LeaseRequest::new(Resources::ZERO, 2, 60_000)).unwrap();
        m1.launch(lease.id, "h00000", vec![req("keep-0-1", SMALL, &[]), req("stray-0-1", SMALL, &[])]).await.unwrap();
        m1.sync().await.unwrap();
    }
    // A new manager over the same hosts: both runs come back as orphans.
    let m2 = HostManager::builder(Arc::new(sim.clone()))
        .clock(Arc::new(sim.clock()))
        .config(config())
        .start()
        .await
        .unwrap();
    m2.sync().await.unwrap();
    let mut events = m2.subscribe();
    assert_eq!(m2.host("h00000").unwrap().runs, vec!["keep-0-1".to_string(), "stray-0-1".to_string()]);
    m2.expect_runs(vec![
        paceline_hostmgr::ExpectedRun {
            host: "h00000".into(),
            run_id: "keep-0-1".into(),
            task_id: "keep-0".into(),
            resources: SMALL,
            gpu: Default::default(),
            last_seq: 2,
        },
        paceline_hostmgr::ExpectedRun {
            host: "h00001".into(),
            run_id: "gone-0-1".into(),
            task_id: "gone-0".into(),
            resources: SMALL,
            gpu: Default::default(),
            last_seq: 2,
        },
    ])
    .await;
    let lost = next_run(&mut events).await;
    assert_eq!(
        (lost.run_id.as_str(), lost.state, lost.seq, lost.reason.as_str()),
        ("gone-0-1", RunState::Lost, 3, "RUN_MISSING")
    );
    // The stray is killed; its KILLED update is not the subscriber's business.
    for _ in 0..500 {
        m2.sync().await.unwrap();
        if m2.host("h00000").unwrap().runs.len() == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    no_run_update(&mut events);
    assert_eq!(m2.host("h00000").unwrap().runs, vec!["keep-0-1".to_string()]);
    assert_eq!(m2.host("h00000").unwrap().view.allocated, SMALL);
}

#[tokio::test(start_paused = true)]
async fn real_time_mode_moves_the_virtual_clock() {
    let (sim, manager, mut events) = sim_manager(1, config()).await;
    let ticker = sim.spawn_realtime(Duration::from_millis(10));
    let before = sim.now_ms();
    let lease = lease_host(&manager, "h00000").await;
    manager.launch(lease, "h00000", vec![req("rt-0-1", SMALL, &[("SIM_DURATION_MS", "50")])]).await.unwrap();
    let end = loop {
        let u = next_run(&mut events).await;
        if u.state.is_terminal() {
            break u;
        }
    };
    assert_eq!(end.state, RunState::Succeeded);
    assert!(end.at_ms >= before + 50);
    ticker.abort();
}

/// The loss check skips its scan of the hosts until one could be overdue;
/// a host that never registered but is expected to hold a run (a restart)
/// must still be found overdue, even though ticks had been skipping before
/// the run was expected.
#[tokio::test]
async fn a_host_expected_to_hold_a_run_but_never_seen_is_lost_after_the_deadline() {
    let sim = SimProvider::new(sim_config(1));
    let manager = HostManager::builder(Arc::new(sim.clone()))
        .clock(Arc::new(sim.clock()))
        .config(config())
        .start()
        .await
        .unwrap();
    manager.sync().await.unwrap();
    let mut events = manager.subscribe();
    // Ticks within the deadline: nothing can be lost, the scans are skipped.
    for _ in 0..2 {
        sim.advance(1_000).await;
        manager.tick().await;
    }
    manager
        .expect_runs(vec![paceline_hostmgr::ExpectedRun {
            host: "ghost".into(),
            run_id: "ghost-0-1".into(),
            task_id: "ghost-0".into(),
            resources: SMALL,
            gpu: Default::default(),
            last_seq: 2,
        }])
        .await;
    for _ in 0..5 {
        sim.advance(5_000).await;
        manager.tick().await;
    }
    let lost = next_run(&mut events).await;
    assert_eq!((lost.run_id.as_str(), lost.state, lost.seq), ("ghost-0-1", RunState::Lost, 3));
    assert!(manager.host("h00000").unwrap().reachable, "the heartbeating host stays");
}

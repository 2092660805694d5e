use std::time::Duration;

use paceline_agent::LaunchOutcome;
use paceline_agent::spec::Probe;
use paceline_proto::agent::v1 as pb;

use crate::common::*;

#[tokio::test]
async fn launches_the_host_cannot_honour_are_rejected_naming_the_field() {
    let mut h = harness().await;
    let field = |s: paceline_agent::RunSpec| h.sup.launch_spec(s).unwrap_err().field;

    assert_eq!(field(sh("", "true")), "run_id");
    assert_eq!(field(sh("../etc-1", "true")), "run_id");
    assert_eq!(field(spec("empty-1", "", &[])), "command");
    let mut s = sh("big-1", "true");
    s.resources.memory_mib = 1 << 30;
    let err = h.sup.launch_spec(s).unwrap_err();
    assert_eq!(err.field, "resources.memory_mib");
    assert!(err.to_string().contains("free"), "{err}");
    let mut s = sh("gpu-1", "true");
    s.resources.gpus = 1;
    assert_eq!(field(s), "resources.gpus");
    let mut s = sh("hc-1", "true");
    s.port_names = vec!["http".into()];
    s.health_check = Some(health(Probe::Http { port: "admin".into(), path: "/".into() }, 1, 1));
    let err = h.sup.launch_spec(s).unwrap_err();
    assert_eq!(err.field, "health_check.http_port");
    assert!(err.message.contains("admin"));
    let mut s = sh("ports-1", "true");
    s.port_names = (0..50).map(|i| format!("p{i}")).collect();
    assert_eq!(field(s), "port_names");
    let mut s = sh("dup-port-1", "true");
    s.port_names = vec!["a".into(), "A".into()];
    assert_eq!(field(s), "port_names[1]");

    // The protocol form: two probes at once.
    let launch = pb::Launch {
        run_id: "proto-1".into(),
        task_id: "proto".into(),
        command: "true".into(),
        health_check: Some(pb::HealthCheck { command: "true".into(), tcp_port: "x".into(), ..Default::default() }),
        ..Default::default()
    };
    assert_eq!(h.sup.launch(&launch).await.unwrap_err().field, "health_check");

    // A live duplicate is a no-op; a duplicate of an ended run is refused.
    h.sup.launch_spec(spec("live-1", "sleep", &["30"])).unwrap();
    assert_eq!(h.sup.launch_spec(spec("live-1", "sleep", &["30"])).unwrap(), LaunchOutcome::AlreadyRunning);
    h.sup.launch_spec(sh("done-1", "true")).unwrap();
    wait_terminal(&mut h.events, "done-1", Duration::from_secs(10)).await;
    let err = h.sup.launch_spec(sh("done-1", "true")).unwrap_err();
    assert_eq!(err.field, "run_id");
    assert!(err.message.contains("SUCCEEDED"), "{err}");
    h.sup.kill_all(1).await;
}

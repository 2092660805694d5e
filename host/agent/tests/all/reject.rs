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
    s.resources.gpu_milli = 1000;
    assert_eq!(field(s), "resources.gpu_milli");
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

    // Secrets the spec's rules would refuse: out of the secrets directory,
    // the runtime's own variable, no target, a value that is not text. The
    // error never shows a value.
    let secret = |env: &str, file: &str, value: &[u8]| pb::Launch {
        run_id: "secret-1".into(),
        task_id: "secret".into(),
        command: "true".into(),
        secrets: vec![pb::LaunchSecret {
            name: "db".into(),
            env: env.into(),
            file: file.into(),
            value: value.to_vec(),
        }],
        ..Default::default()
    };
    for (env, file, value, field) in [
        ("", "../escape", b"v4lu3".as_slice(), "secrets"),
        ("PACELINE_RUN_ID", "", b"v4lu3".as_slice(), "secrets"),
        ("", "", b"v4lu3".as_slice(), "secrets"),
        ("DB", "", b"\xff\xfe".as_slice(), "secrets[0].value"),
    ] {
        let err = h.sup.launch(&secret(env, file, value)).await.unwrap_err();
        assert_eq!(err.field, field, "{env:?} {file:?}: {err}");
        assert!(!err.to_string().contains("v4lu3"), "{err}");
    }

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

use std::time::Duration;

use paceline_proto::agent::v1::RunState;

use crate::common::*;

#[tokio::test]
async fn a_task_that_exits_0_succeeds_and_its_output_is_readable() {
    let mut h = harness().await;
    let mut s = sh(
        "life-1",
        r#"echo "hello from $PACELINE_RUN_ID task=$PACELINE_TASK_ID port=$PORT_HTTP sandbox=$(pwd)"; echo oops >&2"#,
    );
    s.port_names = vec!["http".into()];
    h.sup.launch_spec(s).unwrap();
    let updates = wait_terminal(&mut h.events, "life-1", Duration::from_secs(10)).await;
    assert_eq!(states(&updates), vec![RunState::Starting, RunState::Running, RunState::Succeeded]);
    assert_eq!(updates.iter().map(|u| u.seq).collect::<Vec<_>>(), vec![1, 2, 3]);
    let last = updates.last().unwrap();
    assert_eq!(last.exit_code, Some(0));
    assert_eq!(last.reason, "EXITED");
    let port = last.ports["http"];
    assert!((h.range.0 as u32..=h.range.1 as u32).contains(&port));
    let sandbox = h.sup.sandbox_dir("life-1");
    assert_eq!(last.sandbox, sandbox.display().to_string());
    let out = stdout(&h.sup, "life-1");
    assert_eq!(out, format!("hello from life-1 task=life port={port} sandbox={}\n", sandbox.display()));
    let err = h.sup.read_log("life-1", "stderr", 0, 0).unwrap();
    assert_eq!(err.data, b"oops\n");
    // Offsets and caps.
    let part = h.sup.read_log("life-1", "stdout", 6, 4).unwrap();
    assert_eq!(part.data, b"from");
    assert_eq!(part.file_size, out.len() as u64);
    assert!(h.sup.read_log("nope-1", "stdout", 0, 0).unwrap_err().to_string().contains("unknown run"));
    assert!(h.sup.read_log("life-1", "syslog", 0, 0).is_err());
    let chunk = h.sup.handle_read_log(&paceline_proto::agent::v1::ReadLog {
        request_id: 7,
        run_id: "ghost-1".into(),
        stream: "stdout".into(),
        offset: 0,
        max_bytes: 10,
    });
    assert_eq!(chunk.request_id, 7);
    assert!(chunk.error.contains("ghost-1"));
}

#[tokio::test]
async fn a_nonzero_exit_fails_with_its_code() {
    let mut h = harness().await;
    h.sup.launch_spec(sh("exit-1", "exit 3")).unwrap();
    let updates = wait_terminal(&mut h.events, "exit-1", Duration::from_secs(10)).await;
    let last = updates.last().unwrap();
    assert_eq!(state(last), RunState::Failed);
    assert_eq!(last.exit_code, Some(3));
    assert_eq!(last.signal, None);
    assert_eq!(last.reason, "EXITED");
}

#[tokio::test]
async fn a_missing_executable_fails_the_launch() {
    let mut h = harness().await;
    h.sup.launch_spec(spec("missing-1", "no-such-program-paceline", &[])).unwrap();
    let updates = wait_terminal(&mut h.events, "missing-1", Duration::from_secs(10)).await;
    let last = updates.last().unwrap();
    assert_eq!(states(&updates), vec![RunState::Starting, RunState::Failed]);
    assert_eq!(last.reason, "LAUNCH_FAILED");
    assert!(last.message.contains("command"), "{}", last.message);
}

#[tokio::test]
async fn old_acknowledged_runs_are_garbage_collected() {
    let mut h = harness().await;
    h.sup.launch_spec(sh("old-1", "true")).unwrap();
    let u = wait_terminal(&mut h.events, "old-1", Duration::from_secs(10)).await;
    // Not acknowledged yet: kept.
    assert_eq!(h.sup.gc(Duration::ZERO), 0);
    h.sup.ack("old-1", u.last().unwrap().seq).unwrap();
    assert_eq!(h.sup.gc(Duration::from_secs(3600)), 0, "too recent");
    assert_eq!(h.sup.gc(Duration::ZERO), 1);
    assert!(!h.sup.sandbox_dir("old-1").exists());
    assert!(h.sup.read_log("old-1", "stdout", 0, 0).is_err());
    h.reopen().await;
    assert!(h.sup.outbox().pending().is_empty());
}

#[tokio::test]
async fn a_task_sees_its_own_environment_and_not_the_agents() {
    // Cargo sets this for the test process, which is the agent here.
    let agent_only = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR for tests");
    assert!(!agent_only.is_empty());
    let mut h = harness().await;
    let mut s = sh("env-1", r#"echo "manifest=${CARGO_MANIFEST_DIR:-unset} mine=$MINE path=${PATH:+set}""#);
    s.env.insert("MINE".into(), "spec-value".into());
    h.sup.launch_spec(s).unwrap();
    let updates = wait_terminal(&mut h.events, "env-1", Duration::from_secs(10)).await;
    assert_eq!(state(updates.last().unwrap()), RunState::Succeeded);
    assert_eq!(stdout(&h.sup, "env-1"), "manifest=unset mine=spec-value path=set\n");
}

use std::time::{Duration, Instant};

use paceline_proto::agent::v1::RunState;

use crate::common::*;

#[tokio::test]
async fn a_killed_sleep_ends_killed_by_sigterm_within_the_grace() {
    let mut h = harness().await;
    h.sup.launch_spec(spec("sleep-1", "sleep", &["60"])).unwrap();
    wait_for(&mut h.events, "sleep-1", Duration::from_secs(10), |u| state(u) == RunState::Running).await;
    let start = Instant::now();
    h.sup.kill("sleep-1", Some(5)).unwrap();
    let updates = wait_terminal(&mut h.events, "sleep-1", Duration::from_secs(10)).await;
    let elapsed = start.elapsed();
    let last = updates.last().unwrap();
    assert_eq!(state(last), RunState::Killed);
    assert_eq!(last.reason, "KILLED_BY_REQUEST");
    assert_eq!(last.signal, Some(15), "{last:?}");
    assert!(elapsed < Duration::from_secs(5), "took {elapsed:?}");
    // Killing again is a no-op; killing an unknown run is an error.
    h.sup.kill("sleep-1", None).unwrap();
    assert!(h.sup.kill("ghost-1", None).is_err());
}

#[tokio::test]
async fn a_task_ignoring_sigterm_is_killed_after_the_grace() {
    let mut h = harness().await;
    h.sup.launch_spec(sh("stubborn-1", "trap '' TERM; echo ready; while :; do sleep 0.1; done")).unwrap();
    wait_stdout(&h.sup, "stubborn-1", "ready").await;
    let start = Instant::now();
    h.sup.kill("stubborn-1", Some(1)).unwrap();
    let updates = wait_terminal(&mut h.events, "stubborn-1", Duration::from_secs(10)).await;
    let elapsed = start.elapsed();
    let last = updates.last().unwrap();
    assert_eq!(state(last), RunState::Killed);
    assert_eq!(last.signal, Some(9), "{last:?}");
    assert!(elapsed >= Duration::from_secs(1), "SIGKILL came early: {elapsed:?}");
    assert!(elapsed < Duration::from_secs(4), "took {elapsed:?}");
}

#[tokio::test]
async fn a_task_exiting_0_on_sigterm_still_ends_killed() {
    let mut h = harness().await;
    h.sup.launch_spec(sh("polite-1", "trap 'exit 0' TERM; echo ready; while :; do sleep 0.1; done")).unwrap();
    wait_stdout(&h.sup, "polite-1", "ready").await;
    h.sup.kill("polite-1", None).unwrap();
    let updates = wait_terminal(&mut h.events, "polite-1", Duration::from_secs(10)).await;
    let last = updates.last().unwrap();
    assert_eq!(state(last), RunState::Killed);
    assert_eq!(last.exit_code, Some(0));
}

/// A task that asks to be stopped with another signal (Spark executors
/// decommission on SIGPWR) gets that signal first, and the wrapper that
/// records its status survives it.
#[tokio::test]
async fn a_task_with_a_stop_signal_is_sent_that_signal_first() {
    let mut h = harness().await;
    let mut s = sh("pwr-1", "trap 'echo got PWR; exit 0' PWR; trap '' TERM; echo ready; while :; do sleep 0.1; done");
    s.stop_signal = "SIGPWR".into();
    h.sup.launch_spec(s).unwrap();
    wait_stdout(&h.sup, "pwr-1", "ready").await;
    let start = Instant::now();
    h.sup.kill("pwr-1", Some(5)).unwrap();
    let updates = wait_terminal(&mut h.events, "pwr-1", Duration::from_secs(10)).await;
    let last = updates.last().unwrap();
    assert_eq!(state(last), RunState::Killed);
    assert_eq!(last.exit_code, Some(0), "it ended its own way, not by SIGKILL: {last:?}");
    assert!(start.elapsed() < Duration::from_secs(4), "before the grace ran out: {:?}", start.elapsed());
    wait_stdout(&h.sup, "pwr-1", "got PWR").await;
}

#[tokio::test]
async fn a_stop_signal_outside_the_list_is_refused_at_launch() {
    let h = harness().await;
    for bad in ["SIGKILL", "SIGSTOP", "SIGSEGV", "TERM", "nonsense"] {
        let mut s = spec("bad-1", "sleep", &["1"]);
        s.stop_signal = bad.into();
        let err = h.sup.launch_spec(s).expect_err(bad).to_string();
        assert!(err.contains("stop_signal"), "{bad}: {err}");
    }
}

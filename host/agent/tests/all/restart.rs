use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use paceline_agent::LaunchOutcome;
use paceline_proto::agent::v1::RunState;

use crate::common::*;

fn pid_of(h: &Harness, run_id: &str) -> i32 {
    let rec = std::fs::read(h.dir.path().join("state").join(run_id).join("record.json")).unwrap();
    let rec: serde_json::Value = serde_json::from_slice(&rec).unwrap();
    rec["pid"].as_i64().unwrap() as i32
}

#[tokio::test]
async fn a_restarted_supervisor_readopts_live_runs_and_reports_vanished_ones_lost() {
    let mut h = harness().await;
    h.sup.launch_spec(spec("keep-1", "sleep", &["60"])).unwrap();
    let mut gone = spec("gone-1", "sleep", &["60"]);
    gone.port_names = vec!["p".into()];
    h.sup.launch_spec(gone).unwrap();
    for run in ["keep-1", "gone-1"] {
        wait_for(&mut h.events, run, Duration::from_secs(10), |u| state(u) == RunState::Running).await;
    }
    // The agent "crashes"; behind its back one run's processes are killed.
    h.sup.detach();
    killpg(Pid::from_raw(pid_of(&h, "gone-1")), Signal::SIGKILL).unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    h.reopen().await;

    let running: Vec<String> = h.sup.running().into_iter().map(|r| r.run_id).collect();
    assert_eq!(running, vec!["keep-1".to_owned()]);
    let pending = h.sup.outbox().pending();
    let lost: Vec<_> = pending.iter().filter(|u| u.run_id == "gone-1").collect();
    let last = lost.last().unwrap();
    assert_eq!(state(last), RunState::Lost);
    assert_eq!(last.reason, "AGENT_RESTARTED");
    assert_eq!(last.seq, 3, "numbering continues after the restart");

    // The re-adopted run is still controlled: duplicate launch is a no-op,
    // kill works and its status comes from the wrapper's exit file.
    assert_eq!(h.sup.launch_spec(spec("keep-1", "sleep", &["60"])).unwrap(), LaunchOutcome::AlreadyRunning);
    h.sup.kill("keep-1", Some(2)).unwrap();
    let u = wait_terminal(&mut h.events, "keep-1", Duration::from_secs(10)).await;
    let last = u.last().unwrap();
    assert_eq!(state(last), RunState::Killed);
    assert_eq!(last.signal, Some(15), "{last:?}");
    assert_eq!(last.seq, 3);
}

#[tokio::test]
async fn a_run_that_ended_while_the_agent_was_down_reports_its_real_status() {
    let mut h = harness().await;
    h.sup.launch_spec(sh("brief-1", "sleep 0.5; exit 4")).unwrap();
    wait_for(&mut h.events, "brief-1", Duration::from_secs(10), |u| state(u) == RunState::Running).await;
    h.sup.detach();
    tokio::time::sleep(Duration::from_millis(1200)).await;
    h.reopen().await;
    let pending = h.sup.outbox().pending();
    let last = pending.iter().rfind(|u| u.run_id == "brief-1").unwrap();
    assert_eq!(state(last), RunState::Failed);
    assert_eq!(last.exit_code, Some(4));
}

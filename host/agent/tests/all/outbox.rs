use std::time::Duration;

use paceline_agent::Outbox;
use paceline_proto::agent::v1 as pb;

use crate::common::*;

fn update(run_id: &str, state: pb::RunState) -> pb::StatusUpdate {
    pb::StatusUpdate { run_id: run_id.into(), task_id: "t".into(), state: state as i32, ..Default::default() }
}

fn seqs(pending: &[pb::StatusUpdate], run_id: &str) -> Vec<u64> {
    pending.iter().filter(|u| u.run_id == run_id).map(|u| u.seq).collect()
}

#[test]
fn unacknowledged_updates_survive_reopening_in_order() {
    let dir = tempfile::tempdir().unwrap();
    {
        let outbox = Outbox::open(dir.path()).unwrap();
        for s in [pb::RunState::Starting, pb::RunState::Running, pb::RunState::Succeeded] {
            outbox.append(update("a-1", s)).unwrap();
        }
        for s in [pb::RunState::Starting, pb::RunState::Running] {
            outbox.append(update("b-1", s)).unwrap();
        }
        assert_eq!(outbox.ack("a-1", 1).unwrap(), 1);
        // Acks are idempotent and never reach past what exists.
        assert_eq!(outbox.ack("a-1", 1).unwrap(), 0);
        assert_eq!(outbox.ack("ghost", 5).unwrap(), 0);
    }
    let outbox = Outbox::open(dir.path()).unwrap();
    let pending = outbox.pending();
    assert_eq!(seqs(&pending, "a-1"), vec![2, 3]);
    assert_eq!(seqs(&pending, "b-1"), vec![1, 2]);
    assert_eq!(
        pending.iter().filter(|u| u.run_id == "a-1").map(state).collect::<Vec<_>>(),
        vec![pb::RunState::Running, pb::RunState::Succeeded]
    );
    assert_eq!(outbox.last_state("a-1"), Some(pb::RunState::Succeeded));
    // pending_after skips what a stream already carried.
    let sent = [("a-1".to_owned(), 2u64)].into_iter().collect();
    assert_eq!(seqs(&outbox.pending_after(&sent), "a-1"), vec![3]);
    outbox.ack("a-1", 99).unwrap();
    outbox.ack("b-1", 2).unwrap();
    assert_eq!(outbox.pending_len(), 0);
    drop(outbox);

    // A torn record at the tail (the agent died mid-append) is cut off.
    let log = dir.path().join("b-1/outbox.log");
    let mut bytes = std::fs::read(&log).unwrap();
    bytes.extend_from_slice(&[1, 200, 0, 0, 0, 1, 2]);
    std::fs::write(&log, bytes).unwrap();

    let outbox = Outbox::open(dir.path()).unwrap();
    assert_eq!(outbox.pending_len(), 0, "acknowledged updates must never come back");
    // Numbering continues after a restart: the manager drops seqs it has seen.
    assert_eq!(outbox.append(update("a-1", pb::RunState::Lost)).unwrap().seq, 4);
    assert_eq!(outbox.append(update("b-1", pb::RunState::Killed)).unwrap().seq, 3);
}

#[tokio::test]
async fn a_supervisor_reopened_on_its_dir_resends_only_unacknowledged_updates() {
    let mut h = harness().await;
    h.sup.launch_spec(sh("durable-1", "echo hi")).unwrap();
    wait_terminal(&mut h.events, "durable-1", Duration::from_secs(10)).await;
    h.reopen().await;
    let pending = h.sup.outbox().pending();
    assert_eq!(seqs(&pending, "durable-1"), vec![1, 2, 3]);
    h.sup.ack("durable-1", 2).unwrap();
    h.reopen().await;
    let pending = h.sup.outbox().pending();
    assert_eq!(seqs(&pending, "durable-1"), vec![3]);
    assert_eq!(state(&pending[0]), pb::RunState::Succeeded);
    // An ended run is not re-reported, and is not running.
    assert!(h.sup.running().is_empty());
}

#[test]
fn a_long_lived_run_log_is_compacted_and_keeps_its_numbering() {
    let dir = tempfile::tempdir().unwrap();
    let outbox = Outbox::open(dir.path()).unwrap();
    for _ in 0..300 {
        let u = outbox.append(update("flappy-1", pb::RunState::Running)).unwrap();
        outbox.ack("flappy-1", u.seq).unwrap();
    }
    outbox.append(update("flappy-1", pb::RunState::Running)).unwrap();
    let size = std::fs::metadata(dir.path().join("flappy-1/outbox.log")).unwrap().len();
    assert!(size < 100 * 40, "log not compacted: {size} bytes");
    drop(outbox);
    let outbox = Outbox::open(dir.path()).unwrap();
    assert_eq!(seqs(&outbox.pending(), "flappy-1"), vec![301]);
    assert_eq!(outbox.acked("flappy-1"), 300);
    assert_eq!(outbox.append(update("flappy-1", pb::RunState::Failed)).unwrap().seq, 302);
}

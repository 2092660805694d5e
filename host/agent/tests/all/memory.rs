use std::time::Duration;

use paceline_agent::Isolation;
use paceline_proto::agent::v1::RunState;

use crate::common::*;

#[tokio::test]
async fn a_task_over_its_memory_limit_is_stopped() {
    let mut h = harness().await;
    let isolation = h.sup.isolation().clone();
    println!("isolation path: {}", isolation.name());
    let mut s = spec("hog-1", "python3", &["-c", "x = bytearray(512 << 20); print('allocated', len(x))"]);
    s.resources.memory_mib = 64;
    h.sup.launch_spec(s).unwrap();
    let updates = wait_terminal(&mut h.events, "hog-1", Duration::from_secs(30)).await;
    let last = updates.last().unwrap();
    println!(
        "memory hog ended: {:?} reason={} exit={:?} signal={:?} message={}",
        state(last),
        last.reason,
        last.exit_code,
        last.signal,
        last.message
    );
    assert_eq!(state(last), RunState::Failed);
    assert!(!stdout(&h.sup, "hog-1").contains("allocated"));
    match isolation {
        Isolation::CgroupV2 { .. } => assert_eq!(last.reason, "MEMORY_LIMIT"),
        Isolation::Rlimits => {
            assert_ne!(last.exit_code, Some(0));
            assert!(last.message.contains("allocation failure"), "{}", last.message);
        }
    }
}

#[tokio::test]
async fn a_task_within_its_memory_limit_runs() {
    let mut h = harness().await;
    let mut s = spec("small-1", "python3", &["-c", "x = bytearray(8 << 20); print('ok')"]);
    s.resources.memory_mib = 256;
    h.sup.launch_spec(s).unwrap();
    let updates = wait_terminal(&mut h.events, "small-1", Duration::from_secs(30)).await;
    assert_eq!(state(updates.last().unwrap()), RunState::Succeeded, "{updates:#?}");
}

use std::time::Duration;

use paceline_agent::spec::VolumeRef;
use paceline_proto::agent::v1::RunState;

use crate::common::*;

#[tokio::test]
async fn a_volume_outlives_runs_and_agent_restarts() {
    let mut h = harness().await;
    let vol = Some(VolumeRef { name: "data".into(), size_mib: 10 });
    let mut first =
        sh("db-1", r#"echo "written by $PACELINE_RUN_ID" > "$PACELINE_VOLUME/file"; echo "$PACELINE_VOLUME""#);
    first.volume = vol.clone();
    h.sup.launch_spec(first).unwrap();
    let u = wait_terminal(&mut h.events, "db-1", Duration::from_secs(10)).await;
    assert_eq!(state(u.last().unwrap()), RunState::Succeeded);
    let path = stdout(&h.sup, "db-1");
    assert_eq!(path.trim(), h.dir.path().join("volumes/db/data").display().to_string());

    h.reopen().await;
    let mut second = sh("db-2", r#"cat "$PACELINE_VOLUME/file""#);
    second.volume = vol;
    h.sup.launch_spec(second).unwrap();
    let u = wait_terminal(&mut h.events, "db-2", Duration::from_secs(10)).await;
    assert_eq!(state(u.last().unwrap()), RunState::Succeeded);
    assert_eq!(stdout(&h.sup, "db-2"), "written by db-1\n");
}

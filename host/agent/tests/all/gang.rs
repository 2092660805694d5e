//! A gang member's launch (`Launch.gang`): the agent assigns exactly the
//! ports the manager chose, writes the peers file into the sandbox and names
//! it in PACELINE_GANG_PEERS_FILE; a chosen port that is held is refused.

use std::collections::BTreeMap;
use std::time::Duration;

use paceline_model::gang::GangLaunch;
use paceline_proto::agent::v1::RunState;

use crate::common::*;

#[tokio::test]
async fn exact_ports_and_the_peers_file_are_what_the_manager_chose() {
    let mut h = harness().await;
    let peers = r#"[{"rank":0,"instance":0,"host":"a","address":"127.0.0.1","port":1,"ports":{"coord":1}}]"#;
    let chosen = h.range.1 - 3;
    let mut s =
        sh("gang-1", r#"echo "port=$PORT_COORD file=$PACELINE_GANG_PEERS_FILE"; cat "$PACELINE_GANG_PEERS_FILE""#);
    s.port_names = vec!["coord".into()];
    s.gang = Some(GangLaunch { ports: BTreeMap::from([("coord".to_string(), chosen)]), peers_json: peers.into() });
    h.sup.launch_spec(s).unwrap();
    let updates = wait_terminal(&mut h.events, "gang-1", Duration::from_secs(10)).await;
    assert_eq!(updates.last().map(state), Some(RunState::Succeeded));
    assert_eq!(updates.last().map(|u| u.ports["coord"]), Some(u32::from(chosen)));
    let file = h.sup.sandbox_dir("gang-1").join("paceline-gang.json");
    assert_eq!(stdout(&h.sup, "gang-1"), format!("port={chosen} file={}\n{peers}", file.display()));

    // The same number again while another run holds it: refused, naming
    // the field, and nothing is held by the refusal.
    let mut holder = sh("hold-1", "sleep 30");
    holder.port_names = vec!["coord".into()];
    holder.gang = Some(GangLaunch { ports: BTreeMap::from([("coord".to_string(), chosen)]), peers_json: "[]".into() });
    h.sup.launch_spec(holder).unwrap();
    let mut again = sh("gang-2", "true");
    again.port_names = vec!["coord".into()];
    again.gang = Some(GangLaunch { ports: BTreeMap::from([("coord".to_string(), chosen)]), peers_json: "[]".into() });
    let err = h.sup.launch_spec(again).unwrap_err();
    assert_eq!(err.field, "gang.ports");
    assert!(err.to_string().contains(&chosen.to_string()), "{err}");
    h.sup.kill("hold-1", Some(0)).unwrap();
    wait_terminal(&mut h.events, "hold-1", Duration::from_secs(10)).await;

    // Exact ports that do not name the run's ports are refused at once.
    let mut wrong = sh("gang-3", "true");
    wrong.port_names = vec!["coord".into()];
    wrong.gang = Some(GangLaunch { ports: BTreeMap::from([("other".to_string(), chosen)]), peers_json: "[]".into() });
    assert_eq!(h.sup.launch_spec(wrong).unwrap_err().field, "gang.ports");
}

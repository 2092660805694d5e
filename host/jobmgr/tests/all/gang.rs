//! Gang discovery at launch: each member of a gang gets its rank, every
//! member's address and ports (env and the peers file), with ports the job
//! manager chose in the host's range; a replacement gets the list of the
//! moment.

use std::collections::BTreeMap;

use paceline_model::gang::{GangDiscovery, GangPeer};
use paceline_model::job::JobKind;
use paceline_model::run::RunState;
use paceline_model::task::RestartPolicy;

use crate::common::*;

fn hosts() -> Vec<(String, paceline_model::Labels, bool)> {
    ["h1", "h2"]
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let labels = BTreeMap::from([
                ("address".to_string(), format!("10.0.0.{}", i + 1)),
                ("port_range".to_string(), "1000-1019".to_string()),
            ]);
            (n.to_string(), labels, true)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_learn_each_other_and_a_replacement_gets_the_current_list() {
    let dir = tempfile::tempdir().expect("tempdir");
    let h = harness(dir.path(), &["h1", "h2"]);
    h.jm.on_hosts_changed(hosts()).await;
    let mut c = config(JobKind::Batch, 4);
    c.sla.min_running_instances = Some(4);
    c.gang.discovery = GangDiscovery::Pytorch;
    c.default_task.ports = vec!["rpc".into(), "metrics".into()];
    c.default_task.resources.ports = 2;
    c.default_task.restart_policy = RestartPolicy { on_failure: true, ..RestartPolicy::default() };
    h.jm.create("g", c).await.expect("create");
    h.pump(&no_health, 10).await;

    let launches = h.launcher.launches();
    assert_eq!(launches.len(), 4);
    let lists: Vec<Vec<GangPeer>> = launches
        .iter()
        .map(|l| serde_json::from_str(&l.run.gang.as_ref().expect("a gang member").peers_json).expect("peers json"))
        .collect();
    assert!(lists.iter().all(|l| *l == lists[0]), "every member got the same list");
    let list = &lists[0];
    assert_eq!(list.iter().map(|p| (p.rank, p.instance)).collect::<Vec<_>>(), vec![(0, 0), (1, 1), (2, 2), (3, 3)]);
    let mut all_ports: Vec<u16> = list.iter().flat_map(|p| p.ports.values().copied()).collect();
    all_ports.sort_unstable();
    all_ports.dedup();
    assert_eq!(all_ports.len(), 8, "no port twice: {list:?}");
    for l in &launches {
        let i: u32 = l.run.env["PACELINE_INSTANCE"].parse().expect("instance");
        let me = &list[i as usize];
        assert_eq!(
            (me.host.as_str(), me.address.as_str()),
            (l.host.as_str(), if l.host == "h1" { "10.0.0.1" } else { "10.0.0.2" })
        );
        assert_eq!(l.run.gang.as_ref().map(|g| &g.ports), Some(&me.ports), "the host is told the listed ports");
        assert_eq!(me.port, Some(me.ports["rpc"]), "the first port in the spec's order");
        assert!(me.ports.values().all(|p| (1000..=1019).contains(p)));
        let env = &l.run.env;
        assert_eq!((env["PACELINE_GANG_SIZE"].as_str(), env["PACELINE_GANG_RANK"].clone()), ("4", i.to_string()));
        assert_eq!(env["PACELINE_GANG_HOSTS"], list.iter().map(GangPeer::endpoint).collect::<Vec<_>>().join(","));
        assert_eq!(env["MASTER_ADDR"], list[0].address);
        assert_eq!(env["MASTER_PORT"], list[0].ports["rpc"].to_string());
        assert_eq!((env["WORLD_SIZE"].as_str(), env["RANK"].clone()), ("4", i.to_string()));
    }
    // The job manager knows the chosen ports as the runs' from the launch on.
    let tasks = h.jm.get("g").await.expect("get").tasks;
    assert!(tasks.iter().zip(list).all(|(t, p)| t.ports == p.ports));

    // Rank 2 fails; its new run gets the others where they run, and itself.
    h.report("g-2-1", RunState::Failed, None).await;
    h.advance(1_000).await;
    h.pump(&no_health, 10).await;
    let again = h.launcher.launches().into_iter().find(|l| l.run.run_id == "g-2-2").expect("rank 2 launched again");
    let now: Vec<GangPeer> = serde_json::from_str(&again.run.gang.expect("a gang member").peers_json).expect("json");
    assert_eq!(again.run.env["PACELINE_GANG_RANK"], "2");
    assert_eq!(again.run.env["PACELINE_GANG_SIZE"], "4");
    for r in [0, 1, 3] {
        assert_eq!(now[r], list[r], "a member still running is listed where it runs");
    }
    assert_eq!(now[2].host, again.host);
    let others: Vec<u16> = [0, 1, 3].iter().flat_map(|&r| list[r].ports.values().copied()).collect();
    assert!(now[2].ports.values().all(|p| !others.contains(p)), "no port of a member still running");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_without_a_gang_gets_no_discovery() {
    let dir = tempfile::tempdir().expect("tempdir");
    let h = harness(dir.path(), &["h1"]);
    h.jm.on_hosts_changed(hosts()).await;
    let mut c = config(JobKind::Batch, 2);
    c.default_task.ports = vec!["rpc".into()];
    c.default_task.resources.ports = 1;
    h.jm.create("solo", c).await.expect("create");
    h.pump(&no_health, 10).await;
    let launches = h.launcher.launches();
    assert_eq!(launches.len(), 2);
    assert!(launches.iter().all(|l| l.run.gang.is_none() && !l.run.env.contains_key("PACELINE_GANG_SIZE")));
}

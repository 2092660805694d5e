//! The provider's state driven by watch events, without a cluster (the
//! client points nowhere): what the host manager hears, in what order.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::runtime::watcher::Event;
use paceline_hostmgr::provider::{Provider, ProviderEvent};
use paceline_model::Resources;
use paceline_model::run::RunState;
use serde_json::json;
use tokio::sync::mpsc::UnboundedReceiver;

use crate::config::KubernetesConfig;
use crate::provider::KubernetesProvider;
use crate::state::{Inner, Watch};
use crate::watch::{WatchReader, name_of};

fn node(name: &str, cpu: &str, ready: &str, extra_spec: serde_json::Value) -> Node {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"zone": "a"}},
        "spec": extra_spec,
        "status": {
            "allocatable": {"cpu": cpu, "memory": "8Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": ready}],
        },
    }))
    .expect("a node")
}

fn our_pod(run_id: &str, node: &str, phase: &str, exit: Option<i32>) -> Pod {
    cluster_pod("paceline", run_id, node, phase, exit)
}

/// A pod of the Paceline cluster `cluster` (ours is `paceline`, the default id).
fn cluster_pod(cluster: &str, run_id: &str, node: &str, phase: &str, exit: Option<i32>) -> Pod {
    let resources = serde_json::to_string(&Resources::new(1000, 256, 10, 0)).expect("json");
    let state = match exit {
        Some(code) => {
            json!({"terminated": {"exitCode": code, "reason": if code == 0 { "Completed" } else { "Error" }}})
        }
        None => json!({"running": {}}),
    };
    serde_json::from_value(json!({
        "metadata": {
            "name": run_id,
            "namespace": "paceline-tasks",
            "labels": {"app.kubernetes.io/managed-by": "paceline", "paceline.io/cluster": cluster},
            "annotations": {
                "paceline.io/run-id": run_id,
                "paceline.io/task-id": crate::pods::task_of(run_id),
                "paceline.io/resources": resources,
            },
        },
        "spec": {"nodeName": node, "containers": [
            {"name": "task", "resources": {"requests": {"cpu": "1", "memory": "256Mi"}}},
        ]},
        "status": {"phase": phase, "containerStatuses": [{
            "name": "task", "image": "busybox", "imageID": "", "ready": phase == "Running",
            "restartCount": 0, "state": state,
        }]},
    }))
    .expect("a pod")
}

fn other_pod(name: &str, node: &str, cpu: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]},
        "status": {"phase": "Running"},
    }))
    .expect("a pod")
}

fn nodes_ev(p: &KubernetesProvider, ev: Event<Node>) {
    p.inner().on_event(Watch::Nodes, ev, Inner::node_apply, Inner::node_gone, name_of);
}

fn pods_ev(p: &KubernetesProvider, ev: Event<Pod>) {
    p.inner().on_event(Watch::Pods, ev, Inner::pod_apply, Inner::pod_gone, name_of);
}

fn others_ev(p: &KubernetesProvider, ev: Event<Pod>) {
    p.inner().on_event(Watch::Foreign, ev, Inner::foreign_apply, Inner::foreign_gone, Inner::foreign_key);
}

fn drain(rx: &mut UnboundedReceiver<ProviderEvent>) -> Vec<ProviderEvent> {
    let mut out = Vec::new();
    while let Ok(ev) = rx.try_recv() {
        out.push(ev);
    }
    out
}

/// Lists node n1 (4 CPUs), a Paceline pod `run` on it and another
/// scheduler's pod holding 1.5 CPUs there.
fn started(config: KubernetesConfig, run: Pod) -> (KubernetesProvider, UnboundedReceiver<ProviderEvent>) {
    let (p, mut rx) = KubernetesProvider::offline(config);
    nodes_ev(&p, Event::Init);
    nodes_ev(&p, Event::InitApply(node("n1", "4", "True", json!({}))));
    nodes_ev(&p, Event::InitDone);
    pods_ev(&p, Event::Init);
    pods_ev(&p, Event::InitApply(run));
    pods_ev(&p, Event::InitDone);
    assert!(drain(&mut rx).is_empty(), "nothing is reported before every watch has listed");
    others_ev(&p, Event::Init);
    others_ev(&p, Event::InitApply(other_pod("web", "n1", "1500m")));
    others_ev(&p, Event::InitDone);
    (p, rx)
}

#[tokio::test]
async fn a_restart_reports_the_pods_found_on_their_nodes_then_what_they_did() {
    let (_p, mut rx) = started(KubernetesConfig::default(), our_pod("a-0-1", "n1", "Succeeded", Some(0)));
    let events = drain(&mut rx);
    let ProviderEvent::HostRegistered(reg) = &events[0] else { panic!("{events:?}") };
    assert_eq!(reg.hostname, "n1");
    assert_eq!(reg.total.cpu_millis, 2500, "4 CPUs less the other scheduler's 1.5");
    assert_eq!(reg.running.len(), 1, "the pod that ended while Paceline was away is reported");
    assert_eq!(reg.running[0].resources, Resources::new(1000, 256, 10, 0));
    let ProviderEvent::RunUpdate(u) = &events[1] else { panic!("{events:?}") };
    assert_eq!((u.run_id.as_str(), u.task_id.as_str(), u.state), ("a-0-1", "a-0", RunState::Succeeded));
    assert!(u.seq > 1_000_000_000_000, "past any seq an earlier process used: {}", u.seq);
    assert_eq!(events.len(), 2, "{events:?}");
}

#[tokio::test]
async fn updates_move_forward_only_and_come_again_until_acknowledged() {
    let config = KubernetesConfig { redeliver_after: Duration::ZERO, ..KubernetesConfig::default() };
    let (p, mut rx) = started(config, our_pod("a-0-1", "n1", "Running", None));
    let events = drain(&mut rx);
    assert!(matches!(&events[..], [ProviderEvent::HostRegistered(_)]), "running: nothing new {events:?}");
    pods_ev(&p, Event::Apply(our_pod("a-0-1", "n1", "Pending", None)));
    assert!(drain(&mut rx).is_empty(), "never backward");
    pods_ev(&p, Event::Apply(our_pod("a-0-1", "n1", "Failed", Some(3))));
    let events = drain(&mut rx);
    let [ProviderEvent::RunUpdate(u)] = &events[..] else { panic!("{events:?}") };
    assert_eq!((u.state, u.exit_code, u.reason.as_str()), (RunState::Failed, Some(3), "EXITED"));
    p.inner().tick();
    let again = drain(&mut rx);
    assert!(matches!(&again[..], [ProviderEvent::RunUpdate(v)] if v == u), "sent again, same seq: {again:?}");
    p.acknowledge("n1", "a-0-1", u.seq).await.expect("ack");
    p.inner().tick();
    assert!(drain(&mut rx).is_empty(), "acknowledged: not sent again");
    assert_eq!(p.run_count(), 0);
    pods_ev(&p, Event::Apply(our_pod("a-0-1", "n1", "Failed", Some(3))));
    assert!(drain(&mut rx).is_empty(), "a finished pod kept for its log says nothing new");
}

#[tokio::test]
async fn a_pod_deleted_by_someone_else_is_lost_and_one_paceline_deleted_is_killed() {
    let (p, mut rx) = started(KubernetesConfig::default(), our_pod("a-0-1", "n1", "Running", None));
    drain(&mut rx);
    pods_ev(&p, Event::Apply(our_pod("b-0-1", "n1", "Running", None)));
    let events = drain(&mut rx);
    assert!(
        matches!(&events[..], [ProviderEvent::HostRegistered(r)] if r.running.len() == 2),
        "a pod found later is registered with its node before anything is said of it: {events:?}"
    );
    pods_ev(&p, Event::Delete(our_pod("a-0-1", "n1", "Running", None)));
    let events = drain(&mut rx);
    let [ProviderEvent::RunUpdate(u)] = &events[..] else { panic!("{events:?}") };
    assert_eq!((u.state, u.reason.as_str()), (RunState::Lost, "POD_DELETED"));
    assert!(u.message.contains("paceline-tasks/a-0-1") && u.message.contains("outside Paceline"), "{}", u.message);

    if let Some(run) = p.inner().st().runs.get_mut("b-0-1") {
        run.kill_requested = true;
    }
    pods_ev(&p, Event::Apply(our_pod("b-0-1", "n1", "Failed", Some(143))));
    let events = drain(&mut rx);
    let [ProviderEvent::RunUpdate(u)] = &events[..] else { panic!("{events:?}") };
    assert_eq!((u.state, u.reason.as_str(), u.exit_code), (RunState::Killed, "KILLED_BY_REQUEST", Some(143)));
}

#[tokio::test]
async fn node_states_become_host_events() {
    let (p, mut rx) = started(KubernetesConfig::default(), our_pod("a-0-1", "n1", "Running", None));
    drain(&mut rx);
    nodes_ev(&p, Event::Apply(node("n1", "4", "False", json!({}))));
    let events = drain(&mut rx);
    assert!(
        matches!(&events[..], [ProviderEvent::HostDisconnected { reason, .. }] if reason.contains("Ready=False")),
        "{events:?}"
    );
    nodes_ev(&p, Event::Apply(node("n1", "4", "True", json!({}))));
    assert!(matches!(&drain(&mut rx)[..], [ProviderEvent::HostRegistered(r)] if r.running.len() == 1));
    nodes_ev(&p, Event::Apply(node("n1", "4", "True", json!({"unschedulable": true}))));
    assert!(matches!(&drain(&mut rx)[..], [ProviderEvent::HostDrainRequested { .. }]));
    let tainted = json!({"taints": [{"key": "dedicated", "value": "ml", "effect": "NoSchedule"}]});
    nodes_ev(&p, Event::Apply(node("n1", "4", "True", tainted)));
    let events = drain(&mut rx);
    assert!(
        matches!(&events[..], [ProviderEvent::HostRegistered(r), ProviderEvent::HostUndrainRequested { .. }]
            if r.total == Resources::ZERO),
        "tainted (offers nothing) and no longer cordoned: {events:?}"
    );
    others_ev(&p, Event::Delete(other_pod("web", "n1", "1500m")));
    p.inner().tick();
    assert!(drain(&mut rx).is_empty(), "a tainted node offers nothing, whatever leaves it");
    nodes_ev(&p, Event::Delete(node("n1", "4", "True", json!({}))));
    let events = drain(&mut rx);
    assert!(
        matches!(&events[0], ProviderEvent::HostDisconnected { reason, .. } if reason == "node deleted"),
        "{events:?}"
    );
    assert!(
        matches!(&events[1], ProviderEvent::RunUpdate(u) if u.state == RunState::Lost && u.reason == "NODE_DELETED"),
        "{events:?}"
    );
}

#[tokio::test]
async fn other_pods_coming_and_going_register_the_host_again() {
    let (p, mut rx) = started(KubernetesConfig::default(), our_pod("a-0-1", "n1", "Running", None));
    drain(&mut rx);
    others_ev(&p, Event::Apply(other_pod("batch", "n1", "2")));
    p.inner().tick();
    assert!(matches!(&drain(&mut rx)[..], [ProviderEvent::HostRegistered(r)] if r.total.cpu_millis == 500));
    others_ev(&p, Event::Delete(other_pod("web", "n1", "1500m")));
    others_ev(&p, Event::Delete(other_pod("batch", "n1", "2")));
    p.inner().tick();
    assert!(matches!(&drain(&mut rx)[..], [ProviderEvent::HostRegistered(r)] if r.total.cpu_millis == 4000));
    assert_eq!(p.foreign_usage("n1"), Resources::ZERO);
}

#[tokio::test]
async fn hosts_stay_up_through_a_short_api_outage_only() {
    let config = KubernetesConfig { api_outage_grace: Duration::from_secs(60), ..KubernetesConfig::default() };
    let (p, mut rx) = started(config, our_pod("a-0-1", "n1", "Running", None));
    drain(&mut rx);
    p.inner().st().api_down_since = Some(Instant::now());
    p.inner().heartbeat();
    assert!(matches!(&drain(&mut rx)[..], [ProviderEvent::Heartbeat { host }] if host == "n1"));
    p.inner().st().api_down_since = Instant::now().checked_sub(Duration::from_secs(61));
    p.inner().heartbeat();
    let events = drain(&mut rx);
    assert!(
        matches!(&events[..], [ProviderEvent::HostDisconnected { host, reason }]
            if host == "n1" && reason.contains("kubernetes API unreachable for 61 s")),
        "past the grace nothing vouches for the node, and the host says why: {events:?}"
    );
    p.inner().heartbeat();
    assert!(drain(&mut rx).is_empty(), "said once, no heartbeats");
    // The API answers again (a watch that resumes, with nothing new): the host registers again.
    others_ev(&p, Event::Apply(other_pod("web", "n1", "1500m")));
    let events = drain(&mut rx);
    assert!(
        matches!(&events[..], [ProviderEvent::HostRegistered(r)] if r.hostname == "n1" && r.running.len() == 1),
        "{events:?}"
    );
    p.inner().heartbeat();
    assert!(matches!(&drain(&mut rx)[..], [ProviderEvent::Heartbeat { .. }]));
}

fn small_node(name: &str, pods: &str) -> Node {
    let mut n = node(name, "4", "True", json!({}));
    if let Some(a) = n.status.as_mut().and_then(|s| s.allocatable.as_mut()) {
        a.insert("pods".into(), k8s_openapi::apimachinery::pkg::api::resource::Quantity(pods.into()));
    }
    n
}

#[tokio::test]
async fn another_paceline_clusters_pods_are_neither_adopted_nor_reported_but_counted() {
    let (p, mut rx) = started(KubernetesConfig::default(), our_pod("a-0-1", "n1", "Running", None));
    drain(&mut rx);
    // Its pod comes through the watch of other pods (the label selector
    // `paceline.io/cluster!=paceline` matches it) and holds 1 CPU.
    others_ev(&p, Event::Apply(cluster_pod("blue", "b-0-1", "n1", "Running", None)));
    p.inner().tick();
    let events = drain(&mut rx);
    let [ProviderEvent::HostRegistered(r)] = &events[..] else { panic!("{events:?}") };
    assert_eq!(r.total.cpu_millis, 4000 - 1500 - 1000, "the other cluster's pod is taken off the node");
    assert_eq!(r.running.len(), 1, "and it is not among our runs: {:?}", r.running);
    // Were it to reach the watch of our pods, it is still not ours.
    pods_ev(&p, Event::Apply(cluster_pod("blue", "c-0-1", "n1", "Running", None)));
    assert!(drain(&mut rx).is_empty());
    assert_eq!(p.run_count(), 1);
    // Our own pods never count as foreign.
    others_ev(&p, Event::Apply(our_pod("a-0-1", "n1", "Running", None)));
    assert_eq!(p.foreign_usage("n1").cpu_millis, 2500);
}

#[tokio::test]
async fn a_node_with_as_many_pods_as_it_admits_offers_nothing_more() {
    let (p, mut rx) = KubernetesProvider::offline(KubernetesConfig::default());
    nodes_ev(&p, Event::Init);
    nodes_ev(&p, Event::InitApply(small_node("n1", "3")));
    nodes_ev(&p, Event::InitDone);
    pods_ev(&p, Event::Init);
    pods_ev(&p, Event::InitApply(our_pod("a-0-1", "n1", "Running", None)));
    pods_ev(&p, Event::InitDone);
    others_ev(&p, Event::Init);
    others_ev(&p, Event::InitApply(other_pod("web", "n1", "100m")));
    others_ev(&p, Event::InitDone);
    let events = drain(&mut rx);
    assert!(matches!(&events[..], [ProviderEvent::HostRegistered(r)] if r.total.cpu_millis == 3900), "{events:?}");
    // A third pod (another scheduler's, or another Paceline cluster's) fills it.
    others_ev(&p, Event::Apply(cluster_pod("blue", "b-0-1", "n1", "Running", None)));
    p.inner().tick();
    let events = drain(&mut rx);
    assert!(
        matches!(&events[..], [ProviderEvent::HostRegistered(r)] if r.total == Resources::ZERO && r.running.len() == 1),
        "3 pods of 3: nothing offered, our run still reported: {events:?}"
    );
    // Our run ends: room for one again.
    pods_ev(&p, Event::Apply(our_pod("a-0-1", "n1", "Succeeded", Some(0))));
    p.inner().tick();
    let events = drain(&mut rx);
    assert!(matches!(&events[0], ProviderEvent::RunUpdate(u) if u.state == RunState::Succeeded), "{events:?}");
    assert!(
        matches!(&events[1..], [ProviderEvent::HostRegistered(r)] if r.total.cpu_millis == 4000 - 100 - 1000),
        "{events:?}"
    );
}

#[tokio::test]
async fn an_uncordoned_node_asks_for_its_host_back() {
    let (p, mut rx) = started(KubernetesConfig::default(), our_pod("a-0-1", "n1", "Running", None));
    drain(&mut rx);
    nodes_ev(&p, Event::Apply(node("n1", "4", "True", json!({}))));
    assert!(drain(&mut rx).is_empty(), "never cordoned: nothing to undo");
    nodes_ev(&p, Event::Apply(node("n1", "4", "True", json!({"unschedulable": true}))));
    assert!(matches!(&drain(&mut rx)[..], [ProviderEvent::HostDrainRequested { .. }]));
    nodes_ev(&p, Event::Apply(node("n1", "4", "True", json!({}))));
    let events = drain(&mut rx);
    assert!(
        matches!(&events[..], [ProviderEvent::HostUndrainRequested { host, reason }] if host == "n1" && reason.contains("uncordoned")),
        "{events:?}"
    );
}

fn launch_request(run_id: &str) -> paceline_model::run::LaunchRequest {
    let spec = paceline_model::task::TaskSpec {
        command: "true".into(),
        resources: Resources::new(100, 32, 10, 0),
        ..paceline_model::task::TaskSpec::default()
    };
    serde_json::from_value(json!({"run_id": run_id, "task_id": crate::pods::task_of(run_id), "spec": spec, "env": {}}))
        .expect("a launch request")
}

#[tokio::test]
async fn a_launch_past_the_nodes_pod_limit_is_refused_naming_it() {
    let (p, mut rx) = KubernetesProvider::offline(KubernetesConfig::default());
    nodes_ev(&p, Event::Init);
    nodes_ev(&p, Event::InitApply(small_node("n1", "2")));
    nodes_ev(&p, Event::InitDone);
    pods_ev(&p, Event::Init);
    pods_ev(&p, Event::InitDone);
    others_ev(&p, Event::Init);
    others_ev(&p, Event::InitApply(other_pod("web", "n1", "100m")));
    others_ev(&p, Event::InitDone);
    drain(&mut rx);
    // Placement saw room for both (it counts no pods); the node admits one more.
    let result = p.launch("n1", vec![launch_request("a-0-1"), launch_request("a-1-1")]).await;
    let events = drain(&mut rx);
    assert!(
        matches!(&events[..], [ProviderEvent::LaunchRejected { run_id, error, .. }]
            if run_id == "a-1-1" && error.contains("has 2 unfinished pods")),
        "{events:?}"
    );
    // The first was sent to an API server that is not there (this test has none).
    assert!(result.is_err(), "{result:?}");
}

#[tokio::test]
async fn while_the_api_is_unreachable_the_hosts_offer_nothing() {
    let (p, mut rx) = started(KubernetesConfig::default(), our_pod("a-0-1", "n1", "Running", None));
    drain(&mut rx);
    {
        let inner = p.inner();
        let mut st = inner.st();
        // A refusal is not an outage.
        inner.api_error(&mut st, Watch::Nodes, &kube::runtime::watcher::Error::NoResourceVersion);
        assert!(st.api_down_since.is_none());
        let refused = kube::Error::Service("connection refused".into());
        inner.api_error(&mut st, Watch::Nodes, &kube::runtime::watcher::Error::WatchFailed(refused));
    }
    p.inner().tick();
    let events = drain(&mut rx);
    assert!(
        matches!(&events[..], [ProviderEvent::HostRegistered(r)] if r.total == Resources::ZERO && r.running.len() == 1),
        "nothing offered, its run still there: {events:?}"
    );
    p.inner().heartbeat();
    assert!(matches!(&drain(&mut rx)[..], [ProviderEvent::Heartbeat { .. }]), "and up (within the grace)");
    // Any answer (an event, or the probe's list) ends it.
    others_ev(&p, Event::Apply(other_pod("web", "n1", "1500m")));
    p.inner().tick();
    let events = drain(&mut rx);
    assert!(matches!(&events[..], [ProviderEvent::HostRegistered(r)] if r.total.cpu_millis == 2500), "{events:?}");
}

/// The runs on `host` by a scan of every run, and by the index (sorted ids).
fn scanned_and_indexed(p: &KubernetesProvider, host: &str) -> (Vec<String>, Vec<String>) {
    let st = p.inner().st();
    st.runs.index_agrees().expect("the index agrees with the runs");
    let mut scanned: Vec<String> =
        st.runs.ids().filter(|id| st.runs.get(id).is_some_and(|r| r.host() == host)).cloned().collect();
    scanned.sort();
    (scanned, st.runs.ids_on(host))
}

fn registered_runs(events: &[ProviderEvent], host: &str) -> Option<Vec<String>> {
    events.iter().rev().find_map(|e| match e {
        ProviderEvent::HostRegistered(r) if r.hostname == host => {
            let mut ids: Vec<String> = r.running.iter().map(|x| x.run_id.clone()).collect();
            ids.sort();
            Some(ids)
        }
        _ => None,
    })
}

#[tokio::test]
async fn runs_indexed_by_host_agree_with_a_full_scan_through_adds_removals_and_re_registrations() {
    let (p, mut rx) = KubernetesProvider::offline(KubernetesConfig::default());
    nodes_ev(&p, Event::Init);
    nodes_ev(&p, Event::InitApply(node("n1", "4", "True", json!({}))));
    nodes_ev(&p, Event::InitApply(node("n2", "4", "True", json!({}))));
    nodes_ev(&p, Event::InitDone);
    pods_ev(&p, Event::Init);
    for (run, node) in [("a-0-1", "n1"), ("a-0-2", "n2"), ("a-0-3", "n1")] {
        pods_ev(&p, Event::InitApply(our_pod(run, node, "Running", None)));
    }
    pods_ev(&p, Event::InitDone);
    others_ev(&p, Event::Init);
    others_ev(&p, Event::InitDone);
    let events = drain(&mut rx);
    assert_eq!(registered_runs(&events, "n1").expect("n1 registered"), ["a-0-1", "a-0-3"]);
    assert_eq!(registered_runs(&events, "n2").expect("n2 registered"), ["a-0-2"]);
    let (scanned, indexed) = scanned_and_indexed(&p, "n1");
    assert_eq!(scanned, ["a-0-1", "a-0-3"]);
    assert_eq!(indexed, scanned);

    // Added: a pod found later (its node registered again with it).
    pods_ev(&p, Event::Apply(our_pod("a-0-4", "n2", "Running", None)));
    assert_eq!(registered_runs(&drain(&mut rx), "n2").expect("n2 again"), ["a-0-2", "a-0-4"]);
    let (scanned, indexed) = scanned_and_indexed(&p, "n2");
    assert_eq!(scanned, indexed);
    // Added: a run the manager expects on n1 that has no pod (lost).
    p.reconcile("n1", vec!["b-0-1".into()]).await.expect("reconcile");
    let (scanned, indexed) = scanned_and_indexed(&p, "n1");
    assert_eq!(scanned, ["a-0-1", "a-0-3", "b-0-1"]);
    assert_eq!(indexed, scanned);
    // Removed: a-0-1's pod deleted outside Paceline, its end acknowledged.
    pods_ev(&p, Event::Delete(our_pod("a-0-1", "n1", "Running", None)));
    let events = drain(&mut rx);
    let seq = events
        .iter()
        .find_map(|e| match e {
            ProviderEvent::RunUpdate(u) if u.run_id == "a-0-1" => Some(u.seq),
            _ => None,
        })
        .expect("a-0-1 lost");
    p.acknowledge("n1", "a-0-1", seq).await.expect("ack");
    let (scanned, indexed) = scanned_and_indexed(&p, "n1");
    assert_eq!(scanned, ["a-0-3", "b-0-1"]);
    assert_eq!(indexed, scanned);
    // Re-registered: the manager asks for n1 again; what it is told is the index's.
    p.reregister("n1").await.expect("reregister");
    let (scanned, _) = scanned_and_indexed(&p, "n1");
    let reported: Vec<String> = {
        let st = p.inner().st();
        scanned.iter().filter(|id| st.runs.get(id).is_some_and(|r| r.reported())).cloned().collect()
    };
    assert_eq!(registered_runs(&drain(&mut rx), "n1").expect("n1 re-registered"), reported);
    // A node deleted: its runs end (lost), still indexed until acknowledged.
    nodes_ev(&p, Event::Delete(node("n2", "4", "True", json!({}))));
    let lost: Vec<(String, u64)> = drain(&mut rx)
        .into_iter()
        .filter_map(|e| match e {
            ProviderEvent::RunUpdate(u) if u.state == RunState::Lost => Some((u.run_id, u.seq)),
            _ => None,
        })
        .collect();
    assert_eq!(lost.len(), 2, "{lost:?}");
    let (scanned, indexed) = scanned_and_indexed(&p, "n2");
    assert_eq!((indexed.len(), &indexed), (2, &scanned));
    for (id, seq) in lost {
        p.acknowledge("n2", &id, seq).await.expect("ack");
    }
    let (scanned, indexed) = scanned_and_indexed(&p, "n2");
    assert!(scanned.is_empty() && indexed.is_empty(), "{scanned:?} {indexed:?}");
}

/// A watch is read while nobody takes its events (a client that points
/// nowhere: its watch fails and retries with back-off), what waited is
/// handed over in one batch, and dropping the reader stops the watch.
#[tokio::test]
async fn a_watch_is_read_while_nobody_takes_its_events_and_stops_with_its_reader() {
    let (p, _rx) = KubernetesProvider::offline(KubernetesConfig::default());
    let mut reader = WatchReader::start(kube::Api::<Node>::all(p.client()), kube::runtime::watcher::Config::default());
    // Nothing taken for 4 s: the first failure is at once, the next after
    // the back-off's first step (0.8 s, at most doubled by its jitter).
    tokio::time::sleep(Duration::from_secs(4)).await;
    let mut batch = Vec::new();
    reader.next_batch(&mut batch).await;
    let failures = batch.iter().filter(|e| e.is_err()).count();
    assert!(failures >= 2, "the watch's failures of those 4 s are read meanwhile and handed over together: {batch:?}");
    assert!(
        batch.iter().all(|e| matches!(e, Err(_) | Ok(Event::Init))),
        "a client that points nowhere gets no object, only the starts of its lists: {batch:?}"
    );
    let task = reader.abort_handle();
    assert!(!task.is_finished(), "the watch goes on while its reader lives");
    drop(reader);
    let until = Instant::now() + Duration::from_secs(5);
    while !task.is_finished() && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(task.is_finished(), "dropping the reader stops its watch");
}

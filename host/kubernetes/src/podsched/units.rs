//! Which pending pods become jobs now, and in what order: each pod judged
//! (refused with the reason, grouped with its gang, or taken), single pods
//! and whole gangs made into units, the units in the order their pods were
//! first seen.
//!
//! Arrival order is what a Kubernetes user expects of a scheduler (the
//! scheduling queue is first come, first served within a priority).
//! Submits run up to `SUBMITS_AT_ONCE` at a time and enter the job manager
//! as their store writes complete, so pods of one tick may reach their
//! pool's queue slightly out of order; a later tick's never go ahead.
//! (It did not change the store's writes or the binding rate:
//! docs/benchmarks.md, "Where the pod scheduler's CPU and writes go".)

use std::collections::BTreeMap;

use paceline_model::task::TaskSpec;
use sha2::{Digest, Sha256};

use super::translate::{self, Group};
use super::{GANG_PREFIX, Phase, PodRef, SINGLE_PREFIX, Sched};

/// One job to submit: its id and pods (uid, ref, task) in instance order.
#[derive(Debug)]
pub(crate) struct Unit {
    /// When its first pod was seen (`Entry::seen`): units go in this order.
    pub(crate) first: u64,
    pub(crate) id: String,
    pub(crate) pool: String,
    /// The largest `spec.priority` of its pods.
    pub(crate) priority: i32,
    pub(crate) gang: Option<Group>,
    pub(crate) pods: Vec<(String, PodRef, TaskSpec)>,
}

/// A gang member judged fit: uid, pool, group, task.
type Member = (String, String, Group, TaskSpec);

/// Judges the new pods (and gang members still waiting for their group),
/// marks those refused or waiting for their gang, and returns the units to
/// submit, oldest first. The units' pods are not marked submitted here.
pub(crate) fn collect(st: &mut Sched, taints: &[String], default_pool: Option<&str>) -> Vec<Unit> {
    let mut units = Vec::new();
    let Sched { pods, namespaces, .. } = &mut *st;
    let mut groups: BTreeMap<(String, String), Vec<Member>> = BTreeMap::new();
    for (uid, e) in pods.iter_mut() {
        if e.gone || !matches!(e.phase, Phase::New | Phase::Grouped(_)) {
            continue;
        }
        let gated = e.pod.spec.as_ref().and_then(|s| s.scheduling_gates.as_ref()).is_some_and(|g| !g.is_empty());
        if gated {
            continue; // Kubernetes' own rule: not scheduled until its gates are removed.
        }
        let ns_pool = namespaces.get(&e.r.namespace).cloned().flatten();
        let judged = translate::pool_of(&e.pod, ns_pool.as_deref(), default_pool)
            .and_then(|pool| Ok((pool, translate::group_of(&e.pod)?)))
            .and_then(|(pool, group)| Ok((pool, group, translate::task_of(&e.pod, taints)?)));
        match judged {
            Err(why) => e.phase = Phase::Refused(why),
            Ok((pool, None, task)) => units.push(Unit {
                first: e.seen,
                id: job_id(SINGLE_PREFIX, &[uid.as_str()], e.attempt),
                pool,
                priority: priority_of(&e.pod),
                gang: None,
                pods: vec![(uid.clone(), e.r.clone(), task)],
            }),
            Ok((pool, Some(g), task)) => {
                groups.entry((e.r.namespace.clone(), g.name.clone())).or_default().push((uid.clone(), pool, g, task))
            }
        }
    }
    for ((ns, name), mut members) in groups {
        let min = members[0].2.min_member;
        if members.iter().any(|m| m.2.min_member != min) {
            let why = format!(
                "malformed gang: the pods of group {ns}/{name} disagree on {}",
                translate::MIN_MEMBER_ANNOTATION
            );
            for m in &members {
                if let Some(e) = pods.get_mut(&m.0) {
                    e.phase = Phase::Refused(why.clone());
                }
            }
            continue;
        }
        members.sort_by(|a, b| pods[&a.0].r.name.cmp(&pods[&b.0].r.name));
        let whole = members.len() / min as usize * min as usize;
        for chunk in members[..whole].chunks(min as usize) {
            let uids: Vec<&str> = chunk.iter().map(|m| m.0.as_str()).collect();
            let attempt = chunk.iter().map(|m| pods[&m.0].attempt).max().unwrap_or(0);
            units.push(Unit {
                first: chunk.iter().map(|m| pods[&m.0].seen).min().unwrap_or(0),
                id: job_id(GANG_PREFIX, &uids, attempt),
                pool: chunk[0].1.clone(),
                priority: chunk.iter().map(|m| priority_of(&pods[&m.0].pod)).max().unwrap_or(0),
                gang: Some(chunk[0].2.clone()),
                pods: chunk.iter().map(|m| (m.0.clone(), pods[&m.0].r.clone(), m.3.clone())).collect(),
            });
        }
        let why = format!(
            "waiting for its gang: {} of {min} pods of group {ns}/{name} are pending (label {}, annotation {})",
            members.len() - whole,
            translate::POD_GROUP_LABEL,
            translate::MIN_MEMBER_ANNOTATION
        );
        for m in &members[whole..] {
            if let Some(e) = pods.get_mut(&m.0) {
                e.phase = Phase::Grouped(why.clone());
            }
        }
    }
    units.sort_by_key(|u| u.first);
    units
}

/// A pod's priority (`spec.priority`, its priority class's value, which
/// admission fills in).
fn priority_of(pod: &k8s_openapi::api::core::v1::Pod) -> i32 {
    pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0)
}

/// The job id of pods (by uid) at their `attempt`-th job: a single pod's
/// names its uid; a gang's, a hash of its members' uids.
fn job_id(prefix: &str, uids: &[&str], attempt: u32) -> String {
    let base = if uids.len() == 1 {
        format!("{prefix}{}", uids[0])
    } else {
        let mut h = Sha256::new();
        for u in uids {
            h.update(u.as_bytes());
            h.update(b"/");
        }
        format!("{prefix}{}", hex::encode(&h.finalize()[..10]))
    };
    if attempt == 0 { base } else { format!("{base}-r{attempt}") }
}

#[cfg(test)]
mod tests {
    use kube::runtime::watcher::Event;

    use super::*;

    fn pod(uid: &str, group: Option<&str>) -> k8s_openapi::api::core::v1::Pod {
        let mut labels = serde_json::Map::new();
        let mut annotations = serde_json::Map::new();
        if let Some(g) = group {
            labels.insert(translate::POD_GROUP_LABEL.into(), g.into());
            annotations.insert(translate::MIN_MEMBER_ANNOTATION.into(), "2".into());
        }
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": format!("p-{uid}"), "namespace": "team", "uid": uid,
                         "labels": labels, "annotations": annotations},
            "spec": {"schedulerName": "paceline", "containers": [{"name": "c"}]},
            "status": {"phase": "Pending"},
        }))
        .expect("a pod")
    }

    /// Units come out in the order their pods were first seen, whatever the
    /// uids (the pending pods are kept by uid), a gang at its earliest
    /// member; a pod seen again keeps its place.
    #[test]
    fn units_go_in_the_order_their_pods_were_seen() {
        let mut st = Sched::default();
        for (uid, group) in [("zz", None), ("mm", Some("g")), ("aa", None), ("qq", None), ("bb", Some("g"))] {
            super::super::on_pod(&mut st, &[], Event::Apply(pod(uid, group)));
        }
        super::super::on_pod(&mut st, &[], Event::Apply(pod("aa", None)));
        let units = collect(&mut st, &[], Some("/default"));
        let order: Vec<Vec<&str>> = units.iter().map(|u| u.pods.iter().map(|p| p.0.as_str()).collect()).collect();
        assert_eq!(order, [vec!["zz"], vec!["bb", "mm"], vec!["aa"], vec!["qq"]], "{units:?}");
        assert!(units[1].id.starts_with(GANG_PREFIX) && units[0].id == format!("{SINGLE_PREFIX}zz"));
    }
}

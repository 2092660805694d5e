//! A pending pod in Paceline's terms: its pool, its gang, and a task spec
//! (resources, constraints) — or a refusal that says which field Paceline
//! cannot honour. Pure functions over the pod.

use k8s_openapi::api::core::v1::{NodeSelectorRequirement, Pod, Toleration};
use paceline_model::constraint::Constraint;
use paceline_model::task::TaskSpec;

use crate::nodes;

/// Annotation on a namespace (or, overriding it, on a pod): the pool the
/// pod is admitted in (a leaf pool path, `/team/batch`).
pub const POOL_ANNOTATION: &str = "paceline.io/pool";
/// Label naming a pod's group (scheduler-plugins' coscheduling label):
/// pods of one namespace with the same value are one gang.
pub const POD_GROUP_LABEL: &str = "scheduling.x-k8s.io/pod-group";
/// Annotation: how many pods of the group must be placed together (the
/// `minMember` of scheduler-plugins' PodGroup, which needs a CRD).
pub const MIN_MEMBER_ANNOTATION: &str = "paceline.io/min-member";
/// Node attribute prefix of a taint the provider lets through
/// (`tolerate_taints`): `paceline.io/taint:<key>=<value>:<effect>`, value
/// `true`. A pod that does not tolerate it is kept off such nodes.
pub const TAINT_ATTRIBUTE: &str = "paceline.io/taint:";
/// The most pods one gang may have.
pub const MAX_GANG: u32 = 1000;

/// A pod's group, from [`POD_GROUP_LABEL`] and [`MIN_MEMBER_ANNOTATION`].
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Group {
    /// The group's name (the label's value).
    pub name: String,
    /// Pods placed together, all or none.
    pub min_member: u32,
}

/// The pool of a pod: its own annotation, else its namespace's, else
/// `default`. `Err`: the words of the pod's condition.
pub fn pool_of(pod: &Pod, namespace_pool: Option<&str>, default: Option<&str>) -> Result<String, String> {
    let own = pod.metadata.annotations.as_ref().and_then(|a| a.get(POOL_ANNOTATION)).map(String::as_str);
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    match own.or(namespace_pool).or(default) {
        Some(p) if !p.trim().is_empty() => Ok(p.trim().to_string()),
        _ => Err(format!(
            "no pool: annotate namespace {ns} (or the pod) with {POOL_ANNOTATION}=<leaf pool path>, \
             or give the pod scheduler a default pool"
        )),
    }
}

/// The pod's group, if it is in one. `Err`: a malformed gang annotation.
pub fn group_of(pod: &Pod) -> Result<Option<Group>, String> {
    let Some(name) = pod.metadata.labels.as_ref().and_then(|l| l.get(POD_GROUP_LABEL)) else {
        return Ok(None);
    };
    let raw = pod.metadata.annotations.as_ref().and_then(|a| a.get(MIN_MEMBER_ANNOTATION));
    let Some(raw) = raw else {
        return Err(format!(
            "malformed gang: label {POD_GROUP_LABEL}={name} but no annotation {MIN_MEMBER_ANNOTATION} \
             (how many pods must be placed together)"
        ));
    };
    match raw.trim().parse::<u32>() {
        Ok(n) if (1..=MAX_GANG).contains(&n) => Ok(Some(Group { name: name.clone(), min_member: n })),
        _ => Err(format!(
            "malformed gang: annotation {MIN_MEMBER_ANNOTATION}={raw:?} is not a whole number 1-{MAX_GANG}"
        )),
    }
}

/// The task spec of a pod: its requests (as kube-scheduler counts them),
/// node selector, required node affinity (one term; `In`, `NotIn`,
/// `Exists`) and tolerations of the `taints` nodes have (as
/// [`TAINT_ATTRIBUTE`] names them). `Err`: the field Paceline does not
/// honour, never ignored.
pub fn task_of(pod: &Pod, taints: &[String]) -> Result<TaskSpec, String> {
    let Some(spec) = pod.spec.as_ref() else { return Err("the pod has no spec".into()) };
    let unsupported = |what: &str| Err(format!("unsupported by Paceline's pod scheduler: {what}"));
    if let Some(a) = &spec.affinity
        && (a.pod_affinity.is_some() || a.pod_anti_affinity.is_some())
    {
        return unsupported("inter-pod affinity (spec.affinity.podAffinity / podAntiAffinity)");
    }
    if spec.topology_spread_constraints.as_ref().is_some_and(|t| !t.is_empty()) {
        return unsupported("spec.topologySpreadConstraints");
    }
    if spec.resource_claims.as_ref().is_some_and(|c| !c.is_empty()) {
        return unsupported("spec.resourceClaims (dynamic resource allocation)");
    }
    if spec.volumes.iter().flatten().any(|v| v.persistent_volume_claim.is_some() || v.ephemeral.is_some()) {
        return unsupported("persistent volume claims (volume topology is not checked)");
    }
    let host_port = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .flat_map(|c| c.ports.iter().flatten())
        .any(|p| p.host_port.is_some_and(|h| h > 0));
    if host_port {
        return unsupported("host ports (containers[].ports[].hostPort)");
    }
    let mut constraints = Vec::new();
    for (k, v) in spec.node_selector.iter().flatten() {
        constraints.push(Constraint::AttributeEquals { key: k.clone(), value: v.clone() });
    }
    if let Some(na) = spec.affinity.as_ref().and_then(|a| a.node_affinity.as_ref()) {
        if na.preferred_during_scheduling_ignored_during_execution.as_ref().is_some_and(|p| !p.is_empty()) {
            return unsupported("preferred node affinity (spec.affinity.nodeAffinity.preferredDuringScheduling...)");
        }
        if let Some(req) = &na.required_during_scheduling_ignored_during_execution {
            let terms = &req.node_selector_terms;
            if terms.len() > 1 {
                return unsupported("more than one nodeSelectorTerm (terms ORed) in required node affinity");
            }
            if let Some(term) = terms.first() {
                if term.match_fields.as_ref().is_some_and(|f| !f.is_empty()) {
                    return unsupported("matchFields in required node affinity");
                }
                for r in term.match_expressions.iter().flatten() {
                    constraints.extend(requirement(r)?);
                }
            }
        }
    }
    for taint in taints {
        if !tolerated(spec.tolerations.as_deref().unwrap_or(&[]), taint) {
            constraints.push(Constraint::AttributeNotEquals { key: taint.clone(), value: "true".into() });
        }
    }
    let mut resources = nodes::pod_usage(pod, (0, 0)).map_err(|e| format!("resource requests: {e}"))?;
    resources.ports = 0;
    let image = spec.containers.first().and_then(|c| c.image.clone()).unwrap_or_else(|| "pod".into());
    Ok(TaskSpec { image: Some(image), resources, constraints, kill_grace_period_secs: 0, ..TaskSpec::default() })
}

fn requirement(r: &NodeSelectorRequirement) -> Result<Vec<Constraint>, String> {
    let values = r.values.clone().unwrap_or_default();
    let key = r.key.clone();
    Ok(match r.operator.as_str() {
        "In" if !values.is_empty() => vec![Constraint::AttributeIn { key, values }],
        "NotIn" => values.into_iter().map(|value| Constraint::AttributeNotEquals { key: key.clone(), value }).collect(),
        "Exists" => vec![Constraint::AttributeExists { key }],
        "In" => return Err(format!("node affinity: `{key} In` with no values")),
        op => {
            return Err(format!(
                "unsupported by Paceline's pod scheduler: node affinity operator {op} (on {key}); In, NotIn and Exists are"
            ));
        }
    })
}

/// Whether `tolerations` tolerate the taint an attribute names
/// (`paceline.io/taint:<key>=<value>:<effect>`), by Kubernetes' rules.
pub fn tolerated(tolerations: &[Toleration], attribute: &str) -> bool {
    let Some(rest) = attribute.strip_prefix(TAINT_ATTRIBUTE) else { return true };
    let (kv, effect) = rest.rsplit_once(':').unwrap_or((rest, ""));
    let (key, value) = kv.split_once('=').unwrap_or((kv, ""));
    tolerations.iter().any(|t| {
        let effect_ok = t.effect.as_deref().is_none_or(|e| e.is_empty() || e == effect);
        let tkey = t.key.as_deref().unwrap_or("");
        let exists = t.operator.as_deref() == Some("Exists");
        let key_ok = (tkey.is_empty() && exists) || tkey == key;
        let value_ok = exists || t.value.as_deref().unwrap_or("") == value;
        effect_ok && key_ok && value_ok
    })
}

/// The attribute of a node's taint (see [`TAINT_ATTRIBUTE`]).
pub fn taint_attribute(key: &str, value: &str, effect: &str) -> String {
    format!("{TAINT_ATTRIBUTE}{key}={value}:{effect}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(yaml: serde_json::Value) -> Pod {
        serde_json::from_value(yaml).expect("a pod")
    }

    fn basic(extra_spec: serde_json::Value) -> Pod {
        let mut spec = serde_json::json!({"containers": [{"name": "c", "image": "nginx",
            "resources": {"requests": {"cpu": "100m", "memory": "500Mi"}}}]});
        if let (Some(s), Some(e)) = (spec.as_object_mut(), extra_spec.as_object()) {
            s.extend(e.clone());
        }
        pod(serde_json::json!({"metadata": {"name": "p", "namespace": "ns"}, "spec": spec}))
    }

    #[test]
    fn requests_selectors_and_affinity_become_the_task() {
        let p = basic(serde_json::json!({
            "nodeSelector": {"disk": "ssd"},
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [
                    {"key": "zone", "operator": "In", "values": ["a", "b"]},
                    {"key": "rack", "operator": "NotIn", "values": ["r1", "r2"]},
                    {"key": "gpu", "operator": "Exists"}]}]}}}
        }));
        let t = task_of(&p, &[]).expect("supported");
        assert_eq!((t.resources.cpu_millis, t.resources.memory_mib), (100, 500));
        assert_eq!(
            t.constraints,
            vec![
                Constraint::AttributeEquals { key: "disk".into(), value: "ssd".into() },
                Constraint::AttributeIn { key: "zone".into(), values: vec!["a".into(), "b".into()] },
                Constraint::AttributeNotEquals { key: "rack".into(), value: "r1".into() },
                Constraint::AttributeNotEquals { key: "rack".into(), value: "r2".into() },
                Constraint::AttributeExists { key: "gpu".into() },
            ]
        );
    }

    #[test]
    fn unsupported_fields_are_refused_by_name() {
        let cases = [
            (serde_json::json!({"affinity": {"podAntiAffinity": {}}}), "inter-pod affinity"),
            (
                serde_json::json!({"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone",
                "whenUnsatisfiable": "DoNotSchedule"}]}),
                "topologySpreadConstraints",
            ),
            (
                serde_json::json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
                {"nodeSelectorTerms": [{"matchExpressions": [{"key": "n", "operator": "Gt", "values": ["3"]}]}]}}}}),
                "operator Gt",
            ),
            (
                serde_json::json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
                {"nodeSelectorTerms": [{"matchExpressions": []}, {"matchExpressions": []}]}}}}),
                "nodeSelectorTerm",
            ),
        ];
        for (extra, words) in cases {
            let e = task_of(&basic(extra.clone()), &[]).expect_err("refused");
            assert!(e.contains(words), "{extra}: {e}");
        }
    }

    #[test]
    fn tolerations_keep_pods_off_tainted_nodes_they_do_not_tolerate() {
        let taint = taint_attribute("dedicated", "gpu", "NoSchedule");
        let plain = task_of(&basic(serde_json::json!({})), std::slice::from_ref(&taint)).expect("ok");
        assert_eq!(
            plain.constraints,
            vec![Constraint::AttributeNotEquals { key: taint.clone(), value: "true".into() }]
        );
        for t in [
            serde_json::json!({"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}),
            serde_json::json!({"key": "dedicated", "operator": "Exists"}),
            serde_json::json!({"operator": "Exists"}),
        ] {
            let p = basic(serde_json::json!({"tolerations": [t.clone()]}));
            assert!(task_of(&p, std::slice::from_ref(&taint)).expect("ok").constraints.is_empty(), "{t}");
        }
        let other = basic(serde_json::json!({"tolerations": [{"key": "dedicated", "value": "cpu"}]}));
        assert_eq!(task_of(&other, std::slice::from_ref(&taint)).expect("ok").constraints.len(), 1);
    }

    #[test]
    fn pools_and_gangs_from_annotations() {
        let mut p = basic(serde_json::json!({}));
        assert_eq!(pool_of(&p, Some("/a"), None).as_deref(), Ok("/a"));
        assert!(pool_of(&p, None, None).expect_err("no pool").contains(POOL_ANNOTATION));
        p.metadata.annotations = Some([(POOL_ANNOTATION.to_string(), "/b".to_string())].into());
        assert_eq!(pool_of(&p, Some("/a"), None).as_deref(), Ok("/b"), "the pod's own wins");
        assert_eq!(group_of(&p), Ok(None));
        p.metadata.labels = Some([(POD_GROUP_LABEL.to_string(), "g".to_string())].into());
        assert!(group_of(&p).expect_err("no size").contains(MIN_MEMBER_ANNOTATION));
        for bad in ["0", "four", "-1", "1001"] {
            p.metadata.annotations = Some([(MIN_MEMBER_ANNOTATION.to_string(), bad.to_string())].into());
            assert!(group_of(&p).expect_err(bad).contains("malformed gang"), "{bad}");
        }
        p.metadata.annotations = Some([(MIN_MEMBER_ANNOTATION.to_string(), "4".to_string())].into());
        assert_eq!(group_of(&p), Ok(Some(Group { name: "g".into(), min_member: 4 })));
    }
}

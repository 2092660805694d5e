//! Nodes as hosts: a [`Node`] becomes a [`NodeView`] (what it can give,
//! its attributes, whether it is Ready, cordoned or tainted), and pods that
//! Paceline did not create are counted against it ([`pod_usage`]).
//!
//! Pure functions over the API's objects; the provider decides what to
//! report from them.

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use paceline_model::{Labels, Resources};

use crate::config::KubernetesConfig;
use crate::error::QuantityError;

/// The extended resource GPUs are counted in (NVIDIA's device plugin).
pub const GPU_RESOURCE: &str = "nvidia.com/gpu";
/// The taint the node lifecycle controller puts on a cordoned node: a
/// cordon, which the provider treats as a drain, not as a taint.
const UNSCHEDULABLE_TAINT: &str = "node.kubernetes.io/unschedulable";

/// What the provider needs of a node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeView {
    /// The node's name: the host's name.
    pub name: String,
    /// `status.allocatable`, with `ports` the size of the port range.
    pub allocatable: Resources,
    /// Labels, plus `zone`, `region` and `gpu_model` read from the
    /// well-known labels when the node has no label of that name.
    pub attributes: Labels,
    /// The `Ready` condition is `True`.
    pub ready: bool,
    /// Why it is not Ready (the condition's reason and message).
    pub not_ready_reason: String,
    /// `spec.unschedulable` (cordoned).
    pub unschedulable: bool,
    /// NoSchedule or NoExecute taints Paceline does not tolerate, as
    /// `key=value:Effect`.
    pub blocking_taints: Vec<String>,
    /// `status.allocatable.pods`: how many unfinished pods the kubelet
    /// admits (`None`: the node does not say; not limited).
    pub max_pods: Option<u64>,
}

impl NodeView {
    /// Whether new runs may go there (taints; a cordon is a drain).
    pub fn offers(&self) -> bool {
        self.blocking_taints.is_empty()
    }
}

/// Reads a node; an error names the field that could not be read.
pub fn node_view(node: &Node, config: &KubernetesConfig) -> Result<NodeView, String> {
    let name = node.metadata.name.clone().unwrap_or_default();
    if name.is_empty() {
        return Err("node without a name".into());
    }
    let status = node.status.as_ref();
    let alloc = status.and_then(|s| s.allocatable.as_ref().or(s.capacity.as_ref()));
    let get = |key: &str| alloc.and_then(|a| a.get(key));
    let field = |key: &str, e: QuantityError| format!("node {name}: allocatable {key}: {e}");
    let cpu_millis = match get("cpu") {
        Some(q) => parse_quantity(&q.0).map_err(|e| field("cpu", e))?.floor_scaled(1000),
        None => 0,
    };
    let memory_mib = match get("memory") {
        Some(q) => parse_quantity(&q.0).map_err(|e| field("memory", e))?.floor_div(MIB),
        None => 0,
    };
    let disk_mib = match get("ephemeral-storage") {
        Some(q) => parse_quantity(&q.0).map_err(|e| field("ephemeral-storage", e))?.floor_div(MIB),
        None => config.unreported_disk_mib,
    };
    let gpus = match get(GPU_RESOURCE) {
        Some(q) => parse_quantity(&q.0).map_err(|e| field(GPU_RESOURCE, e))?.floor_scaled(1),
        None => 0,
    };
    let max_pods = match get("pods") {
        Some(q) => Some(parse_quantity(&q.0).map_err(|e| field("pods", e))?.floor_scaled(1)),
        None => None,
    };
    let ports = u64::from(config.port_range.1.saturating_sub(config.port_range.0)) + 1;
    let allocatable = Resources { cpu_millis, memory_mib, disk_mib, gpu_milli: gpus.saturating_mul(1000), ports };

    let mut attributes: Labels = node.metadata.labels.clone().unwrap_or_default().into_iter().collect();
    for (alias, key) in [
        ("zone", "topology.kubernetes.io/zone"),
        ("region", "topology.kubernetes.io/region"),
        ("gpu_model", "nvidia.com/gpu.product"),
    ] {
        if !attributes.contains_key(alias)
            && let Some(v) = attributes.get(key).cloned()
        {
            attributes.insert(alias.into(), v);
        }
    }

    // Gang discovery (decision 0051): where peers reach the node (task ports
    // are host ports), and the range the job manager picks members' ports in.
    let address = status
        .and_then(|s| s.addresses.as_ref())
        .and_then(|a| a.iter().find(|a| a.type_ == "InternalIP").or_else(|| a.first()))
        .map(|a| a.address.clone());
    if let Some(address) = address {
        attributes.entry(paceline_model::gang::ADDRESS_ATTRIBUTE.into()).or_insert(address);
    }
    attributes.insert(
        paceline_model::gang::PORT_RANGE_ATTRIBUTE.into(),
        format!("{}-{}", config.port_range.0, config.port_range.1),
    );

    let ready_cond = status.and_then(|s| s.conditions.as_ref()).and_then(|c| c.iter().find(|c| c.type_ == "Ready"));
    let ready = ready_cond.is_some_and(|c| c.status == "True");
    let not_ready_reason = match ready_cond {
        None => "the node has no Ready condition".to_string(),
        Some(c) if c.status == "True" => String::new(),
        Some(c) => format!(
            "Ready={} ({}{}{})",
            c.status,
            c.reason.as_deref().unwrap_or(""),
            if c.message.is_some() { ": " } else { "" },
            c.message.as_deref().unwrap_or("")
        ),
    };
    let spec = node.spec.as_ref();
    let unschedulable = spec.and_then(|s| s.unschedulable).unwrap_or(false);
    let blocking_taints = spec
        .and_then(|s| s.taints.as_ref())
        .map(|taints| {
            taints
                .iter()
                .filter(|t| t.effect == "NoSchedule" || t.effect == "NoExecute")
                .filter(|t| t.key != UNSCHEDULABLE_TAINT)
                .filter(|t| !config.tolerate_taints.iter().any(|k| k == &t.key))
                .map(|t| format!("{}={}:{}", t.key, t.value.as_deref().unwrap_or(""), t.effect))
                .collect()
        })
        .unwrap_or_default();
    // Taints Paceline's own pods tolerate (`tolerate_taints`) as attributes,
    // so that the pod scheduler keeps pods that do not tolerate them off.
    for t in spec.and_then(|s| s.taints.as_ref()).into_iter().flatten() {
        if (t.effect == "NoSchedule" || t.effect == "NoExecute")
            && t.key != UNSCHEDULABLE_TAINT
            && config.tolerate_taints.iter().any(|k| k == &t.key)
        {
            let key = crate::podsched::translate::taint_attribute(&t.key, t.value.as_deref().unwrap_or(""), &t.effect);
            attributes.insert(key, "true".into());
        }
    }
    Ok(NodeView { name, allocatable, attributes, ready, not_ready_reason, unschedulable, blocking_taints, max_pods })
}

/// What a pod holds on its node, as the kube-scheduler counts it: the larger
/// of its containers' requests together and any one init container's, plus
/// the pod's overhead; `ports` counts its host ports inside `port_range`.
pub fn pod_usage(pod: &Pod, port_range: (u16, u16)) -> Result<Resources, String> {
    let Some(spec) = pod.spec.as_ref() else { return Ok(Resources::ZERO) };
    let name = pod.metadata.name.as_deref().unwrap_or("");
    let requests = |c: &k8s_openapi::api::core::v1::Container| -> Result<Resources, String> {
        let req = c.resources.as_ref().and_then(|r| r.requests.as_ref().or(r.limits.as_ref()));
        requests_of(req, name)
    };
    let mut sum = Resources::ZERO;
    for c in &spec.containers {
        sum = sum.saturating_add(&requests(c)?);
    }
    for c in spec.init_containers.iter().flatten() {
        let r = requests(c)?;
        sum = Resources {
            cpu_millis: sum.cpu_millis.max(r.cpu_millis),
            memory_mib: sum.memory_mib.max(r.memory_mib),
            disk_mib: sum.disk_mib.max(r.disk_mib),
            gpu_milli: sum.gpu_milli.max(r.gpu_milli),
            ports: 0,
        };
    }
    if let Some(overhead) = spec.overhead.as_ref() {
        let o = requests_of(Some(overhead), name)?;
        sum = sum.saturating_add(&o);
    }
    sum.ports = host_ports(pod).into_iter().filter(|p| (port_range.0..=port_range.1).contains(p)).count() as u64;
    Ok(sum)
}

/// The host ports a pod's containers take.
pub fn host_ports(pod: &Pod) -> Vec<u16> {
    let Some(spec) = pod.spec.as_ref() else { return Vec::new() };
    spec.containers
        .iter()
        .flat_map(|c| c.ports.iter().flatten())
        .filter_map(|p| p.host_port)
        .filter_map(|p| u16::try_from(p).ok())
        .filter(|&p| p > 0)
        .collect()
}

fn requests_of(req: Option<&std::collections::BTreeMap<String, Quantity>>, pod: &str) -> Result<Resources, String> {
    let Some(req) = req else { return Ok(Resources::ZERO) };
    let field = |key: &str, e: QuantityError| format!("pod {pod}: request {key}: {e}");
    let q = |key: &str| -> Result<Option<Parsed>, String> {
        req.get(key).map(|q| parse_quantity(&q.0).map_err(|e| field(key, e))).transpose()
    };
    // Requests round up: what the pod holds is never under-counted.
    Ok(Resources {
        cpu_millis: q("cpu")?.map_or(0, |p| p.ceil_scaled(1000)),
        memory_mib: q("memory")?.map_or(0, |p| p.ceil_div(MIB)),
        disk_mib: q("ephemeral-storage")?.map_or(0, |p| p.ceil_div(MIB)),
        gpu_milli: q(GPU_RESOURCE)?.map_or(0, |p| p.ceil_scaled(1000)),
        ports: 0,
    })
}

const MIB: u128 = 1 << 20;

/// A non-negative quantity as an exact fraction `num / den`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Parsed {
    num: u128,
    den: u128,
}

impl Parsed {
    /// `value × scale`, rounded down, saturating at `u64::MAX`.
    pub fn floor_scaled(self, scale: u128) -> u64 {
        sat(self.num.saturating_mul(scale) / self.den)
    }

    /// `value × scale`, rounded up.
    pub fn ceil_scaled(self, scale: u128) -> u64 {
        sat(self.num.saturating_mul(scale).div_ceil(self.den))
    }

    /// `value / unit`, rounded down.
    pub fn floor_div(self, unit: u128) -> u64 {
        sat(self.num / self.den.saturating_mul(unit))
    }

    /// `value / unit`, rounded up.
    pub fn ceil_div(self, unit: u128) -> u64 {
        sat(self.num.div_ceil(self.den.saturating_mul(unit)))
    }
}

fn sat(v: u128) -> u64 {
    u64::try_from(v).unwrap_or(u64::MAX)
}

/// Parses a Kubernetes quantity: a decimal number with an optional binary
/// (`Ki` … `Ei`), decimal (`n u m k M G T P E`) or exponent (`e3`) suffix.
/// Negative quantities are refused (no capacity or request is negative).
pub fn parse_quantity(s: &str) -> Result<Parsed, QuantityError> {
    let err = |reason| QuantityError { value: s.chars().take(64).collect(), reason };
    let t = s.trim();
    if t.is_empty() {
        return Err(err("empty"));
    }
    let t = t.strip_prefix('+').unwrap_or(t);
    if t.starts_with('-') {
        return Err(err("negative"));
    }
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (number, suffix) = t.split_at(split);
    let (int, frac) = number.split_once('.').unwrap_or((number, ""));
    if int.is_empty() && frac.is_empty() {
        return Err(err("no digits"));
    }
    if frac.contains('.') {
        return Err(err("two decimal points"));
    }
    // Digits past what u128 can hold exactly are meaningless for capacity.
    if int.len() + frac.len() > 30 {
        return Err(err("too many digits"));
    }
    let mut num: u128 = 0;
    for c in int.chars().chain(frac.chars()) {
        num = num * 10 + u128::from(c as u8 - b'0');
    }
    let mut den: u128 = 10u128.pow(frac.len() as u32);
    let (mul, div): (u128, u128) = match suffix {
        "" => (1, 1),
        "n" => (1, 1_000_000_000),
        "u" => (1, 1_000_000),
        "m" => (1, 1_000),
        "k" => (1_000, 1),
        "M" => (1_000_000, 1),
        "G" => (1_000_000_000, 1),
        "T" => (1_000_000_000_000, 1),
        "P" => (1_000_000_000_000_000, 1),
        "E" => (1_000_000_000_000_000_000, 1),
        "Ki" => (1 << 10, 1),
        "Mi" => (1 << 20, 1),
        "Gi" => (1 << 30, 1),
        "Ti" => (1 << 40, 1),
        "Pi" => (1 << 50, 1),
        "Ei" => (1 << 60, 1),
        e if e.starts_with(['e', 'E']) => {
            let exp = &e[1..];
            let (neg, digits) = match exp.strip_prefix('-') {
                Some(d) => (true, d),
                None => (false, exp.strip_prefix('+').unwrap_or(exp)),
            };
            let n: u32 = digits.parse().map_err(|_| err("bad exponent"))?;
            if n > 18 {
                return Err(err("exponent out of range"));
            }
            if neg { (1, 10u128.pow(n)) } else { (10u128.pow(n), 1) }
        }
        _ => return Err(err("unknown suffix")),
    };
    num = num.checked_mul(mul).ok_or_else(|| err("too large"))?;
    den = den.checked_mul(div).ok_or_else(|| err("too small"))?;
    Ok(Parsed { num, den })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::api::core::v1::{
        Container, ContainerPort, NodeCondition, NodeSpec, NodeStatus, PodSpec, ResourceRequirements, Taint,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;

    fn q(s: &str) -> Quantity {
        Quantity(s.into())
    }

    fn node(alloc: &[(&str, &str)], ready: &str) -> Node {
        Node {
            metadata: ObjectMeta {
                name: Some("n1".into()),
                labels: Some(BTreeMap::from([
                    ("type".into(), "kwok".into()),
                    ("topology.kubernetes.io/zone".into(), "z1".into()),
                ])),
                ..ObjectMeta::default()
            },
            spec: Some(NodeSpec::default()),
            status: Some(NodeStatus {
                allocatable: Some(alloc.iter().map(|(k, v)| (k.to_string(), q(v))).collect()),
                conditions: Some(vec![NodeCondition {
                    type_: "Ready".into(),
                    status: ready.into(),
                    reason: Some("KubeletNotReady".into()),
                    ..NodeCondition::default()
                }]),
                ..NodeStatus::default()
            }),
        }
    }

    #[test]
    fn quantities_parse_as_kubernetes_writes_them() {
        assert_eq!(parse_quantity("32").map(|p| p.floor_scaled(1000)), Ok(32_000));
        assert_eq!(parse_quantity("500m").map(|p| p.ceil_scaled(1000)), Ok(500));
        assert_eq!(parse_quantity("0.5").map(|p| p.ceil_scaled(1000)), Ok(500));
        assert_eq!(parse_quantity("1.5").map(|p| p.floor_scaled(1000)), Ok(1500));
        assert_eq!(parse_quantity("128Gi").map(|p| p.floor_div(MIB)), Ok(131_072));
        assert_eq!(parse_quantity("1G").map(|p| p.floor_div(MIB)), Ok(953));
        assert_eq!(parse_quantity("1G").map(|p| p.ceil_div(MIB)), Ok(954));
        assert_eq!(parse_quantity("129950564Ki").map(|p| p.floor_div(MIB)), Ok(126_904));
        assert_eq!(parse_quantity("1e3").map(|p| p.floor_scaled(1)), Ok(1000));
        assert_eq!(parse_quantity("100n").map(|p| p.ceil_scaled(1000)), Ok(1));
        assert_eq!(parse_quantity("+2").map(|p| p.floor_scaled(1)), Ok(2));
        for bad in ["", "abc", "-1", "1.2.3", "12Zi", "1e99", ".", "99999999999999999999999999999999"] {
            assert!(parse_quantity(bad).is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn a_node_becomes_a_host_with_its_labels_and_aliases() {
        let config = KubernetesConfig::default();
        let n = node(&[("cpu", "32"), ("memory", "128Gi"), ("ephemeral-storage", "100Gi"), ("pods", "110")], "True");
        let v = node_view(&n, &config).expect("view");
        assert_eq!(v.name, "n1");
        assert_eq!(
            v.allocatable,
            Resources { cpu_millis: 32_000, memory_mib: 131_072, disk_mib: 102_400, gpu_milli: 0, ports: 2000 }
        );
        assert_eq!(v.attributes.get("type").map(String::as_str), Some("kwok"));
        assert_eq!(v.attributes.get("zone").map(String::as_str), Some("z1"));
        assert_eq!(v.attributes.get("port_range").map(String::as_str), Some("31000-32999"));
        assert!(v.ready && v.offers() && !v.unschedulable);
        assert_eq!(v.max_pods, Some(110));
        let bad = node(&[("cpu", "4"), ("pods", "many")], "True");
        let e = node_view(&bad, &config).expect_err("unparseable pods");
        assert!(e.contains("allocatable pods"), "{e}");
    }

    #[test]
    fn gpus_count_in_milli_gpus() {
        let n = node(&[("cpu", "8"), ("nvidia.com/gpu", "4")], "True");
        let v = node_view(&n, &KubernetesConfig::default()).expect("view");
        assert_eq!(v.allocatable.gpu_milli, 4000);
        assert_eq!(v.allocatable.disk_mib, 1 << 20, "no ephemeral-storage: not limited");
    }

    #[test]
    fn not_ready_and_unparseable_nodes_say_why() {
        let n = node(&[("cpu", "4")], "False");
        let v = node_view(&n, &KubernetesConfig::default()).expect("view");
        assert!(!v.ready);
        assert!(v.not_ready_reason.contains("Ready=False (KubeletNotReady"), "{}", v.not_ready_reason);
        let bad = node(&[("cpu", "lots")], "True");
        let e = node_view(&bad, &KubernetesConfig::default()).expect_err("unparseable");
        assert!(e.contains("node n1: allocatable cpu: `lots` is not a Kubernetes quantity"), "{e}");
    }

    #[test]
    fn taints_block_unless_tolerated_and_a_cordon_is_not_a_taint() {
        let mut n = node(&[("cpu", "4")], "True");
        let spec = n.spec.get_or_insert_default();
        spec.unschedulable = Some(true);
        spec.taints = Some(vec![
            Taint { key: UNSCHEDULABLE_TAINT.into(), effect: "NoSchedule".into(), ..Taint::default() },
            Taint { key: "gpu".into(), value: Some("only".into()), effect: "NoSchedule".into(), ..Taint::default() },
            Taint { key: "soft".into(), effect: "PreferNoSchedule".into(), ..Taint::default() },
        ]);
        let v = node_view(&n, &KubernetesConfig::default()).expect("view");
        assert!(v.unschedulable);
        assert_eq!(v.blocking_taints, vec!["gpu=only:NoSchedule".to_string()]);
        assert!(!v.offers());
        let tolerant = KubernetesConfig { tolerate_taints: vec!["gpu".into()], ..KubernetesConfig::default() };
        assert!(node_view(&n, &tolerant).expect("view").offers());
    }

    #[test]
    fn other_pods_count_as_the_scheduler_counts_them() {
        let container = |cpu: &str, mem: &str, host_port: Option<i32>| Container {
            name: "c".into(),
            resources: Some(ResourceRequirements {
                requests: Some(BTreeMap::from([("cpu".into(), q(cpu)), ("memory".into(), q(mem))])),
                ..ResourceRequirements::default()
            }),
            ports: host_port
                .map(|p| vec![ContainerPort { container_port: p, host_port: Some(p), ..Default::default() }]),
            ..Container::default()
        };
        let pod = Pod {
            metadata: ObjectMeta { name: Some("other".into()), ..ObjectMeta::default() },
            spec: Some(PodSpec {
                containers: vec![container("250m", "100Mi", Some(31_005)), container("250m", "1Gi", Some(80))],
                init_containers: Some(vec![container("2", "10Mi", None)]),
                ..PodSpec::default()
            }),
            ..Pod::default()
        };
        let u = pod_usage(&pod, (31_000, 32_999)).expect("usage");
        assert_eq!(u, Resources { cpu_millis: 2000, memory_mib: 1124, disk_mib: 0, gpu_milli: 0, ports: 1 });
        assert_eq!(host_ports(&pod), vec![31_005, 80]);
    }
}

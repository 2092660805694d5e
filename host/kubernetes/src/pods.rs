//! A launch as a pod: [`build_pod`] turns a [`LaunchRequest`] into a Pod
//! bound to its node (and a Secret when the run has secrets); the names and
//! labels that tie a pod back to its run ([`pod_name`], [`RunMeta`]).
//!
//! Pure functions: the provider creates what they return.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Container, ContainerPort, DownwardAPIVolumeFile, DownwardAPIVolumeSource, EnvVar, EnvVarSource, ExecAction,
    HTTPGetAction, HostPathVolumeSource, KeyToPath, Lifecycle, ObjectFieldSelector, Pod, PodSpec, Probe,
    ResourceRequirements, Secret, SecretKeySelector, SecretVolumeSource, TCPSocketAction, Toleration, Volume,
    VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use paceline_model::Resources;
use paceline_model::gpu::GpuGrant;
use paceline_model::run::LaunchRequest;
use paceline_model::task_secret::SecretTarget;
use sha2::{Digest, Sha256};

use crate::config::KubernetesConfig;
use crate::nodes::GPU_RESOURCE;

/// The label every object Paceline creates carries (with [`MANAGED_BY_VALUE`]).
pub const MANAGED_BY: &str = "app.kubernetes.io/managed-by";
/// Its value.
pub const MANAGED_BY_VALUE: &str = "paceline";
/// The label selector of every Paceline cluster's pods.
pub const MANAGED_SELECTOR: &str = "app.kubernetes.io/managed-by=paceline";
/// Label: the id of the Paceline cluster that created the pod
/// ([`KubernetesConfig::cluster_id`]).
pub const CLUSTER: &str = "paceline.io/cluster";

/// The label selector of this cluster's pods.
pub fn our_selector(config: &KubernetesConfig) -> String {
    format!("{MANAGED_SELECTOR},{CLUSTER}={}", config.cluster_id)
}

/// Whether `pod` is one of this cluster's (labelled by it).
pub fn is_ours(config: &KubernetesConfig, pod: &Pod) -> bool {
    let labels = pod.metadata.labels.as_ref();
    let label = |k: &str| labels.and_then(|l| l.get(k)).map(String::as_str);
    label(MANAGED_BY) == Some(MANAGED_BY_VALUE) && label(CLUSTER) == Some(config.cluster_id.as_str())
}
/// Label (sanitised) and annotation (exact) of the run id.
pub const RUN_ID: &str = "paceline.io/run-id";
/// Label (sanitised) and annotation (exact) of the task id.
pub const TASK_ID: &str = "paceline.io/task-id";
/// Label (sanitised) and annotation (exact) of the job id.
pub const JOB_ID: &str = "paceline.io/job-id";
/// Annotation: the run's resources as Paceline counts them (JSON).
pub const RESOURCES: &str = "paceline.io/resources";
/// Annotation: the host ports given to the run's named ports (JSON).
pub const PORTS: &str = "paceline.io/ports";
/// Annotation: the GPU grant of the run (JSON), when it has one.
pub const GPU: &str = "paceline.io/gpu";
/// The task's container.
pub const CONTAINER: &str = "task";
/// Where file secrets are mounted in the container.
pub const SECRETS_DIR: &str = "/var/run/paceline/secrets";
/// Annotation: a gang member's peers file (decision 0051), mounted into the
/// container through the downward API.
pub const GANG_PEERS: &str = "paceline.io/gang-peers";
/// Where the peers file is mounted.
pub const GANG_DIR: &str = "/var/run/paceline/gang";
/// Where a stateful task's volume is mounted in the container.
pub const VOLUME_DIR: &str = "/var/lib/paceline/volume";
/// The node directory volumes are kept under, per task id.
pub const VOLUME_HOST_DIR: &str = "/var/lib/paceline/volumes";

/// Longest label value (and the longest pod name we make).
const MAX_NAME: usize = 63;

/// Makes `s` a valid label value (and DNS label when `lower`): invalid
/// characters become `-`, the ends are alphanumeric, at most 63 bytes. A
/// value that had to change gets a hash of the original appended, so two
/// ids never share a name.
pub fn sanitize(s: &str, lower: bool) -> String {
    let mapped: String = s
        .chars()
        .map(|c| {
            let c = if lower { c.to_ascii_lowercase() } else { c };
            let ok = c.is_ascii_alphanumeric() || c == '-' || (!lower && (c == '_' || c == '.'));
            if ok { c } else { '-' }
        })
        .collect();
    let trimmed = mapped.trim_matches(|c: char| !c.is_ascii_alphanumeric());
    if trimmed == s && !s.is_empty() && s.len() <= MAX_NAME {
        return s.to_string();
    }
    let hash = hex::encode(&Sha256::digest(s.as_bytes())[..4]);
    let keep = MAX_NAME - hash.len() - 1;
    let mut head: String = trimmed.chars().take(keep).collect();
    while head.ends_with(|c: char| !c.is_ascii_alphanumeric()) {
        head.pop();
    }
    if head.is_empty() { format!("p{hash}") } else { format!("{head}-{hash}") }
}

/// The pod (and Secret) name of a run.
pub fn pod_name(run_id: &str) -> String {
    sanitize(run_id, true)
}

/// The job id of a task id (`<job>-<instance>`).
pub fn job_of(task_id: &str) -> &str {
    task_id.rsplit_once('-').map_or(task_id, |(j, _)| j)
}

/// The task id of a run id (`<job>-<instance>-<run>`).
pub fn task_of(run_id: &str) -> &str {
    run_id.rsplit_once('-').map_or(run_id, |(t, _)| t)
}

/// What a Paceline pod says about its run (from its annotations).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunMeta {
    /// The run id.
    pub run_id: String,
    /// The task id.
    pub task_id: String,
    /// What it holds, as Paceline counts it.
    pub resources: Resources,
    /// Host ports by name.
    pub ports: BTreeMap<String, u16>,
    /// Its GPU grant.
    pub gpu: GpuGrant,
}

/// Reads a Paceline pod's run; `None` for a pod without a run id.
/// Annotations that do not parse count as empty (the pod still ends up
/// reported, with what can be read).
pub fn run_meta(pod: &Pod) -> Option<RunMeta> {
    let ann = pod.metadata.annotations.as_ref()?;
    let run_id = ann.get(RUN_ID)?.clone();
    let task_id = ann.get(TASK_ID).cloned().unwrap_or_else(|| task_of(&run_id).to_string());
    let resources = ann.get(RESOURCES).and_then(|s| serde_json::from_str(s).ok()).unwrap_or(Resources::ZERO);
    let ports = ann.get(PORTS).and_then(|s| serde_json::from_str(s).ok()).unwrap_or_default();
    let gpu = ann.get(GPU).and_then(|s| serde_json::from_str(s).ok()).unwrap_or_default();
    Some(RunMeta { run_id, task_id, resources, ports, gpu })
}

/// The pod of a launch, bound to `node`, and the Secret holding its
/// secrets (if it has any; the pod refers to it by the pod's name). An
/// error says what cannot be expressed as a pod.
pub fn build_pod(
    config: &KubernetesConfig,
    req: &LaunchRequest,
    node: &str,
    ports: &BTreeMap<String, u16>,
) -> Result<(Pod, Option<Secret>), String> {
    let spec = &req.spec;
    let name = pod_name(&req.run_id);
    let job = job_of(&req.task_id);

    if req.user.is_some() {
        // A pod's user is the image's or its security context's; never
        // run the task as someone else than the job asked.
        return Err("user: running tasks as a chosen host user is not supported by the kubernetes provider".into());
    }
    let r = spec.resources;
    if !r.gpu_milli.is_multiple_of(1000) {
        return Err(format!(
            "resources.gpu_milli {}: Kubernetes gives whole GPUs ({GPU_RESOURCE}); a share of a GPU cannot be asked for",
            r.gpu_milli
        ));
    }
    let mut quantities = BTreeMap::new();
    if r.cpu_millis > 0 {
        quantities.insert("cpu".to_string(), Quantity(format!("{}m", r.cpu_millis)));
    }
    if r.memory_mib > 0 {
        quantities.insert("memory".to_string(), Quantity(format!("{}Mi", r.memory_mib)));
    }
    if r.disk_mib > 0 {
        quantities.insert("ephemeral-storage".to_string(), Quantity(format!("{}Mi", r.disk_mib)));
    }
    if r.gpu_milli > 0 {
        quantities.insert(GPU_RESOURCE.to_string(), Quantity((r.gpu_milli / 1000).to_string()));
    }

    // The environment as the agent builds it: the spec's, the launch's
    // (PACELINE_JOB_ID, …), the ports, then the run's own names.
    let mut env: BTreeMap<String, String> = spec.env.clone();
    env.extend(req.env.iter().map(|(k, v)| (k.clone(), v.clone())));
    for (port_name, port) in ports {
        env.insert(format!("PORT_{}", port_name.to_ascii_uppercase()), port.to_string());
    }
    env.insert("PACELINE_RUN_ID".into(), req.run_id.clone());
    env.insert("PACELINE_TASK_ID".into(), req.task_id.clone());
    let mut volumes = Vec::new();
    let mut mounts = Vec::new();
    if let Some(v) = &spec.volume {
        env.insert("PACELINE_VOLUME".into(), VOLUME_DIR.into());
        volumes.push(Volume {
            name: "volume".into(),
            host_path: Some(HostPathVolumeSource {
                path: format!("{VOLUME_HOST_DIR}/{}/{}", sanitize(&req.task_id, true), sanitize(&v.name, true)),
                type_: Some("DirectoryOrCreate".into()),
            }),
            ..Volume::default()
        });
        mounts.push(VolumeMount { name: "volume".into(), mount_path: VOLUME_DIR.into(), ..VolumeMount::default() });
    }
    if req.gang.is_some() {
        env.insert("PACELINE_GANG_PEERS_FILE".into(), format!("{GANG_DIR}/{}", paceline_model::gang::PEERS_FILE));
        volumes.push(Volume {
            name: "gang".into(),
            downward_api: Some(DownwardAPIVolumeSource {
                items: Some(vec![DownwardAPIVolumeFile {
                    path: paceline_model::gang::PEERS_FILE.into(),
                    field_ref: Some(ObjectFieldSelector {
                        field_path: format!("metadata.annotations['{GANG_PEERS}']"),
                        ..ObjectFieldSelector::default()
                    }),
                    ..DownwardAPIVolumeFile::default()
                }]),
                ..DownwardAPIVolumeSource::default()
            }),
            ..Volume::default()
        });
        mounts.push(VolumeMount {
            name: "gang".into(),
            mount_path: GANG_DIR.into(),
            read_only: Some(true),
            ..VolumeMount::default()
        });
    }
    let mut env_vars: Vec<EnvVar> =
        env.into_iter().map(|(name, value)| EnvVar { name, value: Some(value), ..EnvVar::default() }).collect();

    // Secrets: one Secret per run, named as the pod; keys are the secrets' names.
    let secret = if req.secrets.is_empty() {
        None
    } else {
        let mut data = BTreeMap::new();
        let mut files = Vec::new();
        for s in &req.secrets {
            data.insert(s.name.clone(), s.value.expose().to_string());
            match &s.target {
                SecretTarget::Env(var) => env_vars.push(EnvVar {
                    name: var.clone(),
                    value_from: Some(EnvVarSource {
                        secret_key_ref: Some(SecretKeySelector {
                            name: name.clone(),
                            key: s.name.clone(),
                            optional: Some(false),
                        }),
                        ..EnvVarSource::default()
                    }),
                    ..EnvVar::default()
                }),
                SecretTarget::File(file) => files.push(KeyToPath {
                    key: s.name.clone(),
                    path: file.clone(),
                    mode: Some(0o400),
                    ..KeyToPath::default()
                }),
            }
        }
        if !files.is_empty() {
            env_vars.push(EnvVar {
                name: "PACELINE_SECRETS_DIR".into(),
                value: Some(SECRETS_DIR.into()),
                ..EnvVar::default()
            });
            volumes.push(Volume {
                name: "secrets".into(),
                secret: Some(SecretVolumeSource {
                    secret_name: Some(name.clone()),
                    items: Some(files),
                    default_mode: Some(0o400),
                    optional: Some(false),
                    ..SecretVolumeSource::default()
                }),
                ..Volume::default()
            });
            mounts.push(VolumeMount {
                name: "secrets".into(),
                mount_path: SECRETS_DIR.into(),
                read_only: Some(true),
                ..VolumeMount::default()
            });
        }
        Some(Secret {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(config.namespace.clone()),
                labels: Some(labels(config, req, job)),
                ..ObjectMeta::default()
            },
            string_data: Some(data),
            type_: Some("Opaque".into()),
            ..Secret::default()
        })
    };

    let container_ports: Vec<ContainerPort> = ports
        .iter()
        .map(|(port_name, &port)| ContainerPort {
            name: port_name_ok(port_name).then(|| port_name.clone()),
            container_port: i32::from(port),
            host_port: Some(i32::from(port)),
            protocol: Some("TCP".into()),
            ..ContainerPort::default()
        })
        .collect();

    let readiness_probe = spec.health_check.as_ref().map(|h| {
        let port_of =
            |p: &str| ports.get(p).map_or(IntOrString::String(p.to_string()), |&n| IntOrString::Int(n.into()));
        let mut probe = Probe {
            initial_delay_seconds: Some(h.initial_delay_secs.min(i32::MAX as u32) as i32),
            period_seconds: Some(h.interval_secs.min(i32::MAX as u32) as i32),
            timeout_seconds: Some(h.timeout_secs.min(i32::MAX as u32) as i32),
            failure_threshold: Some(h.max_consecutive_failures.min(i32::MAX as u32) as i32),
            ..Probe::default()
        };
        if let Some(http) = &h.http {
            probe.http_get =
                Some(HTTPGetAction { path: Some(http.path.clone()), port: port_of(&http.port), ..Default::default() });
        } else if let Some(tcp) = &h.tcp {
            probe.tcp_socket = Some(TCPSocketAction { port: port_of(&tcp.port), ..Default::default() });
        } else {
            let mut command = vec![h.command.clone()];
            command.extend(h.args.iter().cloned());
            probe.exec = Some(ExecAction { command: Some(command) });
        }
        probe
    });

    // The stop signal, where the cluster honours it (ContainerStopSignals);
    // SIGTERM, the default, is left unsaid.
    let lifecycle = (!spec.stop_signal.is_empty() && spec.stop_signal != "SIGTERM")
        .then(|| Lifecycle { stop_signal: Some(spec.stop_signal.clone()), ..Lifecycle::default() });

    let container = Container {
        name: CONTAINER.into(),
        image: Some(spec.image.clone().unwrap_or_else(|| config.default_image.clone())),
        // Exec form, as the agent runs it: the program and its arguments, no shell.
        command: (!spec.command.is_empty()).then(|| vec![spec.command.clone()]),
        args: (!spec.args.is_empty()).then(|| spec.args.clone()),
        env: Some(env_vars),
        ports: (!container_ports.is_empty()).then_some(container_ports),
        resources: Some(ResourceRequirements {
            requests: Some(quantities.clone()),
            limits: Some(quantities),
            ..ResourceRequirements::default()
        }),
        readiness_probe,
        lifecycle,
        volume_mounts: (!mounts.is_empty()).then_some(mounts),
        ..Container::default()
    };

    // The task's labels, as annotations (free-form values; keys that are
    // qualified names): how a job file speaks to tooling that reads pods,
    // e.g. kwok's `paceline.io/kwok-exit-code` in tests. Ours come last and win.
    let mut annotations: BTreeMap<String, String> =
        spec.labels.iter().filter(|(k, _)| qualified_name(k)).map(|(k, v)| (k.clone(), v.clone())).collect();
    annotations.extend([
        (RUN_ID.to_string(), req.run_id.clone()),
        (TASK_ID.to_string(), req.task_id.clone()),
        (JOB_ID.to_string(), job.to_string()),
        (RESOURCES.to_string(), serde_json::to_string(&r).unwrap_or_default()),
    ]);
    if !ports.is_empty() {
        annotations.insert(PORTS.into(), serde_json::to_string(ports).unwrap_or_default());
    }
    if !req.gpu.is_empty() {
        annotations.insert(GPU.into(), serde_json::to_string(&req.gpu).unwrap_or_default());
    }
    if let Some(gang) = &req.gang {
        annotations.insert(GANG_PEERS.into(), gang.peers_json.clone());
    }

    let tolerations: Vec<Toleration> = config
        .tolerate_taints
        .iter()
        .map(|k| Toleration { key: Some(k.clone()), operator: Some("Exists".into()), ..Toleration::default() })
        .collect();

    let pod = Pod {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: Some(config.namespace.clone()),
            labels: Some(labels(config, req, job)),
            annotations: Some(annotations),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            // Bound at creation: placement chose the node (decision 0050).
            node_name: Some(node.to_string()),
            scheduler_name: Some(config.scheduler_name.clone()),
            // Paceline restarts tasks itself (restart policy, new run, maybe elsewhere).
            restart_policy: Some("Never".into()),
            termination_grace_period_seconds: Some(i64::from(spec.kill_grace_period_secs)),
            containers: vec![container],
            volumes: (!volumes.is_empty()).then_some(volumes),
            tolerations: (!tolerations.is_empty()).then_some(tolerations),
            // Tasks get no API credentials unless their image brings some.
            automount_service_account_token: Some(false),
            enable_service_links: Some(false),
            ..PodSpec::default()
        }),
        status: None,
    };
    Ok((pod, secret))
}

fn labels(config: &KubernetesConfig, req: &LaunchRequest, job: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (MANAGED_BY.to_string(), MANAGED_BY_VALUE.to_string()),
        (CLUSTER.to_string(), config.cluster_id.clone()),
        (RUN_ID.to_string(), sanitize(&req.run_id, false)),
        (TASK_ID.to_string(), sanitize(&req.task_id, false)),
        (JOB_ID.to_string(), sanitize(job, false)),
    ])
}

/// An annotation (or label) key: `[prefix/]name`, the name 1–63 of
/// `[A-Za-z0-9._-]` starting and ending alphanumeric, the prefix a DNS subdomain.
fn qualified_name(key: &str) -> bool {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    let name_ok = !name.is_empty()
        && name.len() <= MAX_NAME
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric());
    let prefix_ok = prefix.is_none_or(|p| {
        !p.is_empty()
            && p.len() <= 253
            && p.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
            && p.starts_with(|c: char| c.is_ascii_alphanumeric())
            && p.ends_with(|c: char| c.is_ascii_alphanumeric())
    });
    name_ok && prefix_ok
}

/// A container port name must be an IANA service name: at most 15 of
/// `[a-z0-9-]`, a letter among them, no `--`, no `-` at either end.
fn port_name_ok(n: &str) -> bool {
    !n.is_empty()
        && n.len() <= 15
        && n.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && n.bytes().any(|b| b.is_ascii_lowercase())
        && !n.contains("--")
        && !n.starts_with('-')
        && !n.ends_with('-')
}

#[cfg(test)]
mod tests {
    use paceline_model::secret::Secret as Value;
    use paceline_model::task::{HealthCheck, HttpProbe, TaskSpec, VolumeSpec};
    use paceline_model::task_secret::LaunchSecret;

    use super::*;

    fn request() -> LaunchRequest {
        let spec = TaskSpec {
            command: "sh".into(),
            args: vec!["-c".into(), "echo hi".into()],
            env: BTreeMap::from([("A".into(), "1".into())]),
            resources: Resources { cpu_millis: 250, memory_mib: 64, disk_mib: 10, gpu_milli: 2000, ports: 1 },
            ports: vec!["http".into()],
            kill_grace_period_secs: 7,
            stop_signal: "SIGINT".into(),
            labels: BTreeMap::from([
                ("paceline.io/kwok-exit-code".into(), "0".into()),
                ("not a key".into(), "x".into()),
                (RUN_ID.into(), "forged".into()),
            ]),
            ..TaskSpec::default()
        };
        // Through serde: fields the request gains later take their defaults here.
        serde_json::from_value(serde_json::json!({
            "run_id": "web-1a2b-3-2",
            "task_id": "web-1a2b-3",
            "spec": spec,
            "env": {"PACELINE_JOB_ID": "web-1a2b"},
        }))
        .expect("a launch request")
    }

    #[test]
    fn names_are_kept_when_valid_and_hashed_when_not() {
        assert_eq!(pod_name("web-1a2b-3-2"), "web-1a2b-3-2");
        let odd = pod_name("Web_Job-0-1");
        assert!(odd.starts_with("web-job-0-1-") && odd.len() == "web-job-0-1-".len() + 8, "{odd}");
        assert_ne!(pod_name("Web_Job-0-1"), pod_name("web-job-0-1"));
        let long = "j".repeat(100) + "-0-1";
        let n = pod_name(&long);
        assert_eq!(n.len(), 63);
        assert_eq!(sanitize("a_b.c", false), "a_b.c");
        assert_eq!(sanitize("-x-", false).len(), "x".len() + 9);
        assert!(sanitize("___", false).starts_with('p'));
        assert_eq!(job_of("web-1a2b-3"), "web-1a2b");
        assert_eq!(task_of("web-1a2b-3-2"), "web-1a2b-3");
    }

    #[test]
    fn a_launch_becomes_a_bound_pod_with_requests_limits_env_ports_and_grace() {
        let ports = BTreeMap::from([("http".to_string(), 31_002u16)]);
        let (pod, secret) = build_pod(&KubernetesConfig::default(), &request(), "node-7", &ports).expect("pod");
        assert!(secret.is_none());
        let spec = pod.spec.as_ref().expect("spec");
        assert_eq!(spec.node_name.as_deref(), Some("node-7"));
        assert_eq!(spec.restart_policy.as_deref(), Some("Never"));
        assert_eq!(spec.termination_grace_period_seconds, Some(7));
        let c = &spec.containers[0];
        assert_eq!(c.image.as_deref(), Some("busybox:1.37"));
        assert_eq!(c.command, Some(vec!["sh".to_string()]));
        assert_eq!(c.args, Some(vec!["-c".to_string(), "echo hi".to_string()]));
        let res = c.resources.as_ref().expect("resources");
        let req = res.requests.as_ref().expect("requests");
        assert_eq!(req.get("cpu"), Some(&Quantity("250m".into())));
        assert_eq!(req.get("memory"), Some(&Quantity("64Mi".into())));
        assert_eq!(req.get("ephemeral-storage"), Some(&Quantity("10Mi".into())));
        assert_eq!(req.get(GPU_RESOURCE), Some(&Quantity("2".into())));
        assert_eq!(res.limits, res.requests);
        let env: BTreeMap<_, _> =
            c.env.iter().flatten().map(|e| (e.name.as_str(), e.value.as_deref().unwrap_or(""))).collect();
        assert_eq!(env.get("A"), Some(&"1"));
        assert_eq!(env.get("PORT_HTTP"), Some(&"31002"));
        assert_eq!(env.get("PACELINE_RUN_ID"), Some(&"web-1a2b-3-2"));
        assert_eq!(env.get("PACELINE_JOB_ID"), Some(&"web-1a2b"));
        let port = &c.ports.as_ref().expect("ports")[0];
        assert_eq!((port.container_port, port.host_port, port.name.as_deref()), (31_002, Some(31_002), Some("http")));
        assert_eq!(c.lifecycle.as_ref().and_then(|l| l.stop_signal.as_deref()), Some("SIGINT"));
        let labels = pod.metadata.labels.as_ref().expect("labels");
        assert_eq!(labels.get(MANAGED_BY).map(String::as_str), Some("paceline"));
        assert_eq!(labels.get(JOB_ID).map(String::as_str), Some("web-1a2b"));
        assert_eq!(labels.get(CLUSTER).map(String::as_str), Some("paceline"), "the cluster's label");
        assert!(is_ours(&KubernetesConfig::default(), &pod));
        let other = KubernetesConfig { cluster_id: "other".into(), ..KubernetesConfig::default() };
        assert!(!is_ours(&other, &pod), "another Paceline cluster's pod is not ours");
        let ann = pod.metadata.annotations.as_ref().expect("annotations");
        assert_eq!(ann.get("paceline.io/kwok-exit-code").map(String::as_str), Some("0"));
        assert!(!ann.contains_key("not a key"));
        let meta = run_meta(&pod).expect("meta");
        assert_eq!(meta.run_id, "web-1a2b-3-2");
        assert_eq!(meta.task_id, "web-1a2b-3");
        assert_eq!(meta.resources, request().spec.resources);
        assert_eq!(meta.ports, ports);
    }

    #[test]
    fn a_gang_member_gets_its_peers_file_through_the_downward_api() {
        let mut req = request();
        req.gang = Some(paceline_model::gang::GangLaunch {
            ports: BTreeMap::from([("http".to_string(), 31_500u16)]),
            peers_json: "[{\"rank\":0}]".into(),
        });
        let (pod, _) = build_pod(&KubernetesConfig::default(), &req, "n", &BTreeMap::new()).expect("pod");
        let ann = pod.metadata.annotations.as_ref().expect("annotations");
        assert_eq!(ann.get(GANG_PEERS).map(String::as_str), Some("[{\"rank\":0}]"));
        let spec = pod.spec.expect("spec");
        let env = spec.containers[0].env.clone().unwrap_or_default();
        let file = env.iter().find(|e| e.name == "PACELINE_GANG_PEERS_FILE").and_then(|e| e.value.clone());
        assert_eq!(file.as_deref(), Some("/var/run/paceline/gang/paceline-gang.json"));
        assert!(spec.volumes.unwrap_or_default().iter().any(|v| v.downward_api.is_some()));
    }

    #[test]
    fn secrets_become_a_secret_of_the_pods_name() {
        let mut req = request();
        req.secrets = vec![
            LaunchSecret {
                name: "db-pass".into(),
                target: SecretTarget::Env("DB_PASS".into()),
                value: Value::new("s3"),
            },
            LaunchSecret {
                name: "tls-key".into(),
                target: SecretTarget::File("key.pem".into()),
                value: Value::new("k"),
            },
        ];
        let (pod, secret) = build_pod(&KubernetesConfig::default(), &req, "n", &BTreeMap::new()).expect("pod");
        let secret = secret.expect("secret");
        assert_eq!(secret.metadata.name.as_deref(), Some("web-1a2b-3-2"));
        assert_eq!(secret.string_data.as_ref().and_then(|d| d.get("db-pass")).map(String::as_str), Some("s3"));
        let c = &pod.spec.as_ref().expect("spec").containers[0];
        let env = c.env.as_ref().expect("env");
        let db = env.iter().find(|e| e.name == "DB_PASS").expect("DB_PASS");
        assert!(db.value.is_none(), "a secret's value is never written into the pod");
        assert!(env.iter().any(|e| e.name == "PACELINE_SECRETS_DIR"));
        let json = serde_json::to_string(&pod).expect("json");
        assert!(!json.contains("s3\""), "{json}");
    }

    #[test]
    fn shares_of_a_gpu_are_refused_health_checks_are_readiness_probes_and_volumes_host_paths() {
        let mut req = request();
        req.spec.resources.gpu_milli = 500;
        let e = build_pod(&KubernetesConfig::default(), &req, "n", &BTreeMap::new()).expect_err("share");
        assert!(e.contains("share of a GPU"), "{e}");
        let mut req = request();
        req.spec.health_check = Some(HealthCheck {
            command: String::new(),
            args: Vec::new(),
            http: Some(HttpProbe { port: "http".into(), path: "/ok".into() }),
            tcp: None,
            initial_delay_secs: 1,
            interval_secs: 2,
            timeout_secs: 1,
            max_consecutive_failures: 3,
        });
        req.spec.volume = Some(VolumeSpec { name: "data".into(), size_mib: 10 });
        let ports = BTreeMap::from([("http".to_string(), 31_000u16)]);
        let (pod, _) = build_pod(&KubernetesConfig::default(), &req, "n", &ports).expect("pod");
        let spec = pod.spec.expect("spec");
        let probe = spec.containers[0].readiness_probe.as_ref().expect("probe");
        let http = probe.http_get.as_ref().expect("http");
        assert_eq!((http.path.as_deref(), &http.port), (Some("/ok"), &IntOrString::Int(31_000)));
        assert_eq!(probe.failure_threshold, Some(3));
        let vol = &spec.volumes.expect("volumes")[0];
        assert_eq!(vol.host_path.as_ref().map(|h| h.path.as_str()), Some("/var/lib/paceline/volumes/web-1a2b-3/data"));
    }
}

//! [`KubernetesConfig`]: where the cluster is, where pods go, and the
//! provider's timings.

use std::path::PathBuf;
use std::time::Duration;

/// The environment variable naming the kubeconfig when the setting does not.
pub const KUBECONFIG_ENV: &str = "PACELINE_KUBECONFIG";

/// Settings of the `kubernetes` provider.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KubernetesConfig {
    /// The kubeconfig to use; `None`: `PACELINE_KUBECONFIG`, else the
    /// in-cluster ServiceAccount (a Paceline that runs in a pod).
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context; `None`: its current context.
    pub context: Option<String>,
    /// The namespace task pods (and their Secrets) are created in.
    pub namespace: String,
    /// The image of tasks whose spec names none (plain commands).
    pub default_image: String,
    /// `spec.schedulerName` of task pods: which scheduler placed them (they
    /// are created bound, so no scheduler acts on it).
    pub scheduler_name: String,
    /// Only nodes matching this label selector are hosts (`None`: all).
    pub node_selector: Option<String>,
    /// Taint keys Paceline's pods tolerate (every effect, every value); a
    /// node with another NoSchedule or NoExecute taint offers nothing.
    pub tolerate_taints: Vec<String>,
    /// The disk (MiB) of a node that reports no `ephemeral-storage` (kwok's,
    /// some kubelets'): Kubernetes does not limit what it does not count, so
    /// neither does Paceline, beyond this.
    pub unreported_disk_mib: u64,
    /// Host ports handed to tasks' named ports, first and last.
    pub port_range: (u16, u16),
    /// How often hosts whose node is Ready are reported alive.
    pub heartbeat_interval: Duration,
    /// An unacknowledged run update is sent again after this long.
    pub redeliver_after: Duration,
    /// While the API server cannot be reached, hosts are still reported
    /// alive for this long (a restarting API server must not lose every
    /// run); after it, they stop and the host manager loses them.
    pub api_outage_grace: Duration,
    /// A finished pod is deleted this long after its end was acknowledged
    /// (its log can be read until then).
    pub keep_finished_pods: Duration,
    /// Pods created (or deleted) at once by one launch (or clean-up).
    pub max_concurrent_calls: usize,
    /// Limit of one API call (watches excepted).
    pub call_timeout: Duration,
}

impl Default for KubernetesConfig {
    fn default() -> Self {
        KubernetesConfig {
            kubeconfig: None,
            context: None,
            namespace: "paceline-tasks".into(),
            default_image: "busybox:1.37".into(),
            scheduler_name: "paceline".into(),
            node_selector: None,
            tolerate_taints: Vec::new(),
            unreported_disk_mib: 1 << 20,
            port_range: (31_000, 32_999),
            heartbeat_interval: Duration::from_secs(3),
            redeliver_after: Duration::from_secs(10),
            api_outage_grace: Duration::from_secs(300),
            keep_finished_pods: Duration::from_secs(300),
            max_concurrent_calls: 32,
            call_timeout: Duration::from_secs(30),
        }
    }
}

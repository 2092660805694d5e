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
    /// This Paceline cluster's id, the value of every pod's
    /// `paceline.io/cluster` label: only pods with it are adopted, watched
    /// and reported as runs; pods of other Paceline clusters sharing the
    /// namespace or the nodes are counted as any other scheduler's. A label
    /// value (1–63 of `[A-Za-z0-9._-]`, alphanumeric at both ends). The
    /// server derives it from its store when the config names none.
    pub cluster_id: String,
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
    /// API writes (pod and Secret creates, Bindings, deletions) in flight
    /// at once, all launches together; a write refused with 429 (API
    /// Priority and Fairness) is tried again after a pause. Unbounded, a
    /// burst of launches overflowed the API server's queues for Paceline's
    /// ServiceAccount. 64: what the limit clients of `bench kubernetes` keep.
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
            cluster_id: "paceline".into(),
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
            max_concurrent_calls: 64,
            call_timeout: Duration::from_secs(30),
        }
    }
}

/// The name under which the server records the cluster id it generated
/// (`Store::put_provider_id`), so that it survives restarts.
pub const CLUSTER_ID_KEY: &str = "kubernetes";

/// Whether `id` can be a label value (and so a cluster id).
pub fn valid_cluster_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 63
        && id.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && id.starts_with(|c: char| c.is_ascii_alphanumeric())
        && id.ends_with(|c: char| c.is_ascii_alphanumeric())
}

/// A new cluster id, `pl-` and 16 random hex digits (from the OS's random
/// source; where it cannot be read, from the time and the process id, which
/// still differ between two clusters started apart).
pub fn generate_cluster_id() -> String {
    use std::io::Read;
    let mut bytes = [0u8; 8];
    let random = std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut bytes)).is_ok();
    if !random {
        let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        bytes = ((t as u64) ^ u64::from(std::process::id()).rotate_left(32)).to_le_bytes();
    }
    format!("pl-{}", hex::encode(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_ids_are_label_values() {
        let id = generate_cluster_id();
        assert!(valid_cluster_id(&id), "{id}");
        assert_ne!(generate_cluster_id(), id);
        assert!(valid_cluster_id(&KubernetesConfig::default().cluster_id));
        for bad in ["", "-a", "a-", "a/b", "a b", &"x".repeat(64)] {
            assert!(!valid_cluster_id(bad), "{bad:?}");
        }
    }
}

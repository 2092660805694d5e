//! [`KubernetesError`]: what the `kubernetes` provider could not do, each
//! naming the setting, node or pod at fault.

use std::path::PathBuf;

/// What went wrong reaching or reading the cluster.
#[derive(Debug, thiserror::Error)]
pub enum KubernetesError {
    /// The kubeconfig file could not be read or used.
    #[error("kubeconfig {path}: {message}")]
    Kubeconfig {
        /// The file.
        path: PathBuf,
        /// What was wrong with it.
        message: String,
    },
    /// No kubeconfig was named (setting or `PACELINE_KUBECONFIG`) and the
    /// process does not run in a pod with a ServiceAccount token.
    #[error(
        "no kubeconfig: set `kubeconfig` in the hosts section or PACELINE_KUBECONFIG, or run in a pod \
         (in-cluster config: {0})"
    )]
    NoConfig(String),
    /// The cluster id cannot be a label value.
    #[error("kubernetes cluster_id `{0}`: not a label value (1-63 of A-Z a-z 0-9 . _ -, alphanumeric at both ends)")]
    ClusterId(String),
    /// The client could not be built from the configuration.
    #[error("kubernetes client: {0}")]
    Client(String),
    /// The API server refused or failed a call.
    #[error("kubernetes API: {what}: {message}")]
    Api {
        /// The call (`list nodes`, `create pod paceline-tasks/x`, …).
        what: String,
        /// What the server (or the connection) said.
        message: String,
    },
}

/// A quantity (`500m`, `4Gi`) that is not one.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("`{value}` is not a Kubernetes quantity: {reason}")]
pub struct QuantityError {
    /// The text.
    pub value: String,
    /// Why.
    pub reason: &'static str,
}

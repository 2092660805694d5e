//! Paceline's `kubernetes` host provider: Kubernetes nodes are the hosts,
//! a run is a pod bound to the node placement chose (decision 0050,
//! docs/kubernetes.md).
//!
//! **Owns**: the translation between the host manager's provider boundary
//! ([`paceline_hostmgr::Provider`]) and the Kubernetes API: nodes → host
//! registrations (allocatable minus what pods Paceline did not create hold;
//! labels as attributes; untolerated taints offer nothing; not Ready or
//! deleted → disconnected; cordoned → a drain), launches → pods created
//! with `spec.nodeName` (and a Secret per run with secrets), kills → pod
//! deletions with the grace period, pod phases → ordered run updates with
//! per-run seqs kept until acknowledged, logs → the pod log API, and a
//! restart → the pods labelled `app.kubernetes.io/managed-by=paceline`
//! reported on their hosts' registrations.
//!
//! **Receives**: the provider calls of the host manager, and three watches
//! (nodes; Paceline's pods in the task namespace; every other bound,
//! unfinished pod).
//!
//! **Must not touch**: pods and Secrets it did not create (it only counts
//! what other pods request), nodes (it never cordons, taints or labels
//! them), and anything of the host manager's (leases, allocation,
//! maintenance states: the manager decides from the events).
//!
//! A crate of its own, so that `kube` and `k8s-openapi` are compiled only
//! where the provider is used, not by every crate that depends on the host
//! manager.
//!
//! # Layout
//! - [`config`]: [`KubernetesConfig`]; [`error`]: [`KubernetesError`].
//! - [`nodes`]: Node → [`nodes::NodeView`], quantities, what other pods hold.
//! - [`pods`]: LaunchRequest → Pod (and Secret), names and labels.
//! - [`status`]: pod phase and container state → run state.
//! - `provider`: [`KubernetesProvider`]: connecting and the provider calls.
//! - `state`: what it knows (nodes, runs, other pods) and what it reports;
//!   `runs`: the runs, by id and indexed by host.
//! - `watch`: the three watches and their events.
//! - [`plane`]: what `deploy/kubernetes/kubernetes.sh env` prints (for
//!   tests and benchmarks).
//! - [`podsched`]: the pod scheduler (decision 0055): pods Paceline did not
//!   create, admitted as jobs and bound through the Binding API;
//!   `external`: the runs that bind them.

pub mod config;
pub mod error;
mod external;
pub mod nodes;
pub mod plane;
pub mod pods;
pub mod podsched;
mod provider;
mod runs;
mod state;
pub mod status;
#[cfg(test)]
mod tests;
mod watch;

pub use config::{CLUSTER_ID_KEY, KUBECONFIG_ENV, KubernetesConfig, generate_cluster_id, valid_cluster_id};
pub use error::KubernetesError;
pub use podsched::{PodJobs, PodRef, PodScheduler, PodSchedulerConfig, Submit};
pub use provider::{KubernetesProvider, StopGuard};

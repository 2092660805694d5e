//! # paceline-server
//!
//! The roles assembled into processes. The `host/` role crates each own one
//! part of a scheduler; this crate is the only place they are put together,
//! so that the binary, the benchmarks, the simulator's runner and the tests
//! all run the same assembly.
//!
//! - **Owns**: the server's configuration file ([`ServerConfig`]),
//!   the all-in-one server ([`Server`]), the host-manager-only
//!   process ([`HostServer`]) and the placement-only process
//!   ([`placement_process`]), the in-process assembly of the roles
//!   and the host-event fan-out ([`cluster`]), the adapters between the
//!   plugin registry and the roles ([`wiring`]), high availability
//!   ([`ha`], [`leader`]), the Prometheus registry and its collectors
//!   ([`metrics`]), the pod scheduler's port onto the job manager
//!   ([`kubernetes_pods`]). It meters the store (`paceline_storage::metered`) and
//!   starts the job manager's retention of finished jobs on the leader.
//! - **Receives**: a parsed configuration, listeners, a store.
//! - **Hands on**: running processes with handles to stop them; every
//!   decision is made inside the role crates.
//! - **Must not**: parse command lines, print to the terminal or decide
//!   anything a role owns (admission, placement, lifecycles, launches).
//!   The binary (`host/paceline`) does flags, commands and printing.

pub mod cluster;
pub mod config;
mod error;
pub mod ha;
mod host_server;
mod hosts;
pub mod kubernetes_pods;
pub mod leader;
mod listen;
pub mod metrics;
pub mod placement_process;
pub mod server;
mod shutdown;
pub mod startup;
pub mod wiring;

pub use config::{
    AuditConfig, HostsConfig, PodSchedulerSettings, ServerConfig, TlsConfig, check_api_exposure, resolve_token,
};
pub use error::ServerError;
pub use host_server::HostServer;
pub use listen::ApiSocket;
pub use server::Server;
pub use startup::{DEFAULT_POOL, default_member_id, open_registry, open_store};

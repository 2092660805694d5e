//! Why a server could not start.

use std::net::SocketAddr;

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The store.
    #[error("storage: {0}")]
    Storage(#[from] paceline_storage::StoreError),
    /// The plugin runtime or registry.
    #[error("plugins: {0}")]
    Plugin(#[from] paceline_plugin::PluginError),
    /// The host manager.
    #[error("hosts: {0}")]
    Hosts(#[from] paceline_hostmgr::HostError),
    /// Joining the roles.
    #[error("{0}")]
    Assemble(#[from] crate::cluster::AssembleError),
    /// A listen address.
    #[error("listening on {addr}: {source}")]
    Listen {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// Anything else, said plainly.
    #[error("{0}")]
    Other(String),
}

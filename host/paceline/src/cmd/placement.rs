//! `paceline server --roles placement`: the placement-only process
//! (`paceline_server::placement_process`) started, its addresses printed,
//! run until a stop signal.

use std::path::PathBuf;
use std::process::ExitCode;

use paceline_server::ServerConfig;
use paceline_server::placement_process::{PlacementOptions, PlacementProcess};

use super::process::{runtime, until_signal};

/// `core`: the core's API addresses; `None` with a zookeeper membership:
/// the leader of `jobmgr` is looked up there each time a connection is needed.
pub fn run(
    config: ServerConfig,
    core: Option<String>,
    token: Option<paceline_model::secret::Secret>,
    ca_cert: Option<PathBuf>,
) -> anyhow::Result<ExitCode> {
    runtime()?.block_on(async move {
        let process = PlacementProcess::start(config, PlacementOptions { core, token, ca_cert }).await?;
        if let Some(bound) = process.metrics_addr() {
            println!("paceline server: placement engine metrics on http://{bound}/metrics (no token)");
        }
        match process.core() {
            None => println!("paceline server: placement engine for the core leading in ZooKeeper"),
            Some(core) => println!("paceline server: placement engine for the core at {core}"),
        }
        process.run(until_signal()).await?;
        anyhow::Ok(())
    })?;
    Ok(ExitCode::SUCCESS)
}

//! `paceline dev --sim-hosts N`'s server, started in the test process: the
//! same [`ServerConfig`] `cmd/server.rs` builds (simulated hosts of 8 cores
//! and 16 GiB in two zones, an open API unless a tokens file is given, the
//! `/default` pool, 5 s host heartbeat timeout), served by
//! [`paceline_server::Server`] on a runtime of its own so that tests may
//! block (a browser, raw HTTP) while the server runs. Used by `audit` and
//! `web_ui`.
#![allow(dead_code)]

use std::future::Future;
use std::path::{Path, PathBuf};

use paceline_proto::bearer::Bearer;
use paceline_server::{HostsConfig, Server, ServerConfig};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

/// A gRPC channel presenting a token (or none).
pub type Client = InterceptedService<Channel, Bearer>;

/// `paceline dev --sim-hosts <sim_hosts> --data-dir <data_dir>`'s configuration
/// (`cmd/server.rs`, `dev`), its API on any free loopback port.
pub fn dev_config(data_dir: &Path, sim_hosts: usize) -> ServerConfig {
    ServerConfig {
        data_dir: data_dir.to_path_buf(),
        api_listen: "127.0.0.1:0".parse().expect("address"),
        agent_listen: "127.0.0.1:0".parse().expect("address"),
        hosts: HostsConfig::Sim {
            hosts: sim_hosts,
            resources: paceline_model::Resources::new(8_000, 16_384, 100_000, 0),
            zones: 2,
        },
        heartbeat_timeout_ms: 5_000,
        agent_heartbeat_ms: 1_000,
        ..ServerConfig::default()
    }
}

/// A server in this process; shut down when dropped.
pub struct Dev {
    runtime: Option<tokio::runtime::Runtime>,
    server: Option<Server>,
    /// The API's port on 127.0.0.1.
    pub api: u16,
    /// Its data directory.
    pub data_dir: PathBuf,
}

impl Dev {
    /// `paceline dev --sim-hosts <sim_hosts>` with data in `dir/dev` and the
    /// tokens file `tokens`, if any.
    pub fn start(dir: &Path, sim_hosts: usize, tokens: Option<&Path>) -> Dev {
        let mut config = dev_config(&dir.join("dev"), sim_hosts);
        config.tokens_file = tokens.map(Path::to_path_buf);
        Dev::with(config)
    }

    /// As [`Dev::start`] (no tokens), its API on port `api` of 127.0.0.1: a
    /// restart on the data and the address of a server stopped before.
    pub fn start_on(dir: &Path, sim_hosts: usize, api: u16) -> Dev {
        let mut config = dev_config(&dir.join("dev"), sim_hosts);
        config.api_listen = std::net::SocketAddr::from(([127, 0, 0, 1], api));
        Dev::with(config)
    }

    /// A server of this configuration; returns once its API listens.
    pub fn with(config: ServerConfig) -> Dev {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a runtime for the server");
        let data_dir = config.data_dir.clone();
        let server = runtime.block_on(Server::start(config)).expect("the server starts");
        let api = server.api_addr.port();
        Dev { runtime: Some(runtime), server: Some(server), api, data_dir }
    }

    /// Runs `f` on the server's runtime (gRPC calls).
    pub fn block_on<F: Future>(&self, f: F) -> F::Output {
        self.runtime.as_ref().expect("running").block_on(f)
    }

    /// A channel to the API presenting `token` (none: an anonymous caller).
    pub fn client(&self, token: Option<&str>) -> Client {
        let channel = self.block_on(async {
            tonic::transport::Endpoint::from_shared(format!("http://127.0.0.1:{}", self.api))
                .expect("endpoint")
                .connect()
                .await
                .expect("connect")
        });
        InterceptedService::new(channel, Bearer::new(token).expect("token"))
    }

    /// The server itself (its roles, for checks the API does not answer).
    pub fn server(&self) -> &Server {
        self.server.as_ref().expect("running")
    }
}

impl Drop for Dev {
    fn drop(&mut self) {
        if let (Some(runtime), Some(server)) = (self.runtime.take(), self.server.take()) {
            runtime.block_on(server.shutdown());
            runtime.shutdown_timeout(std::time::Duration::from_secs(5));
        }
    }
}

/// A tokens file at `path` admitting each (name, role, pools) principal;
/// their tokens, in order. Written with the functions `paceline auth token`
/// uses.
pub fn tokens_file(path: &Path, principals: &[(&str, paceline_api::auth::Role, &[&str])]) -> Vec<String> {
    let mut entries = String::new();
    let mut tokens = Vec::new();
    for (name, role, pools) in principals {
        let token = paceline_api::auth::new_token().expect("a token");
        let pools: Vec<String> = pools.iter().map(|p| p.to_string()).collect();
        entries.push_str(&paceline_api::auth::tokens_file_entry(name, *role, &pools, &token));
        tokens.push(token);
    }
    std::fs::write(path, format!("version: 1\nprincipals:\n{entries}")).expect("write the tokens file");
    tokens
}

/// Polls `f` every 200 ms until it returns true; panics naming `what` after `secs`.
pub fn eventually(secs: u64, what: &str, mut f: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    while std::time::Instant::now() < deadline {
        if f() {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    panic!("timed out: {what}");
}

//! `paceline host …`: the host inventory and maintenance (drain, down, up).

use clap::{Args, Subcommand};
use paceline_proto::v1 as pb;
use pb::host_service_client::HostServiceClient;

use super::output::{self, Table, emit, fields};
use super::{ClientOpts, RpcError, block_on, connect, render};

/// `paceline host`.
#[derive(Debug, Args)]
pub struct HostArgs {
    #[command(flatten)]
    opts: ClientOpts,
    #[command(subcommand)]
    cmd: HostCommand,
}

/// Host commands.
#[derive(Debug, Subcommand)]
pub enum HostCommand {
    /// Every host with its resources and state.
    List,
    /// Show one host.
    Get {
        /// Host name.
        name: String,
    },
    /// Drain a host: no new tasks, and its tasks move away within each job's
    /// max unavailable.
    ///
    /// A job's instance counts as unavailable until it runs and passes its
    /// health check, whatever took it down (this drain, an update, a crash):
    /// the next one leaves only once the job is back under its
    /// `max_unavailable_instances`. The host stays DRAINING until its last
    /// task has left.
    Drain {
        /// Host name.
        name: String,
        /// Mark the host DOWN once drained.
        #[arg(long)]
        then_down: bool,
    },
    /// Mark a drained host DOWN.
    Down {
        /// Host name.
        name: String,
    },
    /// Return a host to service.
    Up {
        /// Host name.
        name: String,
    },
}

/// Runs a host command.
pub fn run(args: HostArgs) -> anyhow::Result<std::process::ExitCode> {
    block_on(exec(args.opts, args.cmd))
}

async fn exec(opts: ClientOpts, cmd: HostCommand) -> anyhow::Result<()> {
    let out = opts.output;
    let mut client = HostServiceClient::new(connect(&opts).await?);
    let host = match cmd {
        HostCommand::List => {
            let hosts = client.list_hosts(pb::ListHostsRequest {}).await.map_err(RpcError)?.into_inner().hosts;
            let value = serde_json::Value::Array(hosts.iter().map(render::host).collect());
            return emit(out, &value, || host_table(&hosts));
        }
        HostCommand::Get { name } => {
            client.get_host(pb::GetHostRequest { hostname: name }).await.map_err(RpcError)?.into_inner().host
        }
        HostCommand::Drain { name, then_down } => {
            let r = pb::DrainHostRequest { hostname: name, then_down };
            client.drain_host(r).await.map_err(RpcError)?.into_inner().host
        }
        HostCommand::Down { name } => {
            client.down_host(pb::HostRef { hostname: name }).await.map_err(RpcError)?.into_inner().host
        }
        HostCommand::Up { name } => {
            client.up_host(pb::HostRef { hostname: name }).await.map_err(RpcError)?.into_inner().host
        }
    };
    let host = host.ok_or_else(|| anyhow::anyhow!("the server answered with no host"))?;
    emit(out, &render::host(&host), || host_fields(&host))
}

/// Resources as `cpu/memory/disk/gpus` (GPUs with shares as decimals).
fn res(r: Option<&pb::Resources>) -> String {
    let r = r.cloned().unwrap_or_default();
    let milli = if r.gpu_milli > 0 { r.gpu_milli } else { r.gpus.saturating_mul(1000) };
    let gpus = if milli % 1000 == 0 { (milli / 1000).to_string() } else { format!("{}", milli as f64 / 1000.0) };
    format!("{}/{}/{}/{gpus}", r.cpu_millis, r.memory_mib, r.disk_mib)
}

fn host_table(hosts: &[pb::Host]) -> String {
    let mut t = Table::new(&["HOST", "STATE", "REACHABLE", "PROVIDER", "TOTAL", "ALLOCATED", "AVAILABLE", "RUNS"]);
    for h in hosts {
        t.row(vec![
            h.hostname.clone(),
            render::host_state(h.state),
            if h.reachable { "yes" } else { "no" }.into(),
            output::or_dash(&h.provider),
            res(h.total.as_ref()),
            res(h.allocated.as_ref()),
            res(h.available.as_ref()),
            h.runs.to_string(),
        ]);
    }
    format!("{}resources are cpu millicores/memory MiB/disk MiB/gpus\n", t.render())
}

fn host_fields(h: &pb::Host) -> String {
    fields(&[
        ("host", h.hostname.clone()),
        ("state", render::host_state(h.state)),
        ("reachable", h.reachable.to_string()),
        ("provider", output::or_dash(&h.provider)),
        ("total", res(h.total.as_ref())),
        ("allocated", res(h.allocated.as_ref())),
        ("available", res(h.available.as_ref())),
        ("attributes", output::pairs(h.attributes.iter().collect::<std::collections::BTreeMap<_, _>>())),
        ("runs", h.runs.to_string()),
        ("last heartbeat", output::time(h.last_heartbeat_ms)),
        ("(resources)", "cpu millicores/memory MiB/disk MiB/gpus".into()),
    ])
}

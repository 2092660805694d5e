//! `paceline pool …`: the resource pool tree.
//!
//! A pool file is one entry of the model's pool YAML
//! (`paceline_model::pool::PoolEntry`, see docs/resmgr.md), with `path`
//! optional since the command names it; a whole `pools:` file is accepted
//! too, and the entry with the command's path is taken from it.

use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use paceline_api::pools::pool_spec_pb;
use paceline_model::pool::{PoolEntry, PoolFile, PoolSpec, UNLIMITED};
use paceline_proto::v1 as pb;
use pb::pool_service_client::PoolServiceClient;
use serde_json::json;

use super::output::{Table, emit, fields};
use super::{ClientOpts, RpcError, bad_input, block_on, connect, render};

/// `paceline pool`.
#[derive(Debug, Args)]
pub struct PoolArgs {
    #[command(flatten)]
    opts: ClientOpts,
    #[command(subcommand)]
    cmd: PoolCommand,
}

/// Pool commands.
#[derive(Debug, Subcommand)]
pub enum PoolCommand {
    /// Create a pool under an existing parent.
    Create {
        /// Pool path, such as /team/batch.
        path: String,
        /// The pool spec (YAML: reservation, limit, share, type, slack_limit, queue_policy).
        file: PathBuf,
    },
    /// Show one pool with its entitlement, allocation and demand.
    Get {
        /// Pool path.
        path: String,
    },
    /// Replace a pool's spec.
    Update {
        /// Pool path.
        path: String,
        /// The new pool spec (YAML).
        file: PathBuf,
    },
    /// Delete an empty leaf pool.
    Delete {
        /// Pool path.
        path: String,
    },
    /// The pool tree with entitlement, allocation and demand.
    List,
}

/// Runs a pool command.
pub fn run(args: PoolArgs) -> anyhow::Result<std::process::ExitCode> {
    block_on(exec(args.opts, args.cmd))
}

fn check_path(path: &str) -> anyhow::Result<()> {
    if path.starts_with('/') { Ok(()) } else { Err(bad_input(format!("pool path {path:?} must start with /"))) }
}

/// Reads a pool spec for `path` from a file and checks what one spec can get
/// wrong on its own (the server checks it against the tree).
pub fn load_pool(path: &str, file: &Path) -> anyhow::Result<PoolSpec> {
    let bytes = super::read_file(file)?;
    let invalid = |e: &dyn std::fmt::Display| bad_input(format!("{}: invalid pool spec: {e}", file.display()));
    let mut doc: serde_yaml::Value = serde_yaml::from_slice(&bytes).map_err(|e| invalid(&e))?;
    let empty = doc.is_null();
    let entry = match doc.as_mapping_mut() {
        Some(m) if m.contains_key("pools") => {
            let pools: PoolFile = serde_yaml::from_slice(&bytes).map_err(|e| invalid(&e))?;
            let have: Vec<String> = pools.pools.iter().map(|p| p.path.clone()).collect();
            pools
                .pools
                .into_iter()
                .find(|p| p.path == path)
                .ok_or_else(|| invalid(&format!("no pool {path} in this file (it has {})", have.join(", "))))?
        }
        Some(m) => {
            let named = m.get("path").and_then(serde_yaml::Value::as_str).map(str::to_owned);
            if let Some(p) = &named
                && p != path
            {
                return Err(invalid(&format!("`path` is {p}, but the command names {path}")));
            }
            if named.is_some() || flow_style(&bytes) {
                m.insert("path".into(), path.into());
                serde_yaml::from_value::<PoolEntry>(doc).map_err(|e| invalid(&e))?
            } else {
                // Parsed from text rather than from `doc` so errors keep the
                // field path and line; the path goes last so lines stay true.
                let mut text = String::from_utf8_lossy(&bytes).into_owned();
                text.push_str(&format!("\npath: {}\n", serde_json::to_string(path)?));
                serde_yaml::from_str::<PoolEntry>(&text).map_err(|e| invalid(&e))?
            }
        }
        // An empty file is a pool with every default.
        None if empty => PoolEntry { path: path.to_owned(), ..PoolEntry::default() },
        None => return Err(invalid(&"expected a mapping of pool fields")),
    };
    let spec = entry.spec();
    spec.check().map_err(|e| invalid(&e))?;
    Ok(spec)
}

/// Whether a YAML mapping is written `{ … }`, where a line cannot be appended.
fn flow_style(bytes: &[u8]) -> bool {
    let text = String::from_utf8_lossy(bytes);
    let first = text.lines().map(str::trim).find(|l| !l.is_empty() && !l.starts_with('#') && *l != "---");
    first.is_some_and(|l| l.starts_with('{'))
}

async fn exec(opts: ClientOpts, cmd: PoolCommand) -> anyhow::Result<()> {
    let out = opts.output;
    let spec = match &cmd {
        PoolCommand::Create { path, file } | PoolCommand::Update { path, file } => {
            check_path(path)?;
            Some(pool_spec_pb(&load_pool(path, file)?))
        }
        PoolCommand::Get { path } | PoolCommand::Delete { path } => {
            check_path(path)?;
            None
        }
        PoolCommand::List => None,
    };
    let mut client = PoolServiceClient::new(connect(&opts).await?);
    let done =
        |path: &str, what: &str| emit(out, &json!({"path": path, "result": what}), || format!("{path}: {what}\n"));
    match cmd {
        PoolCommand::Create { path, .. } => {
            client.create_pool(pb::CreatePoolRequest { path: path.clone(), spec }).await.map_err(RpcError)?;
            done(&path, "created")
        }
        PoolCommand::Update { path, .. } => {
            client.update_pool(pb::UpdatePoolRequest { path: path.clone(), spec }).await.map_err(RpcError)?;
            done(&path, "updated")
        }
        PoolCommand::Delete { path } => {
            client.delete_pool(pb::DeletePoolRequest { path: path.clone() }).await.map_err(RpcError)?;
            done(&path, "deleted")
        }
        PoolCommand::Get { path } => {
            let pool = client.get_pool(pb::GetPoolRequest { path: path.clone() }).await.map_err(RpcError)?;
            let pool =
                pool.into_inner().pool.ok_or_else(|| anyhow::anyhow!("the server answered with no pool for {path}"))?;
            emit(out, &render::pool(&pool), || pool_fields(&pool))
        }
        PoolCommand::List => {
            let resp = client.list_pools(pb::ListPoolsRequest {}).await.map_err(RpcError)?.into_inner();
            let value = json!({
                "capacity": render::resources(resp.capacity.as_ref()),
                "pools": resp.pools.iter().map(render::pool).collect::<Vec<_>>(),
            });
            emit(out, &value, || pool_tree(&resp))
        }
    }
}

/// An amount, `-` for unlimited.
fn amount(v: u64) -> String {
    if v == UNLIMITED { "-".into() } else { v.to_string() }
}

/// Per-kind amounts as `cpu/memory/disk/gpu`.
fn kinds(p: Option<&pb::PerKind>) -> String {
    let p = p.cloned().unwrap_or_default();
    [p.cpu, p.memory, p.disk, p.gpu].map(amount).join("/")
}

/// Per-kind limits: on the wire an unset (0) kind is unlimited, shown `-`.
fn limits(p: Option<&pb::PerKind>) -> String {
    let p = p.cloned().unwrap_or_default();
    [p.cpu, p.memory, p.disk, p.gpu].map(|v| if v == 0 { "-".into() } else { amount(v) }).join("/")
}

fn pool_tree(resp: &pb::ListPoolsResponse) -> String {
    let mut t = Table::new(&["POOL", "RESERVATION", "ENTITLEMENT", "ALLOCATION", "DEMAND", "QUEUED", "TASKS"]);
    for p in &resp.pools {
        // The server lists parents before children, so indenting by depth draws the tree.
        let depth = p.path.split('/').filter(|s| !s.is_empty()).count();
        let name = format!("{}{}", "  ".repeat(depth), p.path);
        t.row(vec![
            name,
            kinds(p.spec.as_ref().and_then(|s| s.reservation.as_ref())),
            kinds(p.entitlement.as_ref()),
            kinds(p.allocation.as_ref()),
            kinds(p.demand.as_ref()),
            p.queued_gangs.to_string(),
            p.live_tasks.to_string(),
        ]);
    }
    let c = resp.capacity.unwrap_or_default();
    format!(
        "{}amounts are cpu millicores/memory MiB/disk MiB/gpus; cluster capacity {}/{}/{}/{}\n",
        t.render(),
        c.cpu_millis,
        c.memory_mib,
        c.disk_mib,
        c.gpus
    )
}

fn pool_fields(p: &pb::Pool) -> String {
    let spec = p.spec.clone().unwrap_or_default();
    fields(&[
        ("path", p.path.clone()),
        ("reservation", kinds(spec.reservation.as_ref())),
        ("limit", limits(spec.limit.as_ref())),
        ("share", kinds(spec.share.as_ref())),
        ("static kinds", super::output::list(&spec.static_kinds)),
        ("slack limit", kinds(spec.slack_limit.as_ref())),
        ("queue policy", super::output::or_dash(&spec.queue_policy)),
        ("entitlement", kinds(p.entitlement.as_ref())),
        ("allocation", kinds(p.allocation.as_ref())),
        ("demand", kinds(p.demand.as_ref())),
        ("queued gangs", p.queued_gangs.to_string()),
        ("live tasks", p.live_tasks.to_string()),
        ("children", super::output::list(&p.children)),
        ("(amounts)", "cpu millicores/memory MiB/disk MiB/gpus".into()),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(text: &str) -> tempfile::NamedTempFile {
        let f = tempfile::NamedTempFile::new().expect("temp file");
        std::fs::write(f.path(), text).expect("write");
        f
    }

    #[test]
    fn a_pool_file_is_one_entry_or_a_whole_tree() {
        let one = write("reservation: { cpu: 4000 }\ntype: { gpu: static }\n");
        let spec = load_pool("/a", one.path()).expect("one entry");
        assert_eq!(spec.reservation.cpu, 4000);
        let wire = pool_spec_pb(&spec);
        assert_eq!(wire.static_kinds, vec!["gpu".to_owned()]);
        // The server's own conversion: unlimited travels as 0 and comes back.
        assert_eq!(wire.limit.map(|l| l.cpu), Some(0));
        assert_eq!(paceline_api::pools::pool_spec("spec", &wire), Ok(spec));

        let tree = write("pools:\n  - path: /a\n  - path: /a/b\n    share: { cpu: 3 }\n");
        assert_eq!(load_pool("/a/b", tree.path()).expect("picked").share.cpu, 3);
        let e = load_pool("/c", tree.path()).expect_err("absent");
        assert!(e.to_string().contains("no pool /c"), "{e}");
    }

    #[test]
    fn pool_file_errors_name_the_field() {
        let cases = [
            ("reservation: { cpu: 10 }\nlimit: { cpu: 5 }\n", "reservation.cpu"),
            ("reservation: { cpus: 10 }\n", "cpus"),
            ("reservation: { cpu: -1 }\n", "cpu"),
            ("path: /b\n", "`path` is /b"),
            ("{ share: { cpu: 0 } }", "share.cpu"),
            (
                "# comment\nreservation:\n  cpu: -1\n",
                "reservation.cpu: invalid type: integer `-1`, expected u64 at line 3",
            ),
        ];
        for (text, needle) in cases {
            let e = load_pool("/a", write(text).path()).expect_err(text);
            assert_eq!(super::super::exit_code(&e), 2);
            assert!(e.to_string().contains(needle), "{text}: {e}");
        }
    }
}

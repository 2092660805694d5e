//! `paceline secret …`: task secrets of a pool (decision 0032). A value is
//! read from a file or an environment variable, never from the command
//! line (where `ps` and shell history would show it), and never printed.

use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Subcommand};
use paceline_proto::v1 as pb;
use pb::secret_service_client::SecretServiceClient;

use super::output::{self, Table, emit, fields};
use super::{ClientOpts, RpcError, block_on, connect};

/// `paceline secret`.
#[derive(Debug, Args)]
pub struct SecretArgs {
    #[command(flatten)]
    opts: ClientOpts,
    #[command(subcommand)]
    cmd: SecretCommand,
}

/// Secret commands.
#[derive(Debug, Subcommand)]
pub enum SecretCommand {
    /// Create a secret in a pool, or replace its value.
    Put {
        /// The pool, e.g. /team-a.
        #[arg(long)]
        pool: String,
        /// The name tasks reference (a-z, 0-9, '.', '_', '-').
        name: String,
        /// Read the value from this file (its content as is; `-` reads stdin).
        #[arg(long, conflicts_with = "from_env", required_unless_present = "from_env")]
        from_file: Option<PathBuf>,
        /// Read the value from this environment variable.
        #[arg(long)]
        from_env: Option<String>,
    },
    /// The pool's secrets: names, versions and sizes, never values.
    List {
        /// The pool.
        #[arg(long)]
        pool: String,
    },
    /// Delete a secret (refused while an unfinished job references it).
    Delete {
        /// The pool.
        #[arg(long)]
        pool: String,
        /// The name.
        name: String,
    },
}

/// Runs a secret command.
pub fn run(args: SecretArgs) -> anyhow::Result<std::process::ExitCode> {
    block_on(exec(args.opts, args.cmd))
}

fn read_value(from_file: Option<PathBuf>, from_env: Option<String>) -> anyhow::Result<Vec<u8>> {
    match (from_file, from_env) {
        (Some(path), None) if path.as_os_str() == "-" => {
            let mut v = Vec::new();
            std::io::Read::read_to_end(&mut std::io::stdin(), &mut v).context("reading the value from stdin")?;
            Ok(v)
        }
        (Some(path), None) => std::fs::read(&path).with_context(|| format!("reading {}", path.display())),
        (None, Some(var)) => {
            std::env::var(&var).map(String::into_bytes).map_err(|_| anyhow::anyhow!("{var} is not set (or not UTF-8)"))
        }
        _ => anyhow::bail!("give exactly one of --from-file and --from-env"),
    }
}

async fn exec(opts: ClientOpts, cmd: SecretCommand) -> anyhow::Result<()> {
    let out = opts.output;
    let mut client = SecretServiceClient::new(connect(&opts).await?);
    match cmd {
        SecretCommand::Put { pool, name, from_file, from_env } => {
            let value = read_value(from_file, from_env)?;
            let r = pb::PutSecretRequest { pool, name, value };
            let s = client.put_secret(r).await.map_err(RpcError)?.into_inner().secret.unwrap_or_default();
            emit(out, &info_json(&s), || info_fields(&s))
        }
        SecretCommand::List { pool } => {
            let list = client.list_secrets(pb::ListSecretsRequest { pool }).await.map_err(RpcError)?.into_inner();
            let value = serde_json::Value::Array(list.secrets.iter().map(info_json).collect());
            emit(out, &value, || table(&list.secrets))
        }
        SecretCommand::Delete { pool, name } => {
            client
                .delete_secret(pb::DeleteSecretRequest { pool: pool.clone(), name: name.clone() })
                .await
                .map_err(RpcError)?;
            emit(out, &serde_json::json!({"deleted": format!("{pool}/{name}")}), || format!("deleted {pool}/{name}\n"))
        }
    }
}

fn info_json(s: &pb::SecretInfo) -> serde_json::Value {
    serde_json::json!({
        "pool": s.pool,
        "name": s.name,
        "version": s.version,
        "updated_at_ms": s.updated_at_ms,
        "updated_by": s.updated_by,
        "size_bytes": s.size_bytes,
    })
}

fn info_fields(s: &pb::SecretInfo) -> String {
    fields(&[
        ("secret", format!("{}/{}", s.pool, s.name)),
        ("version", s.version.to_string()),
        ("size", format!("{} bytes", s.size_bytes)),
        ("updated", output::time(s.updated_at_ms)),
        ("by", output::or_dash(&s.updated_by)),
    ])
}

fn table(secrets: &[pb::SecretInfo]) -> String {
    let mut t = Table::new(&["NAME", "VERSION", "SIZE", "UPDATED", "BY"]);
    for s in secrets {
        t.row(vec![
            s.name.clone(),
            s.version.to_string(),
            s.size_bytes.to_string(),
            output::time(s.updated_at_ms),
            output::or_dash(&s.updated_by),
        ]);
    }
    t.render()
}

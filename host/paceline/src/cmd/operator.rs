//! `paceline operator snapshot save|restore|inspect`: back up a running
//! server's whole state and restore it into an empty store (decision 0030;
//! docs/operations.md, "Backup and restore").
//!
//! `save` is a client of `OperatorService/Snapshot` (an admin token); it
//! writes `FILE.partial`, checks the whole file, and only then renames it
//! to FILE, so FILE is always a complete snapshot. `restore` works on the
//! store directly, with the server stopped: it checks the whole file and
//! that the store is empty before it writes anything.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::{Args, Subcommand};
use paceline_proto::v1 as pb;
use paceline_server::ServerConfig;
use paceline_storage::StorageConfig;
use paceline_storage::config::SqliteConfig;
use paceline_storage::snapshot;

use super::client::{ClientOpts, RpcError, bad_input, block_on, connect};

/// `paceline operator`.
#[derive(Debug, Subcommand)]
pub enum OperatorCommand {
    /// Back up a running server's whole state to a file, and restore one.
    #[command(subcommand)]
    Snapshot(SnapshotCommand),
}

/// `paceline operator snapshot`.
#[derive(Debug, Subcommand)]
pub enum SnapshotCommand {
    /// Save a snapshot of a running server (needs an admin token).
    Save(SaveArgs),
    /// Restore a snapshot into an empty store, with no server running on it.
    Restore(RestoreArgs),
    /// Check a snapshot file (counts, checksum) and print what it holds.
    Inspect(InspectArgs),
}

/// `paceline operator snapshot save`.
#[derive(Debug, Args)]
pub struct SaveArgs {
    #[command(flatten)]
    opts: ClientOpts,
    /// The file to write; it must not exist yet.
    file: PathBuf,
    /// Hold back the server's writes while its records are read, so that the
    /// snapshot is of one moment on Cassandra too (SQLite's always is). Writes
    /// wait, none is refused; API calls that write stall meanwhile (the time
    /// is printed).
    #[arg(long)]
    pause_writes: bool,
}

/// `paceline operator snapshot restore`.
#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("target").required(true).args(["store", "config"])))]
pub struct RestoreArgs {
    /// The snapshot file.
    file: PathBuf,
    /// The store to restore into: `sqlite:PATH` or `cassandra:HOST:PORT[/KEYSPACE]`
    /// (login and TLS from PACELINE_CASSANDRA_USER, _PASSWORD_FILE, _CA_FILE, …).
    #[arg(long)]
    store: Option<String>,
    /// Restore into the store of this server config file (its `storage`, else
    /// `<data_dir>/paceline.db`).
    #[arg(long)]
    config: Option<PathBuf>,
}

/// `paceline operator snapshot inspect`.
#[derive(Debug, Args)]
pub struct InspectArgs {
    /// The snapshot file.
    file: PathBuf,
}

/// Runs `paceline operator …`.
pub fn run(c: OperatorCommand) -> anyhow::Result<std::process::ExitCode> {
    match c {
        OperatorCommand::Snapshot(SnapshotCommand::Save(a)) => block_on(save(a)),
        OperatorCommand::Snapshot(SnapshotCommand::Restore(a)) => block_on(restore(a)),
        OperatorCommand::Snapshot(SnapshotCommand::Inspect(a)) => block_on(async move { inspect(&a.file) }),
    }
}

fn partial(file: &Path) -> PathBuf {
    let mut name = file.file_name().map(|n| n.to_os_string()).unwrap_or_default();
    name.push(".partial");
    file.with_file_name(name)
}

async fn save(args: SaveArgs) -> anyhow::Result<()> {
    if args.file.exists() {
        return Err(bad_input(format!("{} exists; remove it or name another file", args.file.display())));
    }
    let started = std::time::Instant::now();
    let mut client = pb::operator_service_client::OperatorServiceClient::new(connect(&args.opts).await?)
        .max_decoding_message_size(8 << 20);
    let request = pb::SnapshotRequest { pause_writes: args.pause_writes };
    let mut stream = client.snapshot(request).await.map_err(RpcError)?.into_inner();
    let tmp = partial(&args.file);
    // Left by a save that was killed: never a complete snapshot.
    let _ = std::fs::remove_file(&tmp);
    let file = private_file(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
    let mut out = std::io::BufWriter::new(file);
    let mut bytes = 0u64;
    let written: anyhow::Result<()> = async {
        while let Some(chunk) = stream.message().await.map_err(RpcError)? {
            out.write_all(&chunk.data).with_context(|| format!("writing {}", tmp.display()))?;
            bytes += chunk.data.len() as u64;
        }
        out.flush()?;
        out.get_ref().sync_all()?;
        Ok(())
    }
    .await;
    drop(out);
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(e.context("the snapshot was not saved"));
    }
    // The server's stream may end early (it stopped, the connection broke):
    // only a file whose trailer checks out is kept.
    let (header, trailer) = match snapshot::verify(&tmp) {
        Ok(v) => v,
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            return Err(anyhow::Error::new(e).context("the snapshot the server sent is incomplete; not saved"));
        }
    };
    std::fs::rename(&tmp, &args.file)
        .with_context(|| format!("renaming {} to {}", tmp.display(), args.file.display()))?;
    println!(
        "saved {} ({bytes} bytes in {:.1}s) from a {} store{}: {}; sha256 {}",
        args.file.display(),
        started.elapsed().as_secs_f64(),
        header.source_backend,
        match (header.point_in_time, args.pause_writes) {
            (true, true) => ", one point in time (the server's writes paused meanwhile)",
            (true, false) => ", one point in time",
            _ => ", read record by record",
        },
        snapshot::describe(&trailer.counts),
        trailer.sha256
    );
    Ok(())
}

/// A new file only its owner reads: a snapshot holds every job's spec,
/// environment values included.
fn private_file(path: &Path) -> std::io::Result<std::fs::File> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options.open(path)
}

fn target(args: &RestoreArgs) -> anyhow::Result<StorageConfig> {
    if let Some(url) = &args.store {
        return StorageConfig::from_url(url).map_err(bad_input);
    }
    let path = args.config.as_ref().ok_or_else(|| bad_input("give --store or --config"))?;
    let text = std::fs::read_to_string(path).map_err(|e| bad_input(format!("cannot read {}: {e}", path.display())))?;
    let config: ServerConfig =
        serde_yaml::from_str(&text).map_err(|e| bad_input(format!("{}: {e}", path.display())))?;
    Ok(config
        .storage
        .unwrap_or_else(|| StorageConfig::Sqlite(SqliteConfig { path: config.data_dir.join("paceline.db") })))
}

async fn restore(args: RestoreArgs) -> anyhow::Result<()> {
    let storage = target(&args)?;
    if !args.file.exists() {
        return Err(bad_input(format!("{} does not exist", args.file.display())));
    }
    let started = std::time::Instant::now();
    let (trailer, into) = match &storage {
        StorageConfig::Sqlite(c) => {
            (snapshot::restore_sqlite_file(&args.file, &c.path).await?, format!("sqlite:{}", c.path.display()))
        }
        StorageConfig::Cassandra(c) => {
            let store = paceline_storage::cassandra::CassandraStore::connect(c).await?;
            let into = format!("cassandra keyspace {}", c.keyspace);
            (snapshot::restore(&args.file, &store).await?, into)
        }
    };
    println!(
        "restored {} into {into} in {:.1}s: {}",
        args.file.display(),
        started.elapsed().as_secs_f64(),
        snapshot::describe(&trailer.counts)
    );
    Ok(())
}

fn inspect(file: &Path) -> anyhow::Result<()> {
    let (header, trailer) = snapshot::verify(file)?;
    println!(
        "{}: intact, format version {}, taken {} UTC from a {} store by paceline {}{}\n{}\nsha256 {}",
        file.display(),
        header.version,
        super::client::output::time(header.created_at_ms),
        header.source_backend,
        header.written_by,
        if header.point_in_time { " (one point in time)" } else { " (read record by record)" },
        snapshot::describe(&trailer.counts),
        trailer.sha256
    );
    Ok(())
}

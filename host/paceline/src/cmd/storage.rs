//! `paceline storage migrate --from STORE --to STORE`: copies a whole store
//! into another (SQLite ⇄ Cassandra), resumably, and verifies the copy
//! (decision 0030; docs/operations.md, "Moving between stores"). Run it
//! with no server writing to the source.

use std::io::Write;

use clap::{Args, Subcommand};
use paceline_storage::StorageConfig;
use paceline_storage::snapshot::{self, migrate};

use super::client::{bad_input, block_on};

/// `paceline storage`.
#[derive(Debug, Subcommand)]
pub enum StorageCommand {
    /// Copy everything from one store into another and verify the copy;
    /// run it again to resume after an interruption.
    Migrate(MigrateArgs),
}

/// `paceline storage migrate`.
#[derive(Debug, Args)]
pub struct MigrateArgs {
    /// The store to copy: `sqlite:PATH` or `cassandra:HOST:PORT[/KEYSPACE]`
    /// (login and TLS from PACELINE_CASSANDRA_USER, _PASSWORD_FILE, _CA_FILE, …).
    #[arg(long)]
    from: String,
    /// The store to copy into, of the same forms: empty, or holding an
    /// interrupted migration from the same source.
    #[arg(long)]
    to: String,
}

/// Runs `paceline storage …`.
pub fn run(c: StorageCommand) -> anyhow::Result<std::process::ExitCode> {
    match c {
        StorageCommand::Migrate(a) => block_on(migrate_cmd(a)),
    }
}

async fn migrate_cmd(args: MigrateArgs) -> anyhow::Result<()> {
    let from = StorageConfig::from_url(&args.from).map_err(bad_input)?;
    let to = StorageConfig::from_url(&args.to).map_err(bad_input)?;
    if from == to {
        return Err(bad_input("--from and --to name the same store"));
    }
    if let StorageConfig::Sqlite(c) = &from
        && !c.path.exists()
    {
        return Err(bad_input(format!("{} does not exist", c.path.display())));
    }
    let src = paceline_storage::config::open(&from).await?;
    let dst = paceline_storage::config::open(&to).await?;
    let started = std::time::Instant::now();
    let mut progress = |p: migrate::Progress| {
        let rate = p.jobs_done as f64 / p.elapsed.as_secs_f64().max(0.001);
        println!(
            "migrate: {}/{} jobs in {:.1}s ({rate:.0} jobs/s)",
            p.jobs_done,
            p.jobs_total,
            p.elapsed.as_secs_f64()
        );
        let _ = std::io::stdout().flush();
    };
    let report = migrate::migrate(src.as_ref(), dst.as_ref(), &args.from, &mut progress).await?;
    println!(
        "migrated {} → {} in {:.1}s{}: {} jobs copied, {} found complete, {} copied again; verified (same counts and checksums): {}",
        args.from,
        args.to,
        started.elapsed().as_secs_f64(),
        if report.resumed { " (resumed)" } else { "" },
        report.jobs_copied,
        report.jobs_skipped,
        report.jobs_redone,
        snapshot::describe(&report.verified)
    );
    Ok(())
}

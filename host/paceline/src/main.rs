//! # paceline
//!
//! The one binary. For now: `demo` (load the default plugins and place a
//! sample workload), `agent` (the node agent), `plugin validate|run` (work
//! with a component locally), and `bench …` (print benchmark figures). The
//! server roles, `dev` and the gRPC client commands come with the pipeline
//! issue.
//!
//! It owns command-line parsing and wiring only; every decision lives in the
//! `host/` crates it calls.

use clap::{Parser, Subcommand};

mod cmd;

#[derive(Debug, Parser)]
#[command(name = "paceline", version, about = "Paceline: a unified resource scheduler with WebAssembly policies")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Every role in one process: API, job manager, resource manager,
    /// placement, host manager (configured from a file).
    Server(cmd::server::ServerArgs),
    /// An all-in-one local cluster on embedded defaults with local agents.
    Dev(cmd::server::DevArgs),
    /// Load the default plugins and place a sample workload on sample hosts.
    Demo(cmd::demo::DemoArgs),
    /// Work with plugin components locally, or deploy them to a server.
    #[command(subcommand)]
    Plugin(cmd::plugin::PluginCommand),
    /// Run the node agent of this machine: it registers with the host
    /// manager and runs the tasks placed here as processes.
    Agent(cmd::agent::AgentArgs),
    /// Run a benchmark and print its figures.
    #[command(subcommand)]
    Bench(cmd::bench::BenchCommand),
    /// Create, inspect, update and kill jobs on a server.
    Job(cmd::client::job::JobArgs),
    /// Inspect a job's tasks, their logs and events on a server.
    Task(cmd::client::task::TaskArgs),
    /// Manage a server's resource pool tree.
    Pool(cmd::client::pool::PoolArgs),
    /// List hosts and drain them for maintenance.
    Host(cmd::client::host::HostArgs),
    /// Print changes to jobs, tasks and pools as they happen.
    Watch(cmd::client::watch::WatchArgs),
    /// Make API tokens for a server's tokens file.
    #[command(subcommand)]
    Auth(cmd::auth::AuthCommand),
    /// Replay a cluster's history under any policies, compare two sets,
    /// generate and import traces (docs/sim.md).
    #[command(subcommand)]
    Sim(cmd::sim::SimCommand),
    /// Record a live cluster's history as a trace for `paceline sim`.
    #[command(subcommand)]
    Trace(cmd::sim::TraceCommand),
}

fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_env("PACELINE_LOG").unwrap_or_else(|_| "warn".into()))
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Server(args) => cmd::server::server(args),
        Command::Dev(args) => cmd::server::dev(args),
        Command::Demo(args) => cmd::demo::run(args),
        Command::Plugin(c) => cmd::plugin::run(c),
        Command::Agent(args) => cmd::agent::run(args),
        Command::Bench(c) => cmd::bench::run(c),
        Command::Job(args) => cmd::client::job::run(args),
        Command::Task(args) => cmd::client::task::run(args),
        Command::Pool(args) => cmd::client::pool::run(args),
        Command::Host(args) => cmd::client::host::run(args),
        Command::Watch(args) => cmd::client::watch::run(args),
        Command::Auth(c) => cmd::auth::run(c),
        Command::Sim(c) => cmd::sim::run(c),
        Command::Trace(c) => cmd::sim::trace(c),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

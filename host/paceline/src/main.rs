//! # paceline
//!
//! The one binary: the server roles (`server`, and `dev`, a local cluster
//! with agents), the node `agent`, the gRPC client commands (`job`, `task`,
//! `pool`, `host`, `watch`, `plugin deploy|list|activate|rollback|shadow`),
//! local plugin tools (`plugin validate|run`), `auth token`, `bench …`,
//! `operator snapshot save|restore|inspect`, `storage migrate`, `demo` and `completion`.
//!
//! It owns command-line parsing, logging setup and wiring only; every
//! decision lives in the `host/` crates it calls.

use std::io::IsTerminal;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};

mod cmd;

#[derive(Debug, Parser)]
#[command(name = "paceline", version, about = "Paceline: a unified resource scheduler with WebAssembly policies")]
struct Cli {
    /// Log lines as readable text or one JSON object per line. What is logged
    /// is set by PACELINE_LOG (e.g. `debug`, `paceline_api=debug`); by default
    /// servers and agents log at info and client commands only warnings.
    #[arg(long, value_enum, default_value = "text", env = "PACELINE_LOG_FORMAT", global = true)]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

/// How log lines are written (to stderr).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum LogFormat {
    /// One readable line per event: time, level, message, fields.
    Text,
    /// One JSON object per event.
    Json,
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
    /// Print an example job file (built in; without a name, list them).
    Example(cmd::example::ExampleArgs),
    /// Work with plugin components locally, or deploy them to a server.
    #[command(subcommand)]
    Plugin(cmd::plugin::PluginCommand),
    /// Run the node agent of this machine: it registers with the host
    /// manager and runs the tasks placed here as processes.
    Agent(cmd::agent::AgentArgs),
    /// Join tokens for agents and the certificates they got (on the host manager's machine).
    #[command(subcommand)]
    AgentToken(cmd::agent_token::AgentTokenCommand),
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
    /// Keep secrets in a pool for its jobs' tasks (values are never shown).
    Secret(cmd::client::secret::SecretArgs),
    /// Print changes to jobs, tasks and pools as they happen.
    Watch(cmd::client::watch::WatchArgs),
    /// Show the server's audit log: who changed what, when, and the outcome.
    Audit(cmd::client::audit::AuditArgs),
    /// Cluster maintenance: snapshots for backup and restore (docs/operations.md).
    #[command(subcommand)]
    Operator(cmd::operator::OperatorCommand),
    /// Move a cluster's data between stores (SQLite, Cassandra).
    #[command(subcommand)]
    Storage(cmd::storage::StorageCommand),
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
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completion {
        /// The shell.
        shell: clap_complete::Shell,
    },
}

impl Command {
    /// Servers and agents run for long and their log is how they are
    /// watched: info by default. Client commands print answers: warnings only.
    fn default_log_level(&self) -> &'static str {
        match self {
            Command::Server(_) | Command::Dev(_) | Command::Agent(_) => "warn,paceline=info",
            _ => "warn",
        }
    }
}

/// The command line with an example under every command's help.
fn command() -> clap::Command {
    cmd::help::with_examples(Cli::command())
}

/// Logs to stderr, filtered by PACELINE_LOG (else `default`).
fn init_logging(format: LogFormat, default: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("PACELINE_LOG").unwrap_or_else(|_| default.into());
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    match format {
        LogFormat::Json => builder.json().with_current_span(false).init(),
        LogFormat::Text => {
            builder.compact().with_target(false).with_ansi(std::io::stderr().is_terminal()).init();
        }
    }
}

/// The exit status of a command whose output pipe closed, as a shell
/// reports a process ended by SIGPIPE (128 + 13).
const BROKEN_PIPE_EXIT: i32 = 141;

/// Whether a panic message is about a write to a closed pipe: `println!`'s
/// ("failed printing to stdout: Broken pipe (os error 32)") or an
/// `expect` on an `io::Error` (clap_complete's, `kind: BrokenPipe`).
fn is_broken_pipe(text: &str) -> bool {
    text.contains("Broken pipe (os error") || text.contains("kind: BrokenPipe")
}

/// Rust ignores SIGPIPE, so `println!` into a closed pipe
/// (`paceline host list -o json | head -1`) panics with a backtrace hint.
/// A reader that went away is no error of ours: end quietly, with the
/// status a shell shows for SIGPIPE, as `cat` or `grep` would. Any other
/// panic goes to the default hook.
fn exit_quietly_on_broken_pipe() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let payload = info.payload();
        let msg = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or_default();
        if is_broken_pipe(msg) {
            std::process::exit(BROKEN_PIPE_EXIT);
        }
        default(info);
    }));
}

/// mimalloc rather than glibc's malloc for every role this binary runs:
/// the server's hot paths allocate many small, short-lived buffers from
/// several threads at once (decision 0070 has the figures).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    exit_quietly_on_broken_pipe();
    let cli = Cli::from_arg_matches(&command().get_matches()).unwrap_or_else(|e| e.exit());
    init_logging(cli.log_format, cli.command.default_log_level());
    let result = match cli.command {
        Command::Server(args) => cmd::server::server(args),
        Command::Dev(args) => cmd::server::dev(args, cli.log_format == LogFormat::Json),
        Command::Demo(args) => cmd::demo::run(args),
        Command::Example(args) => cmd::example::run(args),
        Command::Plugin(c) => cmd::plugin::run(c),
        Command::Agent(args) => cmd::agent::run(args),
        Command::AgentToken(c) => cmd::agent_token::run(c),
        Command::Bench(c) => cmd::bench::run(c),
        Command::Job(args) => cmd::client::job::run(args),
        Command::Task(args) => cmd::client::task::run(args),
        Command::Pool(args) => cmd::client::pool::run(args),
        Command::Host(args) => cmd::client::host::run(args),
        Command::Secret(args) => cmd::client::secret::run(args),
        Command::Audit(args) => cmd::client::audit::run(args),
        Command::Watch(args) => cmd::client::watch::run(args),
        Command::Auth(c) => cmd::auth::run(c),
        Command::Operator(c) => cmd::operator::run(c),
        Command::Storage(c) => cmd::storage::run(c),
        Command::Completion { shell } => {
            clap_complete::generate(shell, &mut command(), "paceline", &mut std::io::stdout());
            Ok(std::process::ExitCode::SUCCESS)
        }
        Command::Sim(c) => cmd::sim::run(c),
        Command::Trace(c) => cmd::sim::trace(c),
    };
    match result {
        Ok(code) => code,
        // Output written with `write!` into a closed pipe: as above.
        Err(e)
            if e.chain().any(|c| {
                c.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            }) =>
        {
            std::process::ExitCode::from(BROKEN_PIPE_EXIT as u8)
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_command_has_an_example_in_its_help() {
        let cli = Cli::command();
        assert_eq!(cmd::help::missing(&cli), Vec::<String>::new(), "commands without an example in cmd/help.rs");
        assert_eq!(cmd::help::stale(&cli), Vec::<&str>::new(), "examples for commands that do not exist");
        let mut with = command();
        let help =
            with.find_subcommand_mut("job").and_then(|j| j.find_subcommand_mut("create")).map(|c| c.render_help());
        assert!(help.is_some_and(|h| h.to_string().contains("Examples:\n  paceline job create examples/hello.yaml")));
    }

    #[test]
    fn the_command_line_is_consistent() {
        command().debug_assert();
    }
}

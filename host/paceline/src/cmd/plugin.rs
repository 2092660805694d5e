//! `paceline plugin validate|run`: check a component and run it on a
//! scenario, locally, with the same runtime and limits the server uses.
//! `deploy|list|activate|rollback|shadow` talk to a server; they live in
//! `cmd::client::plugin`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use clap::{Args, Subcommand, ValueEnum};
use paceline_plugin::{DeployOptions, MemoryStore, PluginRuntime, Registry, RuntimeConfig, slot_world};
use paceline_plugin_sdk::harness::Scenario;

/// Plugin commands.
#[derive(Debug, Subcommand)]
pub enum PluginCommand {
    /// Compile a component, find (or check) its world, and self-test it.
    Validate(ValidateArgs),
    /// Run a component on a scenario file and print its decision.
    Run(RunArgs),
    /// Create a plugin project (Rust, Python or TypeScript) with a scenario and a test.
    New(super::plugin_new::NewArgs),
    /// Build a plugin project into a component with its pinned toolchain.
    Build(super::plugin_new::BuildArgs),
    /// Upload a component to a server's slot (compiled, checked and self-tested there).
    Deploy(super::client::plugin::DeployArgs),
    /// List a server's plugin slots with their versions and metrics.
    List(super::client::plugin::ListArgs),
    /// Make a deployed version its slot's active one.
    Activate(super::client::plugin::ActivateArgs),
    /// Return a slot to its previous active version.
    Rollback(super::client::plugin::RollbackArgs),
    /// Run a version beside the active one and diff decisions (or stop and report).
    Shadow(super::client::plugin::ShadowArgs),
}

/// Arguments of `plugin validate`.
#[derive(Debug, Args)]
pub struct ValidateArgs {
    /// The component (.wasm).
    file: PathBuf,
    /// Check against this slot's world (e.g. placement/batch) instead of detecting it.
    #[arg(long)]
    slot: Option<String>,
}

/// Output formats.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum Format {
    /// JSON.
    Json,
    /// YAML.
    Yaml,
}

/// Arguments of `plugin run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The component (.wasm).
    file: PathBuf,
    /// A scenario file (YAML or JSON; see docs/plugin-guide.md).
    #[arg(long)]
    scenario: PathBuf,
    /// Output format of the decision.
    #[arg(short = 'o', long, value_enum, default_value = "json")]
    output: Format,
}

pub fn run(cmd: PluginCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        PluginCommand::Validate(a) => validate(a),
        PluginCommand::Run(a) => run_scenario(a),
        PluginCommand::New(a) => super::plugin_new::new(a),
        PluginCommand::Build(a) => super::plugin_new::build(a),
        PluginCommand::Deploy(a) => super::client::plugin::deploy(a),
        PluginCommand::List(a) => super::client::plugin::list(a),
        PluginCommand::Activate(a) => super::client::plugin::activate(a),
        PluginCommand::Rollback(a) => super::client::plugin::rollback(a),
        PluginCommand::Shadow(a) => super::client::plugin::shadow(a),
    }
}

fn read(file: &PathBuf) -> anyhow::Result<Vec<u8>> {
    std::fs::read(file).with_context(|| format!("cannot read {}", file.display()))
}

fn validate(args: ValidateArgs) -> anyhow::Result<ExitCode> {
    let wasm = read(&args.file)?;
    let runtime = Arc::new(PluginRuntime::new(RuntimeConfig::default())?);
    let started = Instant::now();
    let slot = match &args.slot {
        Some(s) => {
            slot_world(s)?;
            s.clone()
        }
        None => match paceline_plugin::scenario::detect_world(&runtime, &wasm)? {
            paceline_plugin::World::Placement => "placement/validate".into(),
            paceline_plugin::World::Preemption => "preemption".into(),
            paceline_plugin::World::Lifecycle => "lifecycle/batch".into(),
        },
    };
    let registry = Registry::open(runtime, Arc::new(MemoryStore::default()))?;
    let deployed = registry.deploy(&slot, "candidate", "0", &wasm, DeployOptions { self_test: true })?;
    println!("ok: {}", args.file.display());
    println!("  world:     {}", deployed.record.world.as_str());
    println!("  slot:      {slot}");
    println!("  sha256:    {}", deployed.record.sha256);
    println!("  size:      {} bytes", wasm.len());
    println!("  checked in {:.1} ms (compile, world check, self-test)", started.elapsed().as_secs_f64() * 1e3);
    Ok(ExitCode::SUCCESS)
}

fn run_scenario(args: RunArgs) -> anyhow::Result<ExitCode> {
    let wasm = read(&args.file)?;
    let scenario = Scenario::load(&args.scenario)?;
    let runtime = Arc::new(PluginRuntime::new(RuntimeConfig::default())?);
    let decision = paceline_plugin::scenario::run_component(runtime, &wasm, &scenario)?;
    match args.output {
        Format::Json => println!("{}", serde_json::to_string_pretty(&decision)?),
        Format::Yaml => print!("{}", serde_yaml::to_string(&decision)?),
    }
    match scenario.check(&decision) {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(e) => {
            eprintln!("scenario check failed: {e}");
            Ok(ExitCode::from(3))
        }
    }
}

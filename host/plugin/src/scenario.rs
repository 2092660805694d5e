//! Runs a scenario file through a real component: the other half of the
//! SDK's native harness (`paceline_plugin_sdk::harness`).

use std::sync::Arc;

use paceline_plugin_sdk::harness::{Decision, Input, Scenario};

use crate::error::PluginError;
use crate::persist::MemoryStore;
use crate::registry::{DeployOptions, Registry, ServedBy};
use crate::runtime::{PluginRuntime, World};

/// Deploys `wasm` into a scratch registry (no self-test) and runs the
/// scenario's input through it. Faults are errors: no fallback answers here.
pub fn run_component(runtime: Arc<PluginRuntime>, wasm: &[u8], scenario: &Scenario) -> Result<Decision, PluginError> {
    let registry = Registry::open(runtime, Arc::new(MemoryStore::default()))?;
    let slot = match scenario.input.world() {
        "placement" => "placement/scenario",
        "preemption" => "preemption",
        _ => "lifecycle/batch",
    };
    registry.deploy(slot, "scenario", "0", wasm, DeployOptions { self_test: false })?;
    registry.activate(slot, "scenario@0")?;
    let (decision, served_by, faults) = match &scenario.input {
        Input::Placement(req) => {
            let a = registry.place(slot, req)?;
            (Decision::Placement(a.value), a.served_by, a.faults)
        }
        Input::Preemption(req) => {
            let a = registry.select_victims(req)?;
            (Decision::Preemption(a.value), a.served_by, a.faults)
        }
        Input::Lifecycle { job, tasks, event } => {
            let a = registry.on_event(slot, job, tasks, event)?;
            (Decision::Lifecycle(a.value), a.served_by, a.faults)
        }
    };
    match (served_by, faults.into_iter().next()) {
        (ServedBy::Version(_), None) => Ok(decision),
        (_, Some(fault)) => Err(PluginError::Call(fault)),
        (ServedBy::Native(_), None) => Err(PluginError::Runtime("the component did not answer".into())),
    }
}

/// The world a component implements, found by trying each in turn.
pub fn detect_world(runtime: &PluginRuntime, wasm: &[u8]) -> Result<World, PluginError> {
    let (component, _) = runtime.compile(wasm)?;
    let mut last = None;
    for world in [World::Placement, World::Preemption, World::Lifecycle] {
        match runtime.prepare(&component, world, world.as_str()) {
            Ok(_) => return Ok(world),
            Err(e) => last = Some(e),
        }
    }
    Err(match last {
        Some(PluginError::WrongWorld { detail, .. }) => {
            PluginError::WrongWorld { slot: "any".into(), world: "placement, preemption or lifecycle", detail }
        }
        Some(e) => e,
        None => PluginError::Runtime("no world".into()),
    })
}

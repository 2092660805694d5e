//! Adapters between the plugin registry and the roles that call it.
//!
//! The resource manager knows preemption only through its own small trait
//! (`paceline_resmgr::PreemptionPolicy`) and must not depend on wasmtime;
//! this adapter puts the registry's `preemption` slot behind that trait.

use std::sync::Arc;

use paceline_plugin::{Registry, ServedBy};
use paceline_plugin_sdk::types::{PreemptionRequest, Victim};
use paceline_resmgr::{PolicyError, PreemptionPolicy};

/// The registry's `preemption` slot as the resource manager's policy. The
/// registry already falls back (earlier version, then native) when the
/// active plugin faults; the resource manager then validates the victims
/// again with its own, stricter rules.
#[derive(Debug, Clone)]
pub struct SlotPreemption {
    registry: Arc<Registry>,
}

impl SlotPreemption {
    /// Wraps a registry.
    pub fn new(registry: Arc<Registry>) -> Self {
        SlotPreemption { registry }
    }
}

impl PreemptionPolicy for SlotPreemption {
    fn name(&self) -> &str {
        "preemption slot"
    }

    fn select_victims(&self, request: &PreemptionRequest) -> Result<Vec<Victim>, PolicyError> {
        let answer = self
            .registry
            .select_victims(request)
            .map_err(|e| PolicyError { policy: "preemption slot".into(), message: e.to_string() })?;
        if let ServedBy::Native(name) = answer.served_by {
            tracing::debug!(policy = name, faults = answer.faults.len(), "preemption answered by the native policy");
        }
        Ok(answer.value)
    }
}

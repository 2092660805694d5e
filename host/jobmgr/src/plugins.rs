//! The lifecycle slots' native fallbacks: each default plugin's native
//! build backs its `lifecycle/<kind>` slot, the way binpack's native build
//! backs `placement/batch`. A deployed Wasm version serves first; the
//! native build answers when none is active or every version failed.

use std::sync::Arc;

use paceline_plugin::Registry;
use paceline_plugin::registry::NativeLifecycle;
use paceline_plugin_sdk::LifecyclePolicy;

/// The four lifecycle slots.
pub const SLOTS: [&str; 4] = ["lifecycle/batch", "lifecycle/stateless", "lifecycle/stateful", "lifecycle/daemon"];

/// Registers the native fallback of every lifecycle slot.
pub fn register_native_lifecycles(registry: &Registry) -> Result<(), paceline_plugin::PluginError> {
    let natives: [(&str, NativeLifecycle); 4] = [
        ("lifecycle/batch", Arc::new(plugin_batch::Batch::on_events)),
        ("lifecycle/stateless", Arc::new(plugin_stateless::Stateless::on_events)),
        ("lifecycle/stateful", Arc::new(plugin_stateful::Stateful::on_events)),
        ("lifecycle/daemon", Arc::new(plugin_daemon::Daemon::on_events)),
    ];
    for (slot, f) in natives {
        registry.set_native_lifecycle(slot, f)?;
    }
    Ok(())
}

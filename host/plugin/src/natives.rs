//! The native fallbacks: for each slot, the built-in policy that answers when
//! no Wasm version does (none active, or every version tried failed). The
//! table is [`crate::builtins`]: [`builtin`] gives the defaults by slot name,
//! and [`Registry::set_native`](crate::Registry::set_native) replaces one
//! (a test's, or an operator's build). The registry looks each call's native
//! up here the same way for placement, preemption and lifecycle slots.
//!
//! The defaults are the default plugins' own code, built natively, so a
//! fallback decides exactly as the shipped component would.

use std::sync::Arc;

use paceline_plugin_sdk::types as sdk;

use crate::runtime::World;

/// A placement policy: one request, one answer.
pub type NativePlacement = Arc<dyn Fn(&sdk::PlacementRequest) -> sdk::PlacementResult + Send + Sync>;
/// A preemption policy.
pub type NativePreemption = Arc<dyn Fn(&sdk::PreemptionRequest) -> Vec<sdk::Victim> + Send + Sync>;
/// A lifecycle policy's `on_events` (one event is a list of one).
pub type NativeLifecycle =
    Arc<dyn Fn(&sdk::JobView, &[sdk::TaskView], &[sdk::Event]) -> Vec<sdk::Action> + Send + Sync>;

/// A native policy of one world.
#[derive(Clone)]
pub enum Native {
    /// For a `placement/<name>` slot.
    Placement(NativePlacement),
    /// For the `preemption` slot.
    Preemption(NativePreemption),
    /// For a `lifecycle/<kind>` slot.
    Lifecycle(NativeLifecycle),
}

impl std::fmt::Debug for Native {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Native({:?})", self.world())
    }
}

impl Native {
    /// The world it serves.
    pub fn world(&self) -> World {
        match self {
            Native::Placement(_) => World::Placement,
            Native::Preemption(_) => World::Preemption,
            Native::Lifecycle(_) => World::Lifecycle,
        }
    }
}

/// A named native policy (the name shows in `ServedBy::Native`).
#[derive(Clone)]
pub struct NativePolicy {
    /// Its name, such as `binpack`.
    pub name: &'static str,
    /// The policy.
    pub policy: Native,
}

impl std::fmt::Debug for NativePolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NativePolicy").field("name", &self.name).field("world", &self.policy.world()).finish()
    }
}

/// The built-in native policy of `slot`: the native build of the policy a
/// new cluster activates there ([`crate::builtins::default_for`]), and
/// `binpack` for any other placement slot. `None` for a name that is no
/// slot.
pub fn builtin(slot: &str) -> Option<NativePolicy> {
    let b = crate::builtins::default_for(slot)
        .or_else(|| slot.starts_with("placement/").then(|| crate::builtins::by_name("binpack")).flatten())?;
    Some(NativePolicy { name: b.name, policy: (b.native?)() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_slot_has_a_native_of_its_own_world() {
        for (slot, name) in [
            ("placement/batch", "binpack"),
            ("placement/stateful", "binpack"),
            ("placement/gpu", "binpack"),
            ("placement/stateless", "spread"),
            ("preemption", "priority-preempt"),
            ("lifecycle/batch", "batch"),
            ("lifecycle/stateless", "stateless"),
            ("lifecycle/stateful", "stateful"),
            ("lifecycle/daemon", "daemon"),
        ] {
            let native = builtin(slot).expect("a native");
            assert_eq!(native.name, name, "{slot}");
            assert_eq!(Some(native.policy.world()), crate::registry::slot_world(slot).ok(), "{slot}");
        }
        assert!(builtin("scheduler").is_none());
    }
}

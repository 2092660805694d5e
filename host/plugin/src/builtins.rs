//! The one table of built-in policies: each default plugin's name, its Wasm
//! component (built from `plugins/` and embedded by
//! `paceline-plugin-artifacts`), the slots a new cluster activates it in, and
//! its native build, the fallback that answers when no Wasm version can
//! ([`crate::natives`]). The server's install, the fallbacks, `paceline
//! demo`, `paceline sim --policy`, `plugin deploy --builtin` and `plugin list`
//! all read this table, so a name, its bytes and its slots cannot disagree.

use std::sync::Arc;

use paceline_plugin_artifacts as a;
use paceline_plugin_sdk::{LifecyclePolicy, PlacementPolicy, PreemptionPolicy};

use crate::natives::Native;

/// The version label built-in components are deployed under
/// (`binpack@builtin-0.1.0`).
pub const BUILTIN_VERSION: &str = concat!("builtin-", env!("CARGO_PKG_VERSION"));

/// One built-in policy.
#[derive(Clone, Copy)]
pub struct Builtin {
    /// Its name, as `NAME@builtin-…` and `sim --policy NAME` say it.
    pub name: &'static str,
    /// Its Wasm component.
    pub bytes: &'static [u8],
    /// The slots a new cluster activates it in (none: deployed only on request).
    pub default_slots: &'static [&'static str],
    /// Its native build, for the fallback (none for the GPU-sharing
    /// policies, which have no slot of their own).
    pub native: Option<fn() -> Native>,
}

impl std::fmt::Debug for Builtin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Builtin")
            .field("name", &self.name)
            .field("bytes", &self.bytes.len())
            .field("default_slots", &self.default_slots)
            .field("native", &self.native.is_some())
            .finish()
    }
}

fn binpack() -> Native {
    Native::Placement(Arc::new(plugin_binpack::Binpack::place))
}
fn spread() -> Native {
    Native::Placement(Arc::new(plugin_spread::Spread::place))
}
fn priority_preempt() -> Native {
    Native::Preemption(Arc::new(plugin_priority_preempt::PriorityPreempt::select_victims))
}
fn batch() -> Native {
    Native::Lifecycle(Arc::new(plugin_batch::Batch::on_events))
}
fn stateless() -> Native {
    Native::Lifecycle(Arc::new(plugin_stateless::Stateless::on_events))
}
fn stateful() -> Native {
    Native::Lifecycle(Arc::new(plugin_stateful::Stateful::on_events))
}
fn daemon() -> Native {
    Native::Lifecycle(Arc::new(plugin_daemon::Daemon::on_events))
}

/// Every built-in policy.
pub const BUILTINS: [Builtin; 13] = [
    Builtin {
        name: "binpack",
        bytes: a::BINPACK,
        default_slots: &["placement/batch", "placement/stateful", "placement/daemon"],
        native: Some(binpack),
    },
    Builtin { name: "spread", bytes: a::SPREAD, default_slots: &["placement/stateless"], native: Some(spread) },
    Builtin { name: "gang-gpu", bytes: a::GANG_GPU, default_slots: &[], native: None },
    Builtin {
        name: "priority-preempt",
        bytes: a::PRIORITY_PREEMPT,
        default_slots: &["preemption"],
        native: Some(priority_preempt),
    },
    Builtin { name: "batch", bytes: a::BATCH, default_slots: &["lifecycle/batch"], native: Some(batch) },
    Builtin {
        name: "stateless",
        bytes: a::STATELESS,
        default_slots: &["lifecycle/stateless"],
        native: Some(stateless),
    },
    Builtin { name: "stateful", bytes: a::STATEFUL, default_slots: &["lifecycle/stateful"], native: Some(stateful) },
    Builtin { name: "daemon", bytes: a::DAEMON, default_slots: &["lifecycle/daemon"], native: Some(daemon) },
    Builtin { name: "gpu-fgd", bytes: a::GPU_FGD, default_slots: &[], native: None },
    Builtin { name: "gpu-random", bytes: a::GPU_RANDOM, default_slots: &[], native: None },
    Builtin { name: "gpu-bestfit", bytes: a::GPU_BESTFIT, default_slots: &[], native: None },
    Builtin { name: "gpu-dotprod", bytes: a::GPU_DOTPROD, default_slots: &[], native: None },
    Builtin { name: "gpu-packing", bytes: a::GPU_PACKING, default_slots: &[], native: None },
];

/// The built-in policy called `name`.
pub fn by_name(name: &str) -> Option<&'static Builtin> {
    BUILTINS.iter().find(|b| b.name == name)
}

/// Every (slot, policy) a new cluster activates, in the table's order.
pub fn defaults() -> impl Iterator<Item = (&'static str, &'static Builtin)> {
    BUILTINS.iter().flat_map(|b| b.default_slots.iter().map(move |slot| (*slot, b)))
}

/// The built-in policy a new cluster activates in `slot`, if any.
pub fn default_for(slot: &str) -> Option<&'static Builtin> {
    defaults().find(|(s, _)| *s == slot).map(|(_, b)| b)
}

/// The names of every built-in policy, comma separated (for messages).
pub fn names() -> String {
    BUILTINS.iter().map(|b| b.name).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_each_default_slot_has_one_policy_of_its_world() {
        let mut names: Vec<_> = BUILTINS.iter().map(|b| b.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), BUILTINS.len(), "a name twice");
        let mut slots: Vec<_> = defaults().map(|(s, _)| s).collect();
        let n = slots.len();
        slots.sort_unstable();
        slots.dedup();
        assert_eq!(slots.len(), n, "a slot with two defaults");
        for (slot, b) in defaults() {
            let native = (b.native.expect("a default has a native fallback"))();
            assert_eq!(Some(native.world()), crate::registry::slot_world(slot).ok(), "{slot}: {}", b.name);
            assert!(!b.bytes.is_empty(), "{}", b.name);
        }
    }
}

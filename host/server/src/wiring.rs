//! Adapters between the plugin registry and the roles that call it.
//!
//! The resource manager knows preemption only through its own small trait
//! (`paceline_resmgr::PreemptionPolicy`) and must not depend on wasmtime;
//! this adapter puts the registry's `preemption` slot behind that trait.

use std::sync::Arc;

use paceline_plugin::builtins::BUILTIN_VERSION;
use paceline_plugin::{GpuUnit, Registry, ServedBy};
use paceline_plugin_sdk::types::{PreemptionRequest, Victim};
use paceline_resmgr::{PolicyError, PreemptionPolicy};

/// The registry's `preemption` slot as the resource manager's policy. The
/// registry already falls back (earlier version, then native) when the
/// active plugin faults; the resource manager then validates the victims
/// again with its own, stricter rules.
///
/// Who served the last answer is kept so that a refusal by the resource
/// manager's own checks is counted against that version (issue 23: a
/// refusal downstream is a fault). The manager asks and checks in one
/// synchronous step, so "the last answer" is the one refused.
#[derive(Debug, Clone)]
pub struct SlotPreemption {
    registry: Arc<Registry>,
    last: Arc<std::sync::Mutex<Option<(ServedBy, GpuUnit)>>>,
}

impl SlotPreemption {
    /// Wraps a registry.
    pub fn new(registry: Arc<Registry>) -> Self {
        SlotPreemption { registry, last: Arc::default() }
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
        if let ServedBy::Native(name) = &answer.served_by {
            tracing::debug!(policy = name, faults = answer.faults.len(), "preemption answered by the native policy");
        }
        *self.last.lock().unwrap_or_else(|e| e.into_inner()) = Some((answer.served_by, answer.gpu_unit));
        Ok(answer.value)
    }

    fn refused(&self, reason: &str) {
        let last = self.last.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some((served_by, _)) = last {
            self.registry.report_refusal("preemption", &served_by, "resource manager", reason);
        }
    }

    fn answered_in_whole_gpus(&self) -> bool {
        let last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        matches!(*last, Some((_, GpuUnit::Whole)))
    }
}

/// The plugin registry's version store backed by the storage gateway, so
/// plugin versions, their bytes and each slot's activation history live in
/// the cluster's database (SQLite or Cassandra) with everything else.
///
/// The registry's persistence trait is synchronous (deploy and activate are
/// rare, operator-driven calls); this adapter blocks on the async store
/// through a Tokio runtime handle. Call registry operations that write from
/// a blocking context (a plain thread or `spawn_blocking`), never from
/// inside an async task.
#[derive(Debug, Clone)]
pub struct StoreVersions {
    store: Arc<dyn paceline_storage::Store>,
    runtime: tokio::runtime::Handle,
}

impl StoreVersions {
    /// Wraps a store; `runtime` drives its futures.
    pub fn new(store: Arc<dyn paceline_storage::Store>, runtime: tokio::runtime::Handle) -> Self {
        StoreVersions { store, runtime }
    }

    fn block<T>(&self, f: impl std::future::Future<Output = paceline_storage::Result<T>>) -> Result<T, String> {
        use tokio::runtime::{Handle, RuntimeFlavor};
        match Handle::try_current() {
            // Inside a worker of a multi-thread runtime (e.g. an automatic
            // rollback triggered by a preemption call in the resource
            // manager's tick): hand the worker's other tasks off first.
            Ok(h) if h.runtime_flavor() == RuntimeFlavor::MultiThread => {
                tokio::task::block_in_place(|| self.runtime.block_on(f)).map_err(|e| e.to_string())
            }
            Ok(_) => Err("plugin versions can be stored only from a multi-thread runtime or a plain thread".into()),
            Err(_) => self.runtime.block_on(f).map_err(|e| e.to_string()),
        }
    }
}

fn state_name(state: paceline_plugin::VersionState) -> &'static str {
    use paceline_plugin::VersionState as S;
    match state {
        S::Ready => "ready",
        S::Active => "active",
        S::Retired => "retired",
        S::Failed => "failed",
    }
}

fn parse_state(s: &str) -> Result<paceline_plugin::VersionState, String> {
    use paceline_plugin::VersionState as S;
    Ok(match s {
        "ready" => S::Ready,
        "active" => S::Active,
        "retired" => S::Retired,
        "failed" => S::Failed,
        other => return Err(format!("unknown plugin version state `{other}`")),
    })
}

fn parse_world(s: &str) -> Result<paceline_plugin::World, String> {
    use paceline_plugin::World as W;
    Ok(match s {
        "placement" => W::Placement,
        "preemption" => W::Preemption,
        "lifecycle" => W::Lifecycle,
        other => return Err(format!("unknown plugin world `{other}`")),
    })
}

impl paceline_plugin::VersionStore for StoreVersions {
    fn save_version(&self, r: &paceline_plugin::VersionRecord, wasm: &[u8]) -> Result<(), String> {
        let v = paceline_storage::PluginVersion {
            slot: r.slot.clone(),
            name: r.name.clone(),
            version: r.version.clone(),
            sha256: r.sha256.clone(),
            world: r.world.as_str().to_string(),
            deployed_at_ms: r.deployed_at_ms,
            state: state_name(r.state).to_string(),
            size: wasm.len() as u64,
        };
        self.block(self.store.put_plugin_version(&v, wasm))
    }

    fn update_version(&self, r: &paceline_plugin::VersionRecord) -> Result<(), String> {
        self.block(self.store.set_plugin_state(&r.slot, &r.name, &r.version, state_name(r.state)))
    }

    fn save_history(&self, slot: &str, history: &[String]) -> Result<(), String> {
        self.block(self.store.set_slot_history(slot, history))
    }

    fn load_versions(&self) -> Result<Vec<(paceline_plugin::VersionRecord, Vec<u8>)>, String> {
        let mut out = Vec::new();
        for v in self.block(self.store.plugin_versions(None))? {
            let bytes = self.block(self.store.plugin_bytes(&v.slot, &v.name, &v.version))?;
            let record = paceline_plugin::VersionRecord {
                world: parse_world(&v.world)?,
                state: parse_state(&v.state)?,
                slot: v.slot,
                name: v.name,
                version: v.version,
                sha256: v.sha256,
                deployed_at_ms: v.deployed_at_ms,
                deadline_ms: None,
                candidates: None,
            };
            out.push((record, bytes));
        }
        out.sort_by(|(a, _), (b, _)| (&a.slot, a.deployed_at_ms).cmp(&(&b.slot, b.deployed_at_ms)));
        Ok(out)
    }

    fn load_histories(&self) -> Result<std::collections::BTreeMap<String, Vec<String>>, String> {
        self.block(self.store.slot_histories())
    }
}

/// Deploys and activates the built-in components in every slot that has no
/// active version yet, so a new cluster runs its policies as Wasm from the
/// start (and an operator's later deploy replaces them). Slots that already
/// have an active version are left alone. Blocking: call it from a plain
/// thread or `spawn_blocking`. Returns the slots it filled.
pub fn install_default_plugins(registry: &Registry) -> Result<Vec<&'static str>, paceline_plugin::PluginError> {
    let active: std::collections::BTreeSet<String> =
        registry.list().into_iter().filter(|s| s.active.is_some()).map(|s| s.slot).collect();
    let mut filled = Vec::new();
    for (slot, builtin) in paceline_plugin::builtins::defaults() {
        let (name, bytes) = (builtin.name, builtin.bytes);
        if active.contains(slot) {
            continue;
        }
        let id = format!("{name}@{BUILTIN_VERSION}");
        let known = registry.list().into_iter().any(|s| {
            s.slot == slot && s.versions.iter().any(|v| v.record.name == name && v.record.version == BUILTIN_VERSION)
        });
        if !known {
            registry.deploy(slot, name, BUILTIN_VERSION, bytes, paceline_plugin::DeployOptions::default())?;
        }
        registry.activate(slot, &id)?;
        filled.push(slot);
    }
    Ok(filled)
}

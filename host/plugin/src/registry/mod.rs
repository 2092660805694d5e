//! The registry of slots: versions, the active one, hot swap, rollback,
//! shadow runs, fallback and automatic rollback.
//!
//! A slot's active version is an `Arc` behind an atomic pointer. A call
//! loads that pointer once and runs entirely on the version it loaded, so
//! activating another version takes effect from the next call while calls in
//! flight finish on the old one, and no call ever mixes two versions.
//!
//! The registry's parts, each an `impl Registry` block of its own:
//! `deploy` (compile, check, self-test, store), `activation` (activate,
//! deadlines, rollback), `serve` (one call through the active version and
//! its fallbacks) and `shadow` (comparing a candidate with the active
//! version). This file holds the shared state: slots, versions, listing.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::mpsc::SyncSender;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use arc_swap::ArcSwapOption;

use crate::Candidates;
use crate::error::{CallError, PluginError};
use crate::metrics::{MetricsSnapshot, VersionMetrics};
use crate::natives::{self, NativePolicy};
use crate::persist::{VersionRecord, VersionState, VersionStore};
use crate::runtime::{GpuUnit, PluginRuntime, Prepared, World};

mod activation;
mod deploy;
mod serve;
mod shadow;

pub use deploy::{DeployOptions, Deployed, SELF_TEST_BUDGET};
use shadow::ShadowJob;
pub use shadow::{Disagreement, MAX_DISAGREEMENTS, Names, ShadowReport};

/// Who produced an answer.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ServedBy {
    /// A Wasm version, `name@version`.
    Version(String),
    /// The built-in native policy of that name.
    Native(&'static str),
}

/// An answer, who gave it, and the faults met on the way.
#[derive(Clone, Debug, PartialEq)]
pub struct Answer<T> {
    /// The decision.
    pub value: T,
    /// Who made it.
    pub served_by: ServedBy,
    /// Faults of versions tried before, in order.
    pub faults: Vec<CallError>,
    /// The unit the answer counted GPU in. Always milli-GPUs except for a
    /// preemption answer of a component built before 0.1.3 asked about
    /// GPU shares ([`GpuUnit::Whole`]): it was checked in whole devices,
    /// and a caller that checks it again must do the same.
    pub gpu_unit: GpuUnit,
}

/// A version as listed.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct VersionInfo {
    /// Its record.
    pub record: VersionRecord,
    /// Its call metrics.
    pub metrics: MetricsSnapshot,
    /// Warm instances it holds (each pins a pooled instance slot).
    pub warm_instances: usize,
    /// A lifecycle component that answers a burst of events in one
    /// `on-events` call (built against WIT 0.1.1 or later); `false` for
    /// other worlds and for lifecycles built against 0.1.0.
    pub batched: bool,
}

/// One slot as listed.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct SlotInfo {
    /// Slot name.
    pub slot: String,
    /// Its world.
    pub world: World,
    /// The active version's id, if any (else the native policy serves).
    pub active: Option<String>,
    /// Version being shadowed, if any.
    pub shadow: Option<String>,
    /// The shadow run's report so far, if one runs.
    pub shadow_report: Option<ShadowReport>,
    /// Every version, oldest first.
    pub versions: Vec<VersionInfo>,
    /// Calls answered by an earlier version or the native policy because
    /// the version tried first failed, since this process started.
    pub fallbacks: u64,
    /// The slot's own candidate setting ([`Registry::set_candidates`]), if set.
    pub slot_candidates: Option<Candidates>,
    /// What the next placement call is offered: the active version's
    /// setting, else the slot's, else the registry's default (decision 0054).
    pub candidates: Candidates,
}

struct Version {
    record: Mutex<VersionRecord>,
    id: String,
    prepared: Prepared,
    metrics: VersionMetrics,
}

impl Version {
    fn record(&self) -> VersionRecord {
        self.record.lock().map(|r| r.clone()).unwrap_or_else(|e| e.into_inner().clone())
    }
    fn set_state(&self, state: VersionState) -> VersionRecord {
        let mut r = self.record.lock().unwrap_or_else(|e| e.into_inner());
        r.state = state;
        r.clone()
    }
}

struct Shadow {
    version: Arc<Version>,
    jobs: SyncSender<ShadowJob>,
    report: Arc<Mutex<ShadowReport>>,
}

struct Slot {
    name: String,
    world: World,
    versions: RwLock<Vec<Arc<Version>>>,
    active: ArcSwapOption<Version>,
    /// Activation history; the last entry is the active version.
    history: Mutex<Vec<String>>,
    consecutive_failures: AtomicU32,
    shadow: ArcSwapOption<Shadow>,
    /// Answers given by someone other than the version tried first.
    fallbacks: AtomicU64,
    /// The slot's candidate setting (in memory: set by the process's
    /// configuration, not stored).
    candidates: Mutex<Option<Candidates>>,
}

impl Slot {
    /// The slot's own setting, and the one its next call takes unless
    /// neither the active version nor the slot has one (`None`: the
    /// registry's default).
    fn candidates(&self) -> (Option<Candidates>, Option<Candidates>) {
        let own = self.candidates.lock().map(|c| *c).unwrap_or_else(|e| *e.into_inner());
        let version = self.active.load().as_ref().and_then(|v| v.record().candidates);
        (own, version.or(own))
    }
}

impl Slot {
    fn find(&self, id: &str) -> Option<Arc<Version>> {
        self.versions.read().ok()?.iter().find(|v| v.id == id).cloned()
    }
}

/// The plugin registry: every slot, its versions and its active version.
pub struct Registry {
    runtime: Arc<PluginRuntime>,
    store: Arc<dyn VersionStore>,
    slots: RwLock<BTreeMap<String, Arc<Slot>>>,
    /// Natives set by [`Registry::set_native`], over the built-in ones.
    natives: RwLock<BTreeMap<String, NativePolicy>>,
    /// Serialises changes (deploy, activate, rollback) so histories stay consistent.
    admin: Mutex<()>,
    /// Candidates of a placement slot where neither its active version nor
    /// the slot sets any ([`Registry::set_default_candidates`]).
    default_candidates: Mutex<Candidates>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry").field("runtime", &self.runtime).finish_non_exhaustive()
    }
}

/// The world a slot name requires, or an error for an unknown slot.
pub fn slot_world(slot: &str) -> Result<World, PluginError> {
    let valid_tail = |t: &str| {
        !t.is_empty() && t.len() <= 64 && t.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    };
    match slot.split_once('/') {
        None if slot == "preemption" => Ok(World::Preemption),
        Some(("placement", t)) if valid_tail(t) => Ok(World::Placement),
        Some(("lifecycle", "batch" | "stateless" | "stateful" | "daemon")) => Ok(World::Lifecycle),
        _ => Err(PluginError::UnknownSlot(slot.to_string())),
    }
}

fn check_name(field: &'static str, value: &str) -> Result<(), PluginError> {
    let ok = !value.is_empty()
        && value.len() <= 64
        && value.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'));
    if ok { Ok(()) } else { Err(PluginError::InvalidName { field, value: value.to_string() }) }
}

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

impl Registry {
    /// Opens a registry over `store`, loading every stored version and each
    /// slot's active version. A stored version that no longer loads is
    /// logged and skipped; its slot falls back to the previous one or native.
    pub fn open(runtime: Arc<PluginRuntime>, store: Arc<dyn VersionStore>) -> Result<Registry, PluginError> {
        let registry = Registry {
            runtime,
            store,
            slots: RwLock::new(BTreeMap::new()),
            natives: RwLock::new(BTreeMap::new()),
            admin: Mutex::new(()),
            default_candidates: Mutex::new(Candidates::Auto),
        };
        let versions = registry.store.load_versions().map_err(PluginError::Storage)?;
        for (record, wasm) in versions {
            let id = record.id();
            match registry.load_version(record, &wasm) {
                Ok(()) => {}
                Err(e) => tracing::warn!(version = %id, error = %e, "stored plugin version does not load; skipped"),
            }
        }
        let histories = registry.store.load_histories().map_err(PluginError::Storage)?;
        for (slot_name, history) in histories {
            let Ok(slot) = registry.slot(&slot_name) else { continue };
            let kept: Vec<String> = history.into_iter().filter(|id| slot.find(id).is_some()).collect();
            slot.active.store(kept.last().and_then(|id| slot.find(id)));
            if let Ok(mut h) = slot.history.lock() {
                *h = kept;
            }
        }
        Ok(registry)
    }

    fn load_version(&self, record: VersionRecord, wasm: &[u8]) -> Result<(), PluginError> {
        let slot = self.slot(&record.slot)?;
        let (component, _) = self.runtime.compile(wasm)?;
        let prepared = self.runtime.prepare(&component, slot.world, &slot.name)?;
        prepared.set_deadline(record.deadline_ms.map(Duration::from_millis));
        let id = record.id();
        let version =
            Arc::new(Version { record: Mutex::new(record), id, prepared, metrics: VersionMetrics::default() });
        slot.versions.write().map_err(|e| PluginError::Runtime(e.to_string()))?.push(version);
        Ok(())
    }

    /// The candidates of every placement slot whose active version and slot
    /// set none ([`Candidates::Auto`] unless changed): the process's own
    /// configuration, or a simulation's `--candidates`.
    pub fn set_default_candidates(&self, candidates: Candidates) {
        *self.default_candidates.lock().unwrap_or_else(|e| e.into_inner()) = candidates;
    }

    fn default_candidates(&self) -> Candidates {
        *self.default_candidates.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The runtime this registry compiles and calls with.
    pub fn runtime(&self) -> &Arc<PluginRuntime> {
        &self.runtime
    }

    fn slot(&self, name: &str) -> Result<Arc<Slot>, PluginError> {
        let world = slot_world(name)?;
        if let Some(s) = self.slots.read().map_err(|e| PluginError::Runtime(e.to_string()))?.get(name) {
            return Ok(s.clone());
        }
        let mut slots = self.slots.write().map_err(|e| PluginError::Runtime(e.to_string()))?;
        Ok(slots
            .entry(name.to_string())
            .or_insert_with(|| {
                Arc::new(Slot {
                    name: name.to_string(),
                    world,
                    versions: RwLock::new(Vec::new()),
                    active: ArcSwapOption::empty(),
                    history: Mutex::new(Vec::new()),
                    consecutive_failures: AtomicU32::new(0),
                    shadow: ArcSwapOption::empty(),
                    fallbacks: AtomicU64::new(0),
                    candidates: Mutex::new(None),
                })
            })
            .clone())
    }

    /// Replaces the native fallback of `slot` (see [`crate::natives`]); it
    /// must be of the slot's world.
    pub fn set_native(&self, slot: &str, native: NativePolicy) -> Result<(), PluginError> {
        let world = slot_world(slot)?;
        if native.policy.world() != world {
            return Err(PluginError::UnknownSlot(format!("{slot} (a {} native cannot serve it)", native.name)));
        }
        self.natives.write().map_err(|e| PluginError::Runtime(e.to_string()))?.insert(slot.to_string(), native);
        Ok(())
    }

    /// The native fallback of `slot`: one set for it, else the built-in one.
    fn native(&self, slot: &str) -> Option<NativePolicy> {
        let set = self.natives.read().ok().and_then(|m| m.get(slot).cloned());
        set.or_else(|| natives::builtin(slot))
    }

    /// Every slot that has versions, with metrics.
    pub fn list(&self) -> Vec<SlotInfo> {
        let Ok(slots) = self.slots.read() else { return Vec::new() };
        slots
            .values()
            .map(|s| SlotInfo {
                slot: s.name.clone(),
                world: s.world,
                active: s.active.load().as_ref().map(|v| v.id.clone()),
                shadow: s.shadow.load().as_ref().map(|sh| sh.version.id.clone()),
                shadow_report: s.shadow.load().as_ref().and_then(|sh| sh.report.lock().ok().map(|r| r.clone())),
                versions: s
                    .versions
                    .read()
                    .map(|vs| {
                        vs.iter()
                            .map(|v| VersionInfo {
                                record: v.record(),
                                metrics: v.metrics.snapshot(),
                                warm_instances: v.prepared.warm_count(),
                                batched: v.prepared.is_batched(),
                            })
                            .collect()
                    })
                    .unwrap_or_default(),
                fallbacks: s.fallbacks.load(Ordering::Relaxed),
                slot_candidates: s.candidates().0,
                candidates: s.candidates().1.unwrap_or_else(|| self.default_candidates()),
            })
            .collect()
    }

    /// The id of the slot's active version, if any.
    pub fn active(&self, slot_name: &str) -> Result<Option<String>, PluginError> {
        Ok(self.slot(slot_name)?.active.load().as_ref().map(|v| v.id.clone()))
    }
}

//! The registry of slots: versions, the active one, hot swap, rollback,
//! shadow runs, fallback and automatic rollback.
//!
//! A slot's active version is an `Arc` behind an atomic pointer. A call
//! loads that pointer once and runs entirely on the version it loaded, so
//! activating another version takes effect from the next call while calls in
//! flight finish on the old one, and no call ever mixes two versions.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::mpsc::{SyncSender, TrySendError};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use arc_swap::ArcSwapOption;
use paceline_plugin_sdk::types as sdk;
use paceline_plugin_sdk::validate::{self, Violation};

use crate::error::{CallError, FaultKind, PluginError};
use crate::metrics::{MetricsSnapshot, VersionMetrics};
use crate::natives::{self, Native, NativePolicy};
use crate::persist::{VersionRecord, VersionState, VersionStore};
use crate::runtime::{GpuUnit, PluginRuntime, Prepared, PreparedWorld, World, call_error};
use crate::samples;

/// Time the deploy self-test may take; cases past it are not run.
pub const SELF_TEST_BUDGET: Duration = Duration::from_secs(2);

/// Inputs of the self-test as JSON and as a hash, whatever their type.
mod erased {
    pub(crate) trait Json {
        fn json(&self) -> String;
        fn hash(&self) -> String;
    }
    impl<T: serde::Serialize> Json for T {
        fn json(&self) -> String {
            serde_json::to_string(self).unwrap_or_default()
        }
        fn hash(&self) -> String {
            crate::runtime::input_hash(self)
        }
    }
}

/// A native fallback ready to answer one call: its name and the call.
type NativeCall<'a, O> = (&'static str, Box<dyn Fn() -> O + 'a>);

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

/// Options of [`Registry::deploy`].
#[derive(Clone, Copy, Debug)]
pub struct DeployOptions {
    /// Run the component on sample inputs before accepting it.
    pub self_test: bool,
}

impl Default for DeployOptions {
    fn default() -> Self {
        DeployOptions { self_test: true }
    }
}

/// What `deploy` reports.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Deployed {
    /// The new version.
    pub record: VersionRecord,
    /// Compilation came from the cache.
    pub from_cache: bool,
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
}

/// Decision differences between a shadowed candidate and the active version.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct ShadowReport {
    /// The candidate.
    pub candidate: String,
    /// Inputs compared.
    pub compared: u64,
    /// Inputs where the decisions were identical.
    pub identical: u64,
    /// Placement: tasks whose host (or placed/unplaced status) differed, summed.
    pub tasks_differing: u64,
    /// Calls where the candidate failed.
    pub candidate_faults: u64,
    /// Inputs skipped because the shadow worker was busy.
    pub skipped: u64,
    /// Up to ten examples of differences, as text.
    pub samples: Vec<String>,
    /// The latest [`MAX_DISAGREEMENTS`] differing decisions, one per task,
    /// oldest first (a readable diff: what each version chose).
    pub disagreements: Vec<Disagreement>,
}

/// Disagreements a shadow report keeps (the newest; older ones are dropped).
pub const MAX_DISAGREEMENTS: usize = 50;

/// One task the active and the shadowed version decided differently.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Disagreement {
    /// When it was compared, milliseconds since the Unix epoch.
    pub at_ms: u64,
    /// `placement` or `preemption`.
    pub kind: &'static str,
    /// The placement round (0 for preemption).
    pub round: u64,
    /// The task: its name from the caller's [`Names`] (`job/instance`), or
    /// its place in the request when the caller named none.
    pub task: String,
    /// What the active version decided for it: a host, `not placed (reason)`;
    /// `preempted (reason)` or `kept`.
    pub active: String,
    /// What the shadowed version decided, in the same words.
    pub shadow: String,
}

/// Names of a placement request's tasks and hosts, in the request's order,
/// for the shadow report's rows. Either may be empty (or short): a task or
/// host without a name is shown by its place in the request.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Names {
    /// One per `PlacementRequest::tasks`, e.g. `job-id/3`.
    pub tasks: Vec<String>,
    /// One per `PlacementRequest::hosts`: the host name.
    pub hosts: Vec<String>,
}

impl ShadowReport {
    /// Keeps `rows`, dropping the oldest beyond [`MAX_DISAGREEMENTS`].
    fn keep(&mut self, rows: impl IntoIterator<Item = Disagreement>) {
        self.disagreements.extend(rows);
        let over = self.disagreements.len().saturating_sub(MAX_DISAGREEMENTS);
        self.disagreements.drain(..over);
    }
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

type ShadowJob = Box<dyn FnOnce() + Send>;

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

    /// Compiles, checks against the slot's world, self-tests and stores a
    /// new version. It does not serve until [`Registry::activate`].
    pub fn deploy(
        &self,
        slot_name: &str,
        name: &str,
        version: &str,
        wasm: &[u8],
        options: DeployOptions,
    ) -> Result<Deployed, PluginError> {
        check_name("name", name)?;
        check_name("version", version)?;
        let slot = self.slot(slot_name)?;
        let _admin = self.admin.lock().map_err(|e| PluginError::Runtime(e.to_string()))?;
        let id = format!("{name}@{version}");
        if slot.find(&id).is_some() {
            return Err(PluginError::Duplicate { slot: slot_name.to_string(), version: id });
        }
        let (component, info) = self.runtime.compile(wasm)?;
        let prepared = self.runtime.prepare(&component, slot.world, slot_name)?;
        let record = VersionRecord {
            slot: slot_name.to_string(),
            name: name.to_string(),
            version: version.to_string(),
            sha256: PluginRuntime::sha256_hex(wasm),
            world: slot.world,
            deployed_at_ms: now_ms(),
            state: VersionState::Ready,
            deadline_ms: None,
        };
        let candidate = Version {
            record: Mutex::new(record.clone()),
            id: id.clone(),
            prepared,
            metrics: VersionMetrics::default(),
        };
        if options.self_test {
            if let Err(e) = self.self_test(&candidate) {
                tracing::warn!(slot = slot_name, version = %id, reason = %e, "plugin deploy refused by its self-test");
                return Err(e);
            }
            // A version that is not active holds no pooled slots.
            candidate.prepared.drain_warm();
        }
        self.store.save_version(&record, wasm).map_err(PluginError::Storage)?;
        slot.versions.write().map_err(|e| PluginError::Runtime(e.to_string()))?.push(Arc::new(candidate));
        tracing::info!(slot = slot_name, version = %id, sha256 = %record.sha256, "plugin deployed");
        Ok(Deployed { record, from_cache: info.from_cache })
    }

    /// Runs the candidate on the generated corpus ([`samples`]) and checks
    /// every answer with the same validation that guards every call. The
    /// first violation or fault refuses the deploy, naming the case (world,
    /// position in the corpus, seed) and carrying its input as JSON. Bounded
    /// by [`SELF_TEST_BUDGET`]: the corpus is always walked in the same
    /// order, so a slow machine runs a prefix of it, never other cases.
    fn self_test(&self, v: &Version) -> Result<(), PluginError> {
        let started = Instant::now();
        let over = || started.elapsed() > SELF_TEST_BUDGET;
        let fail = |case: &str, input: &dyn erased::Json, (kind, message): (FaultKind, String)| {
            let mut json = input.json();
            if json.len() > 4000 {
                // On a character boundary: the input may hold any text.
                let cut = (0..=4000).rev().find(|&i| json.is_char_boundary(i)).unwrap_or(0);
                json.truncate(cut);
                json.push('…');
            }
            PluginError::SelfTest(CallError {
                kind,
                version: v.id.clone(),
                message: format!(
                    "{case} of the generated corpus (seed {:#x}): {message}; input: {json}",
                    samples::SEED
                ),
                input_hash: input.hash(),
            })
        };
        let invalid = |e: Violation| (FaultKind::InvalidAnswer, e.to_string());
        let mut cases = 0usize;
        match &v.prepared.0 {
            PreparedWorld::Placement(_) | PreparedWorld::PlacementGpu(_) => {
                // A component built before 0.1.2 is tried on what a 0.1.1
                // host sends (no GPU side): it places whole GPUs only, and a
                // round with a share it places where no device takes it is
                // refused and served by the fallback (decision 0035).
                let gpu_world = matches!(v.prepared.0, PreparedWorld::PlacementGpu(_));
                for (case, mut req) in samples::placement().enumerate() {
                    if over() {
                        break;
                    }
                    if !gpu_world {
                        req.gpu_hosts.clear();
                        req.gpu_tasks.clear();
                        req.gpu_workload.clear();
                    }
                    cases += 1;
                    let what = format!("placement case {case}");
                    let out = self.runtime.call_placement(&v.prepared, &req).map_err(|e| fail(&what, &req, e))?;
                    validate::check_placement(&req, &out).map_err(|e| fail(&what, &req, invalid(e)))?;
                }
            }
            PreparedWorld::Preemption(_) | PreparedWorld::PreemptionGpu(_) => {
                // A component built before 0.1.3 sees GPU shares as whole
                // devices and is judged in them (`judge_victims`).
                for (case, req) in samples::preemption().enumerate() {
                    if over() {
                        break;
                    }
                    cases += 1;
                    let what = format!("preemption case {case}");
                    let out = self.runtime.call_preemption(&v.prepared, &req).map_err(|e| fail(&what, &req, e))?;
                    judge_victims(&req, &out).map_err(|e| fail(&what, &req, invalid(e)))?;
                }
            }
            PreparedWorld::Lifecycle(_) | PreparedWorld::LifecycleBatched(_) => {
                'sequences: for (case, mut seq) in samples::lifecycle().enumerate() {
                    let mut event = sdk::Event::JobCreated;
                    for step in 0..samples::LIFECYCLE_STEPS {
                        if over() {
                            break 'sequences;
                        }
                        cases += 1;
                        let input = (&seq.job, &seq.tasks, &event);
                        let what = format!("lifecycle sequence {case}, step {step}");
                        let out = self
                            .runtime
                            .call_lifecycle(&v.prepared, &seq.job, &seq.tasks, &event)
                            .map_err(|e| fail(&what, &input, e))?;
                        validate::check_actions(&seq.job, &seq.tasks, &out)
                            .map_err(|e| fail(&what, &input, invalid(e)))?;
                        // The batched export too, with the event twice: the
                        // path the job manager takes for bursts.
                        let events = [event.clone(), event.clone()];
                        let batched = self
                            .runtime
                            .call_lifecycle_batch(&v.prepared, &seq.job, &seq.tasks, &events)
                            .map_err(|e| fail(&what, &input, e))?;
                        validate::check_actions(&seq.job, &seq.tasks, &batched)
                            .map_err(|e| fail(&what, &input, invalid(e)))?;
                        seq.apply(&out);
                        event = seq.next_event();
                    }
                }
            }
        }
        tracing::debug!(version = %v.id, cases, took_ms = started.elapsed().as_millis() as u64, "plugin self-test passed");
        Ok(())
    }

    /// Makes `id` (`name@version`) the slot's active version, from the next call on.
    pub fn activate(&self, slot_name: &str, id: &str) -> Result<(), PluginError> {
        let slot = self.slot(slot_name)?;
        let _admin = self.admin.lock().map_err(|e| PluginError::Runtime(e.to_string()))?;
        let version = slot
            .find(id)
            .ok_or_else(|| PluginError::UnknownVersion { slot: slot_name.to_string(), version: id.to_string() })?;
        let mut history = slot.history.lock().map_err(|e| PluginError::Runtime(e.to_string()))?;
        let mut next = history.clone();
        next.retain(|h| h != id);
        next.push(id.to_string());
        self.store.save_history(slot_name, &next).map_err(PluginError::Storage)?;
        self.swap_active(&slot, &history, &version);
        *history = next;
        slot.consecutive_failures.store(0, Ordering::Relaxed);
        tracing::info!(slot = slot_name, version = id, "plugin activated");
        Ok(())
    }

    fn swap_active(&self, slot: &Slot, old_history: &[String], new: &Arc<Version>) {
        if let Some(old) = old_history.last().and_then(|id| slot.find(id))
            && old.id != new.id
        {
            if old.record().state == VersionState::Active {
                let _ = self.store.update_version(&old.set_state(VersionState::Retired));
            }
            old.prepared.drain_warm();
        }
        let _ = self.store.update_version(&new.set_state(VersionState::Active));
        slot.active.store(Some(new.clone()));
    }

    /// Gives version `id` (`name@version`) of the slot a call deadline of its
    /// own, or back to the runtime's with `None`, from its next call on, and
    /// records it with the version. For plugins whose language cannot answer
    /// a large round within the default (Python and JavaScript components
    /// interpret their code: docs/plugin-guide.md, docs/benchmarks.md). The
    /// self-test of a deploy runs before a deadline can be set, under the
    /// runtime's default, on small samples.
    pub fn set_deadline(&self, slot_name: &str, id: &str, deadline: Option<Duration>) -> Result<(), PluginError> {
        let slot = self.slot(slot_name)?;
        let _admin = self.admin.lock().map_err(|e| PluginError::Runtime(e.to_string()))?;
        let version = slot
            .find(id)
            .ok_or_else(|| PluginError::UnknownVersion { slot: slot_name.to_string(), version: id.to_string() })?;
        version.prepared.set_deadline(deadline);
        let record = {
            let mut r = version.record.lock().unwrap_or_else(|e| e.into_inner());
            r.deadline_ms = version.prepared.deadline().map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
            r.clone()
        };
        self.store.update_version(&record).map_err(PluginError::Storage)?;
        tracing::info!(slot = slot_name, version = id, deadline_ms = ?record.deadline_ms, "plugin deadline set");
        Ok(())
    }

    /// Goes back to the version active before the current one. Returns the
    /// id now active, if any.
    ///
    /// Refused ([`PluginError::NothingToRollBack`], saying what the slot
    /// holds) when no earlier version that has not failed is there to go
    /// back to: the slot would be left with no active version and its
    /// native policy would serve unannounced (issue 43). The automatic
    /// rollback of a failing version still falls back to the native policy.
    pub fn rollback(&self, slot_name: &str) -> Result<Option<String>, PluginError> {
        let slot = self.slot(slot_name)?;
        let _admin = self.admin.lock().map_err(|e| PluginError::Runtime(e.to_string()))?;
        self.rollback_locked(&slot, None)
    }

    fn rollback_locked(&self, slot: &Slot, mark_failed: Option<&Arc<Version>>) -> Result<Option<String>, PluginError> {
        let mut history = slot.history.lock().map_err(|e| PluginError::Runtime(e.to_string()))?;
        let Some(current) = history.last().cloned() else {
            return Err(PluginError::NothingToRollBack {
                slot: slot.name.clone(),
                detail: format!("no version is active (the native policy serves it); {}", Self::holdings(slot)),
            });
        };
        let mut next = history.clone();
        next.pop();
        // Skip versions that failed since they were active.
        while next.last().and_then(|id| slot.find(id)).is_some_and(|v| v.record().state == VersionState::Failed) {
            next.pop();
        }
        // An operator's rollback never empties the slot: it would leave no
        // active version and the native policy serving without anyone
        // having chosen it. Only a failing version is rolled back to nothing.
        if next.is_empty() && mark_failed.is_none() {
            return Err(PluginError::NothingToRollBack {
                slot: slot.name.clone(),
                detail: format!(
                    "{current} is active and no version that has not failed was active before it; {}; \
                     activate another version instead (`paceline plugin activate {} NAME@VERSION`)",
                    Self::holdings(slot),
                    slot.name
                ),
            });
        }
        self.store.save_history(&slot.name, &next).map_err(PluginError::Storage)?;
        if let Some(v) = slot.find(&current) {
            let state = if mark_failed.is_some() { VersionState::Failed } else { VersionState::Retired };
            let _ = self.store.update_version(&v.set_state(state));
            v.prepared.drain_warm();
        }
        let target = next.last().and_then(|id| slot.find(id));
        if let Some(t) = &target {
            let _ = self.store.update_version(&t.set_state(VersionState::Active));
        }
        slot.active.store(target.clone());
        *history = next;
        slot.consecutive_failures.store(0, Ordering::Relaxed);
        Ok(target.map(|t| t.id.clone()))
    }

    /// The slot's versions and their states, for an error message.
    fn holdings(slot: &Slot) -> String {
        let versions = slot.versions.read().map(|v| v.clone()).unwrap_or_default();
        if versions.is_empty() {
            return "it holds no deployed version".to_string();
        }
        let listed: Vec<String> = versions
            .iter()
            .map(|v| {
                let state = match v.record().state {
                    VersionState::Ready => "deployed, never active",
                    VersionState::Active => "active",
                    VersionState::Retired => "retired",
                    VersionState::Failed => "failed",
                };
                format!("{} {state}", v.id)
            })
            .collect();
        format!("versions: {}", listed.join(", "))
    }

    /// Starts comparing `id`'s decisions with the active version's on every
    /// call, on a background thread; the candidate's answers are never used.
    pub fn shadow(&self, slot_name: &str, id: &str) -> Result<(), PluginError> {
        let slot = self.slot(slot_name)?;
        let version = slot
            .find(id)
            .ok_or_else(|| PluginError::UnknownVersion { slot: slot_name.to_string(), version: id.to_string() })?;
        let (tx, rx) = std::sync::mpsc::sync_channel::<ShadowJob>(16);
        std::thread::Builder::new()
            .name(format!("shadow-{slot_name}"))
            .spawn(move || {
                for job in rx {
                    job();
                }
            })
            .map_err(|e| PluginError::Runtime(e.to_string()))?;
        let report = Arc::new(Mutex::new(ShadowReport { candidate: id.to_string(), ..ShadowReport::default() }));
        slot.shadow.store(Some(Arc::new(Shadow { version, jobs: tx, report })));
        Ok(())
    }

    /// Stops the slot's shadow run and returns its final report.
    pub fn stop_shadow(&self, slot_name: &str) -> Result<Option<ShadowReport>, PluginError> {
        let slot = self.slot(slot_name)?;
        Ok(slot.shadow.swap(None).and_then(|s| s.report.lock().ok().map(|r| r.clone())))
    }

    /// The slot's shadow report so far.
    pub fn shadow_report(&self, slot_name: &str) -> Result<Option<ShadowReport>, PluginError> {
        let slot = self.slot(slot_name)?;
        Ok(slot.shadow.load_full().and_then(|s| s.report.lock().ok().map(|r| r.clone())))
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
            })
            .collect()
    }

    /// The id of the slot's active version, if any.
    pub fn active(&self, slot_name: &str) -> Result<Option<String>, PluginError> {
        Ok(self.slot(slot_name)?.active.load().as_ref().map(|v| v.id.clone()))
    }

    /// Runs one call on the active version, then on earlier good versions,
    /// then on the native policy, until one gives a valid answer.
    fn serve<I, O>(
        &self,
        slot: &Arc<Slot>,
        input: &I,
        invoke: impl Fn(&Prepared) -> Result<O, (FaultKind, String)>,
        check: impl Fn(&O) -> Result<(), Violation>,
        native: Option<NativeCall<'_, O>>,
    ) -> Result<Answer<O>, PluginError>
    where
        I: serde::Serialize,
    {
        let mut faults = Vec::new();
        let active = slot.active.load_full();
        let mut tried: Vec<String> = Vec::new();
        let mut candidate = active.clone();
        while let Some(v) = candidate {
            tried.push(v.id.clone());
            let started = Instant::now();
            let outcome = invoke(&v.prepared).and_then(|o| match check(&o) {
                Ok(()) => Ok(o),
                Err(violation) => Err((FaultKind::InvalidAnswer, violation.to_string())),
            });
            match outcome {
                Ok(o) => {
                    v.metrics.record(started.elapsed(), None);
                    if active.as_ref().is_some_and(|a| Arc::ptr_eq(a, &v)) {
                        slot.consecutive_failures.store(0, Ordering::Relaxed);
                    }
                    if !faults.is_empty() {
                        slot.fallbacks.fetch_add(1, Ordering::Relaxed);
                    }
                    return Ok(Answer {
                        value: o,
                        served_by: ServedBy::Version(v.id.clone()),
                        faults,
                        gpu_unit: GpuUnit::Milli,
                    });
                }
                Err(fault) => {
                    v.metrics.record(started.elapsed(), Some(fault.0));
                    let err = call_error(&v.id, input, fault);
                    tracing::warn!(slot = %slot.name, version = %v.id, kind = %err.kind, input = %err.input_hash, message = %err.message, "plugin call failed; falling back");
                    faults.push(err);
                    if active.as_ref().is_some_and(|a| Arc::ptr_eq(a, &v)) {
                        self.note_failure(slot, &v);
                    }
                }
            }
            candidate = self.previous_good(slot, &tried);
        }
        match native {
            Some((name, f)) => {
                // A slot with no version at all is served natively by design;
                // only an answer given after a fault is a fallback.
                if !faults.is_empty() {
                    slot.fallbacks.fetch_add(1, Ordering::Relaxed);
                }
                let value = f();
                // The same contract as a component's answer: a native set by
                // `set_native` is code from outside this crate, and even a
                // built-in one must not put a broken answer into the cluster.
                // There is nothing below it to fall back to, so the call fails.
                if let Err(violation) = check(&value) {
                    let err =
                        call_error(&format!("native {name}"), input, (FaultKind::InvalidAnswer, violation.to_string()));
                    tracing::error!(slot = %slot.name, native = name, input = %err.input_hash, message = %err.message, "native policy answer refused");
                    return Err(PluginError::Call(err));
                }
                Ok(Answer { value, served_by: ServedBy::Native(name), faults, gpu_unit: GpuUnit::Milli })
            }
            None => Err(PluginError::Call(faults.pop().unwrap_or_else(|| CallError {
                kind: FaultKind::Instantiate,
                version: slot.name.clone(),
                message: "no active version and no native policy for this slot".into(),
                input_hash: crate::runtime::input_hash(input),
            }))),
        }
    }

    /// An answer that `served_by` gave through `slot_name` passed validation
    /// but was refused downstream (by the resource manager or the job
    /// manager, at `stage`) for `reason`. It counts as a fault of that
    /// version as an invalid answer does, under its own kind: a
    /// `refused_downstream` error in its metrics, a warning with the reason, and a step towards
    /// automatic rollback while it is the active version. A native answer
    /// is only logged (there is nothing to roll back to below it).
    pub fn report_refusal(&self, slot_name: &str, served_by: &ServedBy, stage: &str, reason: &str) {
        let ServedBy::Version(id) = served_by else {
            tracing::error!(slot = slot_name, served_by = ?served_by, stage, reason, "native plugin answer refused downstream");
            return;
        };
        let Ok(slot) = self.slot(slot_name) else { return };
        let Some(v) = slot.find(id) else { return };
        v.metrics.record_fault(FaultKind::RefusedDownstream);
        tracing::warn!(slot = slot_name, version = %id, stage, reason, "plugin answer refused downstream; counted as a fault");
        if slot.active.load().as_ref().is_some_and(|a| Arc::ptr_eq(a, &v)) {
            self.note_failure(&slot, &v);
        }
    }

    /// The most recently active version not yet tried and not failed.
    fn previous_good(&self, slot: &Slot, tried: &[String]) -> Option<Arc<Version>> {
        let history = slot.history.lock().ok()?.clone();
        history
            .iter()
            .rev()
            .filter(|id| !tried.contains(id))
            .filter_map(|id| slot.find(id))
            .find(|v| v.record().state != VersionState::Failed)
    }

    fn note_failure(&self, slot: &Slot, v: &Arc<Version>) {
        let n = slot.consecutive_failures.fetch_add(1, Ordering::Relaxed) + 1;
        if n < self.runtime.config().auto_rollback_after {
            return;
        }
        let Ok(_admin) = self.admin.lock() else { return };
        // Only roll back if the failing version is still the active one.
        if !slot.active.load().as_ref().is_some_and(|a| Arc::ptr_eq(a, v)) {
            return;
        }
        match self.rollback_locked(slot, Some(v)) {
            Ok(now) => {
                tracing::error!(slot = %slot.name, failed = %v.id, now_active = ?now, failures = n, "plugin rolled back automatically")
            }
            Err(e) => tracing::error!(slot = %slot.name, error = %e, "automatic rollback failed"),
        }
    }

    fn send_shadow(slot: &Slot, job: impl FnOnce(&Arc<Version>, &Mutex<ShadowReport>) + Send + 'static) {
        let Some(shadow) = slot.shadow.load_full() else { return };
        let (version, report) = (shadow.version.clone(), shadow.report.clone());
        let boxed: ShadowJob = Box::new(move || job(&version, &report));
        if let Err(TrySendError::Full(_)) = shadow.jobs.try_send(boxed)
            && let Ok(mut r) = shadow.report.lock()
        {
            r.skipped += 1;
        }
    }

    /// Places a round through the slot (e.g. `placement/batch`).
    pub fn place(
        &self,
        slot_name: &str,
        request: &sdk::PlacementRequest,
    ) -> Result<Answer<sdk::PlacementResult>, PluginError> {
        self.place_named(slot_name, request, Names::default)
    }

    /// Whether the slot has a shadow run (so a caller knows [`Names`] are
    /// worth building).
    pub fn is_shadowed(&self, slot_name: &str) -> bool {
        self.slot(slot_name).is_ok_and(|s| s.shadow.load().is_some())
    }

    /// [`Registry::place`], with the names of the request's tasks and hosts
    /// for the shadow report's rows; `names` is called only when the slot
    /// has a shadow run.
    pub fn place_named(
        &self,
        slot_name: &str,
        request: &sdk::PlacementRequest,
        names: impl FnOnce() -> Names,
    ) -> Result<Answer<sdk::PlacementResult>, PluginError> {
        let slot = self.slot(slot_name)?;
        if slot.world != World::Placement {
            return Err(PluginError::UnknownSlot(slot_name.to_string()));
        }
        let native = match self.native(slot_name) {
            Some(NativePolicy { name, policy: Native::Placement(f) }) => {
                let answer = move || {
                    let mut out = f(request);
                    paceline_plugin_sdk::placement::complete_grants(request, &mut out);
                    out
                };
                Some((name, Box::new(answer) as Box<dyn Fn() -> sdk::PlacementResult>))
            }
            _ => None,
        };
        let runtime = &self.runtime;
        let answer = self.serve(
            &slot,
            request,
            |p| runtime.call_placement(p, request),
            |o| validate::check_placement(request, o),
            native,
        )?;
        if slot.shadow.load().is_some() {
            let (req, active, names) = (request.clone(), answer.value.clone(), names());
            let runtime = self.runtime.clone();
            Self::send_shadow(&slot, move |v, report| {
                let started = Instant::now();
                let out = runtime.call_placement(&v.prepared, &req).and_then(|o| {
                    validate::check_placement(&req, &o)
                        .map(|_| o)
                        .map_err(|e| (FaultKind::InvalidAnswer, e.to_string()))
                });
                v.metrics.record(started.elapsed(), out.as_ref().err().map(|e| e.0));
                let Ok(mut r) = report.lock() else { return };
                r.compared += 1;
                match out {
                    Ok(o) => {
                        let rows = placement_disagreements(&req, &names, &active, &o, now_ms());
                        let differing = rows.len() as u64;
                        if differing == 0 {
                            r.identical += 1;
                        } else {
                            r.tasks_differing += differing;
                            r.keep(rows);
                            if r.samples.len() < 10 {
                                r.samples.push(format!(
                                    "round {}: {differing} of {} tasks placed differently",
                                    req.round,
                                    req.tasks.len()
                                ));
                            }
                        }
                    }
                    Err((kind, msg)) => {
                        r.candidate_faults += 1;
                        if r.samples.len() < 10 {
                            r.samples.push(format!("round {}: candidate failed ({kind}): {msg}", req.round));
                        }
                    }
                }
            });
        }
        Ok(answer)
    }

    /// Chooses preemption victims through the `preemption` slot.
    pub fn select_victims(&self, request: &sdk::PreemptionRequest) -> Result<Answer<Vec<sdk::Victim>>, PluginError> {
        let slot = self.slot("preemption")?;
        let runtime = &self.runtime;
        let native = match self.native("preemption") {
            // A native policy is built against the current SDK: milli-GPUs.
            Some(NativePolicy { name, policy: Native::Preemption(f) }) => Some((
                name,
                Box::new(move || (f(request), GpuUnit::Milli)) as Box<dyn Fn() -> (Vec<sdk::Victim>, GpuUnit)>,
            )),
            _ => None,
        };
        let judged =
            self.serve(&slot, request, |p| runtime.call_preemption(p, request), |o| judge_victims(request, o), native)?;
        let answer = Answer {
            value: judged.value.0,
            served_by: judged.served_by,
            faults: judged.faults,
            gpu_unit: judged.value.1,
        };
        if slot.shadow.load().is_some() {
            let (req, active) = (request.clone(), answer.value.clone());
            let runtime = self.runtime.clone();
            Self::send_shadow(&slot, move |v, report| {
                let out = runtime.call_preemption(&v.prepared, &req).map(|o| o.0);
                let Ok(mut r) = report.lock() else { return };
                r.compared += 1;
                match out {
                    Ok(o) if o == active => r.identical += 1,
                    Ok(o) => {
                        r.keep(victim_disagreements(&req, &active, &o, now_ms()));
                        if r.samples.len() < 10 {
                            r.samples.push(format!("active chose {} victims, candidate {}", active.len(), o.len()));
                        }
                    }
                    Err(_) => r.candidate_faults += 1,
                }
            });
        }
        Ok(answer)
    }

    /// Asks a lifecycle slot (`lifecycle/<kind>`) how to react to an event:
    /// [`Registry::on_events`] with a burst of one.
    pub fn on_event(
        &self,
        slot_name: &str,
        job: &sdk::JobView,
        tasks: &[sdk::TaskView],
        event: &sdk::Event,
    ) -> Result<Answer<Vec<sdk::Action>>, PluginError> {
        self.on_events(slot_name, job, tasks, std::slice::from_ref(event))
    }

    /// Asks a lifecycle slot about several events of one job in one call
    /// (`on-events`, WIT 0.1.1). A component built against 0.1.0, and the
    /// native fallback, answer each event in turn against the same views;
    /// the answers are concatenated.
    pub fn on_events(
        &self,
        slot_name: &str,
        job: &sdk::JobView,
        tasks: &[sdk::TaskView],
        events: &[sdk::Event],
    ) -> Result<Answer<Vec<sdk::Action>>, PluginError> {
        let slot = self.slot(slot_name)?;
        if slot.world != World::Lifecycle {
            return Err(PluginError::UnknownSlot(slot_name.to_string()));
        }
        let native = match self.native(slot_name) {
            Some(NativePolicy { name, policy: Native::Lifecycle(f) }) => {
                Some((name, Box::new(move || f(job, tasks, events)) as Box<dyn Fn() -> Vec<sdk::Action> + '_>))
            }
            _ => None,
        };
        let runtime = &self.runtime;
        self.serve(
            &slot,
            &(job, tasks, events),
            |p| runtime.call_lifecycle_batch(p, job, tasks, events),
            |o| validate::check_actions(job, tasks, o),
            native,
        )
    }
}

/// Checks a preemption answer in the GPU unit its component counted in:
/// milli-GPUs, or whole devices for a component built before 0.1.3 that
/// saw a request with GPU shares rounded up (it keeps working as it did).
fn judge_victims(
    request: &sdk::PreemptionRequest,
    (victims, unit): &(Vec<sdk::Victim>, GpuUnit),
) -> Result<(), Violation> {
    match unit {
        GpuUnit::Milli => validate::check_victims(request, victims),
        GpuUnit::Whole => validate::check_victims(&request.in_whole_gpus(), victims),
    }
}

/// The tasks whose outcome differs between two placement answers (`a` the
/// active version's, `b` the shadow's), one row each, in task order.
fn placement_disagreements(
    request: &sdk::PlacementRequest,
    names: &Names,
    a: &sdk::PlacementResult,
    b: &sdk::PlacementResult,
    at_ms: u64,
) -> Vec<Disagreement> {
    // What an answer did with each task: a host index, or why not.
    let outcome = |r: &sdk::PlacementResult| -> BTreeMap<u32, Result<u32, sdk::UnplacedReason>> {
        let placed = r.assignments.iter().map(|x| (x.task, Ok(x.host)));
        placed.chain(r.unplaced.iter().map(|u| (u.task, Err(u.reason)))).collect()
    };
    let (oa, ob) = (outcome(a), outcome(b));
    let host = |h: u32| match names.hosts.get(h as usize) {
        Some(name) => name.clone(),
        None => format!("host #{h}"),
    };
    let said = |o: Option<&Result<u32, sdk::UnplacedReason>>| match o {
        Some(Ok(h)) => host(*h),
        Some(Err(reason)) => format!("not placed ({})", reason.as_str()),
        None => "not placed".to_string(),
    };
    let task = |t: u32| match (names.tasks.get(t as usize), request.tasks.get(t as usize)) {
        (Some(name), _) => name.clone(),
        (None, Some(x)) => format!("job #{} instance {}", x.job, x.instance),
        (None, None) => format!("task #{t}"),
    };
    let tasks: std::collections::BTreeSet<u32> = oa.keys().chain(ob.keys()).copied().collect();
    tasks
        .into_iter()
        // Two unplaced answers differ only in wording: not a disagreement.
        .filter(|t| oa.get(t).and_then(|o| o.ok()) != ob.get(t).and_then(|o| o.ok()))
        .map(|t| Disagreement {
            at_ms,
            kind: "placement",
            round: request.round,
            task: task(t),
            active: said(oa.get(&t)),
            shadow: said(ob.get(&t)),
        })
        .collect()
}

/// The running tasks one preemption answer takes as victims and the other
/// does not (or for another reason), one row each.
fn victim_disagreements(
    request: &sdk::PreemptionRequest,
    a: &[sdk::Victim],
    b: &[sdk::Victim],
    at_ms: u64,
) -> Vec<Disagreement> {
    let chosen =
        |vs: &[sdk::Victim]| -> BTreeMap<u32, sdk::VictimReason> { vs.iter().map(|v| (v.task, v.reason)).collect() };
    let (ca, cb) = (chosen(a), chosen(b));
    let said = |r: Option<&sdk::VictimReason>| match r {
        Some(reason) => format!("preempted ({})", victim_reason(*reason)),
        None => "kept".to_string(),
    };
    // The request has no task names: the task's place, pool and priority.
    let task = |t: u32| match request.running.get(t as usize) {
        Some(x) => {
            let pool = request.pools.get(x.pool as usize).map_or("?", |p| p.path.as_str());
            format!("running task #{t} (pool {pool}, priority {})", x.priority)
        }
        None => format!("running task #{t}"),
    };
    let tasks: std::collections::BTreeSet<u32> = ca.keys().chain(cb.keys()).copied().collect();
    tasks
        .into_iter()
        .filter(|t| ca.get(t) != cb.get(t))
        .map(|t| Disagreement {
            at_ms,
            kind: "preemption",
            round: 0,
            task: task(t),
            active: said(ca.get(&t)),
            shadow: said(cb.get(&t)),
        })
        .collect()
}

fn victim_reason(r: sdk::VictimReason) -> &'static str {
    match r {
        sdk::VictimReason::OverEntitlement => "over_entitlement",
        sdk::VictimReason::HigherPriority => "higher_priority",
        sdk::VictimReason::Revoked => "revoked",
    }
}

#[cfg(test)]
mod shadow_diff_tests {
    use super::*;

    fn request(tasks: u32, hosts: usize) -> sdk::PlacementRequest {
        sdk::PlacementRequest {
            round: 7,
            hosts: vec![sdk::HostOffer::default(); hosts],
            tasks: (0..tasks).map(|i| sdk::Task { job: 0, instance: i, ..Default::default() }).collect(),
            ..Default::default()
        }
    }

    fn placed(hosts: &[Option<u32>]) -> sdk::PlacementResult {
        let mut r = sdk::PlacementResult::default();
        for (t, h) in hosts.iter().enumerate() {
            match h {
                Some(h) => r.assignments.push(sdk::Assignment { task: t as u32, host: *h }),
                None => r.unplaced.push(sdk::Unplaced {
                    task: t as u32,
                    reason: sdk::UnplacedReason::InsufficientResources,
                    detail: String::new(),
                }),
            }
        }
        r
    }

    #[test]
    fn placement_rows_name_each_differing_task_with_both_hosts() {
        let names =
            Names { tasks: vec!["j/0".into(), "j/1".into(), "j/2".into()], hosts: vec!["h-a".into(), "h-b".into()] };
        let rows = placement_disagreements(
            &request(3, 2),
            &names,
            &placed(&[Some(0), Some(0), None]),
            &placed(&[Some(0), Some(1), Some(1)]),
            5,
        );
        assert_eq!(
            rows,
            vec![
                Disagreement {
                    at_ms: 5,
                    kind: "placement",
                    round: 7,
                    task: "j/1".into(),
                    active: "h-a".into(),
                    shadow: "h-b".into()
                },
                Disagreement {
                    at_ms: 5,
                    kind: "placement",
                    round: 7,
                    task: "j/2".into(),
                    active: "not placed (insufficient_resources)".into(),
                    shadow: "h-b".into()
                },
            ]
        );
        // Without names, the request's places; the same answers agree.
        let unnamed =
            placement_disagreements(&request(2, 2), &Names::default(), &placed(&[Some(1)]), &placed(&[None]), 0);
        assert_eq!((unnamed[0].task.as_str(), unnamed[0].active.as_str()), ("job #0 instance 0", "host #1"));
        let same = placed(&[Some(0), None]);
        assert!(placement_disagreements(&request(2, 2), &names, &same, &same, 0).is_empty());
    }

    #[test]
    fn victim_rows_say_who_each_version_preempts() {
        let request = sdk::PreemptionRequest {
            pools: vec![sdk::PoolView { path: "/a".into(), ..Default::default() }],
            running: vec![sdk::RunningTask { priority: 3, ..Default::default() }; 3],
            needs: vec![],
            ..Default::default()
        };
        let v = |task| sdk::Victim { task, need: 0, reason: sdk::VictimReason::HigherPriority };
        let rows = victim_disagreements(&request, &[v(0), v(1)], &[v(1), v(2)], 9);
        let got: Vec<_> = rows.iter().map(|r| (r.task.as_str(), r.active.as_str(), r.shadow.as_str())).collect();
        assert_eq!(
            got,
            vec![
                ("running task #0 (pool /a, priority 3)", "preempted (higher_priority)", "kept"),
                ("running task #2 (pool /a, priority 3)", "kept", "preempted (higher_priority)"),
            ]
        );
    }

    #[test]
    fn a_report_keeps_the_newest_disagreements() {
        let mut r = ShadowReport::default();
        let row = |i: usize| Disagreement { task: format!("t{i}"), ..Default::default() };
        r.keep((0..MAX_DISAGREEMENTS + 7).map(row));
        r.keep([row(1000)]);
        assert_eq!(r.disagreements.len(), MAX_DISAGREEMENTS);
        assert_eq!(r.disagreements[0].task, "t8", "the oldest went");
        assert_eq!(r.disagreements[MAX_DISAGREEMENTS - 1].task, "t1000");
    }
}

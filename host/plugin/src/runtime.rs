//! The wasmtime engine: compiling (with an on-disk cache), checking a
//! component against a world, and calling it inside the sandbox with a
//! deadline, a memory cap and optional fuel.

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use paceline_plugin_sdk::types as sdk;
use sha2::{Digest, Sha256};
use wasmtime::component::{Component, Linker};
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig, Store, Trap};

use crate::bindings;
use crate::config::RuntimeConfig;
use crate::error::{CallError, FaultKind, PluginError};
use crate::sandbox::CallState;

/// The world a component implements; a slot's name decides which one it needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum World {
    /// `paceline:scheduler/placement`.
    Placement,
    /// `paceline:scheduler/preemption`.
    Preemption,
    /// `paceline:scheduler/lifecycle`.
    Lifecycle,
}

impl World {
    /// The world's WIT name.
    pub fn as_str(self) -> &'static str {
        match self {
            World::Placement => "placement",
            World::Preemption => "preemption",
            World::Lifecycle => "lifecycle",
        }
    }
}

/// A component checked against its world, ready to instantiate cheaply.
/// Obtained from [`PluginRuntime::load`]; the registry holds one per version.
/// The third field is the version's own call deadline in milliseconds (0:
/// the runtime's `call_deadline`), see [`Prepared::set_deadline`].
#[derive(Clone)]
pub struct Prepared(pub(crate) PreparedWorld, Arc<Mutex<Vec<Warm>>>, Arc<AtomicU64>);

/// An instance kept between calls, with its store.
pub(crate) struct Warm {
    store: Store<CallState>,
    instance: WarmInstance,
    calls: u32,
}

enum WarmInstance {
    Placement(bindings::placement::Placement),
    PlacementGpu(bindings::placement_gpu::PlacementGpu),
    Preemption(bindings::preemption::Preemption),
    PreemptionGpu(bindings::preemption_gpu::PreemptionGpu),
    Lifecycle(bindings::lifecycle::Lifecycle),
    LifecycleBatched(bindings::lifecycle::batched::LifecycleBatched),
}

/// Warm instances kept per version: enough for the calls that overlap on
/// two cores, few enough not to pin pooled slots.
const WARM_PER_VERSION: usize = 4;

impl Prepared {
    /// Drops the warm instances, giving their pooled slots back. The
    /// registry calls it when a version stops being active, so versions that
    /// only wait for a rollback hold no slots.
    pub(crate) fn drain_warm(&self) {
        if let Ok(mut pool) = self.1.lock() {
            pool.clear();
        }
    }

    /// Whether this is a lifecycle component that answers many events in
    /// one `on-events` call (WIT 0.1.1); `false` for one built against 0.1.0.
    pub fn is_batched(&self) -> bool {
        matches!(self.0, PreparedWorld::LifecycleBatched(_))
    }

    /// Gives this version a call deadline of its own instead of the
    /// runtime's `call_deadline` (`None` goes back to it), from its next
    /// call on. For plugins whose language cannot answer a large round in
    /// the default deadline (docs/plugin-guide.md); rounded up to whole
    /// milliseconds, at least one.
    pub fn set_deadline(&self, deadline: Option<Duration>) {
        let ms = deadline.map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)).unwrap_or(0);
        self.2.store(ms, Ordering::Relaxed);
    }

    /// The version's own call deadline, if it has one.
    pub fn deadline(&self) -> Option<Duration> {
        match self.2.load(Ordering::Relaxed) {
            0 => None,
            ms => Some(Duration::from_millis(ms)),
        }
    }

    /// Warm instances held now.
    pub(crate) fn warm_count(&self) -> usize {
        self.1.lock().map(|p| p.len()).unwrap_or(0)
    }
}

#[derive(Clone)]
pub(crate) enum PreparedWorld {
    /// A placement built before 0.1.2: `place` only (whole GPUs).
    Placement(bindings::placement::PlacementPre<CallState>),
    /// A 0.1.2 placement that also exports `place-gpu`.
    PlacementGpu(bindings::placement_gpu::PlacementGpuPre<CallState>),
    /// A preemption built before 0.1.3: `select-victims` only (whole GPUs).
    Preemption(bindings::preemption::PreemptionPre<CallState>),
    /// A 0.1.3 preemption that also exports `select-victims-gpu`.
    PreemptionGpu(bindings::preemption_gpu::PreemptionGpuPre<CallState>),
    /// A 0.1.0 lifecycle: `on-event` only.
    Lifecycle(bindings::lifecycle::LifecyclePre<CallState>),
    /// A 0.1.1 lifecycle that also exports `on-events`.
    LifecycleBatched(bindings::lifecycle::batched::LifecycleBatchedPre<CallState>),
}

/// The unit in which a preemption answer counted GPU, and is judged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GpuUnit {
    /// Milli-GPUs: the request's GPU side (WIT 0.1.3), or a request
    /// without one (where both units agree).
    Milli,
    /// Whole devices: a component built before 0.1.3 was asked about a
    /// request with GPU shares, which it saw rounded up.
    Whole,
}

/// The plugin runtime: one wasmtime engine with its settings.
pub struct PluginRuntime {
    engine: Engine,
    linker: Linker<CallState>,
    config: RuntimeConfig,
    deadline_ticks: u64,
    stop_ticker: Arc<AtomicBool>,
}

impl std::fmt::Debug for PluginRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginRuntime").field("config", &self.config).finish_non_exhaustive()
    }
}

impl Drop for PluginRuntime {
    fn drop(&mut self) {
        self.stop_ticker.store(true, Ordering::Relaxed);
    }
}

/// What compiling a component cost.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CompileInfo {
    /// The compiled artifact came from the cache.
    pub from_cache: bool,
}

/// Linear memory kept resident per pooled slot after an instance ends
/// (reset with memset): enough for a 5,000-host request and a policy's heap.
const KEEP_RESIDENT_BYTES: usize = 2 << 20;
/// The same for tables.
const KEEP_RESIDENT_TABLE_BYTES: usize = 64 << 10;

impl PluginRuntime {
    /// Builds an engine with `config`'s limits and starts its epoch clock.
    pub fn new(config: RuntimeConfig) -> Result<PluginRuntime, PluginError> {
        let mut wcfg = Config::new();
        wcfg.epoch_interruption(config.deadline_enforcement);
        wcfg.consume_fuel(config.fuel_per_call.is_some());
        wcfg.max_wasm_stack(config.max_wasm_stack_bytes);
        // Floats are not used in decisions, but a policy may use them
        // internally; canonical NaNs keep its answers identical across CPUs.
        wcfg.cranelift_nan_canonicalization(true);
        let mut pool = PoolingAllocationConfig::default();
        pool.total_component_instances(config.max_concurrent_instances)
            .total_memories(config.max_concurrent_instances)
            .total_tables(config.max_concurrent_instances * 2)
            .max_memory_size(config.memory_cap_bytes)
            // A fresh instance per call (replays, the simulator) or per
            // thousand (the server) would otherwise give every call its
            // memory back with madvise and fault it in again while the
            // request is lowered: a third of a 5,000-host replay's CPU time
            // was the kernel's. Pages a call touched are reset with memset
            // instead, up to this much per memory, found with PAGEMAP_SCAN
            // where the kernel has it (Linux 6.7+).
            .linear_memory_keep_resident(KEEP_RESIDENT_BYTES)
            .table_keep_resident(KEEP_RESIDENT_TABLE_BYTES)
            .pagemap_scan(wasmtime::Enabled::Auto);
        wcfg.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
        let engine = Engine::new(&wcfg).map_err(|e| PluginError::Runtime(format!("{e:#}")))?;
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker).map_err(|e| PluginError::Runtime(format!("{e:#}")))?;

        let stop_ticker = Arc::new(AtomicBool::new(false));
        if config.deadline_enforcement {
            let engine = engine.clone();
            let stop = stop_ticker.clone();
            let tick = config.epoch_tick.max(Duration::from_micros(100));
            std::thread::Builder::new()
                .name("plugin-epoch".into())
                .spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        std::thread::sleep(tick);
                        engine.increment_epoch();
                    }
                })
                .map_err(|e| PluginError::Runtime(format!("cannot start the epoch thread: {e}")))?;
        }
        let tick_nanos = config.epoch_tick.max(Duration::from_micros(100)).as_nanos().max(1);
        let deadline_ticks = (config.call_deadline.as_nanos().div_ceil(tick_nanos)).max(1) as u64;
        Ok(PluginRuntime { engine, linker, config, deadline_ticks, stop_ticker })
    }

    /// The settings in force.
    pub fn config(&self) -> &RuntimeConfig {
        &self.config
    }

    /// Rejects uploads that are too large, not Wasm, or a core module.
    pub fn check_upload(&self, bytes: &[u8]) -> Result<(), PluginError> {
        if bytes.len() > self.config.max_upload_bytes {
            return Err(PluginError::TooLarge { size: bytes.len(), max: self.config.max_upload_bytes });
        }
        if bytes.len() < 8 || &bytes[0..4] != b"\0asm" {
            return Err(PluginError::NotWasm);
        }
        // Bytes 6..8 are the layer: 0 for a core module, 1 for a component.
        if bytes[6..8] != [1, 0] {
            return Err(PluginError::NotComponent);
        }
        Ok(())
    }

    /// Compiles a component, through the on-disk cache when one is configured.
    pub fn compile(&self, bytes: &[u8]) -> Result<(Component, CompileInfo), PluginError> {
        self.check_upload(bytes)?;
        let key = self.cache_key(bytes);
        if let Some(path) = self.cache_path(&key)
            && let Some(c) = self.load_cached(&path)
        {
            return Ok((c, CompileInfo { from_cache: true }));
        }
        let component = Component::new(&self.engine, bytes).map_err(|e| PluginError::Compile(format!("{e:#}")))?;
        if let Some(path) = self.cache_path(&key)
            && let Err(e) = self.store_cached(&path, &component)
        {
            tracing::warn!(path = %path.display(), error = %e, "could not write the compiled-plugin cache");
        }
        Ok((component, CompileInfo { from_cache: false }))
    }

    /// SHA-256 of the component, hex.
    pub fn sha256_hex(bytes: &[u8]) -> String {
        hex::encode(Sha256::digest(bytes))
    }

    fn cache_key(&self, bytes: &[u8]) -> String {
        // The engine's compatibility hash covers the wasmtime version, the
        // target and every setting that changes generated code (epochs, fuel).
        let mut h = std::collections::hash_map::DefaultHasher::new();
        self.engine.precompile_compatibility_hash().hash(&mut h);
        format!("{}-{:016x}", Self::sha256_hex(bytes), h.finish())
    }

    fn cache_path(&self, key: &str) -> Option<PathBuf> {
        self.config.cache_dir.as_ref().map(|d| d.join(format!("{key}.cwasm")))
    }

    fn load_cached(&self, path: &Path) -> Option<Component> {
        let artifact = std::fs::read(path).ok()?;
        let recorded = std::fs::read_to_string(path.with_extension("sha256")).ok()?;
        if recorded.trim() != Self::sha256_hex(&artifact) {
            tracing::warn!(path = %path.display(), "compiled-plugin cache entry does not match its checksum; recompiling");
            return None;
        }
        // SAFETY: `deserialize` trusts its input to be an artifact this
        // engine produced. The file sits in our own cache directory, was
        // written by `store_cached` below, and its SHA-256 was just checked
        // against the sidecar written with it, so a truncated or altered
        // file is refused above; the key includes the engine's
        // compatibility hash, so an artifact from other settings is never read.
        #[allow(unsafe_code)]
        let component = unsafe { Component::deserialize(&self.engine, &artifact) };
        component.ok()
    }

    /// Writes the artifact and its checksum, each under a name of its own
    /// first and then renamed into place: several processes may share one
    /// cache directory (`PACELINE_PLUGIN_CACHE_DIR`) and compile the same
    /// component at once, and a reader must never see a file half written.
    /// The checksum goes in first, so an artifact in place always has one.
    fn store_cached(&self, path: &Path, component: &Component) -> Result<(), String> {
        static WRITES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let bytes = component.serialize().map_err(|e| format!("{e:#}"))?;
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
        }
        let unique =
            format!("tmp-{}-{}", std::process::id(), WRITES.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
        let put = |to: &Path, contents: &[u8]| -> Result<(), String> {
            let tmp = to.with_extension(&unique);
            std::fs::write(&tmp, contents).map_err(|e| e.to_string())?;
            std::fs::rename(&tmp, to).map_err(|e| {
                let _ = std::fs::remove_file(&tmp);
                e.to_string()
            })
        };
        put(&path.with_extension("sha256"), Self::sha256_hex(&bytes).as_bytes())?;
        put(path, &bytes)
    }

    /// Links a compiled component and checks that it exports `world`.
    pub(crate) fn prepare(&self, component: &Component, world: World, slot: &str) -> Result<Prepared, PluginError> {
        let wrong = |e: wasmtime::Error| PluginError::WrongWorld {
            slot: slot.to_string(),
            world: world.as_str(),
            detail: format!("{e:#}"),
        };
        let pre = self.linker.instantiate_pre(component).map_err(wrong)?;
        Ok(Prepared(
            match world {
                // The GPU world first; a component without `place-gpu`
                // (built before 0.1.2) places whole-GPU work only.
                World::Placement => match bindings::placement_gpu::PlacementGpuPre::new(pre.clone()) {
                    Ok(gpu) => PreparedWorld::PlacementGpu(gpu),
                    Err(_) => PreparedWorld::Placement(bindings::placement::PlacementPre::new(pre).map_err(wrong)?),
                },
                // The GPU world first; a component without
                // `select-victims-gpu` (built before 0.1.3) sees whole GPUs.
                World::Preemption => match bindings::preemption_gpu::PreemptionGpuPre::new(pre.clone()) {
                    Ok(gpu) => PreparedWorld::PreemptionGpu(gpu),
                    Err(_) => PreparedWorld::Preemption(bindings::preemption::PreemptionPre::new(pre).map_err(wrong)?),
                },
                // The batched world first; a component without `on-events`
                // (built against 0.1.0) is called once per event.
                World::Lifecycle => match bindings::lifecycle::batched::LifecycleBatchedPre::new(pre.clone()) {
                    Ok(batched) => PreparedWorld::LifecycleBatched(batched),
                    Err(_) => PreparedWorld::Lifecycle(bindings::lifecycle::LifecyclePre::new(pre).map_err(wrong)?),
                },
            },
            Arc::new(Mutex::new(Vec::new())),
            Arc::new(AtomicU64::new(0)),
        ))
    }

    /// Epoch ticks of a call to `prepared`: its own deadline or the runtime's.
    fn ticks_for(&self, prepared: &Prepared) -> u64 {
        match prepared.deadline() {
            None => self.deadline_ticks,
            Some(d) => {
                let tick = self.config.epoch_tick.max(Duration::from_micros(100)).as_nanos().max(1);
                u64::try_from(d.as_nanos().div_ceil(tick)).unwrap_or(u64::MAX).max(1)
            }
        }
    }

    fn new_store(&self) -> Result<Store<CallState>, (FaultKind, String)> {
        self.new_store_with(self.deadline_ticks)
    }

    fn new_store_with(&self, deadline_ticks: u64) -> Result<Store<CallState>, (FaultKind, String)> {
        let mut store = Store::new(&self.engine, CallState::new(self.config.memory_cap_bytes));
        store.limiter(|s| &mut s.limits);
        if self.config.deadline_enforcement {
            store.set_epoch_deadline(deadline_ticks);
            store.epoch_deadline_trap();
        }
        if let Some(fuel) = self.config.fuel_per_call {
            store.set_fuel(fuel).map_err(|e| (FaultKind::Instantiate, format!("{e:#}")))?;
        }
        Ok(store)
    }

    /// Compiles `bytes` and checks them against `world`, outside any registry
    /// (tools, benchmarks).
    pub fn load(&self, bytes: &[u8], world: World) -> Result<Prepared, PluginError> {
        let (component, _) = self.compile(bytes)?;
        self.prepare(&component, world, world.as_str())
    }

    /// Calls a loaded placement component once, without validation or
    /// fallback (tools, benchmarks; the registry adds both).
    pub fn place(
        &self,
        prepared: &Prepared,
        request: &sdk::PlacementRequest,
    ) -> Result<sdk::PlacementResult, CallError> {
        self.call_placement(prepared, request).map_err(|e| call_error("component", request, e))
    }

    /// Times the three phases of one placement call (new store, instantiate,
    /// call and drop), for `paceline bench plugin`.
    #[doc(hidden)]
    pub fn place_phases(
        &self,
        prepared: &Prepared,
        request: &sdk::PlacementRequest,
    ) -> Option<[std::time::Duration; 3]> {
        let t0 = std::time::Instant::now();
        let mut store = self.new_store().ok()?;
        let t1 = std::time::Instant::now();
        let instance = self.instantiate_placement(prepared, &mut store)?;
        let t2 = std::time::Instant::now();
        self.call_warm_placement(&mut store, &instance, request).ok()?;
        drop(store);
        Some([t1 - t0, t2 - t1, t2.elapsed()])
    }

    /// Linear memory of a fresh instance of `prepared` after one placement
    /// call on `request`, in bytes (every memory of the component, as the
    /// memory limiter saw them grow), for `paceline bench plugin`.
    #[doc(hidden)]
    pub fn placement_instance_memory(&self, prepared: &Prepared, request: &sdk::PlacementRequest) -> Option<usize> {
        let mut store = self.new_store_with(self.ticks_for(prepared)).ok()?;
        let instance = self.instantiate_placement(prepared, &mut store)?;
        self.call_warm_placement(&mut store, &instance, request).ok()?;
        Some(store.data().limits.total_bytes())
    }

    /// Times a fresh instance of `prepared` from a new store to its first
    /// answer, as [`PluginRuntime::place_phases`] does, for any component.
    #[doc(hidden)]
    pub fn instantiate_time(&self, prepared: &Prepared) -> Option<std::time::Duration> {
        let started = std::time::Instant::now();
        let mut store = self.new_store().ok()?;
        match &prepared.0 {
            PreparedWorld::Placement(pre) => pre.instantiate(&mut store).map(drop).ok()?,
            PreparedWorld::PlacementGpu(pre) => pre.instantiate(&mut store).map(drop).ok()?,
            PreparedWorld::Preemption(pre) => pre.instantiate(&mut store).map(drop).ok()?,
            PreparedWorld::PreemptionGpu(pre) => pre.instantiate(&mut store).map(drop).ok()?,
            PreparedWorld::Lifecycle(pre) => pre.instantiate(&mut store).map(drop).ok()?,
            PreparedWorld::LifecycleBatched(pre) => pre.instantiate(&mut store).map(drop).ok()?,
        }
        Some(started.elapsed())
    }

    /// Runs `f` on an instance of `prepared`: a warm one when instances are
    /// reused, else a fresh one. An instance that faulted is dropped, never
    /// reused; a reused one gets a fresh deadline, fuel and memory-cap flag.
    fn with_instance<R>(
        &self,
        prepared: &Prepared,
        f: impl FnOnce(&mut Store<CallState>, &WarmInstance) -> wasmtime::Result<R>,
    ) -> Result<R, (FaultKind, String)> {
        let reuse = self.config.reuse_instance_calls > 0;
        let ticks = self.ticks_for(prepared);
        let warm = if reuse { prepared.1.lock().ok().and_then(|mut pool| pool.pop()) } else { None };
        let mut warm = match warm {
            Some(mut w) => {
                self.arm(&mut w.store, ticks)?;
                w
            }
            None => {
                let mut store = self.new_store_with(ticks)?;
                let instance = match &prepared.0 {
                    PreparedWorld::Placement(pre) => pre.instantiate(&mut store).map(WarmInstance::Placement),
                    PreparedWorld::PlacementGpu(pre) => pre.instantiate(&mut store).map(WarmInstance::PlacementGpu),
                    PreparedWorld::Preemption(pre) => pre.instantiate(&mut store).map(WarmInstance::Preemption),
                    PreparedWorld::PreemptionGpu(pre) => pre.instantiate(&mut store).map(WarmInstance::PreemptionGpu),
                    PreparedWorld::Lifecycle(pre) => pre.instantiate(&mut store).map(WarmInstance::Lifecycle),
                    PreparedWorld::LifecycleBatched(pre) => {
                        pre.instantiate(&mut store).map(WarmInstance::LifecycleBatched)
                    }
                }
                .map_err(|e| classify(e, &store, true))?;
                Warm { store, instance, calls: 0 }
            }
        };
        match f(&mut warm.store, &warm.instance) {
            Ok(r) => {
                warm.calls += 1;
                if reuse
                    && warm.calls < self.config.reuse_instance_calls
                    && let Ok(mut pool) = prepared.1.lock()
                    && pool.len() < WARM_PER_VERSION
                {
                    pool.push(warm);
                }
                Ok(r)
            }
            Err(e) => Err(classify(e, &warm.store, false)),
        }
    }

    /// Resets a reused store's per-call budgets.
    fn arm(&self, store: &mut Store<CallState>, deadline_ticks: u64) -> Result<(), (FaultKind, String)> {
        store.data_mut().limits.hit = false;
        if self.config.deadline_enforcement {
            store.set_epoch_deadline(deadline_ticks);
        }
        if let Some(fuel) = self.config.fuel_per_call {
            store.set_fuel(fuel).map_err(|e| (FaultKind::Instantiate, format!("{e:#}")))?;
        }
        Ok(())
    }

    /// Calls `place` in a sandboxed instance.
    pub(crate) fn call_placement(
        &self,
        prepared: &Prepared,
        request: &sdk::PlacementRequest,
    ) -> Result<sdk::PlacementResult, (FaultKind, String)> {
        let mut out =
            self.with_instance(prepared, |store, instance| self.call_warm_placement(store, instance, request))?;
        // Devices for GPU tasks the answer left to the runtime (a component
        // built before 0.1.2 grants none); the registry then checks them.
        paceline_plugin_sdk::placement::complete_grants(request, &mut out);
        Ok(out)
    }

    /// A fresh instance of a placement component, of either world.
    fn instantiate_placement(&self, prepared: &Prepared, store: &mut Store<CallState>) -> Option<WarmInstance> {
        match &prepared.0 {
            PreparedWorld::Placement(pre) => pre.instantiate(store).map(WarmInstance::Placement).ok(),
            PreparedWorld::PlacementGpu(pre) => pre.instantiate(store).map(WarmInstance::PlacementGpu).ok(),
            _ => None,
        }
    }

    /// One placement call on `instance`: `place-gpu` when the round has a
    /// GPU side (a GPU ask or a GPU host) and the component exports it, else
    /// `place` (a round without GPUs costs what it did before 0.1.2).
    fn call_warm_placement(
        &self,
        store: &mut Store<CallState>,
        instance: &WarmInstance,
        request: &sdk::PlacementRequest,
    ) -> wasmtime::Result<sdk::PlacementResult> {
        let wire = bindings::placement::request(request);
        let gpu = !request.gpu_tasks.is_empty();
        match instance {
            WarmInstance::PlacementGpu(i) if gpu => i
                .call_place_gpu(&mut *store, &wire, &bindings::placement_gpu::gpu_request(request))
                .map(bindings::placement_gpu::result),
            WarmInstance::PlacementGpu(i) => i.call_place(store, &wire).map(bindings::placement::result),
            WarmInstance::Placement(i) => i.call_place(store, &wire).map(bindings::placement::result),
            _ => Err(wasmtime::Error::msg("not a placement component")),
        }
    }

    /// Calls `select-victims-gpu` (a request with a GPU side and a component
    /// that exports it) or `select-victims` in a sandboxed instance. The
    /// answer comes with its GPU unit: [`GpuUnit::Whole`] when the component
    /// saw whole devices only (built before 0.1.3, or no GPU side), and is
    /// judged in that unit.
    pub(crate) fn call_preemption(
        &self,
        prepared: &Prepared,
        request: &sdk::PreemptionRequest,
    ) -> Result<(Vec<sdk::Victim>, GpuUnit), (FaultKind, String)> {
        let wire = bindings::preemption::request(request);
        let gpu = request.has_gpu_side();
        let out = self.with_instance(prepared, |store, instance| match instance {
            WarmInstance::PreemptionGpu(i) if gpu => i
                .call_select_victims_gpu(&mut *store, &wire, &bindings::preemption_gpu::gpu_request(request))
                .map(|v| (v, GpuUnit::Milli)),
            WarmInstance::PreemptionGpu(i) => i.call_select_victims(store, &wire).map(|v| (v, GpuUnit::Milli)),
            WarmInstance::Preemption(i) => {
                i.call_select_victims(store, &wire).map(|v| (v, if gpu { GpuUnit::Whole } else { GpuUnit::Milli }))
            }
            _ => Err(wasmtime::Error::msg("not a preemption component")),
        })?;
        Ok((bindings::preemption::victims(out.0), out.1))
    }

    /// Calls `on-event` in a sandboxed instance.
    pub(crate) fn call_lifecycle(
        &self,
        prepared: &Prepared,
        job: &sdk::JobView,
        tasks: &[sdk::TaskView],
        event: &sdk::Event,
    ) -> Result<Vec<sdk::Action>, (FaultKind, String)> {
        let (j, t, e) =
            (bindings::lifecycle::job(job), bindings::lifecycle::tasks(tasks), bindings::lifecycle::event(event));
        let out = self.with_instance(prepared, |store, instance| match instance {
            WarmInstance::Lifecycle(i) => i.call_on_event(store, &j, &t, e),
            WarmInstance::LifecycleBatched(i) => i.call_on_event(store, &j, &t, e),
            _ => Err(wasmtime::Error::msg("not a lifecycle component")),
        })?;
        Ok(bindings::lifecycle::actions(out))
    }

    /// Calls `on-events` once, or, for a component without it (0.1.0),
    /// `on-event` once per event against the same views, concatenating the
    /// answers. The views are lowered once per call either way.
    pub(crate) fn call_lifecycle_batch(
        &self,
        prepared: &Prepared,
        job: &sdk::JobView,
        tasks: &[sdk::TaskView],
        events: &[sdk::Event],
    ) -> Result<Vec<sdk::Action>, (FaultKind, String)> {
        let (j, t, e) =
            (bindings::lifecycle::job(job), bindings::lifecycle::tasks(tasks), bindings::lifecycle::events(events));
        let out = self.with_instance(prepared, |store, instance| match instance {
            WarmInstance::LifecycleBatched(i) => i.call_on_events(store, &j, &t, &e),
            WarmInstance::Lifecycle(i) => {
                let mut all = Vec::new();
                for e in e {
                    all.extend(i.call_on_event(&mut *store, &j, &t, e)?);
                }
                Ok(all)
            }
            _ => Err(wasmtime::Error::msg("not a lifecycle component")),
        })?;
        Ok(bindings::lifecycle::actions(out))
    }
}

/// Turns a wasmtime error into a fault kind and a message an operator can act on.
fn classify(err: wasmtime::Error, store: &Store<CallState>, instantiating: bool) -> (FaultKind, String) {
    let stderr = store.data().stderr_text();
    let detail = if stderr.is_empty() { format!("{err:#}") } else { format!("{err:#}; guest stderr: {stderr}") };
    if store.data().limits.hit {
        return (FaultKind::MemoryCap, format!("memory cap reached: {detail}"));
    }
    let kind = match err.downcast_ref::<Trap>() {
        Some(Trap::Interrupt) => FaultKind::Deadline,
        Some(Trap::OutOfFuel) => FaultKind::OutOfFuel,
        Some(Trap::StackOverflow) => FaultKind::StackOverflow,
        Some(Trap::UnreachableCodeReached) if stderr.contains("panicked") => FaultKind::Panic,
        Some(_) => FaultKind::Trap,
        None if instantiating => FaultKind::Instantiate,
        None => FaultKind::Trap,
    };
    (kind, detail)
}

/// Hex prefix of the SHA-256 of an input's JSON form, for logs and replay.
pub(crate) fn input_hash<T: serde::Serialize>(input: &T) -> String {
    let bytes = serde_json::to_vec(input).unwrap_or_default();
    let mut s = PluginRuntime::sha256_hex(&bytes);
    s.truncate(16);
    s
}

/// Builds a [`CallError`].
pub(crate) fn call_error<T: serde::Serialize>(
    version: &str,
    input: &T,
    (kind, message): (FaultKind, String),
) -> CallError {
    CallError { kind, version: version.to_string(), message, input_hash: input_hash(input) }
}

impl std::fmt::Debug for Prepared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match &self.0 {
            PreparedWorld::Placement(_) => "Prepared(placement)",
            PreparedWorld::PlacementGpu(_) => "Prepared(placement-gpu)",
            PreparedWorld::Preemption(_) => "Prepared(preemption)",
            PreparedWorld::PreemptionGpu(_) => "Prepared(preemption-gpu)",
            PreparedWorld::Lifecycle(_) => "Prepared(lifecycle)",
            PreparedWorld::LifecycleBatched(_) => "Prepared(lifecycle-batched)",
        })
    }
}

//! Runtime settings: deadlines, memory caps, fuel, upload size, cache.

use std::path::PathBuf;
use std::time::Duration;

/// How plugins are sandboxed and compiled.
#[derive(Clone, Debug)]
pub struct RuntimeConfig {
    /// Wall-clock budget of one call. Enforced by epoch interruption; a call
    /// past it traps with [`crate::FaultKind::Deadline`].
    pub call_deadline: Duration,
    /// How often the epoch advances; the deadline's granularity.
    pub epoch_tick: Duration,
    /// Compile with epoch checks. Off only for benchmarks that measure their cost.
    pub deadline_enforcement: bool,
    /// Largest linear memory one instance may have, in bytes.
    pub memory_cap_bytes: usize,
    /// Largest Wasm stack, in bytes.
    pub max_wasm_stack_bytes: usize,
    /// Fuel per call for deterministic replay; `None` disables fuel metering.
    pub fuel_per_call: Option<u64>,
    /// Largest accepted upload, in bytes.
    pub max_upload_bytes: usize,
    /// Instances that may run at once, across all slots and versions.
    pub max_concurrent_instances: u32,
    /// Directory for compiled artifacts (keyed by SHA-256 and engine settings); `None` disables the cache.
    pub cache_dir: Option<PathBuf>,
    /// Consecutive failed calls after which a slot rolls back on its own.
    pub auto_rollback_after: u32,
    /// Calls an instance may serve before it is replaced by a fresh one;
    /// 0 gives every call a fresh instance.
    ///
    /// A fresh instance per call makes every call start from the component's
    /// initial state: nothing a plugin keeps in memory survives, and std's
    /// `HashMap` seeds are the same on every call. It costs ~50 us a call
    /// (instantiation and first-touch page faults; docs/benchmarks.md).
    /// Reusing an instance keeps the frozen clock and the sandbox, but a
    /// plugin that keeps static state or iterates a `HashMap` may answer the
    /// same input differently from one call to the next; the SDK's guide
    /// tells authors to avoid both. Replays and the simulator use 0.
    pub reuse_instance_calls: u32,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        RuntimeConfig {
            call_deadline: Duration::from_secs(2),
            epoch_tick: Duration::from_millis(1),
            deadline_enforcement: true,
            memory_cap_bytes: 256 << 20,
            max_wasm_stack_bytes: 512 << 10,
            fuel_per_call: None,
            // Python and JavaScript components embed their interpreter:
            // ~18 MB (componentize-py) and ~12 MB (componentize-js).
            max_upload_bytes: 64 << 20,
            max_concurrent_instances: 128,
            cache_dir: None,
            auto_rollback_after: 3,
            reuse_instance_calls: 1000,
        }
    }
}

//! The per-call sandbox: a fresh store with WASI that grants nothing.
//!
//! No preopened directories, no environment, no arguments, no network, no
//! inherited stdio. Clocks are virtual and frozen, and randomness is a fixed
//! byte cycle, so a call's answer is a pure function of its input (std's
//! `HashMap` seeds itself from `wasi:random`, which would otherwise make
//! iteration order differ between runs). Stderr goes to a small in-memory
//! buffer so a guest panic's message can be reported.

use std::time::Duration;

use wasmtime::ResourceLimiter;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{HostMonotonicClock, HostWallClock, WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

/// Bytes of guest stderr kept for error messages.
const STDERR_CAPTURE: usize = 4096;

/// The store's data for one call.
pub(crate) struct CallState {
    wasi: WasiCtx,
    table: ResourceTable,
    pub(crate) limits: MemoryLimiter,
    pub(crate) stderr: MemoryOutputPipe,
}

impl CallState {
    pub(crate) fn new(memory_cap: usize) -> Self {
        let stderr = MemoryOutputPipe::new(STDERR_CAPTURE);
        let wasi = WasiCtxBuilder::new()
            .stderr(stderr.clone())
            .wall_clock(FrozenWallClock)
            .monotonic_clock(FrozenMonotonicClock)
            .secure_random(wasmtime_wasi::Deterministic::new(SEED.to_vec()))
            .insecure_random(wasmtime_wasi::Deterministic::new(SEED.to_vec()))
            .insecure_random_seed(0x5eed_5eed_5eed_5eed_5eed_5eed_5eed_5eed)
            .allow_ip_name_lookup(false)
            .allow_tcp(false)
            .allow_udp(false)
            .build();
        CallState { wasi, table: ResourceTable::new(), limits: MemoryLimiter::new(memory_cap), stderr }
    }

    /// What the guest wrote to stderr, lossily decoded.
    pub(crate) fn stderr_text(&self) -> String {
        String::from_utf8_lossy(&self.stderr.contents()).trim().to_string()
    }
}

impl WasiView for CallState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: &mut self.wasi, table: &mut self.table }
    }
}

/// A fixed "random" byte cycle: determinism over secrecy, since no policy
/// needs secrets.
const SEED: [u8; 32] = *b"paceline-deterministic-seed-0001";

/// Always 2024-01-01T00:00:00Z: a plugin has no business with real time;
/// times it needs come in its input.
struct FrozenWallClock;

impl HostWallClock for FrozenWallClock {
    fn resolution(&self) -> Duration {
        Duration::from_secs(1)
    }
    fn now(&self) -> Duration {
        Duration::from_secs(1_704_067_200)
    }
}

struct FrozenMonotonicClock;

impl HostMonotonicClock for FrozenMonotonicClock {
    fn resolution(&self) -> u64 {
        1
    }
    fn now(&self) -> u64 {
        0
    }
}

/// Caps linear memory and remembers whether the cap was hit, so that the
/// trap that follows (Rust guests abort on allocation failure) is reported
/// as memory exhaustion rather than as a generic trap.
pub(crate) struct MemoryLimiter {
    cap: usize,
    pub(crate) hit: bool,
    /// Bytes of every linear memory of the store, as grown so far.
    total: usize,
}

impl MemoryLimiter {
    fn new(cap: usize) -> Self {
        MemoryLimiter { cap, hit: false, total: 0 }
    }

    /// Linear memory of the store's instance, every memory together.
    pub(crate) fn total_bytes(&self) -> usize {
        self.total
    }
}

impl ResourceLimiter for MemoryLimiter {
    fn memory_growing(&mut self, current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        if desired > self.cap {
            self.hit = true;
            return Ok(false);
        }
        self.total = self.total.saturating_add(desired.saturating_sub(current));
        Ok(true)
    }

    fn table_growing(&mut self, _current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        Ok(desired <= 100_000)
    }
}

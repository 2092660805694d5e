//! # paceline-plugin
//!
//! The WebAssembly plugin runtime. It owns the wasmtime engine, the sandbox
//! every call runs in, and the registry of slots (`placement/<name>`,
//! `preemption`, `lifecycle/<kind>`) with their versions.
//!
//! It receives components (bytes) to deploy and requests to decide (the SDK's
//! plain types, built by the resource manager, placement engine and job
//! manager); it hands back answers that have passed validation, from the
//! active version, an earlier good version, or a native built-in policy.
//! It must not touch scheduler state: it decides nothing itself and stores
//! versions only through [`persist::VersionStore`].
//!
//! # Layout
//! - [`config`]: deadlines, memory caps, fuel, upload size, cache directory.
//! - [`runtime`]: the engine, compile cache, world check, sandboxed calls.
//! - `sandbox`: the per-call store: WASI with no capabilities, frozen clocks,
//!   fixed randomness, a memory limiter.
//! - [`registry`]: slots, versions, activate / rollback / shadow, fallback
//!   and automatic rollback.
//! - [`persist`]: the version-store trait, a directory and an in-memory store.
//! - [`metrics`]: per-version calls, errors by kind, latency histogram.
//! - [`scenario`]: run a scenario file through a component.
//! - `bindings`: wasmtime bindgen output and conversions (private).

mod bindings;
pub mod builtins;
pub mod candidates;
pub mod config;
pub mod error;
pub mod metrics;
pub mod natives;
pub mod persist;
pub mod registry;
pub mod runtime;
mod samples;
mod sandbox;
pub mod scenario;

pub use candidates::Candidates;
pub use config::RuntimeConfig;
pub use error::{CallError, FaultKind, PluginError};
pub use natives::{Native, NativePolicy};
pub use persist::{DirStore, MemoryStore, VersionRecord, VersionState, VersionStore};
pub use registry::{
    Answer, DeployOptions, Disagreement, MAX_DISAGREEMENTS, Names, Registry, ServedBy, ShadowReport, SlotInfo,
    slot_world,
};
pub use runtime::{GpuUnit, PluginRuntime, Prepared, World};

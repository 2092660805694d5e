//! # paceline-plugin-sdk
//!
//! Write Paceline scheduling policies in Rust and ship them as WebAssembly
//! components. A policy is a pure function from a request to a decision:
//!
//! | world | trait | export macro | decides |
//! |---|---|---|---|
//! | `placement` | [`PlacementPolicy`] | [`export_placement!`] | which host each task of a round goes to |
//! | `preemption-gpu` (or `preemption`) | [`PreemptionPolicy`] | [`export_preemption!`] | which running tasks to stop |
//! | `lifecycle-batched` (or `lifecycle`) | [`LifecyclePolicy`] | [`export_lifecycle!`] | how a job kind reacts to events |
//!
//! ```ignore
//! use paceline_plugin_sdk::prelude::*;
//!
//! pub struct FirstFit;
//! impl PlacementPolicy for FirstFit {
//!     fn place(request: &PlacementRequest) -> PlacementResult {
//!         place_gangs(Round::new(request), |round, t| {
//!             (0..round.free.len() as u32)
//!                 .find(|&h| round.fits(t, h))
//!                 .ok_or(UnplacedReason::InsufficientResources)
//!         })
//!     }
//! }
//! export_placement!(FirstFit);
//! ```
//!
//! Build with `cargo build --target wasm32-wasip2 --release`; the output is
//! the component to deploy. The same code compiles natively, where
//! [`harness`] runs it against scenario files.
//!
//! # Layout
//! - [`types`]: the request and answer types of every world (mirrors `wit/`).
//! - [`resources`]: saturating resource arithmetic and integer scores.
//! - [`placement`]: a placement round's working state and gang handling.
//! - [`validate`]: the checks the host runs on every answer.
//! - `harness` (native only): scenario files and a native runner.
//!
//! This crate owns the guest side of the plugin contract. It must not depend
//! on anything in `host/`: the contract is `wit/`, and this SDK is its Rust face.
#![deny(missing_docs)]

pub mod pick;
pub mod placement;
pub mod resources;
pub mod types;
pub mod validate;

#[cfg(not(target_arch = "wasm32"))]
pub mod harness;

#[cfg(target_arch = "wasm32")]
#[doc(hidden)]
pub mod wasm;

/// The version of the WIT package this SDK implements.
pub const WIT_PACKAGE: &str = "paceline:scheduler@0.1.3";

/// Everything a policy usually needs.
pub mod prelude {
    pub use crate::pick::RunPicker;
    pub use crate::placement::{Round, complete_grants, gangs, place_gangs, place_gangs_on_devices};
    pub use crate::resources::ScoreScale;
    pub use crate::types::*;
    pub use crate::{
        LifecyclePolicy, PlacementPolicy, PreemptionPolicy, export_lifecycle, export_placement, export_preemption,
    };
}

/// A placement policy: one call per placement round.
///
/// Must be a pure function of the request. The host validates the answer
/// (see [`validate::check_placement`]) and discards it if it is wrong.
pub trait PlacementPolicy {
    /// Decide where each task goes; every task must appear exactly once in the result.
    fn place(request: &types::PlacementRequest) -> types::PlacementResult;
}

/// A preemption policy.
///
/// The request may carry its GPU side in milli-GPUs (0.1.3); the host then
/// judges the answer in milli-GPUs, so compare amounts in
/// [`types::PreemptionRequest::in_milli_gpus`] (a share of a device counts
/// as what it is, not as a whole device).
pub trait PreemptionPolicy {
    /// Choose victims that free each need; fewest first.
    fn select_victims(request: &types::PreemptionRequest) -> Vec<types::Victim>;
}

/// A job lifecycle policy for one job kind.
pub trait LifecyclePolicy {
    /// React to one event with actions for the runtime to take.
    fn on_event(job: &types::JobView, tasks: &[types::TaskView], event: &types::Event) -> Vec<types::Action>;

    /// React to several events of one job at once (WIT 0.1.1, `on-events`).
    /// The runtime calls it with every task change of a burst (a hundred
    /// instances reaching RUNNING), so one call replaces a hundred.
    ///
    /// The default asks [`LifecyclePolicy::on_event`] about each event in
    /// turn, against the same views, and concatenates the answers, keeping
    /// the first of identical actions (ten instances that succeeded each
    /// find the job done; it is marked once). The runtime also carries out a
    /// repeated action only once. Override it when a job-wide decision (is
    /// every instance done? which update batch is next?) costs a pass over
    /// the tasks and the events are many: make it once per call.
    fn on_events(job: &types::JobView, tasks: &[types::TaskView], events: &[types::Event]) -> Vec<types::Action> {
        let mut seen = std::collections::HashSet::new();
        let mut out = Vec::new();
        for e in events {
            for a in Self::on_event(job, tasks, e) {
                if seen.insert(a.clone()) {
                    out.push(a);
                }
            }
        }
        out
    }
}

/// Exports a [`PlacementPolicy`] as the component's `placement-gpu` world
/// (`place` and, since 0.1.2, `place-gpu`).
///
/// On native targets it only checks that the type implements the trait, so a
/// mistake is reported at the author's line by a plain `cargo check`.
#[macro_export]
macro_rules! export_placement {
    ($policy:ty) => {
        const _: fn() = || {
            fn must_implement_placement_policy<P: $crate::PlacementPolicy>() {}
            must_implement_placement_policy::<$policy>();
        };
        #[cfg(target_arch = "wasm32")]
        const _: () = {
            struct PacelinePlacementGuest;
            impl $crate::wasm::placement::Guest for PacelinePlacementGuest {
                fn place(
                    request: $crate::wasm::placement::paceline::scheduler::placement_types::PlacementRequest,
                ) -> $crate::wasm::placement::paceline::scheduler::placement_types::PlacementResult {
                    $crate::wasm::placement::run::<$policy>(request)
                }
                fn place_gpu(
                    request: $crate::wasm::placement::paceline::scheduler::placement_types::PlacementRequest,
                    gpu: $crate::wasm::placement::paceline::scheduler::gpu_placement_types::GpuRequest,
                ) -> $crate::wasm::placement::paceline::scheduler::gpu_placement_types::GpuPlacementResult {
                    $crate::wasm::placement::run_gpu::<$policy>(request, gpu)
                }
            }
            $crate::wasm::placement::export_placement_world!(PacelinePlacementGuest with_types_in $crate::wasm::placement);
        };
    };
}

/// Exports a [`PreemptionPolicy`] as the component's `preemption-gpu` world
/// (`select-victims` and, since 0.1.3, `select-victims-gpu`: the policy
/// then sees the request's GPU side; compare amounts through
/// [`types::PreemptionRequest::in_milli_gpus`]).
#[macro_export]
macro_rules! export_preemption {
    ($policy:ty) => {
        const _: fn() = || {
            fn must_implement_preemption_policy<P: $crate::PreemptionPolicy>() {}
            must_implement_preemption_policy::<$policy>();
        };
        #[cfg(target_arch = "wasm32")]
        const _: () = {
            struct PacelinePreemptionGuest;
            impl $crate::wasm::preemption::Guest for PacelinePreemptionGuest {
                fn select_victims(
                    request: $crate::wasm::preemption::paceline::scheduler::preemption_types::PreemptionRequest,
                ) -> ::std::vec::Vec<$crate::wasm::preemption::paceline::scheduler::preemption_types::Victim> {
                    $crate::wasm::preemption::run::<$policy>(request)
                }
                fn select_victims_gpu(
                    request: $crate::wasm::preemption::paceline::scheduler::preemption_types::PreemptionRequest,
                    gpu: $crate::wasm::preemption::paceline::scheduler::gpu_preemption_types::GpuPreemptionRequest,
                ) -> ::std::vec::Vec<$crate::wasm::preemption::paceline::scheduler::preemption_types::Victim> {
                    $crate::wasm::preemption::run_gpu::<$policy>(request, gpu)
                }
            }
            $crate::wasm::preemption::export_preemption_world!(PacelinePreemptionGuest with_types_in $crate::wasm::preemption);
        };
    };
}

/// Exports a [`LifecyclePolicy`] as the component's `lifecycle-batched`
/// world (`on-event` and `on-events`; a 0.1.0 host uses only `on-event`).
#[macro_export]
macro_rules! export_lifecycle {
    ($policy:ty) => {
        const _: fn() = || {
            fn must_implement_lifecycle_policy<P: $crate::LifecyclePolicy>() {}
            must_implement_lifecycle_policy::<$policy>();
        };
        #[cfg(target_arch = "wasm32")]
        const _: () = {
            struct PacelineLifecycleGuest;
            impl $crate::wasm::lifecycle::Guest for PacelineLifecycleGuest {
                fn on_event(
                    job: $crate::wasm::lifecycle::paceline::scheduler::lifecycle_types::JobView,
                    tasks: ::std::vec::Vec<$crate::wasm::lifecycle::paceline::scheduler::lifecycle_types::TaskView>,
                    event: $crate::wasm::lifecycle::paceline::scheduler::lifecycle_types::Event,
                ) -> ::std::vec::Vec<$crate::wasm::lifecycle::paceline::scheduler::lifecycle_types::Action> {
                    $crate::wasm::lifecycle::run::<$policy>(job, tasks, event)
                }
                fn on_events(
                    job: $crate::wasm::lifecycle::paceline::scheduler::lifecycle_types::JobView,
                    tasks: ::std::vec::Vec<$crate::wasm::lifecycle::paceline::scheduler::lifecycle_types::TaskView>,
                    events: ::std::vec::Vec<$crate::wasm::lifecycle::paceline::scheduler::lifecycle_types::Event>,
                ) -> ::std::vec::Vec<$crate::wasm::lifecycle::paceline::scheduler::lifecycle_types::Action> {
                    $crate::wasm::lifecycle::run_batch::<$policy>(job, tasks, events)
                }
            }
            $crate::wasm::lifecycle::export_lifecycle_world!(PacelineLifecycleGuest with_types_in $crate::wasm::lifecycle);
        };
    };
}

#[cfg(test)]
mod wit_version_tests {
    /// The SDK says which contract it implements; that must be the one in
    /// `wit/`, or a policy built with it would claim a version it is not.
    #[test]
    fn the_sdks_wit_package_is_the_one_in_wit() {
        let wit = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../wit/types.wit");
        let text = std::fs::read_to_string(&wit).unwrap_or_else(|e| panic!("{}: {e}", wit.display()));
        let package = text
            .lines()
            .find_map(|l| l.trim().strip_prefix("package "))
            .map(|p| p.trim_end_matches(';').trim())
            .unwrap_or_else(|| panic!("{} names no package", wit.display()));
        assert_eq!(super::WIT_PACKAGE, package);
    }
}

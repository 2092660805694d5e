//! The model's types as the plugin contract's, and back: the one place where
//! they are converted (decision 0013).
//!
//! The contract (`wit/`, `paceline:scheduler@0.1.3`) is frozen per version
//! and mirrored by the SDK's types (`paceline_plugin_sdk::types`), which the
//! host runtime turns into the WIT's bindings and back
//! (`host/plugin/src/bindings.rs`). The model is the host's own and may
//! change. Requests are built from these leaf conversions by the role that
//! owns each world: placement requests by the placement engine, preemption
//! requests by the resource manager, lifecycle views by the job manager.

use paceline_model::job::{JobKind, JobState};
use paceline_model::task::TaskState;
use paceline_model::{Resources, UnplacedReason};
use paceline_plugin_sdk::types as sdk;

/// A model value as the contract's.
pub trait IntoContract {
    /// The contract's type.
    type Contract;
    /// Converts.
    fn into_contract(self) -> Self::Contract;
}

/// A model value from the contract's.
pub trait FromContract<C> {
    /// Converts.
    fn from_contract(value: C) -> Self;
}

/// The contract's `gpus` counts whole devices. A share of one device is
/// rounded up (a preemption need or a victim holding half a GPU counts as
/// one device: the field has no smaller unit). Each world sends its exact
/// GPU side beside it: placement `PlacementRequest::gpu_tasks`, `gpu_hosts`
/// (and sets a share's `demand.gpus` to 0 itself), preemption (0.1.3)
/// `PreemptionRequest::gpu_pools`, `gpu_running`, `gpu_needs`.
impl IntoContract for Resources {
    type Contract = sdk::Resources;
    fn into_contract(self) -> sdk::Resources {
        let Resources { cpu_millis, memory_mib, disk_mib, gpu_milli, ports } = self;
        let gpus = gpu_milli.div_ceil(paceline_model::resources::GPU_MILLI);
        sdk::Resources { cpu_millis, memory_mib, disk_mib, gpus, ports }
    }
}

impl FromContract<sdk::Resources> for Resources {
    fn from_contract(value: sdk::Resources) -> Resources {
        let sdk::Resources { cpu_millis, memory_mib, disk_mib, gpus, ports } = value;
        let gpu_milli = gpus.saturating_mul(paceline_model::resources::GPU_MILLI);
        Resources { cpu_millis, memory_mib, disk_mib, gpu_milli, ports }
    }
}

impl IntoContract for JobKind {
    type Contract = sdk::JobKind;
    fn into_contract(self) -> sdk::JobKind {
        match self {
            JobKind::Batch => sdk::JobKind::Batch,
            JobKind::Stateless => sdk::JobKind::Stateless,
            JobKind::Stateful => sdk::JobKind::Stateful,
            JobKind::Daemon => sdk::JobKind::Daemon,
        }
    }
}

impl FromContract<sdk::JobKind> for JobKind {
    fn from_contract(value: sdk::JobKind) -> JobKind {
        match value {
            sdk::JobKind::Batch => JobKind::Batch,
            sdk::JobKind::Stateless => JobKind::Stateless,
            sdk::JobKind::Stateful => JobKind::Stateful,
            sdk::JobKind::Daemon => JobKind::Daemon,
        }
    }
}

impl IntoContract for TaskState {
    type Contract = sdk::TaskState;
    fn into_contract(self) -> sdk::TaskState {
        use sdk::TaskState as P;
        match self {
            TaskState::Initialized => P::Initialized,
            TaskState::Pending => P::Pending,
            TaskState::Ready => P::Ready,
            TaskState::Placing => P::Placing,
            TaskState::Placed => P::Placed,
            TaskState::Launching => P::Launching,
            TaskState::Launched => P::Launched,
            TaskState::Starting => P::Starting,
            TaskState::Running => P::Running,
            TaskState::Succeeded => P::Succeeded,
            TaskState::Failed => P::Failed,
            TaskState::Lost => P::Lost,
            TaskState::Killed => P::Killed,
            TaskState::Preempting => P::Preempting,
            TaskState::Killing => P::Killing,
        }
    }
}

impl IntoContract for JobState {
    type Contract = sdk::JobState;
    fn into_contract(self) -> sdk::JobState {
        use sdk::JobState as P;
        match self {
            JobState::Initialized => P::Initialized,
            JobState::Pending => P::Pending,
            JobState::Running => P::Running,
            JobState::Succeeded => P::Succeeded,
            JobState::Failed => P::Failed,
            JobState::Killing => P::Killing,
            JobState::Killed => P::Killed,
        }
    }
}

impl FromContract<sdk::JobState> for JobState {
    fn from_contract(value: sdk::JobState) -> JobState {
        use sdk::JobState as P;
        match value {
            P::Initialized => JobState::Initialized,
            P::Pending => JobState::Pending,
            P::Running => JobState::Running,
            P::Succeeded => JobState::Succeeded,
            P::Failed => JobState::Failed,
            P::Killing => JobState::Killing,
            P::Killed => JobState::Killed,
        }
    }
}

impl IntoContract for UnplacedReason {
    type Contract = sdk::UnplacedReason;
    fn into_contract(self) -> sdk::UnplacedReason {
        match self {
            UnplacedReason::InsufficientResources => sdk::UnplacedReason::InsufficientResources,
            UnplacedReason::ConstraintsUnsatisfiable => sdk::UnplacedReason::ConstraintsUnsatisfiable,
            UnplacedReason::MaxPerHost => sdk::UnplacedReason::MaxPerHost,
            UnplacedReason::GangIncomplete => sdk::UnplacedReason::GangIncomplete,
            // The engine's own reason, unknown to the contract: to a policy
            // the task was simply not placed that round.
            UnplacedReason::Deferred | UnplacedReason::HostManagerUnreachable => sdk::UnplacedReason::Deferred,
        }
    }
}

impl FromContract<sdk::UnplacedReason> for UnplacedReason {
    fn from_contract(value: sdk::UnplacedReason) -> UnplacedReason {
        match value {
            sdk::UnplacedReason::InsufficientResources => UnplacedReason::InsufficientResources,
            sdk::UnplacedReason::ConstraintsUnsatisfiable => UnplacedReason::ConstraintsUnsatisfiable,
            sdk::UnplacedReason::MaxPerHost => UnplacedReason::MaxPerHost,
            sdk::UnplacedReason::GangIncomplete => UnplacedReason::GangIncomplete,
            sdk::UnplacedReason::Deferred => UnplacedReason::Deferred,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each conversion keeps the meaning: compared through the names both
    /// sides serialize to, so a variant mapped to the wrong one fails.
    #[test]
    fn conversions_keep_every_variant() {
        let name = |v: serde_json::Value| v.as_str().map(str::to_lowercase).unwrap_or_default();
        for s in TaskState::ALL {
            let theirs = serde_json::to_value(s.into_contract()).expect("serializes");
            assert_eq!(name(theirs), s.as_str().to_lowercase(), "{s:?}");
        }
        for k in [JobKind::Batch, JobKind::Stateless, JobKind::Stateful, JobKind::Daemon] {
            assert_eq!(JobKind::from_contract(k.into_contract()), k);
            assert_eq!(name(serde_json::to_value(k.into_contract()).expect("serializes")), k.as_str());
        }
        for r in UnplacedReason::ALL {
            if r == UnplacedReason::HostManagerUnreachable {
                // The engine's own reason: the contract has no such value.
                assert_eq!(r.into_contract(), sdk::UnplacedReason::Deferred);
                continue;
            }
            assert_eq!(UnplacedReason::from_contract(r.into_contract()), r);
            assert_eq!(r.into_contract().as_str(), r.as_str());
        }
        for s in [
            JobState::Initialized,
            JobState::Pending,
            JobState::Running,
            JobState::Succeeded,
            JobState::Failed,
            JobState::Killing,
            JobState::Killed,
        ] {
            assert_eq!(JobState::from_contract(s.into_contract()), s);
        }
        let r = Resources { cpu_millis: 1, memory_mib: 2, disk_mib: 3, gpu_milli: 4000, ports: 5 };
        assert_eq!(r.into_contract().gpus, 4);
        let half = Resources { gpu_milli: 500, ..Resources::ZERO };
        assert_eq!(half.into_contract().gpus, 1, "a share counts as a device in the contract's whole units");
        assert_eq!(Resources::from_contract(r.into_contract()), r);
    }
}

//! The preemption slot as the resource manager sees it: a small trait, the
//! native default (`plugin-priority-preempt` linked in), and the checks every
//! answer must pass before a task is killed.
//!
//! The manager builds a [`PreemptionRequest`] (pools, candidate tasks, needs),
//! calls the active policy, and validates the victims: they exist, are
//! preemptible (or revocable), come from a pool the need allows, cover their
//! need, and each one is needed (dropping it would leave the need uncovered).
//! A policy that errs or answers wrongly is logged and replaced, for that
//! call, by the native policy; if even that answer fails the checks, nobody
//! is preempted.

use paceline_joints::contract::FromContract;
use paceline_model::Resources;
use paceline_plugin_sdk::types::{PreemptionRequest, Victim};

use crate::amounts;
use crate::error::{PolicyError, VictimError};

/// A preemption policy. The Wasm plugin registry's `preemption` slot is
/// adapted to this trait by the host; [`NativePriorityPreempt`] is the default.
pub trait PreemptionPolicy: Send + Sync {
    /// A name for logs.
    fn name(&self) -> &str;

    /// Chooses victims for the request's needs. An error (a trap, a timeout)
    /// makes the manager use the native fallback for this call.
    fn select_victims(&self, request: &PreemptionRequest) -> Result<Vec<Victim>, PolicyError>;

    /// The answer just returned by [`PreemptionPolicy::select_victims`] was
    /// refused by the manager's own checks, for `reason`. A refusal here is
    /// a fault of whoever answered (the registry counts it towards automatic
    /// rollback); the default does nothing.
    fn refused(&self, reason: &str) {
        let _ = reason;
    }

    /// Whether the answer just returned counted GPU in whole devices: a
    /// component built before WIT 0.1.3 sees a share of a device rounded up
    /// to a device, and is judged in those units (it keeps working as it
    /// did). The default, and every policy built on the current SDK, counts
    /// milli-GPUs.
    fn answered_in_whole_gpus(&self) -> bool {
        false
    }
}

/// The default policy, `priority-preempt`, run natively.
#[derive(Clone, Copy, Debug, Default)]
pub struct NativePriorityPreempt;

impl PreemptionPolicy for NativePriorityPreempt {
    fn name(&self) -> &str {
        "priority-preempt (native)"
    }

    fn select_victims(&self, request: &PreemptionRequest) -> Result<Vec<Victim>, PolicyError> {
        use paceline_plugin_sdk::PreemptionPolicy as _;
        Ok(plugin_priority_preempt::PriorityPreempt::select_victims(request))
    }
}

/// Checks a policy's answer against the request, GPU in milli-GPUs where
/// the request carries its GPU side: two victims holding half a device each
/// cover a need of one device, and a victim that could be spared is refused
/// in milli-GPUs too. To judge an answer given in whole devices, pass
/// [`PreemptionRequest::in_whole_gpus`].
pub fn validate(request: &PreemptionRequest, victims: &[Victim]) -> Result<(), VictimError> {
    use paceline_plugin_sdk::validate::Violation;
    // The SDK's checks are the contract (the registry ran them already);
    // the manager's own, in its accounting's units, follow as a second line.
    paceline_plugin_sdk::validate::check_victims(request, victims).map_err(|e| match e {
        Violation::NotEnough(need) => VictimError::NotEnough { need },
        Violation::NotNeeded { task, need } => VictimError::NotNeeded { task, need },
        other => VictimError::Contract(other.to_string()),
    })?;
    // In the manager's own unit: milli-GPUs, from the GPU side when there
    // is one, else whole devices × 1000.
    let milli = request.has_gpu_side();
    let request = &*request.in_milli_gpus();
    let amount = |r: paceline_plugin_sdk::types::Resources| {
        let mut m = Resources::from_contract(r);
        if milli {
            m.gpu_milli = r.gpus;
        }
        amounts::of(&m)
    };
    for (n, need) in request.needs.iter().enumerate() {
        let n = n as u32;
        let want = amount(need.resources);
        let mut freed = amounts::ZERO;
        for v in victims.iter().filter(|v| v.need == n) {
            freed = amounts::add(&freed, &amount(request.running[v.task as usize].resources));
        }
        if victims.iter().all(|v| v.need != n) {
            continue;
        }
        if !amounts::fits(&want, &freed) {
            return Err(VictimError::NotEnough { need: n });
        }
        for v in victims.iter().filter(|v| v.need == n) {
            let without = amounts::sub(&freed, &amount(request.running[v.task as usize].resources));
            if amounts::fits(&want, &without) {
                return Err(VictimError::NotNeeded { task: v.task, need: n });
            }
        }
    }
    Ok(())
}

/// Asks `policy`, falls back to the native policy on an error or a wrong
/// answer, and returns victims that passed [`validate`] (possibly none).
pub fn choose(policy: &dyn PreemptionPolicy, request: &PreemptionRequest) -> Vec<Victim> {
    match policy.select_victims(request) {
        // An answer given in whole GPU devices is judged in them (WIT 0.1.3);
        // the whole-device copy is made only for such an answer.
        Ok(v) => match validate(
            &*if policy.answered_in_whole_gpus() {
                request.in_whole_gpus()
            } else {
                std::borrow::Cow::Borrowed(request)
            },
            &v,
        ) {
            Ok(()) => return v,
            Err(e) => {
                tracing::warn!(policy = policy.name(), error = %e, "preemption policy answer rejected; using native fallback");
                policy.refused(&e.to_string());
            }
        },
        Err(e) => {
            tracing::warn!(error = %e, "preemption policy failed; using native fallback");
        }
    }
    let native = NativePriorityPreempt;
    match native.select_victims(request) {
        Ok(v) => match validate(request, &v) {
            Ok(()) => v,
            Err(e) => {
                tracing::error!(error = %e, "native preemption answer rejected; preempting nothing");
                Vec::new()
            }
        },
        Err(e) => {
            tracing::error!(error = %e, "native preemption failed; preempting nothing");
            Vec::new()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use paceline_plugin_sdk::types::{Need, PoolView, Resources, RunningTask, VictimReason};

    fn request() -> PreemptionRequest {
        let task = |preemptible, cpu| RunningTask {
            pool: 0,
            priority: 1,
            preemptible,
            revocable: false,
            started_at_ms: 0,
            resources: Resources::new(cpu, 0, 0, 0),
        };
        PreemptionRequest {
            pools: vec![
                PoolView { path: "/a".into(), ..PoolView::default() },
                PoolView { path: "/b".into(), ..PoolView::default() },
            ],
            running: vec![task(true, 10), task(true, 10), task(false, 10)],
            needs: vec![Need { pool: 1, priority: 1, resources: Resources::new(10, 0, 0, 0), from_pools: vec![0] }],
            ..PreemptionRequest::default()
        }
    }

    fn v(task: u32) -> Victim {
        Victim { task, need: 0, reason: VictimReason::OverEntitlement }
    }

    #[test]
    fn validation_table() {
        let req = request();
        let cases: &[(&str, Vec<Victim>, bool)] = &[
            ("one victim covers the need", vec![v(0)], true),
            ("none is allowed", vec![], true),
            ("two where one is enough", vec![v(0), v(1)], false),
            ("non-preemptible", vec![v(2)], false),
            ("unknown task", vec![v(9)], false),
            ("same task twice", vec![v(0), v(0)], false),
        ];
        for (name, victims, ok) in cases {
            assert_eq!(validate(&req, victims).is_ok(), *ok, "{name}");
        }
        let mut short = request();
        short.needs[0].resources.cpu_millis = 15;
        assert_eq!(validate(&short, &[v(0)]), Err(VictimError::NotEnough { need: 0 }));
    }

    struct Broken(Result<Vec<Victim>, PolicyError>, std::sync::Mutex<Vec<String>>);
    impl PreemptionPolicy for Broken {
        fn name(&self) -> &str {
            "broken"
        }
        fn select_victims(&self, _: &PreemptionRequest) -> Result<Vec<Victim>, PolicyError> {
            self.0.clone()
        }
        fn refused(&self, reason: &str) {
            self.1.lock().unwrap_or_else(|e| e.into_inner()).push(reason.to_string());
        }
    }

    #[test]
    fn failing_or_wrong_policy_falls_back_to_native() {
        let req = request();
        let err = Broken(Err(PolicyError { policy: "broken".into(), message: "trap".into() }), Default::default());
        let wrong = Broken(Ok(vec![v(2)]), Default::default());
        for p in [&err as &dyn PreemptionPolicy, &wrong] {
            let chosen = choose(p, &req);
            assert_eq!(chosen.len(), 1, "{}", p.name());
            assert!(req.running[chosen[0].task as usize].preemptible);
        }
        // The wrong answer was reported back as refused, with its reason;
        // an error was not (the registry counted it already).
        let refused = wrong.1.lock().unwrap_or_else(|e| e.into_inner()).clone();
        assert_eq!(refused.len(), 1);
        assert!(refused[0].contains("not preemptible"), "{refused:?}");
        assert!(err.1.lock().unwrap_or_else(|e| e.into_inner()).is_empty());
    }
}

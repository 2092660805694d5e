//! A preemption policy that answers well-formed but wrong victims: when a
//! task that may not be preempted is running it names it (not preemptible);
//! otherwise it names every preemptible task for the first need, whether
//! the need asks for them all or not (more than needed), or a single one
//! when one is not enough. Validation must reject each.
use paceline_plugin_sdk::prelude::*;

/// Preempts greedily on purpose.
#[derive(Debug)]
pub struct Greedy;

impl PreemptionPolicy for Greedy {
    fn select_victims(request: &PreemptionRequest) -> Vec<Victim> {
        let victim = |task: usize| Victim { task: task as u32, need: 0, reason: VictimReason::OverEntitlement };
        if request.needs.is_empty() {
            return Vec::new();
        }
        if let Some(i) = request.running.iter().position(|t| !t.preemptible && !t.revocable) {
            return vec![victim(i)];
        }
        // Every task, whatever the need asks for: too many when one would
        // do, too few when all of them are not enough.
        (0..request.running.len()).map(victim).collect()
    }
}

export_preemption!(Greedy);

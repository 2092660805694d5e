//! Adversarial placement guest (WIT 0.1.2): a well-formed answer that
//! overcommits GPU devices. Every task goes to host 0 (which may well fit
//! them in CPU and memory) and every task that asks for GPU is granted
//! device 0 of that host, however little it has left and whether the task
//! wants it whole. The runtime must refuse the answer and count the fault.

use paceline_plugin_sdk::prelude::*;

/// The greedy policy.
#[derive(Debug)]
pub struct GpuGreedy;

impl PlacementPolicy for GpuGreedy {
    fn place(request: &PlacementRequest) -> PlacementResult {
        let n = request.tasks.len() as u32;
        if request.hosts.is_empty() {
            return PlacementResult {
                unplaced: (0..n)
                    .map(|task| Unplaced { task, reason: UnplacedReason::InsufficientResources, detail: String::new() })
                    .collect(),
                ..PlacementResult::default()
            };
        }
        PlacementResult {
            assignments: (0..n).map(|task| Assignment { task, host: 0 }).collect(),
            unplaced: Vec::new(),
            grants: (0..n)
                .filter(|&t| request.gpu_tasks.get(t as usize).is_some_and(|g| g.milli > 0))
                .map(|task| DeviceGrant { task, devices: vec![0] })
                .collect(),
        }
    }
}

export_placement!(GpuGreedy);

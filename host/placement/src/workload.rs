//! The workload a fragmentation-aware policy places for: the shapes of the
//! last tasks the engine took, counted (WIT 0.1.2 `gpu-request.workload`).
//!
//! A window, not a decayed average: the mix of the last [`WINDOW`] tasks,
//! whatever their age, so a burst of one shape weighs what it is, and a
//! shape that stopped arriving leaves the mix after [`WINDOW`] tasks. Only
//! rounds with a GPU ask read it; every round adds to it (CPU-only tasks
//! matter to GPU fragmentation too: they take the CPU a GPU task needs).

use std::collections::{HashMap, HashSet, VecDeque};

use paceline_model::Resources;
use paceline_plugin_sdk::types::TaskClass;

/// Tasks remembered. Short: arrivals come in bursts of alike tasks, and on
/// the openb trace a window of 128 to 1,024 placed about half a point more
/// of the GPU capacity with `gpu-fgd` than one of 2,048 (docs/benchmarks.md).
pub const WINDOW: usize = 256;
/// Shapes handed to a policy, most frequent first.
pub const MAX_CLASSES: usize = 64;

type Shape = (u64, u64, u32);

/// The last `window` task shapes and their counts ([`WINDOW`] unless the
/// engine is configured otherwise).
#[derive(Debug)]
pub struct WorkloadMix {
    window: usize,
    order: VecDeque<(u64, Shape)>,
    counts: HashMap<Shape, u32>,
    /// Tasks in the window: one taken again (it did not fit last round) is
    /// not counted twice.
    seen: HashSet<u64>,
}

impl Default for WorkloadMix {
    fn default() -> Self {
        WorkloadMix::with_window(WINDOW)
    }
}

impl WorkloadMix {
    /// A mix of the last `window` tasks (at least one).
    pub fn with_window(window: usize) -> WorkloadMix {
        WorkloadMix { window: window.max(1), order: VecDeque::new(), counts: HashMap::new(), seen: HashSet::new() }
    }

    /// Counts task `id`'s shape once, forgetting the oldest past the window.
    pub fn observe(&mut self, id: u64, r: &Resources) {
        if !self.seen.insert(id) {
            return;
        }
        let shape = (r.cpu_millis, r.memory_mib, u32::try_from(r.gpu_milli).unwrap_or(u32::MAX));
        *self.counts.entry(shape).or_insert(0) += 1;
        self.order.push_back((id, shape));
        if self.order.len() > self.window
            && let Some((old_id, old)) = self.order.pop_front()
        {
            self.seen.remove(&old_id);
            if let Some(n) = self.counts.get_mut(&old) {
                *n -= 1;
                if *n == 0 {
                    self.counts.remove(&old);
                }
            }
        }
    }

    /// The most frequent shapes, at most [`MAX_CLASSES`]; ties by shape, so
    /// the list is the same for the same window.
    pub fn classes(&self) -> Vec<TaskClass> {
        let mut all: Vec<(&Shape, &u32)> = self.counts.iter().collect();
        all.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        all.into_iter()
            .take(MAX_CLASSES)
            .map(|(&(cpu_millis, memory_mib, milli), &weight)| TaskClass { cpu_millis, memory_mib, milli, weight })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_the_window_and_orders_by_frequency() {
        let mut mix = WorkloadMix::default();
        let half = Resources { cpu_millis: 1000, memory_mib: 10, gpu_milli: 500, ..Resources::ZERO };
        let cpu = Resources { cpu_millis: 2000, ..Resources::ZERO };
        for id in 0..3 {
            mix.observe(id, &half);
        }
        mix.observe(3, &cpu);
        mix.observe(3, &cpu);
        let c = mix.classes();
        assert_eq!((c[0].milli, c[0].weight, c[1].milli, c[1].weight), (500, 3, 0, 1));
        for id in 0..WINDOW as u64 {
            mix.observe(100 + id, &cpu);
        }
        let c = mix.classes();
        assert_eq!(c.len(), 1, "the shares left the window: {c:?}");
        assert_eq!(c[0].weight as usize, WINDOW);
    }
}

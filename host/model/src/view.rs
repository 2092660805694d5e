//! A host as placement sees it: capacity, allocation, attributes, and what
//! it already runs (for affinity and per-host limits). Hard constraints are
//! evaluated against it (`Constraint::admits`).

use std::collections::{BTreeMap, BTreeSet};

use crate::labels::Labels;
use crate::resources::Resources;

/// A host as placement sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct HostView {
    /// Host name, unique in the cluster.
    pub name: String,
    /// Whole capacity.
    pub total: Resources,
    /// Held by tasks already placed.
    pub allocated: Resources,
    /// Attributes such as `zone` and `rack`.
    pub attributes: Labels,
    /// `key=value` labels of the tasks the host runs (for affinity).
    pub task_labels: BTreeSet<String>,
    /// Tasks per job id that the host runs.
    pub job_counts: BTreeMap<String, u32>,
    /// The host's GPU devices and what runs hold of each (empty for a host
    /// without GPUs).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpus: Vec<crate::gpu::GpuSlot>,
}

impl HostView {
    /// An empty host of capacity `total`.
    pub fn new(name: impl Into<String>, total: Resources) -> Self {
        let gpus = crate::gpu::devices_of(&total, &[], None)
            .into_iter()
            .map(|device| crate::gpu::GpuSlot { device, used_milli: 0 })
            .collect();
        HostView { name: name.into(), total, gpus, ..HostView::default() }
    }

    /// What is free.
    pub fn free(&self) -> Resources {
        self.total.saturating_sub(&self.allocated)
    }

    /// The host runs a task labelled `key=value`.
    pub fn runs_label(&self, key: &str, value: &str) -> bool {
        // Avoids allocating "key=value" for the lookup.
        self.task_labels
            .range::<str, _>((std::ops::Bound::Included(key), std::ops::Bound::Unbounded))
            .take_while(|l| l.starts_with(key))
            .any(|l| l.len() == key.len() + 1 + value.len() && l[key.len()..].starts_with('=') && l.ends_with(value))
    }
}

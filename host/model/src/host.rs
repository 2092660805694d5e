//! Hosts as the inventory knows them: capacity, attributes, provider, and
//! the maintenance state machine UP → DRAINING → DRAINED → DOWN → UP.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::task::{SpecError, check_count, check_len};
use crate::{Labels, Resources};

/// Maintenance state of a host.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum MaintenanceState {
    /// In service: offered to placement.
    #[default]
    Up,
    /// No new tasks; running tasks are being moved off.
    Draining,
    /// No tasks left; safe to take down.
    Drained,
    /// Out of service (being repaired, rebooted, …).
    Down,
}

impl MaintenanceState {
    /// The name used in storage and the API.
    pub fn as_str(self) -> &'static str {
        match self {
            MaintenanceState::Up => "UP",
            MaintenanceState::Draining => "DRAINING",
            MaintenanceState::Drained => "DRAINED",
            MaintenanceState::Down => "DOWN",
        }
    }

    /// Whether `self → to` is allowed: the cycle UP → DRAINING → DRAINED →
    /// DOWN → UP, plus cancelling a drain (DRAINING or DRAINED → UP).
    pub fn can_transition(self, to: MaintenanceState) -> bool {
        use MaintenanceState::*;
        matches!(
            (self, to),
            (Up, Draining) | (Draining, Drained) | (Drained, Down) | (Down, Up) | (Draining, Up) | (Drained, Up)
        ) || self == to
    }

    /// Whether placement may put new tasks on the host.
    pub fn accepts_tasks(self) -> bool {
        self == MaintenanceState::Up
    }
}

impl fmt::Display for MaintenanceState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One host in the inventory.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostRecord {
    /// Host name, unique in the cluster; the inventory key.
    pub hostname: String,
    /// Provider that manages it: `agent`, `mesos` or `sim`.
    pub provider: String,
    /// The provider's id for the host's agent (Mesos agent id, agent uuid).
    pub agent_id: Option<String>,
    /// Address the provider reaches the agent at (`ip:port`), if any.
    pub address: Option<String>,
    /// Whole capacity the host offers.
    pub total: Resources,
    /// Attributes used by constraints (`zone`, `rack`, `gpu_model`, …).
    pub attributes: Labels,
    /// The host's GPU devices, as its agent detected them; empty for a
    /// host that reports only a count (see [`crate::gpu::devices_of`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpus: Vec<crate::gpu::GpuDevice>,
    /// Maintenance state.
    pub state: MaintenanceState,
    /// When the host first registered, milliseconds since the epoch.
    pub registered_at_ms: u64,
    /// Last change, milliseconds since the epoch.
    pub updated_at_ms: u64,
}

impl HostRecord {
    /// Checks names and sizes.
    pub fn validate(&self) -> Result<(), SpecError> {
        if self.hostname.is_empty() {
            return Err(SpecError::Empty("hostname"));
        }
        check_len("hostname", &self.hostname)?;
        check_len("provider", &self.provider)?;
        check_count("attributes", self.attributes.len())?;
        for (k, v) in &self.attributes {
            check_len("attributes", k)?;
            check_len("attributes", v)?;
        }
        check_count("gpus", self.gpus.len())?;
        for g in &self.gpus {
            check_len("gpus", &g.model)?;
        }
        Ok(())
    }
}

/// A host name in its one canonical spelling, or why it is not a host name.
///
/// Agents' names are identities (a certificate is issued for one, and a
/// session must register under it), so lookalikes must not pass as other
/// names: `NODE-A`, `node-a.` and `node-a` are one name, written `node-a`
/// (ASCII lowercase, no trailing dot), and anything that is not a DNS-style
/// name is refused (`../../etc/x`, `a b`, `_x`): RFC 1123 labels of
/// `[a-z0-9-]`, 1 to 63 bytes each, not starting or ending with `-`, 253
/// bytes at most in all.
pub fn canonical_hostname(name: &str) -> Result<String, String> {
    let lower = name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase();
    if lower.is_empty() {
        return Err("must not be empty".into());
    }
    if lower.len() > 253 {
        return Err(format!("{} bytes, at most 253", lower.len()));
    }
    for label in lower.split('.') {
        if label.is_empty() {
            return Err(format!("{name:?} has an empty label (two dots, or a leading dot)"));
        }
        if label.len() > 63 {
            return Err(format!("label {label:?} is {} bytes, at most 63", label.len()));
        }
        if let Some(c) = label.chars().find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-')) {
            return Err(format!("{name:?} holds {c:?}; a host name is letters, digits, `-` and `.` only"));
        }
        if label.starts_with('-') || label.ends_with('-') {
            return Err(format!("label {label:?} starts or ends with `-`"));
        }
    }
    Ok(lower)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_names_have_one_spelling_and_lookalikes_are_refused() {
        for (given, canonical) in [
            ("node-a", "node-a"),
            ("NODE-A", "node-a"),
            ("node-a.", "node-a"),
            ("Web-1.Example.COM.", "web-1.example.com"),
            ("10.0.0.5", "10.0.0.5"),
        ] {
            assert_eq!(canonical_hostname(given).as_deref(), Ok(canonical), "{given}");
        }
        let long_label = "a".repeat(64);
        let long_name = ["a".repeat(63), "b".repeat(63), "c".repeat(63), "d".repeat(63)].join(".");
        for bad in [
            "",
            ".",
            "../../etc/x",
            "a..b",
            ".a",
            "a b",
            "a_b",
            "-a",
            "a-",
            "a/b",
            "node-\u{1b}",
            "nöde",
            "node-a..",
            long_label.as_str(),
            long_name.as_str(),
        ] {
            assert!(canonical_hostname(bad).is_err(), "{bad:?} must be refused");
        }
    }

    #[test]
    fn maintenance_cycle() {
        use MaintenanceState::*;
        let cases = [
            (Up, Draining, true),
            (Draining, Drained, true),
            (Drained, Down, true),
            (Down, Up, true),
            (Up, Down, false),
            (Down, Draining, false),
            (Draining, Up, true),
        ];
        for (a, b, ok) in cases {
            assert_eq!(a.can_transition(b), ok, "{a} → {b}");
        }
    }
}

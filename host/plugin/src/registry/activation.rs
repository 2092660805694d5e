//! Which version serves a slot: activation, per-version deadlines and
//! rollback (by an operator, or automatic after repeated failures).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use super::{Registry, Slot, Version};
use crate::Candidates;
use crate::error::PluginError;
use crate::persist::VersionState;
impl Registry {
    /// Makes `id` (`name@version`) the slot's active version, from the next call on.
    pub fn activate(&self, slot_name: &str, id: &str) -> Result<(), PluginError> {
        let slot = self.slot(slot_name)?;
        let _admin = self.admin.lock().map_err(|e| PluginError::Runtime(e.to_string()))?;
        let version = slot
            .find(id)
            .ok_or_else(|| PluginError::UnknownVersion { slot: slot_name.to_string(), version: id.to_string() })?;
        let mut history = slot.history.lock().map_err(|e| PluginError::Runtime(e.to_string()))?;
        let mut next = history.clone();
        next.retain(|h| h != id);
        next.push(id.to_string());
        self.store.save_history(slot_name, &next).map_err(PluginError::Storage)?;
        self.swap_active(&slot, &history, &version);
        *history = next;
        slot.consecutive_failures.store(0, Ordering::Relaxed);
        tracing::info!(slot = slot_name, version = id, "plugin activated");
        Ok(())
    }

    fn swap_active(&self, slot: &Slot, old_history: &[String], new: &Arc<Version>) {
        if let Some(old) = old_history.last().and_then(|id| slot.find(id))
            && old.id != new.id
        {
            if old.record().state == VersionState::Active {
                let _ = self.store.update_version(&old.set_state(VersionState::Retired));
            }
            old.prepared.drain_warm();
        }
        let _ = self.store.update_version(&new.set_state(VersionState::Active));
        slot.active.store(Some(new.clone()));
    }

    /// Gives version `id` (`name@version`) of the slot a call deadline of its
    /// own, or back to the runtime's with `None`, from its next call on, and
    /// records it with the version. For plugins whose language cannot answer
    /// a large round within the default (Python and JavaScript components
    /// interpret their code: docs/plugin-guide.md, docs/benchmarks.md). The
    /// self-test of a deploy runs before a deadline can be set, under the
    /// runtime's default, on small samples.
    pub fn set_deadline(&self, slot_name: &str, id: &str, deadline: Option<Duration>) -> Result<(), PluginError> {
        let slot = self.slot(slot_name)?;
        let _admin = self.admin.lock().map_err(|e| PluginError::Runtime(e.to_string()))?;
        let version = slot
            .find(id)
            .ok_or_else(|| PluginError::UnknownVersion { slot: slot_name.to_string(), version: id.to_string() })?;
        version.prepared.set_deadline(deadline);
        let record = {
            let mut r = version.record.lock().unwrap_or_else(|e| e.into_inner());
            r.deadline_ms = version.prepared.deadline().map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
            r.clone()
        };
        self.store.update_version(&record).map_err(PluginError::Storage)?;
        tracing::info!(slot = slot_name, version = id, deadline_ms = ?record.deadline_ms, "plugin deadline set");
        Ok(())
    }

    /// Sets how many feasible hosts a placement call of the slot is offered
    /// per group of alike tasks (decision 0054): for version `id`
    /// (`name@version`, recorded with it, as its deadline is) or, with
    /// `None`, for the slot (in memory). `candidates` `None` clears the
    /// setting. A version's setting wins over the slot's, which wins over
    /// [`Candidates::Auto`]; a version that must see every host sets
    /// [`Candidates::All`].
    pub fn set_candidates(
        &self,
        slot_name: &str,
        id: Option<&str>,
        candidates: Option<Candidates>,
    ) -> Result<(), PluginError> {
        let slot = self.slot(slot_name)?;
        if slot.world != crate::World::Placement {
            return Err(PluginError::UnknownSlot(format!("{slot_name} (candidates are a placement setting)")));
        }
        let _admin = self.admin.lock().map_err(|e| PluginError::Runtime(e.to_string()))?;
        let Some(id) = id else {
            *slot.candidates.lock().unwrap_or_else(|e| e.into_inner()) = candidates;
            tracing::info!(slot = slot_name, candidates = ?candidates, "slot candidates set");
            return Ok(());
        };
        let version = slot
            .find(id)
            .ok_or_else(|| PluginError::UnknownVersion { slot: slot_name.to_string(), version: id.to_string() })?;
        let record = {
            let mut r = version.record.lock().unwrap_or_else(|e| e.into_inner());
            r.candidates = candidates;
            r.clone()
        };
        self.store.update_version(&record).map_err(PluginError::Storage)?;
        tracing::info!(slot = slot_name, version = id, candidates = ?candidates, "plugin candidates set");
        Ok(())
    }

    /// What the slot's next placement call is offered: its active version's
    /// setting, else the slot's, else the registry's default
    /// ([`Candidates::Auto`] unless [`Registry::set_default_candidates`]).
    pub fn candidates(&self, slot_name: &str) -> Candidates {
        self.slot(slot_name).ok().and_then(|s| s.candidates().1).unwrap_or_else(|| self.default_candidates())
    }

    /// Goes back to the version active before the current one. Returns the
    /// id now active, if any.
    ///
    /// Refused ([`PluginError::NothingToRollBack`], saying what the slot
    /// holds) when no earlier version that has not failed is there to go
    /// back to: the slot would be left with no active version and its
    /// native policy would serve unannounced (issue 43). The automatic
    /// rollback of a failing version still falls back to the native policy.
    pub fn rollback(&self, slot_name: &str) -> Result<Option<String>, PluginError> {
        let slot = self.slot(slot_name)?;
        let _admin = self.admin.lock().map_err(|e| PluginError::Runtime(e.to_string()))?;
        self.rollback_locked(&slot, None)
    }

    pub(super) fn rollback_locked(
        &self,
        slot: &Slot,
        mark_failed: Option<&Arc<Version>>,
    ) -> Result<Option<String>, PluginError> {
        let mut history = slot.history.lock().map_err(|e| PluginError::Runtime(e.to_string()))?;
        let Some(current) = history.last().cloned() else {
            return Err(PluginError::NothingToRollBack {
                slot: slot.name.clone(),
                detail: format!("no version is active (the native policy serves it); {}", Self::holdings(slot)),
            });
        };
        let mut next = history.clone();
        next.pop();
        // Skip versions that failed since they were active.
        while next.last().and_then(|id| slot.find(id)).is_some_and(|v| v.record().state == VersionState::Failed) {
            next.pop();
        }
        // An operator's rollback never empties the slot: it would leave no
        // active version and the native policy serving without anyone
        // having chosen it. Only a failing version is rolled back to nothing.
        if next.is_empty() && mark_failed.is_none() {
            return Err(PluginError::NothingToRollBack {
                slot: slot.name.clone(),
                detail: format!(
                    "{current} is active and no version that has not failed was active before it; {}; \
                     activate another version instead (`paceline plugin activate {} NAME@VERSION`)",
                    Self::holdings(slot),
                    slot.name
                ),
            });
        }
        self.store.save_history(&slot.name, &next).map_err(PluginError::Storage)?;
        if let Some(v) = slot.find(&current) {
            let state = if mark_failed.is_some() { VersionState::Failed } else { VersionState::Retired };
            let _ = self.store.update_version(&v.set_state(state));
            v.prepared.drain_warm();
        }
        let target = next.last().and_then(|id| slot.find(id));
        if let Some(t) = &target {
            let _ = self.store.update_version(&t.set_state(VersionState::Active));
        }
        slot.active.store(target.clone());
        *history = next;
        slot.consecutive_failures.store(0, Ordering::Relaxed);
        Ok(target.map(|t| t.id.clone()))
    }

    /// The slot's versions and their states, for an error message.
    fn holdings(slot: &Slot) -> String {
        let versions = slot.versions.read().map(|v| v.clone()).unwrap_or_default();
        if versions.is_empty() {
            return "it holds no deployed version".to_string();
        }
        let listed: Vec<String> = versions
            .iter()
            .map(|v| {
                let state = match v.record().state {
                    VersionState::Ready => "deployed, never active",
                    VersionState::Active => "active",
                    VersionState::Retired => "retired",
                    VersionState::Failed => "failed",
                };
                format!("{} {state}", v.id)
            })
            .collect();
        format!("versions: {}", listed.join(", "))
    }
}

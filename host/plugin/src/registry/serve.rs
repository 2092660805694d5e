//! One call through a slot: the active version, then earlier good versions,
//! then the native policy, until an answer passes validation; failures
//! counted towards automatic rollback.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use paceline_plugin_sdk::types as sdk;
use paceline_plugin_sdk::validate::{self, Violation};

use super::shadow::{placement_disagreements, victim_disagreements};
use super::{Answer, Names, Registry, ServedBy, Slot, Version, now_ms};
use crate::error::{CallError, FaultKind, PluginError};
use crate::natives::{Native, NativePolicy};
use crate::persist::VersionState;
use crate::runtime::{GpuUnit, Prepared, World, call_error};
/// A native fallback ready to answer one call: its name and the call.
type NativeCall<'a, O> = (&'static str, Box<dyn Fn() -> O + 'a>);
impl Registry {
    /// Runs one call on the active version, then on earlier good versions,
    /// then on the native policy, until one gives a valid answer.
    fn serve<I, O>(
        &self,
        slot: &Arc<Slot>,
        input: &I,
        invoke: impl Fn(&Prepared) -> Result<O, (FaultKind, String)>,
        check: impl Fn(&O) -> Result<(), Violation>,
        native: Option<NativeCall<'_, O>>,
    ) -> Result<Answer<O>, PluginError>
    where
        I: serde::Serialize,
    {
        let mut faults = Vec::new();
        let active = slot.active.load_full();
        let mut tried: Vec<String> = Vec::new();
        let mut candidate = active.clone();
        while let Some(v) = candidate {
            tried.push(v.id.clone());
            let started = Instant::now();
            let outcome = invoke(&v.prepared).and_then(|o| match check(&o) {
                Ok(()) => Ok(o),
                Err(violation) => Err((FaultKind::InvalidAnswer, violation.to_string())),
            });
            match outcome {
                Ok(o) => {
                    v.metrics.record(started.elapsed(), None);
                    if active.as_ref().is_some_and(|a| Arc::ptr_eq(a, &v)) {
                        slot.consecutive_failures.store(0, Ordering::Relaxed);
                    }
                    if !faults.is_empty() {
                        slot.fallbacks.fetch_add(1, Ordering::Relaxed);
                    }
                    return Ok(Answer {
                        value: o,
                        served_by: ServedBy::Version(v.id.clone()),
                        faults,
                        gpu_unit: GpuUnit::Milli,
                    });
                }
                Err(fault) => {
                    v.metrics.record(started.elapsed(), Some(fault.0));
                    let err = call_error(&v.id, input, fault);
                    tracing::warn!(slot = %slot.name, version = %v.id, kind = %err.kind, input = %err.input_hash, message = %err.message, "plugin call failed; falling back");
                    faults.push(err);
                    if active.as_ref().is_some_and(|a| Arc::ptr_eq(a, &v)) {
                        self.note_failure(slot, &v);
                    }
                }
            }
            candidate = self.previous_good(slot, &tried);
        }
        match native {
            Some((name, f)) => {
                // A slot with no version at all is served natively by design;
                // only an answer given after a fault is a fallback.
                if !faults.is_empty() {
                    slot.fallbacks.fetch_add(1, Ordering::Relaxed);
                }
                let value = f();
                // The same contract as a component's answer: a native set by
                // `set_native` is code from outside this crate, and even a
                // built-in one must not put a broken answer into the cluster.
                // There is nothing below it to fall back to, so the call fails.
                if let Err(violation) = check(&value) {
                    let err =
                        call_error(&format!("native {name}"), input, (FaultKind::InvalidAnswer, violation.to_string()));
                    tracing::error!(slot = %slot.name, native = name, input = %err.input_hash, message = %err.message, "native policy answer refused");
                    return Err(PluginError::Call(err));
                }
                Ok(Answer { value, served_by: ServedBy::Native(name), faults, gpu_unit: GpuUnit::Milli })
            }
            None => Err(PluginError::Call(faults.pop().unwrap_or_else(|| CallError {
                kind: FaultKind::Instantiate,
                version: slot.name.clone(),
                message: "no active version and no native policy for this slot".into(),
                input_hash: crate::runtime::input_hash(input),
            }))),
        }
    }

    /// An answer that `served_by` gave through `slot_name` passed validation
    /// but was refused downstream (by the resource manager or the job
    /// manager, at `stage`) for `reason`. It counts as a fault of that
    /// version as an invalid answer does, under its own kind: a
    /// `refused_downstream` error in its metrics, a warning with the reason, and a step towards
    /// automatic rollback while it is the active version. A native answer
    /// is only logged (there is nothing to roll back to below it).
    pub fn report_refusal(&self, slot_name: &str, served_by: &ServedBy, stage: &str, reason: &str) {
        let ServedBy::Version(id) = served_by else {
            tracing::error!(slot = slot_name, served_by = ?served_by, stage, reason, "native plugin answer refused downstream");
            return;
        };
        let Ok(slot) = self.slot(slot_name) else { return };
        let Some(v) = slot.find(id) else { return };
        v.metrics.record_fault(FaultKind::RefusedDownstream);
        tracing::warn!(slot = slot_name, version = %id, stage, reason, "plugin answer refused downstream; counted as a fault");
        if slot.active.load().as_ref().is_some_and(|a| Arc::ptr_eq(a, &v)) {
            self.note_failure(&slot, &v);
        }
    }

    /// The most recently active version not yet tried and not failed.
    fn previous_good(&self, slot: &Slot, tried: &[String]) -> Option<Arc<Version>> {
        let history = slot.history.lock().ok()?.clone();
        history
            .iter()
            .rev()
            .filter(|id| !tried.contains(id))
            .filter_map(|id| slot.find(id))
            .find(|v| v.record().state != VersionState::Failed)
    }

    fn note_failure(&self, slot: &Slot, v: &Arc<Version>) {
        let n = slot.consecutive_failures.fetch_add(1, Ordering::Relaxed) + 1;
        if n < self.runtime.config().auto_rollback_after {
            return;
        }
        let Ok(_admin) = self.admin.lock() else { return };
        // Only roll back if the failing version is still the active one.
        if !slot.active.load().as_ref().is_some_and(|a| Arc::ptr_eq(a, v)) {
            return;
        }
        match self.rollback_locked(slot, Some(v)) {
            Ok(now) => {
                tracing::error!(slot = %slot.name, failed = %v.id, now_active = ?now, failures = n, "plugin rolled back automatically")
            }
            Err(e) => tracing::error!(slot = %slot.name, error = %e, "automatic rollback failed"),
        }
    }

    /// Places a round through the slot (e.g. `placement/batch`).
    pub fn place(
        &self,
        slot_name: &str,
        request: &sdk::PlacementRequest,
    ) -> Result<Answer<sdk::PlacementResult>, PluginError> {
        self.place_named(slot_name, request, Names::default)
    }

    /// [`Registry::place`], with the names of the request's tasks and hosts
    /// for the shadow report's rows; `names` is called only when the slot
    /// has a shadow run.
    pub fn place_named(
        &self,
        slot_name: &str,
        request: &sdk::PlacementRequest,
        names: impl FnOnce() -> Names,
    ) -> Result<Answer<sdk::PlacementResult>, PluginError> {
        let slot = self.slot(slot_name)?;
        if slot.world != World::Placement {
            return Err(PluginError::UnknownSlot(slot_name.to_string()));
        }
        let native = match self.native(slot_name) {
            Some(NativePolicy { name, policy: Native::Placement(f) }) => {
                let answer = move || {
                    let mut out = f(request);
                    paceline_plugin_sdk::placement::complete_grants(request, &mut out);
                    out
                };
                Some((name, Box::new(answer) as Box<dyn Fn() -> sdk::PlacementResult>))
            }
            _ => None,
        };
        let runtime = &self.runtime;
        let answer = self.serve(
            &slot,
            request,
            |p| runtime.call_placement(p, request),
            |o| validate::check_placement(request, o),
            native,
        )?;
        if slot.shadow.load().is_some() {
            let (req, active, names) = (request.clone(), answer.value.clone(), names());
            let runtime = self.runtime.clone();
            Self::send_shadow(&slot, move |v, report| {
                let started = Instant::now();
                let out = runtime.call_placement(&v.prepared, &req).and_then(|o| {
                    validate::check_placement(&req, &o)
                        .map(|_| o)
                        .map_err(|e| (FaultKind::InvalidAnswer, e.to_string()))
                });
                v.metrics.record(started.elapsed(), out.as_ref().err().map(|e| e.0));
                let Ok(mut r) = report.lock() else { return };
                r.compared += 1;
                match out {
                    Ok(o) => {
                        let rows = placement_disagreements(&req, &names, &active, &o, now_ms());
                        let differing = rows.len() as u64;
                        if differing == 0 {
                            r.identical += 1;
                        } else {
                            r.tasks_differing += differing;
                            r.keep(rows);
                            if r.samples.len() < 10 {
                                r.samples.push(format!(
                                    "round {}: {differing} of {} tasks placed differently",
                                    req.round,
                                    req.tasks.len()
                                ));
                            }
                        }
                    }
                    Err((kind, msg)) => {
                        r.candidate_faults += 1;
                        if r.samples.len() < 10 {
                            r.samples.push(format!("round {}: candidate failed ({kind}): {msg}", req.round));
                        }
                    }
                }
            });
        }
        Ok(answer)
    }

    /// Chooses preemption victims through the `preemption` slot.
    pub fn select_victims(&self, request: &sdk::PreemptionRequest) -> Result<Answer<Vec<sdk::Victim>>, PluginError> {
        let slot = self.slot("preemption")?;
        let runtime = &self.runtime;
        let native = match self.native("preemption") {
            // A native policy is built against the current SDK: milli-GPUs.
            Some(NativePolicy { name, policy: Native::Preemption(f) }) => Some((
                name,
                Box::new(move || (f(request), GpuUnit::Milli)) as Box<dyn Fn() -> (Vec<sdk::Victim>, GpuUnit)>,
            )),
            _ => None,
        };
        let judged =
            self.serve(&slot, request, |p| runtime.call_preemption(p, request), |o| judge_victims(request, o), native)?;
        let answer = Answer {
            value: judged.value.0,
            served_by: judged.served_by,
            faults: judged.faults,
            gpu_unit: judged.value.1,
        };
        if slot.shadow.load().is_some() {
            let (req, active) = (request.clone(), answer.value.clone());
            let runtime = self.runtime.clone();
            Self::send_shadow(&slot, move |v, report| {
                let out = runtime.call_preemption(&v.prepared, &req).map(|o| o.0);
                let Ok(mut r) = report.lock() else { return };
                r.compared += 1;
                match out {
                    Ok(o) if o == active => r.identical += 1,
                    Ok(o) => {
                        r.keep(victim_disagreements(&req, &active, &o, now_ms()));
                        if r.samples.len() < 10 {
                            r.samples.push(format!("active chose {} victims, candidate {}", active.len(), o.len()));
                        }
                    }
                    Err(_) => r.candidate_faults += 1,
                }
            });
        }
        Ok(answer)
    }

    /// Asks a lifecycle slot (`lifecycle/<kind>`) how to react to an event:
    /// [`Registry::on_events`] with a burst of one.
    pub fn on_event(
        &self,
        slot_name: &str,
        job: &sdk::JobView,
        tasks: &[sdk::TaskView],
        event: &sdk::Event,
    ) -> Result<Answer<Vec<sdk::Action>>, PluginError> {
        self.on_events(slot_name, job, tasks, std::slice::from_ref(event))
    }

    /// Asks a lifecycle slot about several events of one job in one call
    /// (`on-events`, WIT 0.1.1). A component built against 0.1.0, and the
    /// native fallback, answer each event in turn against the same views;
    /// the answers are concatenated.
    pub fn on_events(
        &self,
        slot_name: &str,
        job: &sdk::JobView,
        tasks: &[sdk::TaskView],
        events: &[sdk::Event],
    ) -> Result<Answer<Vec<sdk::Action>>, PluginError> {
        let slot = self.slot(slot_name)?;
        if slot.world != World::Lifecycle {
            return Err(PluginError::UnknownSlot(slot_name.to_string()));
        }
        let native = match self.native(slot_name) {
            Some(NativePolicy { name, policy: Native::Lifecycle(f) }) => {
                Some((name, Box::new(move || f(job, tasks, events)) as Box<dyn Fn() -> Vec<sdk::Action> + '_>))
            }
            _ => None,
        };
        let runtime = &self.runtime;
        self.serve(
            &slot,
            &(job, tasks, events),
            |p| runtime.call_lifecycle_batch(p, job, tasks, events),
            |o| validate::check_actions(job, tasks, o),
            native,
        )
    }
}

/// Checks a preemption answer in the GPU unit its component counted in:
/// milli-GPUs, or whole devices for a component built before 0.1.3 that
/// saw a request with GPU shares rounded up (it keeps working as it did).
pub(super) fn judge_victims(
    request: &sdk::PreemptionRequest,
    (victims, unit): &(Vec<sdk::Victim>, GpuUnit),
) -> Result<(), Violation> {
    match unit {
        GpuUnit::Milli => validate::check_victims(request, victims),
        GpuUnit::Whole => validate::check_victims(&request.in_whole_gpus(), victims),
    }
}

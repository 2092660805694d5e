//! Deploying a version: compile, check against the slot's world, run the
//! self-test on generated inputs, store.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use paceline_plugin_sdk::types as sdk;
use paceline_plugin_sdk::validate::{self, Violation};

use super::serve::judge_victims;
use super::{Registry, Version, check_name, now_ms};
use crate::error::{CallError, FaultKind, PluginError};
use crate::metrics::VersionMetrics;
use crate::persist::{VersionRecord, VersionState};
use crate::runtime::{PluginRuntime, PreparedWorld};
use crate::samples;

/// Time the deploy self-test may take; cases past it are not run.
pub const SELF_TEST_BUDGET: Duration = Duration::from_secs(2);

/// Inputs of the self-test as JSON and as a hash, whatever their type.
mod erased {
    pub(crate) trait Json {
        fn json(&self) -> String;
        fn hash(&self) -> String;
    }
    impl<T: serde::Serialize> Json for T {
        fn json(&self) -> String {
            serde_json::to_string(self).unwrap_or_default()
        }
        fn hash(&self) -> String {
            crate::runtime::input_hash(self)
        }
    }
}

/// Options of [`Registry::deploy`].
#[derive(Clone, Copy, Debug)]
pub struct DeployOptions {
    /// Run the component on sample inputs before accepting it.
    pub self_test: bool,
}

impl Default for DeployOptions {
    fn default() -> Self {
        DeployOptions { self_test: true }
    }
}

/// What `deploy` reports.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Deployed {
    /// The new version.
    pub record: VersionRecord,
    /// Compilation came from the cache.
    pub from_cache: bool,
}

impl Registry {
    /// Compiles, checks against the slot's world, self-tests and stores a
    /// new version. It does not serve until [`Registry::activate`].
    pub fn deploy(
        &self,
        slot_name: &str,
        name: &str,
        version: &str,
        wasm: &[u8],
        options: DeployOptions,
    ) -> Result<Deployed, PluginError> {
        check_name("name", name)?;
        check_name("version", version)?;
        let slot = self.slot(slot_name)?;
        let _admin = self.admin.lock().map_err(|e| PluginError::Runtime(e.to_string()))?;
        let id = format!("{name}@{version}");
        if slot.find(&id).is_some() {
            return Err(PluginError::Duplicate { slot: slot_name.to_string(), version: id });
        }
        let (component, info) = self.runtime.compile(wasm)?;
        let prepared = self.runtime.prepare(&component, slot.world, slot_name)?;
        let record = VersionRecord {
            slot: slot_name.to_string(),
            name: name.to_string(),
            version: version.to_string(),
            sha256: PluginRuntime::sha256_hex(wasm),
            world: slot.world,
            deployed_at_ms: now_ms(),
            state: VersionState::Ready,
            deadline_ms: None,
            candidates: None,
        };
        let candidate = Version {
            record: Mutex::new(record.clone()),
            id: id.clone(),
            prepared,
            metrics: VersionMetrics::default(),
        };
        if options.self_test {
            if let Err(e) = self.self_test(&candidate) {
                tracing::warn!(slot = slot_name, version = %id, reason = %e, "plugin deploy refused by its self-test");
                return Err(e);
            }
            // A version that is not active holds no pooled slots.
            candidate.prepared.drain_warm();
        }
        self.store.save_version(&record, wasm).map_err(PluginError::Storage)?;
        slot.versions.write().map_err(|e| PluginError::Runtime(e.to_string()))?.push(Arc::new(candidate));
        tracing::info!(slot = slot_name, version = %id, sha256 = %record.sha256, "plugin deployed");
        Ok(Deployed { record, from_cache: info.from_cache })
    }

    /// Runs the candidate on the generated corpus ([`samples`]) and checks
    /// every answer with the same validation that guards every call. The
    /// first violation or fault refuses the deploy, naming the case (world,
    /// position in the corpus, seed) and carrying its input as JSON. Bounded
    /// by [`SELF_TEST_BUDGET`]: the corpus is always walked in the same
    /// order, so a slow machine runs a prefix of it, never other cases.
    fn self_test(&self, v: &Version) -> Result<(), PluginError> {
        let started = Instant::now();
        let over = || started.elapsed() > SELF_TEST_BUDGET;
        let fail = |case: &str, input: &dyn erased::Json, (kind, message): (FaultKind, String)| {
            let mut json = input.json();
            if json.len() > 4000 {
                // On a character boundary: the input may hold any text.
                let cut = (0..=4000).rev().find(|&i| json.is_char_boundary(i)).unwrap_or(0);
                json.truncate(cut);
                json.push('…');
            }
            PluginError::SelfTest(CallError {
                kind,
                version: v.id.clone(),
                message: format!(
                    "{case} of the generated corpus (seed {:#x}): {message}; input: {json}",
                    samples::SEED
                ),
                input_hash: input.hash(),
            })
        };
        let invalid = |e: Violation| (FaultKind::InvalidAnswer, e.to_string());
        let mut cases = 0usize;
        match &v.prepared.0 {
            PreparedWorld::Placement(_) | PreparedWorld::PlacementGpu(_) => {
                // A component built before 0.1.2 is tried on what a 0.1.1
                // host sends (no GPU side): it places whole GPUs only, and a
                // round with a share it places where no device takes it is
                // refused and served by the fallback (decision 0035).
                let gpu_world = matches!(v.prepared.0, PreparedWorld::PlacementGpu(_));
                for (case, mut req) in samples::placement().enumerate() {
                    if over() {
                        break;
                    }
                    if !gpu_world {
                        req.gpu_hosts.clear();
                        req.gpu_tasks.clear();
                        req.gpu_workload.clear();
                    }
                    cases += 1;
                    let what = format!("placement case {case}");
                    let out = self.runtime.call_placement(&v.prepared, &req).map_err(|e| fail(&what, &req, e))?;
                    validate::check_placement(&req, &out).map_err(|e| fail(&what, &req, invalid(e)))?;
                }
            }
            PreparedWorld::Preemption(_) | PreparedWorld::PreemptionGpu(_) => {
                // A component built before 0.1.3 sees GPU shares as whole
                // devices and is judged in them (`judge_victims`).
                for (case, req) in samples::preemption().enumerate() {
                    if over() {
                        break;
                    }
                    cases += 1;
                    let what = format!("preemption case {case}");
                    let out = self.runtime.call_preemption(&v.prepared, &req).map_err(|e| fail(&what, &req, e))?;
                    judge_victims(&req, &out).map_err(|e| fail(&what, &req, invalid(e)))?;
                }
            }
            PreparedWorld::Lifecycle(_) | PreparedWorld::LifecycleBatched(_) => {
                'sequences: for (case, mut seq) in samples::lifecycle().enumerate() {
                    let mut event = sdk::Event::JobCreated;
                    for step in 0..samples::LIFECYCLE_STEPS {
                        if over() {
                            break 'sequences;
                        }
                        cases += 1;
                        let input = (&seq.job, &seq.tasks, &event);
                        let what = format!("lifecycle sequence {case}, step {step}");
                        let out = self
                            .runtime
                            .call_lifecycle(&v.prepared, &seq.job, &seq.tasks, &event)
                            .map_err(|e| fail(&what, &input, e))?;
                        validate::check_actions(&seq.job, &seq.tasks, &out)
                            .map_err(|e| fail(&what, &input, invalid(e)))?;
                        // The batched export too, with the event twice: the
                        // path the job manager takes for bursts.
                        let events = [event.clone(), event.clone()];
                        let batched = self
                            .runtime
                            .call_lifecycle_batch(&v.prepared, &seq.job, &seq.tasks, &events)
                            .map_err(|e| fail(&what, &input, e))?;
                        validate::check_actions(&seq.job, &seq.tasks, &batched)
                            .map_err(|e| fail(&what, &input, invalid(e)))?;
                        seq.apply(&out);
                        event = seq.next_event();
                    }
                }
            }
        }
        tracing::debug!(version = %v.id, cases, took_ms = started.elapsed().as_millis() as u64, "plugin self-test passed");
        Ok(())
    }
}

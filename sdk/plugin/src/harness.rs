//! A native test harness: scenario files, a runner that calls a policy as
//! plain Rust, and the expectation check.
//!
//! A scenario is a YAML (or JSON) file:
//!
//! ```yaml
//! name: two tasks, one fits
//! input:
//!   placement:
//!     hosts:
//!       - { free: { cpu_millis: 1000, memory_mib: 1024 }, total: { cpu_millis: 1000, memory_mib: 1024 } }
//!     jobs: [ {} ]
//!     constraints: [ {} ]
//!     tasks:
//!       - { gang: 0, demand: { cpu_millis: 800 } }
//!       - { gang: 1, demand: { cpu_millis: 800 } }
//! expect:
//!   placement:
//!     assignments: [ { task: 0, host: 0 } ]
//!     unplaced: [ { task: 1, reason: insufficient_resources } ]
//! ```
//!
//! The same scenario runs through the real component with
//! `paceline plugin run FILE.wasm --scenario FILE`, or from Rust with the host
//! runtime's `paceline_plugin::scenario` module; both must give the same
//! decision as [`run_native`].

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::types::{
    Action, Event, JobView, PlacementRequest, PlacementResult, PreemptionRequest, TaskView, UnplacedReason, Victim,
};
use crate::validate::{self, Violation};
use crate::{LifecyclePolicy, PlacementPolicy, PreemptionPolicy};

/// A recorded input for one world, with an optional expected decision.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// What the scenario shows.
    pub name: String,
    /// The policy's input.
    pub input: Input,
    /// The decision the policy must make, if the scenario pins one.
    #[serde(default)]
    pub expect: Option<Expect>,
}

/// A policy input, tagged by world.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Input {
    /// For a `placement` policy.
    Placement(PlacementRequest),
    /// For a `preemption` policy.
    Preemption(PreemptionRequest),
    /// For a `lifecycle` policy.
    Lifecycle {
        /// The job.
        job: JobView,
        /// Its tasks.
        tasks: Vec<TaskView>,
        /// What happened.
        event: Event,
    },
}

impl Input {
    /// The world this input is for.
    pub fn world(&self) -> &'static str {
        match self {
            Input::Placement(_) => "placement",
            Input::Preemption(_) => "preemption",
            Input::Lifecycle { .. } => "lifecycle",
        }
    }
}

/// A policy's decision, tagged by world.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    /// A placement answer.
    Placement(PlacementResult),
    /// Chosen victims.
    Preemption(Vec<Victim>),
    /// Lifecycle actions.
    Lifecycle(Vec<Action>),
}

/// What a scenario expects. Placement expectations compare assignments
/// exactly and unplaced tasks by task and reason (details are free text).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Expect {
    /// Expected placement.
    Placement(ExpectedPlacement),
    /// Expected victims (order ignored).
    Preemption(Vec<Victim>),
    /// Expected actions (in order).
    Lifecycle(Vec<Action>),
}

/// An expected placement answer.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ExpectedPlacement {
    /// Expected assignments (order ignored).
    pub assignments: Vec<crate::types::Assignment>,
    /// Expected unplaced tasks with reasons (order ignored).
    pub unplaced: Vec<ExpectedUnplaced>,
}

/// An expected unplaced task.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExpectedUnplaced {
    /// Task index.
    pub task: u32,
    /// Reason.
    pub reason: UnplacedReason,
}

/// Why a scenario run failed.
#[derive(Debug, thiserror::Error)]
pub enum HarnessError {
    /// The file could not be read.
    #[error("cannot read scenario {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// The file is not a valid scenario.
    #[error("scenario {path} is not valid: {message}")]
    Parse {
        /// The file.
        path: String,
        /// What the parser said.
        message: String,
    },
    /// The policy is for another world than the scenario.
    #[error("scenario is for the {scenario} world, the policy for {policy}")]
    WrongWorld {
        /// The scenario's world.
        scenario: &'static str,
        /// The policy's world.
        policy: &'static str,
    },
    /// The policy's answer broke the contract.
    #[error("the answer is invalid: {0}")]
    Invalid(#[from] Violation),
    /// The answer differs from the scenario's expectation.
    #[error("scenario {name}: expected {expected}, got {actual}")]
    Mismatch {
        /// Scenario name.
        name: String,
        /// Expected, as JSON.
        expected: String,
        /// Actual, as JSON.
        actual: String,
    },
}

impl Scenario {
    /// Reads a YAML or JSON scenario file (JSON is valid YAML).
    pub fn load(path: impl AsRef<Path>) -> Result<Scenario, HarnessError> {
        let path = path.as_ref();
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| HarnessError::Io { path: shown.clone(), source })?;
        Self::parse(&text).map_err(|message| HarnessError::Parse { path: shown, message })
    }

    /// Parses a scenario from YAML or JSON text.
    ///
    /// The text is read as YAML into a JSON value first: serde_yaml wants
    /// enums written as YAML tags (`!placement`), while scenario files use
    /// the plain `placement: {...}` form that JSON and people write.
    pub fn parse(text: &str) -> Result<Scenario, String> {
        let value: serde_json::Value = serde_yaml::from_str(text).map_err(|e| e.to_string())?;
        serde_json::from_value(value).map_err(|e| e.to_string())
    }

    /// Checks `decision` against the host's validation and this scenario's
    /// expectation, if any.
    pub fn check(&self, decision: &Decision) -> Result<(), HarnessError> {
        match (&self.input, decision) {
            (Input::Placement(req), Decision::Placement(res)) => validate::check_placement(req, res)?,
            (Input::Preemption(req), Decision::Preemption(v)) => validate::check_victims(req, v)?,
            _ => {}
        }
        let Some(expect) = &self.expect else { return Ok(()) };
        let matches = match (expect, decision) {
            (Expect::Placement(e), Decision::Placement(d)) => {
                let mut ea = e.assignments.clone();
                let mut da = d.assignments.clone();
                ea.sort();
                da.sort();
                let mut eu: Vec<(u32, &str)> = e.unplaced.iter().map(|u| (u.task, u.reason.as_str())).collect();
                let mut du: Vec<(u32, &str)> = d.unplaced.iter().map(|u| (u.task, u.reason.as_str())).collect();
                eu.sort();
                du.sort();
                ea == da && eu == du
            }
            (Expect::Preemption(e), Decision::Preemption(d)) => {
                let key = |v: &Victim| (v.task, v.need);
                let mut e: Vec<_> = e.iter().map(key).collect();
                let mut d: Vec<_> = d.iter().map(key).collect();
                e.sort();
                d.sort();
                e == d
            }
            (Expect::Lifecycle(e), Decision::Lifecycle(d)) => e == d,
            _ => false,
        };
        if matches {
            Ok(())
        } else {
            Err(HarnessError::Mismatch {
                name: self.name.clone(),
                expected: serde_json::to_string(expect).unwrap_or_default(),
                actual: serde_json::to_string(decision).unwrap_or_default(),
            })
        }
    }
}

/// Loads every scenario file (`.yaml`, `.yml`, `.json`) of a directory, in
/// name order. Fails on an unreadable directory, a bad file, or none at all.
pub fn load_dir(dir: impl AsRef<Path>) -> Result<Vec<Scenario>, HarnessError> {
    let dir = dir.as_ref();
    let shown = dir.display().to_string();
    let mut paths: Vec<_> = std::fs::read_dir(dir)
        .map_err(|source| HarnessError::Io { path: shown.clone(), source })?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml" || x == "json"))
        .collect();
    paths.sort();
    if paths.is_empty() {
        return Err(HarnessError::Parse { path: shown, message: "no scenario files".into() });
    }
    paths.iter().map(Scenario::load).collect()
}

/// Runs a placement policy natively on a scenario and checks the answer.
pub fn run_placement<P: PlacementPolicy>(scenario: &Scenario) -> Result<Decision, HarnessError> {
    let Input::Placement(req) = &scenario.input else {
        return Err(HarnessError::WrongWorld { scenario: scenario.input.world(), policy: "placement" });
    };
    let decision = Decision::Placement(P::place(req));
    scenario.check(&decision)?;
    Ok(decision)
}

/// Runs a preemption policy natively on a scenario and checks the answer.
pub fn run_preemption<P: PreemptionPolicy>(scenario: &Scenario) -> Result<Decision, HarnessError> {
    let Input::Preemption(req) = &scenario.input else {
        return Err(HarnessError::WrongWorld { scenario: scenario.input.world(), policy: "preemption" });
    };
    let decision = Decision::Preemption(P::select_victims(req));
    scenario.check(&decision)?;
    Ok(decision)
}

/// Runs a lifecycle policy natively on a scenario and checks the answer.
pub fn run_lifecycle<P: LifecyclePolicy>(scenario: &Scenario) -> Result<Decision, HarnessError> {
    let Input::Lifecycle { job, tasks, event } = &scenario.input else {
        return Err(HarnessError::WrongWorld { scenario: scenario.input.world(), policy: "lifecycle" });
    };
    let decision = Decision::Lifecycle(P::on_event(job, tasks, event));
    scenario.check(&decision)?;
    Ok(decision)
}

/// Runs whichever world `scenario` is for, natively. Used with
/// [`run_native`] to pick the policy by world.
pub fn run_native(scenario: &Scenario, policies: &NativePolicies) -> Result<Decision, HarnessError> {
    match &scenario.input {
        Input::Placement(req) => {
            let f = policies.placement.ok_or(HarnessError::WrongWorld { scenario: "placement", policy: "other" })?;
            let d = Decision::Placement(f(req));
            scenario.check(&d)?;
            Ok(d)
        }
        Input::Preemption(req) => {
            let f = policies.preemption.ok_or(HarnessError::WrongWorld { scenario: "preemption", policy: "other" })?;
            let d = Decision::Preemption(f(req));
            scenario.check(&d)?;
            Ok(d)
        }
        Input::Lifecycle { job, tasks, event } => {
            let f = policies.lifecycle.ok_or(HarnessError::WrongWorld { scenario: "lifecycle", policy: "other" })?;
            let d = Decision::Lifecycle(f(job, tasks, event));
            scenario.check(&d)?;
            Ok(d)
        }
    }
}

/// A lifecycle policy's `on_event`, as a plain function.
pub type LifecycleFn = fn(&JobView, &[TaskView], &Event) -> Vec<Action>;

/// Function pointers to a plugin's native entry points, one per world it implements.
#[derive(Clone, Copy, Debug, Default)]
pub struct NativePolicies {
    /// `PlacementPolicy::place`.
    pub placement: Option<fn(&PlacementRequest) -> PlacementResult>,
    /// `PreemptionPolicy::select_victims`.
    pub preemption: Option<fn(&PreemptionRequest) -> Vec<Victim>>,
    /// `LifecyclePolicy::on_event`.
    pub lifecycle: Option<LifecycleFn>,
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOC_SCENARIO: &str = r#"
name: two tasks, one fits
input:
  placement:
    hosts:
      - { free: { cpu_millis: 1000, memory_mib: 1024 }, total: { cpu_millis: 1000, memory_mib: 1024 } }
    jobs: [ {} ]
    constraints: [ {} ]
    tasks:
      - { gang: 0, demand: { cpu_millis: 800 } }
      - { gang: 1, demand: { cpu_millis: 800 } }
expect:
  placement:
    assignments: [ { task: 0, host: 0 } ]
    unplaced: [ { task: 1, reason: insufficient_resources } ]
"#;

    struct FirstFit;
    impl PlacementPolicy for FirstFit {
        fn place(request: &PlacementRequest) -> PlacementResult {
            crate::placement::place_gangs(crate::placement::Round::new(request), |round, t| {
                let demand = round.request.tasks[t as usize].demand;
                (0..round.free.len() as u32)
                    .find(|&h| demand.fits_in(&round.free[h as usize]))
                    .ok_or(UnplacedReason::InsufficientResources)
            })
        }
    }

    #[test]
    fn documented_scenario_parses_and_passes() {
        let s = Scenario::parse(DOC_SCENARIO).expect("parses");
        run_placement::<FirstFit>(&s).expect("first fit meets the expectation");
    }

    #[test]
    fn mismatch_is_reported() {
        let mut s = Scenario::parse(DOC_SCENARIO).expect("parses");
        if let Some(Expect::Placement(e)) = &mut s.expect {
            e.assignments[0].host = 0;
            e.unplaced.clear();
        }
        assert!(matches!(run_placement::<FirstFit>(&s), Err(HarnessError::Mismatch { .. })));
    }

    #[test]
    fn wrong_world_and_bad_file() {
        let s = Scenario::parse(DOC_SCENARIO).expect("parses");
        assert!(matches!(run_preemption::<Never>(&s), Err(HarnessError::WrongWorld { .. })));
        assert!(Scenario::parse("name: x\ninput: { nonsense: 1 }").is_err());
    }

    struct Never;
    impl PreemptionPolicy for Never {
        fn select_victims(_: &PreemptionRequest) -> Vec<Victim> {
            Vec::new()
        }
    }
}

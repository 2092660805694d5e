//! Each default plugin, loaded through the real runtime, gives the expected
//! answer on its scenario table and the same answer as its native build.

use paceline_plugin::{DeployOptions, ServedBy};
use paceline_plugin_artifacts as artifacts;
use paceline_plugin_sdk::harness::{Decision, Scenario};
use paceline_plugin_sdk::{PlacementPolicy, PreemptionPolicy};

use crate::support::{registry, runtime, workload};

fn scenarios(plugin: &str) -> Vec<Scenario> {
    paceline_plugin_sdk::harness::load_dir(format!("{}/../../plugins/{plugin}/scenarios", env!("CARGO_MANIFEST_DIR")))
        .expect("scenario table")
}

#[test]
fn placement_plugins_match_scenarios_and_native() {
    type Native = fn(&paceline_plugin_sdk::types::PlacementRequest) -> paceline_plugin_sdk::types::PlacementResult;
    let cases: [(&str, &[u8], Native); 3] = [
        ("binpack", artifacts::BINPACK, plugin_binpack::Binpack::place),
        ("spread", artifacts::SPREAD, plugin_spread::Spread::place),
        ("gang-gpu", artifacts::GANG_GPU, plugin_gang_gpu::GangGpu::place),
    ];
    let rt = runtime();
    for (name, wasm, native) in cases {
        for s in scenarios(name) {
            let d = paceline_plugin::scenario::run_component(rt.clone(), wasm, &s)
                .unwrap_or_else(|e| panic!("{name}: {}: {e}", s.name));
            s.check(&d).unwrap_or_else(|e| panic!("{name}: {e}"));
            let paceline_plugin_sdk::harness::Input::Placement(req) = &s.input else { panic!("placement scenario") };
            assert_eq!(d, Decision::Placement(native(req)), "{name}: {}: wasm and native differ", s.name);
        }
        // Larger random rounds with gangs, constraints, preferences, limits.
        let reg = registry(rt.clone());
        let slot = format!("placement/{name}");
        reg.deploy(&slot, name, "1", wasm, DeployOptions::default()).expect("deploys");
        reg.activate(&slot, &format!("{name}@1")).expect("activates");
        for seed in 0..5 {
            let req = workload(300, 200, seed);
            let answer = reg.place(&slot, &req).expect("answers");
            assert_eq!(
                answer.served_by,
                ServedBy::Version(format!("{name}@1")),
                "{name} seed {seed}: {:?}",
                answer.faults
            );
            assert!(answer.faults.is_empty());
            assert_eq!(answer.value, native(&req), "{name} seed {seed}: wasm and native differ");
            assert!(!answer.value.assignments.is_empty(), "{name} placed nothing");
        }
    }
}

#[test]
fn preemption_plugin_matches_scenarios_and_native() {
    let rt = runtime();
    for s in scenarios("priority-preempt") {
        let d = paceline_plugin::scenario::run_component(rt.clone(), artifacts::PRIORITY_PREEMPT, &s).expect("runs");
        s.check(&d).unwrap_or_else(|e| panic!("{e}"));
        let paceline_plugin_sdk::harness::Input::Preemption(req) = &s.input else { panic!("preemption scenario") };
        assert_eq!(d, Decision::Preemption(plugin_priority_preempt::PriorityPreempt::select_victims(req)));
    }
}

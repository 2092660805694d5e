//! A decision is a pure function of its input: byte-identical answers across
//! instances and runtimes, and no clock, randomness or environment leaks in.

use paceline_plugin::{DeployOptions, RuntimeConfig};
use paceline_plugin_artifacts as artifacts;

use crate::support::{registry, runtime, runtime_with, workload};

fn answer_bytes(
    rt: std::sync::Arc<paceline_plugin::PluginRuntime>,
    wasm: &[u8],
    req: &paceline_plugin_sdk::types::PlacementRequest,
) -> Vec<u8> {
    let reg = registry(rt);
    reg.deploy("placement/x", "p", "1", wasm, DeployOptions { self_test: false }).expect("deploys");
    reg.activate("placement/x", "p@1").expect("activates");
    let a = reg.place("placement/x", req).expect("answers");
    assert!(a.faults.is_empty(), "{:?}", a.faults);
    serde_json::to_vec(&a.value).expect("serialises")
}

#[test]
fn same_input_same_bytes_across_instances_and_runtimes() {
    let req = workload(200, 100, 11);
    for wasm in [artifacts::BINPACK, artifacts::SPREAD, artifacts::GANG_GPU, artifacts::GUEST_ENTROPY] {
        let first = answer_bytes(runtime(), wasm, &req);
        // A second engine with other limits, and a fuel-metered one.
        let second = answer_bytes(
            runtime_with(RuntimeConfig { memory_cap_bytes: 64 << 20, ..RuntimeConfig::default() }),
            wasm,
            &req,
        );
        let fueled = answer_bytes(
            runtime_with(RuntimeConfig { fuel_per_call: Some(u64::MAX / 2), ..RuntimeConfig::default() }),
            wasm,
            &req,
        );
        assert_eq!(first, second);
        assert_eq!(first, fueled);
    }
}

#[test]
fn repeated_calls_agree_with_fresh_and_with_reused_instances() {
    let req = workload(100, 50, 4);
    for reuse in [0, 1000] {
        let reg = registry(runtime_with(RuntimeConfig { reuse_instance_calls: reuse, ..RuntimeConfig::default() }));
        reg.deploy("placement/x", "p", "1", artifacts::SPREAD, DeployOptions::default()).expect("deploys");
        reg.activate("placement/x", "p@1").expect("activates");
        let first = reg.place("placement/x", &req).expect("answers").value;
        for _ in 0..20 {
            assert_eq!(reg.place("placement/x", &req).expect("answers").value, first, "reuse {reuse}");
        }
    }
    // With a fresh instance per call even a policy that iterates a HashMap
    // (seeded from wasi:random) answers identically every time.
    let strict = registry(runtime_with(RuntimeConfig { reuse_instance_calls: 0, ..RuntimeConfig::default() }));
    strict
        .deploy("placement/x", "e", "1", artifacts::GUEST_ENTROPY, DeployOptions { self_test: false })
        .expect("deploys");
    strict.activate("placement/x", "e@1").expect("activates");
    let first = strict.place("placement/x", &req).expect("answers").value;
    for _ in 0..5 {
        assert_eq!(strict.place("placement/x", &req).expect("answers").value, first);
    }
}

#[test]
fn the_sandbox_shows_no_real_clock_randomness_or_environment() {
    let req = workload(3, 3, 1);
    let bytes = answer_bytes(runtime(), artifacts::GUEST_ENTROPY, &req);
    let result: paceline_plugin_sdk::types::PlacementResult = serde_json::from_slice(&bytes).expect("parses");
    let detail = &result.unplaced[0].detail;
    // 2024-01-01T00:00:00Z, frozen; no environment; no filesystem.
    assert!(detail.starts_with("wall=1704067200000000000 "), "{detail}");
    assert!(detail.contains("env=0"), "{detail}");
    assert!(detail.contains("fs=false"), "{detail}");
    std::thread::sleep(std::time::Duration::from_millis(5));
    assert_eq!(bytes, answer_bytes(runtime(), artifacts::GUEST_ENTROPY, &req), "a later call sees the same world");
}

//! A decision is a pure function of its input: byte-identical answers across
//! instances and runtimes, and no clock, randomness or environment leaks in.

use paceline_plugin::{DeployOptions, RuntimeConfig};
use paceline_plugin_artifacts as artifacts;

use crate::support::{registry, runtime, runtime_with, workload};

fn answer_bytes(rt: std::sync::Arc<paceline_plugin::PluginRuntime>, wasm: &[u8], req: &paceline_plugin_sdk::types::PlacementRequest) -> Vec<u8> {
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
        let second = answer_bytes(runtime_with(RuntimeConfig { memory_cap_bytes: 64 << 20, ..RuntimeConfig::default() }), wasm, &req);
        let fueled = answer_bytes(runtime_with(RuntimeConfig { fuel_per_call: Some(u64::MAX / 2), ..RuntimeConfig::default() }), wasm, &req);
        assert_eq!(first, second);
        assert_eq!(first, fueled);
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

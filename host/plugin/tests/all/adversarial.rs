//! Hostile and broken components: each fault becomes a typed error, the
//! round falls back, and the slot keeps serving.

use std::time::{Duration, Instant};

use paceline_plugin::{DeployOptions, FaultKind, PluginError, RuntimeConfig, ServedBy, VersionState};
use paceline_plugin_artifacts as artifacts;
use paceline_plugin_sdk::PlacementPolicy;

use crate::support::{registry, runtime, runtime_with, workload};

const NO_SELF_TEST: DeployOptions = DeployOptions { self_test: false };

/// Deploys binpack as the good version, then `bad` on top and activates it.
/// The good version skips its self-test: the built-in is self-tested by its
/// own tests, and here it runs under the tight limits meant for the bad one
/// (a 100 ms deadline, which a self-test case overran on a loaded CI machine).
fn slot_with_bad_version(reg: &paceline_plugin::Registry, bad: &[u8]) {
    reg.deploy("placement/batch", "binpack", "1", artifacts::BINPACK, NO_SELF_TEST).expect("good deploys");
    reg.activate("placement/batch", "binpack@1").expect("activates");
    reg.deploy("placement/batch", "bad", "1", bad, NO_SELF_TEST).expect("bad deploys without self-test");
    reg.activate("placement/batch", "bad@1").expect("bad activates");
}

/// Calls the slot once with the bad version active; the answer must come from
/// the previous good version and carry exactly one fault of `kind`.
fn assert_contained(reg: &paceline_plugin::Registry, kind: FaultKind, round: u64) -> String {
    let mut req = workload(20, 10, 3);
    req.round = round;
    assert_contained_on(reg, kind, &req)
}

fn assert_contained_on(
    reg: &paceline_plugin::Registry,
    kind: FaultKind,
    req: &paceline_plugin_sdk::types::PlacementRequest,
) -> String {
    let answer = reg.place("placement/batch", req).expect("the slot still answers");
    assert_eq!(answer.served_by, ServedBy::Version("binpack@1".into()));
    assert_eq!(answer.value, plugin_binpack::Binpack::place(req));
    assert_eq!(answer.faults.len(), 1, "{:?}", answer.faults);
    let fault = &answer.faults[0];
    assert_eq!(fault.kind, kind, "{fault}");
    assert_eq!(fault.version, "bad@1");
    assert_eq!(fault.input_hash.len(), 16);
    fault.message.clone()
}

#[test]
fn infinite_loop_is_stopped_by_the_deadline() {
    let deadline = Duration::from_millis(100);
    let rt = runtime_with(RuntimeConfig { call_deadline: deadline, ..RuntimeConfig::default() });
    let reg = registry(rt);
    slot_with_bad_version(&reg, artifacts::GUEST_LOOP);
    let started = Instant::now();
    assert_contained(&reg, FaultKind::Deadline, 1);
    // Generous bound: the point is that the loop ends, not how fast.
    assert!(started.elapsed() < Duration::from_secs(10), "took {:?}", started.elapsed());
}

#[test]
fn memory_exhaustion_is_contained() {
    let rt = runtime_with(RuntimeConfig { memory_cap_bytes: 32 << 20, ..RuntimeConfig::default() });
    let reg = registry(rt);
    slot_with_bad_version(&reg, artifacts::GUEST_OOM);
    assert_contained(&reg, FaultKind::MemoryCap, 1);
}

#[test]
fn panic_becomes_a_typed_error_with_its_message() {
    let reg = registry(runtime());
    slot_with_bad_version(&reg, artifacts::GUEST_PANIC);
    let message = assert_contained(&reg, FaultKind::Panic, 41);
    assert!(message.contains("policy gave up on round 41"), "{message}");
}

#[test]
fn stack_overflow_is_contained() {
    let reg = registry(runtime());
    slot_with_bad_version(&reg, artifacts::GUEST_STACK);
    assert_contained(&reg, FaultKind::StackOverflow, 1);
}

#[test]
fn garbage_answers_are_rejected_by_validation() {
    let rt = runtime_with(RuntimeConfig { auto_rollback_after: 100, ..RuntimeConfig::default() });
    let reg = registry(rt);
    slot_with_bad_version(&reg, artifacts::GUEST_GARBAGE);
    let expected = ["host index", "more than once", "over capacity", "neither assigned nor unplaced"];
    // No constraints, so each round's answer breaks exactly the rule it targets.
    let mut req = workload(20, 10, 3);
    req.tasks.iter_mut().for_each(|t| t.constraints = 0);
    req.jobs.iter_mut().for_each(|j| j.max_per_host = 0);
    for (round, text) in expected.iter().enumerate() {
        req.round = round as u64;
        let message = assert_contained_on(&reg, FaultKind::InvalidAnswer, &req);
        assert!(message.contains(text), "round {round}: {message}");
    }
}

#[test]
fn repeated_failures_roll_the_slot_back_on_their_own() {
    let reg = registry(runtime());
    slot_with_bad_version(&reg, artifacts::GUEST_PANIC);
    let auto = RuntimeConfig::default().auto_rollback_after;
    for round in 0..u64::from(auto) {
        assert_contained(&reg, FaultKind::Panic, round);
    }
    assert_eq!(reg.active("placement/batch").expect("slot").as_deref(), Some("binpack@1"));
    let answer = reg.place("placement/batch", &workload(5, 5, 1)).expect("answers");
    assert!(answer.faults.is_empty(), "served directly after the rollback");
    let listed = reg.list();
    let bad = listed[0].versions.iter().find(|v| v.record.name == "bad").expect("listed");
    assert_eq!(bad.record.state, VersionState::Failed);
    assert_eq!(bad.metrics.errors.get("panic"), Some(&u64::from(auto)));
}

#[test]
fn with_no_good_version_the_native_policy_answers() {
    let reg = registry(runtime());
    reg.deploy("placement/batch", "bad", "1", artifacts::GUEST_PANIC, NO_SELF_TEST).expect("deploys");
    reg.activate("placement/batch", "bad@1").expect("activates");
    let req = workload(30, 10, 9);
    let answer = reg.place("placement/batch", &req).expect("answers");
    assert_eq!(answer.served_by, ServedBy::Native("binpack"));
    assert_eq!(answer.value, plugin_binpack::Binpack::place(&req));
    assert_eq!(answer.faults[0].kind, FaultKind::Panic);
}

#[test]
fn deploy_refuses_bad_components_and_keeps_serving() {
    let reg = registry(runtime_with(RuntimeConfig {
        call_deadline: Duration::from_millis(100),
        max_upload_bytes: 1 << 20,
        ..RuntimeConfig::default()
    }));
    reg.deploy("placement/batch", "binpack", "1", artifacts::BINPACK, DeployOptions::default()).expect("deploys");
    reg.activate("placement/batch", "binpack@1").expect("activates");
    let deploy = |name: &str, bytes: &[u8]| reg.deploy("placement/batch", name, "1", bytes, DeployOptions::default());

    assert!(matches!(deploy("text", b"this is not a plugin at all"), Err(PluginError::NotWasm)));
    assert!(matches!(deploy("big", &vec![0u8; 2 << 20]), Err(PluginError::TooLarge { .. })));
    // A core module (version 1, layer 0), not a component.
    assert!(matches!(deploy("core", b"\0asm\x01\0\0\0"), Err(PluginError::NotComponent)));
    // A truncated component.
    let truncated = &artifacts::BINPACK[..artifacts::BINPACK.len() / 2];
    assert!(matches!(deploy("half", truncated), Err(PluginError::Compile(_))));
    // A preemption component offered to a placement slot.
    match deploy("wrong", artifacts::PRIORITY_PREEMPT) {
        Err(PluginError::WrongWorld { world: "placement", .. }) => {}
        other => panic!("expected a wrong-world error, got {other:?}"),
    }
    // Self-test catches the loop, the panic and garbage before they serve.
    for (name, bytes, kind) in [
        ("loop", artifacts::GUEST_LOOP, FaultKind::Deadline),
        ("panic", artifacts::GUEST_PANIC, FaultKind::Panic),
        ("garbage", artifacts::GUEST_GARBAGE, FaultKind::InvalidAnswer),
    ] {
        match deploy(name, bytes) {
            Err(PluginError::SelfTest(e)) => assert_eq!(e.kind, kind, "{name}: {e}"),
            other => panic!("{name}: expected a self-test failure, got {other:?}"),
        }
    }
    // Unknown slots and names are refused too.
    assert!(matches!(
        reg.deploy("placment/x", "a", "1", artifacts::BINPACK, DeployOptions::default()),
        Err(PluginError::UnknownSlot(_))
    ));
    assert!(matches!(
        reg.deploy("placement/batch", "../evil", "1", artifacts::BINPACK, DeployOptions::default()),
        Err(PluginError::InvalidName { .. })
    ));

    // Nothing was added and the slot still serves from binpack.
    assert_eq!(reg.list()[0].versions.len(), 1);
    let answer = reg.place("placement/batch", &workload(10, 5, 2)).expect("answers");
    assert_eq!(answer.served_by, ServedBy::Version("binpack@1".into()));
    assert!(answer.faults.is_empty());
}

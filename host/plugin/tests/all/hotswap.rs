//! Hot swap under load: one thread places continuously while another
//! activates and rolls back versions 1,000 times. No call fails, and every
//! answer comes wholly from one version.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use paceline_plugin::{DeployOptions, ServedBy};
use paceline_plugin_artifacts as artifacts;
use paceline_plugin_sdk::PlacementPolicy;

use crate::support::{registry, runtime, workload};

#[test]
fn swapping_under_load_never_fails_or_mixes_versions() {
    let reg = Arc::new(registry(runtime()));
    let slot = "placement/batch";
    reg.deploy(slot, "binpack", "1", artifacts::BINPACK, DeployOptions::default()).expect("deploys");
    reg.deploy(slot, "spread", "1", artifacts::SPREAD, DeployOptions::default()).expect("deploys");
    reg.activate(slot, "binpack@1").expect("activates");

    let req = workload(40, 30, 5);
    let by_binpack = plugin_binpack::Binpack::place(&req);
    let by_spread = plugin_spread::Spread::place(&req);
    assert_ne!(by_binpack, by_spread, "the input must tell the versions apart");

    let done = Arc::new(AtomicBool::new(false));
    let caller = {
        let (reg, done, req) = (reg.clone(), done.clone(), req.clone());
        let (by_binpack, by_spread) = (by_binpack.clone(), by_spread.clone());
        std::thread::spawn(move || {
            let (mut calls, mut binpack, mut spread) = (0u64, 0u64, 0u64);
            while !done.load(Ordering::Acquire) || calls < 100 {
                let a = reg.place(slot, &req).expect("no call fails");
                assert!(a.faults.is_empty(), "{:?}", a.faults);
                match a.served_by {
                    ServedBy::Version(v) if v == "binpack@1" => {
                        assert_eq!(a.value, by_binpack);
                        binpack += 1;
                    }
                    ServedBy::Version(v) if v == "spread@1" => {
                        assert_eq!(a.value, by_spread);
                        spread += 1;
                    }
                    // Rolled back past both: the native binpack serves.
                    ServedBy::Native("binpack") => assert_eq!(a.value, by_binpack),
                    other => panic!("unexpected server {other:?}"),
                }
                calls += 1;
            }
            (calls, binpack, spread)
        })
    };
    for i in 0..1000 {
        if i % 10 == 9 {
            let _ = reg.rollback(slot); // may find nothing to roll back to; both are fine
        } else {
            reg.activate(slot, if i % 2 == 0 { "spread@1" } else { "binpack@1" }).expect("activates");
        }
        if i % 50 == 0 {
            std::thread::yield_now();
        }
    }
    done.store(true, Ordering::Release);
    let (calls, binpack, spread) = caller.join().expect("the caller thread did not panic");
    assert!(calls >= 100);
    assert!(binpack > 0 || spread > 0, "versions served: binpack {binpack}, spread {spread}");
}

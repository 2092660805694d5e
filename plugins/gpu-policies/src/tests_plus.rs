//! `gpu-fgd-plus`: its measure and the decisions where it parts from
//! `gpu-fgd`.

use paceline_plugin_sdk::prelude::*;
use paceline_plugin_sdk::validate::check_placement;

use super::tests::{placed, request};
use super::*;

fn class(cpu_millis: u64, milli: u32, weight: u32) -> TaskClass {
    TaskClass { cpu_millis, memory_mib: 1024, milli, weight }
}

#[test]
fn the_measure_counts_gpus_the_cpu_cannot_feed() {
    // One class: a whole GPU with 11 cores. Four free devices and 22
    // cores: one more task fits, so FGD sees nothing lost, but only two
    // of the four GPUs can ever be used by the class.
    let workload = [class(11_000, 1000, 1)];
    let (fgd, plus) = (Frag::new(&workload), FragPlus::new(&workload));
    let devices = [1000, 1000, 1000, 1000];
    assert_eq!(fgd.of(22_000, 65_536, &devices), 0);
    assert_eq!(plus.of(22_000, 65_536, &devices), 2000);
    // Cores for all four: nothing lost, as FGD.
    assert_eq!(plus.of(44_000, 65_536, &devices), 0);
    // Memory counts the same way: room for one task's memory only.
    assert_eq!(plus.of(44_000, 1024, &devices), 3000);
    // Not even one task: all free GPU, as FGD.
    assert_eq!(plus.of(10_000, 65_536, &devices), 4000);
    assert_eq!(fgd.of(10_000, 65_536, &devices), 4000);
}

#[test]
fn the_measure_counts_shares_per_device_they_fit() {
    // A 300 share with 2 cores: devices of 1000 and 600 hold 3 + 2 tasks;
    // 4 cores feed 2 of the 5, so 2/5 of the 1,600 usable is fed; the
    // device of 200 is lost whatever the cores (FGD's part).
    let plus = FragPlus::new(&[class(2000, 300, 1)]);
    assert_eq!(plus.of(4000, 65_536, &[1000, 600, 200]), 1800 - 1600 * 2 / 5);
    assert_eq!(plus.of(10_000, 65_536, &[1000, 600, 200]), 200);
    assert_eq!(Frag::new(&[class(2000, 300, 1)]).of(4000, 65_536, &[1000, 600, 200]), 200);
}

#[test]
fn a_cpu_only_task_goes_where_cores_are_spare_beyond_the_gpus_needs() {
    // Host 0: 4 free GPUs and 50 cores; host 1: 6 free GPUs and 200
    // cores. The workload: whole GPUs with 11 cores. A CPU-only task of
    // 20 cores leaves host 0 with 30 cores, one task of the class still
    // fits, so FGD sees no growth anywhere and packs onto host 0 (less GPU
    // left); there it strands 2 GPUs (4 free, cores for 2). FGD-plus puts
    // it on host 1, which keeps cores for all its GPUs.
    let classes = [(11_000, 1000, 10), (20_000, 0, 1)];
    let hosts: [(u64, &[u32]); 2] = [(50_000, &[1000; 4]), (200_000, &[1000; 6])];
    let req = request(&hosts, &[(20_000, 0)], &classes);
    assert_eq!(placed(&Fgd::place(&req), 0).map(|p| p.0), Some(0), "FGD packs");
    let mut out = FgdPlus::place(&req);
    assert_eq!(placed(&out, 0).map(|p| p.0), Some(1), "{out:?}");
    complete_grants(&req, &mut out);
    check_placement(&req, &out).expect("a valid answer");
}

#[test]
fn a_gpu_task_with_many_cores_goes_where_cores_per_free_gpu_are_high() {
    // Two hosts of 3 free GPUs: host 0 with 16 cores, host 1 with 60. The
    // workload: shares of 810 with 3 cores. A whole GPU with 12 cores
    // leaves host 0 4 cores for 2 devices: one 810 still fits, so FGD sees
    // no growth on either host and packs by the least CPU left (host 0);
    // there one of the two devices can never be fed. FGD-plus sees that
    // and takes host 1.
    let classes = [(3000, 810, 10)];
    let hosts: [(u64, &[u32]); 2] = [(16_000, &[1000; 3]), (60_000, &[1000; 3])];
    let req = request(&hosts, &[(12_000, 1000)], &classes);
    assert_eq!(placed(&Fgd::place(&req), 0).map(|p| p.0), Some(0), "FGD: no growth, packs");
    let mut out = FgdPlus::place(&req);
    assert_eq!(placed(&out, 0).map(|p| p.0), Some(1), "{out:?}");
    complete_grants(&req, &mut out);
    check_placement(&req, &out).expect("a valid answer");
}

#[test]
fn fgd_plus_answers_validly_on_a_crowded_round() {
    let hosts: Vec<(u64, &[u32])> =
        vec![(64_000, &[1000, 1000, 400, 0]), (2_000, &[1000, 1000]), (64_000, &[700, 700]), (64_000, &[])];
    let tasks: Vec<(u64, u32)> =
        vec![(1000, 500), (1000, 2000), (1000, 300), (4000, 0), (1000, 1000), (1000, 250), (3000, 700), (1000, 3000)];
    let req = request(&hosts, &tasks, &[(1000, 500, 3), (1000, 1000, 2), (4000, 0, 1)]);
    let mut out = FgdPlus::place(&req);
    complete_grants(&req, &mut out);
    check_placement(&req, &out).unwrap_or_else(|e| panic!("{e}: {out:?}"));
    assert!(placed(&out, 7).is_none(), "no host has three whole devices: {out:?}");
}

#[test]
fn gpu_fgd_reserve_keeps_fresh_devices_from_rarely_fillable_shares() {
    // Workload: 810 shares (50), whole GPUs (50), 470 shares (30), 160
    // shares (1). What fits beside an 810 (190 left) is 1 task in 131:
    // rare; beside a 470 (530 left), 31 in 131: not rare.
    let workload = [class(3000, 810, 50), class(3000, 1000, 50), class(3000, 470, 30), class(3000, 160, 1)];
    assert!(rarely_fillable(&workload, 190));
    assert!(!rarely_fillable(&workload, 530));
    assert!(!rarely_fillable(&[], 190), "no GPU tasks: nothing is rare");
    let classes = [(3000, 810, 50), (3000, 1000, 50), (3000, 470, 30), (3000, 160, 1)];

    // Two wholly free devices, far under the reserve: the 810 is deferred
    // (gpu-fgd-plus places it), the 470 placed.
    let req = request(&[(64_000, &[1000, 1000])], &[(3000, 810), (3000, 470)], &classes);
    let out = FgdReserve::place(&req);
    assert!(placed(&out, 0).is_none(), "{out:?}");
    assert!(out.unplaced.iter().any(|u| u.task == 0 && u.reason == UnplacedReason::Deferred), "{out:?}");
    assert!(placed(&out, 1).is_some(), "{out:?}");
    assert!(placed(&FgdPlus::place(&req), 0).is_some(), "gpu-fgd-plus places it");

    // A device already in use with room for it: placed there, not deferred.
    let req = request(&[(64_000, &[1000, 1000]), (64_000, &[900])], &[(3000, 810)], &classes);
    let mut out = FgdReserve::place(&req);
    assert_eq!(placed(&out, 0).map(|p| p.0), Some(1), "{out:?}");
    complete_grants(&req, &mut out);
    check_placement(&req, &out).expect("a valid answer");

    // Wholly free devices above the reserve: placed on one.
    let eight = [1000u32; 8];
    let hosts: Vec<(u64, &[u32])> = vec![(64_000, &eight[..]); (RESERVE_DEVICES as usize).div_ceil(8)];
    let req = request(&hosts, &[(3000, 810)], &classes);
    assert!(placed(&FgdReserve::place(&req), 0).is_some());
}

use paceline_plugin_sdk::prelude::*;
use paceline_plugin_sdk::validate::check_placement;

use super::*;

/// `hosts` GPU hosts (cpu, memory, devices' free milli-GPU), `tasks`
/// (cpu, milli-GPU) one gang each, and the workload `classes`.
pub(crate) fn request(hosts: &[(u64, &[u32])], tasks: &[(u64, u32)], classes: &[(u64, u32, u32)]) -> PlacementRequest {
    let offers = hosts
        .iter()
        .map(|&(cpu, devices)| {
            let whole = devices.iter().filter(|&&f| f == DEVICE_MILLI).count() as u64;
            HostOffer {
                free: Resources { cpu_millis: cpu, memory_mib: 65_536, gpus: whole, ..Resources::default() },
                total: Resources {
                    cpu_millis: 64_000,
                    memory_mib: 65_536,
                    gpus: devices.len() as u64,
                    ..Resources::default()
                },
            }
        })
        .collect();
    PlacementRequest {
        round: 7,
        hosts: offers,
        jobs: vec![JobInfo::default()],
        constraints: vec![ConstraintSet::default()],
        tasks: tasks
            .iter()
            .enumerate()
            .map(|(i, &(cpu, milli))| Task {
                job: 0,
                instance: i as u32,
                gang: i as u32,
                demand: Resources {
                    cpu_millis: cpu,
                    memory_mib: 1024,
                    gpus: u64::from(milli / 1000),
                    ..Resources::default()
                },
                constraints: 0,
                preferred_host: None,
            })
            .collect(),
        gpu_hosts: hosts
            .iter()
            .map(|&(_, devices)| GpuHost {
                devices: devices.iter().map(|&free_milli| GpuDevice { free_milli, model: NO_VALUE }).collect(),
            })
            .collect(),
        gpu_tasks: tasks.iter().map(|&(_, milli)| GpuTask { milli, models: Vec::new() }).collect(),
        gpu_workload: classes
            .iter()
            .map(|&(cpu_millis, milli, weight)| TaskClass { cpu_millis, memory_mib: 1024, milli, weight })
            .collect(),
        ..PlacementRequest::default()
    }
}

pub(crate) fn placed(out: &PlacementResult, task: u32) -> Option<(u32, Vec<u32>)> {
    let host = out.assignments.iter().find(|a| a.task == task)?.host;
    let devices = out.grants.iter().find(|g| g.task == task).map(|g| g.devices.clone()).unwrap_or_default();
    Some((host, devices))
}

#[test]
fn fragmentation_is_what_the_workload_cannot_use() {
    // Classes: half a GPU (weight 1), one whole GPU (weight 1).
    let frag = Frag::new(&[
        TaskClass { cpu_millis: 1000, memory_mib: 0, milli: 500, weight: 1 },
        TaskClass { cpu_millis: 1000, memory_mib: 0, milli: 1000, weight: 1 },
        TaskClass { cpu_millis: 1000, memory_mib: 0, milli: 0, weight: 5 },
    ]);
    // Devices free 1000, 300: the half cannot use 300; the whole cannot use 300.
    assert_eq!(frag.of(8000, 8000, &[1000, 300]), 300 + 300);
    // No CPU left: no class fits, all 1300 free is lost to each, the CPU
    // class (weight 5) included; with CPU left it loses nothing.
    assert_eq!(frag.of(0, 8000, &[1000, 300]), 1300 * 2 + 1300 * 5);
    // Two halves free on different devices: the whole class cannot use them.
    assert_eq!(frag.of(8000, 8000, &[500, 500]), 1000);
    assert_eq!(frag.of(8000, 8000, &[]), 0, "no GPU, no GPU fragment");
}

#[test]
fn fgd_packs_shares_onto_one_device_and_keeps_whole_devices_whole() {
    // One host, two wholly free devices; two halves then a whole GPU.
    let classes = [(1000, 500, 2), (1000, 1000, 1)];
    let req = request(&[(64_000, &[1000, 1000])], &[(1000, 500), (1000, 500), (1000, 1000)], &classes);
    let mut out = Fgd::place(&req);
    complete_grants(&req, &mut out);
    check_placement(&req, &out).expect("a valid answer");
    let (a, b, c) = (placed(&out, 0).expect("a"), placed(&out, 1).expect("b"), placed(&out, 2).expect("c"));
    assert_eq!(a.1, b.1, "both halves on one device: {out:?}");
    assert_ne!(c.1, a.1, "the whole GPU on the other: {out:?}");
}

#[test]
fn fgd_prefers_the_host_where_a_share_strands_nothing() {
    // Host 0 has a device with 600 free; host 1 has a wholly free one.
    // A 600 share fits exactly on host 0 (nothing left to strand) while on
    // host 1 it would leave 400 that a whole-GPU class cannot use.
    let classes = [(1000, 1000, 3), (1000, 600, 1)];
    let req = request(&[(64_000, &[600]), (64_000, &[1000])], &[(1000, 600)], &classes);
    let out = Fgd::place(&req);
    assert_eq!(placed(&out, 0), Some((0, vec![0])), "{out:?}");
}

#[test]
fn fgd_compares_gradients_in_steps_and_breaks_ties_by_packing() {
    // Classes: whole GPU (weight 99), half (weight 1): 100 in all. A 300
    // share on host 0's device of 600 grows the sum by -29,400 (-294
    // expected milli-GPU); on host 1's device of 500, by -29,500 (-295):
    // host 1 is steeper by 1 milli-GPU, less than a step, so both fall on
    // the same step and the host with less GPU left after the task wins:
    // host 0 (300 left) over host 1 (200 + its wholly free device).
    let frag = Frag::new(&[
        TaskClass { cpu_millis: 1000, memory_mib: 0, milli: 1000, weight: 99 },
        TaskClass { cpu_millis: 1000, memory_mib: 0, milli: 500, weight: 1 },
    ]);
    let g0 = frag.of(8000, 8000, &[300]) as i128 - frag.of(8000, 8000, &[600]) as i128;
    let g1 = frag.of(8000, 8000, &[200, 1000]) as i128 - frag.of(8000, 8000, &[500, 1000]) as i128;
    assert_eq!((g0, g1), (-29_400, -29_500));
    assert_eq!(frag.step(g0), frag.step(g1), "less than a step apart");
    // A full step apart: different steps; the steeper one is lower.
    assert!(frag.step(g1 - 100 * STEP_MILLI) < frag.step(g1));
    assert_eq!(frag.step(0), 0);
    assert_eq!(frag.step(-1), -1, "any decrease is below no change");

    let classes = [(1000, 1000, 99), (1000, 500, 1)];
    let req = request(&[(64_000, &[600]), (64_000, &[500, 1000])], &[(1000, 300)], &classes);
    let out = Fgd::place(&req);
    assert_eq!(placed(&out, 0), Some((0, vec![0])), "the tie goes to the fuller host: {out:?}");
}

#[test]
fn every_policy_answers_validly_on_a_crowded_round() {
    let hosts: Vec<(u64, &[u32])> =
        vec![(64_000, &[1000, 1000, 400, 0]), (2_000, &[1000, 1000]), (64_000, &[700, 700]), (64_000, &[])];
    let tasks: Vec<(u64, u32)> =
        vec![(1000, 500), (1000, 2000), (1000, 300), (4000, 0), (1000, 1000), (1000, 250), (3000, 700), (1000, 3000)];
    let req = request(&hosts, &tasks, &[(1000, 500, 3), (1000, 1000, 2), (4000, 0, 1)]);
    type Policy = fn(&PlacementRequest) -> PlacementResult;
    let policies: [(&str, Policy); 5] = [
        ("gpu-fgd", Fgd::place),
        ("gpu-random", RandomFit::place),
        ("gpu-bestfit", BestFit::place),
        ("gpu-dotprod", DotProduct::place),
        ("gpu-packing", GpuPacking::place),
    ];
    for (name, place) in policies {
        let mut out = place(&req);
        complete_grants(&req, &mut out);
        check_placement(&req, &out).unwrap_or_else(|e| panic!("{name}: {e}: {out:?}"));
        // The 3-GPU task cannot fit anywhere (no host has three whole devices).
        assert!(placed(&out, 7).is_none(), "{name}: {out:?}");
        // The whole-GPU tasks never hold a device another task holds.
        for g in &out.grants {
            let host = out.assignments.iter().find(|a| a.task == g.task).map(|a| a.host);
            for other in out.grants.iter().filter(|o| o.task != g.task) {
                let other_host = out.assignments.iter().find(|a| a.task == other.task).map(|a| a.host);
                let whole = req.gpu_tasks[g.task as usize].milli >= DEVICE_MILLI;
                if whole && host == other_host {
                    assert!(g.devices.iter().all(|d| !other.devices.contains(d)), "{name}: {out:?}");
                }
            }
        }
    }
}

#[test]
fn gpu_packing_puts_a_share_on_a_device_already_in_use() {
    let req = request(&[(64_000, &[1000, 1000]), (64_000, &[1000, 600])], &[(1000, 300)], &[]);
    let out = GpuPacking::place(&req);
    assert_eq!(placed(&out, 0).map(|p| p.0), Some(1), "{out:?}");
    let mut done = out.clone();
    complete_grants(&req, &mut done);
    assert_eq!(placed(&done, 0), Some((1, vec![1])), "the used device: {done:?}");
}

#[test]
fn random_fit_is_deterministic_per_round_and_task() {
    let req = request(&[(64_000, &[1000]), (64_000, &[1000]), (64_000, &[1000])], &[(1000, 500); 6], &[]);
    assert_eq!(RandomFit::place(&req), RandomFit::place(&req));
}

/// The scenario files of `plugins/gpu-fgd/scenarios`, which the Python
/// port (`plugins/examples/gpu-fgd-py`) runs too: the expectations hold
/// for the Rust policy, and its answers (grants included) pass the host's
/// checks.
#[test]
fn fgd_meets_its_scenario_files() {
    use paceline_plugin_sdk::harness::{load_dir, run_placement};
    let table = load_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../gpu-fgd/scenarios")).expect("scenario table");
    assert!(table.len() >= 5, "{} scenarios", table.len());
    for s in table {
        run_placement::<Fgd>(&s).unwrap_or_else(|e| panic!("{}: {e}", s.name));
    }
}

//! GPU devices and shares (decision 0035): the agent gives a run the
//! devices of its grant and refuses a grant it cannot honour. The host's
//! two devices are configured (indices 3 and 5, as `nvidia-smi` might
//! number them), so no GPU is needed.
//!
//! The MPS limits a share gets (`CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`,
//! `CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`) are only environment here: they take
//! effect under an NVIDIA MPS control daemon, which this test does not need.

use paceline_agent::Supervisor;
use paceline_model::gpu::{GpuDevice, GpuGrant};

use crate::common::*;

async fn gpu_harness() -> Harness {
    let dir = tempfile::tempdir().unwrap();
    let range = port_range();
    let mut cfg = config(dir.path(), range);
    cfg.total.gpu_milli = 2000;
    cfg.gpu_devices = vec![GpuDevice { index: 3, model: "T4".into() }, GpuDevice { index: 5, model: "T4".into() }];
    let sup = Supervisor::open(cfg).await.unwrap();
    let events = sup.subscribe();
    Harness { dir, sup, events, range }
}

fn gpu_run(run_id: &str, milli: u64, devices: &[u32]) -> paceline_agent::RunSpec {
    let mut s = sh(
        run_id,
        r#"echo "visible=$CUDA_VISIBLE_DEVICES nvidia=$NVIDIA_VISIBLE_DEVICES milli=$PACELINE_GPU_MILLI"; sleep 30"#,
    );
    s.resources.gpu_milli = milli;
    let each = if milli < 1000 { milli as u32 } else { 1000 };
    s.gpu = GpuGrant { devices: devices.to_vec(), milli_each: if devices.is_empty() { 0 } else { each } };
    s
}

#[tokio::test]
async fn two_shares_see_one_device_a_third_and_a_whole_gpu_on_it_are_refused() {
    let h = gpu_harness().await;
    h.sup.launch_spec(gpu_run("share-a-1", 500, &[1])).unwrap();
    h.sup.launch_spec(gpu_run("share-b-1", 500, &[1])).unwrap();
    wait_stdout(&h.sup, "share-a-1", "visible=5 nvidia=5 milli=500").await;
    wait_stdout(&h.sup, "share-b-1", "visible=5 nvidia=5 milli=500").await;
    let full = h.sup.launch_spec(gpu_run("share-c-1", 500, &[1])).unwrap_err();
    assert_eq!(full.field, "gpu");
    assert!(full.message.contains("0 milli-GPU free"), "{full}");
    let whole = h.sup.launch_spec(gpu_run("whole-1", 1000, &[1])).unwrap_err();
    assert!(whole.message.contains("not wholly free") || whole.message.contains("already in use"), "{whole}");
    // The other device, whole, is free: without a grant (an older manager)
    // the agent picks it.
    h.sup.launch_spec(gpu_run("whole-2", 1000, &[])).unwrap();
    wait_stdout(&h.sup, "whole-2", "visible=3 nvidia=3 milli=1000").await;
    // A run without GPUs on a GPU host sees none.
    h.sup.launch_spec(gpu_run("cpu-1", 0, &[])).unwrap();
    wait_stdout(&h.sup, "cpu-1", "visible= nvidia=none milli=").await;
    for id in ["share-a-1", "share-b-1", "whole-2", "cpu-1"] {
        h.sup.kill(id, Some(0)).unwrap();
    }
}

#[tokio::test]
async fn grants_survive_an_agent_restart() {
    let mut h = gpu_harness().await;
    h.sup.launch_spec(gpu_run("keep-1", 700, &[0])).unwrap();
    wait_stdout(&h.sup, "keep-1", "visible=3").await;
    // The restarted agent re-adopts the run and still counts its share.
    h.sup.detach();
    let mut cfg = config(h.dir.path(), h.range);
    cfg.total.gpu_milli = 2000;
    cfg.gpu_devices = vec![GpuDevice { index: 3, model: "T4".into() }, GpuDevice { index: 5, model: "T4".into() }];
    h.sup = Supervisor::open(cfg).await.unwrap();
    let over = h.sup.launch_spec(gpu_run("over-1", 400, &[0])).unwrap_err();
    assert!(over.message.contains("300 milli-GPU free"), "{over}");
    let running = h.sup.registration_runs();
    let kept = running.iter().find(|r| r.run_id == "keep-1").expect("reported");
    assert_eq!(kept.gpu.as_ref().map(|g| (g.devices.clone(), g.milli_each)), Some((vec![0], 700)));
    h.sup.kill("keep-1", Some(0)).unwrap();
}

fn mps_run(run_id: &str, milli: u64, devices: &[u32]) -> paceline_agent::RunSpec {
    let mut s = gpu_run(run_id, milli, devices);
    s.args = vec![
        "-c".into(),
        r#"echo "threads=${CUDA_MPS_ACTIVE_THREAD_PERCENTAGE-unset} mem=${CUDA_MPS_PINNED_DEVICE_MEM_LIMIT-unset} visible=$CUDA_VISIBLE_DEVICES"; sleep 30"#.into(),
    ];
    s
}

#[tokio::test]
async fn a_share_gets_mps_compute_and_memory_limits_a_whole_device_none() {
    let dir = tempfile::tempdir().unwrap();
    let range = port_range();
    let mut cfg = config(dir.path(), range);
    cfg.total.gpu_milli = 2000;
    cfg.gpu_devices = vec![GpuDevice { index: 3, model: "T4".into() }, GpuDevice { index: 5, model: "T4".into() }];
    // The second device's memory is known (15360 MiB, a T4), the first's not.
    cfg.gpu_memory_mib = vec![0, 15360];
    let sup = Supervisor::open(cfg).await.unwrap();
    // A third of a device: 34 % of its threads (rounded up), 5 GiB of its
    // memory (rounded down), named by the device's index on the host.
    sup.launch_spec(mps_run("third-1", 333, &[1])).unwrap();
    wait_stdout(&sup, "third-1", "threads=34 mem=5=5114M visible=5").await;
    // A share of the device whose memory is unknown: compute only.
    sup.launch_spec(mps_run("half-1", 500, &[0])).unwrap();
    wait_stdout(&sup, "half-1", "threads=50 mem=unset visible=3").await;
    // A whole device is not shared: no MPS limit.
    sup.kill("half-1", Some(0)).unwrap();
    let mut whole_started = false;
    for _ in 0..100 {
        if sup.launch_spec(mps_run("whole-1", 1000, &[0])).is_ok() {
            whole_started = true;
            break;
        }
        // The killed share frees its device once its process is gone.
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(whole_started, "the whole device was freed by the killed share");
    wait_stdout(&sup, "whole-1", "threads=unset mem=unset visible=3").await;
    for id in ["third-1", "whole-1"] {
        sup.kill(id, Some(0)).unwrap();
    }
}

/// Under `rlimits` isolation a CPU run's memory is an address-space cap;
/// a GPU run gets none, since CUDA reserves address space far beyond any
/// memory request and would not start under it.
#[tokio::test]
async fn under_rlimits_a_gpu_run_has_no_address_space_cap_and_a_cpu_run_has_one() {
    let dir = tempfile::tempdir().unwrap();
    let range = port_range();
    let mut cfg = config(dir.path(), range);
    cfg.isolation = paceline_agent::Isolation::Rlimits;
    cfg.total.gpu_milli = 1000;
    cfg.gpu_devices = vec![GpuDevice { index: 0, model: "H100".into() }];
    let sup = Supervisor::open(cfg).await.unwrap();
    let mut gpu = sh("as-gpu-1", r#"echo "as=$(ulimit -v)"; sleep 30"#);
    gpu.resources.gpu_milli = 500;
    gpu.resources.memory_mib = 256;
    gpu.gpu = GpuGrant { devices: vec![0], milli_each: 500 };
    sup.launch_spec(gpu).unwrap();
    let mut cpu = sh("as-cpu-1", r#"echo "as=$(ulimit -v)"; sleep 30"#);
    cpu.resources.memory_mib = 256;
    sup.launch_spec(cpu).unwrap();
    wait_stdout(&sup, "as-gpu-1", "as=unlimited").await;
    wait_stdout(&sup, "as-cpu-1", &format!("as={}", 256 * 1024)).await;
    for id in ["as-gpu-1", "as-cpu-1"] {
        sup.kill(id, Some(0)).unwrap();
    }
}

//! GPU devices and shares (decision 0035): the agent gives a run the
//! devices of its grant and refuses a grant it cannot honour. The host's
//! two devices are configured (indices 3 and 5, as `nvidia-smi` might
//! number them), so no GPU is needed.

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

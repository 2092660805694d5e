//! `gpu-fgd-plus`: fragmentation gradient descent whose measure also counts
//! the GPUs a host's CPU and memory cannot feed (docs/decisions/0057). The
//! code is `paceline_gpu_policies::FgdPlus`; this crate only exports it as
//! a component, loaded by path (`--policy placement=…/plugin_gpu_fgd_plus.wasm`).

paceline_plugin_sdk::export_placement!(paceline_gpu_policies::FgdPlus);

//! `gpu-packing`: GPU packing, a GPU-sharing baseline. The code is `paceline_gpu_policies::GpuPacking`;
//! this crate only exports it as a component.

paceline_plugin_sdk::export_placement!(paceline_gpu_policies::GpuPacking);

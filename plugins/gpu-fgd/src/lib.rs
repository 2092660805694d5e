//! `gpu-fgd`: Placement by fragmentation gradient descent for GPU-sharing workloads. The code is `paceline_gpu_policies::Fgd`;
//! this crate only exports it as a component.

paceline_plugin_sdk::export_placement!(paceline_gpu_policies::Fgd);

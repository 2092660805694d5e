//! `gpu-fgd-reserve`: `gpu-fgd-plus` that defers a share which would take a
//! wholly free device and leave a remainder the workload rarely fills, once
//! few wholly free devices are left (docs/decisions/0057). The code is
//! `paceline_gpu_policies::FgdReserve`; this crate only exports it as a
//! component, loaded by path. Admission, not only placement: it leaves out
//! pods that fit.

paceline_plugin_sdk::export_placement!(paceline_gpu_policies::FgdReserve);

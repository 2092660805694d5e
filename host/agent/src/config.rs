//! The agent's configuration (what `paceline agent` reads from its config
//! file and flags) and what it detects about its host.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use paceline_model::Resources;
use serde::{Deserialize, Serialize};

use crate::isolation::{Isolation, IsolationChoice};
use crate::task_user::{self, TaskUserChoice, TaskUsers};

/// Configuration of one agent. Every field has a default, so an empty file
/// is a valid config for a development host.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AgentConfig {
    /// Host manager address the agent dials, e.g. `http://127.0.0.1:7070`; several,
    /// comma-separated, for highly available servers: the agent dials them in turn until one
    /// accepts (only the leader listens for agents) and moves on when a session fails.
    pub manager: String,
    /// Where the agent keeps run records, the status outbox, sandboxes
    /// (`runs/<run_id>/`) and volumes (`volumes/<task_id>/<name>/`).
    pub data_dir: PathBuf,
    /// Host name reported to the manager; `None`: the OS host name.
    pub hostname: Option<String>,
    /// Per-dimension overrides of the detected resources (before `reserve`).
    pub resources: ResourceOverrides,
    /// What the agent keeps for itself and the OS; subtracted from the total.
    pub reserve: Resources,
    /// Host attributes for constraints (`zone`, `rack`, …). The agent adds
    /// `isolation` and, when it finds GPUs, `gpu_model` unless set here.
    pub attributes: BTreeMap<String, String>,
    /// First host port handed to tasks (inclusive).
    pub port_range_first: u16,
    /// Last host port handed to tasks (inclusive).
    pub port_range_last: u16,
    /// Heartbeat period until the manager's `Registered` says otherwise.
    pub heartbeat_interval_ms: u64,
    /// How often the running runs' CPU and memory use is sampled (one pass
    /// over all of them; the latest figures ride on each heartbeat). 0:
    /// not sampled.
    pub usage_interval_ms: u64,
    /// First reconnect delay; doubles per failed attempt (with jitter).
    pub reconnect_initial_ms: u64,
    /// Largest reconnect delay.
    pub reconnect_max_ms: u64,
    /// For this long after a registered session ends, redial every
    /// `reconnect_initial_ms` (with jitter) instead of backing off: a highly
    /// available manager's successor leads within about its ZooKeeper session
    /// timeout, and an agent that has backed off to seconds by then keeps
    /// every task of its host from being placed for that long. 0: back off at once.
    pub failover_redial_ms: u64,
    /// Grace between SIGTERM and SIGKILL when a launch leaves it 0.
    pub default_kill_grace_secs: u32,
    /// `auto` (cgroup v2 when delegated, else rlimits) or `rlimits`.
    pub isolation: IsolationChoice,
    /// Ended, fully acknowledged runs are forgotten (record, status log and
    /// sandbox removed; volumes kept) this long after they ended.
    pub gc_after_secs: u64,
    /// Which OS user tasks run as (decision 0047): `auto` (a uid of its
    /// own per run when the agent is root, else the agent's own user with a
    /// warning), `per-run` (refuse to start without it) or `agent`.
    pub task_user: TaskUserChoice,
    /// First uid handed to runs (inclusive); gid = uid.
    pub task_uid_first: u32,
    /// Last uid handed to runs (inclusive).
    pub task_uid_last: u32,
}

impl Default for AgentConfig {
    fn default() -> Self {
        Self {
            manager: "http://127.0.0.1:7070".to_owned(),
            data_dir: PathBuf::from("/var/lib/paceline/agent"),
            hostname: None,
            resources: ResourceOverrides::default(),
            reserve: Resources { cpu_millis: 0, memory_mib: 256, disk_mib: 1024, gpu_milli: 0, ports: 0 },
            attributes: BTreeMap::new(),
            port_range_first: 31000,
            port_range_last: 31999,
            heartbeat_interval_ms: 5000,
            usage_interval_ms: 5000,
            reconnect_initial_ms: 200,
            reconnect_max_ms: 10_000,
            failover_redial_ms: 10_000,
            default_kill_grace_secs: 10,
            isolation: IsolationChoice::Auto,
            gc_after_secs: 24 * 3600,
            task_user: TaskUserChoice::Auto,
            task_uid_first: task_user::DEFAULT_FIRST_UID,
            task_uid_last: task_user::DEFAULT_LAST_UID,
        }
    }
}

/// Resource dimensions the operator fixes instead of detecting.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ResourceOverrides {
    /// CPU in millicores.
    pub cpu_millis: Option<u64>,
    /// Memory in MiB.
    pub memory_mib: Option<u64>,
    /// Disk in MiB.
    pub disk_mib: Option<u64>,
    /// Whole GPUs.
    pub gpus: Option<u64>,
    /// Memory of each GPU device in MiB, where `nvidia-smi` does not say
    /// (configured devices, `/dev/nvidia*` without a working driver tool).
    /// Only used to limit a share's device memory under NVIDIA MPS
    /// (`CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`).
    pub gpu_memory_mib: Option<u64>,
}

/// What the agent found out about its host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostInfo {
    /// Host name.
    pub hostname: String,
    /// What tasks may use: detected or overridden, minus the reserve.
    /// `ports` is the size of the port range.
    pub total: Resources,
    /// Attributes reported in `Register`.
    pub attributes: BTreeMap<String, String>,
    /// GPU model names, one per device, when `nvidia-smi` answered.
    pub gpu_models: Vec<String>,
    /// Each device's memory in MiB, in `gpus` order: from `nvidia-smi`, else
    /// `resources.gpu_memory_mib`; 0 where unknown.
    pub gpu_memory_mib: Vec<u64>,
    /// The GPU devices tasks may use, in order (`total.gpu_milli / 1000`
    /// of them; a reserve withholds the last ones).
    pub gpus: Vec<paceline_model::gpu::GpuDevice>,
    /// The enforcement in use.
    pub isolation: Isolation,
    /// The users tasks run as (reported as the attribute `task_user`).
    pub task_users: TaskUsers,
}

impl AgentConfig {
    /// The manager addresses of [`AgentConfig::manager`], in order; `host:port` alone means
    /// `http://host:port`.
    pub fn managers(&self) -> Vec<String> {
        self.manager
            .split(',')
            .map(str::trim)
            .filter(|m| !m.is_empty())
            .map(|m| if m.contains("://") { m.to_owned() } else { format!("http://{m}") })
            .collect()
    }

    /// The heartbeat period before `Registered`.
    pub fn heartbeat_interval(&self) -> Duration {
        Duration::from_millis(self.heartbeat_interval_ms.max(100))
    }

    /// Detects the host (resources, GPUs, isolation) and applies overrides,
    /// reserve and attributes. Creates the data dir (statvfs needs it).
    pub fn detect_host(&self) -> std::io::Result<HostInfo> {
        std::fs::create_dir_all(&self.data_dir)?;
        let (hostname, from) = match &self.hostname {
            Some(h) => (h.clone(), "--hostname"),
            None => (
                nix::unistd::gethostname()
                    .ok()
                    .and_then(|h| h.into_string().ok())
                    .unwrap_or_else(|| "localhost".to_owned()),
                "the OS host name (set --hostname)",
            ),
        };
        // The name is the host's identity (its certificate is issued for
        // it): one spelling only, so `NODE-A` and `node-a.` are `node-a`.
        let hostname = paceline_model::host::canonical_hostname(&hostname).map_err(|why| {
            std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("host name {hostname:?} from {from}: {why}"))
        })?;
        let detected_gpus = detect_gpus();
        let gpu_models: Vec<String> = detected_gpus.iter().map(|g| g.name.clone()).collect();
        let detected = Resources {
            cpu_millis: std::thread::available_parallelism().map(|n| n.get() as u64 * 1000).unwrap_or(1000),
            memory_mib: detect_memory_mib().unwrap_or(0),
            disk_mib: detect_disk_mib(&self.data_dir).unwrap_or(0),
            gpu_milli: if gpu_models.is_empty() { count_gpu_devices() } else { gpu_models.len() as u64 } * 1000,
            ports: 0,
        };
        let o = &self.resources;
        let total = Resources {
            cpu_millis: o.cpu_millis.unwrap_or(detected.cpu_millis).saturating_sub(self.reserve.cpu_millis),
            memory_mib: o.memory_mib.unwrap_or(detected.memory_mib).saturating_sub(self.reserve.memory_mib),
            disk_mib: o.disk_mib.unwrap_or(detected.disk_mib).saturating_sub(self.reserve.disk_mib),
            gpu_milli: o
                .gpus
                .unwrap_or(detected.whole_gpus())
                .saturating_sub(self.reserve.gpu_milli.div_ceil(1000))
                .saturating_mul(1000),
            ports: u64::from(self.port_range_last.saturating_sub(self.port_range_first)) + 1,
        };
        let isolation = Isolation::detect(self.isolation);
        let mut attributes = self.attributes.clone();
        attributes.entry("isolation".to_owned()).or_insert_with(|| isolation.name().to_owned());
        // A host told to use none of the GPUs it has (`gpus: 0`) does not
        // advertise their model.
        if let Some(model) = gpu_models.first().filter(|_| total.whole_gpus() > 0) {
            attributes.entry("gpu_model".to_owned()).or_insert_with(|| model.clone());
        }
        // Devices in detection order; a model per device when nvidia-smi
        // named them, else the `gpu_model` attribute (set by hand).
        let gpus = (0..total.whole_gpus() as u32)
            .map(|index| paceline_model::gpu::GpuDevice {
                index,
                model: gpu_models
                    .get(index as usize)
                    .or_else(|| attributes.get("gpu_model"))
                    .cloned()
                    .unwrap_or_default(),
            })
            .collect();
        let gpu_memory_mib = (0..total.whole_gpus() as usize)
            .map(|i| detected_gpus.get(i).and_then(|g| g.memory_mib).or(self.resources.gpu_memory_mib).unwrap_or(0))
            .collect();
        let task_users = TaskUsers::detect(self.task_user, self.task_uid_first, self.task_uid_last, &self.data_dir)
            .map_err(|why| std::io::Error::new(std::io::ErrorKind::InvalidInput, why))?;
        // Where the job manager picks a gang member's exact ports (the
        // feature "gang"); the agent's own, as the range itself is.
        let range = format!("{}-{}", self.port_range_first, self.port_range_last);
        attributes.insert(paceline_model::gang::PORT_RANGE_ATTRIBUTE.to_owned(), range);
        // What tasks can read of each other is the agent's to say, not the
        // configuration's: a configured value is replaced.
        if let Some(set) = attributes.insert(task_user::ATTRIBUTE.to_owned(), task_users.attribute().to_owned())
            && set != task_users.attribute()
        {
            tracing::warn!(
                configured = set,
                reported = task_users.attribute(),
                "the attribute task_user is the agent's own; replaced"
            );
        }
        Ok(HostInfo { hostname, total, attributes, gpu_models, gpu_memory_mib, gpus, isolation, task_users })
    }
}

/// MemTotal from /proc/meminfo, in MiB.
pub fn detect_memory_mib() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024)
}

/// Space available to unprivileged users on the file system of `dir`, in MiB.
pub fn detect_disk_mib(dir: &Path) -> Option<u64> {
    let st = nix::sys::statvfs::statvfs(dir).ok()?;
    Some((st.blocks_available() as u64).saturating_mul(st.fragment_size() as u64) / (1024 * 1024))
}

/// One GPU as `nvidia-smi` describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DetectedGpu {
    /// Its name (`NVIDIA H100 80GB HBM3`).
    pub name: String,
    /// `memory.total` in MiB, when the driver reports it.
    pub memory_mib: Option<u64>,
}

/// GPU names from `nvidia-smi`, one per device; empty when it is missing,
/// fails, or hangs for more than 10 s (a wedged driver must not stop the agent).
pub fn detect_gpu_models() -> Vec<String> {
    detect_gpus().into_iter().map(|g| g.name).collect()
}

/// The GPUs `nvidia-smi` lists, with their memory; empty as for
/// [`detect_gpu_models`].
pub fn detect_gpus() -> Vec<DetectedGpu> {
    use std::io::Read;
    let child = Command::new("nvidia-smi")
        .args(["--query-gpu=name,memory.total", "--format=csv,noheader,nounits"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn();
    let Ok(mut child) = child else {
        return Vec::new();
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if std::time::Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
        }
    };
    let mut out = String::new();
    if !status.is_some_and(|s| s.success()) || child.stdout.take().map(|mut o| o.read_to_string(&mut out)).is_none() {
        return Vec::new();
    }
    parse_gpu_lines(&out)
}

/// `nvidia-smi --query-gpu=name,memory.total --format=csv,noheader,nounits`
/// lines (`NVIDIA H100 80GB HBM3, 81559`). The memory is the last field (a
/// name may hold a comma); `[N/A]` or a missing field leaves it unknown.
pub fn parse_gpu_lines(out: &str) -> Vec<DetectedGpu> {
    out.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(|l| match l.rsplit_once(',') {
            Some((name, mem)) if mem.trim().parse::<u64>().is_ok() => {
                DetectedGpu { name: name.trim().to_owned(), memory_mib: mem.trim().parse().ok() }
            }
            Some((name, mem)) if mem.trim().starts_with('[') => {
                DetectedGpu { name: name.trim().to_owned(), memory_mib: None }
            }
            _ => DetectedGpu { name: l.to_owned(), memory_mib: None },
        })
        .collect()
}

/// `/dev/nvidia<N>` device nodes (GPUs without a working `nvidia-smi`).
fn count_gpu_devices() -> u64 {
    std::fs::read_dir("/dev")
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .filter(|e| {
                    e.file_name()
                        .to_str()
                        .and_then(|n| n.strip_prefix("nvidia"))
                        .is_some_and(|rest| !rest.is_empty() && rest.chars().all(|c| c.is_ascii_digit()))
                })
                .count() as u64
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod gpu_detection_tests {
    use super::*;

    #[test]
    fn nvidia_smi_lines_give_names_and_memory() {
        let out = "NVIDIA H100 80GB HBM3, 81559\nTesla T4, [N/A]\nOdd, Name, 16384\n\nbare name\n";
        let got = parse_gpu_lines(out);
        let want = [
            ("NVIDIA H100 80GB HBM3", Some(81559)),
            ("Tesla T4", None),
            ("Odd, Name", Some(16384)),
            ("bare name", None),
        ];
        assert_eq!(got.len(), want.len(), "{got:?}");
        for (g, (name, mem)) in got.iter().zip(want) {
            assert_eq!((g.name.as_str(), g.memory_mib), (name, mem));
        }
    }
}

#[cfg(test)]
mod hostname_tests {
    use super::*;

    fn named(name: Option<&str>, dir: &std::path::Path) -> std::io::Result<HostInfo> {
        AgentConfig { hostname: name.map(str::to_owned), data_dir: dir.to_path_buf(), ..AgentConfig::default() }
            .detect_host()
    }

    #[test]
    fn the_host_name_is_reported_in_its_canonical_spelling_and_a_non_name_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert_eq!(named(Some("NODE-A."), dir.path()).expect("a name").hostname, "node-a");
        let e = named(Some("../../etc/x"), dir.path()).expect_err("not a host name");
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
        assert!(e.to_string().contains("--hostname"), "{e}");
        // The OS name, whatever its case, comes out canonical too.
        if let Ok(os) = named(None, dir.path()) {
            assert_eq!(paceline_model::host::canonical_hostname(&os.hostname).as_deref(), Ok(os.hostname.as_str()));
        }
    }
}

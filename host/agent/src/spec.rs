//! What one run is, as the supervisor keeps it: a validated, serialisable
//! copy of the protocol's `Launch` (persisted in the run's record so a
//! restarted agent knows what it was supervising).

use std::collections::{BTreeMap, BTreeSet};

use paceline_model::Resources;
use paceline_model::gang::GangLaunch;
use paceline_model::gpu::GpuGrant;
use paceline_model::secret::Secret;
use paceline_model::task_secret::{LaunchSecret, SecretRef, check_refs};
use paceline_proto::agent::v1 as pb;
use serde::{Deserialize, Serialize};

use crate::error::LaunchError;

/// Health-check interval when the launch leaves it 0.
const DEFAULT_INTERVAL_SECS: u32 = 10;
/// Per-check timeout when the launch leaves it 0.
const DEFAULT_TIMEOUT_SECS: u32 = 5;
/// Consecutive failures before unhealthy when the launch leaves it 0.
const DEFAULT_MAX_FAILURES: u32 = 3;

/// A validated launch.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunSpec {
    /// Unique run id; also the name of its sandbox directory.
    pub run_id: String,
    /// Task id; volumes are kept per task id.
    pub task_id: String,
    /// Executable (looked up in `PATH` when it has no `/`).
    pub command: String,
    /// Arguments.
    pub args: Vec<String>,
    /// Environment from the launch (the agent adds `PACELINE_*` and `PORT_*`).
    pub env: BTreeMap<String, String>,
    /// Resources the run holds; memory (and CPU under cgroup v2) are enforced.
    pub resources: Resources,
    /// Names of the host ports to assign.
    pub port_names: Vec<String>,
    /// Optional health check.
    pub health_check: Option<HealthSpec>,
    /// Optional persistent volume.
    pub volume: Option<VolumeRef>,
    /// Seconds between the stop signal and SIGKILL; 0 means the agent's default.
    pub kill_grace_period_secs: u32,
    /// The first signal when the run is killed (a name of
    /// `paceline_model::task::STOP_SIGNALS`); empty: SIGTERM.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub stop_signal: String,
    /// The run's secrets (decision 0032): in memory only, never in the
    /// run's record (`serde(skip)`), so a restarted agent has none (the
    /// process it adopts has them already).
    #[serde(skip)]
    pub secrets: Vec<LaunchSecret>,
    /// The GPU devices the manager granted (positions in the host's device
    /// list); empty: the agent picks whole devices itself (an older manager).
    #[serde(default, skip_serializing_if = "GpuGrant::is_empty")]
    pub gpu: GpuGrant,
    /// For a gang member: the exact ports to assign and the peers file to
    /// write (`Launch.gang`); `None` for any other run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gang: Option<GangLaunch>,
    /// The host user to run as (`Launch.user`: a name or a uid the job's
    /// pool allowed); `None`: the agent's default (a uid of the run's own,
    /// decision 0047). Kept in the record, so that a restarted agent knows
    /// the run's uid is not one of its range's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
}

/// The largest peers file a launch may carry (a gang of thousands fits).
const MAX_PEERS_JSON: usize = 4 << 20;

/// How a run's health is probed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Probe {
    /// Run a command in the sandbox; exit 0 is healthy.
    Command {
        /// Executable.
        command: String,
        /// Arguments.
        args: Vec<String>,
    },
    /// HTTP GET `http://127.0.0.1:<port><path>`; a 2xx or 3xx answer is healthy.
    Http {
        /// Port name (one of the run's `port_names`).
        port: String,
        /// Request path.
        path: String,
    },
    /// TCP connect to `127.0.0.1:<port>`.
    Tcp {
        /// Port name (one of the run's `port_names`).
        port: String,
    },
}

/// A health check with its timing.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HealthSpec {
    /// What to probe.
    pub probe: Probe,
    /// Seconds before the first check.
    pub initial_delay_secs: u32,
    /// Seconds between checks (never 0).
    pub interval_secs: u32,
    /// Seconds one check may take (never 0).
    pub timeout_secs: u32,
    /// Consecutive failures after which the run is unhealthy (never 0).
    pub max_consecutive_failures: u32,
}

/// A persistent volume of the task.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolumeRef {
    /// Directory name under `<data>/volumes/<task id>/`.
    pub name: String,
    /// Size in MiB (reported, not enforced).
    pub size_mib: u64,
}

/// A name that becomes a path component: no separators, no `.`/`..`, no
/// surprises in shells or logs.
fn check_path_name(field: &str, value: &str) -> Result<(), LaunchError> {
    if value.is_empty() {
        return Err(LaunchError::new(field, "is empty"));
    }
    if value.len() > 200 {
        return Err(LaunchError::new(field, format!("is {} bytes, at most 200", value.len())));
    }
    if value == "." || value == ".." {
        return Err(LaunchError::new(field, format!("`{value}` is not a valid name")));
    }
    if let Some(c) = value.chars().find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))) {
        return Err(LaunchError::new(
            field,
            format!("`{value}` contains {c:?}; only ASCII letters, digits, `.`, `_` and `-` are allowed"),
        ));
    }
    Ok(())
}

fn check_port_name(field: &str, value: &str) -> Result<(), LaunchError> {
    if value.is_empty() || !value.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Err(LaunchError::new(
            field,
            format!("`{value}` must be non-empty ASCII letters, digits or `_` (it becomes PORT_<NAME>)"),
        ));
    }
    Ok(())
}

/// A launch's secrets, checked by the same rules as the task spec that
/// named them (`task_secret::check_refs`: names, one target each, no
/// `PACELINE_*` variable, file names that stay in the secrets directory, no
/// target twice), with UTF-8 values. Errors name the secret, never its value.
fn launch_secrets(secrets: &[pb::LaunchSecret]) -> Result<Vec<LaunchSecret>, LaunchError> {
    let refs: Vec<SecretRef> = secrets
        .iter()
        .map(|s| SecretRef {
            name: s.name.clone(),
            env: (!s.env.is_empty()).then(|| s.env.clone()),
            file: (!s.file.is_empty()).then(|| s.file.clone()),
        })
        .collect();
    check_refs(&refs).map_err(|e| LaunchError::new("secrets", e.to_string()))?;
    refs.into_iter()
        .zip(secrets)
        .enumerate()
        .map(|(i, (r, s))| {
            let value = String::from_utf8(s.value.clone()).map_err(|_| {
                LaunchError::new(format!("secrets[{i}].value"), format!("secret {:?} is not UTF-8", r.name))
            })?;
            let target = r.target().ok_or_else(|| LaunchError::new(format!("secrets[{i}]"), "no target"))?;
            Ok(LaunchSecret { name: r.name, target, value: Secret::new(value) })
        })
        .collect()
}

impl RunSpec {
    /// Validates a protocol `Launch`. Errors name the field at fault.
    pub fn from_launch(launch: &pb::Launch) -> Result<Self, LaunchError> {
        let resources = paceline_proto::convert::resources(launch.resources.as_ref());
        let health_check = match &launch.health_check {
            None => None,
            Some(hc) if *hc == pb::HealthCheck::default() => None,
            Some(hc) => {
                let set = [!hc.command.is_empty(), !hc.http_port.is_empty(), !hc.tcp_port.is_empty()];
                let probe = match set {
                    [true, false, false] => Probe::Command { command: hc.command.clone(), args: hc.args.clone() },
                    [false, true, false] => Probe::Http {
                        port: hc.http_port.clone(),
                        path: if hc.http_path.is_empty() { "/".to_owned() } else { hc.http_path.clone() },
                    },
                    [false, false, true] => Probe::Tcp { port: hc.tcp_port.clone() },
                    _ => {
                        return Err(LaunchError::new(
                            "health_check",
                            "exactly one of command, http_port and tcp_port must be set",
                        ));
                    }
                };
                Some(HealthSpec {
                    probe,
                    initial_delay_secs: hc.initial_delay_secs,
                    interval_secs: hc.interval_secs,
                    timeout_secs: hc.timeout_secs,
                    max_consecutive_failures: hc.max_consecutive_failures,
                })
            }
        };
        let volume = match &launch.volume {
            Some(v) if *v != pb::Volume::default() => Some(VolumeRef { name: v.name.clone(), size_mib: v.size_mib }),
            _ => None,
        };
        let spec = RunSpec {
            run_id: launch.run_id.clone(),
            task_id: launch.task_id.clone(),
            command: launch.command.clone(),
            args: launch.args.clone(),
            env: launch.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            resources,
            port_names: launch.port_names.clone(),
            health_check,
            volume,
            kill_grace_period_secs: launch.kill_grace_period_secs,
            stop_signal: launch.stop_signal.clone(),
            secrets: launch_secrets(&launch.secrets)?,
            gpu: paceline_proto::convert::gpu_grant(launch.gpu.as_ref()),
            gang: launch.gang.as_ref().map(gang_launch).transpose()?,
            user: (!launch.user.is_empty()).then(|| launch.user.clone()),
        };
        spec.validated()
    }

    /// Checks everything that does not depend on the host's state, and fills
    /// health-check defaults.
    pub fn validated(mut self) -> Result<Self, LaunchError> {
        check_path_name("run_id", &self.run_id)?;
        check_path_name("task_id", &self.task_id)?;
        if self.command.trim().is_empty() {
            return Err(LaunchError::new("command", "is empty; the agent runs a command as a process"));
        }
        if self.command.contains('\0') || self.args.iter().any(|a| a.contains('\0')) {
            return Err(LaunchError::new("args", "contains a NUL byte"));
        }
        if !self.stop_signal.is_empty() && crate::process::stop_signal(&self.stop_signal).is_none() {
            return Err(LaunchError::new(
                "stop_signal",
                format!("`{}` is not one of {}", self.stop_signal, paceline_model::task::STOP_SIGNALS.join(", ")),
            ));
        }
        for (name, value) in &self.env {
            if name.is_empty() || name.contains('=') || name.contains('\0') || value.contains('\0') {
                return Err(LaunchError::new(format!("env.{name}"), "is not a valid environment variable"));
            }
        }
        let mut seen = BTreeSet::new();
        for (i, name) in self.port_names.iter().enumerate() {
            check_port_name(&format!("port_names[{i}]"), name)?;
            if !seen.insert(name.to_ascii_uppercase()) {
                return Err(LaunchError::new(format!("port_names[{i}]"), format!("`{name}` is named twice")));
            }
        }
        let wanted = self.port_names.len() as u64;
        if self.resources.ports != 0 && self.resources.ports != wanted {
            return Err(LaunchError::new(
                "resources.ports",
                format!("is {} but port_names names {wanted}", self.resources.ports),
            ));
        }
        self.resources.ports = wanted;
        if let Some(hc) = &mut self.health_check {
            let port_field = match &hc.probe {
                Probe::Http { port, .. } => Some(("health_check.http_port", port)),
                Probe::Tcp { port } => Some(("health_check.tcp_port", port)),
                Probe::Command { .. } => None,
            };
            if let Some((field, port)) = port_field
                && !self.port_names.iter().any(|p| p == port)
            {
                return Err(LaunchError::new(
                    field,
                    format!("`{port}` is not one of the launch's port_names {:?}", self.port_names),
                ));
            }
            if hc.interval_secs == 0 {
                hc.interval_secs = DEFAULT_INTERVAL_SECS;
            }
            if hc.timeout_secs == 0 {
                hc.timeout_secs = DEFAULT_TIMEOUT_SECS;
            }
            if hc.max_consecutive_failures == 0 {
                hc.max_consecutive_failures = DEFAULT_MAX_FAILURES;
            }
        }
        if let Some(volume) = &self.volume {
            check_path_name("volume.name", &volume.name)?;
        }
        if let Some(user) = &self.user {
            paceline_model::task_user::check_user(user).map_err(|e| LaunchError::new("user", e))?;
        }
        if let Some(gang) = &self.gang {
            // Exact ports name every port of the run, or none (the agent
            // picks them, as for any run).
            let named: BTreeSet<&String> = gang.ports.keys().collect();
            if !gang.ports.is_empty() && named != self.port_names.iter().collect() {
                return Err(LaunchError::new(
                    "gang.ports",
                    format!("names {:?}, not the launch's port_names {:?}", named, self.port_names),
                ));
            }
        }
        Ok(self)
    }

    /// The protocol form of this spec (what the manager would have sent).
    pub fn to_launch(&self) -> pb::Launch {
        let health_check = self.health_check.as_ref().map(|hc| {
            let mut out = pb::HealthCheck {
                initial_delay_secs: hc.initial_delay_secs,
                interval_secs: hc.interval_secs,
                timeout_secs: hc.timeout_secs,
                max_consecutive_failures: hc.max_consecutive_failures,
                ..Default::default()
            };
            match &hc.probe {
                Probe::Command { command, args } => {
                    out.command = command.clone();
                    out.args = args.clone();
                }
                Probe::Http { port, path } => {
                    out.http_port = port.clone();
                    out.http_path = path.clone();
                }
                Probe::Tcp { port } => out.tcp_port = port.clone(),
            }
            out
        });
        pb::Launch {
            gpu: paceline_proto::convert::gpu_grant_pb(&self.gpu),
            run_id: self.run_id.clone(),
            task_id: self.task_id.clone(),
            command: self.command.clone(),
            args: self.args.clone(),
            env: self.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            resources: Some(paceline_proto::convert::resources_pb(&self.resources)),
            port_names: self.port_names.clone(),
            health_check,
            volume: self.volume.as_ref().map(|v| pb::Volume { name: v.name.clone(), size_mib: v.size_mib }),
            kill_grace_period_secs: self.kill_grace_period_secs,
            stop_signal: self.stop_signal.clone(),
            secrets: self.secrets.iter().map(paceline_proto::convert::launch_secret_pb).collect(),
            gang: self.gang.as_ref().map(|g| pb::GangLaunch {
                ports: g.ports.iter().map(|(k, v)| (k.clone(), u32::from(*v))).collect(),
                peers_json: g.peers_json.clone(),
            }),
            user: self.user.clone().unwrap_or_default(),
        }
    }
}

/// A gang member's discovery from the protocol: port numbers that are
/// ports, and a peers file that is a JSON array of a bounded size.
fn gang_launch(g: &pb::GangLaunch) -> Result<GangLaunch, LaunchError> {
    let mut ports = BTreeMap::new();
    for (name, &port) in &g.ports {
        let port = u16::try_from(port)
            .ok()
            .filter(|p| *p != 0)
            .ok_or_else(|| LaunchError::new(format!("gang.ports.{name}"), format!("{port} is not a port number")))?;
        ports.insert(name.clone(), port);
    }
    if g.peers_json.len() > MAX_PEERS_JSON {
        return Err(LaunchError::new(
            "gang.peers_json",
            format!("is {} bytes, at most {MAX_PEERS_JSON}", g.peers_json.len()),
        ));
    }
    if !matches!(serde_json::from_str::<serde_json::Value>(&g.peers_json), Ok(serde_json::Value::Array(_))) {
        return Err(LaunchError::new("gang.peers_json", "is not a JSON array"));
    }
    Ok(GangLaunch { ports, peers_json: g.peers_json.clone() })
}

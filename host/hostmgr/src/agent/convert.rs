//! Translation between the agent protocol (`paceline.agent.v1`) and the
//! provider-neutral model, and the checks on a `Register`.

use std::collections::HashMap;

use paceline_model::run::{LaunchRequest, RunState, RunUpdate};
use paceline_proto::agent::v1 as pb;
use paceline_proto::convert::resources_pb as to_pb;

/// Upper bounds that no real host reaches; larger values are a bug or an attack.
const MAX_CPU_MILLIS: u64 = 10_000_000; // 10,000 cores
const MAX_MEMORY_MIB: u64 = 1 << 30; // 1 PiB
const MAX_DISK_MIB: u64 = 1 << 40;
const MAX_GPUS: u64 = 1024;
const MAX_PORTS: u64 = 65_535;
const MAX_HOSTNAME: usize = 253;
const MAX_ATTRIBUTES: usize = 256;
const MAX_STRING: usize = 1024;

/// Checks a registration; the error names the field first (`field: why`).
pub(crate) fn validate_register(r: &pb::Register) -> Result<(), String> {
    if r.protocol_version != pb::PROTOCOL_VERSION {
        return Err(format!(
            "protocol_version: {} is not supported; this manager speaks {}",
            r.protocol_version,
            pb::PROTOCOL_VERSION
        ));
    }
    if r.hostname.is_empty() {
        return Err("hostname: must not be empty".into());
    }
    if r.hostname.len() > MAX_HOSTNAME {
        return Err(format!("hostname: {} bytes, at most {MAX_HOSTNAME}", r.hostname.len()));
    }
    if r.hostname.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err("hostname: must not contain whitespace or control characters".into());
    }
    if r.agent_id.is_empty() || r.agent_id.len() > MAX_STRING {
        return Err(format!("agent_id: must be 1 to {MAX_STRING} bytes"));
    }
    let Some(t) = &r.total else {
        return Err("total: missing".into());
    };
    for (field, v, max, required) in [
        ("total.cpu_millis", t.cpu_millis, MAX_CPU_MILLIS, true),
        ("total.memory_mib", t.memory_mib, MAX_MEMORY_MIB, true),
        ("total.disk_mib", t.disk_mib, MAX_DISK_MIB, false),
        ("total.gpus", t.gpus, MAX_GPUS, false),
        ("total.gpu_milli", t.gpu_milli, MAX_GPUS * 1000, false),
        ("total.ports", t.ports, MAX_PORTS, false),
        ("gpus", r.gpus.len() as u64, MAX_GPUS, false),
    ] {
        if required && v == 0 {
            return Err(format!("{field}: must be greater than 0"));
        }
        if v > max {
            return Err(format!("{field}: {v} is more than {max}"));
        }
    }
    if (r.port_range_first != 0 || r.port_range_last != 0)
        && (r.port_range_first > r.port_range_last || r.port_range_last > 65_535)
    {
        return Err(format!(
            "port_range_first: {}..={} is not a range of ports",
            r.port_range_first, r.port_range_last
        ));
    }
    if r.attributes.len() > MAX_ATTRIBUTES {
        return Err(format!("attributes: {} entries, at most {MAX_ATTRIBUTES}", r.attributes.len()));
    }
    if r.attributes.iter().any(|(k, v)| k.is_empty() || k.len() > MAX_STRING || v.len() > MAX_STRING) {
        return Err(format!("attributes: keys must be 1 to {MAX_STRING} bytes, values at most {MAX_STRING}"));
    }
    if let Some(i) = r.running.iter().position(|run| run.run_id.is_empty()) {
        return Err(format!("running[{i}].run_id: must not be empty"));
    }
    if let Some(i) = r.gpus.iter().position(|g| g.model.len() > MAX_STRING) {
        return Err(format!("gpus[{i}].model: at most {MAX_STRING} bytes"));
    }
    Ok(())
}

pub(crate) fn launch(req: LaunchRequest) -> pb::Launch {
    let LaunchRequest { run_id, task_id, spec, env, secrets, gpu, gang, user } = req;
    let mut all_env: HashMap<String, String> = spec.env.into_iter().collect();
    all_env.extend(env);
    pb::Launch {
        run_id,
        task_id,
        command: spec.command,
        args: spec.args,
        env: all_env,
        resources: Some(to_pb(&spec.resources)),
        port_names: spec.ports,
        health_check: spec.health_check.map(|h| pb::HealthCheck {
            command: h.command,
            args: h.args,
            http_port: h.http.as_ref().map(|p| p.port.clone()).unwrap_or_default(),
            http_path: h.http.map(|p| p.path).unwrap_or_default(),
            tcp_port: h.tcp.map(|p| p.port).unwrap_or_default(),
            initial_delay_secs: h.initial_delay_secs,
            interval_secs: h.interval_secs,
            timeout_secs: h.timeout_secs,
            max_consecutive_failures: h.max_consecutive_failures,
        }),
        volume: spec.volume.map(|v| pb::Volume { name: v.name, size_mib: v.size_mib }),
        kill_grace_period_secs: spec.kill_grace_period_secs,
        stop_signal: spec.stop_signal.clone(),
        secrets: secrets.iter().map(paceline_proto::convert::launch_secret_pb).collect(),
        gpu: paceline_proto::convert::gpu_grant_pb(&gpu),
        gang: gang.map(|g| pb::GangLaunch {
            ports: g.ports.into_iter().map(|(k, v)| (k, u32::from(v))).collect(),
            peers_json: g.peers_json,
        }),
        user: user.unwrap_or_default(),
    }
}

pub(crate) fn run_state(s: i32) -> Option<RunState> {
    Some(match pb::RunState::try_from(s).ok()? {
        pb::RunState::Unspecified => return None,
        pb::RunState::Starting => RunState::Starting,
        pb::RunState::Running => RunState::Running,
        pb::RunState::Succeeded => RunState::Succeeded,
        pb::RunState::Failed => RunState::Failed,
        pb::RunState::Killed => RunState::Killed,
        pb::RunState::Lost => RunState::Lost,
    })
}

/// The model's update for `host`; `None` when the state is not one we know.
pub(crate) fn run_update(host: &str, u: pb::StatusUpdate) -> Option<RunUpdate> {
    let state = run_state(u.state)?;
    Some(RunUpdate {
        host: host.to_string(),
        run_id: u.run_id,
        task_id: u.task_id,
        seq: u.seq,
        state,
        healthy: u.healthy,
        exit_code: u.exit_code,
        signal: u.signal,
        reason: u.reason,
        message: u.message,
        at_ms: u.at_ms,
        // A port outside u16 cannot be real; it is dropped rather than wrapped.
        ports: u.ports.into_iter().filter_map(|(k, v)| u16::try_from(v).ok().map(|p| (k, p))).collect(),
    })
}

/// One run's measured use from a heartbeat. The figures are the agent's
/// word for its own runs (the manager keeps them only for runs live on that
/// host); they are shown, never used to place or enforce.
pub(crate) fn run_usage(u: pb::RunUsage) -> crate::provider::RunUsage {
    crate::provider::RunUsage {
        run_id: u.run_id,
        used: crate::provider::MeasuredUse {
            cpu_millis: u.cpu_millis,
            memory_mib: u.memory_mib,
            sampled_at_ms: u.sampled_at_ms,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn good() -> pb::Register {
        pb::Register {
            protocol_version: pb::PROTOCOL_VERSION,
            agent_id: "a1".into(),
            hostname: "n1".into(),
            total: Some(paceline_proto::v1::Resources {
                cpu_millis: 4000,
                memory_mib: 8192,
                disk_mib: 0,
                gpus: 0,
                ports: 100,
                gpu_milli: 0,
            }),
            ..pb::Register::default()
        }
    }

    #[test]
    fn register_checks_name_the_field() {
        type Edit = fn(&mut pb::Register);
        let cases: Vec<(&str, Edit, Option<&str>)> = vec![
            ("good", |_| {}, None),
            ("version", |r| r.protocol_version = 2, Some("protocol_version")),
            ("empty hostname", |r| r.hostname.clear(), Some("hostname")),
            ("long hostname", |r| r.hostname = "x".repeat(254), Some("hostname")),
            ("no total", |r| r.total = None, Some("total")),
            ("zero cpu", |r| r.total.as_mut().into_iter().for_each(|t| t.cpu_millis = 0), Some("total.cpu_millis")),
            ("zero memory", |r| r.total.as_mut().into_iter().for_each(|t| t.memory_mib = 0), Some("total.memory_mib")),
            ("huge gpus", |r| r.total.as_mut().into_iter().for_each(|t| t.gpus = 1 << 20), Some("total.gpus")),
            (
                "huge gpu_milli",
                |r| r.total.as_mut().into_iter().for_each(|t| t.gpu_milli = 1 << 40),
                Some("total.gpu_milli"),
            ),
            (
                "a device model too long",
                |r| r.gpus = vec![paceline_proto::v1::GpuDevice { index: 0, model: "m".repeat(100_000) }],
                Some("gpus[0].model"),
            ),
            ("port range", |r| (r.port_range_first, r.port_range_last) = (2000, 1000), Some("port_range_first")),
            ("empty agent id", |r| r.agent_id.clear(), Some("agent_id")),
        ];
        for (name, edit, field) in cases {
            let mut r = good();
            edit(&mut r);
            match (validate_register(&r), field) {
                (Ok(()), None) => {}
                (Err(e), Some(f)) => assert!(e.starts_with(&format!("{f}:")), "{name}: {e}"),
                (got, want) => panic!("{name}: got {got:?}, want {want:?}"),
            }
        }
    }
}

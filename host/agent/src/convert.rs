//! Conversions between the provider-neutral model (`paceline_model::run`)
//! and the agent protocol, for the host manager's agent provider and for
//! tests. Pure functions, no I/O.

use std::collections::BTreeMap;

use paceline_model::run::{LaunchRequest, RunState, RunUpdate};
use paceline_proto::agent::v1 as pb;

use paceline_proto::convert::resources_pb as proto_resources;

/// The protocol `Launch` for a model launch request: the request's env is
/// laid over the spec's env.
pub fn launch_from_request(req: &LaunchRequest) -> pb::Launch {
    let spec = &req.spec;
    let mut env = spec.env.clone();
    env.extend(req.env.iter().map(|(k, v)| (k.clone(), v.clone())));
    let health_check = spec.health_check.as_ref().map(|hc| pb::HealthCheck {
        command: hc.command.clone(),
        args: hc.args.clone(),
        http_port: hc.http.as_ref().map(|h| h.port.clone()).unwrap_or_default(),
        http_path: hc.http.as_ref().map(|h| h.path.clone()).unwrap_or_default(),
        tcp_port: hc.tcp.as_ref().map(|t| t.port.clone()).unwrap_or_default(),
        initial_delay_secs: hc.initial_delay_secs,
        interval_secs: hc.interval_secs,
        timeout_secs: hc.timeout_secs,
        max_consecutive_failures: hc.max_consecutive_failures,
    });
    pb::Launch {
        gpu: paceline_proto::convert::gpu_grant_pb(&req.gpu),
        run_id: req.run_id.clone(),
        task_id: req.task_id.clone(),
        command: spec.command.clone(),
        args: spec.args.clone(),
        env: env.into_iter().collect(),
        resources: Some(proto_resources(&spec.resources)),
        port_names: spec.ports.clone(),
        health_check,
        volume: spec.volume.as_ref().map(|v| pb::Volume { name: v.name.clone(), size_mib: v.size_mib }),
        kill_grace_period_secs: spec.kill_grace_period_secs,
        stop_signal: spec.stop_signal.clone(),
        secrets: req.secrets.iter().map(paceline_proto::convert::launch_secret_pb).collect(),
        gang: req.gang.as_ref().map(|g| pb::GangLaunch {
            ports: g.ports.iter().map(|(k, v)| (k.clone(), u32::from(*v))).collect(),
            peers_json: g.peers_json.clone(),
        }),
        user: req.user.clone().unwrap_or_default(),
    }
}

/// Model state of a protocol state; `None` for `UNSPECIFIED`/unknown values.
pub fn run_state_from_proto(state: i32) -> Option<RunState> {
    match pb::RunState::try_from(state).ok()? {
        pb::RunState::Unspecified => None,
        pb::RunState::Starting => Some(RunState::Starting),
        pb::RunState::Running => Some(RunState::Running),
        pb::RunState::Succeeded => Some(RunState::Succeeded),
        pb::RunState::Failed => Some(RunState::Failed),
        pb::RunState::Killed => Some(RunState::Killed),
        pb::RunState::Lost => Some(RunState::Lost),
    }
}

/// Protocol state of a model state.
pub fn run_state_to_proto(state: RunState) -> pb::RunState {
    match state {
        RunState::Starting => pb::RunState::Starting,
        RunState::Running => pb::RunState::Running,
        RunState::Succeeded => pb::RunState::Succeeded,
        RunState::Failed => pb::RunState::Failed,
        RunState::Killed => pb::RunState::Killed,
        RunState::Lost => pb::RunState::Lost,
    }
}

/// The model update for a protocol status update from `host`; `None` when
/// the state is unspecified (a newer agent's state this build cannot name).
pub fn run_update_from_status(host: &str, update: &pb::StatusUpdate) -> Option<RunUpdate> {
    Some(RunUpdate {
        host: host.to_owned(),
        run_id: update.run_id.clone(),
        task_id: update.task_id.clone(),
        seq: update.seq,
        state: run_state_from_proto(update.state)?,
        healthy: update.healthy,
        exit_code: update.exit_code,
        signal: update.signal,
        reason: update.reason.clone(),
        message: update.message.clone(),
        at_ms: update.at_ms,
        ports: update
            .ports
            .iter()
            .filter_map(|(name, port)| Some((name.clone(), u16::try_from(*port).ok()?)))
            .collect::<BTreeMap<_, _>>(),
    })
}

#[cfg(test)]
mod tests {
    use paceline_model::task::{HealthCheck, HttpProbe, TaskSpec, VolumeSpec};

    use super::*;
    use crate::spec::{Probe, RunSpec};

    #[test]
    fn a_model_launch_request_becomes_a_valid_agent_launch() {
        let mut spec = TaskSpec {
            command: "web".into(),
            args: vec!["--port".into()],
            ports: vec!["http".into()],
            kill_grace_period_secs: 7,
            volume: Some(VolumeSpec { name: "data".into(), size_mib: 5 }),
            health_check: Some(HealthCheck {
                command: String::new(),
                args: Vec::new(),
                http: Some(HttpProbe { port: "http".into(), path: "/ready".into() }),
                tcp: None,
                initial_delay_secs: 0,
                interval_secs: 2,
                timeout_secs: 1,
                max_consecutive_failures: 3,
            }),
            ..Default::default()
        };
        spec.env.insert("A".into(), "spec".into());
        spec.resources.memory_mib = 128;
        spec.resources.ports = 1;
        let mut req = LaunchRequest {
            gang: None,
            run_id: "j-0-1".into(),
            task_id: "j-0".into(),
            spec,
            env: BTreeMap::new(),
            secrets: Vec::new(),
            gpu: paceline_model::gpu::GpuGrant { devices: vec![1], milli_each: 250 },
            user: None,
        };
        req.spec.resources.gpu_milli = 250;
        req.env.insert("A".into(), "request".into());
        let launch = launch_from_request(&req);
        let run = RunSpec::from_launch(&launch).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(run.env["A"], "request");
        assert_eq!(run.kill_grace_period_secs, 7);
        assert_eq!(run.resources.memory_mib, 128);
        assert_eq!((run.resources.gpu_milli, run.gpu.devices.as_slice(), run.gpu.milli_each), (250, &[1][..], 250));
        let hc = run.health_check.clone().unwrap_or_else(|| panic!("health check lost"));
        assert_eq!(hc.probe, Probe::Http { port: "http".into(), path: "/ready".into() });
        assert_eq!(hc.interval_secs, 2);
        assert_eq!(run.to_launch().port_names, vec!["http".to_owned()]);
    }

    #[test]
    fn status_updates_map_to_model_updates() {
        let update = pb::StatusUpdate {
            run_id: "j-0-1".into(),
            seq: 3,
            state: pb::RunState::Failed as i32,
            exit_code: Some(3),
            ports: [("http".to_owned(), 31000u32)].into_iter().collect(),
            ..Default::default()
        };
        let model = run_update_from_status("h1", &update).unwrap_or_else(|| panic!("state lost"));
        assert_eq!((model.state, model.exit_code, model.ports["http"]), (RunState::Failed, Some(3), 31000));
        assert!(run_update_from_status("h1", &pb::StatusUpdate::default()).is_none());
        assert_eq!(run_state_to_proto(RunState::Lost), pb::RunState::Lost);
    }
}

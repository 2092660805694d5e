//! Translation between Mesos messages and the provider-neutral model:
//! offered resources → [`Resources`], attributes → labels, a launch →
//! `TaskInfo`s carved out of held offers, `TaskStatus` → [`RunUpdate`].

use std::collections::BTreeMap;

use paceline_model::run::{LaunchRequest, RunState, RunUpdate};
use paceline_model::{Labels, Resources};
use paceline_proto::mesos::v1 as mesos;

/// Scalars are compared with this slack (Mesos uses fixed-point with 3 decimals).
const EPS: f64 = 1e-6;

/// Whether a resource may be used by us: not revocable (our model has no
/// slack resources), and allocated to (or reserved for) our role or `*`.
pub(crate) fn usable(r: &mesos::Resource, role: &str) -> bool {
    if r.revocable.is_some() || r.shared.is_some() {
        return false;
    }
    match r.allocation_info.as_ref().and_then(|a| a.role.as_deref()) {
        Some(alloc) => alloc == role || alloc == "*",
        None => true,
    }
}

fn scalar(r: &mesos::Resource) -> f64 {
    r.scalar.as_ref().map_or(0.0, |s| s.value).max(0.0)
}

fn range_count(r: &mesos::Resource) -> u64 {
    r.ranges.as_ref().map_or(0, |rs| {
        rs.range.iter().map(|x| x.end.saturating_sub(x.begin).saturating_add(1)).fold(0u64, u64::saturating_add)
    })
}

/// Adds one offered resource to a total (unknown names are ignored).
pub(crate) fn add_resource(total: &mut Resources, r: &mesos::Resource) {
    match r.name.as_str() {
        "cpus" => total.cpu_millis = total.cpu_millis.saturating_add((scalar(r) * 1000.0).round() as u64),
        "mem" => total.memory_mib = total.memory_mib.saturating_add(scalar(r).floor() as u64),
        "disk" => total.disk_mib = total.disk_mib.saturating_add(scalar(r).floor() as u64),
        "gpus" => total.gpu_milli = total.gpu_milli.saturating_add(scalar(r).floor() as u64 * 1000),
        "ports" => total.ports = total.ports.saturating_add(range_count(r)),
        _ => {}
    }
}

/// What an offer holds that we may use.
pub(crate) fn offer_resources(offer: &mesos::Offer, role: &str) -> Resources {
    let mut total = Resources::ZERO;
    for r in offer.resources.iter().filter(|r| usable(r, role)) {
        add_resource(&mut total, r);
    }
    total
}

/// Agent attributes as labels: text as is, scalars as numbers, sets and
/// ranges as Mesos writes them (`{a,b}`, `[1-2,5-6]`).
pub(crate) fn attributes(attrs: &[mesos::Attribute]) -> Labels {
    let mut out = Labels::new();
    for a in attrs {
        let v = if let Some(t) = &a.text {
            t.value.clone()
        } else if let Some(s) = &a.scalar {
            if s.value.fract() == 0.0 { format!("{}", s.value as i64) } else { format!("{}", s.value) }
        } else if let Some(set) = &a.set {
            format!("{{{}}}", set.item.join(","))
        } else if let Some(rs) = &a.ranges {
            let parts: Vec<String> = rs.range.iter().map(|r| format!("{}-{}", r.begin, r.end)).collect();
            format!("[{}]", parts.join(","))
        } else {
            continue;
        };
        out.insert(a.name.clone(), v);
    }
    out
}

/// One piece of an offered resource still free while tasks are carved out.
#[derive(Debug)]
struct Piece {
    r: mesos::Resource,
    /// Scalar left.
    left: f64,
    /// Port ranges left.
    ranges: Vec<(u64, u64)>,
}

/// Resources of held offers, carved into tasks.
#[derive(Debug)]
pub(crate) struct Carver {
    pieces: Vec<Piece>,
}

/// A task's resources and the ports it got.
#[derive(Debug)]
pub(crate) struct Carved {
    pub resources: Vec<mesos::Resource>,
    pub ports: Vec<u16>,
}

impl Carver {
    pub fn new<'a>(offers: impl IntoIterator<Item = &'a mesos::Offer>, role: &str) -> Self {
        let mut pieces = Vec::new();
        for o in offers {
            for r in o.resources.iter().filter(|r| usable(r, role)) {
                let ranges =
                    r.ranges.as_ref().map_or(Vec::new(), |rs| rs.range.iter().map(|x| (x.begin, x.end)).collect());
                pieces.push(Piece { r: r.clone(), left: scalar(r), ranges });
            }
        }
        Carver { pieces }
    }

    fn take_scalar(&mut self, name: &str, mut need: f64, out: &mut Vec<mesos::Resource>) -> bool {
        if need <= EPS {
            return true;
        }
        for p in self.pieces.iter_mut().filter(|p| p.r.name == name && p.left > EPS) {
            let take = need.min(p.left);
            p.left -= take;
            need -= take;
            let mut r = p.r.clone();
            r.scalar = Some(mesos::value::Scalar { value: (take * 1000.0).round() / 1000.0 });
            out.push(r);
            if need <= EPS {
                return true;
            }
        }
        false
    }

    fn take_ports(&mut self, mut need: u64, out: &mut Vec<mesos::Resource>, ports: &mut Vec<u16>) -> bool {
        if need == 0 {
            return true;
        }
        for p in self.pieces.iter_mut().filter(|p| p.r.name == "ports") {
            let mut taken = Vec::new();
            while need > 0 {
                let Some(first) = p.ranges.iter_mut().find(|(b, e)| b <= e && *e <= u64::from(u16::MAX)) else { break };
                let port = first.0;
                first.0 += 1;
                taken.push(port);
                need -= 1;
            }
            p.ranges.retain(|(b, e)| b <= e);
            if !taken.is_empty() {
                let mut r = p.r.clone();
                r.ranges = Some(mesos::value::Ranges {
                    range: taken.iter().map(|&x| mesos::value::Range { begin: x, end: x }).collect(),
                });
                ports.extend(taken.iter().map(|&x| x as u16));
                out.push(r);
            }
            if need == 0 {
                return true;
            }
        }
        false
    }

    /// Carves `need` out of what is left; `None` (and nothing taken that
    /// matters: the carver is dropped) if it does not fit.
    pub fn carve(&mut self, need: &Resources) -> Option<Carved> {
        let mut resources = Vec::new();
        let mut ports = Vec::new();
        let ok = self.take_scalar("cpus", need.cpu_millis as f64 / 1000.0, &mut resources)
            && self.take_scalar("mem", need.memory_mib as f64, &mut resources)
            && self.take_scalar("disk", need.disk_mib as f64, &mut resources)
            // Mesos counts whole GPUs: a share of one takes a whole device.
            && self.take_scalar("gpus", need.gpu_milli.div_ceil(1000) as f64, &mut resources)
            && self.take_ports(need.ports, &mut resources, &mut ports);
        ok.then_some(Carved { resources, ports })
    }
}

/// Label keys we put on tasks.
pub(crate) const LABEL_TASK: &str = "paceline.task_id";
pub(crate) const LABEL_RUN: &str = "paceline.run_id";

/// Checks that a launch can be expressed as a Mesos command task; the error names the field.
pub(crate) fn check_launch(req: &LaunchRequest) -> Result<(), String> {
    if req.spec.image.is_some() {
        return Err("image: container images are not supported by the mesos provider".into());
    }
    if req.spec.volume.is_some() {
        return Err("volume: persistent volumes are not supported by the mesos provider".into());
    }
    if req.spec.command.is_empty() {
        return Err("command: must not be empty".into());
    }
    if !req.spec.secrets.is_empty() {
        // A Mesos task's environment is readable in the master's and the
        // agents' state endpoints: no place for a secret's value.
        return Err("secrets: task secrets are not supported by the mesos provider".into());
    }
    if req.user.is_some() {
        // Never run it as the Mesos agent's default user instead.
        return Err("user: running tasks as a chosen host user is not supported by the mesos provider".into());
    }
    Ok(())
}

/// The `TaskInfo` of one run: a command task (no shell; `arguments` is the
/// whole argv) with the environment, ports as `PORT_<NAME>`, the kill grace
/// period, and labels naming the Paceline task and run.
pub(crate) fn task_info(
    req: &LaunchRequest,
    agent_id: &str,
    carved: Carved,
) -> (mesos::TaskInfo, BTreeMap<String, u16>) {
    let mut env: BTreeMap<String, String> = req.spec.env.clone();
    env.extend(req.env.clone());
    let mut ports = BTreeMap::new();
    for (name, port) in req.spec.ports.iter().zip(carved.ports.iter()) {
        env.insert(format!("PORT_{}", name.to_uppercase()), port.to_string());
        ports.insert(name.clone(), *port);
    }
    let mut argv = vec![req.spec.command.clone()];
    argv.extend(req.spec.args.iter().cloned());
    let info = mesos::TaskInfo {
        name: req.task_id.clone(),
        task_id: mesos::TaskId { value: req.run_id.clone() },
        agent_id: mesos::AgentId { value: agent_id.to_string() },
        resources: carved.resources,
        command: Some(mesos::CommandInfo {
            uris: Vec::new(),
            environment: Some(mesos::Environment {
                variables: env
                    .into_iter()
                    .map(|(name, value)| mesos::environment::Variable {
                        name,
                        r#type: Some(mesos::environment::variable::Type::Value as i32),
                        value: Some(value),
                    })
                    .collect(),
            }),
            shell: Some(false),
            value: Some(req.spec.command.clone()),
            arguments: argv,
            user: None,
        }),
        kill_policy: Some(mesos::KillPolicy {
            grace_period: Some(mesos::DurationInfo {
                nanoseconds: i64::from(req.spec.kill_grace_period_secs) * 1_000_000_000,
            }),
        }),
        data: None,
        labels: Some(mesos::Labels {
            labels: vec![
                mesos::Label { key: LABEL_TASK.into(), value: Some(req.task_id.clone()) },
                mesos::Label { key: LABEL_RUN.into(), value: Some(req.run_id.clone()) },
            ],
        }),
    };
    (info, ports)
}

/// The Paceline task id of a run id (`<job>-<instance>-<run>` → `<job>-<instance>`);
/// a malformed id from Mesos (not one Paceline launched) is kept whole.
pub(crate) fn task_of_run(run_id: &str) -> String {
    paceline_model::RunId::task_part(run_id).unwrap_or(run_id).to_string()
}

/// How a Mesos task state maps to a run state; `Lost` covers every state in
/// which Mesos no longer vouches for the task (partition-aware states included).
pub(crate) fn run_state(s: mesos::TaskState) -> RunState {
    use mesos::TaskState as T;
    match s {
        T::TaskStaging | T::TaskStarting => RunState::Starting,
        T::TaskRunning | T::TaskKilling => RunState::Running,
        T::TaskFinished => RunState::Succeeded,
        T::TaskFailed | T::TaskError => RunState::Failed,
        T::TaskKilled => RunState::Killed,
        T::TaskLost | T::TaskDropped | T::TaskUnreachable | T::TaskGone | T::TaskGoneByOperator | T::TaskUnknown => {
            RunState::Lost
        }
    }
}

/// `exited with status N` in a command executor's message.
pub(crate) fn exit_code(message: &str) -> Option<i32> {
    let i = message.find("exited with status ")? + "exited with status ".len();
    let digits: String = message[i..].chars().take_while(|c| c.is_ascii_digit() || *c == '-').collect();
    digits.parse().ok()
}

/// The model's update for a status (seq and host filled by the caller).
pub(crate) fn run_update(
    host: &str,
    task_id: &str,
    seq: u64,
    st: &mesos::TaskStatus,
    ports: &BTreeMap<String, u16>,
) -> RunUpdate {
    let mstate = mesos::TaskState::try_from(st.state).unwrap_or(mesos::TaskState::TaskUnknown);
    let state = run_state(mstate);
    let message = st.message.clone().unwrap_or_default();
    let exit = match state {
        RunState::Succeeded => Some(exit_code(&message).unwrap_or(0)),
        RunState::Failed => exit_code(&message),
        _ => None,
    };
    let mreason = st.reason.and_then(|r| mesos::task_status::Reason::try_from(r).ok());
    let reason = match (state, mstate) {
        (RunState::Succeeded | RunState::Failed, mesos::TaskState::TaskFinished | mesos::TaskState::TaskFailed) => {
            "EXITED".to_string()
        }
        (RunState::Killed, _) => "KILLED_BY_REQUEST".to_string(),
        (RunState::Running, mesos::TaskState::TaskKilling) => "KILLING".to_string(),
        (RunState::Starting | RunState::Running, _) => String::new(),
        _ => mstate.as_str_name().to_string(),
    };
    let message = match mreason {
        Some(r) if message.is_empty() => r.as_str_name().to_string(),
        Some(r) => format!("{}: {message}", r.as_str_name()),
        None => message,
    };
    RunUpdate {
        host: host.to_string(),
        run_id: st.task_id.value.clone(),
        task_id: task_id.to_string(),
        seq,
        state,
        healthy: st.healthy,
        exit_code: exit,
        signal: None,
        reason,
        message,
        at_ms: st.timestamp.map_or(0, |t| (t * 1000.0).max(0.0) as u64),
        ports: ports.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scalar_res(name: &str, v: f64) -> mesos::Resource {
        mesos::Resource {
            name: name.into(),
            r#type: mesos::value::Type::Scalar as i32,
            scalar: Some(mesos::value::Scalar { value: v }),
            ..Default::default()
        }
    }

    fn offer() -> mesos::Offer {
        let mut ports = scalar_res("ports", 0.0);
        ports.r#type = mesos::value::Type::Ranges as i32;
        ports.scalar = None;
        ports.ranges = Some(mesos::value::Ranges { range: vec![mesos::value::Range { begin: 31000, end: 31001 }] });
        let mut revocable = scalar_res("cpus", 8.0);
        revocable.revocable = Some(mesos::resource::RevocableInfo {});
        mesos::Offer {
            id: mesos::OfferId { value: "o1".into() },
            framework_id: mesos::FrameworkId { value: "f".into() },
            agent_id: mesos::AgentId { value: "a".into() },
            hostname: "h".into(),
            resources: vec![
                scalar_res("cpus", 2.5),
                scalar_res("mem", 1024.0),
                scalar_res("gpus", 1.0),
                ports,
                revocable,
            ],
            ..Default::default()
        }
    }

    #[test]
    fn offers_become_resources_without_revocable() {
        let r = offer_resources(&offer(), "*");
        assert_eq!(r, Resources { cpu_millis: 2500, memory_mib: 1024, disk_mib: 0, gpu_milli: 1000, ports: 2 });
    }

    #[test]
    fn carving_shrinks_to_what_the_run_needs() {
        let o = offer();
        let mut c = Carver::new([&o], "*");
        let a = c
            .carve(&Resources { cpu_millis: 1500, memory_mib: 512, disk_mib: 0, gpu_milli: 0, ports: 1 })
            .expect("fits");
        assert_eq!(a.ports, vec![31000]);
        let cpus: f64 = a.resources.iter().filter(|r| r.name == "cpus").map(scalar).sum();
        assert!((cpus - 1.5).abs() < 1e-9);
        let b = c
            .carve(&Resources { cpu_millis: 1000, memory_mib: 512, disk_mib: 0, gpu_milli: 1000, ports: 1 })
            .expect("fits");
        assert_eq!(b.ports, vec![31001]);
        assert!(c.carve(&Resources { cpu_millis: 100, memory_mib: 0, disk_mib: 0, gpu_milli: 0, ports: 0 }).is_none());
    }

    #[test]
    fn exit_codes_are_read_from_messages() {
        assert_eq!(exit_code("Command exited with status 3"), Some(3));
        assert_eq!(exit_code("killed"), None);
    }
}

//! Offers: what an agent has left (its resources less what live tasks
//! use), one outstanding offer per agent at each allocation, and ACCEPT,
//! which checks the offers and carves each task's resources from them.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use paceline_proto::mesos::v1 as mesos;
use paceline_proto::mesos::v1::scheduler::{call, event};
use tracing::debug;

use crate::state::{Amounts, Master, SimAgent, SimTask, ev};
use crate::tasks::{Plan, is_terminal, plan, script_of};

fn scalar(name: &str, v: f64, role: &str) -> mesos::Resource {
    #[allow(deprecated)]
    mesos::Resource {
        name: name.into(),
        r#type: mesos::value::Type::Scalar as i32,
        scalar: Some(mesos::value::Scalar { value: v }),
        allocation_info: Some(mesos::resource::AllocationInfo { role: Some(role.into()) }),
        ..Default::default()
    }
}

impl Master {
    pub(crate) fn used_on(&self, agent: &str) -> (Amounts, Vec<u64>) {
        let mut a = Amounts::default();
        let mut ports = Vec::new();
        for t in self.tasks.values().filter(|t| t.agent_id == agent && !is_terminal(t.state)) {
            a.cpus += t.used.cpus;
            a.mem += t.used.mem;
            a.disk += t.used.disk;
            a.gpus += t.used.gpus;
            ports.extend(t.ports.iter().copied());
        }
        (a, ports)
    }

    pub(crate) fn free_resources(&self, agent: &SimAgent, role: &str) -> Vec<mesos::Resource> {
        let (used, ports) = self.used_on(&agent.id);
        let mut out = Vec::new();
        for (name, total, used) in [
            ("cpus", agent.spec.cpus, used.cpus),
            ("mem", agent.spec.mem, used.mem),
            ("disk", agent.spec.disk, used.disk),
            ("gpus", agent.spec.gpus, used.gpus),
        ] {
            let left = ((total - used) * 1000.0).round() / 1000.0;
            if left > 0.0005 {
                out.push(scalar(name, left, role));
            }
        }
        let mut ranges = Vec::new();
        let mut start: Option<u64> = None;
        for p in agent.spec.ports.0..=agent.spec.ports.1 {
            let free = !ports.contains(&p);
            match (free, start) {
                (true, None) => start = Some(p),
                (false, Some(s)) => {
                    ranges.push(mesos::value::Range { begin: s, end: p - 1 });
                    start = None;
                }
                _ => {}
            }
        }
        if let Some(s) = start {
            ranges.push(mesos::value::Range { begin: s, end: agent.spec.ports.1 });
        }
        if !ranges.is_empty() {
            let mut r = scalar("ports", 0.0, role);
            r.r#type = mesos::value::Type::Ranges as i32;
            r.scalar = None;
            r.ranges = Some(mesos::value::Ranges { range: ranges });
            out.push(r);
        }
        out
    }

    pub(crate) fn allocate(&mut self, now: Instant) {
        let Some(f) = &self.framework else { return };
        if f.tx.is_none() || f.suppressed {
            return;
        }
        let fid = f.id.clone();
        let role = self.role();
        let ids: Vec<String> = self
            .agents
            .values()
            .filter(|a| {
                a.alive
                    && a.offer.is_none()
                    && a.filtered_until.is_none_or(|t| t <= now)
                    && a.taken_until.is_none_or(|t| t <= now)
            })
            .map(|a| a.id.clone())
            .collect();
        let mut offers = Vec::new();
        for aid in ids {
            let Some(agent) = self.agents.get(&aid) else { continue };
            let resources = self.free_resources(agent, &role);
            if !resources.iter().any(|r| r.name == "cpus" || r.name == "mem") {
                continue;
            }
            let attributes = agent
                .spec
                .attributes
                .iter()
                .map(|(k, v)| mesos::Attribute {
                    name: k.clone(),
                    r#type: mesos::value::Type::Text as i32,
                    text: Some(mesos::value::Text { value: v.clone() }),
                    ..Default::default()
                })
                .collect();
            let hostname = agent.spec.hostname.clone();
            let oid = self.id("offer");
            offers.push(mesos::Offer {
                id: mesos::OfferId { value: oid.clone() },
                framework_id: mesos::FrameworkId { value: fid.clone() },
                agent_id: mesos::AgentId { value: aid.clone() },
                hostname,
                resources: resources.clone(),
                attributes,
                allocation_info: Some(mesos::resource::AllocationInfo { role: Some(role.clone()) }),
                ..Default::default()
            });
            self.offers.insert(oid.clone(), (aid.clone(), resources));
            if let Some(a) = self.agents.get_mut(&aid) {
                a.offer = Some(oid);
                a.filtered_until = None;
            }
        }
        if !offers.is_empty() {
            let mut e = ev(event::Type::Offers);
            e.offers = Some(event::Offers { offers });
            self.send(&e);
        }
    }
}

pub(crate) fn accept(m: &mut Master, a: &call::Accept, now: Instant, refuse: Duration, pa_default: bool) {
    let tasks: Vec<mesos::TaskInfo> = a
        .operations
        .iter()
        .filter(|op| op.r#type == Some(mesos::offer::operation::Type::Launch as i32))
        .flat_map(|op| op.launch.iter().flat_map(|l| l.task_infos.iter().cloned()))
        .collect();
    // Offers: exist, ours, one agent.
    let mut agent: Option<String> = None;
    let mut valid = !a.offer_ids.is_empty();
    let mut pool: Vec<mesos::Resource> = Vec::new();
    for o in &a.offer_ids {
        match m.offers.get(&o.value) {
            Some((aid, res)) => {
                if agent.as_ref().is_some_and(|x| x != aid) {
                    valid = false;
                }
                agent = Some(aid.clone());
                pool.extend(res.iter().cloned());
            }
            None => valid = false,
        }
    }
    // The offers are used up either way (valid ones go back on failure).
    for o in &a.offer_ids {
        if let Some((aid, _)) = m.offers.remove(&o.value)
            && let Some(ag) = m.agents.get_mut(&aid)
        {
            ag.offer = None;
            ag.filtered_until = if valid && refuse > Duration::ZERO { Some(now + refuse) } else { None };
        }
    }
    let pa = m.partition_aware(pa_default);
    if !valid {
        let state = if pa { mesos::TaskState::TaskDropped } else { mesos::TaskState::TaskLost };
        for t in tasks {
            let st = m.status(
                &t.task_id.value,
                state,
                "Task launched with invalid offers",
                Some(mesos::task_status::Reason::InvalidOffers),
                true,
            );
            let mut e = ev(event::Type::Update);
            e.update = Some(event::Update { status: mesos::TaskStatus { agent_id: Some(t.agent_id.clone()), ..st } });
            m.send(&e);
        }
        return;
    }
    let Some(aid) = agent else { return };
    let mut left = Amounts::default();
    let mut ports: Vec<u64> = Vec::new();
    for r in &pool {
        let v = r.scalar.as_ref().map_or(0.0, |s| s.value);
        match r.name.as_str() {
            "cpus" => left.cpus += v,
            "mem" => left.mem += v,
            "disk" => left.disk += v,
            "gpus" => left.gpus += v,
            "ports" => {
                for rg in r.ranges.iter().flat_map(|x| x.range.iter()) {
                    ports.extend(rg.begin..=rg.end.min(rg.begin + 65_535));
                }
            }
            _ => {}
        }
    }
    for t in tasks {
        let id = t.task_id.value.clone();
        let mut need = Amounts::default();
        let mut want_ports = Vec::new();
        for r in &t.resources {
            let v = r.scalar.as_ref().map_or(0.0, |s| s.value);
            match r.name.as_str() {
                "cpus" => need.cpus += v,
                "mem" => need.mem += v,
                "disk" => need.disk += v,
                "gpus" => need.gpus += v,
                "ports" => want_ports.extend(
                    r.ranges
                        .iter()
                        .flat_map(|x| x.range.iter())
                        .flat_map(|rg| rg.begin..=rg.end.min(rg.begin + 65_535)),
                ),
                _ => {}
            }
        }
        const EPS: f64 = 1e-6;
        let error = if m.tasks.get(&id).is_some_and(|x| !is_terminal(x.state)) {
            Some(format!("Task {id} already exists"))
        } else if t.agent_id.value != aid {
            Some(format!("Task uses agent {} but the offers are of {aid}", t.agent_id.value))
        } else if need.cpus > left.cpus + EPS
            || need.mem > left.mem + EPS
            || need.disk > left.disk + EPS
            || need.gpus > left.gpus + EPS
        {
            Some("Task uses more resources than available in the offers".into())
        } else if !want_ports.iter().all(|p| ports.contains(p)) {
            Some("Task uses ports not in the offers".into())
        } else if need.cpus <= EPS && need.mem <= EPS {
            Some("Task uses no cpus or mem".into())
        } else {
            None
        };
        if let Some(msg) = error {
            let st =
                m.status(&id, mesos::TaskState::TaskError, &msg, Some(mesos::task_status::Reason::TaskInvalid), true);
            let st = mesos::TaskStatus { agent_id: Some(t.agent_id.clone()), ..st };
            debug!(task = id, msg, "fake master: task refused");
            // Queued like any update: re-sent until acknowledged.
            let launches = m.tasks.get(&id).map_or(0, |x| x.launches);
            if m.tasks.get(&id).is_none_or(|x| is_terminal(x.state)) {
                m.tasks.insert(
                    id.clone(),
                    SimTask {
                        agent_id: t.agent_id.value.clone(),
                        used: Amounts::default(),
                        ports: Vec::new(),
                        state: mesos::TaskState::TaskError,
                        plan: Plan::Forever,
                        grace: Duration::ZERO,
                        kill_at: None,
                        queue: VecDeque::from([st]),
                        last_sent: None,
                        launches,
                        script: String::new(),
                    },
                );
            } else {
                let mut e = ev(event::Type::Update);
                e.update = Some(event::Update { status: mesos::TaskStatus { uuid: None, ..st } });
                m.send(&e);
            }
            continue;
        }
        left.cpus -= need.cpus;
        left.mem -= need.mem;
        left.disk -= need.disk;
        left.gpus -= need.gpus;
        ports.retain(|p| !want_ports.contains(p));
        let script = script_of(&t);
        let grace = t
            .kill_policy
            .as_ref()
            .and_then(|p| p.grace_period.as_ref())
            .map_or(Duration::from_secs(3), |g| Duration::from_nanos(g.nanoseconds.max(0) as u64));
        let launches = m.tasks.get(&id).map_or(0, |x| x.launches) + 1;
        m.tasks.insert(
            id.clone(),
            SimTask {
                agent_id: aid.clone(),
                used: need,
                ports: want_ports,
                state: mesos::TaskState::TaskStaging,
                plan: plan(&script, now),
                grace,
                kill_at: None,
                queue: VecDeque::new(),
                last_sent: None,
                launches,
                script,
            },
        );
        m.transition(&id, mesos::TaskState::TaskStarting, "", None);
        m.transition(&id, mesos::TaskState::TaskRunning, "", None);
    }
}

//! The scheduler calls: SUBSCRIBE (a new stream, failover of the old
//! one), and every other call checked against the framework and its
//! stream, then carried out on the master's state (ACCEPT in `offers`).

use std::convert::Infallible;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures::StreamExt;
use paceline_proto::mesos::v1 as mesos;
use paceline_proto::mesos::v1::scheduler::{Call, call, event};
use tokio::sync::mpsc;
use tracing::info;

use crate::http::{JSON, PROTOBUF, text};
use crate::offers::accept;
use crate::state::{Framework, Master, Shared, ev};
use crate::tasks::is_terminal;

pub(crate) fn subscribe(shared: &Shared, c: &Call, json: bool) -> Response {
    let Some(sub) = &c.subscribe else {
        return text(StatusCode::BAD_REQUEST, "Expecting 'subscribe' to be present");
    };
    let info = sub.framework_info.clone();
    if let (Some(a), Some(b)) = (&c.framework_id, &info.id)
        && a.value != b.value
    {
        return text(StatusCode::BAD_REQUEST, "'framework_id' differs from 'subscribe.framework_info.id'");
    }
    if info.name.is_empty() {
        return text(StatusCode::BAD_REQUEST, "'framework_info.name' must be set");
    }
    let (tx, rx) = mpsc::unbounded_channel::<Bytes>();
    let mut m = shared.lock();
    let wanted = info.id.as_ref().map(|i| i.value.clone());
    let fid = match (&m.framework, wanted) {
        (Some(f), Some(w)) if f.id == w => {
            // Failover: the old stream hears it and closes.
            if f.tx.is_some() {
                let mut e = ev(event::Type::Error);
                e.error = Some(event::Error { message: "Framework failed over".into() });
                m.send(&e);
            }
            w
        }
        (_, Some(w)) => w,
        (_, None) => m.id("framework"),
    };
    // Offers of the old stream are rescinded (offered again below).
    let agents: Vec<String> = m.agents.keys().cloned().collect();
    for aid in agents {
        if let Some(a) = m.agents.get_mut(&aid)
            && let Some(o) = a.offer.take()
        {
            m.offers.remove(&o);
        }
    }
    let stream_id = format!("stream-{}-{}", m.subscriptions + 1, fastrand::u32(..));
    let heartbeat = shared.config.heartbeat_interval;
    m.framework = Some(Framework {
        id: fid.clone(),
        info: mesos::FrameworkInfo { id: Some(mesos::FrameworkId { value: fid.clone() }), ..info },
        stream_id: stream_id.clone(),
        tx: Some(tx),
        json,
        suppressed: sub.suppressed_roles.iter().any(|_| true),
        last_heartbeat: Instant::now(),
    });
    m.subscriptions += 1;
    // Updates in flight go again on the new stream.
    for t in m.tasks.values_mut() {
        t.last_sent = None;
    }
    let mut e = ev(event::Type::Subscribed);
    e.subscribed = Some(event::Subscribed {
        framework_id: mesos::FrameworkId { value: fid.clone() },
        heartbeat_interval_seconds: Some(heartbeat.as_secs_f64()),
        master_info: Some(mesos::MasterInfo {
            id: "fake-master".into(),
            ip: 0x0100_007f,
            port: u32::from(shared.addr.port()),
            hostname: Some("127.0.0.1".into()),
            version: Some("1.11.0".into()),
            ..Default::default()
        }),
    });
    m.send(&e);
    m.send(&ev(event::Type::Heartbeat));
    info!(framework_id = fid, stream_id, "fake master: framework subscribed");
    let content = if json { JSON } else { PROTOBUF };
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, content)
        .header("Mesos-Stream-Id", stream_id)
        .body(Body::from_stream(tokio_stream::wrappers::UnboundedReceiverStream::new(rx).map(Ok::<_, Infallible>)))
        .unwrap_or_else(|_| text(StatusCode::INTERNAL_SERVER_ERROR, "stream"))
}

pub(crate) fn other_call(shared: &Shared, c: &Call, kind: call::Type, stream: Option<&str>) -> Response {
    let mut m = shared.lock();
    let Some(fid) = c.framework_id.as_ref().map(|f| f.value.clone()) else {
        return text(StatusCode::BAD_REQUEST, "Expecting 'framework_id' to be present");
    };
    let Some(f) = &m.framework else {
        return text(StatusCode::FORBIDDEN, "Framework is not subscribed");
    };
    if f.id != fid {
        return text(StatusCode::BAD_REQUEST, "Framework cannot be found");
    }
    if f.tx.is_none() {
        return text(StatusCode::FORBIDDEN, "Framework is not subscribed");
    }
    match stream {
        None => {
            return text(
                StatusCode::BAD_REQUEST,
                "All non-subscribe calls should include the 'Mesos-Stream-Id' header",
            );
        }
        Some(s) if s != f.stream_id => {
            return text(
                StatusCode::BAD_REQUEST,
                format!(
                    "The stream ID '{s}' included in this request didn't match the stream ID currently associated with framework ID {fid}"
                ),
            );
        }
        Some(_) => {}
    }
    let now = Instant::now();
    let refuse = |fl: &Option<mesos::Filters>| {
        Duration::from_secs_f64(fl.as_ref().and_then(|f| f.refuse_seconds).unwrap_or(5.0).clamp(0.0, 1e9))
    };
    match kind {
        call::Type::Accept => {
            let Some(a) = &c.accept else { return text(StatusCode::BAD_REQUEST, "Expecting 'accept' to be present") };
            accept(&mut m, a, now, refuse(&a.filters), shared.config.partition_aware_default);
        }
        call::Type::Decline => {
            let Some(d) = &c.decline else { return text(StatusCode::BAD_REQUEST, "Expecting 'decline' to be present") };
            let until = now + refuse(&d.filters);
            for o in &d.offer_ids {
                if let Some((aid, _)) = m.offers.remove(&o.value)
                    && let Some(a) = m.agents.get_mut(&aid)
                {
                    a.offer = None;
                    a.filtered_until = Some(until);
                }
            }
        }
        call::Type::Revive => {
            for a in m.agents.values_mut() {
                a.filtered_until = None;
            }
            if let Some(f) = m.framework.as_mut() {
                f.suppressed = false;
            }
        }
        call::Type::Suppress => {
            if let Some(f) = m.framework.as_mut() {
                f.suppressed = true;
            }
        }
        call::Type::Kill => {
            let Some(k) = &c.kill else { return text(StatusCode::BAD_REQUEST, "Expecting 'kill' to be present") };
            let id = k.task_id.value.clone();
            match m.tasks.get_mut(&id) {
                Some(t) if !is_terminal(t.state) => {
                    let grace = k
                        .kill_policy
                        .as_ref()
                        .and_then(|p| p.grace_period.as_ref())
                        .map_or(t.grace, |g| Duration::from_nanos(g.nanoseconds.max(0) as u64));
                    if t.kill_at.is_none() {
                        t.kill_at = Some(now + grace);
                        m.transition(&id, mesos::TaskState::TaskKilling, "", None);
                    }
                }
                Some(_) => {}
                None => {
                    let pa = m.partition_aware(shared.config.partition_aware_default);
                    let state = if pa { mesos::TaskState::TaskUnknown } else { mesos::TaskState::TaskLost };
                    let st = m.status(
                        &id,
                        state,
                        "Attempted to kill an unknown task",
                        Some(mesos::task_status::Reason::Reconciliation),
                        false,
                    );
                    let mut e = ev(event::Type::Update);
                    e.update = Some(event::Update { status: st });
                    m.send(&e);
                }
            }
        }
        call::Type::Acknowledge => {
            let Some(a) = &c.acknowledge else {
                return text(StatusCode::BAD_REQUEST, "Expecting 'acknowledge' to be present");
            };
            let mut next = None;
            if let Some(t) = m.tasks.get_mut(&a.task_id.value)
                && t.queue.front().and_then(|h| h.uuid.as_ref()) == Some(&a.uuid)
            {
                t.queue.pop_front();
                t.last_sent = None;
                next = t.queue.front().map(|_| ());
            }
            if next.is_some() {
                m.pump(now, shared.config.status_retry);
            }
        }
        call::Type::Reconcile => {
            let Some(r) = &c.reconcile else {
                return text(StatusCode::BAD_REQUEST, "Expecting 'reconcile' to be present");
            };
            reconcile(&mut m, r, shared.config.partition_aware_default);
        }
        call::Type::AcceptInverseOffers | call::Type::DeclineInverseOffers => {
            let (ids, accepted) = match (&c.accept_inverse_offers, &c.decline_inverse_offers) {
                (Some(a), _) if kind == call::Type::AcceptInverseOffers => (a.inverse_offer_ids.clone(), true),
                (_, Some(d)) => (d.inverse_offer_ids.clone(), false),
                _ => return text(StatusCode::BAD_REQUEST, "Expecting the inverse offer ids"),
            };
            for id in ids {
                if m.inverse_offers.remove(&id.value).is_some() {
                    m.inverse_responses.push((id.value, accepted));
                }
            }
        }
        call::Type::Teardown => {
            let ids: Vec<String> = m.tasks.keys().cloned().collect();
            for id in ids {
                if m.tasks.get(&id).is_some_and(|t| !is_terminal(t.state)) {
                    m.transition(
                        &id,
                        mesos::TaskState::TaskKilled,
                        "Framework removed",
                        Some(mesos::task_status::Reason::FrameworkRemoved),
                    );
                }
            }
            m.framework = None;
        }
        _ => {
            return text(
                StatusCode::BAD_REQUEST,
                format!("Call {} is not supported by the fake master", kind.as_str_name()),
            );
        }
    }
    StatusCode::ACCEPTED.into_response()
}

fn reconcile(m: &mut Master, r: &call::Reconcile, pa_default: bool) {
    let pa = m.partition_aware(pa_default);
    let answers: Vec<(String, mesos::TaskState, Option<String>)> = if r.tasks.is_empty() {
        m.tasks
            .iter()
            .filter(|(_, t)| !is_terminal(t.state))
            .map(|(id, t)| (id.clone(), t.state, Some(t.agent_id.clone())))
            .collect()
    } else {
        r.tasks
            .iter()
            .map(|q| {
                let id = q.task_id.value.clone();
                match m.tasks.get(&id) {
                    Some(t) if !m.agents.get(&t.agent_id).is_some_and(|a| a.alive) && !is_terminal(t.state) => (
                        id,
                        if pa { mesos::TaskState::TaskUnreachable } else { mesos::TaskState::TaskLost },
                        Some(t.agent_id.clone()),
                    ),
                    Some(t) => (id, t.state, Some(t.agent_id.clone())),
                    None => (
                        id,
                        if pa { mesos::TaskState::TaskUnknown } else { mesos::TaskState::TaskLost },
                        q.agent_id.as_ref().map(|a| a.value.clone()),
                    ),
                }
            })
            .collect()
    };
    for (id, state, agent) in answers {
        let st = m.status(&id, state, "Reconciliation", Some(mesos::task_status::Reason::Reconciliation), false);
        let st = mesos::TaskStatus { agent_id: agent.map(|value| mesos::AgentId { value }), ..st };
        let mut e = ev(event::Type::Update);
        e.update = Some(event::Update { status: st });
        m.send(&e);
    }
}

//! The fake master's HTTP rules, with a bare HTTP client: status codes,
//! stream ids, SUBSCRIBED then HEARTBEAT on the stream, failover.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use paceline_mesos_fake::{API_PATH, AgentSpec, FakeConfig, FakeMaster};
use paceline_proto::mesos::v1 as mesos;
use paceline_proto::mesos::v1::scheduler::{Call, Event, call, event};
use prost::Message;

type C = Client<HttpConnector, Full<Bytes>>;

fn client() -> C {
    Client::builder(TokioExecutor::new()).build_http()
}

async fn post(
    c: &C,
    url: &str,
    method: &str,
    ctype: &str,
    stream: Option<&str>,
    body: Vec<u8>,
) -> hyper::Response<Incoming> {
    let mut b = hyper::Request::builder().method(method).uri(format!("{url}{API_PATH}")).header("Content-Type", ctype);
    if let Some(s) = stream {
        b = b.header("Mesos-Stream-Id", s);
    }
    c.request(b.body(Full::new(Bytes::from(body))).expect("request")).await.expect("response")
}

fn subscribe(id: Option<&str>) -> Call {
    Call {
        framework_id: id.map(|v| mesos::FrameworkId { value: v.into() }),
        r#type: Some(call::Type::Subscribe as i32),
        subscribe: Some(call::Subscribe {
            framework_info: mesos::FrameworkInfo {
                user: "u".into(),
                name: "t".into(),
                id: id.map(|v| mesos::FrameworkId { value: v.into() }),
                ..Default::default()
            },
            suppressed_roles: vec![],
        }),
        ..Default::default()
    }
}

/// Reads whole RecordIO records off a stream body.
struct Records {
    body: Incoming,
    buf: Vec<u8>,
}

impl Records {
    async fn next(&mut self) -> Option<Event> {
        loop {
            if let Some(nl) = self.buf.iter().position(|&b| b == b'\n') {
                let n: usize = std::str::from_utf8(&self.buf[..nl]).ok()?.parse().ok()?;
                if self.buf.len() > nl + n {
                    let rec: Vec<u8> = self.buf.drain(..nl + 1 + n).skip(nl + 1).collect();
                    return Event::decode(&rec[..]).ok();
                }
            }
            let frame = tokio::time::timeout(Duration::from_secs(5), self.body.frame()).await.ok()??.ok()?;
            if let Ok(d) = frame.into_data() {
                self.buf.extend_from_slice(&d);
            }
        }
    }
}

fn kind(e: &Event) -> event::Type {
    e.r#type.and_then(|t| event::Type::try_from(t).ok()).unwrap_or(event::Type::Unknown)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_codes_and_stream_rules() {
    let fake =
        FakeMaster::start(FakeConfig { heartbeat_interval: Duration::from_millis(100), ..FakeConfig::default() })
            .await
            .expect("fake");
    fake.add_agent(AgentSpec::new("h1", 2.0, 1024.0));
    let c = client();
    let url = fake.url();
    let pb = "application/x-protobuf";
    let status = |r: &hyper::Response<Incoming>| r.status().as_u16();

    assert_eq!(status(&post(&c, &url, "GET", pb, None, vec![]).await), 405);
    assert_eq!(status(&post(&c, &url, "POST", "text/plain", None, vec![]).await), 415);
    assert_eq!(status(&post(&c, &url, "POST", pb, None, b"\xff\xff garbage".to_vec()).await), 400);
    assert_eq!(
        status(&post(&c, &url, "POST", pb, Some("x"), subscribe(None).encode_to_vec()).await),
        400,
        "stream id on SUBSCRIBE"
    );
    let mut revive = Call { r#type: Some(call::Type::Revive as i32), ..Default::default() };
    revive.framework_id = Some(mesos::FrameworkId { value: "nobody".into() });
    assert_eq!(status(&post(&c, &url, "POST", pb, Some("x"), revive.encode_to_vec()).await), 403, "not subscribed");

    let resp = post(&c, &url, "POST", pb, None, subscribe(None).encode_to_vec()).await;
    assert_eq!(status(&resp), 200);
    let stream = resp.headers().get("Mesos-Stream-Id").and_then(|v| v.to_str().ok()).expect("stream id").to_string();
    let mut events = Records { body: resp.into_body(), buf: Vec::new() };
    let first = events.next().await.expect("first event");
    assert_eq!(kind(&first), event::Type::Subscribed);
    let fid = first.subscribed.expect("subscribed").framework_id.value;
    assert_eq!(kind(&events.next().await.expect("second")), event::Type::Heartbeat, "an immediate heartbeat");

    revive.framework_id = Some(mesos::FrameworkId { value: fid.clone() });
    assert_eq!(status(&post(&c, &url, "POST", pb, None, revive.encode_to_vec()).await), 400, "missing stream id");
    assert_eq!(
        status(&post(&c, &url, "POST", pb, Some("wrong"), revive.encode_to_vec()).await),
        400,
        "wrong stream id"
    );
    assert_eq!(status(&post(&c, &url, "POST", pb, Some(&stream), revive.encode_to_vec()).await), 202);
    let json = serde_json::to_vec(&revive).expect("json");
    assert_eq!(status(&post(&c, &url, "POST", "application/json", Some(&stream), json).await), 202);

    // Offers and periodic heartbeats follow.
    let mut saw = (false, 0);
    while saw.1 < 2 || !saw.0 {
        let e = events.next().await.expect("event");
        match kind(&e) {
            event::Type::Offers => saw.0 = true,
            event::Type::Heartbeat => saw.1 += 1,
            _ => {}
        }
    }

    // 503 while unavailable.
    fake.set_unavailable(true);
    assert_eq!(status(&post(&c, &url, "POST", pb, Some(&stream), revive.encode_to_vec()).await), 503);
    fake.set_unavailable(false);

    // Failover: ERROR on the old stream, a new stream id.
    let resp = post(&c, &url, "POST", pb, None, subscribe(Some(&fid)).encode_to_vec()).await;
    assert_eq!(status(&resp), 200);
    let stream2 = resp.headers().get("Mesos-Stream-Id").and_then(|v| v.to_str().ok()).expect("id").to_string();
    assert_ne!(stream2, stream);
    let mut last = None;
    while let Some(e) = events.next().await {
        last = Some(e);
    }
    let last = last.expect("an event before the end");
    assert_eq!(kind(&last), event::Type::Error);
    assert_eq!(last.error.map(|e| e.message).as_deref(), Some("Framework failed over"));
    assert_eq!(
        status(&post(&c, &url, "POST", pb, Some(&stream), revive.encode_to_vec()).await),
        400,
        "the old stream id"
    );
    let mut events2 = Records { body: resp.into_body(), buf: Vec::new() };
    assert_eq!(kind(&events2.next().await.expect("subscribed")), event::Type::Subscribed);

    // Not the leader: 307 to the leader.
    let other = FakeMaster::start(FakeConfig::default()).await.expect("fake");
    other.redirect_to(Some(url.clone()));
    let r = post(&c, &other.url(), "POST", pb, None, subscribe(None).encode_to_vec()).await;
    assert_eq!(status(&r), 307);
    let loc = r.headers().get("Location").and_then(|v| v.to_str().ok()).expect("location");
    assert_eq!(loc, format!("//{}{API_PATH}", url.trim_start_matches("http://")));
}

#[test]
fn scripts_and_recordio() {
    assert_eq!(&paceline_mesos_fake::recordio(b"abc")[..], b"3\nabc");
}

async fn next_update(events: &mut Records) -> mesos::TaskStatus {
    loop {
        let e = events.next().await.expect("event");
        if kind(&e) == event::Type::Update {
            return e.update.expect("update").status;
        }
    }
}

fn launch(offers: Vec<mesos::OfferId>, task: &str, agent: &str, cpus: f64, script: &str) -> Call {
    let res = |n: &str, v: f64| mesos::Resource {
        name: n.into(),
        r#type: mesos::value::Type::Scalar as i32,
        scalar: Some(mesos::value::Scalar { value: v }),
        ..Default::default()
    };
    Call {
        r#type: Some(call::Type::Accept as i32),
        accept: Some(call::Accept {
            offer_ids: offers,
            operations: vec![mesos::offer::Operation {
                r#type: Some(mesos::offer::operation::Type::Launch as i32),
                launch: Some(mesos::offer::operation::Launch {
                    task_infos: vec![mesos::TaskInfo {
                        name: task.into(),
                        task_id: mesos::TaskId { value: task.into() },
                        agent_id: mesos::AgentId { value: agent.into() },
                        resources: vec![res("cpus", cpus), res("mem", 64.0)],
                        command: Some(mesos::CommandInfo {
                            shell: Some(true),
                            value: Some(script.into()),
                            ..Default::default()
                        }),
                        ..Default::default()
                    }],
                }),
            }],
            filters: Some(mesos::Filters { refuse_seconds: Some(0.0) }),
        }),
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accept_is_validated_and_updates_wait_for_acknowledgement() {
    let fake = FakeMaster::start(FakeConfig { status_retry: Duration::from_millis(100), ..FakeConfig::default() })
        .await
        .expect("fake");
    let agent = fake.add_agent(AgentSpec::new("h1", 2.0, 1024.0));
    let c = client();
    let url = fake.url();
    let pb = "application/x-protobuf";
    let mut sub = subscribe(None);
    sub.subscribe.as_mut().expect("sub").framework_info.capabilities = vec![mesos::framework_info::Capability {
        r#type: Some(mesos::framework_info::capability::Type::PartitionAware as i32),
    }];
    let resp = post(&c, &url, "POST", pb, None, sub.encode_to_vec()).await;
    let stream = resp.headers().get("Mesos-Stream-Id").and_then(|v| v.to_str().ok()).expect("id").to_string();
    let mut events = Records { body: resp.into_body(), buf: Vec::new() };
    let fid = events.next().await.and_then(|e| e.subscribed).expect("subscribed").framework_id;
    let offer = loop {
        let e = events.next().await.expect("event");
        if let Some(o) = e.offers {
            break o.offers[0].clone();
        }
    };
    let send = |mut call: Call| {
        call.framework_id = Some(fid.clone());
        let (c, url, stream) = (c.clone(), url.clone(), stream.clone());
        async move { post(&c, &url, "POST", pb, Some(&stream), call.encode_to_vec()).await.status().as_u16() }
    };
    // An offer that does not exist: TASK_DROPPED, REASON_INVALID_OFFERS (still 202).
    assert_eq!(send(launch(vec![mesos::OfferId { value: "nope".into() }], "t0", &agent, 1.0, "sleep 1")).await, 202);
    let st = next_update(&mut events).await;
    assert_eq!((st.task_id.value.as_str(), st.state()), ("t0", mesos::TaskState::TaskDropped));
    assert_eq!(st.reason(), mesos::task_status::Reason::InvalidOffers);
    // More cpus than offered: TASK_ERROR, REASON_TASK_INVALID.
    assert_eq!(send(launch(vec![offer.id.clone()], "t1", &agent, 3.0, "sleep 1")).await, 202);
    let st = next_update(&mut events).await;
    assert_eq!((st.task_id.value.as_str(), st.state()), ("t1", mesos::TaskState::TaskError));
    let ack = |st: &mesos::TaskStatus| {
        let mut a = Call { r#type: Some(call::Type::Acknowledge as i32), ..Default::default() };
        a.acknowledge = Some(call::Acknowledge {
            agent_id: mesos::AgentId { value: agent.clone() },
            task_id: st.task_id.clone(),
            uuid: st.uuid.clone().unwrap_or_default(),
        });
        send(a)
    };
    assert_eq!(ack(&st).await, 202);
    // A good launch on the next offer: STARTING is re-sent until acknowledged, then RUNNING, FINISHED.
    let offer = loop {
        let e = events.next().await.expect("event");
        if let Some(o) = e.offers {
            break o.offers[0].clone();
        }
    };
    assert_eq!(send(launch(vec![offer.id.clone()], "t2", &agent, 1.0, "sleep 0.2; exit 0")).await, 202);
    let first = next_update(&mut events).await;
    assert_eq!(first.state(), mesos::TaskState::TaskStarting);
    let again = next_update(&mut events).await;
    assert_eq!((again.state(), &again.uuid), (mesos::TaskState::TaskStarting, &first.uuid), "re-sent, same uuid");
    assert_eq!(ack(&first).await, 202);
    let mut states = Vec::new();
    while states.last() != Some(&mesos::TaskState::TaskFinished) {
        let st = next_update(&mut events).await;
        if st.task_id.value == "t2" && states.last() != Some(&st.state()) {
            states.push(st.state());
            assert_eq!(ack(&st).await, 202);
        }
    }
    assert_eq!(states, vec![mesos::TaskState::TaskRunning, mesos::TaskState::TaskFinished]);
    assert_eq!(fake.task_script("t2").as_deref(), Some("sleep 0.2; exit 0"));
    // Explicit reconciliation of an unknown task: TASK_UNKNOWN, no uuid.
    let mut rec = Call { r#type: Some(call::Type::Reconcile as i32), ..Default::default() };
    rec.reconcile = Some(call::Reconcile {
        tasks: vec![call::reconcile::Task { task_id: mesos::TaskId { value: "ghost".into() }, agent_id: None }],
    });
    assert_eq!(send(rec).await, 202);
    let st = loop {
        let st = next_update(&mut events).await;
        if st.task_id.value == "ghost" {
            break st;
        }
    };
    assert_eq!((st.state(), st.uuid.is_none()), (mesos::TaskState::TaskUnknown, true));
}

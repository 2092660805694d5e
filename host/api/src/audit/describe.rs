//! What a call was about, from its first request message: the target, the
//! job, and a short summary. Only the fields named here are read, so a
//! spec's command, environment or secrets never reach the log.

use paceline_proto::v1 as pb;
use prost::Message;

/// The readable part of a record.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Described {
    /// A job id, `job/instance`, pool path, hostname, `slot name@version`, slot.
    pub target: String,
    /// The job, when the call is about one.
    pub job_id: String,
    /// A few fields of the request.
    pub summary: String,
}

/// Most instances listed in a summary.
const LISTED_INSTANCES: usize = 16;

/// Describes a call to `path` whose body began with `body`: a gRPC frame
/// for `/paceline.v1.*`, JSON for the web UI's routes. An unreadable body
/// (compressed, cut at the peek limit, malformed) describes nothing.
pub fn describe(path: &str, body: &[u8]) -> Described {
    if path.starts_with("/ui/api/") {
        // A web route's path may carry its query (the upload's slot is there).
        let (route, query) = path.split_once('?').unwrap_or((path, ""));
        return describe_web(route, query, body);
    }
    let Some(message) = first_message(body) else {
        return Described::default();
    };
    let method = path.rsplit('/').next().unwrap_or_default();
    describe_grpc(method, message).unwrap_or_default()
}

/// The first message of a gRPC body, when it is whole and uncompressed.
fn first_message(body: &[u8]) -> Option<&[u8]> {
    let (&flag, rest) = body.split_first()?;
    if flag != 0 || rest.len() < 4 {
        return None;
    }
    let len = u32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
    rest.get(4..4 + len)
}

fn job(id: String, summary: String) -> Described {
    Described { target: id.clone(), job_id: id, summary }
}

fn instances(list: &[u32]) -> String {
    if list.is_empty() {
        return String::new();
    }
    let shown: Vec<String> = list.iter().take(LISTED_INSTANCES).map(u32::to_string).collect();
    let more = if list.len() > LISTED_INSTANCES { format!(",… ({} in all)", list.len()) } else { String::new() };
    format!("instances=[{}{more}]", shown.join(","))
}

fn describe_grpc(method: &str, m: &[u8]) -> Option<Described> {
    Some(match method {
        "CreateJob" => {
            let spec = pb::CreateJobRequest::decode(m).ok()?.spec.unwrap_or_default();
            Described {
                target: String::new(),
                job_id: String::new(),
                summary: format!("name={} pool={} instances={}", spec.name, spec.pool, spec.instance_count),
            }
        }
        "UpdateJob" => {
            let r = pb::UpdateJobRequest::decode(m).ok()?;
            let count = r.spec.map_or(0, |s| s.instance_count);
            job(r.id, format!("instances={count}{}", if r.dry_run { " dry_run" } else { "" }))
        }
        "KillJob" => {
            let r = pb::KillJobRequest::decode(m).ok()?;
            job(r.id, instances(&r.instances))
        }
        "RestartJob" => {
            let r = pb::RestartJobRequest::decode(m).ok()?;
            job(r.id, instances(&r.instances))
        }
        "AddInstances" => {
            let r = pb::AddInstancesRequest::decode(m).ok()?;
            job(r.id, format!("count={}", r.count))
        }
        "RemoveInstances" => {
            let r = pb::RemoveInstancesRequest::decode(m).ok()?;
            job(r.id, instances(&r.instances))
        }
        "DeleteJob" => job(pb::DeleteJobRequest::decode(m).ok()?.id, String::new()),
        "PauseUpdate" | "ResumeUpdate" | "AbortUpdate" => {
            job(pb::UpdateControlRequest::decode(m).ok()?.id, String::new())
        }
        "KillTask" | "RestartTask" => {
            let r = pb::TaskRef::decode(m).ok()?;
            Described { target: format!("{}/{}", r.job_id, r.instance), job_id: r.job_id, summary: String::new() }
        }
        "DrainHost" => {
            let r = pb::DrainHostRequest::decode(m).ok()?;
            Described {
                target: r.hostname,
                summary: if r.then_down { "then_down".into() } else { String::new() },
                ..Default::default()
            }
        }
        "DownHost" | "UpHost" => Described { target: pb::HostRef::decode(m).ok()?.hostname, ..Default::default() },
        "DeployPlugin" => {
            let r = pb::DeployPluginRequest::decode(m).ok()?;
            let Some(pb::deploy_plugin_request::Part::Meta(meta)) = r.part else {
                return None;
            };
            Described {
                target: format!("{} {}@{}", meta.slot, meta.name, meta.version),
                summary: format!(
                    "size={} bytes{}",
                    meta.size,
                    if meta.skip_self_test { " skip_self_test" } else { "" }
                ),
                ..Default::default()
            }
        }
        "ActivatePlugin" => {
            let r = pb::PluginRef::decode(m).ok()?;
            Described { target: format!("{} {}", r.slot, r.id), ..Default::default() }
        }
        "RollbackPlugin" => Described { target: pb::SlotRef::decode(m).ok()?.slot, ..Default::default() },
        "ShadowPlugin" => {
            let r = pb::ShadowPluginRequest::decode(m).ok()?;
            let p = r.plugin.unwrap_or_default();
            Described {
                target: format!("{} {}", p.slot, p.id),
                summary: if r.stop { "stop".into() } else { String::new() },
                ..Default::default()
            }
        }
        "CreatePool" => Described { target: pb::CreatePoolRequest::decode(m).ok()?.path, ..Default::default() },
        "UpdatePool" => Described { target: pb::UpdatePoolRequest::decode(m).ok()?.path, ..Default::default() },
        "DeletePool" => Described { target: pb::DeletePoolRequest::decode(m).ok()?.path, ..Default::default() },
        // The pool and name only: the value is never read here.
        "PutSecret" => {
            let r = pb::PutSecretRequest::decode(m).ok()?;
            Described { target: format!("{}/{}", r.pool, r.name), ..Default::default() }
        }
        "DeleteSecret" => {
            let r = pb::DeleteSecretRequest::decode(m).ok()?;
            Described { target: format!("{}/{}", r.pool, r.name), ..Default::default() }
        }
        _ => return None,
    })
}

/// The web UI's changing routes send `{"slot": …}` (the only one today is
/// the plugin rollback).
fn describe_web(path: &str, query: &str, body: &[u8]) -> Described {
    let route: Vec<&str> = path.trim_start_matches("/ui/api/").split('/').collect();
    let action = |a: &str| format!("{a} from the web UI");
    match route.as_slice() {
        // The job's id is in the path; a created job's is noted by the handler.
        ["jobs", id, a] | ["tasks", id, _, a] => {
            Described { target: id.to_string(), job_id: id.to_string(), summary: action(a) }
        }
        ["hosts", name, a] => Described { target: name.to_string(), summary: action(a), ..Default::default() },
        // The slot and version are in the query (the record's method omits
        // it); the body is the component, never read here.
        ["plugins", "deploy"] => {
            let uri = format!("/?{query}").parse::<http::Uri>().ok();
            let q = uri
                .and_then(|u| axum::extract::Query::<std::collections::HashMap<String, String>>::try_from_uri(&u).ok())
                .map(|q| q.0)
                .unwrap_or_default();
            let field = |k: &str| q.get(k).map(String::as_str).unwrap_or_default();
            let target = match (field("slot"), field("name"), field("version")) {
                (slot, "", _) | (slot, _, "") => slot.to_string(),
                (slot, name, version) => format!("{slot} {name}@{version}"),
            };
            Described { target, summary: action("deploy"), ..Default::default() }
        }
        _ => {
            let v = serde_json::from_slice::<serde_json::Value>(body).unwrap_or_default();
            let field = |k: &str| v.get(k).and_then(|s| s.as_str()).unwrap_or_default().to_string();
            let (slot, id) = (field("slot"), field("id"));
            let target = if id.is_empty() { slot } else { format!("{slot} {id}") };
            Described { target, summary: "from the web UI".into(), ..Default::default() }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(m: &impl Message) -> Vec<u8> {
        let body = m.encode_to_vec();
        let mut out = vec![0u8];
        out.extend_from_slice(&(body.len() as u32).to_be_bytes());
        out.extend_from_slice(&body);
        out
    }

    #[test]
    fn names_the_target_and_never_the_spec_body() {
        let kill = pb::KillJobRequest { id: "web-1".into(), instances: vec![0, 2] };
        assert_eq!(
            describe("/paceline.v1.JobService/KillJob", &frame(&kill)),
            Described { target: "web-1".into(), job_id: "web-1".into(), summary: "instances=[0,2]".into() }
        );
        let task = pb::TaskRef { job_id: "web-1".into(), instance: 3 };
        assert_eq!(describe("/paceline.v1.TaskService/KillTask", &frame(&task)).target, "web-1/3");
        let spec = pb::JobSpec {
            name: "web".into(),
            pool: "/a".into(),
            instance_count: 2,
            default_task: Some(pb::TaskSpec {
                command: "echo SECRET".into(),
                env: [("TOKEN".to_string(), "hunter2".to_string())].into(),
                ..Default::default()
            }),
            ..Default::default()
        };
        let d = describe("/paceline.v1.JobService/CreateJob", &frame(&pb::CreateJobRequest { spec: Some(spec) }));
        assert_eq!(d.summary, "name=web pool=/a instances=2");
        assert!(!format!("{d:?}").contains("hunter2") && !format!("{d:?}").contains("SECRET"));
        let meta = pb::deploy_plugin_request::Meta {
            slot: "placement/batch".into(),
            name: "p".into(),
            version: "2".into(),
            size: 10,
            ..Default::default()
        };
        let deploy = pb::DeployPluginRequest { part: Some(pb::deploy_plugin_request::Part::Meta(meta)) };
        assert_eq!(describe("/paceline.v1.PluginService/DeployPlugin", &frame(&deploy)).target, "placement/batch p@2");
    }

    #[test]
    fn unreadable_bodies_describe_nothing() {
        let kill = frame(&pb::KillJobRequest { id: "web-1".into(), instances: vec![] });
        assert_eq!(describe("/paceline.v1.JobService/KillJob", &kill[..kill.len() - 1]), Described::default());
        let mut compressed = kill.clone();
        compressed[0] = 1;
        assert_eq!(describe("/paceline.v1.JobService/KillJob", &compressed), Described::default());
        assert_eq!(describe("/paceline.v1.JobService/KillJob", b"\0\0\0\0\x03\xff\xff\xff"), Described::default());
        assert_eq!(describe("/ui/api/plugins/rollback", br#"{"slot":"placement/batch"}"#).target, "placement/batch");
        assert_eq!(describe("/ui/api/plugins/rollback", b"not json").target, "");
        assert_eq!(
            describe("/ui/api/plugins/activate", br#"{"slot":"placement/batch","id":"spread@9"}"#).target,
            "placement/batch spread@9"
        );
        let kill = describe("/ui/api/jobs/web-1/kill", b"");
        assert_eq!((kill.job_id.as_str(), kill.summary.as_str()), ("web-1", "kill from the web UI"));
        assert_eq!(describe("/ui/api/tasks/web-1/3/restart", b"").job_id, "web-1");
        assert_eq!(describe("/ui/api/hosts/h1/drain", b"").target, "h1");
        // An upload names its slot and version (from the query; the body is the component).
        let upload = describe("/ui/api/plugins/deploy?slot=placement%2Fbatch&name=spread&version=10", b"\0asm");
        assert_eq!(
            (upload.target.as_str(), upload.summary.as_str()),
            ("placement/batch spread@10", "deploy from the web UI")
        );
        assert_eq!(describe("/ui/api/plugins/deploy?slot=preemption", b"").target, "preemption");
        assert_eq!(describe("/ui/api/plugins/deploy?%zz", b"").target, "");
    }
}

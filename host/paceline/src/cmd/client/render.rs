//! Wire messages as `serde_json::Value`, for `-o json|yaml`.
//!
//! prost types derive no serde, so each message is written out by hand.
//! Field names are the proto's; enums are their short names (`RUNNING`, not
//! `JOB_STATE_RUNNING`); a job spec is rendered through the model
//! (`JobConfig`), so `job get -o yaml` shows the spec in the same form a job
//! file is written in.

use paceline_api::convert;
use paceline_proto::v1 as pb;
use serde_json::{Value, json};

/// An enum value's short name: prost's name without `prefix`, or the number
/// when this build does not know it.
pub fn enum_name(name: Option<&'static str>, prefix: &str, raw: i32) -> String {
    match name {
        Some(n) => n.strip_prefix(prefix).unwrap_or(n).to_owned(),
        None => raw.to_string(),
    }
}

/// A job state's short name.
pub fn job_state(s: i32) -> String {
    enum_name(pb::JobState::try_from(s).ok().map(|e| e.as_str_name()), "JOB_STATE_", s)
}

/// A task state's short name.
pub fn task_state(s: i32) -> String {
    enum_name(pb::TaskState::try_from(s).ok().map(|e| e.as_str_name()), "TASK_STATE_", s)
}

/// An update state's short name.
pub fn update_state(s: i32) -> String {
    enum_name(pb::UpdateState::try_from(s).ok().map(|e| e.as_str_name()), "UPDATE_STATE_", s)
}

/// A host state's short name.
pub fn host_state(s: i32) -> String {
    enum_name(pb::HostState::try_from(s).ok().map(|e| e.as_str_name()), "HOST_STATE_", s)
}

/// Resources (GPU in milli-GPUs, as job specs and pool files spell it).
pub fn resources(r: Option<&pb::Resources>) -> Value {
    let r = r.cloned().unwrap_or_default();
    let gpu_milli = if r.gpu_milli > 0 { r.gpu_milli } else { r.gpus.saturating_mul(1000) };
    json!({"cpu_millis": r.cpu_millis, "memory_mib": r.memory_mib, "disk_mib": r.disk_mib, "gpu_milli": gpu_milli, "ports": r.ports})
}

/// An amount: the number, or `"unlimited"` for 2^64-1.
pub fn amount(v: u64) -> Value {
    if v == paceline_model::pool::UNLIMITED { json!("unlimited") } else { json!(v) }
}

/// Per-kind amounts, named as task and host resources are (`cpu_millis`,
/// `memory_mib`, `disk_mib`, `gpu_milli`).
pub fn per_kind(p: Option<&pb::PerKind>) -> Value {
    let p = p.cloned().unwrap_or_default();
    let gpu_milli = if p.gpu_milli > 0 { p.gpu_milli } else { p.gpu.saturating_mul(1000) };
    json!({"cpu_millis": amount(p.cpu), "memory_mib": amount(p.memory), "disk_mib": amount(p.disk), "gpu_milli": amount(gpu_milli)})
}

/// A pool spec from the wire as the model reads it; a spec this build cannot
/// read is shown with every default rather than not at all.
pub fn model_pool_spec(s: &pb::PoolSpec) -> paceline_model::pool::PoolSpec {
    paceline_api::pools::pool_spec("spec", s).unwrap_or_default()
}

/// A job spec through the model; a spec the model refuses is shown with the
/// reason rather than dropped, since the user asked to see it.
pub fn job_spec(s: &pb::JobSpec) -> Value {
    // Watch events and job lists carry a job's summary, not its spec: name,
    // owner, pool, kind, labels and instance count, and no task (a job
    // cannot be created without one). Shown as those fields, not as a spec
    // the model refuses ("spec.default_task: must be set").
    if s.default_task.is_none() {
        return json!({
            "name": s.name,
            "owner": s.owner,
            "pool": s.pool,
            // As a job file writes it (`batch`), like the full spec.
            "kind": enum_name(pb::JobKind::try_from(s.kind).ok().map(|k| k.as_str_name()), "JOB_KIND_", s.kind)
                .to_ascii_lowercase(),
            "instance_count": s.instance_count,
            "labels": s.labels.iter().collect::<std::collections::BTreeMap<_, _>>(),
        });
    }
    match convert::job_config("spec", s) {
        Ok(c) => serde_json::to_value(&c).unwrap_or(Value::Null),
        Err(e) => json!({"name": s.name, "owner": s.owner, "pool": s.pool, "unreadable": e.to_string()}),
    }
}

/// A job's status.
pub fn job_status(s: &pb::JobStatus) -> Value {
    json!({
        "state": job_state(s.state),
        "config_version": s.config_version,
        "desired_config_version": s.desired_config_version,
        "latest_config_version": s.latest_config_version,
        "task_counts": s.task_counts.iter().collect::<std::collections::BTreeMap<_, _>>(),
        "created_at_ms": s.created_at_ms,
        "updated_at_ms": s.updated_at_ms,
        "completed_at_ms": s.completed_at_ms,
        "message": s.message,
        "pending_summary": s.pending_summary,
        "warnings": s.warnings,
    })
}

/// An update.
pub fn update(u: &pb::UpdateStatus) -> Value {
    json!({
        "id": u.id,
        "state": update_state(u.state),
        "from_config_version": u.from_config_version,
        "to_config_version": u.to_config_version,
        "done": u.done,
        "in_progress": u.in_progress,
        "failed": u.failed,
        "message": u.message,
    })
}

/// A job.
pub fn job(j: &pb::Job) -> Value {
    json!({
        "id": j.id,
        "spec": j.spec.as_ref().map(job_spec),
        "status": j.status.as_ref().map(job_status),
        "update": j.update.as_ref().map(update),
    })
}

/// A task.
pub fn task(t: &pb::Task) -> Value {
    json!({
        "job_id": t.job_id,
        "instance": t.instance,
        "state": task_state(t.state),
        "goal": t.goal,
        "run": t.run,
        "run_id": t.run_id,
        "config_version": t.config_version,
        "host": t.host,
        "ports": t.ports.iter().collect::<std::collections::BTreeMap<_, _>>(),
        "healthy": t.healthy,
        "reason": t.reason,
        "message": t.message,
        "failure_count": t.failure_count,
        "started_at_ms": t.started_at_ms,
        "completed_at_ms": t.completed_at_ms,
        "pending_reason": t.pending_reason,
        "pending_kind": t.pending_kind,
        "gpu": t.gpu.as_ref().map(|g| json!({ "devices": g.devices, "milli_each": g.milli_each })),
        "gpu_device_indices": t.gpu_device_indices,
        "reserved": t.reserved.as_ref().map(|r| json!({
            "cpu_millis": r.cpu_millis, "memory_mib": r.memory_mib, "disk_mib": r.disk_mib,
            "gpu_milli": r.gpu_milli,
        })),
        "usage": t.usage.as_ref().map(|u| json!({
            "cpu_millis": u.cpu_millis, "memory_mib": u.memory_mib, "sampled_at_ms": u.sampled_at_ms,
        })),
    })
}

/// A task's measured use beside what it reserved, for a person:
/// `used cpu 980 of 1000 millicores, memory 201 of 256 MiB`; what it
/// reserved alone when nothing was measured (sim, Mesos, the first
/// seconds of a run); `-` when its run holds nothing now.
pub fn task_usage(t: &pb::Task) -> String {
    let reserved = t.reserved.unwrap_or_default();
    match (&t.usage, &t.reserved) {
        (Some(u), _) => format!(
            "used cpu {} of {} millicores, memory {} of {} MiB",
            u.cpu_millis, reserved.cpu_millis, u.memory_mib, reserved.memory_mib
        ),
        (None, Some(r)) => {
            format!("reserved cpu {} millicores, memory {} MiB (use not measured)", r.cpu_millis, r.memory_mib)
        }
        (None, None) => "-".into(),
    }
}

/// The same for a table: `980/1000m 201/256Mi`; `-` when not measured.
pub fn task_usage_short(t: &pb::Task) -> String {
    let Some(u) = &t.usage else { return "-".into() };
    let r = t.reserved.unwrap_or_default();
    format!("{}/{}m {}/{}Mi", u.cpu_millis, r.cpu_millis, u.memory_mib, r.memory_mib)
}

/// A task's GPU grant as (amount in GPUs, `0.5` or `2`; devices, `0,1`;
/// whether they are device indices rather than positions in the host's
/// device list), or `None` when it holds no device.
fn gpu_parts(t: &pb::Task) -> Option<(String, String, bool)> {
    let g = t.gpu.as_ref().filter(|g| !g.devices.is_empty())?;
    let milli = u64::from(g.milli_each) * g.devices.len() as u64;
    let amount =
        if milli.is_multiple_of(1000) { (milli / 1000).to_string() } else { format!("{}", milli as f64 / 1000.0) };
    let indices = t.gpu_device_indices.len() == g.devices.len();
    let list = if indices { &t.gpu_device_indices } else { &g.devices };
    Some((amount, list.iter().map(u32::to_string).collect::<Vec<_>>().join(","), indices))
}

/// A task's GPU devices for a person: `0.5 GPU on device 1`, `2 GPUs on
/// devices 0,1`; `-` when it holds none. Names device indices where the
/// server knows them, else positions in the host's device list.
pub fn task_gpu(t: &pb::Task) -> String {
    let Some((amount, list, indices)) = gpu_parts(t) else {
        return "-".into();
    };
    let unit = if amount == "1" || amount.starts_with("0.") { "GPU" } else { "GPUs" };
    let plural = if list.contains(',') { "s" } else { "" };
    let word = if indices { "device" } else { "device position" };
    format!("{amount} {unit} on {word}{plural} {list}")
}

/// The same in a table cell: `0.5@1`, `2@0,1`, `-`.
pub fn task_gpu_short(t: &pb::Task) -> String {
    gpu_parts(t).map_or_else(|| "-".into(), |(amount, list, _)| format!("{amount}@{list}"))
}

/// A task event.
pub fn task_event(e: &pb::TaskEvent) -> Value {
    json!({
        "run": e.run,
        "from": task_state(e.from),
        "to": task_state(e.to),
        "at_ms": e.at_ms,
        "host": e.host,
        "reason": e.reason,
        "message": e.message,
    })
}

/// A pool spec in the form a pool file is written in (`paceline pool
/// create` takes it back): kinds by unit name, `unlimited`, `type`.
pub fn pool_spec(s: &pb::PoolSpec) -> Value {
    let entry = paceline_model::pool::PoolEntry::from_spec("", &model_pool_spec(s));
    let mut v = serde_json::to_value(&entry).unwrap_or(Value::Null);
    if let Some(m) = v.as_object_mut() {
        m.remove("path");
    }
    v
}

/// A pool.
pub fn pool(p: &pb::Pool) -> Value {
    json!({
        "path": p.path,
        "spec": p.spec.as_ref().map(pool_spec),
        "entitlement": per_kind(p.entitlement.as_ref()),
        "allocation": per_kind(p.allocation.as_ref()),
        "demand": per_kind(p.demand.as_ref()),
        "queued_gangs": p.queued_gangs,
        "live_tasks": p.live_tasks,
        "children": p.children,
    })
}

/// A host.
pub fn host(h: &pb::Host) -> Value {
    json!({
        "hostname": h.hostname,
        "provider": h.provider,
        "state": host_state(h.state),
        "reachable": h.reachable,
        "total": resources(h.total.as_ref()),
        "allocated": resources(h.allocated.as_ref()),
        "available": resources(h.available.as_ref()),
        "attributes": h.attributes.iter().collect::<std::collections::BTreeMap<_, _>>(),
        "runs": h.runs,
        "last_heartbeat_ms": h.last_heartbeat_ms,
        "gpus": h.gpus.iter().map(|g| {
            let d = g.device.clone().unwrap_or_default();
            json!({"index": d.index, "model": d.model, "used_milli": g.used_milli})
        }).collect::<Vec<_>>(),
    })
}

/// A plugin slot with its versions.
pub fn plugin_slot(s: &pb::PluginSlot) -> Value {
    let versions: Vec<Value> = s
        .versions
        .iter()
        .map(|v| {
            json!({
                "id": v.id,
                "state": v.state,
                "sha256": v.sha256,
                "calls": v.calls,
                "errors": v.errors.iter().collect::<std::collections::BTreeMap<_, _>>(),
                "p50_us": v.p50_us,
                "p99_us": v.p99_us,
                "batched": v.batched,
                "candidates": v.candidates,
            })
        })
        .collect();
    let mut v = json!({"slot": s.slot, "active": s.active, "candidates": s.candidates, "versions": versions});
    if let Some(report) = &s.shadow {
        v["shadow"] = shadow_report(report);
    }
    v
}

/// A shadow run's report: counts and the per-task disagreements.
pub fn shadow_report(r: &pb::ShadowPluginResponse) -> Value {
    let rows: Vec<Value> = r
        .disagreements
        .iter()
        .map(|d| {
            json!({"at_ms": d.at_ms, "kind": d.kind, "round": d.round, "task": d.task, "active": d.active, "shadow": d.shadow})
        })
        .collect();
    json!({
        "candidate": r.candidate,
        "compared": r.compared,
        "differed": r.differed,
        "candidate_faults": r.candidate_faults,
        "skipped": r.skipped,
        "samples": r.samples,
        "disagreements": rows,
    })
}

/// A watch event.
pub fn watch_event(e: &pb::WatchEvent) -> Value {
    use pb::watch_event::Change;
    let mut v = json!({"revision": e.revision});
    match &e.change {
        Some(Change::Job(j)) => v["job"] = job(j),
        Some(Change::Task(t)) => v["task"] = task(t),
        Some(Change::Pool(p)) => v["pool"] = json!(p),
        None => {}
    }
    v
}

/// `text` with every control character but the line break written as a
/// visible escape (`\u{1b}`), for printing to a terminal. Stored names and
/// labels may hold terminal escape sequences (servers before input was
/// checked accepted them; a message may quote them), and printed raw they
/// would be run by the terminal: retitle it, hide or rewrite lines.
pub fn printable(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.chars().any(|c| c.is_control() && c != '\n') {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if c.is_control() && c != '\n' {
            out.push_str(&format!("\\u{{{:x}}}", c as u32));
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_print_as_escapes_and_lines_stay_lines() {
        assert_eq!(printable("web-1  RUNNING\n"), "web-1  RUNNING\n");
        assert_eq!(
            printable("x\u{1b}]0;owned\u{7}y\tz\r\u{7f}\u{9b}"),
            "x\\u{1b}]0;owned\\u{7}y\\u{9}z\\u{d}\\u{7f}\\u{9b}"
        );
        assert_eq!(printable("wéb サービス"), "wéb サービス");
    }

    /// Issue 43: `watch -o json` printed `"spec":{"unreadable":"spec.default_task:
    /// must be set"}` for every job event (a summary carries no task).
    #[test]
    fn a_job_summary_renders_its_fields_not_unreadable() {
        let summary = paceline_storage::JobSummary {
            id: "j1".into(),
            name: "hello".into(),
            owner: "me".into(),
            pool: "/default".into(),
            kind: paceline_model::job::JobKind::Batch,
            labels: [("team".to_string(), "a".to_string())].into(),
            instance_count: 3,
            latest_config_version: 2,
            runtime: paceline_model::job::JobRuntime::initial(2, 0),
        };
        let event = pb::WatchEvent {
            revision: 7,
            change: Some(pb::watch_event::Change::Job(convert::job_summary_pb(&summary))),
        };
        let v = watch_event(&event);
        let spec = &v["job"]["spec"];
        assert!(spec.get("unreadable").is_none(), "{v}");
        assert_eq!(
            spec,
            &json!({"name": "hello", "owner": "me", "pool": "/default", "kind": "batch", "instance_count": 3, "labels": {"team": "a"}})
        );
    }

    #[test]
    fn enums_render_by_short_name_or_number() {
        assert_eq!(job_state(pb::JobState::Running as i32), "RUNNING");
        assert_eq!(task_state(pb::TaskState::Placing as i32), "PLACING");
        assert_eq!(host_state(pb::HostState::Draining as i32), "DRAINING");
        assert_eq!(update_state(99), "99");
    }

    #[test]
    fn a_task_shows_what_it_uses_beside_what_it_reserved() {
        let reserved = Some(pb::Resources { cpu_millis: 1000, memory_mib: 256, ..Default::default() });
        let usage = Some(pb::TaskUsage { cpu_millis: 980, memory_mib: 201, sampled_at_ms: 7 });
        let t = pb::Task { reserved, usage, ..Default::default() };
        assert_eq!(task_usage(&t), "used cpu 980 of 1000 millicores, memory 201 of 256 MiB");
        assert_eq!(task_usage_short(&t), "980/1000m 201/256Mi");
        assert_eq!(task(&t)["usage"]["memory_mib"], 201);
        assert_eq!(task(&t)["reserved"]["cpu_millis"], 1000);
        let unmeasured = pb::Task { reserved, ..Default::default() };
        assert_eq!(task_usage(&unmeasured), "reserved cpu 1000 millicores, memory 256 MiB (use not measured)");
        assert_eq!(task_usage_short(&unmeasured), "-");
        assert_eq!(task_usage(&pb::Task::default()), "-");
        assert!(task(&pb::Task::default())["usage"].is_null());
    }

    #[test]
    fn a_task_shows_its_gpu_share_and_devices() {
        let with_gpu = |devices: Vec<u32>, milli_each, indices: Vec<u32>| pb::Task {
            gpu: Some(pb::GpuGrant { devices, milli_each }),
            gpu_device_indices: indices,
            ..Default::default()
        };
        assert_eq!(task_gpu(&pb::Task::default()), "-");
        assert_eq!(task_gpu_short(&pb::Task::default()), "-");
        assert_eq!(task_gpu(&with_gpu(vec![1], 500, vec![1])), "0.5 GPU on device 1");
        assert_eq!(task_gpu_short(&with_gpu(vec![1], 500, vec![1])), "0.5@1");
        assert_eq!(task_gpu(&with_gpu(vec![0, 1], 1000, vec![2, 3])), "2 GPUs on devices 2,3");
        assert_eq!(task_gpu(&with_gpu(vec![0], 1000, vec![0])), "1 GPU on device 0");
        assert_eq!(task_gpu(&with_gpu(vec![0], 250, vec![])), "0.25 GPU on device position 0");
        let v = task(&with_gpu(vec![1], 500, vec![1]));
        assert_eq!(v["gpu"]["milli_each"], 500);
        assert_eq!(v["gpu_device_indices"][0], 1);
    }

    #[test]
    fn a_job_spec_renders_in_the_job_file_form() {
        let config = paceline_model::job::JobConfig {
            name: "hello".into(),
            owner: "me".into(),
            pool: "/default".into(),
            instance_count: 1,
            default_task: paceline_model::task::TaskSpec {
                command: "true".into(),
                resources: paceline_model::Resources { cpu_millis: 100, memory_mib: 16, ..Default::default() },
                ..Default::default()
            },
            ..Default::default()
        };
        let v =
            job(&pb::Job { id: "j1".into(), spec: Some(convert::job_spec_pb(&config)), status: None, update: None });
        let back: paceline_model::job::JobConfig = serde_json::from_value(v["spec"].clone()).expect("model form");
        assert_eq!(back, config);
    }
}

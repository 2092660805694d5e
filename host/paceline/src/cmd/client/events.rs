//! `paceline job events JOB [--task N] [--json]` (decision 0025): a job's
//! events, most recently seen first, as a table (last seen, type, reason,
//! count, object, message) or as JSON.

use paceline_proto::v1 as pb;
use serde_json::{Value, json};

use super::output::{self, Table, emit};
use super::{Api, Output, RpcError};

/// One event as `-o json` shows it: enum names without prefixes, the
/// object spelled out.
pub fn event_json(e: &pb::JobEvent) -> Value {
    json!({
        "job_id": e.job_id,
        "instance": e.instance,
        "object": object(e),
        "type": event_type(e.r#type),
        "reason": e.reason,
        "message": e.message,
        "count": e.count,
        "first_seen_ms": e.first_seen_ms,
        "last_seen_ms": e.last_seen_ms,
    })
}

fn object(e: &pb::JobEvent) -> String {
    match e.instance {
        Some(i) => format!("task {i}"),
        None => "job".into(),
    }
}

fn event_type(t: i32) -> &'static str {
    match pb::EventType::try_from(t) {
        Ok(pb::EventType::Normal) => "Normal",
        Ok(pb::EventType::Warning) => "Warning",
        _ => "-",
    }
}

/// The table: one row per event.
pub fn event_table(events: &[pb::JobEvent]) -> String {
    let mut t = Table::new(&["LAST SEEN", "TYPE", "REASON", "COUNT", "OBJECT", "MESSAGE"]);
    for e in events {
        t.row(vec![
            output::time(e.last_seen_ms),
            event_type(e.r#type).to_string(),
            e.reason.clone(),
            e.count.to_string(),
            object(e),
            e.message.clone(),
        ]);
    }
    t.render()
}

/// Asks for the events and prints them.
pub async fn show(
    client: &mut pb::job_service_client::JobServiceClient<Api>,
    out: Output,
    job_id: String,
    task: Option<u32>,
) -> anyhow::Result<()> {
    let r = pb::JobEventsRequest { job_id, instance: task, limit: 0 };
    let events = client.job_events(r).await.map_err(RpcError)?.into_inner().events;
    let value = Value::Array(events.iter().map(event_json).collect());
    emit(out, &value, || event_table(&events))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_names_the_object_and_the_json_spells_out_the_type() {
        let e = pb::JobEvent {
            job_id: "j".into(),
            instance: Some(3),
            r#type: pb::EventType::Warning as i32,
            reason: "Deferred".into(),
            message: "insufficient_resources".into(),
            first_seen_ms: 1_000,
            last_seen_ms: 61_000,
            count: 7,
        };
        let table = event_table(std::slice::from_ref(&e));
        let row = table.lines().nth(1).expect("a row");
        for cell in ["Warning", "Deferred", "7", "task 3", "insufficient_resources"] {
            assert!(row.contains(cell), "{cell} in {row}");
        }
        let v = event_json(&pb::JobEvent { instance: None, ..e });
        assert_eq!(
            (v["type"].as_str(), v["object"].as_str(), v["count"].as_u64()),
            (Some("Warning"), Some("job"), Some(7))
        );
    }
}

//! Where a waiting pod says why: its `PodScheduled=False` condition (what
//! `kubectl get pod` and `kubectl describe` show) and an Event
//! (`FailedScheduling`, the reason kube-scheduler gives, so that the tools
//! and alerts that look for it find Paceline's too).

use k8s_openapi::api::core::v1::{Event, Pod};
use kube::api::{Api, Patch, PatchParams, PostParams};
use tracing::debug;

use super::PodRef;
use crate::state::api_message;

/// Writes the pod's condition, and an Event when `event`. Failures are
/// logged (the pod may be gone; the next report tries again if not).
pub(crate) async fn write(
    client: &kube::Client,
    scheduler: &str,
    r: &PodRef,
    reason: &str,
    message: &str,
    event: bool,
) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), &r.namespace);
    let now = rfc3339(std::time::SystemTime::now());
    let patch = serde_json::json!({"status": {"conditions": [{
        "type": "PodScheduled",
        "status": "False",
        "reason": reason,
        "message": message,
        "lastTransitionTime": now,
    }]}});
    if let Err(e) = pods.patch_status(&r.name, &PatchParams::default(), &Patch::Strategic(&patch)).await {
        debug!(pod = r.key(), error = api_message(&e), "pod scheduler: condition not written");
    }
    if !event {
        return;
    }
    let ev = serde_json::json!({
        "metadata": {"generateName": format!("{}.", r.name), "namespace": r.namespace},
        "involvedObject": {"apiVersion": "v1", "kind": "Pod", "namespace": r.namespace, "name": r.name, "uid": r.uid},
        "reason": "FailedScheduling",
        "message": message,
        "type": "Warning",
        "count": 1,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "source": {"component": scheduler},
    });
    let ev: Event = match serde_json::from_value(ev) {
        Ok(e) => e,
        Err(e) => {
            debug!(error = %e, "pod scheduler: event not built");
            return;
        }
    };
    let events: Api<Event> = Api::namespaced(client.clone(), &r.namespace);
    if let Err(e) = events.create(&PostParams::default(), &ev).await {
        debug!(pod = r.key(), error = api_message(&e), "pod scheduler: event not written");
    }
}

/// `2026-11-28T23:30:00Z` (seconds; what Kubernetes' timestamps hold).
pub(crate) fn rfc3339(t: std::time::SystemTime) -> String {
    let secs = t.duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs()) as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}

#[cfg(test)]
mod tests {
    #[test]
    fn timestamps_are_rfc3339() {
        let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_796_000_000);
        assert_eq!(super::rfc3339(t), "2026-11-30T00:53:20Z");
        assert_eq!(super::rfc3339(std::time::UNIX_EPOCH), "1970-01-01T00:00:00Z");
    }
}

//! The API's own records to the wire. Every model value is converted by
//! `paceline_proto::convert` (re-exported here for the API's handlers); what
//! is left are the role-specific records only the API answers with.

pub use paceline_proto::convert::*;
use paceline_proto::v1 as pb;

/// A whole job (from the job manager's view) to the wire.
pub fn job_pb(j: &paceline_jobmgr::JobInfo) -> pb::Job {
    pb::Job {
        id: j.id.clone(),
        spec: Some(job_spec_pb(&j.config)),
        status: Some(pb::JobStatus {
            latest_config_version: j.latest_config_version.max(j.config_version),
            ..job_status_pb(&j.runtime)
        }),
        update: j.update.as_ref().map(|u| update_pb(u, &j.tasks)),
    }
}

/// A job summary (a query row) to the wire: the spec carries only the
/// summary's fields (name, owner, pool, kind, instances, labels).
pub fn job_summary_pb(s: &paceline_storage::JobSummary) -> pb::Job {
    pb::Job {
        id: s.id.clone(),
        spec: Some(pb::JobSpec {
            name: s.name.clone(),
            owner: s.owner.clone(),
            pool: s.pool.clone(),
            kind: job_kind_pb(s.kind) as i32,
            instance_count: s.instance_count,
            labels: s.labels.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            ..pb::JobSpec::default()
        }),
        status: Some(job_status_pb(&s.runtime)),
        update: None,
    }
}

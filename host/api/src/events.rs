//! `JobService.JobEvents` (decision 0025): a job's events, or one task's,
//! for the gRPC API and the web UI's job page. A `user` reads them only for
//! jobs in its pools, as `GetJob` (decision 0059; checked by the caller).

use paceline_jobmgr::JobManager;
use paceline_proto::convert;
use paceline_proto::v1 as pb;
use paceline_storage::limits;
use tonic::Status;

use crate::status;

/// Events returned when the request names no limit.
pub const DEFAULT_JOB_EVENTS: u32 = 100;

/// The answer to a `JobEvents` request. NOT_FOUND for an unknown job, so
/// that a typo is not mistaken for a quiet job.
pub async fn job_events(jobs: &JobManager, r: &pb::JobEventsRequest) -> Result<pb::JobEventsResponse, Status> {
    status::required("job_id", &r.job_id)?;
    let limit = match r.limit {
        0 => DEFAULT_JOB_EVENTS,
        n if n > limits::MAX_PAGE => {
            return Err(Status::invalid_argument(format!("limit: {n} is above the most, {}", limits::MAX_PAGE)));
        }
        n => n,
    };
    jobs.get(&r.job_id).await.map_err(|e| status::job(e, ""))?;
    let events = jobs.job_events(&r.job_id, r.instance, limit).await.map_err(|e| status::job(e, ""))?;
    Ok(pb::JobEventsResponse { events: events.iter().map(convert::job_event_pb).collect() })
}

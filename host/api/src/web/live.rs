//! The page's live streams: cluster changes as Server-Sent Events, and a
//! task's log as it is written.
//!
//! Both are read by the page with `fetch` (not `EventSource`, which cannot
//! send the `Authorization` header), so they pass the same auth layer as
//! every other route with the same token.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Extension, Path, Query, State};
use axum::http::header;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use paceline_proto::v1 as pb;
use pb::task_service_server::TaskService;
use pb::watch_service_server::WatchService;
use tokio_stream::StreamExt;
use tonic::Status;

use super::{Failure, Web, as_caller};
use crate::auth::Principal;

/// How often an idle stream sends a comment, so that the page notices a
/// dead connection (and proxies do not close a quiet one).
const KEEP_ALIVE: Duration = Duration::from_secs(10);

/// `GET /ui/api/events?from_revision=N`: every job, task and pool change
/// (`WatchService.Watch` with no filter) as an SSE stream. Each event is
/// `event: change`, `id:` its revision, `data:` the `WatchEvent` in its
/// JSON form. When the watch ends (the page fell too far behind, or the
/// revision is too old) one `event: reset` with the reason is sent and the
/// stream closes: the page re-reads and opens a new one.
pub(super) async fn events(
    State(web): State<Arc<Web>>,
    Query(q): Query<std::collections::HashMap<String, String>>,
    who: Option<Extension<Arc<Principal>>>,
) -> Result<Response, Failure> {
    let from_revision = match q.get("from_revision") {
        Some(r) => {
            r.parse().map_err(|_| Failure(Status::invalid_argument(format!("from_revision: `{r}` is not a number"))))?
        }
        None => 0,
    };
    let watch = pb::WatchRequest { kinds: vec![], from_revision, job_id: String::new() };
    // As the caller: a user's stream leaves other teams' jobs and tasks out.
    let (stream, first) = match web.watch.watch(as_caller(watch, &who)).await {
        Ok(s) => (s.into_inner(), None),
        // Too old to resume, or from before a restart: the page is told to
        // re-read (a `reset` first) and the stream goes on from now.
        Err(e) if e.code() == tonic::Code::OutOfRange => {
            let fresh = web.watch.watch(as_caller(pb::WatchRequest::default(), &who)).await?.into_inner();
            (fresh, Some(Event::default().event("reset").data(e.message())))
        }
        Err(e) => return Err(e.into()),
    };
    let mut ended = false;
    let events = stream.map_while(move |item| {
        if ended {
            return None;
        }
        Some(Ok::<Event, std::convert::Infallible>(match item {
            Ok(ev) => match serde_json::to_string(&ev) {
                Ok(data) => Event::default().event("change").id(ev.revision.to_string()).data(data),
                Err(e) => Event::default().event("reset").data(e.to_string()),
            },
            Err(status) => {
                ended = true;
                Event::default().event("reset").data(status.message())
            }
        }))
    });
    let events = tokio_stream::iter(first.map(Ok)).chain(events);
    let mut response = Sse::new(events).keep_alive(KeepAlive::new().interval(KEEP_ALIVE)).into_response();
    // A buffering proxy (nginx) would hold the events back.
    response.headers_mut().insert("x-accel-buffering", header::HeaderValue::from_static("no"));
    Ok(response)
}

/// The log route's parameters: `TaskLogsRequest`'s, with `offset` negative
/// for a tail (`-65536`: the last 64 KiB) and `follow` to keep reading.
#[derive(serde::Deserialize, Default)]
#[serde(default)]
pub(super) struct LogParams {
    stream: String,
    run: u64,
    offset: i64,
    follow: bool,
}

/// `GET /ui/api/tasks/{id}/{instance}/logs?stream=stdout&offset=-65536&follow=true`:
/// the log's bytes as they are written (a chunked `text/plain` body; with
/// `follow` it ends when the run has ended and all is sent). An error
/// before the first byte (no run yet, a pool the caller may not read) is
/// the usual JSON error.
pub(super) async fn logs(
    State(web): State<Arc<Web>>,
    Path((id, raw)): Path<(String, String)>,
    who: Option<Extension<Arc<Principal>>>,
    params: Result<Query<LogParams>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, Failure> {
    let Query(p) = params.map_err(|e| Failure(Status::invalid_argument(format!("query: {e}"))))?;
    let instance =
        raw.parse().map_err(|_| Failure(Status::invalid_argument(format!("instance: `{raw}` is not a number"))))?;
    let request = pb::TaskLogsRequest {
        task: Some(pb::TaskRef { job_id: id, instance }),
        run: p.run,
        stream: p.stream,
        offset: p.offset,
        follow: p.follow,
    };
    let chunks = web.tasks.task_logs(as_caller(request, &who)).await?.into_inner();
    // A failure after bytes were sent cannot change the status: the body ends.
    let body = chunks.map_while(|c| c.ok().map(|c| Ok::<_, std::convert::Infallible>(bytes::Bytes::from(c.data))));
    Ok((
        [
            (header::CONTENT_TYPE, "text/plain; charset=utf-8"),
            (header::CACHE_CONTROL, "no-cache"),
            (header::HeaderName::from_static("x-accel-buffering"), "no"),
        ],
        Body::from_stream(body),
    )
        .into_response())
}

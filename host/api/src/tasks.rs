//! `TaskService`: tasks of a job, their events, kill/restart of one
//! instance, and run logs streamed from the host that ran them. Every call
//! is refused for a `user` whose pools do not hold the task's job
//! (decision 0059).

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures::Stream;
use paceline_hostmgr::{HostAccess, LogStream};
use paceline_jobmgr::JobManager;
use paceline_model::task::{TaskId, TaskState};
use paceline_proto::v1 as pb;
use paceline_proto::v1::task_service_server::TaskService;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use crate::{auth, convert, status};

/// Largest chunk one log message carries.
pub const LOG_CHUNK_BYTES: u64 = 64 * 1024;
/// How often a followed log is polled for more.
const FOLLOW_POLL: Duration = Duration::from_millis(200);
/// Events returned when the request leaves `limit` 0.
const DEFAULT_EVENTS: u32 = 100;
/// Most tasks one `ListTasks` page holds, whatever the request asks (0
/// included): 5,000 tasks are about 1 MB, well inside the clients' 4 MiB
/// message limit, where a 100,000-task job in one reply was 21 MB and
/// failed for every client (security issue 44).
pub const MAX_TASK_PAGE: usize = 5_000;

/// The page size a `ListTasks` request gets: its `limit`, capped; 0 is the cap.
pub fn page_limit(limit: u32) -> usize {
    if limit == 0 { MAX_TASK_PAGE } else { (limit as usize).min(MAX_TASK_PAGE) }
}

/// The instance a `ListTasks` page starts from: its token is the instance
/// number (decimal) the previous page stopped before.
fn page_start(token: &str) -> Result<usize, Status> {
    if token.is_empty() {
        return Ok(0);
    }
    token.parse::<u32>().map(|i| i as usize).map_err(|_| {
        Status::invalid_argument(format!(
            "page_token: {:?} is not a token this server gave (pass the previous page's next_page_token)",
            token.chars().take(40).collect::<String>()
        ))
    })
}

/// The task service.
#[derive(Clone, Debug)]
pub struct TaskApi {
    jobs: Arc<JobManager>,
    hosts: Arc<dyn HostAccess>,
}

impl TaskApi {
    /// Over the cluster's job and host managers.
    pub fn new(jobs: Arc<JobManager>, hosts: Arc<dyn HostAccess>) -> TaskApi {
        TaskApi { jobs, hosts }
    }
}

fn task_ref(field: &str, t: Option<&pb::TaskRef>) -> Result<pb::TaskRef, Status> {
    let t = t.ok_or_else(|| Status::invalid_argument(format!("{field}: must be set")))?;
    status::required(&format!("{field}.job_id"), &t.job_id)?;
    Ok(t.clone())
}

/// The stream of a followed or one-shot log.
pub type LogStreamOut = Pin<Box<dyn Stream<Item = Result<pb::LogChunk, Status>> + Send>>;

impl TaskApi {
    /// Waiting tasks' kind and reason, from admission, the last placement
    /// round and a census of the hosts (decision 0026).
    fn with_why(&self, job_id: &str, mut tasks: Vec<pb::Task>) -> Vec<pb::Task> {
        crate::pending::fill_tasks(&self.jobs, self.hosts.as_ref(), job_id, &mut tasks);
        fill_gpu_indices(self.hosts.as_ref(), &mut tasks);
        fill_usage(self.hosts.as_ref(), &mut tasks);
        tasks
    }

    async fn runtime(&self, t: &pb::TaskRef) -> Result<paceline_model::task::TaskRuntime, Status> {
        if let Some(rt) = self.jobs.task(&t.job_id, t.instance) {
            return Ok(rt);
        }
        // Not in memory: a terminal job read back from storage.
        let info = self.jobs.get(&t.job_id).await.map_err(|e| status::job(e, ""))?;
        info.tasks
            .get(t.instance as usize)
            .cloned()
            .ok_or_else(|| Status::not_found(format!("task.instance: job {} has no instance {}", t.job_id, t.instance)))
    }
}

/// Fills `gpu_device_indices` of the tasks that hold GPU devices: the
/// grant names positions in the host's device list, a person (and
/// `CUDA_VISIBLE_DEVICES`) names device indices. Left empty when the host is
/// not registered now, or a position is not in its list.
pub(crate) fn fill_gpu_indices(hosts: &dyn HostAccess, tasks: &mut [pb::Task]) {
    for t in tasks.iter_mut() {
        let Some(grant) = &t.gpu else { continue };
        if grant.devices.is_empty() || t.host.is_empty() {
            continue;
        }
        let Some(host) = hosts.host(&t.host) else { continue };
        let indices: Option<Vec<u32>> =
            grant.devices.iter().map(|&d| host.view.gpus.get(d as usize).map(|s| s.device.index)).collect();
        t.gpu_device_indices = indices.unwrap_or_default();
    }
}

/// Fills `reserved` and `usage` of the tasks whose current run is live on
/// a host: what the host manager holds for the run, and what its agent
/// last measured it using. Left unset for a run that is not live (not
/// placed, ended), a host manager that cannot say (another process), and
/// `usage` where nothing was measured (sim, Mesos, the first seconds).
pub(crate) fn fill_usage(hosts: &dyn HostAccess, tasks: &mut [pb::Task]) {
    for t in tasks.iter_mut() {
        if t.run_id.is_empty() || t.host.is_empty() {
            continue;
        }
        // A run the host manager places elsewhere than the task says is
        // not the task's current run as this reply describes it.
        let Some(holding) = hosts.run_holding(&t.run_id).filter(|h| h.host == t.host) else { continue };
        t.reserved = Some(convert::resources_pb(&holding.reserved));
        t.usage = holding.used.map(|u| pb::TaskUsage {
            cpu_millis: u.cpu_millis,
            memory_mib: u.memory_mib,
            sampled_at_ms: u.sampled_at_ms,
        });
    }
}

#[tonic::async_trait]
impl TaskService for TaskApi {
    async fn list_tasks(
        &self,
        request: Request<pb::ListTasksRequest>,
    ) -> Result<Response<pb::ListTasksResponse>, Status> {
        let r = request.get_ref();
        status::required("job_id", &r.job_id)?;
        let states = r
            .states
            .iter()
            .enumerate()
            .map(|(i, s)| convert::task_state(&format!("states[{i}]"), *s))
            .collect::<Result<Vec<TaskState>, _>>()?;
        let start = page_start(&r.page_token)?;
        let limit = page_limit(r.limit);
        // Another team's tasks are not for a user (decision 0059).
        auth::check_job_read(&request, &self.jobs, &r.job_id).await?;
        let info = self.jobs.get(&r.job_id).await.map_err(|e| status::job(e, ""))?;
        let matching = |t: &paceline_model::task::TaskRuntime| states.is_empty() || states.contains(&t.state);
        let total = info.tasks.iter().filter(|t| matching(t)).count();
        let mut page = info.tasks.iter().enumerate().skip(start).filter(|(_, t)| matching(t));
        let tasks: Vec<pb::Task> =
            page.by_ref().take(limit).map(|(i, t)| convert::task_pb(&info.id, i as u32, t)).collect();
        // A next page only when a matching task is left after this one.
        let next_page_token = page.next().map(|(i, _)| i.to_string()).unwrap_or_default();
        Ok(Response::new(pb::ListTasksResponse {
            tasks: self.with_why(&info.id, tasks),
            next_page_token,
            total: u32::try_from(total).unwrap_or(u32::MAX),
        }))
    }

    async fn get_task(&self, request: Request<pb::GetTaskRequest>) -> Result<Response<pb::GetTaskResponse>, Status> {
        let t = task_ref("task", request.get_ref().task.as_ref())?;
        auth::check_job_read(&request, &self.jobs, &t.job_id).await?;
        let rt = self.runtime(&t).await?;
        Ok(Response::new(pb::GetTaskResponse {
            task: self.with_why(&t.job_id, vec![convert::task_pb(&t.job_id, t.instance, &rt)]).pop(),
        }))
    }

    async fn kill_task(&self, request: Request<pb::TaskRef>) -> Result<Response<pb::KillTaskResponse>, Status> {
        let t = task_ref("task", Some(request.get_ref()))?;
        crate::auth::check_job(&request, &self.jobs, &t.job_id).await?;
        self.jobs.kill(&t.job_id, Some(vec![t.instance])).await.map_err(|e| status::job(e, ""))?;
        Ok(Response::new(pb::KillTaskResponse {}))
    }

    async fn restart_task(&self, request: Request<pb::TaskRef>) -> Result<Response<pb::RestartTaskResponse>, Status> {
        let t = task_ref("task", Some(request.get_ref()))?;
        crate::auth::check_job(&request, &self.jobs, &t.job_id).await?;
        self.jobs.restart(&t.job_id, Some(vec![t.instance]), 0).await.map_err(|e| status::job(e, ""))?;
        Ok(Response::new(pb::RestartTaskResponse {}))
    }

    type TaskLogsStream = LogStreamOut;

    async fn task_logs(&self, request: Request<pb::TaskLogsRequest>) -> Result<Response<Self::TaskLogsStream>, Status> {
        let t = task_ref("task", request.get_ref().task.as_ref())?;
        auth::check_job_read(&request, &self.jobs, &t.job_id).await?;
        let r = request.into_inner();
        let stream = match r.stream.as_str() {
            "" | "stdout" => LogStream::Stdout,
            "stderr" => LogStream::Stderr,
            other => return Err(Status::invalid_argument(format!("stream: `{other}` is neither stdout nor stderr"))),
        };
        let rt = self.runtime(&t).await?;
        // A task that never reached a host has no run with a log.
        let host = match rt.host.clone() {
            Some(h) if rt.run > 0 => h,
            _ => return Err(Status::failed_precondition("task has not been placed on a host yet")),
        };
        let run = if r.run == 0 { rt.run } else { r.run };
        if run > rt.run {
            return Err(Status::invalid_argument(format!("run: task has runs 1..={}", rt.run)));
        }
        // An earlier run may have been on another host: its events say where.
        let host = if run == rt.run {
            host
        } else {
            let events = self.jobs.task_events(&t.job_id, t.instance).await.map_err(|e| status::job(e, ""))?;
            events.into_iter().filter(|e| e.run == run).find_map(|e| e.host).unwrap_or(host)
        };
        let run_id = TaskId { job_id: t.job_id.clone(), instance: t.instance }.run_id(run);
        // The first read happens before the stream opens so that an error
        // (unknown host, a provider without logs) is the call's status.
        let first = self.hosts.read_log_on(&host, &run_id, stream, 0, 0).await.map_err(status::host)?;
        let mut offset =
            if r.offset < 0 { first.file_size.saturating_sub(r.offset.unsigned_abs()) } else { r.offset as u64 };
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        let (hosts, jobs) = (self.hosts.clone(), self.jobs.clone());
        tokio::spawn(async move {
            let mut last_pass = false;
            loop {
                let chunk = match hosts.read_log_on(&host, &run_id, stream, offset, LOG_CHUNK_BYTES).await {
                    Ok(c) => c,
                    Err(e) => {
                        let _ = tx.send(Err(status::host(e))).await;
                        return;
                    }
                };
                if !chunk.data.is_empty() {
                    offset = chunk.offset + chunk.data.len() as u64;
                    if tx.send(Ok(pb::LogChunk { data: chunk.data, offset: chunk.offset })).await.is_err() {
                        return; // the client went away
                    }
                    continue;
                }
                if !r.follow || last_pass {
                    return;
                }
                // Fully read: stop once the run can write no more (it ended,
                // or a newer run replaced it), after one more read that
                // catches bytes written between the last read and the end.
                let ended = jobs.task(&t.job_id, t.instance).is_none_or(|rt| rt.run != run || rt.state.is_terminal());
                if ended {
                    last_pass = true;
                    continue;
                }
                tokio::time::sleep(FOLLOW_POLL).await;
                if tx.is_closed() {
                    return;
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn task_events(
        &self,
        request: Request<pb::TaskEventsRequest>,
    ) -> Result<Response<pb::TaskEventsResponse>, Status> {
        let r = request.get_ref();
        let t = task_ref("task", r.task.as_ref())?;
        auth::check_job_read(&request, &self.jobs, &t.job_id).await?;
        // Confirms the task exists, so an unknown one is NOT_FOUND, not empty.
        self.runtime(&t).await?;
        let mut events = self.jobs.task_events(&t.job_id, t.instance).await.map_err(|e| status::job(e, ""))?;
        let limit = if r.limit == 0 { DEFAULT_EVENTS } else { r.limit } as usize;
        // Newest first from the store: keep the newest, then flip.
        events.truncate(limit);
        events.reverse();
        Ok(Response::new(pb::TaskEventsResponse { events: events.iter().map(convert::task_event_pb).collect() }))
    }
}

//! `WatchService`: change streams over jobs, tasks and pools.
//!
//! The managers publish no change feed yet, so each stream polls
//! ([`POLL`]) and diffs what it saw last: a job whose runtime record
//! changed (storage version or state), a task whose runtime record
//! changed, a pool whose status changed. Revisions come from one counter
//! shared by every stream of the server, so they are monotonic in-process
//! (not across restarts). No history is kept: `from_revision` may only name
//! the server's latest revision (resume at the head, nothing missed since
//! then is replayed); an older one is OUT_OF_RANGE, as the contract asks
//! (re-read, then watch from the new revision).

use std::collections::{BTreeMap, HashMap};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::Stream;
use paceline_jobmgr::JobManager;
use paceline_model::job::JobState;
use paceline_proto::v1 as pb;
use paceline_proto::v1::watch_event::Change;
use paceline_proto::v1::watch_service_server::WatchService;
use paceline_resmgr::{PoolStatus, ResourceManager};
use paceline_storage::JobQuery;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use crate::convert;

/// How often a stream looks for changes.
pub const POLL: Duration = Duration::from_millis(500);

/// The watch service.
#[derive(Clone)]
pub struct WatchApi {
    jobs: Arc<JobManager>,
    resmgr: Arc<Mutex<ResourceManager>>,
    revision: Arc<AtomicU64>,
}

impl std::fmt::Debug for WatchApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WatchApi").field("revision", &self.revision.load(Ordering::Relaxed)).finish_non_exhaustive()
    }
}

impl WatchApi {
    /// Over the cluster's job and resource managers.
    pub fn new(jobs: Arc<JobManager>, resmgr: Arc<Mutex<ResourceManager>>) -> WatchApi {
        WatchApi { jobs, resmgr, revision: Arc::new(AtomicU64::new(0)) }
    }
}

/// Which kinds a stream wants.
#[derive(Clone, Copy, Debug)]
struct Kinds {
    job: bool,
    task: bool,
    pool: bool,
}

/// What a stream saw at its last poll.
#[derive(Default)]
struct Seen {
    jobs: HashMap<String, (u64, JobState)>,
    tasks: HashMap<(String, u32), (u64, u64)>,
    pools: BTreeMap<String, PoolStatus>,
}

struct Poller {
    api: WatchApi,
    job_id: String,
    kinds: Kinds,
    seen: Seen,
}

impl Poller {
    async fn summaries(&self) -> Vec<paceline_storage::JobSummary> {
        let mut out = Vec::new();
        let mut query = JobQuery { limit: 1000, ..JobQuery::default() };
        loop {
            let Ok(page) = self.api.jobs.query(&query).await else { break };
            out.extend(page.items.into_iter().filter(|s| self.job_id.is_empty() || s.id == self.job_id));
            match page.next {
                Some(next) => query.cursor = Some(next),
                None => break,
            }
        }
        out
    }

    /// One poll: the changes since the last (none on the first, which only
    /// records where things stand).
    async fn poll(&mut self, first: bool) -> Vec<Change> {
        let mut changes = Vec::new();
        if self.kinds.job || self.kinds.task {
            for s in self.summaries().await {
                let key = (s.runtime.version, s.runtime.state);
                let changed = self.seen.jobs.insert(s.id.clone(), key) != Some(key);
                if changed && !first && self.kinds.job {
                    changes.push(Change::Job(convert::job_summary_pb(&s)));
                }
                // Terminal jobs' tasks no longer change; skip reading them
                // unless the job itself just changed.
                if self.kinds.task && (changed || !s.runtime.state.is_terminal()) {
                    let Ok(info) = self.api.jobs.get(&s.id).await else { continue };
                    for (i, t) in info.tasks.iter().enumerate() {
                        let key = (t.run, t.version);
                        if self.seen.tasks.insert((s.id.clone(), i as u32), key) != Some(key) && !first {
                            changes.push(Change::Task(convert::task_pb(&s.id, i as u32, t)));
                        }
                    }
                }
            }
        }
        if self.kinds.pool {
            let statuses: Vec<PoolStatus> = match self.api.resmgr.lock() {
                Ok(rm) => rm.tree().paths().iter().filter_map(|p| rm.pool_status(p)).collect(),
                Err(_) => Vec::new(),
            };
            for s in statuses {
                let path = s.path.clone();
                let changed = self.seen.pools.get(&path) != Some(&s);
                self.seen.pools.insert(path.clone(), s);
                if changed && !first {
                    changes.push(Change::Pool(path));
                }
            }
        }
        changes
    }
}

/// The stream of watch events.
pub type WatchStream = Pin<Box<dyn Stream<Item = Result<pb::WatchEvent, Status>> + Send>>;

#[tonic::async_trait]
impl WatchService for WatchApi {
    type WatchStream = WatchStream;

    async fn watch(&self, request: Request<pb::WatchRequest>) -> Result<Response<Self::WatchStream>, Status> {
        let r = request.into_inner();
        let head = self.revision.load(Ordering::SeqCst);
        if r.from_revision != 0 && r.from_revision != head {
            return Err(Status::out_of_range(format!(
                "from_revision: {} is not held (the server is at {head} and keeps no history); re-read, then watch from 0",
                r.from_revision
            )));
        }
        let mut kinds = Kinds { job: r.kinds.is_empty(), task: r.kinds.is_empty(), pool: r.kinds.is_empty() };
        for (i, k) in r.kinds.iter().enumerate() {
            match k.as_str() {
                "job" => kinds.job = true,
                "task" => kinds.task = true,
                "pool" => kinds.pool = true,
                other => return Err(Status::invalid_argument(format!("kinds[{i}]: `{other}` is not job, task or pool"))),
            }
        }
        if !r.job_id.is_empty() && r.kinds.is_empty() {
            // A job filter says nothing about pools.
            kinds.pool = false;
        }
        let (tx, rx) = mpsc::channel(64);
        let mut poller = Poller { api: self.clone(), job_id: r.job_id, kinds, seen: Seen::default() };
        tokio::spawn(async move {
            let mut first = true;
            loop {
                for change in poller.poll(first).await {
                    let revision = poller.api.revision.fetch_add(1, Ordering::SeqCst) + 1;
                    if tx.send(Ok(pb::WatchEvent { revision, change: Some(change) })).await.is_err() {
                        return;
                    }
                }
                first = false;
                tokio::time::sleep(POLL).await;
                if tx.is_closed() {
                    return;
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }
}

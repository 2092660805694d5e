//! `WatchService`: change streams over jobs, tasks and pools.
//!
//! Job and task changes come from the job manager's change feed
//! ([`paceline_jobmgr::feed`]): every durable write publishes the ids it
//! touched with a revision, and a stream sends each change with the record
//! as it is when sent (so a burst of writes to one task shows its latest
//! state, possibly more than once). Pool statuses (allocation, demand,
//! entitlement) move continuously inside the resource manager, so one task
//! per server compares them every [`POOL_POLL`] and publishes the pools that
//! changed into the same feed, with revisions of the same sequence.
//!
//! A task's measured use (`Task.usage`, sampled by its agent every
//! `usage_interval_ms` and carried by heartbeats) lives in the host
//! manager's memory, not in the task's record, so no write publishes it:
//! while someone watches, one task per server compares the measured runs'
//! figures every [`USAGE_POLL`] and publishes the tasks whose CPU or memory
//! figures changed. A figure changes only with a new sample, so a task is
//! sent at most once per sample (and per poll), and heartbeats that repeat
//! the same figures send nothing. Task events carry `reserved` and `usage`
//! as `GetTask` does.
//!
//! Resuming: `from_revision` replays what the feed still holds after it
//! (the last [`paceline_jobmgr::feed::HISTORY`] changes); an older revision
//! is OUT_OF_RANGE (re-read, then watch from 0). A watcher that falls more
//! than [`paceline_jobmgr::feed::LAG`] changes behind is ended with ABORTED
//! naming the last revision it was sent, from which it can resume.
//! Revisions restart at 1 when the server restarts.
//!
//! A `user`'s stream carries only the jobs and tasks of its pools (decision
//! 0059): each job's pool is looked up once per stream and remembered
//! ([`Visible`]), and looked up again at each change of the job itself (an
//! update may move it to another pool). Pool changes are inventory and go
//! to everyone; revisions of skipped changes are simply not seen, so a
//! user's stream has gaps in its revisions and resumes as any other.

use std::collections::{BTreeMap, HashMap};
use std::pin::Pin;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use futures::Stream;
use paceline_hostmgr::HostAccess;
use paceline_jobmgr::JobManager;
use paceline_jobmgr::feed::{Change as FeedChange, Feed};
use paceline_model::RunId;
use paceline_proto::v1 as pb;
use paceline_proto::v1::watch_event::Change;
use paceline_proto::v1::watch_service_server::WatchService;
use paceline_resmgr::{PoolStatus, ResourceManager};
use tokio::sync::{broadcast, mpsc};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use crate::auth::Principal;
use crate::convert;

/// How often pool statuses are compared.
pub const POOL_POLL: Duration = Duration::from_millis(500);

/// How often the tasks' measured use is compared, while someone watches:
/// the shortest sampling interval an agent is given (`paceline dev`'s).
pub const USAGE_POLL: Duration = Duration::from_secs(1);

/// Most tasks published for a change of measured use in one pass: well
/// under the lag a live watcher may have ([`paceline_jobmgr::feed::LAG`]),
/// so a cluster whose every task changes its figures at once does not cut
/// its watchers off.
pub const USAGE_BATCH: usize = 4096;

/// The watch service.
#[derive(Clone)]
pub struct WatchApi {
    jobs: Arc<JobManager>,
    /// To name a task's GPU devices as `task get` does (the grant holds
    /// positions in the host's device list, a watcher wants indices).
    hosts: Arc<dyn HostAccess>,
}

impl std::fmt::Debug for WatchApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WatchApi").field("revision", &self.jobs.feed().head()).finish_non_exhaustive()
    }
}

impl WatchApi {
    /// Over the cluster's job and resource managers. Starts the pool poller
    /// (it stops when the job manager, and so its feed, is gone).
    pub fn new(jobs: Arc<JobManager>, resmgr: Arc<Mutex<ResourceManager>>, hosts: Arc<dyn HostAccess>) -> WatchApi {
        let feed = Arc::downgrade(jobs.feed());
        tokio::spawn(poll_pools(feed.clone(), resmgr));
        tokio::spawn(poll_usage(feed, hosts.clone()));
        WatchApi { jobs, hosts }
    }
}

/// Publishes the pools whose status changed, every [`POOL_POLL`].
async fn poll_pools(feed: Weak<Feed>, resmgr: Arc<Mutex<ResourceManager>>) {
    let mut seen: BTreeMap<String, PoolStatus> = BTreeMap::new();
    loop {
        let Some(feed) = feed.upgrade() else { return };
        let statuses: Vec<PoolStatus> = match resmgr.lock() {
            Ok(rm) => rm.tree().paths().iter().filter_map(|p| rm.pool_status(p)).collect(),
            Err(_) => Vec::new(),
        };
        let mut changed = Vec::new();
        let mut now: BTreeMap<String, PoolStatus> = BTreeMap::new();
        for s in statuses {
            if seen.get(&s.path) != Some(&s) {
                changed.push(FeedChange::Pool(Arc::from(s.path.as_str())));
            }
            now.insert(s.path.clone(), s);
        }
        // Deleted pools change too.
        changed.extend(seen.keys().filter(|p| !now.contains_key(*p)).map(|p| FeedChange::Pool(Arc::from(p.as_str()))));
        seen = now;
        if !changed.is_empty() {
            feed.publish(changed);
        }
        drop(feed);
        tokio::time::sleep(POOL_POLL).await;
    }
}

/// Publishes the tasks whose measured use changed, every [`USAGE_POLL`]
/// while the feed has watchers, at most [`USAGE_BATCH`] a pass (the rest
/// at the next). With no watcher nothing is read; the first pass after one
/// subscribes only takes note of the figures (a watcher reads the tasks it
/// cares about when it starts).
async fn poll_usage(feed: Weak<Feed>, hosts: Arc<dyn HostAccess>) {
    // Per live measured run: the CPU and memory figures last published.
    let mut seen: Option<HashMap<String, (u64, u64)>> = None;
    loop {
        let Some(feed) = feed.upgrade() else { return };
        if feed.watchers() == 0 {
            seen = None;
        } else {
            let measured = hosts.measured_use();
            let mut next = HashMap::with_capacity(measured.len());
            let mut changed = Vec::new();
            for r in measured {
                let figures = (r.used.cpu_millis, r.used.memory_mib);
                let before = seen.as_ref().map(|s| s.get(&r.run_id).copied());
                match before {
                    // The first pass, or nothing new.
                    None => {}
                    Some(b) if b == Some(figures) => {}
                    Some(b) if changed.len() >= USAGE_BATCH => {
                        // Sent at a later pass: keep what was published.
                        if let Some(b) = b {
                            next.insert(r.run_id, b);
                        }
                        continue;
                    }
                    Some(_) => {
                        if let Ok((job, instance, _)) = RunId::split(&r.run_id) {
                            changed.push(FeedChange::Task(Arc::from(job), instance));
                        }
                    }
                }
                next.insert(r.run_id, figures);
            }
            seen = Some(next);
            if !changed.is_empty() {
                feed.publish(changed);
            }
        }
        drop(feed);
        tokio::time::sleep(USAGE_POLL).await;
    }
}

/// Which changes a stream wants.
#[derive(Clone, Debug)]
struct Filter {
    job: bool,
    task: bool,
    pool: bool,
    job_id: String,
}

impl Filter {
    fn wants(&self, c: &FeedChange) -> bool {
        match c {
            FeedChange::Job(id) => self.job && (self.job_id.is_empty() || **id == *self.job_id),
            FeedChange::Task(id, _) => self.task && (self.job_id.is_empty() || **id == *self.job_id),
            FeedChange::Pool(_) => self.pool,
        }
    }
}

/// Most jobs a stream remembers the visibility of; past it the memory is
/// cleared and jobs are looked up again (a stream lives for days).
const VISIBLE_MEMORY: usize = 100_000;

/// Which jobs a stream may show its principal: every job to one who reads
/// every pool, else those in its pools.
struct Visible {
    who: Arc<Principal>,
    /// Per job id seen: whether its pool is the caller's.
    known: HashMap<Arc<str>, bool>,
}

impl Visible {
    fn new(who: Arc<Principal>) -> Visible {
        Visible { who, known: HashMap::new() }
    }

    /// Whether change `c` may be sent. A job's own change looks its pool up
    /// again; a task's uses what the stream knows of its job.
    async fn allows(&mut self, jobs: &JobManager, c: &FeedChange) -> bool {
        if self.who.reads_every_pool() {
            return true;
        }
        let (id, again) = match c {
            FeedChange::Pool(_) => return true,
            FeedChange::Job(id) => (id, true),
            FeedChange::Task(id, _) => (id, false),
        };
        if !again && let Some(known) = self.known.get(id) {
            return *known;
        }
        let visible = match jobs.summary(id) {
            Some(s) => self.who.may_read_jobs_in(&s.pool),
            // Gone from memory: a deletion the stream showed the job before,
            // or a finished job whose pool the store still has.
            None => match self.known.get(id) {
                Some(known) => *known,
                None => jobs.pool_of(id).await.is_ok_and(|pool| self.who.may_read_jobs_in(&pool)),
            },
        };
        if self.known.len() >= VISIBLE_MEMORY {
            self.known.clear();
        }
        self.known.insert(id.clone(), visible);
        visible
    }
}

/// The event sent for a change: the record as it is now. A job that is
/// gone (deleted) is sent with its id only.
fn event(jobs: &JobManager, hosts: &dyn HostAccess, revision: u64, c: &FeedChange) -> Option<pb::WatchEvent> {
    let change = match c {
        FeedChange::Job(id) => Change::Job(match jobs.summary(id) {
            Some(s) => convert::job_summary_pb(&s),
            None => pb::Job { id: id.to_string(), ..pb::Job::default() },
        }),
        FeedChange::Task(id, i) => {
            let mut task = [convert::task_pb(id, *i, &jobs.task_runtime(id, *i)?)];
            crate::tasks::fill_gpu_indices(hosts, &mut task);
            crate::tasks::fill_usage(hosts, &mut task);
            let [task] = task;
            Change::Task(task)
        }
        FeedChange::Pool(path) => Change::Pool(path.to_string()),
    };
    Some(pb::WatchEvent { revision, change: Some(change) })
}

/// The stream of watch events.
pub type WatchStream = Pin<Box<dyn Stream<Item = Result<pb::WatchEvent, Status>> + Send>>;

#[tonic::async_trait]
impl WatchService for WatchApi {
    type WatchStream = WatchStream;

    async fn watch(&self, request: Request<pb::WatchRequest>) -> Result<Response<Self::WatchStream>, Status> {
        let who = crate::auth::principal(&request)?;
        let r = request.into_inner();
        // Watching another team's job by id is refused as reading it is; an
        // unknown id is not an error (the stream shows nothing).
        if !r.job_id.is_empty()
            && !who.reads_every_pool()
            && let Ok(pool) = self.jobs.pool_of(&r.job_id).await
        {
            who.check_read_pool(&pool)?;
        }
        let mut visible = Visible::new(who);
        let mut filter =
            Filter { job: r.kinds.is_empty(), task: r.kinds.is_empty(), pool: r.kinds.is_empty(), job_id: r.job_id };
        for (i, k) in r.kinds.iter().enumerate() {
            match k.as_str() {
                "job" => filter.job = true,
                "task" => filter.task = true,
                "pool" => filter.pool = true,
                other => {
                    return Err(Status::invalid_argument(format!("kinds[{i}]: `{other}` is not job, task or pool")));
                }
            }
        }
        if !filter.job_id.is_empty() && r.kinds.is_empty() {
            // A job filter says nothing about pools.
            filter.pool = false;
        }
        let (replay, mut live) = self
            .jobs
            .feed()
            .subscribe(r.from_revision)
            .map_err(|e| Status::out_of_range(format!("from_revision: {e}; re-read, then watch from 0")))?;
        let (tx, rx) = mpsc::channel(256);
        let jobs = self.jobs.clone();
        let hosts = self.hosts.clone();
        tokio::spawn(async move {
            let mut last = r.from_revision;
            for (revision, c) in replay {
                last = revision;
                if filter.wants(&c)
                    && visible.allows(&jobs, &c).await
                    && let Some(ev) = event(&jobs, hosts.as_ref(), revision, &c)
                    && tx.send(Ok(ev)).await.is_err()
                {
                    return;
                }
            }
            loop {
                let (revision, c) = tokio::select! {
                    got = live.recv() => match got {
                        Ok(x) => x,
                        Err(broadcast::error::RecvError::Lagged(n)) => {
                            let _ = tx
                                .send(Err(Status::aborted(format!(
                                    "the watcher fell {n} changes behind; resume with from_revision {last}"
                                ))))
                                .await;
                            return;
                        }
                        Err(broadcast::error::RecvError::Closed) => return,
                    },
                    () = tx.closed() => return,
                };
                last = revision;
                if filter.wants(&c)
                    && visible.allows(&jobs, &c).await
                    && let Some(ev) = event(&jobs, hosts.as_ref(), revision, &c)
                    && tx.send(Ok(ev)).await.is_err()
                {
                    return;
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }
}

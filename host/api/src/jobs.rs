//! `JobService`: create, read, query, update (with a dry-run diff), kill,
//! restart, delete, and update control, over [`paceline_jobmgr::JobManager`].
//! A `user` reads and changes only jobs in its pools: another pool's job is
//! PERMISSION_DENIED naming the pool, and `QueryJobs` leaves such jobs out
//! before paging (decision 0059).

use std::collections::BTreeSet;
use std::sync::Arc;

use paceline_hostmgr::HostAccess;
use paceline_jobmgr::{JobManager, UpdateRequest};
use paceline_model::job::{JobConfig, JobState};
use paceline_model::task::TaskSpec;
use paceline_proto::v1 as pb;
use paceline_proto::v1::job_service_server::JobService;
use paceline_storage::{JobQuery, JobSummary};
use tonic::{Request, Response, Status};

use crate::{auth, convert, status};

/// Most jobs one query page returns.
const MAX_PAGE: u32 = 1000;
/// Page size when the request leaves it 0.
const DEFAULT_PAGE: u32 = 100;
/// Jobs read from the store per round while a query filters what the store
/// cannot (the caller's pools, a name): a page is filled from as many rounds
/// as it takes, up to [`MAX_ROUNDS`].
const ROUND: u32 = 1000;
/// Most store rounds one `QueryJobs` call reads (50,000 jobs) before it
/// answers with the jobs found so far and a token to go on from, so that a
/// user whose pools hold a few jobs among many does not hold a worker for
/// a scan of the whole history.
const MAX_ROUNDS: usize = 50;

/// The job service.
#[derive(Clone)]
pub struct JobApi {
    jobs: Arc<JobManager>,
    /// For "why pending": the hosts a job's waiting tasks are counted against.
    hosts: Arc<dyn HostAccess>,
    /// Job files (YAML) parsed for callers: a few at once per principal.
    parses: Arc<crate::jobfile::ParseLimiter>,
    /// Live jobs and tasks per principal and pool ([`crate::quota`]).
    quotas: Arc<crate::quota::Quotas>,
}

impl std::fmt::Debug for JobApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobApi").field("jobs", &self.jobs).finish_non_exhaustive()
    }
}

impl JobApi {
    /// Over the cluster's job and host managers.
    pub fn new(jobs: Arc<JobManager>, hosts: Arc<dyn HostAccess>) -> JobApi {
        JobApi { jobs, hosts, parses: Arc::default(), quotas: Arc::default() }
    }

    /// With these quotas (the server's, shared by its gRPC and web paths)
    /// instead of the default limits.
    pub fn with_quotas(mut self, quotas: Arc<crate::quota::Quotas>) -> JobApi {
        self.quotas = quotas;
        self
    }

    /// Reads a job file's text for `who` ([`crate::jobfile::parse`]) on a
    /// blocking thread, refusing with RESOURCE_EXHAUSTED while `who` has
    /// [`crate::jobfile::PARSES_PER_CALLER`] parses running.
    pub async fn parse_job_file(
        &self,
        who: &str,
        text: String,
    ) -> Result<Result<JobConfig, crate::jobfile::JobFileError>, Status> {
        self.parses.parse(who, text).await
    }
}

/// A fresh job id: the name's slug plus 8 random hex digits, so ids are
/// readable in listings and logs yet unique without a round trip.
pub fn new_job_id(name: &str) -> String {
    let mut slug = String::new();
    for c in name.chars() {
        let c = c.to_ascii_lowercase();
        if c.is_ascii_alphanumeric() {
            slug.push(c);
        } else if !slug.ends_with('-') && !slug.is_empty() {
            slug.push('-');
        }
    }
    let slug: String = slug.trim_end_matches('-').chars().take(48).collect();
    let slug = slug.trim_end_matches('-');
    let suffix = format!("{:08x}", fastrand::u32(..));
    if slug.is_empty() { format!("job-{suffix}") } else { format!("{slug}-{suffix}") }
}

/// The owner rule: a job's owner is its creator, unless the caller's role
/// may act for others (operator, admin). Without it a user could create
/// (or re-own by update) a job as `admin`, and listings, audit and owner
/// filters would name someone who never asked for it. `current` is the
/// owner an updated job already has, which an update may keep.
fn check_owner(who: &auth::Principal, owner: &str, current: Option<&str>) -> Result<(), Status> {
    if who.role >= auth::Role::Operator || owner == who.name || current == Some(owner) {
        return Ok(());
    }
    let what = if current.is_some() { "give a job to" } else { "create a job for" };
    Err(Status::permission_denied(format!(
        "spec.owner: {} (role {}) may not {what} `{owner}`: only operators and admins act for others; leave owner out (the job is then {}'s)",
        who.name, who.role, who.name
    )))
}

fn spec_of(field: &str, spec: Option<&pb::JobSpec>) -> Result<JobConfig, Status> {
    let spec = spec.ok_or_else(|| Status::invalid_argument(format!("{field}: must be set")))?;
    Ok(convert::job_config(field, spec)?)
}

/// New input's printed fields hold no control characters
/// ([`JobConfig::check_printable`]; jobs stored before stay readable).
fn printable(field: &str, config: &JobConfig) -> Result<(), Status> {
    config.check_printable().map_err(|e| match e {
        paceline_model::task::SpecError::Invalid { field: f, reason } => {
            Status::invalid_argument(format!("{field}.{f}: {reason}"))
        }
        e => Status::invalid_argument(format!("{field}: {e}")),
    })
}

fn instances_of(list: &[u32]) -> Option<Vec<u32>> {
    (!list.is_empty()).then(|| list.to_vec())
}

/// A field-by-field diff of two task specs, one line per changed field
/// (`command: "a" → "b"`). Fields are compared through their JSON form so
/// every field the model has is covered without listing them here.
pub fn task_spec_diff(old: &TaskSpec, new: &TaskSpec) -> Vec<String> {
    let (Ok(serde_json::Value::Object(a)), Ok(serde_json::Value::Object(b))) =
        (serde_json::to_value(old), serde_json::to_value(new))
    else {
        return if old == new { vec![] } else { vec!["default_task: changed".into()] };
    };
    let keys: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    let null = serde_json::Value::Null;
    keys.into_iter()
        .filter_map(|k| {
            let (x, y) = (a.get(k).unwrap_or(&null), b.get(k).unwrap_or(&null));
            (x != y).then(|| format!("{k}: {x} → {y}"))
        })
        .collect()
}

/// What an update from `old` to `new` changes, per instance.
fn instance_diff(old: &JobConfig, new: &JobConfig) -> (Vec<u32>, Vec<u32>, Vec<u32>) {
    let (n_old, n_new) = (old.instance_count, new.instance_count);
    let changed = (0..n_old.min(n_new)).filter(|&i| old.task_spec(i) != new.task_spec(i)).collect();
    let added = (n_old..n_new).collect();
    let removed = (n_new..n_old).collect();
    (changed, added, removed)
}

/// A store error of a query: a cursor the store cannot read is the caller's token.
fn query_error(e: paceline_jobmgr::JobError) -> Status {
    match e {
        paceline_jobmgr::JobError::Invalid { reason, .. } => Status::invalid_argument(format!("page_token: {reason}")),
        e => status::job(e, ""),
    }
}

impl JobApi {
    /// One page of `query.limit` jobs that `keep` accepts, filtered before
    /// paging: the store is read in rounds of [`ROUND`] from the query's
    /// cursor until the page is full or the store has no more, so a page is
    /// short only at the end (or after [`MAX_ROUNDS`] rounds, with a token).
    /// Every store pages by job id and its cursor is the last id it returned,
    /// so a page that ends inside a round goes on after its last job's id.
    async fn filtered_page(
        &self,
        mut query: JobQuery,
        keep: impl Fn(&JobSummary) -> bool,
    ) -> Result<(Vec<JobSummary>, Option<String>), Status> {
        let limit = query.limit as usize;
        query.limit = ROUND;
        let mut items = Vec::new();
        for _ in 0..MAX_ROUNDS {
            let page = self.jobs.query(&query).await.map_err(query_error)?;
            let mut rest = page.items.into_iter();
            for s in rest.by_ref() {
                if keep(&s) {
                    items.push(s);
                    if items.len() == limit {
                        break;
                    }
                }
            }
            if items.len() == limit {
                // A next page only when this round has a match left or the
                // store has more (which may hold none: then an empty page).
                let more = rest.any(|s| keep(&s)) || page.next.is_some();
                let next = if more { items.last().map(|s| s.id.clone()) } else { None };
                return Ok((items, next));
            }
            match page.next {
                Some(cursor) => query.cursor = Some(cursor),
                None => return Ok((items, None)),
            }
        }
        Ok((items, query.cursor))
    }

    /// Checks a request's instance list against the job, naming the bad
    /// entry (`instances[2]`); returns the job for further use.
    async fn checked_instances(&self, id: &str, list: &[u32]) -> Result<paceline_jobmgr::JobInfo, Status> {
        let info = self.jobs.get(id).await.map_err(|e| status::job(e, ""))?;
        let n = info.tasks.len();
        if let Some((i, bad)) = list.iter().enumerate().find(|(_, x)| **x as usize >= n) {
            return Err(Status::invalid_argument(format!(
                "instances[{i}]: job {id} has no instance {bad} (it has {n})"
            )));
        }
        Ok(info)
    }

    async fn update_status(&self, id: &str) -> Result<Response<pb::UpdateControlResponse>, Status> {
        let info = self.jobs.get(id).await.map_err(|e| status::job(e, ""))?;
        Ok(Response::new(pb::UpdateControlResponse {
            update: info.update.as_ref().map(|u| convert::update_pb(u, &info.tasks)),
        }))
    }
}

#[tonic::async_trait]
impl JobService for JobApi {
    async fn create_job(
        &self,
        request: Request<pb::CreateJobRequest>,
    ) -> Result<Response<pb::CreateJobResponse>, Status> {
        let who = auth::principal(&request)?;
        // A spec without an owner belongs to whoever creates it.
        let mut spec = request.get_ref().spec.clone();
        if let Some(s) = spec.as_mut().filter(|s| s.owner.trim().is_empty()) {
            s.owner = who.name.clone();
        }
        let config = spec_of("spec", spec.as_ref())?;
        printable("spec", &config)?;
        check_owner(&who, &config.owner, None)?;
        who.check_pool(&config.pool)?;
        let id = new_job_id(&config.name);
        let (owner, pool, kind, instances) =
            (config.owner.clone(), config.pool.clone(), config.kind, config.instance_count);
        crate::audit::note_job(&request, &id);
        let ask = crate::quota::Ask::New { job: &id, owner: &owner, pool: &pool, tasks: u64::from(instances) };
        let quota = self.quotas.admit(&self.jobs, ask)?;
        self.jobs.create(&id, config).await.map_err(|e| status::job(e, "spec"))?;
        drop(quota);
        // Accepted whatever the hosts are (one may join), but told now if no
        // host could ever hold some instance (decision 0026).
        let warnings = crate::pending::never_fit_warnings(&self.jobs, self.hosts.as_ref(), &id);
        tracing::info!(job = %id, %owner, %pool, kind = %kind.as_str(), instances, by = %who.name, warnings = warnings.len(), "job created");
        Ok(Response::new(pb::CreateJobResponse { id, owner, warnings }))
    }

    async fn get_job(&self, request: Request<pb::GetJobRequest>) -> Result<Response<pb::GetJobResponse>, Status> {
        let id = &request.get_ref().id;
        status::required("id", id)?;
        // Another team's job, its spec (env values included) and its
        // history, are not for a user (decision 0059).
        auth::check_job_read(&request, &self.jobs, id).await?;
        let info = self.jobs.get(id).await.map_err(|e| status::job(e, ""))?;
        let mut job = convert::job_pb(&info);
        crate::pending::fill_job(&self.jobs, self.hosts.as_ref(), &mut job);
        if let Some(version) = request.get_ref().config_version {
            let config = self.jobs.config_at(id, version).await.map_err(|e| status::job(e, ""))?;
            job.spec = Some(convert::job_spec_pb(&config));
        }
        Ok(Response::new(pb::GetJobResponse { job: Some(job) }))
    }

    async fn query_jobs(
        &self,
        request: Request<pb::QueryJobsRequest>,
    ) -> Result<Response<pb::QueryJobsResponse>, Status> {
        let r = request.get_ref();
        let states = r
            .states
            .iter()
            .enumerate()
            .map(|(i, s)| convert::job_state(&format!("states[{i}]"), *s))
            .collect::<Result<Vec<JobState>, _>>()?;
        if r.limit > MAX_PAGE {
            return Err(Status::invalid_argument(format!("limit: at most {MAX_PAGE}")));
        }
        let who = auth::principal(&request)?;
        let query = JobQuery {
            states,
            owner: (!r.owner.is_empty()).then(|| r.owner.clone()),
            pool: (!r.pool.is_empty()).then(|| r.pool.clone()),
            limit: if r.limit == 0 { DEFAULT_PAGE } else { r.limit },
            cursor: (!r.page_token.is_empty()).then(|| r.page_token.clone()),
            ..JobQuery::default()
        };
        // The store filters by exact pool: one the caller may read holds only
        // jobs it may read, one it may not holds none for it.
        let every_pool = who.reads_every_pool() || query.pool.as_deref().is_some_and(|p| who.may_read_jobs_in(p));
        if query.pool.is_some() && !every_pool {
            return Ok(Response::new(pb::QueryJobsResponse::default()));
        }
        let name = r.name_contains.as_str();
        let keep = |s: &JobSummary| (every_pool || who.may_read_jobs_in(&s.pool)) && s.name.contains(name);
        let (items, next) = if every_pool && name.is_empty() {
            let page = self.jobs.query(&query).await.map_err(query_error)?;
            (page.items, page.next)
        } else {
            self.filtered_page(query, keep).await?
        };
        let jobs = items.iter().map(convert::job_summary_pb).collect();
        Ok(Response::new(pb::QueryJobsResponse { jobs, next_page_token: next.unwrap_or_default() }))
    }

    async fn update_job(
        &self,
        request: Request<pb::UpdateJobRequest>,
    ) -> Result<Response<pb::UpdateJobResponse>, Status> {
        let r = request.get_ref();
        status::required("id", &r.id)?;
        // First, so that nothing below (a spec error, a diff) tells another
        // team anything of a job it may not read.
        auth::check_job(&request, &self.jobs, &r.id).await?;
        let current = self.jobs.get(&r.id).await.map_err(|e| status::job(e, ""))?;
        // A spec without an owner keeps the job's.
        let mut spec = r.spec.clone();
        if let Some(s) = spec.as_mut().filter(|s| s.owner.trim().is_empty()) {
            s.owner = current.config.owner.clone();
        }
        let config = spec_of("spec", spec.as_ref())?;
        printable("spec", &config)?;
        check_owner(&*auth::principal(&request)?, &config.owner, Some(&current.config.owner))?;
        auth::check_pool(&request, &config.pool)?;
        if current.config.kind != config.kind {
            return Err(Status::invalid_argument("spec.kind: a job's kind cannot change"));
        }
        let (changed, added, removed) = instance_diff(&current.config, &config);
        let diff = task_spec_diff(&current.config.default_task, &config.default_task);
        let mut response = pb::UpdateJobResponse {
            update_id: String::new(),
            changed_instances: changed,
            added_instances: added,
            removed_instances: removed,
            diff,
        };
        if r.dry_run {
            return Ok(Response::new(response));
        }
        let spec = r.update.as_ref().map(convert::update_spec);
        let ask = crate::quota::Ask::Update {
            job: &r.id,
            owner: &config.owner,
            pool: &config.pool,
            tasks: u64::from(config.instance_count),
        };
        let quota = self.quotas.admit(&self.jobs, ask)?;
        response.update_id =
            self.jobs.update(&r.id, config, UpdateRequest { spec }).await.map_err(|e| status::job(e, "spec"))?;
        drop(quota);
        tracing::info!(job = %r.id, update = %response.update_id, "job update started");
        Ok(Response::new(response))
    }

    async fn kill_job(&self, request: Request<pb::KillJobRequest>) -> Result<Response<pb::KillJobResponse>, Status> {
        let r = request.get_ref();
        status::required("id", &r.id)?;
        auth::check_job(&request, &self.jobs, &r.id).await?;
        self.checked_instances(&r.id, &r.instances).await?;
        self.jobs.kill(&r.id, instances_of(&r.instances)).await.map_err(|e| status::job(e, ""))?;
        Ok(Response::new(pb::KillJobResponse {}))
    }

    async fn add_instances(
        &self,
        request: Request<pb::AddInstancesRequest>,
    ) -> Result<Response<pb::AddInstancesResponse>, Status> {
        let r = request.get_ref();
        status::required("id", &r.id)?;
        if r.count == 0 {
            return Err(Status::invalid_argument("count: must be at least 1"));
        }
        auth::check_job(&request, &self.jobs, &r.id).await?;
        let quota = self.quotas.admit(&self.jobs, crate::quota::Ask::Grow { job: &r.id, add: u64::from(r.count) })?;
        let (instances, update_id) = self.jobs.add_instances(&r.id, r.count).await.map_err(|e| status::job(e, ""))?;
        drop(quota);
        let instance_count = instances.last().map_or(0, |i| i + 1);
        tracing::info!(job = %r.id, added = instances.len(), update = %update_id, "job grown");
        Ok(Response::new(pb::AddInstancesResponse { instances, instance_count, update_id }))
    }

    async fn remove_instances(
        &self,
        request: Request<pb::RemoveInstancesRequest>,
    ) -> Result<Response<pb::RemoveInstancesResponse>, Status> {
        let r = request.get_ref();
        status::required("id", &r.id)?;
        if r.instances.is_empty() {
            return Err(Status::invalid_argument("instances: name at least one instance"));
        }
        auth::check_job(&request, &self.jobs, &r.id).await?;
        self.checked_instances(&r.id, &r.instances).await?;
        let removed = self.jobs.remove_instances(&r.id, &r.instances).await.map_err(|e| status::job(e, ""))?;
        Ok(Response::new(pb::RemoveInstancesResponse { removed }))
    }

    async fn renew_owner_lease(
        &self,
        request: Request<pb::RenewOwnerLeaseRequest>,
    ) -> Result<Response<pb::RenewOwnerLeaseResponse>, Status> {
        let r = request.get_ref();
        status::required("id", &r.id)?;
        auth::check_job(&request, &self.jobs, &r.id).await?;
        let lease_secs = self.jobs.renew_owner_lease(&r.id).await.map_err(|e| status::job(e, ""))?;
        Ok(Response::new(pb::RenewOwnerLeaseResponse { lease_secs }))
    }

    async fn restart_job(
        &self,
        request: Request<pb::RestartJobRequest>,
    ) -> Result<Response<pb::RestartJobResponse>, Status> {
        let r = request.get_ref();
        status::required("id", &r.id)?;
        auth::check_job(&request, &self.jobs, &r.id).await?;
        let info = self.checked_instances(&r.id, &r.instances).await?;
        // 0 means the job's own update batch size, as the contract says
        // (the job manager's 0 would restart everything at once).
        let batch = if r.batch_size == 0 { info.config.update.batch_size } else { r.batch_size };
        // Restarting a finished job makes it live again: it counts as new.
        let ask = crate::quota::Ask::New {
            job: &r.id,
            owner: &info.config.owner,
            pool: &info.config.pool,
            tasks: u64::from(info.config.instance_count),
        };
        let quota = if info.runtime.state.is_terminal() { Some(self.quotas.admit(&self.jobs, ask)?) } else { None };
        self.jobs.restart(&r.id, instances_of(&r.instances), batch).await.map_err(|e| status::job(e, ""))?;
        drop(quota);
        Ok(Response::new(pb::RestartJobResponse {}))
    }

    async fn delete_job(
        &self,
        request: Request<pb::DeleteJobRequest>,
    ) -> Result<Response<pb::DeleteJobResponse>, Status> {
        let id = &request.get_ref().id;
        status::required("id", id)?;
        auth::check_job(&request, &self.jobs, id).await?;
        self.jobs.delete(id).await.map_err(|e| status::job(e, ""))?;
        Ok(Response::new(pb::DeleteJobResponse {}))
    }

    async fn pause_update(
        &self,
        request: Request<pb::UpdateControlRequest>,
    ) -> Result<Response<pb::UpdateControlResponse>, Status> {
        let id = &request.get_ref().id;
        status::required("id", id)?;
        auth::check_job(&request, &self.jobs, id).await?;
        self.jobs.pause_update(id).await.map_err(|e| status::job(e, ""))?;
        self.update_status(id).await
    }

    async fn resume_update(
        &self,
        request: Request<pb::UpdateControlRequest>,
    ) -> Result<Response<pb::UpdateControlResponse>, Status> {
        let id = &request.get_ref().id;
        status::required("id", id)?;
        auth::check_job(&request, &self.jobs, id).await?;
        self.jobs.resume_update(id).await.map_err(|e| status::job(e, ""))?;
        self.update_status(id).await
    }

    async fn abort_update(
        &self,
        request: Request<pb::UpdateControlRequest>,
    ) -> Result<Response<pb::UpdateControlResponse>, Status> {
        let id = &request.get_ref().id;
        status::required("id", id)?;
        auth::check_job(&request, &self.jobs, id).await?;
        self.jobs.abort_update(id).await.map_err(|e| status::job(e, ""))?;
        self.update_status(id).await
    }

    async fn job_events(
        &self,
        request: Request<pb::JobEventsRequest>,
    ) -> Result<Response<pb::JobEventsResponse>, Status> {
        crate::auth::check_job_read(&request, &self.jobs, &request.get_ref().job_id).await?;
        crate::events::job_events(&self.jobs, request.get_ref()).await.map(Response::new)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_ids_are_slugs_with_a_random_suffix() {
        let id = new_job_id("My Web_Server!!");
        assert!(id.starts_with("my-web-server-"), "{id}");
        assert_eq!(id.len(), "my-web-server-".len() + 8);
        assert!(new_job_id("").starts_with("job-"));
        assert_ne!(new_job_id("a"), new_job_id("a"));
    }

    #[test]
    fn the_diff_names_each_changed_field() {
        let a = TaskSpec { command: "a".into(), ..TaskSpec::default() };
        let b = TaskSpec { command: "b".into(), ..TaskSpec::default() };
        assert_eq!(task_spec_diff(&a, &b), vec![r#"command: "a" → "b""#.to_string()]);
        assert!(task_spec_diff(&a, &a).is_empty());
    }
}

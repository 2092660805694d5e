//! `paceline trace record`: a live cluster's history through the public API
//! (`paceline.v1`: jobs with their specs, tasks with their events, hosts,
//! pools), turned into a trace by `paceline_sim::record`.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use paceline_model::pool::PoolEntry;
use paceline_model::task::TaskEvent;
use paceline_proto::convert;
use paceline_proto::v1 as pb;
use paceline_sim::record::{RecordedJob, RecordedTask, build};
use paceline_sim::trace::HostEvent;

use super::client::{ClientOpts, RpcError, block_on, connect};

/// A pool as the API lists it, in the pool file's form (the API's own
/// reading of its wire spec, every kind spelled out).
fn pool_entry(p: &pb::Pool) -> anyhow::Result<PoolEntry> {
    let spec = paceline_api::pools::pool_spec("spec", &p.spec.clone().unwrap_or_default())
        .map_err(|e| anyhow::anyhow!("pool {}: {e}", p.path))?;
    Ok(PoolEntry::from_spec(&p.path, &spec))
}

fn task_event(e: &pb::TaskEvent) -> Option<TaskEvent> {
    Some(TaskEvent {
        run: e.run,
        from: convert::task_state("from", e.from).ok(),
        to: convert::task_state("to", e.to).ok()?,
        at_ms: e.at_ms,
        host: (!e.host.is_empty()).then(|| e.host.clone()),
        reason: e.reason.clone(),
        message: e.message.clone(),
    })
}

pub fn record(out: PathBuf, name: String, opts: ClientOpts) -> anyhow::Result<ExitCode> {
    block_on(async move {
        let api = connect(&opts).await?;
        let mut jobs_api = pb::job_service_client::JobServiceClient::new(api.clone());
        let mut tasks_api = pb::task_service_client::TaskServiceClient::new(api.clone());
        let mut hosts_api = pb::host_service_client::HostServiceClient::new(api.clone());
        let mut pools_api = pb::pool_service_client::PoolServiceClient::new(api);
        let now_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_millis() as u64;

        let mut pools: Vec<PoolEntry> = Vec::new();
        for p in pools_api.list_pools(pb::ListPoolsRequest {}).await.map_err(RpcError)?.into_inner().pools {
            if p.path != "/" {
                pools.push(pool_entry(&p)?);
            }
        }
        // Parents before children.
        pools.sort_by_key(|p| (p.path.matches('/').count(), p.path.clone()));
        let mut hosts: Vec<HostEvent> = Vec::new();
        for h in hosts_api.list_hosts(pb::ListHostsRequest {}).await.map_err(RpcError)?.into_inner().hosts {
            hosts.push(HostEvent {
                name: h.hostname.clone(),
                resources: convert::resources(h.total.as_ref()),
                attributes: h.attributes.into_iter().collect(),
            });
        }
        hosts.sort_by(|a, b| a.name.cmp(&b.name));

        let mut ids = Vec::new();
        let mut q = pb::QueryJobsRequest { limit: 1_000, ..Default::default() };
        loop {
            let page = jobs_api.query_jobs(q.clone()).await.map_err(RpcError)?.into_inner();
            ids.extend(page.jobs.into_iter().map(|j| j.id));
            if page.next_page_token.is_empty() {
                break;
            }
            q.page_token = page.next_page_token;
        }
        let mut jobs = Vec::new();
        for id in ids {
            let job = jobs_api
                .get_job(pb::GetJobRequest { id: id.clone(), config_version: None })
                .await
                .map_err(RpcError)?
                .into_inner()
                .job;
            let Some(job) = job else { continue };
            let spec = job.spec.clone().with_context(|| format!("job {id} has no spec"))?;
            let config = convert::job_config("spec", &spec).map_err(|e| anyhow::anyhow!("job {id}: {e}"))?;
            let created_ms = job.status.as_ref().map_or(now_ms, |s| s.created_at_ms);
            let listed = super::client::task::list_all(&mut tasks_api, &id, &[]).await?;
            let mut tasks = Vec::new();
            for t in listed {
                let events = tasks_api
                    .task_events(pb::TaskEventsRequest {
                        task: Some(pb::TaskRef { job_id: id.clone(), instance: t.instance }),
                        // The server keeps the newest `limit`: a task's whole
                        // history is needed (its first runs make `fail_runs`).
                        limit: u32::MAX,
                    })
                    .await
                    .map_err(RpcError)?
                    .into_inner()
                    .events;
                tasks.push(RecordedTask {
                    instance: t.instance,
                    events: events.iter().filter_map(task_event).collect(),
                });
            }
            jobs.push(RecordedJob { id, config, created_ms, tasks });
        }
        let (header, events) = build(&name, pools, hosts, jobs, now_ms);
        let file = std::fs::File::create(&out).with_context(|| format!("creating {}", out.display()))?;
        let mut w = paceline_sim::trace::Writer::new(std::io::BufWriter::new(file), &header)?;
        for e in &events {
            w.event(e.at, &e.event)?;
        }
        let lines = w.lines();
        w.finish()?;
        eprintln!("{}: {lines} lines ({})", out.display(), header.notes.join("; "));
        Ok(())
    })
}

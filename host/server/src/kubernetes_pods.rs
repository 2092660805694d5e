//! The pod scheduler's port onto the job manager
//! ([`paceline_kubernetes::PodJobs`], decision 0055): a pending pod (or a
//! gang of them) is a job created, withdrawn (killed) and asked why it
//! waits like any other, so pools, fairness, gangs, placement plugins and
//! why-pending apply to it unchanged.

use std::sync::Arc;

use async_trait::async_trait;
use paceline_hostmgr::HostAccess;
use paceline_jobmgr::{JobError, JobManager};
use paceline_kubernetes::{PodJobs, Submit};
use paceline_model::job::JobConfig;

/// [`PodJobs`] over this process's job manager and hosts.
#[derive(Clone)]
pub struct ClusterPodJobs {
    jobs: Arc<JobManager>,
    hosts: Arc<dyn HostAccess>,
}

impl std::fmt::Debug for ClusterPodJobs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterPodJobs").finish_non_exhaustive()
    }
}

impl ClusterPodJobs {
    /// The port over `cluster`'s job manager and hosts.
    pub fn new(cluster: &crate::cluster::Cluster) -> Self {
        ClusterPodJobs { jobs: cluster.jobs.clone(), hosts: cluster.hosts.clone() }
    }
}

#[async_trait]
impl PodJobs for ClusterPodJobs {
    async fn submit(&self, id: &str, config: JobConfig) -> Submit {
        match self.jobs.create(id, config).await {
            Ok(_) => Submit::Created,
            Err(JobError::State(m)) if m.contains("already exists") => Submit::Exists,
            Err(e @ (JobError::Invalid { .. } | JobError::Resmgr(_) | JobError::Plugin(_))) => {
                Submit::Refused(e.to_string())
            }
            Err(e) => Submit::Failed(e.to_string()),
        }
    }

    async fn withdraw(&self, id: &str) {
        if let Err(e) = self.jobs.kill(id, None).await {
            tracing::debug!(job = id, error = %e, "pod scheduler: job not killed");
        }
    }

    fn why_pending(&self, id: &str) -> Option<paceline_model::pending::Why> {
        let report = self.jobs.why_pending(id, None, || self.hosts.census());
        report.tasks.into_iter().next().map(|(_, why)| why)
    }

    async fn job_live(&self, id: &str) -> Option<bool> {
        match self.jobs.get(id).await {
            Ok(info) => Some(!info.runtime.state.is_terminal()),
            Err(_) => None,
        }
    }
}

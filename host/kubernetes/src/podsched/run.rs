//! The pod scheduler's loop: withdraw the jobs of pods that went before
//! they were bound, admit new pods (refuse, group, submit), and report on
//! the pods that wait.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use paceline_model::job::{JobConfig, JobKind, Sla};
use tracing::{debug, warn};

use super::units::{self, Unit};
use super::{Phase, PodJobs, PodRef, PodSchedulerConfig, Sched, Submit};
use crate::provider::KubernetesProvider;
use crate::state::lock;

/// Waiting pods asked why they wait per report (once a second).
const ASKED_PER_REPORT: usize = 200;

/// Refused pods are judged again this often.
const REJUDGE_REFUSED: Duration = Duration::from_secs(30);

/// Jobs submitted at once. The job manager enters every create waiting for
/// its lock in one hold (decision 0062), and that lock is shared with the
/// placement rounds and the run updates: a few dozen creates in flight left
/// the rounds a few dozen pods each, binding in bursts with the API server
/// idle between them. About a round's worth keeps the engine's rounds full.
const SUBMITS_AT_ONCE: usize = 1024;

/// The `PodScheduled=False` reason of a pod that was reported waiting for
/// room and now only waits its turn in its pool's queue: not
/// `Unschedulable`, which a cluster autoscaler adds nodes for.
pub(crate) const WAITING_FOR_TURN: &str = "WaitingForTurn";

pub(crate) struct Runner {
    provider: KubernetesProvider,
    config: PodSchedulerConfig,
    jobs: Arc<dyn PodJobs>,
    state: Arc<Mutex<Sched>>,
    /// Where the next report starts among the waiting pods.
    cursor: Mutex<usize>,
}

impl Runner {
    pub(crate) fn new(
        provider: KubernetesProvider,
        config: PodSchedulerConfig,
        jobs: Arc<dyn PodJobs>,
        state: Arc<Mutex<Sched>>,
    ) -> Self {
        Runner { provider, config, jobs, state, cursor: Mutex::new(0) }
    }

    pub(crate) async fn run(self) {
        let mut tick = tokio::time::interval(self.config.loop_interval.max(Duration::from_millis(10)));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut last_report = Instant::now();
        let mut last_retry = Instant::now();
        loop {
            tick.tick().await;
            {
                let st = lock(&self.state);
                // Pools come from namespaces; the provider must know the
                // nodes' taints and the bound pods before anything is judged.
                if !(st.ns_synced && st.pods_synced && self.provider.is_synced()) {
                    continue;
                }
            }
            self.withdraw_gone().await;
            self.admit().await;
            if last_report.elapsed() >= Duration::from_secs(1) {
                last_report = Instant::now();
                self.report().await;
            }
            if last_retry.elapsed() >= REJUDGE_REFUSED {
                // What refused them may have changed elsewhere (a pool
                // created, a node labelled); the same refusal writes nothing.
                last_retry = Instant::now();
                for e in lock(&self.state).pods.values_mut() {
                    if matches!(e.phase, Phase::Refused(_)) {
                        e.phase = Phase::New;
                    }
                }
            }
        }
    }

    /// Pods that left the pending watch: bound by this provider (their job
    /// carries on), or deleted or bound by someone else before Paceline
    /// bound them (their job is withdrawn; a gang's other members wait for
    /// a whole gang again).
    async fn withdraw_gone(&self) {
        let mut withdraw = Vec::new();
        {
            let mut st = lock(&self.state);
            let gone: Vec<String> = st.pods.iter().filter(|(_, e)| e.gone).map(|(u, _)| u.clone()).collect();
            for uid in gone {
                let Some(e) = st.pods.remove(&uid) else { continue };
                let Phase::Submitted { job, .. } = e.phase else { continue };
                if self.provider.binds(&e.r.key()) {
                    continue;
                }
                for other in st.pods.values_mut() {
                    if matches!(&other.phase, Phase::Submitted { job: j, .. } if *j == job) {
                        other.phase = Phase::New;
                        other.attempt += 1;
                    }
                }
                withdraw.push(job);
            }
        }
        withdraw.sort();
        withdraw.dedup();
        for job in withdraw {
            debug!(job, "pod scheduler: a pod went before it was bound; its job is withdrawn");
            self.jobs.withdraw(&job).await;
            self.provider.forget_pod_job(&job);
        }
    }

    /// Judges new pods (and gang members still waiting for their group)
    /// and submits the jobs of those that can be.
    async fn admit(&self) {
        let taints = self.provider.taint_attributes();
        let units = {
            let mut st = lock(&self.state);
            let units = units::collect(&mut st, &taints, self.config.default_pool.as_deref());
            // Submitted below; marked now so that the next tick does not
            // submit them again while this one is still at it.
            for u in &units {
                for (uid, _, _) in &u.pods {
                    if let Some(e) = st.pods.get_mut(uid) {
                        e.phase = Phase::Submitted { job: u.id.clone(), attempt: e.attempt };
                    }
                }
            }
            units
        };
        if units.is_empty() {
            return;
        }
        let results: Vec<(Unit, Submit)> = futures::stream::iter(units)
            .map(|u| async move {
                self.provider.set_pod_job(&u.id, u.pods.iter().map(|p| p.1.clone()).collect());
                let submitted = self.jobs.submit(&u.id, job_config(&u)).await;
                let submitted = match submitted {
                    Submit::Exists => match self.jobs.job_live(&u.id).await {
                        // Submitted by an earlier process: adopted.
                        Some(true) => Submit::Created,
                        Some(false) => Submit::Exists,
                        None => Submit::Failed("the job exists and cannot be read".into()),
                    },
                    other => other,
                };
                (u, submitted)
            })
            .buffer_unordered(SUBMITS_AT_ONCE)
            .collect()
            .await;
        let mut st = lock(&self.state);
        for (u, submitted) in results {
            if submitted == Submit::Created {
                continue;
            }
            self.provider.forget_pod_job(&u.id);
            for (uid, _, _) in &u.pods {
                let Some(e) = st.pods.get_mut(uid) else { continue };
                match &submitted {
                    Submit::Created => {}
                    // Its job ended while the pod still waits: another one.
                    Submit::Exists => {
                        e.attempt += 1;
                        e.phase = Phase::New;
                    }
                    Submit::Refused(why) => e.phase = Phase::Refused(why.clone()),
                    Submit::Failed(why) => {
                        warn!(
                            pod = e.r.key(),
                            error = why,
                            "pod scheduler: its job cannot be created now; tried again"
                        );
                        e.phase = Phase::New;
                    }
                }
            }
        }
    }

    /// Writes the condition (and, rate-limited, an Event) of pods that have
    /// waited past `report_after`, at most `max_reports_per_sec` of them;
    /// a pod whose job ended while it still waits gets another job.
    async fn report(&self) {
        let due: Vec<(String, PodRef, Phase)> = {
            let st = lock(&self.state);
            st.pods
                .iter()
                .filter(|(_, e)| !e.gone && e.first_seen.elapsed() >= self.config.report_after)
                .map(|(u, e)| (u.clone(), e.r.clone(), e.phase.clone()))
                .collect()
        };
        // Never-reported pods first, then the rest from a cursor that moves
        // on each time, and at most `ASKED_PER_REPORT` of them asked about:
        // why-pending counts the hosts, which must not happen for every one
        // of ten thousand waiting pods every second.
        let mut due = due;
        let start = {
            let mut cursor = lock(&self.cursor);
            *cursor = cursor.wrapping_add(ASKED_PER_REPORT);
            *cursor % due.len().max(1)
        };
        due.rotate_left(start);
        let fresh: std::collections::HashSet<String> = {
            let st = lock(&self.state);
            due.iter()
                .filter(|d| st.pods.get(&d.0).is_some_and(|e| e.reported.is_none()))
                .map(|d| d.0.clone())
                .collect()
        };
        due.sort_by_key(|d| !fresh.contains(&d.0));
        due.truncate(ASKED_PER_REPORT);
        let mut reports = Vec::new();
        for (uid, r, phase) in due {
            let (reason, message) = match phase {
                Phase::New => continue,
                Phase::Refused(why) => ("SchedulerError", why),
                Phase::Grouped(why) => ("Unschedulable", why),
                Phase::Submitted { job, .. } => match self.jobs.why_pending(&job) {
                    // Waiting its turn (admission, the next round) is not
                    // reported: kube-scheduler does not mark the pods in its
                    // queue either, and `Unschedulable` is what a cluster
                    // autoscaler adds nodes for. Under a backlog that was
                    // most pods, each a patch and an Event the API server
                    // handled instead of bindings. A pod reported before
                    // (it did not fit, then room came) has its condition
                    // rewritten once, without an Event, so that it no
                    // longer says `Unschedulable`.
                    Some(why) if why.kind == paceline_model::pending::PendingKind::AdmissionOrder => {
                        (WAITING_FOR_TURN, why.text)
                    }
                    Some(why) => ("Unschedulable", why.text),
                    None => {
                        if self.jobs.job_live(&job).await == Some(false) && !self.provider.binds(&r.key()) {
                            let mut st = lock(&self.state);
                            if let Some(e) = st.pods.get_mut(&uid) {
                                e.attempt += 1;
                                e.phase = Phase::New;
                            }
                            self.provider.forget_pod_job(&job);
                        }
                        continue;
                    }
                },
            };
            let message = format!("paceline: {message}");
            let event = {
                let mut st = lock(&self.state);
                let Some(e) = st.pods.get_mut(&uid) else { continue };
                // Waiting its turn is written only over an earlier report.
                if e.reported.as_deref() == Some(message.as_str()) || reason == WAITING_FOR_TURN && e.reported.is_none()
                {
                    continue;
                }
                e.reported = Some(message.clone());
                let event = reason != WAITING_FOR_TURN
                    && e.last_event.is_none_or(|t| t.elapsed() >= self.config.event_interval);
                if event {
                    e.last_event = Some(Instant::now());
                }
                event
            };
            reports.push((r, reason, message, event));
            if reports.len() >= self.config.max_reports_per_sec.max(1) {
                break;
            }
        }
        let client = self.provider.client();
        let name = self.config.scheduler_name.clone();
        futures::stream::iter(reports)
            .for_each_concurrent(16, |(r, reason, message, event)| {
                let client = client.clone();
                let name = name.clone();
                async move { super::report::write(&client, &name, &r, reason, &message, event).await }
            })
            .await;
    }
}

fn job_config(u: &Unit) -> JobConfig {
    let n = u.pods.len() as u32;
    let first = &u.pods[0];
    let mut overrides = BTreeMap::new();
    for (i, (_, _, task)) in u.pods.iter().enumerate().skip(1) {
        if *task != first.2 {
            overrides.insert(i as u32, task.clone());
        }
    }
    let names: Vec<&str> = u.pods.iter().map(|p| p.1.name.as_str()).collect();
    let priority = u.priority;
    JobConfig {
        name: u.gang.as_ref().map_or_else(|| first.1.name.clone(), |g| g.name.clone()),
        owner: first.1.namespace.clone(),
        pool: u.pool.clone(),
        kind: JobKind::Batch,
        instance_count: n,
        sla: Sla {
            min_running_instances: (n > 1).then_some(n),
            // The pod's priority (its priority class's value); negative ones are 0.
            priority: u32::try_from(priority.max(0)).unwrap_or(0),
            // Preemptible (elastic shares above the pool's reservation); a
            // preempted pod is evicted, as its PodDisruptionBudgets allow.
            preemptible: true,
            // Eviction deletes the pod and its owner makes another (a new
            // pod, a new job): this job has nothing left to run.
            kill_on_preempt: true,
            ..Sla::default()
        },
        default_task: first.2.clone(),
        instance_overrides: overrides,
        description: format!(
            "pods {}/{} (scheduled by Paceline, owned by Kubernetes)",
            first.1.namespace,
            names.join(",")
        ),
        ..JobConfig::default()
    }
}

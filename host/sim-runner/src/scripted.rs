//! The `sim` provider with each launch's `SIM_*` environment filled in
//! from the trace's run scripts.

use super::*;

/// How each task's runs behave, by (job, instance), read by [`Scripted`].
#[derive(Debug, Default)]
pub(crate) struct Scripts {
    pub(crate) jobs: BTreeMap<String, (RunScript, Vec<RunScript>)>,
}

/// The `sim` provider with each launch's `SIM_*` environment filled in from
/// the trace's run scripts (a job spec of the trace says nothing about how
/// its runs behave; the trace's `run`/`runs` do).
#[derive(Debug)]
pub(crate) struct Scripted {
    pub(crate) sim: SimProvider,
    pub(crate) scripts: Arc<Mutex<Scripts>>,
}

pub(crate) fn script_env(s: RunScript, env: &mut BTreeMap<String, String>) {
    use paceline_hostmgr::sim::script::vars;
    // At least 1 ms: a run never ends inside the step that launched it.
    match s.ms {
        Some(ms) => {
            env.insert(vars::DURATION_MS.into(), ms.max(1).to_string());
        }
        None if s.exit != 0 || s.fail_runs > 0 => {
            env.insert(vars::DURATION_MS.into(), "1".into());
        }
        None => {}
    }
    if s.exit != 0 {
        env.insert(vars::EXIT_CODE.into(), s.exit.to_string());
    }
    if s.fail_runs > 0 {
        env.insert(vars::FAIL_RUNS.into(), s.fail_runs.to_string());
    }
}

#[async_trait]
impl Provider for Scripted {
    fn name(&self) -> &'static str {
        self.sim.name()
    }

    async fn start(&self, events: mpsc::Sender<ProviderEvent>) -> Result<(), ProviderError> {
        self.sim.start(events).await
    }

    async fn launch(&self, host: &str, mut runs: Vec<LaunchRequest>) -> Result<(), ProviderError> {
        {
            let scripts = self.scripts.lock().unwrap_or_else(|e| e.into_inner());
            for r in &mut runs {
                let job = r.env.get("PACELINE_JOB_ID").cloned().unwrap_or_default();
                let instance: usize = r.env.get("PACELINE_INSTANCE").and_then(|i| i.parse().ok()).unwrap_or(0);
                if let Some((default, per)) = scripts.jobs.get(&job) {
                    script_env(per.get(instance).copied().unwrap_or(*default), &mut r.env);
                }
            }
        }
        self.sim.launch(host, runs).await
    }

    async fn kill(&self, host: &str, run_id: &str, grace: Option<Duration>) -> Result<(), ProviderError> {
        self.sim.kill(host, run_id, grace).await
    }

    async fn acknowledge(&self, host: &str, run_id: &str, seq: u64) -> Result<(), ProviderError> {
        self.sim.acknowledge(host, run_id, seq).await
    }

    async fn reconcile(&self, host: &str, expected: Vec<String>) -> Result<(), ProviderError> {
        self.sim.reconcile(host, expected).await
    }

    async fn read_log(
        &self,
        host: &str,
        run_id: &str,
        stream: LogStream,
        offset: u64,
        max: u64,
    ) -> Result<LogChunk, ProviderError> {
        self.sim.read_log(host, run_id, stream, offset, max).await
    }
}

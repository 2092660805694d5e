//! `paceline task …`: the instances of a job, their logs and state history.

use std::io::Write as _;

use clap::{Args, Subcommand};
use paceline_proto::v1 as pb;
use pb::task_service_client::TaskServiceClient;
use serde_json::json;

use super::output::{self, Table, emit, fields, or_dash};
use super::{ClientOpts, RpcError, block_on, connect, parse_enum, render};

/// `paceline task`.
#[derive(Debug, Args)]
pub struct TaskArgs {
    #[command(flatten)]
    opts: ClientOpts,
    #[command(subcommand)]
    cmd: TaskCommand,
}

/// Task commands.
#[derive(Debug, Subcommand)]
pub enum TaskCommand {
    /// List a job's tasks.
    List {
        /// Job id.
        job: String,
        /// Only tasks in this state (repeatable): pending, running, failed, …
        #[arg(long = "state", value_name = "STATE")]
        states: Vec<String>,
    },
    /// Show one task.
    Get {
        /// Job id.
        job: String,
        /// Instance number.
        instance: u32,
    },
    /// Kill one task (the job keeps its other instances).
    Kill {
        /// Job id.
        job: String,
        /// Instance number.
        instance: u32,
    },
    /// Start a new run of one task.
    Restart {
        /// Job id.
        job: String,
        /// Instance number.
        instance: u32,
    },
    /// Write a run's stdout (or stderr) to stdout, byte for byte.
    Logs {
        /// Job id.
        job: String,
        /// Instance number.
        instance: u32,
        /// Stderr instead of stdout.
        #[arg(long)]
        stderr: bool,
        /// Keep streaming while the run writes more, until it ends.
        #[arg(short, long)]
        follow: bool,
        /// Run number; 0 for the current run.
        #[arg(long, default_value_t = 0)]
        run: u64,
        /// Start offset in bytes; negative counts from the end.
        #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
        offset: i64,
    },
    /// Show a task's state changes, oldest first.
    Events {
        /// Job id.
        job: String,
        /// Instance number.
        instance: u32,
    },
}

/// Runs a task command.
pub fn run(args: TaskArgs) -> anyhow::Result<std::process::ExitCode> {
    block_on(exec(args.opts, args.cmd))
}

/// Every task of `job_id` in `states` (empty: all), page by page: the
/// server sends at most 5,000 tasks a page, so a large job is several
/// calls, never one reply over the 4 MiB message limit.
pub async fn list_all(
    client: &mut TaskServiceClient<super::Api>,
    job_id: &str,
    states: &[i32],
) -> Result<Vec<pb::Task>, RpcError> {
    let mut tasks = Vec::new();
    let mut page_token = String::new();
    loop {
        let request =
            pb::ListTasksRequest { job_id: job_id.to_string(), states: states.to_vec(), limit: 0, page_token };
        let page = client.list_tasks(request).await.map_err(RpcError)?.into_inner();
        tasks.extend(page.tasks);
        // An older server sends no token: its one reply was everything.
        if page.next_page_token.is_empty() {
            return Ok(tasks);
        }
        page_token = page.next_page_token;
    }
}

fn task_ref(job_id: String, instance: u32) -> pb::TaskRef {
    pb::TaskRef { job_id, instance }
}

async fn exec(opts: ClientOpts, cmd: TaskCommand) -> anyhow::Result<()> {
    let out = opts.output;
    // Filters are checked before connecting.
    let states = match &cmd {
        TaskCommand::List { states, .. } => states
            .iter()
            .map(|s| parse_enum("task state", "TASK_STATE_", s, pb::TaskState::from_str_name).map(|e| e as i32))
            .collect::<anyhow::Result<Vec<_>>>()?,
        _ => Vec::new(),
    };
    let mut client = TaskServiceClient::new(connect(&opts).await?);
    match cmd {
        TaskCommand::List { job, .. } => {
            let tasks = list_all(&mut client, &job, &states).await?;
            let value = serde_json::Value::Array(tasks.iter().map(render::task).collect());
            emit(out, &value, || task_table(&tasks))
        }
        TaskCommand::Get { job, instance } => {
            let r = pb::GetTaskRequest { task: Some(task_ref(job.clone(), instance)) };
            let task = client.get_task(r).await.map_err(RpcError)?.into_inner().task;
            let task = task.ok_or_else(|| anyhow::anyhow!("the server answered with no task for {job}/{instance}"))?;
            emit(out, &render::task(&task), || task_fields(&task))
        }
        TaskCommand::Kill { job, instance } => {
            client.kill_task(task_ref(job.clone(), instance)).await.map_err(RpcError)?;
            emit(out, &json!({"job_id": job, "instance": instance, "result": "killing"}), || {
                format!("{job}/{instance}: killing\n")
            })
        }
        TaskCommand::Restart { job, instance } => {
            client.restart_task(task_ref(job.clone(), instance)).await.map_err(RpcError)?;
            emit(out, &json!({"job_id": job, "instance": instance, "result": "restarting"}), || {
                format!("{job}/{instance}: restarting\n")
            })
        }
        TaskCommand::Logs { job, instance, stderr, follow, run, offset } => {
            let r = pb::TaskLogsRequest {
                task: Some(task_ref(job, instance)),
                run,
                stream: if stderr { "stderr" } else { "stdout" }.into(),
                offset,
                follow,
            };
            let mut stream = client.task_logs(r).await.map_err(RpcError)?.into_inner();
            // Logs are the task's bytes, not ours to format: -o does not apply.
            let mut stdout = std::io::stdout().lock();
            while let Some(chunk) = stream.message().await.map_err(RpcError)? {
                stdout.write_all(&chunk.data)?;
                // Flushed per chunk so `--follow` shows output as it arrives.
                stdout.flush()?;
            }
            Ok(())
        }
        TaskCommand::Events { job, instance } => {
            let r = pb::TaskEventsRequest { task: Some(task_ref(job, instance)), limit: 0 };
            let events = client.task_events(r).await.map_err(RpcError)?.into_inner().events;
            let value = serde_json::Value::Array(events.iter().map(render::task_event).collect());
            emit(out, &value, || {
                let mut t = Table::new(&["TIME", "RUN", "FROM", "TO", "HOST", "REASON", "MESSAGE"]);
                for e in &events {
                    t.row(vec![
                        output::time(e.at_ms),
                        e.run.to_string(),
                        render::task_state(e.from),
                        render::task_state(e.to),
                        or_dash(&e.host),
                        or_dash(&e.reason),
                        e.message.clone(),
                    ]);
                }
                t.render()
            })
        }
    }
}

fn health(h: Option<bool>) -> String {
    match h {
        Some(true) => "healthy".into(),
        Some(false) => "unhealthy".into(),
        None => "-".into(),
    }
}

fn task_table(tasks: &[pb::Task]) -> String {
    let mut t = Table::new(&[
        "INSTANCE",
        "STATE",
        "RUN",
        "HOST",
        "PORTS",
        "GPU",
        "USED/RESERVED",
        "HEALTH",
        "FAILURES",
        "REASON",
    ]);
    for task in tasks {
        // A waiting task says why it waits; otherwise the last change's reason.
        let reason = if task.pending_reason.is_empty() { &task.reason } else { &task.pending_reason };
        t.row(vec![
            task.instance.to_string(),
            render::task_state(task.state),
            task.run.to_string(),
            or_dash(&task.host),
            output::pairs(task.ports.iter().collect::<std::collections::BTreeMap<_, _>>()),
            render::task_gpu_short(task),
            render::task_usage_short(task),
            health(task.healthy),
            task.failure_count.to_string(),
            or_dash(reason),
        ]);
    }
    t.render()
}

fn task_fields(t: &pb::Task) -> String {
    fields(&[
        ("task", format!("{}/{}", t.job_id, t.instance)),
        ("state", render::task_state(t.state)),
        ("goal", or_dash(&t.goal)),
        ("run", format!("{} ({})", t.run, or_dash(&t.run_id))),
        ("config version", t.config_version.to_string()),
        ("host", or_dash(&t.host)),
        ("ports", output::pairs(t.ports.iter().collect::<std::collections::BTreeMap<_, _>>())),
        ("gpu", render::task_gpu(t)),
        ("resources", render::task_usage(t)),
        ("health", health(t.healthy)),
        ("failures", t.failure_count.to_string()),
        ("started", output::time(t.started_at_ms)),
        ("completed", output::time(t.completed_at_ms)),
        ("reason", or_dash(&t.reason)),
        ("message", or_dash(&t.message)),
        ("pending reason", or_dash(&t.pending_reason)),
        ("pending kind", or_dash(&t.pending_kind)),
    ])
}

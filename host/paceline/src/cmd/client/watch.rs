//! `paceline watch`: one line per change to jobs, tasks and pools, until
//! interrupted or the server ends the stream.

use clap::{Args, ValueEnum};
use paceline_proto::v1 as pb;
use pb::watch_service_client::WatchServiceClient;

use super::{ClientOpts, Output, RpcError, block_on, connect, render};

/// `paceline watch`.
#[derive(Debug, Args)]
pub struct WatchArgs {
    #[command(flatten)]
    opts: ClientOpts,
    /// Only changes of this job.
    #[arg(long)]
    job: Option<String>,
    /// Only these kinds of change (repeatable or comma-separated).
    #[arg(long, value_enum, value_delimiter = ',')]
    kind: Vec<Kind>,
    /// Start after this revision (0: from now). Resume with the last revision seen.
    #[arg(long, default_value_t = 0)]
    from_revision: u64,
}

/// What changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Kind {
    /// Job status changes.
    Job,
    /// Task changes.
    Task,
    /// Pool spec or status changes.
    Pool,
}

/// Runs `watch`.
pub fn run(args: WatchArgs) -> anyhow::Result<std::process::ExitCode> {
    block_on(exec(args))
}

async fn exec(args: WatchArgs) -> anyhow::Result<()> {
    let kinds = args
        .kind
        .iter()
        .map(|k| match k {
            Kind::Job => "job",
            Kind::Task => "task",
            Kind::Pool => "pool",
        })
        .map(str::to_owned)
        .collect();
    let mut client = WatchServiceClient::new(connect(&args.opts).await?);
    let request = pb::WatchRequest { from_revision: args.from_revision, job_id: args.job.unwrap_or_default(), kinds };
    let mut stream = client.watch(request).await.map_err(RpcError)?.into_inner();
    loop {
        let event = tokio::select! {
            e = stream.message() => e.map_err(RpcError)?,
            // Ctrl-C is how a watch normally ends, so it is a success.
            _ = tokio::signal::ctrl_c() => return Ok(()),
        };
        let Some(event) = event else { return Ok(()) };
        match args.opts.output {
            Output::Table => println!("{}", render::printable(&line(&event))),
            // One compact object per line (JSON Lines) so the output can be piped.
            Output::Json => println!("{}", serde_json::to_string(&render::watch_event(&event))?),
            Output::Yaml => print!("---\n{}", serde_yaml::to_string(&render::watch_event(&event))?),
        }
    }
}

/// One event as one line: revision, kind, what and its new state.
pub fn line(e: &pb::WatchEvent) -> String {
    use pb::watch_event::Change;
    let what = match &e.change {
        Some(Change::Job(j)) => {
            let status = j.status.clone().unwrap_or_default();
            let counts: std::collections::BTreeMap<_, _> = status.task_counts.iter().collect();
            format!("job   {} {} {}", j.id, render::job_state(status.state), super::output::pairs(counts))
        }
        Some(Change::Task(t)) => {
            let mut s = format!("task  {}/{} {} run={}", t.job_id, t.instance, render::task_state(t.state), t.run);
            if !t.host.is_empty() {
                s.push_str(&format!(" host={}", t.host));
            }
            if !t.reason.is_empty() {
                s.push_str(&format!(" reason={}", t.reason));
            }
            s
        }
        Some(Change::Pool(p)) => format!("pool  {p}"),
        None => "(empty)".into(),
    };
    format!("{:>8} {what}", e.revision)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_print_as_one_line() {
        let e = pb::WatchEvent {
            revision: 42,
            change: Some(pb::watch_event::Change::Task(pb::Task {
                job_id: "j1".into(),
                instance: 2,
                state: pb::TaskState::Running as i32,
                run: 1,
                host: "h1".into(),
                ..Default::default()
            })),
        };
        assert_eq!(line(&e), "      42 task  j1/2 RUNNING run=1 host=h1");
    }
}

//! `paceline audit`: the server's audit log, newest first, filtered by
//! principal, job, method and time (docs/operations.md, "Audit log").

use clap::Args;
use paceline_proto::v1 as pb;
use pb::audit_service_client::AuditServiceClient;
use serde_json::json;

use super::output::{self, Table, emit};
use super::{ClientOpts, Output, RpcError, bad_input, block_on, connect};

/// `paceline audit`.
#[derive(Debug, Args)]
pub struct AuditArgs {
    #[command(flatten)]
    opts: ClientOpts,
    /// Only this principal's records (a `user` sees only their own anyway).
    #[arg(long)]
    user: Option<String>,
    /// Only records about this job id.
    #[arg(long)]
    job: Option<String>,
    /// Only this method: `KillJob`, or a full path such as `/paceline.v1.JobService/KillJob`.
    #[arg(long)]
    method: Option<String>,
    /// Only records since then: a duration back from now (`90s`, `15m`, `1h`, `7d`) or
    /// an RFC 3339 time (`2026-03-01T12:00:00Z`).
    #[arg(long)]
    since: Option<String>,
    /// Only records before then (same forms as --since).
    #[arg(long)]
    until: Option<String>,
    /// At most this many records (1-1000).
    #[arg(long, default_value_t = 100)]
    limit: u32,
    /// Print JSON (the same as `-o json`).
    #[arg(long)]
    json: bool,
}

/// Runs `paceline audit`.
pub fn run(args: AuditArgs) -> anyhow::Result<std::process::ExitCode> {
    block_on(exec(args))
}

async fn exec(args: AuditArgs) -> anyhow::Result<()> {
    let request = request(&args, now_ms())?;
    let mut opts = args.opts;
    if args.json {
        opts.output = Output::Json;
    }
    let mut client = AuditServiceClient::new(connect(&opts).await?);
    let records = client.list_audit_records(request).await.map_err(RpcError)?.into_inner().records;
    let value = serde_json::Value::Array(records.iter().map(record_json).collect());
    emit(opts.output, &value, || table(&records))
}

/// The request, checked before anything is sent (exit code 2 when wrong).
fn request(args: &AuditArgs, now: u64) -> anyhow::Result<pb::ListAuditRecordsRequest> {
    let since = args.since.as_deref().map(|s| parse_time("--since", s, now)).transpose()?;
    let until = args.until.as_deref().map(|s| parse_time("--until", s, now)).transpose()?;
    if !(1..=1000).contains(&args.limit) {
        return Err(bad_input(format!("--limit: {} is not between 1 and 1000", args.limit)));
    }
    if let (Some(s), Some(u)) = (since, until)
        && u <= s
    {
        return Err(bad_input("--until must be after --since"));
    }
    Ok(pb::ListAuditRecordsRequest {
        principal: args.user.clone().unwrap_or_default(),
        job_id: args.job.clone().unwrap_or_default(),
        method: args.method.clone().unwrap_or_default(),
        since_ms: since.unwrap_or(0),
        until_ms: until.unwrap_or(0),
        limit: args.limit,
    })
}

fn record_json(r: &pb::AuditRecord) -> serde_json::Value {
    json!({
        "at_ms": r.at_ms,
        "time": output::time(r.at_ms),
        "id": r.id,
        "principal": r.principal,
        "role": r.role,
        "method": r.method,
        "target": r.target,
        "job_id": r.job_id,
        "summary": r.summary,
        "code": r.code,
        "message": r.message,
    })
}

fn table(records: &[pb::AuditRecord]) -> String {
    let mut t = Table::new(&["TIME (UTC)", "PRINCIPAL", "ROLE", "METHOD", "TARGET", "OUTCOME", "SUMMARY"]);
    for r in records {
        let outcome = if r.message.is_empty() { r.code.clone() } else { format!("{}: {}", r.code, r.message) };
        t.row(vec![
            output::time(r.at_ms),
            r.principal.clone(),
            output::or_dash(&r.role),
            // The service's name is noise in a table: `JobService/KillJob`.
            r.method.strip_prefix("/paceline.v1.").unwrap_or(&r.method).to_string(),
            output::or_dash(&r.target),
            outcome,
            output::or_dash(&r.summary),
        ]);
    }
    t.render()
}

fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// `90s`, `15m`, `1h`, `7d` back from `now_ms`, or an RFC 3339 time.
fn parse_time(flag: &str, text: &str, now_ms: u64) -> anyhow::Result<u64> {
    let text = text.trim();
    if let Some(ms) = parse_ago(text) {
        return Ok(now_ms.saturating_sub(ms));
    }
    parse_rfc3339(text).ok_or_else(|| {
        bad_input(format!(
            "{flag}: `{text}` is neither a duration (90s, 15m, 1h, 7d) nor an RFC 3339 time (2026-03-01T12:00:00Z)"
        ))
    })
}

fn parse_ago(text: &str) -> Option<u64> {
    let unit_at = text.find(|c: char| !c.is_ascii_digit())?;
    let (n, unit) = text.split_at(unit_at);
    let n: u64 = n.parse().ok()?;
    let ms = match unit {
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return None,
    };
    n.checked_mul(ms)
}

/// `YYYY-MM-DDTHH:MM:SS[.fraction](Z|±HH:MM)` → ms since the epoch.
fn parse_rfc3339(text: &str) -> Option<u64> {
    let b = text.as_bytes();
    if b.len() < 20
        || b[4] != b'-'
        || b[7] != b'-'
        || !matches!(b[10], b'T' | b't' | b' ')
        || b[13] != b':'
        || b[16] != b':'
    {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let s = text.get(r)?;
        s.bytes().all(|c| c.is_ascii_digit()).then(|| s.parse().ok())?
    };
    let (y, mo, d, h, mi, s) = (num(0..4)?, num(5..7)?, num(8..10)?, num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || s > 60 {
        return None;
    }
    let mut rest = &text[19..];
    let mut millis = 0i64;
    if let Some(frac) = rest.strip_prefix('.') {
        let digits = frac.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        let padded = format!("{:0<3}", &frac[..digits.min(3)]);
        millis = padded.parse().ok()?;
        rest = &frac[digits..];
    }
    let offset_min = match rest {
        "Z" | "z" => 0,
        _ if rest.len() == 6 && rest.as_bytes()[3] == b':' => {
            let sign = match rest.as_bytes()[0] {
                b'+' => 1,
                b'-' => -1,
                _ => return None,
            };
            let oh: i64 = rest.get(1..3)?.parse().ok()?;
            let om: i64 = rest.get(4..6)?.parse().ok()?;
            sign * (oh * 60 + om)
        }
        _ => return None,
    };
    let days = days_from_civil(y, mo as u32, d as u32);
    let secs = days * 86_400 + h * 3600 + mi * 60 + s - offset_min * 60;
    u64::try_from(secs * 1000 + millis).ok()
}

// Howard Hinnant's civil date → days since 1970-01-01 (the inverse of output::time's).
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = (m as i64 + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `paceline audit`'s arguments as given on its command line.
    fn args(line: &[&str]) -> AuditArgs {
        #[derive(clap::Parser)]
        struct Audit {
            #[command(flatten)]
            args: AuditArgs,
        }
        <Audit as clap::Parser>::try_parse_from(std::iter::once("audit").chain(line.iter().copied()))
            .expect("parses")
            .args
    }

    /// Moved from the binary test `tests/audit.rs` (now
    /// host/server/tests/all/audit.rs, over gRPC): bad filters are refused
    /// before anything is sent, as bad input (exit code 2), and the table
    /// names each change.
    #[test]
    fn bad_filters_are_refused_before_sending_and_the_table_names_each_change() {
        let e = request(&args(&["--since", "yesterday"]), 1_000_000).expect_err("refused");
        assert!(e.is::<super::super::BadInput>() && e.to_string().contains("--since"), "{e}");
        let e = request(&args(&["--since", "1h", "--until", "2h"]), 100_000_000).expect_err("until before since");
        assert!(e.is::<super::super::BadInput>(), "{e}");
        let ok = request(&args(&["--user", "anonymous", "--since", "1h", "--method", "KillJob"]), 10_000_000)
            .expect("a request");
        assert_eq!((ok.principal.as_str(), ok.since_ms, ok.method.as_str()), ("anonymous", 6_400_000, "KillJob"));
        let records = [
            pb::AuditRecord {
                method: "/paceline.v1.JobService/KillJob".into(),
                target: "job-1".into(),
                principal: "anonymous".into(),
                code: "OK".into(),
                ..pb::AuditRecord::default()
            },
            pb::AuditRecord {
                method: "/paceline.v1.PluginService/DeployPlugin".into(),
                target: "placement/batch broken@1".into(),
                code: "InvalidArgument".into(),
                message: "not a component".into(),
                ..pb::AuditRecord::default()
            },
        ];
        let table = table(&records);
        assert!(
            table.contains("JobService/KillJob")
                && !table.contains("/paceline.v1.")
                && table.contains("job-1")
                && table.contains("InvalidArgument: not a component"),
            "{table}"
        );
    }

    #[test]
    fn times_are_durations_back_or_rfc3339() {
        let now = 1_000_000_000_000;
        assert_eq!(parse_time("--since", "1h", now).expect("1h"), now - 3_600_000);
        assert_eq!(parse_time("--since", "90s", now).expect("90s"), now - 90_000);
        assert_eq!(parse_time("--since", "7d", now).expect("7d"), now - 7 * 86_400_000);
        assert_eq!(parse_time("--since", "1970-01-01T00:00:01Z", now).expect("epoch"), 1000);
        assert_eq!(parse_time("--since", "2026-03-01T12:00:00.250Z", now).expect("t"), 1_772_366_400_250);
        assert_eq!(parse_time("--since", "2026-03-01T13:30:00+01:30", now).expect("t"), 1_772_366_400_000);
        assert_eq!(output::time(1_772_366_400_000), "2026-03-01 12:00:00");
        for bad in ["", "1y", "h", "yesterday", "2026-13-01T00:00:00Z", "2026-03-01T12:00:00", "2026-03-01"] {
            let e = parse_time("--since", bad, now).expect_err(bad).to_string();
            assert!(e.contains("--since"), "{e}");
        }
    }
}

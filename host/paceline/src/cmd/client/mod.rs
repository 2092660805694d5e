//! The client commands (`job`, `task`, `pool`, `host`, `watch`, `audit` and the
//! remote half of `plugin`): they parse and check input locally, talk gRPC
//! (`paceline.v1`) to a server, and print the answer as a table, JSON or YAML.
//!
//! # Layout
//! - this module: the options every client command shares ([`ClientOpts`]),
//!   connecting, the runtime, and how an error becomes `error: …` plus an
//!   exit code (2 bad input, 3 not found, 1 anything else).
//! - [`output`]: aligned tables and JSON/YAML printing.
//! - [`render`]: wire messages → `serde_json::Value` (prost types have no serde).
//! - one module per command: [`job`], [`task`], [`pool`], [`host`],
//!   [`plugin`], [`watch`], [`audit`].
//!
//! Everything that can be checked without a server (YAML, the model's
//! `validate`, that a file is a component) is checked before connecting, so a
//! typo never costs a round trip and never reaches the server.

use std::future::Future;
use std::process::ExitCode;

use clap::{Args, ValueEnum};
use tonic::transport::Channel;

pub mod audit;
pub mod events;
pub mod host;
pub mod job;
pub mod output;
pub mod plugin;
pub mod pool;
pub mod render;
pub mod secret;
pub mod task;
pub mod watch;

/// Where a `paceline dev` or `paceline server` listens unless told otherwise.
pub const DEFAULT_SERVER: &str = "http://127.0.0.1:7400";

/// Options shared by every client command. `Debug` leaves the token out.
#[derive(Clone, Args)]
pub struct ClientOpts {
    /// The server's API address; several, comma-separated, for a highly
    /// available deployment (the leader is found and used).
    #[arg(long, env = "PACELINE_SERVER", default_value = DEFAULT_SERVER, global = true)]
    pub server: String,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value = "table", global = true)]
    pub output: Output,
    /// Bearer token sent with every call, for a server with a tokens file
    /// (`paceline auth token` makes one). Prefer the environment variable:
    /// a flag shows in the process list.
    #[arg(long, env = "PACELINE_TOKEN", hide_env_values = true, global = true)]
    pub token: Option<String>,
    /// Read the bearer token from this file instead (one line; keep it
    /// mode 0600): neither the process list nor the environment shows it.
    #[arg(long, env = "PACELINE_TOKEN_FILE", global = true, conflicts_with = "token")]
    pub token_file: Option<std::path::PathBuf>,
    /// PEM certificate of the authority that signed an `https://` server's
    /// certificate (the server is checked against it and its host name).
    #[arg(long, env = "PACELINE_CA_CERT", global = true)]
    pub ca_cert: Option<std::path::PathBuf>,
}

impl std::fmt::Debug for ClientOpts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientOpts")
            .field("server", &self.server)
            .field("output", &self.output)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("token_file", &self.token_file)
            .field("ca_cert", &self.ca_cert)
            .finish()
    }
}

impl ClientOpts {
    /// The token to send: `--token`/`PACELINE_TOKEN`, or the one line of
    /// `--token-file`/`PACELINE_TOKEN_FILE`.
    pub fn resolved_token(&self) -> anyhow::Result<Option<String>> {
        if let Some(path) = &self.token_file {
            let token =
                paceline_model::secret::Secret::from_file(path).map_err(|e| bad_input(format!("--token-file {e}")))?;
            return Ok(Some(token.expose().to_string()));
        }
        Ok(self.token.clone())
    }
}

/// The channel client commands talk through: the server's, with the
/// caller's token attached to every request.
pub type Api = tonic::service::interceptor::InterceptedService<Channel, Bearer>;

/// Adds `authorization: Bearer <token>` to each request when a token is set.
#[derive(Clone)]
pub struct Bearer(Option<tonic::metadata::MetadataValue<tonic::metadata::Ascii>>);

impl std::fmt::Debug for Bearer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() { "Bearer(<redacted>)" } else { "Bearer(none)" })
    }
}

impl Bearer {
    fn new(token: Option<&str>) -> anyhow::Result<Bearer> {
        let Some(token) = token.map(str::trim).filter(|t| !t.is_empty()) else {
            return Ok(Bearer(None));
        };
        let value = format!("Bearer {token}")
            .parse()
            .map_err(|_| bad_input("--token / PACELINE_TOKEN: not a valid header value (printable ASCII only)"))?;
        Ok(Bearer(Some(value)))
    }
}

impl tonic::service::Interceptor for Bearer {
    fn call(&mut self, mut request: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(value) = &self.0 {
            request.metadata_mut().insert("authorization", value.clone());
        }
        Ok(request)
    }
}

/// How answers are printed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// Aligned plain-text columns.
    Table,
    /// Pretty JSON (one compact object per line for `watch`).
    Json,
    /// YAML (one document per event for `watch`).
    Yaml,
}

/// Input that is wrong before anything is sent: exit code 2.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct BadInput(pub String);

/// A bad-input error as an `anyhow::Error`.
pub fn bad_input(msg: impl Into<String>) -> anyhow::Error {
    BadInput(msg.into()).into()
}

/// A gRPC status the server answered with, shown by its message (which names
/// the field) rather than tonic's debug form with metadata.
#[derive(Debug, thiserror::Error)]
#[error("{}", describe(.0))]
pub struct RpcError(pub tonic::Status);

impl From<tonic::Status> for RpcError {
    fn from(s: tonic::Status) -> Self {
        RpcError(s)
    }
}

fn describe(s: &tonic::Status) -> String {
    use tonic::Code;
    let what = match s.code() {
        Code::InvalidArgument => "invalid argument",
        Code::NotFound => "not found",
        Code::AlreadyExists => "already exists",
        Code::FailedPrecondition => "failed precondition",
        Code::PermissionDenied => "permission denied",
        Code::Unauthenticated => "unauthenticated",
        Code::Unavailable => "server unavailable",
        Code::Unimplemented => "not implemented by this server",
        Code::OutOfRange => "out of range",
        Code::DeadlineExceeded => "deadline exceeded",
        Code::ResourceExhausted => "resource exhausted",
        Code::Aborted => "aborted",
        Code::Cancelled => "cancelled",
        _ => "server error",
    };
    let msg = s.message();
    // "not found: job x not found" says it twice; the server's words suffice.
    if msg.is_empty() {
        what.to_owned()
    } else if msg.to_ascii_lowercase().contains(what) {
        msg.to_owned()
    } else {
        format!("{what}: {msg}")
    }
}

/// The exit code for an error: 2 for bad input, 3 for not found, else 1.
pub fn exit_code(e: &anyhow::Error) -> u8 {
    for cause in e.chain() {
        if cause.is::<BadInput>() {
            return 2;
        }
        if let Some(outcome) = cause.downcast_ref::<job::Outcome>() {
            return outcome.exit_code();
        }
        if let Some(RpcError(s)) = cause.downcast_ref::<RpcError>() {
            return match s.code() {
                tonic::Code::InvalidArgument | tonic::Code::OutOfRange => 2,
                tonic::Code::NotFound => 3,
                _ => 1,
            };
        }
    }
    1
}

/// Runs one client command on a small runtime and turns its error into
/// `error: …` on stderr and an exit code, so callers only pass the code on.
pub fn block_on(f: impl Future<Output = anyhow::Result<()>>) -> anyhow::Result<ExitCode> {
    // One thread is plenty for a CLI and leaves the cores to the server.
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    Ok(match rt.block_on(f) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // A server's message may quote what a job's author wrote.
            eprintln!("error: {}", render::printable(&format!("{e:#}")));
            ExitCode::from(exit_code(&e))
        }
    })
}

/// Connects to the server now, so an unreachable server is one clear error
/// rather than a failure inside the first call. Every request then carries
/// `--token` (or `PACELINE_TOKEN`), if set.
///
/// `--server` may list several servers, comma-separated (a highly available
/// deployment): each is tried in turn and asked for its health; a standby
/// answers `NOT_SERVING` naming the leader, which is tried next. The first
/// server that serves is used.
pub async fn connect(opts: &ClientOpts) -> anyhow::Result<Api> {
    let bearer = Bearer::new(opts.resolved_token()?.as_deref())?;
    if bearer.0.is_some() {
        warn_token_in_clear(&opts.server);
    }
    let channel = leading_channel(opts).await?;
    Ok(tonic::service::interceptor::InterceptedService::new(channel, bearer))
}

/// Warns on stderr, once per process, when a token is about to go over
/// plain `http://` to a host that is not this machine: anyone on the path
/// can read it and act as its principal until it is revoked.
fn warn_token_in_clear(servers: &str) {
    static WARNED: std::sync::Once = std::sync::Once::new();
    if let Some(host) = servers.split(',').map(str::trim).find_map(plain_http_remote) {
        WARNED.call_once(|| {
            eprintln!(
                "warning: sending a token over plain http:// to {host}, which is not this machine: anyone on the \
                 network path can read it; use https:// (the server's `tls:` setting) or a loopback address"
            );
        });
    }
}

/// The host of `server` when it is plain HTTP (`http://`, or no scheme)
/// and not a loopback address (`localhost`, `127.0.0.0/8`, `::1`).
pub fn plain_http_remote(server: &str) -> Option<String> {
    let url = paceline_server::leader::server_url(server);
    let rest = url.strip_prefix("http://")?;
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let authority = authority.rsplit('@').next().unwrap_or_default();
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or_default(),
        None => authority.split(':').next().unwrap_or_default(),
    };
    let lower = host.to_ascii_lowercase();
    let loopback = lower == "localhost"
        || lower.ends_with(".localhost")
        || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.to_canonical().is_loopback());
    if host.is_empty() || loopback { None } else { Some(host.to_string()) }
}

pub(crate) async fn leading_channel(opts: &ClientOpts) -> anyhow::Result<Channel> {
    paceline_server::leader::leading_channel(&opts.server, opts.ca_cert.as_deref()).await.map_err(|e| match e {
        paceline_server::leader::ConnectError::BadInput(msg) => bad_input(msg),
        paceline_server::leader::ConnectError::NoLeader(msg) if msg.contains("cannot connect to") => {
            anyhow::Error::msg(format!("{msg}\n{}", unreachable_hint(&opts.server)))
        }
        other => anyhow::Error::msg(other.to_string()),
    })
}

/// What to check when no server answered at `server`: that one runs there,
/// and where the address came from (a first-hour "Connection refused" says
/// neither).
fn unreachable_hint(server: &str) -> String {
    let from = if std::env::var("PACELINE_SERVER").is_ok_and(|v| v == server) {
        "from PACELINE_SERVER".to_string()
    } else if server == DEFAULT_SERVER {
        "the default; set PACELINE_SERVER or --server for another".to_string()
    } else {
        "from --server".to_string()
    };
    format!(
        "hint: is `paceline dev` (or `paceline server`) running and listening at {server} ({from})? \
         `paceline dev` prints the address to use as `export PACELINE_SERVER=…`"
    )
}

/// Reads a file given on the command line; a missing file is bad input.
pub fn read_file(path: &std::path::Path) -> anyhow::Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| bad_input(format!("cannot read {}: {e}", path.display())))
}

/// Parses an enum filter such as `running`, `RUNNING` or `JOB_STATE_RUNNING`
/// with prost's `from_str_name`; `what` and `prefix` word the error.
pub fn parse_enum<E>(what: &str, prefix: &str, s: &str, from: fn(&str) -> Option<E>) -> anyhow::Result<E> {
    let upper = s.trim().to_ascii_uppercase().replace('-', "_");
    let full = if upper.starts_with(prefix) { upper } else { format!("{prefix}{upper}") };
    match from(&full) {
        Some(e) if !full.ends_with("UNSPECIFIED") => Ok(e),
        _ => Err(bad_input(format!("unknown {what} {s:?}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use paceline_proto::v1 as pb;

    #[test]
    fn enum_filters_accept_short_and_full_names() {
        let parse = |s| parse_enum("job state", "JOB_STATE_", s, pb::JobState::from_str_name);
        assert_eq!(parse("running").ok(), Some(pb::JobState::Running));
        assert_eq!(parse("JOB_STATE_KILLED").ok(), Some(pb::JobState::Killed));
        assert!(parse("unspecified").is_err());
        assert!(parse("sleeping").is_err());
    }

    #[test]
    fn only_plain_http_to_another_host_is_a_remote_in_clear() {
        for (server, remote) in [
            ("http://127.0.0.1:7400", None),
            ("127.0.0.1:7400", None),
            ("http://127.9.9.9:7400", None),
            ("http://localhost:7400", None),
            ("http://LOCALHOST:7400/", None),
            ("http://[::1]:7400", None),
            ("http://[::ffff:127.0.0.1]:7400", None),
            ("https://api.example.com:7400", None),
            ("http://api.example.com:7400", Some("api.example.com")),
            ("api.example.com:7400", Some("api.example.com")),
            ("http://10.0.0.5:7400", Some("10.0.0.5")),
            ("http://[2001:db8::1]:7400", Some("2001:db8::1")),
            ("http://localhost.evil.com:7400", Some("localhost.evil.com")),
        ] {
            assert_eq!(plain_http_remote(server).as_deref(), remote, "{server}");
        }
    }

    #[test]
    fn exit_codes_follow_the_error_kind() {
        let cases: [(anyhow::Error, u8); 4] = [
            (bad_input("x"), 2),
            (RpcError(tonic::Status::not_found("job x")).into(), 3),
            (RpcError(tonic::Status::invalid_argument("spec.name")).into(), 2),
            (anyhow::anyhow!("cannot connect"), 1),
        ];
        for (e, code) in cases {
            assert_eq!(exit_code(&e), code, "{e}");
        }
        let e: anyhow::Error = RpcError(tonic::Status::not_found("job x")).into();
        assert_eq!(e.to_string(), "not found: job x");
        let e: anyhow::Error = RpcError(tonic::Status::not_found("job x not found")).into();
        assert_eq!(e.to_string(), "job x not found");
    }
}

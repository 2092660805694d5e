//! `paceline agent-token`: join tokens and agent certificates, managed on
//! the host manager's machine through its PKI directory (`<data_dir>/pki`,
//! or `agent_pki_dir` in its config). The server reads that directory at
//! every join and session, so what is done here takes effect at once, with
//! the server running or not. See docs/operations.md, "Joining agents".

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use paceline_hostmgr::pki::AgentPki;
use paceline_server::ServerConfig;

/// `paceline agent-token …`.
#[derive(Debug, Subcommand)]
pub enum AgentTokenCommand {
    /// Make a join token; prints it (once) with the CA hash and the agent's command line.
    Create(CreateArgs),
    /// List join tokens (no secrets): id, state, uses, expiry.
    List(Where),
    /// Revoke a join token: later joins with it are refused.
    Revoke(RevokeArgs),
    /// List the certificates issued to agents.
    Hosts(Where),
    /// Revoke every certificate of a host: its agent is refused from its next
    /// connection on, and the name may join again (to rotate or replace a host).
    RevokeHost(RevokeHostArgs),
}

/// Which server's PKI directory.
#[derive(Debug, Args)]
pub struct Where {
    /// The server's config file (its `agent_pki_dir`, else `<data_dir>/pki`).
    #[arg(long)]
    config: Option<PathBuf>,
    /// The server's data dir (`.paceline-dev` for `paceline dev`); the PKI is in `<data_dir>/pki`.
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// The PKI directory itself.
    #[arg(long)]
    pki_dir: Option<PathBuf>,
}

/// Arguments of `paceline agent-token create`.
#[derive(Debug, Args)]
pub struct CreateArgs {
    #[command(flatten)]
    place: Where,
    /// How long the token may be used: `30m`, `24h`, `7d`, `3600s`.
    #[arg(long, default_value = "24h")]
    ttl: String,
    /// How many agents may join with it (default: any number until it expires).
    #[arg(long)]
    uses: Option<u32>,
    /// A note shown by `list`.
    #[arg(long, default_value = "")]
    description: String,
}

/// Arguments of `paceline agent-token revoke`.
#[derive(Debug, Args)]
pub struct RevokeArgs {
    #[command(flatten)]
    place: Where,
    /// The token's id (the part before the dot).
    id: String,
}

/// Arguments of `paceline agent-token revoke-host`.
#[derive(Debug, Args)]
pub struct RevokeHostArgs {
    #[command(flatten)]
    place: Where,
    /// The host name.
    hostname: String,
}

impl Where {
    fn pki_dir(&self) -> anyhow::Result<PathBuf> {
        if let Some(d) = &self.pki_dir {
            return Ok(d.clone());
        }
        let mut config = match &self.config {
            Some(path) => {
                let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
                serde_yaml::from_str(&text).with_context(|| format!("parsing {}", path.display()))?
            }
            None => ServerConfig::default(),
        };
        if let Some(d) = &self.data_dir {
            config.data_dir = d.clone();
        }
        Ok(config.agent_pki_dir())
    }

    fn open(&self) -> anyhow::Result<AgentPki> {
        let dir = self.pki_dir()?;
        AgentPki::open(&dir).with_context(|| format!("opening the agent PKI in {}", dir.display()))
    }
}

/// `30m`, `24h`, `7d`, `90s` or plain seconds.
pub fn parse_ttl(s: &str) -> anyhow::Result<Duration> {
    let s = s.trim();
    let (digits, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: u64 = digits.parse().with_context(|| format!("--ttl {s:?}: expected a number and s, m, h or d"))?;
    let secs = match unit {
        "" | "s" => n,
        "m" => n.saturating_mul(60),
        "h" => n.saturating_mul(3600),
        "d" => n.saturating_mul(86_400),
        _ => bail!("--ttl {s:?}: unit must be s, m, h or d"),
    };
    if secs == 0 {
        bail!("--ttl {s:?}: must be more than zero");
    }
    Ok(Duration::from_secs(secs))
}

fn ago(unix: u64) -> String {
    let now = paceline_hostmgr::pki::now_unix();
    let (d, future) = if unix >= now { (unix - now, true) } else { (now - unix, false) };
    let human = if d >= 86_400 {
        format!("{}d", d / 86_400)
    } else if d >= 3600 {
        format!("{}h", d / 3600)
    } else if d >= 60 {
        format!("{}m", d / 60)
    } else {
        format!("{d}s")
    };
    if future { format!("in {human}") } else { format!("{human} ago") }
}

pub fn run(command: AgentTokenCommand) -> anyhow::Result<ExitCode> {
    match command {
        AgentTokenCommand::Create(args) => {
            let ttl = parse_ttl(&args.ttl)?;
            let pki = args.place.open()?;
            let t = pki.create_token(ttl, args.uses, &args.description)?;
            println!("token: {}", t.token);
            println!("ca-hash: {}", pki.ca_hash());
            println!(
                "id: {} · expires {} · uses: {}",
                t.id,
                ago(t.expires_unix),
                args.uses.map_or("any".into(), |u| u.to_string())
            );
            println!("join an agent (once; it keeps its certificate in its data dir):");
            println!(
                "  PACELINE_JOIN_TOKEN={} paceline agent --manager HOSTMGR:7401 --ca-hash {}",
                t.token,
                pki.ca_hash()
            );
        }
        AgentTokenCommand::List(place) => {
            let tokens = place.open()?.list_tokens()?;
            if tokens.is_empty() {
                println!("no join tokens");
            }
            println!("{:<14} {:<9} {:<6} {:<6} {:<14} DESCRIPTION", "ID", "STATE", "JOINS", "LEFT", "EXPIRES");
            for t in tokens {
                println!(
                    "{:<14} {:<9} {:<6} {:<6} {:<14} {}",
                    t.id,
                    t.state,
                    t.joins,
                    t.uses_left.map_or("any".into(), |u| u.to_string()),
                    ago(t.expires_unix),
                    t.description
                );
            }
        }
        AgentTokenCommand::Revoke(args) => {
            args.place.open()?.revoke_token(&args.id)?;
            println!("revoked join token {}", args.id);
        }
        AgentTokenCommand::Hosts(place) => {
            println!("{:<24} {:<8} {:<12} {:<14} SERIAL", "HOST", "STATE", "ISSUED", "EXPIRES");
            for c in place.open()?.list_certs()? {
                let state = if c.revoked {
                    "revoked"
                } else if c.expires_unix <= paceline_hostmgr::pki::now_unix() {
                    "expired"
                } else {
                    "valid"
                };
                println!(
                    "{:<24} {:<8} {:<12} {:<14} {}",
                    c.hostname,
                    state,
                    ago(c.issued_unix),
                    ago(c.expires_unix),
                    c.serial
                );
            }
        }
        AgentTokenCommand::RevokeHost(args) => {
            let n = args.place.open()?.revoke_host(&args.hostname)?;
            if n == 0 {
                eprintln!("error: host {:?} holds no valid certificate", args.hostname);
                return Ok(ExitCode::from(1));
            }
            println!(
                "revoked {n} certificate(s) of host {}: its agent is refused from its next connection on; join it again with a new token",
                args.hostname
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::parse_ttl;
    use std::time::Duration;

    #[test]
    fn ttls_parse() {
        assert_eq!(parse_ttl("30m").expect("parses"), Duration::from_secs(1800));
        assert_eq!(parse_ttl("24h").expect("parses"), Duration::from_secs(86_400));
        assert_eq!(parse_ttl("7d").expect("parses"), Duration::from_secs(7 * 86_400));
        assert_eq!(parse_ttl("90").expect("parses"), Duration::from_secs(90));
        assert!(parse_ttl("0h").is_err());
        assert!(parse_ttl("5w").is_err());
        assert!(parse_ttl("h").is_err());
    }
}

//! `paceline auth token`: a fresh API token and the tokens-file entry that
//! admits it. The server stores only the token's SHA-256, so the entry can be
//! pasted into a file many people read; the token itself is printed once.

use std::io::Read;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Subcommand, ValueEnum};

/// `paceline auth …`.
#[derive(Debug, Subcommand)]
pub enum AuthCommand {
    /// Print a new random token and the tokens-file entry for it.
    Token(TokenArgs),
}

/// Arguments of `paceline auth token`.
#[derive(Debug, Args)]
pub struct TokenArgs {
    /// The principal's name (shown in logs and refusals).
    #[arg(long)]
    name: String,
    /// The principal's role.
    #[arg(long, value_enum)]
    role: RoleArg,
    /// A pool (with its subtree) whose jobs a `user` may change; repeat for several.
    #[arg(long = "pool")]
    pools: Vec<String>,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum RoleArg {
    User,
    /// A user who may also validate plugins on the server.
    Author,
    Operator,
    Admin,
}

pub fn run(command: AuthCommand) -> anyhow::Result<ExitCode> {
    match command {
        AuthCommand::Token(args) => token(args),
    }
}

fn token(args: TokenArgs) -> anyhow::Result<ExitCode> {
    if args.name.trim().is_empty() {
        eprintln!("error: --name must not be empty");
        return Ok(ExitCode::from(2));
    }
    if let Some(bad) = args.pools.iter().find(|p| !p.starts_with('/')) {
        eprintln!("error: --pool {bad:?} is not a pool path (it starts with /)");
        return Ok(ExitCode::from(2));
    }
    // 32 bytes from the kernel's CSPRNG: a token is a password.
    let mut bytes = [0u8; 32];
    std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut bytes)).context("reading /dev/urandom")?;
    let token: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    let role = match args.role {
        RoleArg::User => "user",
        RoleArg::Author => "author",
        RoleArg::Operator => "operator",
        RoleArg::Admin => "admin",
    };
    let pools = if args.pools.is_empty() { String::new() } else { format!("    pools: [{}]\n", args.pools.join(", ")) };
    println!("token: {token}");
    println!("# give the token to {} (export PACELINE_TOKEN=...); add this entry under `principals:`", args.name);
    print!(
        "  - name: {}\n    role: {role}\n{pools}    token_sha256: {}\n",
        serde_json::to_string(&args.name).unwrap_or_default(),
        paceline_api::auth::token_hash_hex(&token)
    );
    Ok(ExitCode::SUCCESS)
}

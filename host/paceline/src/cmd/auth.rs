//! `paceline auth token`: a fresh API token and the tokens-file entry that
//! admits it. The server stores only the token's SHA-256, so the entry can be
//! pasted into a file many people read; the token itself is printed once.

use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Subcommand, ValueEnum};
use paceline_api::auth::Role;

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
    let token = paceline_api::auth::new_token().context("reading /dev/urandom")?;
    let role = match args.role {
        RoleArg::User => Role::User,
        RoleArg::Author => Role::Author,
        RoleArg::Operator => Role::Operator,
        RoleArg::Admin => Role::Admin,
    };
    println!("token: {token}");
    println!("# give the token to {} (export PACELINE_TOKEN=...); add this entry under `principals:`", args.name);
    print!("{}", paceline_api::auth::tokens_file_entry(&args.name, role, &args.pools, &token));
    Ok(ExitCode::SUCCESS)
}

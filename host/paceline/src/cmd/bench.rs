//! `paceline bench <area>`: the benchmarks live in `paceline-bench`
//! (`host/bench`), arguments included; this command hands them what only
//! the binary knows (itself, for `bench hosts`' agent; the checkout).

use std::process::ExitCode;

use anyhow::Context;
pub use paceline_bench::BenchCommand;

/// Runs `paceline bench …`.
pub fn run(cmd: BenchCommand) -> anyhow::Result<ExitCode> {
    let env = paceline_bench::BenchEnv {
        paceline: std::env::current_exe().context("finding the paceline binary")?,
        checkout: super::plugin_new::paceline_root(),
    };
    paceline_bench::run(cmd, &env)
}

//! `--plane-cpus` and `--scheduler-cpus`: the control plane and the side
//! under test on CPUs of their own, as on separate machines. On this
//! project's 2-core machine the plane, the limits' clients and Paceline
//! otherwise share both cores, so whatever CPU the side under test spends is
//! taken from the API server; pinned, a rate below the limit is the
//! scheduler's own doing (its requests, its watches, its pace), not the
//! cores it shares.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, bail};

use super::KubernetesBenchArgs;

/// The plane's processes `kubernetes.sh` names in its pid files. kube-scheduler
/// is the side under test in its run: it goes with this process.
const PLANE: [&str; 4] = ["etcd", "kube-apiserver", "kube-controller-manager", "kwok"];

/// Both CPU lists, or neither, each one `taskset` takes on this machine:
/// checked before the plane starts, so that a wrong list leaves nothing
/// running.
pub(super) fn check(args: &KubernetesBenchArgs) -> anyhow::Result<()> {
    match (&args.plane_cpus, &args.scheduler_cpus) {
        (Some(_), None) | (None, Some(_)) => bail!("--plane-cpus and --scheduler-cpus go together"),
        (Some(plane), Some(scheduler)) => {
            for (flag, cpus) in [("--plane-cpus", plane), ("--scheduler-cpus", scheduler)] {
                taskset(&["-c", cpus, "true"]).with_context(|| format!("{flag} {cpus}"))?;
            }
            Ok(())
        }
        (None, None) => Ok(()),
    }
}

/// The settings line, when pinned.
pub(super) fn describe(args: &KubernetesBenchArgs) -> Option<String> {
    let (plane, scheduler) = (args.plane_cpus.as_ref()?, args.scheduler_cpus.as_ref()?);
    Some(format!(
        "pinned: the control plane ({}) on CPUs {plane}; the side under test (this process: the limits' clients, the Paceline server; kube-scheduler) on CPUs {scheduler}",
        PLANE.join(", ")
    ))
}

/// Pins this process. Called before its runtime starts: the threads it
/// makes later, and the plane's processes it starts, inherit the mask
/// (the plane's are pinned again by [`plane`]).
pub(super) fn this_process(args: &KubernetesBenchArgs) -> anyhow::Result<()> {
    match &args.scheduler_cpus {
        Some(cpus) => pin_pid(cpus, std::process::id()),
        None => Ok(()),
    }
}

/// Pins every running process of the plane (and kube-scheduler, with this
/// process). Called after each start of the plane or of kube-scheduler.
pub(super) fn plane(args: &KubernetesBenchArgs) -> anyhow::Result<()> {
    let (Some(plane), Some(scheduler)) = (&args.plane_cpus, &args.scheduler_cpus) else {
        return Ok(());
    };
    for name in PLANE {
        if let Some(pid) = super::pid_of(&args.dir, name) {
            pin_pid(plane, pid).with_context(|| format!("pinning {name}"))?;
        }
    }
    if let Some(pid) = super::pid_of(&args.dir, "kube-scheduler") {
        pin_pid(scheduler, pid).context("pinning kube-scheduler")?;
    }
    Ok(())
}

/// `taskset -a -p -c CPUS PID`: every thread of the process.
fn pin_pid(cpus: &str, pid: u32) -> anyhow::Result<()> {
    if !Path::new(&format!("/proc/{pid}")).exists() {
        return Ok(()); // gone already: nothing to pin
    }
    taskset(&["-a", "-p", "-c", cpus, &pid.to_string()])
}

/// Runs `taskset ARGS`; its own message when it refuses.
fn taskset(args: &[&str]) -> anyhow::Result<()> {
    let out = Command::new("taskset").args(args).output().context("running taskset (util-linux)")?;
    if !out.status.success() {
        bail!("taskset {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: KubernetesBenchArgs,
    }

    fn args(flags: &[&str]) -> KubernetesBenchArgs {
        Cli::parse_from(std::iter::once("bench").chain(flags.iter().copied())).args
    }

    #[test]
    fn one_cpu_list_without_the_other_is_refused() {
        let err = check(&args(&["--plane-cpus", "0"])).expect_err("refused");
        assert!(err.to_string().contains("go together"), "{err}");
        assert!(check(&args(&["--scheduler-cpus", "0"])).is_err());
        assert!(check(&args(&[])).is_ok());
    }

    #[test]
    fn a_list_taskset_cannot_take_is_refused_naming_its_flag() {
        let err = check(&args(&["--plane-cpus", "0", "--scheduler-cpus", "not-a-cpu"])).expect_err("refused");
        assert!(format!("{err:#}").starts_with("--scheduler-cpus not-a-cpu: taskset"), "{err:#}");
        assert!(check(&args(&["--plane-cpus", "0", "--scheduler-cpus", "0"])).is_ok());
    }
}

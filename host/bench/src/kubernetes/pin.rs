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
                let out = Command::new("taskset")
                    .args(["-c", cpus, "true"])
                    .output()
                    .context("running taskset (util-linux)")?;
                if !out.status.success() {
                    bail!("{flag} {cpus}: {}", String::from_utf8_lossy(&out.stderr).trim());
                }
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
        Some(cpus) => taskset(cpus, std::process::id()),
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
            taskset(plane, pid).with_context(|| format!("pinning {name}"))?;
        }
    }
    if let Some(pid) = super::pid_of(&args.dir, "kube-scheduler") {
        taskset(scheduler, pid).context("pinning kube-scheduler")?;
    }
    Ok(())
}

/// `taskset -a -p -c CPUS PID`: every thread of the process.
fn taskset(cpus: &str, pid: u32) -> anyhow::Result<()> {
    if !Path::new(&format!("/proc/{pid}")).exists() {
        return Ok(()); // gone already: nothing to pin
    }
    let out = Command::new("taskset")
        .args(["-a", "-p", "-c", cpus, &pid.to_string()])
        .output()
        .context("running taskset (util-linux)")?;
    if !out.status.success() {
        bail!("taskset -a -p -c {cpus} {pid}: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(())
}

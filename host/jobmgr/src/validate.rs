//! Create- and update-time checks beyond `JobConfig::validate`: limits this
//! deployment sets, the pool, port and plugin-slot names. Each error names
//! the field.

use std::collections::BTreeSet;

use paceline_model::job::{JobConfig, JobKind};
use paceline_model::task::TaskSpec;
use paceline_resmgr::ResourceManager;

use crate::error::JobError;

pub(crate) fn check(config: &JobConfig, max_instances: u32, resmgr: &ResourceManager) -> Result<(), JobError> {
    config.validate()?;
    if config.kind != JobKind::Daemon && config.instance_count == 0 {
        return Err(JobError::invalid("instance_count", "must be at least 1"));
    }
    if config.instance_count > max_instances {
        return Err(JobError::invalid(
            "instance_count",
            format!("{} is more than this cluster's limit of {max_instances}", config.instance_count),
        ));
    }
    if config.sla.min_running_instances == Some(0) {
        return Err(JobError::invalid("sla.min_running_instances", "must be at least 1 when set"));
    }
    if config.sla.max_run_time_secs == Some(0) {
        return Err(JobError::invalid("sla.max_run_time_secs", "must be at least 1 when set"));
    }
    if config.update.batch_size > config.instance_count.max(1) {
        return Err(JobError::invalid("update.batch_size", "is larger than the instance count"));
    }
    let tree = resmgr.tree();
    let Some(pool) = tree.id(&config.pool) else {
        return Err(JobError::invalid("pool", format!("pool `{}` does not exist", config.pool)));
    };
    if tree.children(pool).next().is_some() || tree.parent(pool).is_none() {
        return Err(JobError::invalid("pool", format!("pool `{}` is not a leaf pool", config.pool)));
    }
    if let Some(user) = &config.user {
        // Only users an operator allowed for this pool (an empty list, the
        // default, allows none): a job cannot make itself another tenant.
        let allowed = tree.spec(pool).map(|s| s.task_users.as_slice()).unwrap_or_default();
        if !allowed.contains(user) {
            let listed = if allowed.is_empty() { "none".to_owned() } else { allowed.join(", ") };
            return Err(JobError::invalid(
                "user",
                format!(
                    "pool `{}` does not allow tasks to run as `{user}` (its task_users: {listed}); an admin adds users to a pool's task_users (docs/security.md)",
                    config.pool
                ),
            ));
        }
    }
    check_spec("default_task", &config.default_task)?;
    for (i, spec) in &config.instance_overrides {
        check_spec(&format!("instance_overrides[{i}]"), spec)?;
    }
    for slot in config.plugin_overrides.keys() {
        let ok = slot.starts_with("placement/") || slot.starts_with("lifecycle/");
        if !ok {
            return Err(JobError::invalid(
                "plugin_overrides",
                format!("`{slot}` is not a placement/ or lifecycle/ slot"),
            ));
        }
    }
    if config.kind == JobKind::Stateful && config.sla.preemptible {
        return Err(JobError::invalid("sla.preemptible", "stateful jobs are never preempted"));
    }
    Ok(())
}

fn check_spec(field: &str, spec: &TaskSpec) -> Result<(), JobError> {
    let mut seen = BTreeSet::new();
    for p in &spec.ports {
        let valid =
            !p.is_empty() && p.len() <= 63 && p.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if !valid {
            return Err(JobError::invalid(
                format!("{field}.ports"),
                format!("port name {p:?} must be 1-63 of [A-Za-z0-9_-]"),
            ));
        }
        if !seen.insert(p.as_str()) {
            return Err(JobError::invalid(format!("{field}.ports"), format!("port name {p:?} appears twice")));
        }
    }
    Ok(())
}

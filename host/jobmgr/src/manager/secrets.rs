//! Task secrets from the job manager's side (decision 0032): a config may
//! name only secrets that exist in its pool, and a secret is not deleted
//! from under a job that still needs it. Values are opened at launch only
//! (`launch.rs`).

use std::collections::BTreeSet;

use paceline_model::job::JobConfig;

use super::JobManager;
use crate::error::JobError;

impl JobManager {
    /// Checks that every secret `config`'s task specs name exists in its
    /// pool, and that this server can open secrets at all.
    pub(crate) async fn check_secrets(&self, config: &JobConfig) -> Result<(), JobError> {
        let specs = std::iter::once(("default_task".to_string(), &config.default_task))
            .chain(config.instance_overrides.iter().map(|(i, s)| (format!("instance_overrides[{i}]"), s)));
        let mut checked = BTreeSet::new();
        for (field, spec) in specs {
            for r in &spec.secrets {
                if self.secret_key.is_none() {
                    return Err(JobError::invalid(
                        format!("{field}.secrets"),
                        "this server has no secrets key, so it cannot deliver secrets",
                    ));
                }
                if !checked.insert(r.name.as_str()) {
                    continue;
                }
                match self.store.get_secret(&config.pool, &r.name).await {
                    Ok(_) => {}
                    Err(e) if e.is_not_found() => {
                        return Err(JobError::invalid(
                            format!("{field}.secrets.name"),
                            format!("no secret {:?} in pool {}", r.name, config.pool),
                        ));
                    }
                    Err(e) => return Err(e.into()),
                }
            }
        }
        Ok(())
    }

    /// Jobs not yet finished whose current or desired config names secret
    /// `name` of `pool`.
    pub fn jobs_using_secret(&self, pool: &str, name: &str) -> Vec<String> {
        let m = self.mem();
        m.jobs
            .values()
            .filter(|j| !j.runtime.state.is_terminal())
            .filter(|j| {
                j.configs.values().any(|c| {
                    c.pool == pool
                        && std::iter::once(&c.default_task)
                            .chain(c.instance_overrides.values())
                            .any(|s| s.secrets.iter().any(|r| r.name == name))
                })
            })
            .map(|j| j.id.clone())
            .collect()
    }
}

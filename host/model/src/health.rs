//! A task's health check: exactly one of a command, an HTTP GET or a TCP
//! connect, run by the agent; what it checks and how it is validated.

use serde::{Deserialize, Serialize};

use crate::task::{SpecError, check_len};

/// A health check the agent runs against a task: exactly one of a command,
/// an HTTP GET or a TCP connect.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HealthCheck {
    /// Command run beside the task, in its sandbox; exit status 0 is healthy.
    #[serde(default)]
    pub command: String,
    /// Arguments of `command`.
    #[serde(default)]
    pub args: Vec<String>,
    /// HTTP GET against one of the task's ports on loopback; a 2xx or 3xx answer is healthy.
    #[serde(default)]
    pub http: Option<HttpProbe>,
    /// TCP connect to one of the task's ports on loopback; an accepted connection is healthy.
    #[serde(default)]
    pub tcp: Option<TcpProbe>,
    /// Seconds after the run starts before the first check.
    #[serde(default)]
    pub initial_delay_secs: u32,
    /// Seconds between checks; at least 1.
    pub interval_secs: u32,
    /// Seconds one check may take before it counts as failed; at least 1.
    pub timeout_secs: u32,
    /// Consecutive failures after which the run counts as unhealthy (and,
    /// for services, is restarted). At least 1.
    pub max_consecutive_failures: u32,
}

/// An HTTP health probe.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpProbe {
    /// Name of the task port to probe (one of the task spec's `ports`).
    pub port: String,
    /// Request path, starting with `/`.
    #[serde(default = "default_http_path")]
    pub path: String,
}

fn default_http_path() -> String {
    "/".to_string()
}

/// A TCP health probe.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TcpProbe {
    /// Name of the task port to probe (one of the task spec's `ports`).
    pub port: String,
}

impl HealthCheck {
    /// Checks the ranges and that exactly one probe is set.
    pub fn validate(&self) -> Result<(), SpecError> {
        let probes =
            usize::from(!self.command.is_empty()) + usize::from(self.http.is_some()) + usize::from(self.tcp.is_some());
        if probes != 1 {
            return Err(SpecError::Invalid {
                field: "health_check",
                reason: "set exactly one of command, http or tcp".into(),
            });
        }
        check_len("health_check.command", &self.command)?;
        if let Some(http) = &self.http {
            check_len("health_check.http.port", &http.port)?;
            check_len("health_check.http.path", &http.path)?;
            if !http.path.starts_with('/') {
                return Err(SpecError::Invalid {
                    field: "health_check.http.path",
                    reason: "must start with '/'".into(),
                });
            }
        }
        if self.interval_secs == 0 || self.timeout_secs == 0 || self.max_consecutive_failures == 0 {
            return Err(SpecError::Invalid {
                field: "health_check",
                reason: "interval_secs, timeout_secs and max_consecutive_failures must be at least 1".into(),
            });
        }
        Ok(())
    }

    /// The port name the probe uses, for HTTP and TCP probes.
    pub fn probe_port(&self) -> Option<&str> {
        self.http.as_ref().map(|h| h.port.as_str()).or(self.tcp.as_ref().map(|t| t.port.as_str()))
    }
}

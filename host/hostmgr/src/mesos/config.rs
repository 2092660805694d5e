//! [`MesosConfig`]: the settings of the `mesos` provider (masters,
//! framework identity, and the timings of subscription, offers, launches
//! and reconciliation).

use std::time::Duration;

use super::Encoding;

/// Settings of the `mesos` provider.
#[derive(Clone, Debug, PartialEq)]
pub struct MesosConfig {
    /// Master base URLs (`http://host:5050`), tried in turn; a redirect wins.
    /// An entry `zk://host:2181[,host:2181…]/mesos` is resolved through
    /// ZooKeeper to the leading master (the lowest `json.info_` node) each
    /// time the provider subscribes.
    pub masters: Vec<String>,
    /// `FrameworkInfo.name`.
    pub framework_name: String,
    /// `FrameworkInfo.user`: the user tasks run as.
    pub user: String,
    /// The one role we subscribe with (MULTI_ROLE); offers of other roles are not used.
    pub role: String,
    /// `FrameworkInfo.principal`, if any.
    pub principal: Option<String>,
    /// How long the master keeps our tasks while we are away.
    pub failover_timeout: Duration,
    /// Wire encoding.
    pub encoding: Encoding,
    /// First and largest pause between subscription attempts.
    pub backoff_initial: Duration,
    /// Largest pause between subscription attempts.
    pub backoff_max: Duration,
    /// After each SUBSCRIBED, hosts are (re)registered only after this long.
    pub registration_delay: Duration,
    /// How often live agents are reported alive to the manager.
    pub host_heartbeat: Duration,
    /// Implicit reconciliation period.
    pub reconcile_interval: Duration,
    /// A launch waits this long for an offer of its agent, then is rejected.
    pub launch_offer_wait: Duration,
    /// An unused offer is declined after this long.
    pub offer_hold: Duration,
    /// `refuse_seconds` of declines.
    pub decline_refuse: Duration,
    /// Suppress offers after this long without a launch (`None`: never).
    pub idle_suppress: Option<Duration>,
    /// Limit of one call (and of reading the subscription's response head).
    pub call_timeout: Duration,
}

impl Default for MesosConfig {
    fn default() -> Self {
        MesosConfig {
            masters: vec!["http://127.0.0.1:5050".into()],
            framework_name: "paceline".into(),
            user: "root".into(),
            role: "*".into(),
            principal: None,
            failover_timeout: Duration::from_secs(7 * 24 * 3600),
            encoding: Encoding::Protobuf,
            backoff_initial: Duration::from_millis(200),
            backoff_max: Duration::from_secs(10),
            registration_delay: Duration::from_secs(1),
            host_heartbeat: Duration::from_secs(2),
            reconcile_interval: Duration::from_secs(600),
            launch_offer_wait: Duration::from_secs(10),
            offer_hold: Duration::from_secs(60),
            decline_refuse: Duration::from_secs(5),
            idle_suppress: Some(Duration::from_secs(300)),
            call_timeout: Duration::from_secs(10),
        }
    }
}

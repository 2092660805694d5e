//! Figures for `paceline bench hosts`, over simulated hosts.
//!
//! - [`lease_rounds`]: lease-and-release rounds per second (budget ≥ 100/s
//!   over 10,000 hosts).
//! - [`status_updates`]: run updates per second from the provider through
//!   the manager to a subscriber that acknowledges each one, and on to the
//!   provider (budget ≥ 50,000/s).
//!
//! - [`mesos_offers`]: offers per second taken from a Mesos master's event
//!   stream into the inventory (budget ≥ 10,000/s); the caller brings the
//!   master (the fake, in `paceline-mesos-fake`).
//!
//! All need a Tokio runtime; they build their own cluster and drop it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use paceline_model::Resources;
use paceline_model::run::LaunchRequest;
use paceline_model::task::TaskSpec;

use crate::error::HostError;
use crate::event::HostEvent;
use crate::lease::LeaseRequest;
use crate::manager::{HostManager, ManagerConfig};
use crate::sim::{HostShape, SimConfig, SimProvider};

/// Capacity of every benchmark host.
pub const BENCH_HOST: Resources = Resources::new(32_000, 131_072, 1_000_000, 0);

/// The result of [`lease_rounds`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LeaseFigures {
    /// Hosts in the cluster.
    pub hosts: usize,
    /// Hosts asked for per lease.
    pub hosts_per_lease: usize,
    /// Rounds done.
    pub rounds: u64,
    /// Wall time they took.
    pub elapsed: Duration,
    /// Rounds per second.
    pub rounds_per_sec: f64,
}

/// The result of [`status_updates`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StatusFigures {
    /// Runs launched.
    pub runs: usize,
    /// Updates delivered and acknowledged.
    pub updates: u64,
    /// Wall time from the first launch to the last acknowledgement.
    pub elapsed: Duration,
    /// Updates per second.
    pub updates_per_sec: f64,
}

async fn cluster(hosts: usize) -> Result<(SimProvider, HostManager), HostError> {
    let sim = SimProvider::new(SimConfig {
        shapes: vec![
            HostShape::new(hosts / 2, "bench-a-", BENCH_HOST).attribute("zone", "a"),
            HostShape::new(hosts - hosts / 2, "bench-b-", BENCH_HOST).attribute("zone", "b"),
        ],
        ..SimConfig::default()
    });
    let manager = HostManager::builder(Arc::new(sim.clone()))
        .clock(Arc::new(sim.clock()))
        .config(ManagerConfig { tick_interval: None, ..ManagerConfig::default() })
        .start()
        .await?;
    manager.sync().await?;
    manager.expect_runs(Vec::new()).await;
    Ok((sim, manager))
}

/// Leases `hosts_per_lease` of `hosts` simulated hosts and releases them,
/// over and over for `duration`.
pub async fn lease_rounds(hosts: usize, hosts_per_lease: usize, duration: Duration) -> Result<LeaseFigures, HostError> {
    let (_sim, manager) = cluster(hosts).await?;
    let request = LeaseRequest::new(Resources::new(1000, 1024, 0, 0), hosts_per_lease.max(1), 60_000);
    let start = Instant::now();
    let mut rounds = 0u64;
    while start.elapsed() < duration {
        let lease = manager.lease(&request)?;
        if lease.hosts.is_empty() {
            return Err(HostError::InvalidRequest { field: "hosts", reason: "the lease came back empty".into() });
        }
        manager.release(lease.id)?;
        rounds += 1;
    }
    let elapsed = start.elapsed();
    Ok(LeaseFigures {
        hosts,
        hosts_per_lease,
        rounds,
        elapsed,
        rounds_per_sec: rounds as f64 / elapsed.as_secs_f64().max(1e-9),
    })
}

/// Launches `runs` one-second runs over `hosts` simulated hosts, runs the
/// virtual clock until they end, and times their updates (STARTING,
/// RUNNING, SUCCEEDED each) through to a subscriber that acknowledges every one.
pub async fn status_updates(hosts: usize, runs: usize) -> Result<StatusFigures, HostError> {
    let (sim, manager) = cluster(hosts.max(1)).await?;
    let expected = 3 * runs as u64;
    let mut events = manager.subscribe();
    let consumer = {
        let manager = manager.clone();
        tokio::spawn(async move {
            let mut n = 0u64;
            while n < expected {
                match events.recv().await {
                    Some(HostEvent::Run(u)) => {
                        manager.acknowledge(&u.run_id, u.seq).await;
                        n += 1;
                    }
                    Some(_) => {}
                    None => break,
                }
            }
            n
        })
    };
    let spec = TaskSpec {
        command: "sim".into(),
        resources: Resources::new(10, 10, 0, 0),
        env: [("SIM_DURATION_MS".to_string(), "1000".to_string())].into(),
        ..TaskSpec::default()
    };
    let lease = manager.lease(&LeaseRequest::new(Resources::ZERO, hosts.max(1), 3_600_000))?;
    let per_host = runs.div_ceil(lease.hosts.len().max(1));
    let start = Instant::now();
    let mut launched = 0usize;
    for offer in &lease.hosts {
        if launched == runs {
            break;
        }
        let n = per_host.min(runs - launched);
        let batch: Vec<LaunchRequest> = (launched..launched + n)
            .map(|i| LaunchRequest {
                gang: None,
                user: None,
                run_id: format!("bench-{i}-1"),
                task_id: format!("bench-{i}"),
                spec: spec.clone(),
                env: Default::default(),
                secrets: Vec::new(),
                gpu: Default::default(),
            })
            .collect();
        manager.launch(lease.id, &offer.name, batch).await?;
        launched += n;
    }
    sim.run_until_idle(3_600_000).await;
    let updates = consumer.await.map_err(|_| HostError::Stopped)?;
    let elapsed = start.elapsed();
    Ok(StatusFigures { runs, updates, elapsed, updates_per_sec: updates as f64 / elapsed.as_secs_f64().max(1e-9) })
}

/// The result of [`mesos_offers`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct OfferFigures {
    /// Hosts that joined the inventory.
    pub hosts: usize,
    /// Offers the provider took from the stream.
    pub offers: u64,
    /// Wall time from the first OFFERS event read off the stream to the last host in the inventory.
    pub elapsed: std::time::Duration,
    /// Offers per second.
    pub offers_per_sec: f64,
}

/// Subscribes to the master in `config`, calls `add_hosts` (which must
/// make the master offer `hosts` new agents) and times from the first
/// OFFERS event read off the stream until every agent is a host in the
/// inventory: decoding, offer bookkeeping, registration and the manager's
/// inventory included; the master's time to produce the offers is not.
pub async fn mesos_offers<F, Fut>(
    mut config: crate::mesos::MesosConfig,
    hosts: usize,
    add_hosts: F,
) -> Result<OfferFigures, HostError>
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    config.registration_delay = Duration::ZERO;
    let provider = crate::mesos::MesosProvider::new(config, None);
    let _stop = provider.stop_on_drop();
    let manager = HostManager::builder(Arc::new(provider.clone()))
        .config(ManagerConfig { tick_interval: None, heartbeat_timeout_ms: 3_600_000, ..ManagerConfig::default() })
        .start()
        .await?;
    let deadline = Instant::now() + Duration::from_secs(30);
    while !provider.is_subscribed() {
        if Instant::now() > deadline {
            return Err(HostError::InvalidRequest { field: "masters", reason: "no subscription within 30 s".into() });
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let mut events = manager.subscribe();
    let before = provider.offers_seen();
    let _ = provider.take_offer_clock();
    let called = Instant::now();
    add_hosts().await;
    let mut joined = std::collections::HashSet::with_capacity(hosts);
    let wait = async {
        while joined.len() < hosts {
            match events.recv().await {
                Some(HostEvent::HostJoined { host, .. }) => {
                    joined.insert(host);
                }
                Some(_) => {}
                None => break,
            }
        }
    };
    if tokio::time::timeout(Duration::from_secs(120), wait).await.is_err() || joined.len() < hosts {
        return Err(HostError::InvalidRequest {
            field: "hosts",
            reason: format!("{} of {hosts} joined in 120 s", joined.len()),
        });
    }
    // From the first byte of offers decoded (the master's own time to make
    // them is not ours), to the last host in the inventory.
    let start = provider.take_offer_clock().unwrap_or(called);
    let elapsed = start.elapsed();
    let offers = provider.offers_seen() - before;
    Ok(OfferFigures { hosts, offers, elapsed, offers_per_sec: offers as f64 / elapsed.as_secs_f64().max(1e-9) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn figures_come_back() {
        let l = lease_rounds(1_000, 100, Duration::from_millis(200)).await.expect("lease bench");
        assert!(l.rounds > 0);
        let s = status_updates(100, 1_000).await.expect("status bench");
        assert_eq!(s.updates, 3_000);
    }
}

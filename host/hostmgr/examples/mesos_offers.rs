//! Offers per second from a Mesos event stream into the inventory, against
//! the fake master: `cargo run -p paceline-hostmgr --example mesos_offers [-- N]`
//! (N agents, default 10,000; budget ≥ 10,000 offers/s).

use std::time::Duration;

use paceline_hostmgr::bench::mesos_offers;
use paceline_hostmgr::mesos::{Encoding, MesosConfig};
use paceline_mesos_fake::{AgentSpec, FakeConfig, FakeMaster};

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let n: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(10_000);
    for encoding in [Encoding::Protobuf, Encoding::Json] {
        let fake =
            FakeMaster::start(FakeConfig { allocation_interval: Duration::from_millis(5), ..FakeConfig::default() })
                .await?;
        let config = MesosConfig { masters: vec![fake.url()], encoding, idle_suppress: None, ..MesosConfig::default() };
        let figures = mesos_offers(config, n, || async {
            fake.add_agents((0..n).map(|i| {
                AgentSpec::new(&format!("bench-{i:05}"), 32.0, 131_072.0)
                    .attribute("zone", if i % 2 == 0 { "a" } else { "b" })
            }));
        })
        .await?;
        println!(
            "mesos offers ({encoding:?}): {} offers, {} hosts in the inventory in {:.1} ms: {:.0} offers/s (budget >= 10000)",
            figures.offers,
            figures.hosts,
            figures.elapsed.as_secs_f64() * 1000.0,
            figures.offers_per_sec
        );
    }
    Ok(())
}

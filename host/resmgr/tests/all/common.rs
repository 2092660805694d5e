//! Builders shared by the tests.

use paceline_model::Resources;
use paceline_resmgr::{Config, GangSpec, PerKind, PoolSpec, PoolType, ResourceManager, UNLIMITED};

/// A spec with cpu reservation, cpu limit (`None`: unlimited) and cpu share.
pub fn cpu(reservation: u64, limit: Option<u64>, share: u64) -> PoolSpec {
    let mut s = PoolSpec::default();
    s.reservation.cpu = reservation;
    s.limit.cpu = limit.unwrap_or(UNLIMITED);
    s.share.cpu = share;
    s
}

/// A static (in cpu) spec with a cpu reservation.
pub fn static_cpu(reservation: u64) -> PoolSpec {
    let mut s = cpu(reservation, None, 1);
    s.pool_type = PerKind { cpu: PoolType::Static, ..PerKind::splat(PoolType::Elastic) };
    s
}

/// A manager with `cpu` millicores (and plenty of every other kind).
pub fn manager(cpu: u64) -> ResourceManager {
    let mut rm = ResourceManager::new(Config::default());
    rm.set_capacity(Resources::new(cpu, 1 << 40, 1 << 40, 1 << 20));
    rm
}

/// A preemptible gang of `tasks` tasks of `cpu` millicores each.
pub fn gang(job: u64, tasks: u32, cpu: u64) -> GangSpec {
    GangSpec { job, tasks, per_task: Resources::new(cpu, 0, 0, 0), ..GangSpec::default() }
}

/// Submits one gang of `demand` cpu (one task) to make a pool's demand.
pub fn demand(rm: &mut ResourceManager, pool: &str, cpu: u64) {
    if cpu > 0 {
        rm.submit(pool, gang(0, 1, cpu), 0).expect("submit");
    }
}

/// A pool's cpu entitlement.
pub fn ent(rm: &ResourceManager, pool: &str) -> u64 {
    rm.pool_status(pool).expect("pool").entitlement.cpu_millis
}

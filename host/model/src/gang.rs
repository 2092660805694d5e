//! Gang peer discovery: what each member of a gang learns at launch about
//! the whole gang (its rank, every member's address and ports), so that a
//! distributed program (PyTorch, TensorFlow, JAX) can start on it.
//!
//! The job manager assembles the peer list when it launches a gang's runs
//! (all members are placed in one round, so every member's host is known
//! then) and again for each member it launches later (a replacement gets the
//! current list). Ports are the one thing a host usually picks at start; a
//! gang member's ports are picked by the job manager instead
//! ([`pick_ports`]) and the host must assign exactly those, or no member
//! could name another's before they all run.
//!
//! Pure rules only: who is in which world, ranks, the peers file and the
//! environment. The wiring is in the job manager (`manager/gang.rs`) and
//! the agent (which writes the file into the sandbox).

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

/// The host attribute a host's address for peers is read from (an address
/// other hosts reach it at: an IP or a resolvable name). Without it, the
/// host name is the address.
pub const ADDRESS_ATTRIBUTE: &str = "address";

/// The host attribute an agent reports its task port range in
/// (`FIRST-LAST`, inclusive): the job manager picks gang members' ports in it.
pub const PORT_RANGE_ATTRIBUTE: &str = "port_range";

/// Which framework's variables a gang member gets besides `PACELINE_GANG_*`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GangDiscovery {
    /// Only `PACELINE_GANG_*` and the peers file (the default: a framework's
    /// variables change how programs that read them start, so a job asks).
    #[default]
    None,
    /// `MASTER_ADDR`, `MASTER_PORT`, `WORLD_SIZE`, `RANK`, `LOCAL_RANK`,
    /// `LOCAL_WORLD_SIZE` (torch.distributed's `env://`).
    Pytorch,
    /// `TF_CONFIG` (`cluster.worker` and `task`).
    Tensorflow,
    /// `JAX_COORDINATOR_ADDRESS`, `JAX_NUM_PROCESSES`, `JAX_PROCESS_ID`.
    Jax,
}

impl GangDiscovery {
    /// The name in job specs and the API.
    pub fn as_str(self) -> &'static str {
        match self {
            GangDiscovery::None => "none",
            GangDiscovery::Pytorch => "pytorch",
            GangDiscovery::Tensorflow => "tensorflow",
            GangDiscovery::Jax => "jax",
        }
    }

    /// The value for a name (`none`, `pytorch`, `tensorflow`, `jax`).
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "none" | "" => GangDiscovery::None,
            "pytorch" => GangDiscovery::Pytorch,
            "tensorflow" => GangDiscovery::Tensorflow,
            "jax" => GangDiscovery::Jax,
            _ => return None,
        })
    }

    /// Whether the framework needs a coordinator port (every member's first
    /// port, rank 0's being the coordinator's).
    pub fn needs_port(self) -> bool {
        self != GangDiscovery::None
    }
}

/// What a job says about its gangs beyond their size
/// (`sla.min_running_instances`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GangSpec {
    /// Framework variables to set in each member's environment.
    pub discovery: GangDiscovery,
}

impl GangSpec {
    /// Not written when default, so the stored form of every other job is unchanged.
    pub fn is_default(&self) -> bool {
        *self == GangSpec::default()
    }
}

/// One member of a gang, as every member sees it: one entry of the peers file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GangPeer {
    /// 0-based position in the gang, in instance order.
    pub rank: u32,
    /// The job's instance number.
    pub instance: u32,
    /// The host's name in the cluster.
    pub host: String,
    /// Where the other members reach it ([`ADDRESS_ATTRIBUTE`], else the host name).
    pub address: String,
    /// Its first port in the spec's order (the coordinator's for rank 0);
    /// absent when the task names no port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    /// Every port by name.
    pub ports: BTreeMap<String, u16>,
}

impl GangPeer {
    /// `address:port`, or the address alone without a port.
    pub fn endpoint(&self) -> String {
        match self.port {
            Some(p) => format!("{}:{p}", self.address),
            None => self.address.clone(),
        }
    }
}

/// What a member's launch carries for discovery; the host assigns exactly
/// `ports` and writes `peers_json` into the sandbox.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GangLaunch {
    /// This member's ports, by name, chosen by the job manager.
    pub ports: BTreeMap<String, u16>,
    /// The peers file: a JSON array of [`GangPeer`], by rank.
    pub peers_json: String,
}

/// The name of the peers file in the sandbox (`PACELINE_GANG_PEERS_FILE`).
pub const PEERS_FILE: &str = "paceline-gang.json";

/// The gang (world) instance `instance` belongs to, as `(first instance,
/// size)`, or `None` when the job has no gang (`gang_size` ≤ 1). Worlds are
/// the blocks admission forms on a job's first submission: `[0, size)`,
/// `[size, 2·size)`, …, the last one cut at `instance_count`. A replacement
/// belongs to the same world as the run it replaces, with the same rank.
pub fn world_of(instance: u32, gang_size: u32, instance_count: u32) -> Option<(u32, u32)> {
    if gang_size <= 1 || instance >= instance_count {
        return None;
    }
    let first = instance / gang_size * gang_size;
    Some((first, gang_size.min(instance_count - first)))
}

/// A member as the job manager knows it when assembling the list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    pub instance: u32,
    pub host: String,
    pub address: String,
    /// Ports in the spec's order (the first is the coordinator's).
    pub ports: Vec<(String, u16)>,
}

/// The peer list of the world starting at instance `first`: ranks are
/// positions in the world (`instance - first`), so a replacement keeps its
/// rank and a member that is not on a host leaves a gap rather than
/// renumbering the others. Sorted by rank, whatever order the members come
/// in (placement groups them per host).
pub fn peers(first: u32, mut members: Vec<Member>) -> Vec<GangPeer> {
    members.sort_by_key(|m| m.instance);
    members.dedup_by_key(|m| m.instance);
    members
        .into_iter()
        .filter(|m| m.instance >= first)
        .map(|m| GangPeer {
            rank: m.instance - first,
            instance: m.instance,
            host: m.host,
            address: m.address,
            port: m.ports.first().map(|(_, p)| *p),
            ports: m.ports.into_iter().collect(),
        })
        .collect()
}

/// The environment member `rank` gets: `PACELINE_GANG_SIZE`,
/// `PACELINE_GANG_RANK`, `PACELINE_GANG_HOSTS` (every member's
/// `address[:port]` by rank, comma-separated) and the framework's
/// variables. `size` is the world's, which a list with a gap (a member
/// not on a host) is shorter than. `PACELINE_GANG_PEERS_FILE` is the host's to set (it knows
/// the sandbox).
pub fn env(peers: &[GangPeer], size: u32, rank: u32, discovery: GangDiscovery) -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    let size = size.to_string();
    let endpoints: Vec<String> = peers.iter().map(GangPeer::endpoint).collect();
    env.insert("PACELINE_GANG_SIZE".to_owned(), size.clone());
    env.insert("PACELINE_GANG_RANK".to_owned(), rank.to_string());
    env.insert("PACELINE_GANG_HOSTS".to_owned(), endpoints.join(","));
    let (Some(me), Some(coordinator)) = (peers.iter().find(|p| p.rank == rank), peers.iter().find(|p| p.rank == 0))
    else {
        return env;
    };
    match discovery {
        GangDiscovery::None => {}
        GangDiscovery::Pytorch => {
            // Ranks on one host, in rank order: torch's LOCAL_RANK picks a
            // device per process of a host.
            let local: Vec<&GangPeer> = peers.iter().filter(|p| p.host == me.host).collect();
            let local_rank = local.iter().position(|p| p.rank == rank).unwrap_or(0);
            env.insert("MASTER_ADDR".to_owned(), coordinator.address.clone());
            if let Some(port) = coordinator.port {
                env.insert("MASTER_PORT".to_owned(), port.to_string());
            }
            env.insert("WORLD_SIZE".to_owned(), size.clone());
            env.insert("RANK".to_owned(), rank.to_string());
            env.insert("LOCAL_RANK".to_owned(), local_rank.to_string());
            env.insert("LOCAL_WORLD_SIZE".to_owned(), local.len().to_string());
        }
        GangDiscovery::Tensorflow => {
            let config = serde_json::json!({
                "cluster": { "worker": endpoints },
                "task": { "type": "worker", "index": rank },
            });
            env.insert("TF_CONFIG".to_owned(), config.to_string());
        }
        GangDiscovery::Jax => {
            env.insert("JAX_COORDINATOR_ADDRESS".to_owned(), coordinator.endpoint());
            env.insert("JAX_NUM_PROCESSES".to_owned(), size.clone());
            env.insert("JAX_PROCESS_ID".to_owned(), rank.to_string());
        }
    }
    env
}

/// A host's task port range from its [`PORT_RANGE_ATTRIBUTE`] (`FIRST-LAST`).
pub fn parse_port_range(value: &str) -> Option<(u16, u16)> {
    let (first, last) = value.split_once('-')?;
    let (first, last) = (first.trim().parse().ok()?, last.trim().parse().ok()?);
    (first <= last && first > 0).then_some((first, last))
}

/// Picks `n` ports of `range` not in `held`, from the top of the range
/// down (an agent hands out its own picks from the bottom up, so the two
/// rarely meet on a port the job manager does not know is taken yet).
/// `None` when fewer are free.
pub fn pick_ports(range: (u16, u16), held: &BTreeSet<u16>, n: usize) -> Option<Vec<u16>> {
    let (first, last) = range;
    let mut got: Vec<u16> = Vec::with_capacity(n);
    let mut p = last;
    while got.len() < n {
        if !held.contains(&p) {
            got.push(p);
        }
        if p <= first {
            break;
        }
        p -= 1;
    }
    (got.len() == n).then_some(got)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(instance: u32, host: &str, ports: &[(&str, u16)]) -> Member {
        Member {
            instance,
            host: host.into(),
            address: format!("addr-{host}"),
            ports: ports.iter().map(|(n, p)| (n.to_string(), *p)).collect(),
        }
    }

    #[test]
    fn ranks_follow_instance_order_whatever_order_members_come_in() {
        // Placement hands members grouped by host: 5 and 7 on b, 4 and 6 on a.
        let list = peers(
            4,
            vec![
                member(5, "b", &[("coord", 2001)]),
                member(7, "b", &[("coord", 2002)]),
                member(4, "a", &[("coord", 1001)]),
                member(6, "a", &[("coord", 1002)]),
            ],
        );
        let ranks: Vec<(u32, u32)> = list.iter().map(|p| (p.rank, p.instance)).collect();
        assert_eq!(ranks, vec![(0, 4), (1, 5), (2, 6), (3, 7)]);
        assert_eq!(list[0].endpoint(), "addr-a:1001");
    }

    #[test]
    fn ports_are_named_and_the_first_in_spec_order_is_the_coordinator_port() {
        // "rpc" sorts after "metrics" but comes first in the spec.
        let list = peers(0, vec![member(0, "a", &[("rpc", 3000), ("metrics", 3001)])]);
        assert_eq!(list[0].port, Some(3000));
        assert_eq!(list[0].ports, BTreeMap::from([("rpc".to_string(), 3000), ("metrics".to_string(), 3001)]));
        let json = serde_json::to_value(&list).unwrap_or_default();
        assert_eq!(
            json,
            serde_json::json!([{"rank": 0, "instance": 0, "host": "a", "address": "addr-a", "port": 3000,
                                "ports": {"metrics": 3001, "rpc": 3000}}])
        );
    }

    #[test]
    fn worlds_are_aligned_blocks_of_the_gang_size() {
        assert_eq!(world_of(0, 4, 4), Some((0, 4)));
        assert_eq!(world_of(3, 4, 4), Some((0, 4)));
        assert_eq!(world_of(5, 4, 10), Some((4, 4)));
        assert_eq!(world_of(9, 4, 10), Some((8, 2)));
        assert_eq!(world_of(0, 1, 4), None);
        assert_eq!(world_of(4, 4, 4), None);
    }

    #[test]
    fn each_framework_gets_its_variables_from_the_same_list() {
        let list = peers(
            0,
            vec![member(0, "a", &[("c", 1001)]), member(1, "a", &[("c", 1002)]), member(2, "b", &[("c", 2001)])],
        );
        let none = env(&list, 3, 2, GangDiscovery::None);
        assert_eq!(none["PACELINE_GANG_SIZE"], "3");
        assert_eq!(none["PACELINE_GANG_RANK"], "2");
        assert_eq!(none["PACELINE_GANG_HOSTS"], "addr-a:1001,addr-a:1002,addr-b:2001");
        assert!(!none.contains_key("RANK") && !none.contains_key("TF_CONFIG"));
        let torch = env(&list, 3, 1, GangDiscovery::Pytorch);
        assert_eq!(
            (torch["MASTER_ADDR"].as_str(), torch["MASTER_PORT"].as_str(), torch["WORLD_SIZE"].as_str()),
            ("addr-a", "1001", "3")
        );
        assert_eq!(
            (torch["RANK"].as_str(), torch["LOCAL_RANK"].as_str(), torch["LOCAL_WORLD_SIZE"].as_str()),
            ("1", "1", "2")
        );
        let tf: serde_json::Value =
            serde_json::from_str(&env(&list, 3, 2, GangDiscovery::Tensorflow)["TF_CONFIG"]).unwrap_or_default();
        assert_eq!(tf["cluster"]["worker"][2], "addr-b:2001");
        assert_eq!(tf["task"], serde_json::json!({"type": "worker", "index": 2}));
        let jax = env(&list, 3, 0, GangDiscovery::Jax);
        assert_eq!(
            (
                jax["JAX_COORDINATOR_ADDRESS"].as_str(),
                jax["JAX_NUM_PROCESSES"].as_str(),
                jax["JAX_PROCESS_ID"].as_str()
            ),
            ("addr-a:1001", "3", "0")
        );
    }

    #[test]
    fn a_member_off_its_host_leaves_a_gap_and_ranks_do_not_move() {
        // Instance 5 (rank 1 of the world at 4) is not on a host.
        let list = peers(4, vec![member(6, "a", &[("c", 1)]), member(4, "a", &[("c", 2)])]);
        assert_eq!(list.iter().map(|p| p.rank).collect::<Vec<_>>(), vec![0, 2]);
        let e = env(&list, 3, 2, GangDiscovery::Jax);
        assert_eq!((e["PACELINE_GANG_SIZE"].as_str(), e["JAX_PROCESS_ID"].as_str()), ("3", "2"));
        assert_eq!(e["PACELINE_GANG_HOSTS"], "addr-a:2,addr-a:1");
    }

    #[test]
    fn ports_are_picked_from_the_top_avoiding_held_ones() {
        let held = BTreeSet::from([1010, 1008]);
        assert_eq!(pick_ports((1000, 1010), &held, 2), Some(vec![1009, 1007]));
        assert_eq!(pick_ports((1000, 1002), &BTreeSet::from([1001]), 3), None);
        assert_eq!(pick_ports((1000, 1001), &BTreeSet::new(), 0), Some(vec![]));
        assert_eq!(pick_ports((1, 1), &BTreeSet::new(), 1), Some(vec![1]));
        assert_eq!(parse_port_range("20000-20999"), Some((20000, 20999)));
        assert_eq!(parse_port_range("9-1"), None);
        assert_eq!(parse_port_range("x"), None);
    }
}

//! Finding the leading Mesos master through ZooKeeper.
//!
//! Masters contend in ZooKeeper under a path (`zk://h1:2181,h2:2181/mesos`):
//! each holds an ephemeral sequential node `json.info_<seq>` whose data is its
//! `MasterInfo` as JSON, and the lowest sequence leads. We read that node and
//! turn it into the master's base URL. Nodes of other shapes (the older
//! `info_` protobuf nodes, log replicas) are ignored.

use std::time::Duration;

use tracing::warn;

/// Prefix of the masters' contender nodes that carry JSON.
const NODE_PREFIX: &str = "json.info_";

/// A `zk://` master address, parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ZkUrl {
    /// `host:port[,host:port…]`.
    pub connect: String,
    /// The masters' group path, e.g. `/mesos`.
    pub path: String,
}

impl ZkUrl {
    /// Parses `zk://[user:pass@]host:port[,…]/path`; `None` if `s` is not a `zk://` URL.
    pub fn parse(s: &str) -> Option<Result<ZkUrl, String>> {
        let rest = s.strip_prefix("zk://")?;
        let rest = rest.rsplit_once('@').map_or(rest, |(_, r)| r);
        let Some((connect, path)) = rest.split_once('/') else {
            return Some(Err(format!("`{s}`: a zk:// master URL needs a path, e.g. zk://host:2181/mesos")));
        };
        if connect.is_empty() || path.is_empty() {
            return Some(Err(format!("`{s}`: a zk:// master URL needs hosts and a path")));
        }
        Some(Ok(ZkUrl { connect: connect.to_string(), path: format!("/{}", path.trim_end_matches('/')) }))
    }
}

/// The parts of `MasterInfo` (JSON) that locate a master.
#[derive(serde::Deserialize)]
struct MasterInfo {
    #[serde(default)]
    address: Option<Address>,
    #[serde(default)]
    hostname: Option<String>,
    #[serde(default)]
    port: Option<u32>,
}

#[derive(serde::Deserialize)]
struct Address {
    #[serde(default)]
    hostname: Option<String>,
    #[serde(default)]
    ip: Option<String>,
    port: u32,
}

/// The base URL (`http://host:port`) a master's JSON `MasterInfo` names.
pub fn base_url(info: &[u8]) -> Result<String, String> {
    let info: MasterInfo = serde_json::from_slice(info).map_err(|e| format!("MasterInfo is not valid JSON: {e}"))?;
    let (host, port) = match info.address {
        Some(a) => (a.hostname.filter(|h| !h.is_empty()).or(a.ip), Some(a.port)),
        None => (info.hostname, info.port),
    };
    match (host, port) {
        (Some(h), Some(p)) if !h.is_empty() && p > 0 && p <= u32::from(u16::MAX) => Ok(format!("http://{h}:{p}")),
        _ => Err("MasterInfo names no address (address.hostname/ip and port)".into()),
    }
}

/// Asks ZooKeeper which master leads; its base URL.
pub async fn leading_master(url: &ZkUrl, timeout: Duration) -> Result<String, String> {
    let work = async {
        let client = zookeeper_client::Client::connector()
            .with_session_timeout(timeout.max(Duration::from_secs(2)))
            .with_fail_eagerly()
            .connect(&url.connect)
            .await
            .map_err(|e| format!("ZooKeeper {}: {e}", url.connect))?;
        let children = client.list_children(&url.path).await.map_err(|e| format!("listing {}: {e}", url.path))?;
        let mut contenders: Vec<(u64, String)> = children
            .into_iter()
            .filter_map(|name| {
                let seq = name.strip_prefix(NODE_PREFIX)?.parse::<u64>().ok()?;
                Some((seq, name))
            })
            .collect();
        contenders.sort();
        // The lowest well-formed contender leads; a node whose data does not
        // name a master is skipped with a warning.
        for (_, name) in contenders {
            let path = format!("{}/{name}", url.path);
            match client.get_data(&path).await {
                Ok((data, _)) => match base_url(&data) {
                    Ok(base) => return Ok(base),
                    Err(e) => warn!(node = path, error = e, "mesos: ignoring a malformed master node"),
                },
                // Gone between listing and reading: the next one.
                Err(e) => warn!(node = path, error = %e, "mesos: master node unreadable"),
            }
        }
        Err(format!("no master has registered under {} at {}", url.path, url.connect))
    };
    tokio::time::timeout(timeout, work)
        .await
        .map_err(|_| format!("ZooKeeper {}: no answer within {timeout:?}", url.connect))?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse() {
        assert_eq!(
            ZkUrl::parse("zk://a:2181,b:2181/mesos/"),
            Some(Ok(ZkUrl { connect: "a:2181,b:2181".into(), path: "/mesos".into() }))
        );
        assert_eq!(ZkUrl::parse("zk://u:p@a:2181/m").and_then(Result::ok).map(|u| u.connect), Some("a:2181".into()));
        assert!(ZkUrl::parse("http://m:5050").is_none());
        assert!(matches!(ZkUrl::parse("zk://a:2181"), Some(Err(_))));
    }

    #[test]
    fn master_info_names_the_address() {
        let info = br#"{"address":{"hostname":"m1","ip":"10.0.0.1","port":5050},"hostname":"m1","id":"x","ip":16777226,"port":5050,"pid":"master@10.0.0.1:5050"}"#;
        assert_eq!(base_url(info), Ok("http://m1:5050".into()));
        assert_eq!(base_url(br#"{"address":{"ip":"10.0.0.2","port":5051}}"#), Ok("http://10.0.0.2:5051".into()));
        assert_eq!(base_url(br#"{"hostname":"m3","port":5052}"#), Ok("http://m3:5052".into()));
        assert!(base_url(b"not json").is_err());
        assert!(base_url(br#"{"id":"x"}"#).is_err());
    }
}

//! `paceline pool …`: the resource pool tree.
//!
//! A pool file is one entry of the model's pool YAML
//! (`paceline_model::pool::PoolEntry`, see docs/resmgr.md), with `path`
//! optional since the command names it; a whole `pools:` file is accepted
//! too, and the entry with the command's path is taken from it; and so is
//! what `pool get -o yaml|json` prints (its `spec:` is taken).

use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use paceline_api::pools::pool_spec_pb;
use paceline_model::pool::{PerKind, PoolEntry, PoolFile, PoolSpec, PoolType, ResourceKind, UNLIMITED, amount_text};
use paceline_proto::v1 as pb;
use pb::pool_service_client::PoolServiceClient;
use serde_json::json;

use super::output::{Table, emit, fields};
use super::{ClientOpts, RpcError, bad_input, block_on, connect, render};

/// `paceline pool`.
#[derive(Debug, Args)]
pub struct PoolArgs {
    #[command(flatten)]
    opts: ClientOpts,
    #[command(subcommand)]
    cmd: PoolCommand,
}

/// Pool commands.
#[derive(Debug, Subcommand)]
pub enum PoolCommand {
    /// Create a pool under an existing parent.
    Create {
        /// Pool path, such as /team/batch.
        path: String,
        /// The pool spec (YAML: reservation, limit, share, type, slack_limit, queue_policy,
        /// controller_limit_percent;
        /// kinds `cpu_millis`, `memory_mib`, `disk_mib`, `gpus`; see docs/resmgr.md).
        file: PathBuf,
    },
    /// Show one pool with its entitlement, allocation and demand.
    Get {
        /// Pool path.
        path: String,
    },
    /// Replace a pool's spec.
    Update {
        /// Pool path.
        path: String,
        /// The new pool spec (YAML).
        file: PathBuf,
    },
    /// Delete an empty leaf pool.
    Delete {
        /// Pool path.
        path: String,
    },
    /// The pool tree with entitlement, allocation and demand.
    List,
    /// Make the server's pools match a file of pools (`pools:`, as
    /// examples/pools.yaml): each pool in the file is created when missing
    /// and updated when its spec differs, parents first; pools the file does
    /// not name are left as they are. Prints what changes; applying the same
    /// file again changes nothing.
    Apply {
        /// The pool file (YAML, a `pools:` list).
        file: PathBuf,
        /// Only show what would change.
        #[arg(long)]
        dry_run: bool,
    },
}

/// Runs a pool command.
pub fn run(args: PoolArgs) -> anyhow::Result<std::process::ExitCode> {
    block_on(exec(args.opts, args.cmd))
}

fn check_path(path: &str) -> anyhow::Result<()> {
    if path.starts_with('/') { Ok(()) } else { Err(bad_input(format!("pool path {path:?} must start with /"))) }
}

/// Reads a pool spec for `path` from a file and checks what one spec can get
/// wrong on its own (the server checks it against the tree).
pub fn load_pool(path: &str, file: &Path) -> anyhow::Result<PoolSpec> {
    let bytes = super::read_file(file)?;
    let invalid = |e: &dyn std::fmt::Display| bad_input(format!("{}: invalid pool spec: {e}", file.display()));
    let mut doc: serde_yaml::Value = serde_yaml::from_slice(&bytes).map_err(|e| invalid(&e))?;
    // What `pool get -o yaml|json` printed: the spec is under `spec:`, the
    // rest is status, so the output can be edited and applied as it is.
    let shown = doc.as_mapping().filter(|m| m.contains_key("spec") && m.contains_key("entitlement"));
    if let Some(m) = shown {
        let named = m.get("path").and_then(serde_yaml::Value::as_str).map(str::to_owned);
        if let Some(p) = named.filter(|p| p != path) {
            return Err(invalid(&format!("`path` is {p}, but the command names {path}")));
        }
        let mut spec = m.get("spec").cloned().unwrap_or(serde_yaml::Value::Null);
        if let Some(spec) = spec.as_mapping_mut() {
            spec.insert("path".into(), path.into());
        }
        let entry: PoolEntry = serde_yaml::from_value(spec).map_err(|e| invalid(&format!("spec: {e}")))?;
        return checked(entry, &invalid);
    }
    let empty = doc.is_null();
    let entry = match doc.as_mapping_mut() {
        Some(m) if m.contains_key("pools") => {
            let pools: PoolFile = serde_yaml::from_slice(&bytes).map_err(|e| invalid(&e))?;
            let have: Vec<String> = pools.pools.iter().map(|p| p.path.clone()).collect();
            pools
                .pools
                .into_iter()
                .find(|p| p.path == path)
                .ok_or_else(|| invalid(&format!("no pool {path} in this file (it has {})", have.join(", "))))?
        }
        Some(m) => {
            let named = m.get("path").and_then(serde_yaml::Value::as_str).map(str::to_owned);
            if let Some(p) = &named
                && p != path
            {
                return Err(invalid(&format!("`path` is {p}, but the command names {path}")));
            }
            if named.is_some() || flow_style(&bytes) {
                m.insert("path".into(), path.into());
                serde_yaml::from_value::<PoolEntry>(doc).map_err(|e| invalid(&e))?
            } else {
                // Parsed from text rather than from `doc` so errors keep the
                // field path and line; the path goes last so lines stay true.
                let mut text = String::from_utf8_lossy(&bytes).into_owned();
                text.push_str(&format!("\npath: {}\n", serde_json::to_string(path)?));
                serde_yaml::from_str::<PoolEntry>(&text).map_err(|e| invalid(&e))?
            }
        }
        // An empty file is a pool with every default.
        None if empty => PoolEntry { path: path.to_owned(), ..PoolEntry::default() },
        None => return Err(invalid(&"expected a mapping of pool fields")),
    };
    checked(entry, &invalid)
}

/// The entry's spec, checked as the server will check it.
fn checked(entry: PoolEntry, invalid: &dyn Fn(&dyn std::fmt::Display) -> anyhow::Error) -> anyhow::Result<PoolSpec> {
    let spec = entry.spec();
    spec.check().map_err(|e| invalid(&e))?;
    spec.check_usable().map_err(|e| invalid(&format!("{}: {e}", e.field())))?;
    Ok(spec)
}

/// Whether a YAML mapping is written `{ … }`, where a line cannot be appended.
fn flow_style(bytes: &[u8]) -> bool {
    let text = String::from_utf8_lossy(bytes);
    let first = text.lines().map(str::trim).find(|l| !l.is_empty() && !l.starts_with('#') && *l != "---");
    first.is_some_and(|l| l.starts_with('{'))
}

async fn exec(opts: ClientOpts, cmd: PoolCommand) -> anyhow::Result<()> {
    let out = opts.output;
    if let PoolCommand::Apply { file, dry_run } = &cmd {
        let wanted = load_pool_file(file)?;
        let mut client = PoolServiceClient::new(connect(&opts).await?);
        return apply(&mut client, out, wanted, *dry_run).await;
    }
    let spec = match &cmd {
        PoolCommand::Create { path, file } | PoolCommand::Update { path, file } => {
            check_path(path)?;
            Some(pool_spec_pb(&load_pool(path, file)?))
        }
        PoolCommand::Get { path } | PoolCommand::Delete { path } => {
            check_path(path)?;
            None
        }
        PoolCommand::List | PoolCommand::Apply { .. } => None,
    };
    let mut client = PoolServiceClient::new(connect(&opts).await?);
    let done =
        |path: &str, what: &str| emit(out, &json!({"path": path, "result": what}), || format!("{path}: {what}\n"));
    match cmd {
        PoolCommand::Create { path, .. } => {
            let answer =
                client.create_pool(pb::CreatePoolRequest { path: path.clone(), spec }).await.map_err(RpcError)?;
            warn(&answer.into_inner().warnings);
            done(&path, "created")
        }
        PoolCommand::Update { path, .. } => {
            let answer =
                client.update_pool(pb::UpdatePoolRequest { path: path.clone(), spec }).await.map_err(RpcError)?;
            warn(&answer.into_inner().warnings);
            done(&path, "updated")
        }
        PoolCommand::Delete { path } => {
            client.delete_pool(pb::DeletePoolRequest { path: path.clone() }).await.map_err(RpcError)?;
            done(&path, "deleted")
        }
        PoolCommand::Get { path } => {
            let pool = client.get_pool(pb::GetPoolRequest { path: path.clone() }).await.map_err(RpcError)?;
            let pool =
                pool.into_inner().pool.ok_or_else(|| anyhow::anyhow!("the server answered with no pool for {path}"))?;
            emit(out, &render::pool(&pool), || pool_fields(&pool))
        }
        PoolCommand::Apply { .. } => Ok(()),
        PoolCommand::List => {
            let resp = client.list_pools(pb::ListPoolsRequest {}).await.map_err(RpcError)?.into_inner();
            let value = json!({
                "capacity": render::resources(resp.capacity.as_ref()),
                "pools": resp.pools.iter().map(render::pool).collect::<Vec<_>>(),
            });
            emit(out, &value, || pool_tree(&resp))
        }
    }
}

/// A whole pool file for `pool apply`: every entry checked as `pool create`
/// checks one, paths unique, each pool's parent either `/`, in the file, or
/// (checked by the server) already there; sorted parents first.
pub fn load_pool_file(file: &Path) -> anyhow::Result<Vec<(String, PoolSpec)>> {
    let bytes = super::read_file(file)?;
    let invalid = |e: &dyn std::fmt::Display| bad_input(format!("{}: invalid pool file: {e}", file.display()));
    let parsed: PoolFile = serde_yaml::from_slice(&bytes).map_err(|e| invalid(&e))?;
    if parsed.pools.is_empty() {
        return Err(invalid(&"no pools (expected `pools:` with a list of pools)"));
    }
    let mut seen = std::collections::BTreeSet::new();
    let mut pools = Vec::with_capacity(parsed.pools.len());
    for (i, entry) in parsed.pools.into_iter().enumerate() {
        let path = entry.path.clone();
        check_path(&path).map_err(|e| invalid(&format!("pools[{i}].path: {e}")))?;
        if path == "/" {
            return Err(invalid(&format!("pools[{i}]: the root pool / is the cluster; it cannot be applied")));
        }
        if !seen.insert(path.clone()) {
            return Err(invalid(&format!("pools[{i}]: {path} appears twice")));
        }
        let at = |e: &dyn std::fmt::Display| invalid(&format!("pools[{i}] ({path}): {e}"));
        let spec = checked(entry, &at)?;
        pools.push((path, spec));
    }
    // Parents first: a path's depth is its count of segments.
    pools.sort_by_key(|(path, _)| path.split('/').filter(|s| !s.is_empty()).count());
    Ok(pools)
}

/// What `pool apply` does to one pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Change {
    Create,
    Update,
    Unchanged,
}

impl Change {
    fn word(self) -> &'static str {
        match self {
            Change::Create => "create",
            Change::Update => "update",
            Change::Unchanged => "unchanged",
        }
    }
}

/// The fields of two pool specs that differ, as `field: old → new` (the
/// pool file's own names and values).
fn spec_diff(old: &PoolSpec, new: &PoolSpec) -> Vec<String> {
    let as_json = |s: &PoolSpec| render::pool_spec(&pool_spec_pb(s));
    let (old, new) = (as_json(old), as_json(new));
    let mut keys: std::collections::BTreeSet<String> = std::collections::BTreeSet::new();
    for v in [&old, &new] {
        if let Some(m) = v.as_object() {
            keys.extend(m.keys().cloned());
        }
    }
    keys.into_iter()
        .filter_map(|k| {
            let (a, b) = (old.get(&k).cloned().unwrap_or_default(), new.get(&k).cloned().unwrap_or_default());
            (a != b).then(|| format!("{k}: {a} → {b}"))
        })
        .collect()
}

/// `pool apply`: compares each pool of the file with the server's, then
/// creates and updates, parents first, stopping at the first refusal (the
/// pools before it stay applied, and the message says which).
async fn apply(
    client: &mut PoolServiceClient<super::Api>,
    out: super::Output,
    wanted: Vec<(String, PoolSpec)>,
    dry_run: bool,
) -> anyhow::Result<()> {
    let listed = client.list_pools(pb::ListPoolsRequest {}).await.map_err(RpcError)?.into_inner();
    let have: std::collections::BTreeMap<String, PoolSpec> = listed
        .pools
        .iter()
        .map(|p| (p.path.clone(), p.spec.as_ref().map(render::model_pool_spec).unwrap_or_default()))
        .collect();
    let plan: Vec<(String, PoolSpec, Change, Vec<String>)> = wanted
        .into_iter()
        .map(|(path, spec)| match have.get(&path) {
            None => (path, spec, Change::Create, Vec::new()),
            Some(old) if *old == spec => (path, spec, Change::Unchanged, Vec::new()),
            Some(old) => {
                let diff = spec_diff(old, &spec);
                (path, spec, Change::Update, diff)
            }
        })
        .collect();
    let mut applied: Vec<String> = Vec::new();
    if !dry_run {
        for (path, spec, change, _) in &plan {
            let spec = Some(pool_spec_pb(spec));
            let sent = match change {
                Change::Create => client
                    .create_pool(pb::CreatePoolRequest { path: path.clone(), spec })
                    .await
                    .map(|a| a.into_inner().warnings),
                Change::Update => client
                    .update_pool(pb::UpdatePoolRequest { path: path.clone(), spec })
                    .await
                    .map(|a| a.into_inner().warnings),
                Change::Unchanged => Ok(Vec::new()),
            };
            if let Ok(warnings) = &sent {
                warn(warnings);
            }
            if let Err(status) = sent {
                let done = if applied.is_empty() {
                    "nothing was changed".to_string()
                } else {
                    format!("applied before it: {}", applied.join(", "))
                };
                return Err(
                    anyhow::Error::new(RpcError(status)).context(format!("{} {path} refused ({done})", change.word()))
                );
            }
            if *change != Change::Unchanged {
                applied.push(path.clone());
            }
        }
    }
    let value = json!({
        "dry_run": dry_run,
        "pools": plan.iter().map(|(path, _, change, diff)| json!({"path": path, "change": change.word(), "diff": diff})).collect::<Vec<_>>(),
    });
    emit(out, &value, || {
        let mut text = String::new();
        for (path, _, change, diff) in &plan {
            let (mark, word) = match (change, dry_run) {
                (Change::Create, false) => ('+', "created"),
                (Change::Create, true) => ('+', "would be created"),
                (Change::Update, false) => ('~', "updated"),
                (Change::Update, true) => ('~', "would be updated"),
                (Change::Unchanged, _) => ('=', "unchanged"),
            };
            text.push_str(&format!("{mark} {path} {word}\n"));
            for line in diff {
                text.push_str(&format!("    {line}\n"));
            }
        }
        let changes = plan.iter().filter(|p| p.2 != Change::Unchanged).count();
        text.push_str(&match (changes, dry_run) {
            (0, _) => "nothing to change\n".to_string(),
            (n, true) => format!("{n} pool(s) would change (dry run: nothing sent)\n"),
            (n, false) => format!("{n} pool(s) changed\n"),
        });
        text
    })
}

/// What the server accepted a pool with but warns of (a reservation above
/// the cluster's capacity), on stderr as `job create` prints its warnings.
fn warn(warnings: &[String]) {
    for w in warnings {
        eprintln!("warning: {w}");
    }
}

/// An amount, `unlimited` for no limit.
fn amount(v: u64) -> String {
    amount_text(v)
}

/// Per-kind amounts as `cpu_millis/memory_mib/disk_mib/gpu_milli`; one
/// `unlimited` when every kind is.
fn kinds(p: &PerKind<u64>) -> String {
    if p.to_array().iter().all(|v| *v == UNLIMITED) {
        return "unlimited".into();
    }
    p.to_array().map(amount).join("/")
}

/// Per-kind amounts from the wire.
fn wire_kinds(p: Option<&pb::PerKind>) -> String {
    let p = p.cloned().unwrap_or_default();
    let gpu = if p.gpu_milli > 0 { p.gpu_milli } else { p.gpu.saturating_mul(1000) };
    kinds(&PerKind { cpu: p.cpu, memory: p.memory, disk: p.disk, gpu })
}

/// Shares: one weight when every kind has the same, else per kind.
fn shares(p: &PerKind<u64>) -> String {
    if p.to_array().iter().all(|v| *v == p.cpu) {
        p.cpu.to_string()
    } else {
        p.to_array().map(|v| v.to_string()).join("/")
    }
}

/// `elastic`, `static`, or the static kinds by name.
fn pool_type(p: &PerKind<PoolType>) -> String {
    let fixed: Vec<&str> =
        ResourceKind::ALL.into_iter().filter(|k| p.get(*k) == PoolType::Static).map(ResourceKind::field).collect();
    match fixed.len() {
        0 => "elastic".into(),
        4 => "static".into(),
        _ => format!("static: {}", fixed.join(",")),
    }
}

/// What the amounts in a table mean.
const UNITS: &str = "amounts are cpu_millis/memory_mib/disk_mib/gpu_milli; shares are weights";

fn pool_tree(resp: &pb::ListPoolsResponse) -> String {
    let mut t = Table::new(&[
        "POOL",
        "TYPE",
        "RESERVATION",
        "LIMIT",
        "SHARE",
        "ENTITLEMENT",
        "ALLOCATION",
        "DEMAND",
        "QUEUED",
        "TASKS",
    ]);
    for p in &resp.pools {
        // The server lists parents before children, so indenting by depth draws the tree.
        let depth = p.path.split('/').filter(|s| !s.is_empty()).count();
        let name = format!("{}{}", "  ".repeat(depth), p.path);
        let spec = p.spec.as_ref().map(render::model_pool_spec).unwrap_or_default();
        t.row(vec![
            name,
            pool_type(&spec.pool_type),
            kinds(&spec.reservation),
            kinds(&spec.limit),
            shares(&spec.share),
            wire_kinds(p.entitlement.as_ref()),
            wire_kinds(p.allocation.as_ref()),
            wire_kinds(p.demand.as_ref()),
            p.queued_gangs.to_string(),
            p.live_tasks.to_string(),
        ]);
    }
    let c = resp.capacity.unwrap_or_default();
    let gpu = if c.gpu_milli > 0 { c.gpu_milli } else { c.gpus.saturating_mul(1000) };
    format!("{}{UNITS}; cluster capacity {}/{}/{}/{gpu}\n", t.render(), c.cpu_millis, c.memory_mib, c.disk_mib)
}

fn pool_fields(p: &pb::Pool) -> String {
    let spec = p.spec.as_ref().map(render::model_pool_spec).unwrap_or_default();
    let queue_policy = match spec.queue_policy {
        paceline_model::pool::QueuePolicy::PriorityFifo => "priority_fifo",
        paceline_model::pool::QueuePolicy::Fifo => "fifo",
    };
    fields(&[
        ("path", p.path.clone()),
        ("type", pool_type(&spec.pool_type)),
        ("reservation", kinds(&spec.reservation)),
        ("limit", kinds(&spec.limit)),
        ("share", shares(&spec.share)),
        ("slack limit", kinds(&spec.slack_limit)),
        ("queue policy", queue_policy.into()),
        (
            "controller limit",
            spec.controller_limit_percent.map_or_else(|| "-".to_string(), |p| format!("{p}% of the reservation")),
        ),
        ("task users", if spec.task_users.is_empty() { "-".into() } else { spec.task_users.join(", ") }),
        ("entitlement", wire_kinds(p.entitlement.as_ref())),
        ("allocation", wire_kinds(p.allocation.as_ref())),
        ("demand", wire_kinds(p.demand.as_ref())),
        ("queued gangs", p.queued_gangs.to_string()),
        ("live tasks", p.live_tasks.to_string()),
        ("children", super::output::list(&p.children)),
        ("(units)", UNITS.into()),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(text: &str) -> tempfile::NamedTempFile {
        let f = tempfile::NamedTempFile::new().expect("temp file");
        std::fs::write(f.path(), text).expect("write");
        f
    }

    #[test]
    fn a_pool_file_is_one_entry_or_a_whole_tree() {
        let one = write("reservation: { cpu: 4000 }\ntype: { gpu: static }\nlimit: { gpus: 0 }\n");
        let spec = load_pool("/a", one.path()).expect("one entry");
        assert_eq!(spec.reservation.cpu, 4000);
        let wire = pool_spec_pb(&spec);
        assert_eq!(wire.static_kinds, vec!["gpu".to_owned()]);
        // The server's own conversion: unlimited travels as 0 and comes back,
        // a limit of 0 is named in limited_kinds and stays 0.
        assert_eq!(wire.limit.map(|l| l.cpu), Some(0));
        assert_eq!(wire.limited_kinds, vec!["gpu".to_owned()]);
        assert_eq!(paceline_api::pools::pool_spec("spec", &wire), Ok(spec));

        let tree = write("pools:\n  - path: /a\n  - path: /a/b\n    share: { cpu: 3 }\n");
        assert_eq!(load_pool("/a/b", tree.path()).expect("picked").share.cpu, 3);
        let e = load_pool("/c", tree.path()).expect_err("absent");
        assert!(e.to_string().contains("no pool /c"), "{e}");
    }

    #[test]
    fn a_plain_share_and_unlimited_are_accepted_and_printed_back() {
        let f = write("share: 2\nlimit: { memory_mib: unlimited, cpu_millis: 8000 }\n");
        let spec = load_pool("/a", f.path()).expect("plain share");
        assert_eq!(spec.share, PerKind::splat(2));
        assert_eq!((spec.limit.cpu, spec.limit.memory), (8000, UNLIMITED));
        assert_eq!(kinds(&spec.limit), "8000/unlimited/unlimited/unlimited");
        assert_eq!(kinds(&PerKind::splat(UNLIMITED)), "unlimited");
        assert_eq!(shares(&spec.share), "2");
        let json = render::pool_spec(&pool_spec_pb(&spec));
        assert_eq!(json["limit"]["memory_mib"], "unlimited");
        assert_eq!(json["limit"]["cpu_millis"], 8000);
        assert_eq!(json["share"], 2);
        assert_eq!(json["type"], "elastic");
        assert!(json.get("static_kinds").is_none(), "one vocabulary: {json}");
        // What `pool get -o yaml` shows of a spec is a pool file, and so is
        // the whole of what it shows.
        let shown = write(&serde_yaml::to_string(&json).expect("yaml"));
        assert_eq!(load_pool("/a", shown.path()).expect("reads back"), spec);
        let pool = pb::Pool { path: "/a".into(), spec: Some(pool_spec_pb(&spec)), ..Default::default() };
        let whole = write(&serde_yaml::to_string(&render::pool(&pool)).expect("yaml"));
        assert_eq!(load_pool("/a", whole.path()).expect("the whole output reads back"), spec);
        let e = load_pool("/b", whole.path()).expect_err("another pool's output");
        assert!(e.to_string().contains("`path` is /a, but the command names /b"), "{e}");
    }

    #[test]
    fn a_pool_file_for_apply_is_checked_whole_and_sorted_parents_first() {
        let f = write("pools:\n  - path: /a/b\n    share: 3\n  - path: /a\n    reservation: {cpu_millis: 1000}\n");
        let pools = load_pool_file(f.path()).expect("a good file");
        let paths: Vec<&str> = pools.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(paths, vec!["/a", "/a/b"]);
        let cases = [
            ("pools: []\n", "no pools"),
            ("pools:\n  - path: /a\n  - path: /a\n", "/a appears twice"),
            ("pools:\n  - path: a\n", "pools[0].path"),
            ("pools:\n  - path: /\n", "root pool"),
            ("pools:\n  - path: /a\n    reservation: {cpu: 10}\n    limit: {cpu: 5}\n", "pools[0] (/a)"),
        ];
        for (text, needle) in cases {
            let e = load_pool_file(write(text).path()).expect_err(text);
            assert_eq!(super::super::exit_code(&e), 2, "{text}");
            assert!(e.to_string().contains(needle), "{text}: {e}");
        }
        // The diff names the fields that change, in the file's words.
        let old = load_pool("/a", write("share: 1\n").path()).expect("old");
        let new = load_pool("/a", write("share: 2\nlimit: {cpu_millis: 8000}\n").path()).expect("new");
        let diff = spec_diff(&old, &new);
        assert!(diff.iter().any(|l| l.starts_with("share: 1 → 2")), "{diff:?}");
        assert!(diff.iter().any(|l| l.starts_with("limit:")), "{diff:?}");
        assert!(spec_diff(&new, &new).is_empty());
    }

    #[test]
    fn pool_file_errors_name_the_field() {
        let cases = [
            ("reservation: { cpu: 10 }\nlimit: { cpu: 5 }\n", "reservation.cpu_millis"),
            ("reservation: { cpus: 10 }\n", "cpus"),
            ("reservation: { cpu: -1 }\n", "cpu"),
            ("path: /b\n", "`path` is /b"),
            ("{ share: { cpu: 0 } }", "share.cpu_millis"),
            ("share: 0\n", "share.cpu_millis"),
            ("limit: { cpu_millis: 0 }\n", "limit.cpu_millis: a limit of 0 means no task that needs cpu"),
            ("type: static\nreservation: { cpu: 2000 }\n", "type.memory_mib: static with no memory reservation"),
            (
                "# comment\nreservation:\n  cpu: -1\n",
                "reservation.cpu: -1 is negative; amounts are 0 or more at line 3",
            ),
        ];
        for (text, needle) in cases {
            let e = load_pool("/a", write(text).path()).expect_err(text);
            assert_eq!(super::super::exit_code(&e), 2);
            assert!(e.to_string().contains(needle), "{text}: {e}");
        }
    }
}

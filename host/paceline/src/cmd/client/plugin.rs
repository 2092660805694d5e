//! The remote half of `paceline plugin`: deploy a component to a server's
//! slot, list slots, activate, roll back and shadow versions. (`validate`
//! and `run` stay local, in `cmd::plugin`.)

use std::path::PathBuf;

use clap::Args;
use paceline_proto::v1 as pb;
use pb::plugin_service_client::PluginServiceClient;
use serde_json::json;

use super::output::{Table, emit, fields, or_dash};
use super::{ClientOpts, RpcError, bad_input, block_on, connect, render};

/// Upload chunk size: well under gRPC's default 4 MiB message limit.
pub const CHUNK: usize = 64 * 1024;

/// Arguments of `plugin deploy`.
#[derive(Debug, Args)]
pub struct DeployArgs {
    #[command(flatten)]
    opts: ClientOpts,
    /// Slot, such as placement/batch, preemption or lifecycle/stateless.
    slot: String,
    /// Plugin name (with --builtin: default the built-in's name).
    name: Option<String>,
    /// Version label (with --builtin: default builtin-<this version>).
    version: Option<String>,
    /// The component (.wasm), or a built-in policy as builtin:NAME or
    /// NAME@builtin-<version> (`plugin list` names them).
    file: Option<PathBuf>,
    /// Deploy a built-in policy (embedded in this binary) instead of a file:
    /// binpack, spread, priority-preempt, batch, … (`plugin list` names them).
    #[arg(long, value_name = "NAME", conflicts_with = "file")]
    builtin: Option<String>,
    /// Skip the server's self-test on sample inputs.
    #[arg(long)]
    skip_self_test: bool,
    /// The version's own call deadline in milliseconds (0: the server's
    /// default), for a plugin whose language cannot answer large rounds in it.
    #[arg(long, default_value_t = 0)]
    deadline_ms: u64,
    /// The version's own candidate setting (placement slots, decision
    /// 0054): `all` (or 0) for a policy that must see every feasible host,
    /// a host count, or `auto`; without it the slot's setting applies.
    #[arg(long, value_name = "auto|all|N", value_parser = paceline_plugin::Candidates::parse)]
    candidates: Option<paceline_plugin::Candidates>,
}

/// Arguments of `plugin list`.
#[derive(Debug, Args)]
pub struct ListArgs {
    #[command(flatten)]
    opts: ClientOpts,
}

/// Arguments of `plugin activate`.
#[derive(Debug, Args)]
pub struct ActivateArgs {
    #[command(flatten)]
    opts: ClientOpts,
    /// Slot.
    slot: String,
    /// Version id, name@version (a built-in as NAME@builtin-<version> or
    /// builtin:NAME is deployed to the slot first if it is not there).
    id: String,
}

/// Arguments of `plugin rollback`.
#[derive(Debug, Args)]
pub struct RollbackArgs {
    #[command(flatten)]
    opts: ClientOpts,
    /// Slot.
    slot: String,
}

/// Arguments of `plugin shadow`.
#[derive(Debug, Args)]
pub struct ShadowArgs {
    #[command(flatten)]
    opts: ClientOpts,
    /// Slot.
    slot: String,
    /// Version id to run beside the active one, name@version (a built-in as
    /// NAME@builtin-<version> or builtin:NAME is deployed to the slot first
    /// if it is not there).
    id: String,
    /// Stop the slot's shadow run and print its report.
    #[arg(long)]
    stop: bool,
}

/// Checks that bytes are a WebAssembly component (not a core module, not
/// something else) so a wrong file fails here rather than after an upload.
pub fn check_component(file: &std::path::Path, wasm: &[u8]) -> anyhow::Result<()> {
    let name = file.display();
    if wasm.len() < 8 || &wasm[..4] != b"\0asm" {
        return Err(bad_input(format!("{name} is not a WebAssembly file")));
    }
    // Bytes 6..8 are the layer: 0 for a core module, 1 for a component.
    if wasm[6..8] != [1, 0] {
        return Err(bad_input(format!(
            "{name} is a core WebAssembly module, not a component (build it with the plugin SDK; see docs/plugin-guide.md)"
        )));
    }
    Ok(())
}

/// The upload: metadata first, then the bytes in order.
pub fn deploy_messages(
    slot: &str,
    name: &str,
    version: &str,
    skip_self_test: bool,
    deadline_ms: u64,
    candidates: Option<paceline_plugin::Candidates>,
    wasm: &[u8],
) -> Vec<pb::DeployPluginRequest> {
    use pb::deploy_plugin_request::{Meta, Part};
    let meta = Meta {
        slot: slot.to_owned(),
        name: name.to_owned(),
        version: version.to_owned(),
        size: wasm.len() as u64,
        skip_self_test,
        deadline_ms,
        candidates: candidates.map(|c| c.to_string()).unwrap_or_default(),
    };
    std::iter::once(Part::Meta(meta))
        .chain(wasm.chunks(CHUNK).map(|c| Part::Chunk(c.to_vec())))
        .map(|p| pb::DeployPluginRequest { part: Some(p) })
        .collect()
}

/// The names of the built-in policies, for messages.
fn builtin_names() -> String {
    paceline_plugin::builtins::names()
}

/// The built-in policy a reference names: `builtin:NAME`, or
/// `NAME@builtin-<version>` (the id the server gives the built-ins it
/// installs). `Ok(None)` for anything else; an error for a built-in name
/// this binary does not have, or another version's built-in.
pub fn builtin_ref(reference: &str) -> anyhow::Result<Option<(&'static str, &'static [u8])>> {
    let name = match reference.strip_prefix("builtin:") {
        Some(name) => name,
        None => match reference.split_once('@') {
            Some((name, version)) if version.starts_with("builtin-") => {
                if version != paceline_plugin::builtins::BUILTIN_VERSION {
                    return Err(bad_input(format!(
                        "{reference}: this paceline has the built-in policies of {}, not {version}",
                        paceline_plugin::builtins::BUILTIN_VERSION
                    )));
                }
                name
            }
            _ => return Ok(None),
        },
    };
    match paceline_plugin::builtins::by_name(name) {
        Some(b) => Ok(Some((b.name, b.bytes))),
        None => Err(bad_input(format!("{reference}: `{name}` is not a built-in policy ({})", builtin_names()))),
    }
}

/// What `plugin deploy` uploads: (name, version, bytes), from a file or a built-in.
fn deploy_source(a: &DeployArgs) -> anyhow::Result<(String, String, Vec<u8>)> {
    let usage = || {
        bad_input(format!(
            "expected `plugin deploy SLOT NAME VERSION FILE.wasm` or `plugin deploy SLOT --builtin NAME` (built-in \
             policies: {})",
            builtin_names()
        ))
    };
    let builtin = match (&a.builtin, &a.file) {
        (Some(name), _) => builtin_ref(&format!("builtin:{name}"))?,
        (None, Some(file)) => builtin_ref(&file.to_string_lossy())?,
        (None, None) => return Err(usage()),
    };
    if let Some((name, bytes)) = builtin {
        let name = a.name.clone().unwrap_or_else(|| name.to_string());
        let version = a.version.clone().unwrap_or_else(|| paceline_plugin::builtins::BUILTIN_VERSION.to_string());
        return Ok((name, version, bytes.to_vec()));
    }
    let (Some(name), Some(version), Some(file)) = (&a.name, &a.version, &a.file) else { return Err(usage()) };
    let wasm = super::read_file(file)?;
    check_component(file, &wasm)?;
    Ok((name.clone(), version.clone(), wasm))
}

/// `plugin deploy`.
pub fn deploy(a: DeployArgs) -> anyhow::Result<std::process::ExitCode> {
    block_on(async move {
        let (name, version, wasm) = deploy_source(&a)?;
        let messages = deploy_messages(&a.slot, &name, &version, a.skip_self_test, a.deadline_ms, a.candidates, &wasm);
        let mut client = PluginServiceClient::new(connect(&a.opts).await?);
        let resp = client.deploy_plugin(tokio_stream::iter(messages)).await.map_err(RpcError)?.into_inner();
        emit(a.opts.output, &json!({"id": resp.id, "sha256": resp.sha256}), || {
            fields(&[("deployed", resp.id.clone()), ("slot", a.slot.clone()), ("sha256", resp.sha256.clone())])
        })
    })
}

/// The version id `id` names in `slot`: itself, or for a built-in
/// (`builtin:NAME`, `NAME@builtin-<version>`) `NAME@builtin-<version>`,
/// deployed to the slot first when the slot does not have it (the server
/// installs each slot's own default only; `spread` in `placement/batch`
/// is not there until deployed).
async fn resolve_version(
    client: &mut PluginServiceClient<super::Api>,
    slot: &str,
    id: &str,
    deploy: bool,
) -> anyhow::Result<String> {
    let Some((name, bytes)) = builtin_ref(id)? else { return Ok(id.to_string()) };
    let version_id = format!("{name}@{}", paceline_plugin::builtins::BUILTIN_VERSION);
    if !deploy {
        return Ok(version_id);
    }
    let slots = client.list_plugins(pb::ListPluginsRequest {}).await.map_err(RpcError)?.into_inner().slots;
    let present = slots.iter().any(|s| s.slot == slot && s.versions.iter().any(|v| v.id == version_id));
    if !present {
        let messages = deploy_messages(slot, name, paceline_plugin::builtins::BUILTIN_VERSION, false, 0, None, bytes);
        let resp = client.deploy_plugin(tokio_stream::iter(messages)).await.map_err(RpcError)?.into_inner();
        eprintln!("deployed the built-in {} to {slot}", resp.id);
    }
    Ok(version_id)
}

/// `plugin list`.
pub fn list(a: ListArgs) -> anyhow::Result<std::process::ExitCode> {
    block_on(async move {
        let mut client = PluginServiceClient::new(connect(&a.opts).await?);
        let slots = client.list_plugins(pb::ListPluginsRequest {}).await.map_err(RpcError)?.into_inner().slots;
        let value = serde_json::Value::Array(slots.iter().map(render::plugin_slot).collect());
        emit(a.opts.output, &value, || {
            // The built-ins are in the binary, not in a file an operator has.
            format!(
                "{}built-in policies (plugin deploy SLOT --builtin NAME; shadow or activate as NAME@{}): {}\n",
                slot_table(&slots),
                paceline_plugin::builtins::BUILTIN_VERSION,
                builtin_names()
            )
        })
    })
}

/// `plugin activate`.
pub fn activate(a: ActivateArgs) -> anyhow::Result<std::process::ExitCode> {
    block_on(async move {
        let mut client = PluginServiceClient::new(connect(&a.opts).await?);
        let id = resolve_version(&mut client, &a.slot, &a.id, true).await?;
        let slot = client.activate_plugin(pb::PluginRef { slot: a.slot, id }).await.map_err(RpcError)?.into_inner();
        emit(a.opts.output, &render::plugin_slot(&slot), || slot_table(std::slice::from_ref(&slot)))
    })
}

/// `plugin rollback`.
pub fn rollback(a: RollbackArgs) -> anyhow::Result<std::process::ExitCode> {
    block_on(async move {
        let mut client = PluginServiceClient::new(connect(&a.opts).await?);
        let slot = client.rollback_plugin(pb::SlotRef { slot: a.slot }).await.map_err(RpcError)?.into_inner();
        emit(a.opts.output, &render::plugin_slot(&slot), || slot_table(std::slice::from_ref(&slot)))
    })
}

/// `plugin shadow`.
pub fn shadow(a: ShadowArgs) -> anyhow::Result<std::process::ExitCode> {
    block_on(async move {
        let mut client = PluginServiceClient::new(connect(&a.opts).await?);
        let id = resolve_version(&mut client, &a.slot, &a.id, !a.stop).await?;
        let r = pb::ShadowPluginRequest {
            plugin: Some(pb::PluginRef { slot: a.slot.clone(), id: id.clone() }),
            stop: a.stop,
        };
        let resp = client.shadow_plugin(r).await.map_err(RpcError)?.into_inner();
        emit(a.opts.output, &render::shadow_report(&resp), || {
            let mut s = fields(&[
                ("shadow", format!("{id} in {}{}", a.slot, if a.stop { " (stopped)" } else { "" })),
                ("compared", resp.compared.to_string()),
                ("differed", resp.differed.to_string()),
                ("candidate faults", resp.candidate_faults.to_string()),
                ("skipped", resp.skipped.to_string()),
            ]);
            for sample in &resp.samples {
                s.push_str(&format!("  {sample}\n"));
            }
            if !resp.disagreements.is_empty() {
                // The latest per-task differences: what each version chose.
                let mut t = Table::new(&["KIND", "ROUND", "TASK", "ACTIVE →", "SHADOW →"]);
                for d in &resp.disagreements {
                    t.row(vec![
                        d.kind.clone(),
                        d.round.to_string(),
                        d.task.clone(),
                        d.active.clone(),
                        d.shadow.clone(),
                    ]);
                }
                s.push_str(&t.render());
            }
            s
        })
    })
}

fn slot_table(slots: &[pb::PluginSlot]) -> String {
    let mut t =
        Table::new(&["SLOT", "VERSION", "STATE", "CANDIDATES", "CALLS", "ERRORS", "P50 µs", "P99 µs", "SHA256"]);
    for s in slots {
        if s.versions.is_empty() {
            t.row(vec![s.slot.clone(), "(native)".into(), String::new(), or_dash(&s.candidates)]);
        }
        for v in &s.versions {
            let errors: u64 = v.errors.values().sum();
            // A slot whose active id is this version says so even if the state lags.
            let mut state =
                if v.id == s.active && v.state != "active" { format!("{} (active)", v.state) } else { v.state.clone() };
            if v.batched {
                state.push_str(", batched");
            }
            t.row(vec![
                s.slot.clone(),
                v.id.clone(),
                or_dash(&state),
                // The active version: what its calls are offered; another:
                // its own setting, if any.
                if v.id == s.active { or_dash(&s.candidates) } else { or_dash(&v.candidates) },
                v.calls.to_string(),
                errors.to_string(),
                v.p50_us.to_string(),
                v.p99_us.to_string(),
                v.sha256.chars().take(12).collect(),
            ]);
        }
    }
    t.render()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uploads_start_with_meta_and_chunk_at_64_kib() {
        let wasm = vec![7u8; CHUNK * 2 + 5];
        let m =
            deploy_messages("placement/batch", "p", "1", true, 30_000, Some(paceline_plugin::Candidates::All), &wasm);
        assert_eq!(m.len(), 4);
        match &m[0].part {
            Some(pb::deploy_plugin_request::Part::Meta(meta)) => {
                assert_eq!((meta.size, meta.skip_self_test, meta.deadline_ms), (wasm.len() as u64, true, 30_000));
                assert_eq!(meta.candidates, "all");
            }
            other => panic!("first message is {other:?}"),
        }
        let sizes: Vec<usize> = m[1..]
            .iter()
            .map(|r| match &r.part {
                Some(pb::deploy_plugin_request::Part::Chunk(c)) => c.len(),
                _ => 0,
            })
            .collect();
        assert_eq!(sizes, vec![CHUNK, CHUNK, 5]);
    }

    /// Issue 43: `spread@builtin-0.1.0` was "not found" where a file or an
    /// id was expected; the built-ins are named as the server names them.
    #[test]
    fn built_in_policies_are_named_as_builtin_name_or_their_version_id() {
        let id = format!("spread@{}", paceline_plugin::builtins::BUILTIN_VERSION);
        for reference in ["builtin:spread", id.as_str()] {
            let (name, bytes) = builtin_ref(reference).expect("a reference").expect("a built-in");
            assert_eq!((name, bytes), ("spread", paceline_plugin_artifacts::SPREAD), "{reference}");
        }
        assert!(builtin_ref("spread@1.0").expect("not a built-in").is_none());
        assert!(builtin_ref("plugins/spread.wasm").expect("a file").is_none());
        let wrong = builtin_ref("builtin:nope").expect_err("unknown").to_string();
        assert!(wrong.contains("binpack, spread"), "names the built-ins: {wrong}");
        let other = builtin_ref("spread@builtin-9.9.9").expect_err("another version").to_string();
        assert!(other.contains(paceline_plugin::builtins::BUILTIN_VERSION), "{other}");
    }

    #[test]
    fn only_components_are_uploaded() {
        let p = std::path::Path::new("x.wasm");
        assert!(check_component(p, b"hello, not wasm").is_err());
        assert!(check_component(p, b"\0asm\x01\0\0\0").is_err());
        assert!(check_component(p, b"\0asm\x0d\0\x01\0").is_ok());
        let real = std::fs::read(paceline_plugin_artifacts::SPREAD_PATH).expect("built plugin");
        assert!(check_component(p, &real).is_ok());
    }
}

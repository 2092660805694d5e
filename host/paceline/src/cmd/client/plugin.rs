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
    /// Plugin name.
    name: String,
    /// Version label.
    version: String,
    /// The component (.wasm).
    file: PathBuf,
    /// Skip the server's self-test on sample inputs.
    #[arg(long)]
    skip_self_test: bool,
    /// The version's own call deadline in milliseconds (0: the server's
    /// default), for a plugin whose language cannot answer large rounds in it.
    #[arg(long, default_value_t = 0)]
    deadline_ms: u64,
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
    /// Version id, name@version.
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
    /// Version id to run beside the active one, name@version.
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
    };
    std::iter::once(Part::Meta(meta))
        .chain(wasm.chunks(CHUNK).map(|c| Part::Chunk(c.to_vec())))
        .map(|p| pb::DeployPluginRequest { part: Some(p) })
        .collect()
}

/// `plugin deploy`.
pub fn deploy(a: DeployArgs) -> anyhow::Result<std::process::ExitCode> {
    block_on(async move {
        let wasm = super::read_file(&a.file)?;
        check_component(&a.file, &wasm)?;
        let messages = deploy_messages(&a.slot, &a.name, &a.version, a.skip_self_test, a.deadline_ms, &wasm);
        let mut client = PluginServiceClient::new(connect(&a.opts).await?);
        let resp = client.deploy_plugin(tokio_stream::iter(messages)).await.map_err(RpcError)?.into_inner();
        emit(a.opts.output, &json!({"id": resp.id, "sha256": resp.sha256}), || {
            fields(&[("deployed", resp.id.clone()), ("slot", a.slot.clone()), ("sha256", resp.sha256.clone())])
        })
    })
}

/// `plugin list`.
pub fn list(a: ListArgs) -> anyhow::Result<std::process::ExitCode> {
    block_on(async move {
        let mut client = PluginServiceClient::new(connect(&a.opts).await?);
        let slots = client.list_plugins(pb::ListPluginsRequest {}).await.map_err(RpcError)?.into_inner().slots;
        let value = serde_json::Value::Array(slots.iter().map(render::plugin_slot).collect());
        emit(a.opts.output, &value, || slot_table(&slots))
    })
}

/// `plugin activate`.
pub fn activate(a: ActivateArgs) -> anyhow::Result<std::process::ExitCode> {
    block_on(async move {
        let mut client = PluginServiceClient::new(connect(&a.opts).await?);
        let slot =
            client.activate_plugin(pb::PluginRef { slot: a.slot, id: a.id }).await.map_err(RpcError)?.into_inner();
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
        let r = pb::ShadowPluginRequest {
            plugin: Some(pb::PluginRef { slot: a.slot.clone(), id: a.id.clone() }),
            stop: a.stop,
        };
        let resp = client.shadow_plugin(r).await.map_err(RpcError)?.into_inner();
        emit(a.opts.output, &render::shadow_report(&resp), || {
            let mut s = fields(&[
                ("shadow", format!("{} in {}{}", a.id, a.slot, if a.stop { " (stopped)" } else { "" })),
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
    let mut t = Table::new(&["SLOT", "VERSION", "STATE", "CALLS", "ERRORS", "P50 µs", "P99 µs", "SHA256"]);
    for s in slots {
        if s.versions.is_empty() {
            t.row(vec![s.slot.clone(), "(native)".into()]);
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
        let m = deploy_messages("placement/batch", "p", "1", true, 30_000, &wasm);
        assert_eq!(m.len(), 4);
        match &m[0].part {
            Some(pb::deploy_plugin_request::Part::Meta(meta)) => {
                assert_eq!((meta.size, meta.skip_self_test, meta.deadline_ms), (wasm.len() as u64, true, 30_000));
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

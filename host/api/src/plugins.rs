//! `PluginService`: streamed deploy and validate, list, activate, roll back
//! and shadow, over [`paceline_plugin::Registry`].
//!
//! Registry calls compile or instantiate Wasm, so they run on the blocking
//! pool, never on the async workers that serve other calls.

use std::sync::Arc;
use std::time::Duration;

use paceline_plugin::{
    DeployOptions, MemoryStore, PluginError, Registry, ShadowReport, SlotInfo, VersionState, slot_world,
};
use paceline_proto::v1 as pb;
use paceline_proto::v1::deploy_plugin_request::Part;
use paceline_proto::v1::plugin_service_server::PluginService;
use tonic::{Request, Response, Status, Streaming};

use crate::status;

/// The plugin service.
#[derive(Clone)]
pub struct PluginApi {
    registry: Arc<Registry>,
    validations: Arc<crate::rate::PerPrincipal>,
}

/// Validations one principal may start at once ([`PluginApi`]'s limit).
pub const VALIDATE_BURST: u32 = 5;
/// Then one more per this long.
pub const VALIDATE_EVERY: Duration = Duration::from_secs(12);

impl std::fmt::Debug for PluginApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginApi").finish_non_exhaustive()
    }
}

impl PluginApi {
    /// Over the cluster's registry.
    pub fn new(registry: Arc<Registry>) -> PluginApi {
        PluginApi {
            registry,
            validations: Arc::new(crate::rate::PerPrincipal::new("ValidatePlugin", VALIDATE_BURST, VALIDATE_EVERY)),
        }
    }

    /// Runs a registry call on the blocking pool.
    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Registry) -> Result<T, PluginError> + Send + 'static,
    ) -> Result<T, Status> {
        let registry = self.registry.clone();
        tokio::task::spawn_blocking(move || f(&registry))
            .await
            .map_err(|e| Status::internal(format!("plugin task: {e}")))?
            .map_err(status::plugin)
    }

    /// Reads an upload: `meta` first, then the bytes, checked against the
    /// runtime's upload limit as they arrive (and against `meta.size`).
    async fn upload(
        &self,
        mut stream: Streaming<pb::DeployPluginRequest>,
    ) -> Result<(pb::deploy_plugin_request::Meta, Vec<u8>), Status> {
        let max = self.registry.runtime().config().max_upload_bytes;
        let meta = match stream.message().await?.and_then(|m| m.part) {
            Some(Part::Meta(meta)) => meta,
            _ => return Err(Status::invalid_argument("meta: the first message must carry meta")),
        };
        slot_world(&meta.slot).map_err(|e| Status::invalid_argument(format!("meta.slot: {e}")))?;
        if meta.size > max as u64 {
            return Err(Status::invalid_argument(format!(
                "meta.size: {} bytes is over the {max}-byte upload limit",
                meta.size
            )));
        }
        let mut bytes = Vec::with_capacity(usize::try_from(meta.size).unwrap_or(0).min(max));
        let mut n = 1usize;
        while let Some(msg) = stream.message().await? {
            match msg.part {
                Some(Part::Chunk(chunk)) => {
                    if bytes.len() + chunk.len() > max {
                        return Err(Status::invalid_argument(format!("chunk: upload is over the {max}-byte limit")));
                    }
                    bytes.extend_from_slice(&chunk);
                }
                _ => {
                    return Err(Status::invalid_argument(format!(
                        "message {n}: after meta, every message must carry a chunk"
                    )));
                }
            }
            n += 1;
        }
        if meta.size != 0 && meta.size != bytes.len() as u64 {
            return Err(Status::invalid_argument(format!(
                "meta.size: says {} bytes, {} arrived",
                meta.size,
                bytes.len()
            )));
        }
        if bytes.is_empty() {
            return Err(Status::invalid_argument("chunk: no component bytes were sent"));
        }
        Ok((meta, bytes))
    }

    async fn slot(&self, name: &str) -> Result<pb::PluginSlot, Status> {
        let name = name.to_string();
        let slots = self.blocking(|r| Ok(r.list())).await?;
        Ok(slots
            .iter()
            .find(|s| s.slot == name)
            .map(slot_pb)
            .unwrap_or(pb::PluginSlot { slot: name, ..Default::default() }))
    }
}

fn state_str(s: VersionState, shadowed: bool) -> &'static str {
    match s {
        _ if shadowed => "shadow",
        VersionState::Ready => "deployed",
        VersionState::Active => "active",
        VersionState::Retired => "retired",
        VersionState::Failed => "failed",
    }
}

/// A slot to the wire.
pub fn slot_pb(s: &SlotInfo) -> pb::PluginSlot {
    pb::PluginSlot {
        slot: s.slot.clone(),
        active: s.active.clone().unwrap_or_default(),
        versions: s
            .versions
            .iter()
            .map(|v| {
                let id = format!("{}@{}", v.record.name, v.record.version);
                let shadowed = s.shadow.as_deref() == Some(id.as_str());
                pb::PluginVersion {
                    state: state_str(v.record.state, shadowed).to_string(),
                    id,
                    sha256: v.record.sha256.clone(),
                    calls: v.metrics.calls,
                    errors: v.metrics.errors.clone().into_iter().collect(),
                    p50_us: v.metrics.p50_us,
                    p99_us: v.metrics.p99_us,
                    batched: v.batched,
                    candidates: v.record.candidates.map(|c| c.to_string()).unwrap_or_default(),
                }
            })
            .collect(),
        shadow: s.shadow_report.as_ref().map(report_pb),
        candidates: if s.world == paceline_plugin::World::Placement { s.candidates.to_string() } else { String::new() },
    }
}

/// What a shadow disagreement's task reads as for a caller who does not
/// read every pool.
pub const HIDDEN_TASK: &str = "(hidden: task names are shown to operators)";

/// Removes the task names (`job/instance`, which name other tenants' jobs)
/// from the slots' shadow reports, keeping what each version decided: a
/// `user` reads only its own pools' jobs (decision 0059), and a report
/// mixes every pool's tasks.
pub fn hide_shadow_tasks(slots: &mut [pb::PluginSlot]) {
    for d in slots.iter_mut().filter_map(|s| s.shadow.as_mut()).flat_map(|r| r.disagreements.iter_mut()) {
        d.task = HIDDEN_TASK.to_string();
    }
}

/// The slots as `who` may read them (`None`: the server's own call).
fn slots_for(slots: &[SlotInfo], who: Option<&crate::auth::Principal>) -> Vec<pb::PluginSlot> {
    let mut out: Vec<pb::PluginSlot> = slots.iter().map(slot_pb).collect();
    if who.is_some_and(|w| !w.reads_every_pool()) {
        hide_shadow_tasks(&mut out);
    }
    out
}

/// A shadow report to the wire.
pub fn report_pb(r: &ShadowReport) -> pb::ShadowPluginResponse {
    pb::ShadowPluginResponse {
        compared: r.compared,
        differed: r.compared.saturating_sub(r.identical),
        samples: r.samples.clone(),
        disagreements: r
            .disagreements
            .iter()
            .map(|d| pb::ShadowDisagreement {
                at_ms: d.at_ms,
                kind: d.kind.to_string(),
                round: d.round,
                task: d.task.clone(),
                active: d.active.clone(),
                shadow: d.shadow.clone(),
            })
            .collect(),
        candidate: r.candidate.clone(),
        candidate_faults: r.candidate_faults,
        skipped: r.skipped,
    }
}

fn slot_ref(field: &str, slot: &str) -> Result<(), Status> {
    status::required(field, slot)?;
    slot_world(slot).map(|_| ()).map_err(|e| Status::invalid_argument(format!("{field}: {e}")))
}

impl PluginApi {
    /// Deploys a component that has arrived whole: `DeployPlugin` after its
    /// upload, and the web UI's upload route.
    pub async fn deploy_bytes(
        &self,
        meta: pb::deploy_plugin_request::Meta,
        bytes: Vec<u8>,
    ) -> Result<pb::DeployPluginResponse, Status> {
        slot_world(&meta.slot).map_err(|e| Status::invalid_argument(format!("meta.slot: {e}")))?;
        let max = self.registry.runtime().config().max_upload_bytes;
        if bytes.len() > max {
            return Err(Status::invalid_argument(format!("upload is over the {max}-byte limit")));
        }
        let options = DeployOptions { self_test: !meta.skip_self_test };
        let (slot, name, version) = (meta.slot.clone(), meta.name.clone(), meta.version.clone());
        let deadline = (meta.deadline_ms > 0).then(|| std::time::Duration::from_millis(meta.deadline_ms));
        let candidates = match meta.candidates.as_str() {
            "" => None,
            c => Some(
                paceline_plugin::Candidates::parse(c)
                    .map_err(|e| Status::invalid_argument(format!("meta.candidates: {e}")))?,
            ),
        };
        let deployed = self
            .blocking(move |r| {
                let deployed = r.deploy(&slot, &name, &version, &bytes, options)?;
                if deadline.is_some() {
                    r.set_deadline(&slot, &deployed.record.id(), deadline)?;
                }
                if candidates.is_some() {
                    r.set_candidates(&slot, Some(&deployed.record.id()), candidates)?;
                }
                Ok(deployed)
            })
            .await?;
        let id = format!("{}@{}", deployed.record.name, deployed.record.version);
        tracing::info!(slot = %meta.slot, version = %id, "plugin deployed through the API");
        Ok(pb::DeployPluginResponse { id, sha256: deployed.record.sha256 })
    }
}

#[tonic::async_trait]
impl PluginService for PluginApi {
    async fn deploy_plugin(
        &self,
        request: Request<Streaming<pb::DeployPluginRequest>>,
    ) -> Result<Response<pb::DeployPluginResponse>, Status> {
        let (meta, bytes) = self.upload(request.into_inner()).await?;
        Ok(Response::new(self.deploy_bytes(meta, bytes).await?))
    }

    async fn validate_plugin(
        &self,
        request: Request<Streaming<pb::DeployPluginRequest>>,
    ) -> Result<Response<pb::ValidatePluginResponse>, Status> {
        // Before the upload is read: a refused caller costs the server nothing.
        let who = crate::auth::principal(&request)?;
        self.validations.take(&who.name)?;
        let (meta, bytes) = self.upload(request.into_inner()).await?;
        let options = DeployOptions { self_test: !meta.skip_self_test };
        // A throwaway registry on the same runtime (and so the same limits
        // and compile cache) runs every deploy check and stores nothing.
        let result = self
            .blocking(move |r| {
                let scratch = Registry::open(r.runtime().clone(), Arc::new(MemoryStore::default()))?;
                Ok(scratch.deploy(&meta.slot, "candidate", "0", &bytes, options).err())
            })
            .await?;
        Ok(Response::new(pb::ValidatePluginResponse { error: result.map(|e| e.to_string()).unwrap_or_default() }))
    }

    async fn list_plugins(
        &self,
        request: Request<pb::ListPluginsRequest>,
    ) -> Result<Response<pb::ListPluginsResponse>, Status> {
        // A request from outside always carries its principal (the auth
        // layer sets one, `anonymous` in the open mode); the server's own
        // calls (the web UI's plugin history) carry none and read it all.
        let who = request.extensions().get::<Arc<crate::auth::Principal>>().cloned();
        let slots = self.blocking(|r| Ok(r.list())).await?;
        Ok(Response::new(pb::ListPluginsResponse { slots: slots_for(&slots, who.as_deref()) }))
    }

    async fn activate_plugin(&self, request: Request<pb::PluginRef>) -> Result<Response<pb::PluginSlot>, Status> {
        let r = request.into_inner();
        slot_ref("slot", &r.slot)?;
        status::required("id", &r.id)?;
        let (slot, id) = (r.slot.clone(), r.id.clone());
        self.blocking(move |reg| reg.activate(&slot, &id)).await?;
        tracing::info!(slot = %r.slot, version = %r.id, "plugin activated through the API");
        Ok(Response::new(self.slot(&r.slot).await?))
    }

    async fn rollback_plugin(&self, request: Request<pb::SlotRef>) -> Result<Response<pb::PluginSlot>, Status> {
        let r = request.into_inner();
        slot_ref("slot", &r.slot)?;
        let slot = r.slot.clone();
        let to = self.blocking(move |reg| reg.rollback(&slot)).await?;
        tracing::info!(slot = %r.slot, to = ?to, "plugin rolled back through the API");
        Ok(Response::new(self.slot(&r.slot).await?))
    }

    async fn shadow_plugin(
        &self,
        request: Request<pb::ShadowPluginRequest>,
    ) -> Result<Response<pb::ShadowPluginResponse>, Status> {
        let r = request.into_inner();
        let p = r.plugin.ok_or_else(|| Status::invalid_argument("plugin: must be set"))?;
        slot_ref("plugin.slot", &p.slot)?;
        let report = if r.stop {
            let slot = p.slot.clone();
            self.blocking(move |reg| reg.stop_shadow(&slot)).await?
        } else {
            status::required("plugin.id", &p.id)?;
            let (slot, id) = (p.slot.clone(), p.id.clone());
            self.blocking(move |reg| {
                reg.shadow(&slot, &id)?;
                reg.shadow_report(&slot)
            })
            .await?
        };
        Ok(Response::new(report_pb(&report.unwrap_or_default())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::{Principal, Role};

    fn slot_with_a_disagreement() -> SlotInfo {
        let mut report = ShadowReport { compared: 1, ..Default::default() };
        report.disagreements.push(paceline_plugin::Disagreement {
            kind: "placement",
            task: "payroll-1a2b3c4d/0".into(),
            active: "host-1".into(),
            shadow: "host-2".into(),
            ..Default::default()
        });
        SlotInfo {
            slot: "placement/batch".into(),
            world: paceline_plugin::World::Placement,
            active: None,
            shadow: Some("candidate@1".into()),
            shadow_report: Some(report),
            versions: Vec::new(),
            fallbacks: 0,
            slot_candidates: None,
            candidates: paceline_plugin::Candidates::default(),
        }
    }

    #[test]
    fn a_user_reads_shadow_decisions_without_the_task_names_operators_read() {
        let slots = [slot_with_a_disagreement()];
        let task = |out: &[pb::PluginSlot]| out[0].shadow.as_ref().map(|r| r.disagreements[0].task.clone());
        let user = Principal { name: "carol".into(), role: Role::User, pools: vec!["/team-b".into()] };
        let operator = Principal { name: "olga".into(), role: Role::Operator, pools: vec![] };

        let as_user = slots_for(&slots, Some(&user));
        assert_eq!(task(&as_user).as_deref(), Some(HIDDEN_TASK));
        let r = as_user[0].shadow.as_ref().expect("report");
        assert_eq!((r.disagreements[0].active.as_str(), r.disagreements[0].shadow.as_str()), ("host-1", "host-2"));
        assert_eq!(task(&slots_for(&slots, Some(&operator))).as_deref(), Some("payroll-1a2b3c4d/0"));
        assert_eq!(task(&slots_for(&slots, Some(&Principal::anonymous()))).as_deref(), Some("payroll-1a2b3c4d/0"));
        assert_eq!(task(&slots_for(&slots, None)).as_deref(), Some("payroll-1a2b3c4d/0"));
    }
}

//! Resources, GPU grants and devices, hard and soft constraints: wire ⇄ model.

use paceline_model::gpu::{GpuDevice, GpuGrant, GpuSlot};
use paceline_model::resources::GPU_MILLI;
use paceline_model::{Constraint, Preference, Resources};

use super::FieldError;
use crate::v1 as pb;
/// Resources from the wire: `gpu_milli` when set, else whole `gpus`.
pub fn resources(r: Option<&pb::Resources>) -> Resources {
    r.map(|r| Resources {
        cpu_millis: r.cpu_millis,
        memory_mib: r.memory_mib,
        disk_mib: r.disk_mib,
        gpu_milli: if r.gpu_milli > 0 { r.gpu_milli } else { r.gpus.saturating_mul(GPU_MILLI) },
        ports: r.ports,
    })
    .unwrap_or_default()
}

/// A GPU grant from the wire.
pub fn gpu_grant(g: Option<&pb::GpuGrant>) -> GpuGrant {
    g.map(|g| GpuGrant { devices: g.devices.clone(), milli_each: g.milli_each }).unwrap_or_default()
}

/// A GPU grant to the wire (`None` when empty).
pub fn gpu_grant_pb(g: &GpuGrant) -> Option<pb::GpuGrant> {
    (!g.is_empty()).then(|| pb::GpuGrant { devices: g.devices.clone(), milli_each: g.milli_each })
}

/// A GPU device from the wire.
pub fn gpu_device(d: &pb::GpuDevice) -> GpuDevice {
    GpuDevice { index: d.index, model: d.model.clone() }
}

/// A GPU device to the wire.
pub fn gpu_device_pb(d: &GpuDevice) -> pb::GpuDevice {
    pb::GpuDevice { index: d.index, model: d.model.clone() }
}

/// A device with its use, to the wire.
pub fn gpu_slot_pb(s: &GpuSlot) -> pb::GpuSlot {
    pb::GpuSlot { device: Some(gpu_device_pb(&s.device)), used_milli: s.used_milli }
}

/// A device with its use, from the wire.
pub fn gpu_slot(s: &pb::GpuSlot) -> GpuSlot {
    GpuSlot { device: s.device.as_ref().map(gpu_device).unwrap_or_default(), used_milli: s.used_milli }
}

/// Resources to the wire: both GPU spellings (whole devices rounded down).
pub fn resources_pb(r: &Resources) -> pb::Resources {
    pb::Resources {
        cpu_millis: r.cpu_millis,
        memory_mib: r.memory_mib,
        disk_mib: r.disk_mib,
        gpus: r.whole_gpus(),
        ports: r.ports,
        gpu_milli: r.gpu_milli,
    }
}

/// A hard constraint from the wire.
pub fn constraint(field: &str, c: &pb::Constraint) -> Result<Constraint, FieldError> {
    use pb::constraint::Kind;
    let kv = |kv: &pb::constraint::KeyValue| (kv.key.clone(), kv.value.clone());
    Ok(match c.kind.as_ref().ok_or_else(|| FieldError::new(field, "no constraint kind is set"))? {
        Kind::AttributeEquals(x) => {
            let (key, value) = kv(x);
            Constraint::AttributeEquals { key, value }
        }
        Kind::AttributeNotEquals(x) => {
            let (key, value) = kv(x);
            Constraint::AttributeNotEquals { key, value }
        }
        Kind::AttributeIn(x) => Constraint::AttributeIn { key: x.key.clone(), values: x.values.clone() },
        Kind::AttributeExists(key) => Constraint::AttributeExists { key: key.clone() },
        Kind::WithTaskLabel(x) => {
            let (key, value) = kv(x);
            Constraint::WithTaskLabel { key, value }
        }
        Kind::WithoutTaskLabel(x) => {
            let (key, value) = kv(x);
            Constraint::WithoutTaskLabel { key, value }
        }
        Kind::MaxPerHost(max) => Constraint::MaxPerHost { max: *max },
        Kind::SpreadOver(key) => Constraint::SpreadOver { key: key.clone() },
    })
}

/// A hard constraint to the wire.
pub fn constraint_pb(c: &Constraint) -> pb::Constraint {
    use pb::constraint::{KeyValue, KeyValues, Kind};
    let kv = |key: &String, value: &String| KeyValue { key: key.clone(), value: value.clone() };
    let kind = match c {
        Constraint::AttributeEquals { key, value } => Kind::AttributeEquals(kv(key, value)),
        Constraint::AttributeNotEquals { key, value } => Kind::AttributeNotEquals(kv(key, value)),
        Constraint::AttributeIn { key, values } => {
            Kind::AttributeIn(KeyValues { key: key.clone(), values: values.clone() })
        }
        Constraint::AttributeExists { key } => Kind::AttributeExists(key.clone()),
        Constraint::WithTaskLabel { key, value } => Kind::WithTaskLabel(kv(key, value)),
        Constraint::WithoutTaskLabel { key, value } => Kind::WithoutTaskLabel(kv(key, value)),
        Constraint::MaxPerHost { max } => Kind::MaxPerHost(*max),
        Constraint::SpreadOver { key } => Kind::SpreadOver(key.clone()),
    };
    pb::Constraint { kind: Some(kind) }
}

/// A soft constraint from the wire.
pub fn preference(p: &pb::Preference) -> Preference {
    Preference { key: p.key.clone(), value: p.value.clone(), weight: p.weight }
}

/// A soft constraint to the wire.
pub fn preference_pb(p: &Preference) -> pb::Preference {
    pb::Preference { key: p.key.clone(), value: p.value.clone(), weight: p.weight }
}

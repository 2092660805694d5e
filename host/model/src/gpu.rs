//! GPU devices and shares (decision 0035).
//!
//! A host's GPUs are individual devices, each of 1000 milli-GPUs. A task
//! asks for whole devices (`gpu_milli` a multiple of 1000) or for a share of
//! one device (`gpu_milli` 1..=999), optionally only on some models
//! (`TaskSpec::gpu_models`). Placement answers which devices a task gets
//! ([`GpuGrant`]); the host manager keeps per-device use ([`GpuSlot`]) and
//! the agent hands the devices to the task.
//!
//! Rules, checked by [`check_grant`] wherever a grant is accepted:
//! - whole devices go only to devices nobody uses (never to a shared one);
//! - a share goes to one device with at least that much free;
//! - every device granted is of an allowed model, when models are named;
//! - a task that asks for no GPU gets no device.

use serde::{Deserialize, Serialize};

use crate::resources::{GPU_MILLI, Resources};

/// One GPU device of a host, as detected or configured.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GpuDevice {
    /// The device's index on the host (what `CUDA_VISIBLE_DEVICES` names).
    pub index: u32,
    /// Its model, such as `V100M16` or `A100-SXM4-80GB`; empty if unknown.
    pub model: String,
}

/// One device as placement sees it: model and milli-GPUs in use.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(default)]
pub struct GpuSlot {
    /// The device.
    pub device: GpuDevice,
    /// Milli-GPUs held by runs on it (at most 1000).
    pub used_milli: u32,
}

impl GpuSlot {
    /// Milli-GPUs free on the device.
    pub fn free_milli(&self) -> u32 {
        (GPU_MILLI as u32).saturating_sub(self.used_milli)
    }
}

/// Which devices of its host a run holds, and how much of each.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GpuGrant {
    /// Positions in the host's device list ([`GpuSlot`] order, which is
    /// the host's device order), ascending.
    pub devices: Vec<u32>,
    /// Milli-GPUs held on each: 1000 for whole devices, the share otherwise.
    pub milli_each: u32,
}

impl GpuGrant {
    /// No device.
    pub fn is_empty(&self) -> bool {
        self.devices.is_empty()
    }

    /// The devices' host indices, comma-separated, as `CUDA_VISIBLE_DEVICES`
    /// wants them.
    pub fn visible_devices(&self, slots: &[GpuDevice]) -> String {
        let mut out = String::new();
        for d in &self.devices {
            if let Some(dev) = slots.get(*d as usize) {
                if !out.is_empty() {
                    out.push(',');
                }
                out.push_str(&dev.index.to_string());
            }
        }
        out
    }
}

/// Why a grant is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GrantError {
    /// A device index outside the host's list.
    #[error("device {0} does not exist on the host")]
    NoSuchDevice(u32),
    /// The same device twice.
    #[error("device {0} is granted twice")]
    Repeated(u32),
    /// The number of devices does not match the ask.
    #[error("the task asks for {asked} device(s) but was granted {granted}")]
    WrongCount {
        /// Devices the task needs.
        asked: u64,
        /// Devices granted.
        granted: usize,
    },
    /// A whole device that is not wholly free.
    #[error("whole device {device} is already in use ({used} milli-GPU held)")]
    NotWhole {
        /// The device.
        device: u32,
        /// Milli-GPUs already held on it.
        used: u32,
    },
    /// A share on a device with too little left.
    #[error("device {device} has {free} milli-GPU free, the share needs {need}")]
    Overcommitted {
        /// The device.
        device: u32,
        /// Free on it.
        free: u32,
        /// The share.
        need: u32,
    },
    /// A device of a model the task does not accept.
    #[error("device {device} is a {model:?}, the task accepts only {allowed:?}")]
    WrongModel {
        /// The device.
        device: u32,
        /// Its model.
        model: String,
        /// The task's models.
        allowed: Vec<String>,
    },
}

/// The grant's shape for a demand: devices needed and milli-GPU on each.
pub fn shape(demand: &Resources) -> (u64, u32) {
    match demand.gpu_share() {
        Some(share) => (1, share as u32),
        None => (demand.whole_gpus(), GPU_MILLI as u32),
    }
}

fn model_ok(device: &GpuDevice, models: &[String]) -> bool {
    models.is_empty() || models.contains(&device.model)
}

/// Checks `grant` for a task of `demand` (and `models`) against `slots`,
/// the host's devices with what earlier grants already hold.
pub fn check_grant(
    slots: &[GpuSlot],
    demand: &Resources,
    models: &[String],
    grant: &GpuGrant,
) -> Result<(), GrantError> {
    let (count, milli) = shape(demand);
    if grant.devices.len() as u64 != count {
        return Err(GrantError::WrongCount { asked: count, granted: grant.devices.len() });
    }
    for (i, &d) in grant.devices.iter().enumerate() {
        let slot = slots.get(d as usize).ok_or(GrantError::NoSuchDevice(d))?;
        if grant.devices[..i].contains(&d) {
            return Err(GrantError::Repeated(d));
        }
        if !model_ok(&slot.device, models) {
            return Err(GrantError::WrongModel {
                device: d,
                model: slot.device.model.clone(),
                allowed: models.to_vec(),
            });
        }
        if milli == GPU_MILLI as u32 {
            if slot.used_milli > 0 {
                return Err(GrantError::NotWhole { device: d, used: slot.used_milli });
            }
        } else if slot.free_milli() < milli {
            return Err(GrantError::Overcommitted { device: d, free: slot.free_milli(), need: milli });
        }
    }
    Ok(())
}

/// The host's own choice when an answer names no devices (a policy built
/// against the plugin API before GPU shares): whole devices from the lowest
/// free ones; a share on the device it fills best (least free that fits,
/// lowest index on ties), so shares pack and whole devices stay whole.
pub fn pick(slots: &[GpuSlot], demand: &Resources, models: &[String]) -> Option<GpuGrant> {
    let (count, milli) = shape(demand);
    if count == 0 {
        return Some(GpuGrant::default());
    }
    let ok = |s: &&GpuSlot| model_ok(&s.device, models);
    let devices: Vec<u32> = if milli == GPU_MILLI as u32 {
        let free: Vec<u32> =
            (0..slots.len() as u32).filter(|&i| slots[i as usize].used_milli == 0 && ok(&&slots[i as usize])).collect();
        if (free.len() as u64) < count {
            return None;
        }
        free[..count as usize].to_vec()
    } else {
        let best = (0..slots.len() as u32)
            .filter(|&i| ok(&&slots[i as usize]) && slots[i as usize].free_milli() >= milli)
            .min_by_key(|&i| (slots[i as usize].free_milli(), i))?;
        vec![best]
    };
    Some(GpuGrant { devices, milli_each: milli })
}

/// Adds (or, with `release`, removes) `grant`'s hold on `slots`.
pub fn apply(slots: &mut [GpuSlot], grant: &GpuGrant, release: bool) {
    for &d in &grant.devices {
        if let Some(slot) = slots.get_mut(d as usize) {
            slot.used_milli = if release {
                slot.used_milli.saturating_sub(grant.milli_each)
            } else {
                slot.used_milli.saturating_add(grant.milli_each).min(GPU_MILLI as u32)
            };
        }
    }
}

/// A host's devices: the detected list, or, for a host that reports only a
/// count (older agents, simulated and Mesos hosts), devices 0..n of the
/// host's `gpu_model` attribute.
pub fn devices_of(total: &Resources, listed: &[GpuDevice], model_attribute: Option<&str>) -> Vec<GpuDevice> {
    if !listed.is_empty() {
        return listed.to_vec();
    }
    let model = model_attribute.unwrap_or_default().to_string();
    (0..total.whole_gpus() as u32).map(|index| GpuDevice { index, model: model.clone() }).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slots(used: &[u32]) -> Vec<GpuSlot> {
        used.iter()
            .enumerate()
            .map(|(i, &u)| GpuSlot {
                device: GpuDevice { index: i as u32, model: if i < 2 { "V100".into() } else { "T4".into() } },
                used_milli: u,
            })
            .collect()
    }

    fn milli(m: u64) -> Resources {
        Resources { gpu_milli: m, ..Resources::ZERO }
    }

    #[test]
    fn two_halves_share_a_device_and_a_third_does_not_fit_there() {
        let mut s = slots(&[0]);
        let a = pick(&s, &milli(500), &[]).expect("first half");
        apply(&mut s, &a, false);
        let b = pick(&s, &milli(500), &[]).expect("second half");
        assert_eq!((a.devices.clone(), b.devices.clone()), (vec![0], vec![0]));
        apply(&mut s, &b, false);
        assert_eq!(pick(&s, &milli(500), &[]), None, "the device is full");
        let err = check_grant(&s, &milli(500), &[], &b).expect_err("overcommit");
        assert!(matches!(err, GrantError::Overcommitted { free: 0, need: 500, .. }), "{err}");
        apply(&mut s, &a, true);
        assert_eq!(s[0].used_milli, 500);
    }

    #[test]
    fn whole_devices_never_go_to_a_shared_one() {
        let s = slots(&[300, 0, 0, 0]);
        assert_eq!(pick(&s, &milli(2000), &[]).expect("two whole").devices, vec![1, 2]);
        let bad = GpuGrant { devices: vec![0, 1], milli_each: 1000 };
        assert_eq!(check_grant(&s, &milli(2000), &[], &bad), Err(GrantError::NotWhole { device: 0, used: 300 }));
        assert!(matches!(
            check_grant(&s, &milli(1000), &[], &bad),
            Err(GrantError::WrongCount { asked: 1, granted: 2 })
        ));
        let twice = GpuGrant { devices: vec![1, 1], milli_each: 1000 };
        assert_eq!(check_grant(&s, &milli(2000), &[], &twice), Err(GrantError::Repeated(1)));
        assert!(check_grant(&s, &milli(0), &[], &GpuGrant::default()).is_ok());
        assert_eq!(
            check_grant(&s, &milli(1000), &[], &GpuGrant { devices: vec![9], milli_each: 1000 }),
            Err(GrantError::NoSuchDevice(9))
        );
    }

    #[test]
    fn shares_pack_onto_the_fullest_device_that_fits_and_models_are_honoured() {
        let s = slots(&[600, 200, 0, 0]);
        assert_eq!(pick(&s, &milli(400), &[]).expect("fits device 0").devices, vec![0]);
        assert_eq!(pick(&s, &milli(500), &[]).expect("device 1").devices, vec![1]);
        let t4 = vec!["T4".to_string()];
        assert_eq!(pick(&s, &milli(400), &t4).expect("a T4").devices, vec![2]);
        let on_v100 = GpuGrant { devices: vec![0], milli_each: 400 };
        assert!(matches!(check_grant(&s, &milli(400), &t4, &on_v100), Err(GrantError::WrongModel { device: 0, .. })));
    }

    #[test]
    fn devices_are_synthesised_from_a_count() {
        let d = devices_of(&milli(3000), &[], Some("A100"));
        assert_eq!(
            d.iter().map(|d| (d.index, d.model.as_str())).collect::<Vec<_>>(),
            vec![(0, "A100"), (1, "A100"), (2, "A100")]
        );
        let listed = vec![GpuDevice { index: 7, model: "X".into() }];
        assert_eq!(devices_of(&milli(1000), &listed, None), listed);
        let g = GpuGrant { devices: vec![0], milli_each: 1000 };
        assert_eq!(g.visible_devices(&listed), "7");
    }
}

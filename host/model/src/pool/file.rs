//! The pool file (YAML): amounts that may be `unlimited`, per-kind values under unit names
//! or the older ones, and one entry per pool that reads to and writes from a [`PoolSpec`].

use serde::{Deserialize, Serialize};

use super::kinds::{PerKind, UNLIMITED, whole_gpus_to_milli};
use super::{PoolSpec, PoolType, QueuePolicy};

/// An amount in a pool file: a whole number in the kind's unit, or
/// `unlimited` ([`UNLIMITED`]). Written back the same way.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Amount(pub u64);

impl Serialize for Amount {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if self.0 == UNLIMITED { s.serialize_str("unlimited") } else { s.serialize_u64(self.0) }
    }
}

impl<'de> Deserialize<'de> for Amount {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = Amount;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a whole number (in the kind's unit) or `unlimited`")
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Amount, E> {
                Ok(Amount(v))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Amount, E> {
                u64::try_from(v).map(Amount).map_err(|_| E::custom(format!("{v} is negative; amounts are 0 or more")))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Amount, E> {
                if v.trim().eq_ignore_ascii_case("unlimited") {
                    Ok(Amount(UNLIMITED))
                } else {
                    Err(E::custom(format!("`{v}` is not an amount: write a whole number or `unlimited`")))
                }
            }
        }
        d.deserialize_any(V)
    }
}

/// Per-kind values as a pool file spells them (see the module doc): each
/// kind optional, named `cpu_millis`, `memory_mib`, `disk_mib`, `gpus`, or
/// by the older `cpu`, `memory`, `disk`, `gpu`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct KindValues<T> {
    /// CPU (millicores for amounts).
    #[serde(alias = "cpu", skip_serializing_if = "Option::is_none")]
    pub cpu_millis: Option<T>,
    /// Memory (MiB for amounts).
    #[serde(alias = "memory", skip_serializing_if = "Option::is_none")]
    pub memory_mib: Option<T>,
    /// Disk (MiB for amounts).
    #[serde(alias = "disk", skip_serializing_if = "Option::is_none")]
    pub disk_mib: Option<T>,
    /// GPU (whole devices for amounts).
    #[serde(alias = "gpu", skip_serializing_if = "Option::is_none")]
    pub gpus: Option<T>,
    /// GPU in milli-GPUs, for amounts that are not whole devices (`gpus`
    /// or this, not both; for shares and types the same as `gpus`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_milli: Option<T>,
}

impl<T> Default for KindValues<T> {
    fn default() -> Self {
        KindValues { cpu_millis: None, memory_mib: None, disk_mib: None, gpus: None, gpu_milli: None }
    }
}

impl<T: Copy> KindValues<T> {
    /// Every kind given.
    pub fn all(p: PerKind<T>) -> Self {
        KindValues {
            cpu_millis: Some(p.cpu),
            memory_mib: Some(p.memory),
            disk_mib: Some(p.disk),
            gpus: Some(p.gpu),
            gpu_milli: None,
        }
    }

    /// The kinds left out filled with `default`.
    pub fn or(&self, default: T) -> PerKind<T> {
        PerKind {
            cpu: self.cpu_millis.unwrap_or(default),
            memory: self.memory_mib.unwrap_or(default),
            disk: self.disk_mib.unwrap_or(default),
            gpu: self.gpus.or(self.gpu_milli).unwrap_or(default),
        }
    }
}

impl KindValues<Amount> {
    /// The amounts, GPU in milli-GPUs (`gpus` is whole devices; when both
    /// are given, `gpu_milli` wins: [`PoolEntry::check_gpu_spelling`]
    /// refuses that for files).
    fn amounts(&self, default: u64) -> PerKind<u64> {
        let gpu = match (self.gpu_milli, self.gpus) {
            (Some(m), _) => m.0,
            (None, Some(whole)) => whole_gpus_to_milli(whole.0),
            (None, None) => default,
        };
        PerKind {
            cpu: self.cpu_millis.map_or(default, |a| a.0),
            memory: self.memory_mib.map_or(default, |a| a.0),
            disk: self.disk_mib.map_or(default, |a| a.0),
            gpu,
        }
    }

    /// The file form: GPU as whole `gpus` when it is whole devices (or
    /// unlimited), else as `gpu_milli`.
    fn of(p: &PerKind<u64>) -> Self {
        let whole = p.gpu == UNLIMITED || p.gpu.is_multiple_of(crate::resources::GPU_MILLI);
        KindValues {
            cpu_millis: Some(Amount(p.cpu)),
            memory_mib: Some(Amount(p.memory)),
            disk_mib: Some(Amount(p.disk)),
            gpus: whole.then_some(Amount(if p.gpu == UNLIMITED {
                UNLIMITED
            } else {
                p.gpu / crate::resources::GPU_MILLI
            })),
            gpu_milli: (!whole).then_some(Amount(p.gpu)),
        }
    }

    fn both_gpu_spellings(&self) -> bool {
        self.gpus.is_some() && self.gpu_milli.is_some()
    }
}

/// One value for every kind (`share: 2`, `type: static`), or per kind
/// (`share: { cpu_millis: 2 }`, `type: { gpus: static }`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OneOrPerKind<T> {
    /// The same value for every kind.
    All(T),
    /// Per kind; kinds left out take the field's default.
    PerKind(KindValues<T>),
}

impl<T: Copy> OneOrPerKind<T> {
    /// Per kind, the kinds left out filled with `default`.
    pub fn or(&self, default: T) -> PerKind<T> {
        match self {
            Self::All(v) => PerKind::splat(*v),
            Self::PerKind(p) => p.or(default),
        }
    }

    /// `All` when every kind has the same value, else every kind spelled out.
    pub fn of(p: &PerKind<T>) -> Self
    where
        T: PartialEq,
    {
        if p.to_array().iter().all(|v| *v == p.cpu) { Self::All(p.cpu) } else { Self::PerKind(KindValues::all(*p)) }
    }
}

impl<T: Serialize> Serialize for OneOrPerKind<T> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::All(v) => v.serialize(s),
            Self::PerKind(p) => p.serialize(s),
        }
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for OneOrPerKind<T> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::IntoDeserializer;
        struct V<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>> serde::de::Visitor<'de> for V<T> {
            type Value = OneOrPerKind<T>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("one value for every kind, or a mapping of kinds (cpu_millis, memory_mib, disk_mib, gpus)")
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Self::Value, E> {
                T::deserialize(v.into_deserializer()).map(OneOrPerKind::All)
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Self::Value, E> {
                T::deserialize(v.into_deserializer()).map(OneOrPerKind::All)
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Self::Value, E> {
                T::deserialize(v.into_deserializer()).map(OneOrPerKind::All)
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
                KindValues::deserialize(serde::de::value::MapAccessDeserializer::new(map)).map(OneOrPerKind::PerKind)
            }
        }
        d.deserialize_any(V(std::marker::PhantomData))
    }
}

/// A pool file: the pools to create, parents before children.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PoolFile {
    /// Pool entries.
    #[serde(default)]
    pub pools: Vec<PoolEntry>,
}

/// One pool in a [`PoolFile`]. Kinds left out: reservation 0, limit
/// unlimited, share 1, elastic, slack limit 0.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PoolEntry {
    /// Path such as `/ml/training`.
    pub path: String,
    /// Guaranteed amounts.
    #[serde(default)]
    pub reservation: KindValues<Amount>,
    /// Limits; a kind left out, or `unlimited`, has none; 0 is zero.
    #[serde(default)]
    pub limit: KindValues<Amount>,
    /// Shares: one weight for every kind, or per kind.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share: Option<OneOrPerKind<u64>>,
    /// Elastic or static: one type for every kind, or per kind.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub pool_type: Option<OneOrPerKind<PoolType>>,
    /// Revocable limits.
    #[serde(default)]
    pub slack_limit: KindValues<Amount>,
    /// Queue order.
    #[serde(default)]
    pub queue_policy: QueuePolicy,
    /// Most of the pool controller tasks may hold, in percent of its
    /// reservation (of its limit where it reserves nothing); left out: no cap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub controller_limit_percent: Option<u8>,
    /// Host users the pool's jobs may run their tasks as (`user:`); left
    /// out: none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub task_users: Vec<String>,
    /// Most live jobs in the pool; left out: the server's default; 0: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_live_jobs: Option<u64>,
    /// Most live tasks in the pool; left out: the server's default; 0: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_live_tasks: Option<u64>,
}

impl PoolEntry {
    /// Refuses an entry that spells a GPU amount both as `gpus` and as
    /// `gpu_milli`; names the field.
    pub fn check_gpu_spelling(&self) -> Result<(), String> {
        for (field, v) in
            [("reservation", &self.reservation), ("limit", &self.limit), ("slack_limit", &self.slack_limit)]
        {
            if v.both_gpu_spellings() {
                return Err(format!(
                    "{field}: give `gpus` (whole devices) or `gpu_milli` (1000 is one device), not both"
                ));
            }
        }
        Ok(())
    }

    /// The spec this entry declares, defaults filled in.
    pub fn spec(&self) -> PoolSpec {
        PoolSpec {
            reservation: self.reservation.amounts(0),
            limit: self.limit.amounts(UNLIMITED),
            share: self.share.map_or(PerKind::splat(1), |s| s.or(1)),
            pool_type: self.pool_type.map_or(PerKind::splat(PoolType::Elastic), |t| t.or(PoolType::Elastic)),
            slack_limit: self.slack_limit.amounts(0),
            queue_policy: self.queue_policy,
            controller_limit_percent: self.controller_limit_percent,
            task_users: self.task_users.clone(),
            max_live_jobs: self.max_live_jobs,
            max_live_tasks: self.max_live_tasks,
        }
    }

    /// A spec written out in the file form, every kind spelled (`unlimited`
    /// for no limit; one share and one type when every kind has the same).
    pub fn from_spec(path: &str, spec: &PoolSpec) -> PoolEntry {
        PoolEntry {
            path: path.to_owned(),
            reservation: KindValues::of(&spec.reservation),
            limit: KindValues::of(&spec.limit),
            share: Some(OneOrPerKind::of(&spec.share)),
            pool_type: Some(OneOrPerKind::of(&spec.pool_type)),
            slack_limit: KindValues::of(&spec.slack_limit),
            queue_policy: spec.queue_policy,
            controller_limit_percent: spec.controller_limit_percent,
            task_users: spec.task_users.clone(),
            max_live_jobs: spec.max_live_jobs,
            max_live_tasks: spec.max_live_tasks,
        }
    }
}

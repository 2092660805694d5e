//! Placement constraints in the job spec's terms (attribute names and
//! values as strings), and their evaluation against a host.
//!
//! Hard constraints on host attributes and on the tasks a host already runs
//! are evaluated by the runtime before a plugin call (they become the
//! request's eligible-host lists); `max_per_host` and `spread_over` depend on
//! the round's own decisions and are passed to the plugin to enforce, and
//! validated on its answer.

use serde::{Deserialize, Serialize};

use crate::view::HostView;

/// A hard constraint: a host that fails it is never used.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Constraint {
    /// The host attribute `key` equals `value`.
    AttributeEquals {
        /// Attribute name.
        key: String,
        /// Required value.
        value: String,
    },
    /// The host attribute `key` is absent or differs from `value`.
    AttributeNotEquals {
        /// Attribute name.
        key: String,
        /// Excluded value.
        value: String,
    },
    /// The host attribute `key` is one of `values`.
    AttributeIn {
        /// Attribute name.
        key: String,
        /// Allowed values.
        values: Vec<String>,
    },
    /// The host has attribute `key`, whatever its value.
    AttributeExists {
        /// Attribute name.
        key: String,
    },
    /// The host already runs a task labelled `key=value` (task affinity).
    WithTaskLabel {
        /// Label name.
        key: String,
        /// Label value.
        value: String,
    },
    /// The host runs no task labelled `key=value` (task anti-affinity).
    WithoutTaskLabel {
        /// Label name.
        key: String,
        /// Label value.
        value: String,
    },
    /// At most `max` tasks of the job on one host.
    MaxPerHost {
        /// The maximum, at least 1.
        max: u32,
    },
    /// Spread the job's tasks across the values of host attribute `key`.
    SpreadOver {
        /// Attribute name, such as `zone`.
        key: String,
    },
}

/// A soft constraint: hosts whose attribute `key` equals `value` score
/// `weight` more (or less, when negative).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Preference {
    /// Attribute name.
    pub key: String,
    /// Preferred value.
    pub value: String,
    /// Weight, positive to prefer, negative to avoid.
    pub weight: i32,
}

/// A constraint that cannot be used as written.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConstraintError {
    /// A key or value is empty.
    #[error("constraint {index}: `{field}` must not be empty")]
    Empty {
        /// Position in the list.
        index: usize,
        /// The field.
        field: &'static str,
    },
    /// `max_per_host` of zero would forbid every host.
    #[error("constraint {index}: max_per_host must be at least 1")]
    ZeroMax {
        /// Position in the list.
        index: usize,
    },
}

impl Constraint {
    /// Evaluates the constraint against `host`, or `None` for constraints the
    /// plugin enforces during the round (`max_per_host`, `spread_over`).
    pub fn admits(&self, host: &HostView) -> Option<bool> {
        let attr = |k: &str| host.attributes.get(k).map(String::as_str);
        Some(match self {
            Constraint::AttributeEquals { key, value } => attr(key) == Some(value.as_str()),
            Constraint::AttributeNotEquals { key, value } => attr(key) != Some(value.as_str()),
            Constraint::AttributeIn { key, values } => attr(key).is_some_and(|v| values.iter().any(|x| x == v)),
            Constraint::AttributeExists { key } => attr(key).is_some(),
            Constraint::WithTaskLabel { key, value } => host.runs_label(key, value),
            Constraint::WithoutTaskLabel { key, value } => !host.runs_label(key, value),
            Constraint::MaxPerHost { .. } | Constraint::SpreadOver { .. } => return None,
        })
    }

    /// Checks that the constraint is well-formed; `index` names it in errors.
    pub fn validate(&self, index: usize) -> Result<(), ConstraintError> {
        let nonempty =
            |s: &str, field| if s.is_empty() { Err(ConstraintError::Empty { index, field }) } else { Ok(()) };
        match self {
            Constraint::AttributeEquals { key, value }
            | Constraint::AttributeNotEquals { key, value }
            | Constraint::WithTaskLabel { key, value }
            | Constraint::WithoutTaskLabel { key, value } => {
                nonempty(key, "key")?;
                nonempty(value, "value")
            }
            Constraint::AttributeIn { key, values } => {
                nonempty(key, "key")?;
                if values.is_empty() { Err(ConstraintError::Empty { index, field: "values" }) } else { Ok(()) }
            }
            Constraint::AttributeExists { key } | Constraint::SpreadOver { key } => nonempty(key, "key"),
            Constraint::MaxPerHost { max } => {
                if *max == 0 {
                    Err(ConstraintError::ZeroMax { index })
                } else {
                    Ok(())
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host() -> HostView {
        let mut h = HostView::new("h1", crate::Resources::new(1000, 1000, 0, 0));
        h.attributes.insert("zone".into(), "a".into());
        h.task_labels.insert("app=web".into());
        h
    }

    #[test]
    fn table() {
        let h = host();
        let s = |x: &str| x.to_string();
        let cases = [
            (Constraint::AttributeEquals { key: s("zone"), value: s("a") }, Some(true)),
            (Constraint::AttributeEquals { key: s("zone"), value: s("b") }, Some(false)),
            (Constraint::AttributeNotEquals { key: s("zone"), value: s("a") }, Some(false)),
            (Constraint::AttributeNotEquals { key: s("rack"), value: s("a") }, Some(true)),
            (Constraint::AttributeIn { key: s("zone"), values: vec![s("b"), s("a")] }, Some(true)),
            (Constraint::AttributeExists { key: s("rack") }, Some(false)),
            (Constraint::WithTaskLabel { key: s("app"), value: s("web") }, Some(true)),
            (Constraint::WithoutTaskLabel { key: s("app"), value: s("web") }, Some(false)),
            (Constraint::MaxPerHost { max: 1 }, None),
        ];
        for (c, expected) in cases {
            assert_eq!(c.admits(&h), expected, "{c:?}");
        }
    }

    #[test]
    fn parses_from_yaml_and_rejects_bad_ones() {
        let c: Vec<Constraint> =
            serde_yaml::from_str("- { kind: attribute_equals, key: zone, value: a }\n- { kind: max_per_host, max: 2 }")
                .expect("parses");
        assert_eq!(c.len(), 2);
        assert!(serde_yaml::from_str::<Constraint>("{ kind: attribute_equals, key: zone }").is_err());
        assert_eq!(Constraint::MaxPerHost { max: 0 }.validate(3), Err(ConstraintError::ZeroMax { index: 3 }));
        assert!(Constraint::AttributeIn { key: "k".into(), values: vec![] }.validate(0).is_err());
    }
}

//! Errors of the plugin runtime. Every fault a plugin can cause is one of
//! these values; none of them reaches the host as a panic.

use std::fmt;

use paceline_plugin_sdk::validate::Violation;

/// How a call into a plugin went wrong. Used for metrics and for the
/// automatic rollback rule, and shown to operators.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FaultKind {
    /// The call ran past its deadline (epoch interruption).
    Deadline,
    /// The instance tried to grow memory past its cap.
    MemoryCap,
    /// The guest panicked.
    Panic,
    /// The guest overflowed its stack.
    StackOverflow,
    /// The call used up its fuel.
    OutOfFuel,
    /// Any other trap (unreachable, out-of-bounds access, ...).
    Trap,
    /// The answer broke the contract (unknown ids, twice, over capacity, ...).
    InvalidAnswer,
    /// The instance could not be created (e.g. every pooled slot is busy).
    Instantiate,
    /// The answer passed validation here but a role refused it later (the
    /// resource manager or the job manager found it impossible); counted
    /// and rolled back like an invalid answer.
    RefusedDownstream,
}

impl FaultKind {
    /// Every kind, in metric order.
    pub const ALL: [FaultKind; 9] = [
        FaultKind::Deadline,
        FaultKind::MemoryCap,
        FaultKind::Panic,
        FaultKind::StackOverflow,
        FaultKind::OutOfFuel,
        FaultKind::Trap,
        FaultKind::InvalidAnswer,
        FaultKind::Instantiate,
        FaultKind::RefusedDownstream,
    ];

    /// A stable snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            FaultKind::Deadline => "deadline",
            FaultKind::MemoryCap => "memory_cap",
            FaultKind::Panic => "panic",
            FaultKind::StackOverflow => "stack_overflow",
            FaultKind::OutOfFuel => "out_of_fuel",
            FaultKind::Trap => "trap",
            FaultKind::InvalidAnswer => "invalid_answer",
            FaultKind::Instantiate => "instantiate",
            FaultKind::RefusedDownstream => "refused_downstream",
        }
    }
}

impl fmt::Display for FaultKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A failed call into a plugin.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("plugin {version} failed ({kind}): {message}")]
pub struct CallError {
    /// What went wrong.
    pub kind: FaultKind,
    /// The version that failed (`name@version`).
    pub version: String,
    /// Details: the trap, the panic message, or the contract violation.
    pub message: String,
    /// The first 16 hex digits of the SHA-256 of the input, to find it in logs and replay it.
    pub input_hash: String,
}

/// Errors of registry and runtime operations (deploy, activate, ...).
#[derive(Debug, thiserror::Error)]
pub enum PluginError {
    /// The upload is larger than the configured limit.
    #[error("plugin is {size} bytes, over the {max}-byte upload limit")]
    TooLarge {
        /// Its size.
        size: usize,
        /// The limit.
        max: usize,
    },
    /// The bytes are not WebAssembly at all.
    #[error("not a WebAssembly file (it does not start with the \\0asm magic number)")]
    NotWasm,
    /// The bytes are a core module, not a component.
    #[error(
        "a core WebAssembly module, not a component: build with --target wasm32-wasip2 (or wrap it with `wasm-tools component new`)"
    )]
    NotComponent,
    /// The component does not compile.
    #[error("the component does not compile: {0}")]
    Compile(String),
    /// The component does not match the slot's world.
    #[error("the component does not fit slot {slot} (world `{world}`): {detail}")]
    WrongWorld {
        /// The slot.
        slot: String,
        /// The world the slot requires.
        world: &'static str,
        /// What is missing or mismatched.
        detail: String,
    },
    /// The component failed its self-test on sample inputs.
    #[error("self-test failed: {0}")]
    SelfTest(CallError),
    /// No such slot name (valid: `placement/<name>`, `preemption`, `lifecycle/<kind>`).
    #[error(
        "unknown slot `{0}`: slots are placement/<name>, preemption and lifecycle/<batch|stateless|stateful|daemon>"
    )]
    UnknownSlot(String),
    /// No such version in the slot.
    #[error("slot {slot} has no version {version}")]
    UnknownVersion {
        /// The slot.
        slot: String,
        /// The version asked for.
        version: String,
    },
    /// A version with this name and version string already exists.
    #[error("slot {slot} already has version {version}; deploy under a new version string")]
    Duplicate {
        /// The slot.
        slot: String,
        /// The version.
        version: String,
    },
    /// Nothing to roll back to: a rollback would leave the slot with no
    /// active version (its native policy serving, unannounced).
    #[error("slot {slot} has no earlier version to roll back to: {detail}")]
    NothingToRollBack {
        /// The slot.
        slot: String,
        /// What the slot runs and holds, and what to do instead.
        detail: String,
    },
    /// A name or version string with characters that are not allowed.
    #[error("invalid {field} `{value}`: use letters, digits, '.', '-' and '_' (1 to 64 characters)")]
    InvalidName {
        /// Which field.
        field: &'static str,
        /// The value.
        value: String,
    },
    /// The call failed and no fallback could answer.
    #[error(transparent)]
    Call(#[from] CallError),
    /// Persisting or loading versions failed.
    #[error("plugin storage: {0}")]
    Storage(String),
    /// The runtime could not be set up.
    #[error("plugin runtime: {0}")]
    Runtime(String),
}

impl From<Violation> for FaultKind {
    fn from(_: Violation) -> Self {
        FaultKind::InvalidAnswer
    }
}

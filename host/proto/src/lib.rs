//! # paceline-proto
//!
//! The Protobuf messages and gRPC stubs generated from `proto/`, and
//! [`convert`]: the one place where the wire's values become the model's and
//! back (every protocol shares `paceline.v1`'s `Resources`, `Constraint`,
//! `Preference` and the state enums). Behaviour lives in the crates that
//! serve or call these services; it must not depend on any role crate.
//!
//! - [`v1`]: the public API, package `paceline.v1` (jobs, tasks, pools,
//!   hosts, plugins, watch), one service per file under `proto/paceline/v1/`.
//! - [`agent::v1`]: the internal protocol between `paceline agent` and the
//!   host manager (see `proto/paceline/agent/v1/agent.proto`).
//! - [`hostmgr::v1`]: the internal protocol between the job manager and a
//!   host manager in a process of its own.
//! - [`placement::v2`]: the internal protocol between a placement engine in
//!   a process of its own and the core roles.
//! - [`convert`]: wire ⇄ model.
//! - [`bearer`]: the interceptor that puts a bearer token on every call.
//! - [`incoming`]: how every server of ours accepts connections (Nagle off).
//! - `redacted`: the hand-written `Debug` of messages that carry a secret's value.

/// The node-agent protocol.
pub mod agent {
    /// Version 1 of the node-agent protocol.
    pub mod v1 {
        #![allow(clippy::all, missing_docs)]
        tonic::include_proto!("paceline.agent.v1");

        /// The protocol version this build speaks (`Register.protocol_version`).
        pub const PROTOCOL_VERSION: u32 = 1;

        /// `Register.features`: the agent delivers `Launch.secrets`.
        pub const FEATURE_SECRETS: &str = "secrets";

        /// `Register.features`: the agent honours `Launch.gang` (a gang
        /// member's exact ports and its peers file).
        pub const FEATURE_GANG: &str = "gang";
    }
}

/// The internal protocol between a job manager and a host manager in a
/// process of its own (see `proto/paceline/hostmgr/v1/hostmgr.proto`).
pub mod hostmgr {
    /// Version 1 of the host manager protocol.
    pub mod v1 {
        #![allow(clippy::all, missing_docs)]
        tonic::include_proto!("paceline.hostmgr.v1");
    }
}

/// The internal protocol between a placement engine in a process of its own
/// and the core roles (see `proto/paceline/placement/v2/placement.proto`).
pub mod placement {
    /// Version 2 of the placement protocol (typed messages; one commit call).
    pub mod v2 {
        #![allow(clippy::all, missing_docs)]
        tonic::include_proto!("paceline.placement.v2");
    }
}

pub mod bearer;
pub mod convert;
pub mod incoming;
mod redacted;

/// The public API, version 1.
pub mod v1 {
    #![allow(clippy::all, missing_docs)]
    tonic::include_proto!("paceline.v1");
    include!(concat!(env!("OUT_DIR"), "/paceline.v1.serde.rs"));

    /// The encoded `FileDescriptorSet` of every compiled `.proto` (the
    /// public API and the agent protocol), for gRPC server reflection.
    pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("paceline_descriptor");
}

/// Apache Mesos v1: the subset of `mesos.v1` and `mesos.v1.scheduler` that
/// the `mesos` host provider speaks (see `proto/mesos/v1/`). Every message
/// has prost (protobuf) and serde (Mesos JSON: proto field names, enum
/// names as strings, bytes as base64) encodings.
pub mod mesos {
    /// Package `mesos.v1`.
    pub mod v1 {
        #![allow(clippy::all, missing_docs)]
        include!(concat!(env!("OUT_DIR"), "/mesos.v1.rs"));
        include!(concat!(env!("OUT_DIR"), "/mesos.v1.serde.rs"));

        /// Package `mesos.v1.scheduler`.
        pub mod scheduler {
            #![allow(clippy::all, missing_docs)]
            include!(concat!(env!("OUT_DIR"), "/mesos.v1.scheduler.rs"));
            include!(concat!(env!("OUT_DIR"), "/mesos.v1.scheduler.serde.rs"));
        }
    }
}

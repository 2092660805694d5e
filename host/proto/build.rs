//! Compiles every `.proto` under the workspace's `proto/` directory with a
//! vendored `protoc`, so a fresh clone needs no system package.

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../proto");
    let protos: Vec<PathBuf> = [
        "agent/v1/agent",
        "hostmgr/v1/hostmgr",
        "placement/v2/placement",
        "v1/types",
        "v1/event",
        "v1/job",
        "v1/task",
        "v1/pool",
        "v1/host",
        "v1/plugin",
        "v1/watch",
        "v1/audit",
        "v1/operator",
        "v1/secret",
    ]
    .iter()
    .map(|p| root.join(format!("paceline/{p}.proto")))
    .collect();
    for p in &protos {
        println!("cargo:rerun-if-changed={}", p.display());
    }
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    // The descriptor set feeds gRPC server reflection (`grpcurl`, `grpcui`).
    let descriptors = PathBuf::from(std::env::var("OUT_DIR")?).join("paceline_descriptor.bin");
    tonic_prost_build::configure()
        .file_descriptor_set_path(descriptors)
        .protoc_arg("--experimental_allow_proto3_optional")
        .build_client(true)
        .build_server(true)
        .compile_with_config(
            {
                let mut c = tonic_prost_build::Config::new();
                c.protoc_executable(&protoc);
                // Messages that carry a secret's value get a hand-written,
                // redacting Debug (src/redacted.rs).
                c.skip_debug([".paceline.agent.v1.LaunchSecret", ".paceline.v1.PutSecretRequest"]);
                c
            },
            &protos,
            std::slice::from_ref(&root),
        )?;
    // serde for the public API's messages (proto3 JSON mapping with the
    // proto field names): the web UI's JSON routes answer with them.
    let set = std::fs::read(PathBuf::from(std::env::var("OUT_DIR")?).join("paceline_descriptor.bin"))?;
    pbjson_build::Builder::new().register_descriptors(&set)?.preserve_proto_field_names().build(&[".paceline.v1"])?;
    compile_mesos(&root, protoc)?;
    Ok(())
}

/// The Mesos v1 subset (`proto/mesos/v1/`): messages only (the scheduler
/// API is HTTP, not gRPC), plus serde impls from `pbjson-build` for Mesos'
/// JSON encoding (proto field names, enum names as strings).
fn compile_mesos(root: &std::path::Path, protoc: PathBuf) -> Result<(), Box<dyn std::error::Error>> {
    let protos: Vec<PathBuf> =
        ["mesos", "scheduler"].iter().map(|p| root.join(format!("mesos/v1/{p}.proto"))).collect();
    for p in &protos {
        println!("cargo:rerun-if-changed={}", p.display());
    }
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    let descriptors = out.join("mesos_descriptor.bin");
    let mut config = tonic_prost_build::Config::new();
    config.protoc_executable(protoc);
    config.file_descriptor_set_path(&descriptors);
    config.compile_protos(&protos, &[root])?;
    let set = std::fs::read(&descriptors)?;
    pbjson_build::Builder::new()
        .register_descriptors(&set)?
        .preserve_proto_field_names()
        .ignore_unknown_fields()
        .ignore_unknown_enum_variants()
        .build(&[".mesos.v1"])?;
    Ok(())
}

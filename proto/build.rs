//! Generates the tonic/prost code from `proto/` with the vendored protoc, so no
//! system protoc is needed.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    // SAFETY: build scripts are single-threaded; prost-build reads PROTOC.
    unsafe { std::env::set_var("PROTOC", protoc) };
    let files = [
        "proto/openshell/raft/v1/raft.proto",
        "proto/openshell/cluster/v1/cluster.proto",
        "proto/openshell/objects/v1/objects.proto",
        "proto/openshell/gateway/v1/log.proto",
        "proto/openshell/gateway/v1/peer_relay.proto",
        "proto/openshell/pool_types/v1/pool_types.proto",
        "proto/openshell/supervisor_host/v1/supervisor_host.proto",
        "proto/openshell/pool_admin/v1/pool_admin.proto",
        "proto/openshell/sandbox_runtime/v1/runtime.proto",
    ];
    // The encoded descriptors of every file, served by gRPC server reflection
    // (`proto::FILE_DESCRIPTOR_SET`).
    let out_dir = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    tonic_prost_build::configure()
        .file_descriptor_set_path(out_dir.join("openshell_descriptor.bin"))
        .compile_protos(&files, &["proto"])?;
    for f in files {
        println!("cargo:rerun-if-changed={f}");
    }
    Ok(())
}

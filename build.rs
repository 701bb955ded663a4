//! Generates the sidecar's gRPC code from `proto/sidecar.proto` with a vendored `protoc`, so a
//! fresh machine needs no system protobuf compiler.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/sidecar.proto");
    let mut config = tonic_prost_build::Config::new();
    config.protoc_executable(protoc_bin_vendored::protoc_bin_path()?);
    tonic_prost_build::configure().compile_with_config(
        config,
        &["proto/sidecar.proto"],
        &["proto"],
    )?;
    Ok(())
}

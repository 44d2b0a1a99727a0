//! Compiles proto/etcd.proto into tonic clients with protox, a protobuf
//! compiler written in Rust: building quiver needs cargo alone, no protoc.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/etcd.proto");
    let descriptors = protox::compile(["etcd.proto"], ["proto"])?;
    tonic_prost_build::configure()
        .build_server(false)
        .compile_fds(descriptors)?;
    Ok(())
}

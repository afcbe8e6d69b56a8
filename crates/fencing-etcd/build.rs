//! Nothing to generate here: the script exists so that cargo builds (and
//! so unpacks) the pinned `protoc-bin-vendored-*` build-dependency before
//! etcd-client's build script asks `.cargo/protoc` for it.

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
}

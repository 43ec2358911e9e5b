//! Compiles the Kubernetes API's `.proto` files to one FileDescriptorSet, and
//! lists the messages that stand for Go named slices and the fields JSON
//! inlines (see `src/json.rs`).
//!
//! The `.proto` files are those of Kubernetes 1.35 as the `k8s-rs-pb`
//! package ships them (a build-dependency with no feature: none of its code
//! is compiled). That package names them without the `k8s.io/` root (files
//! `api/core/v1/generated.proto`, package `api.core.v1`); the descriptors are
//! renamed back to Kubernetes' own names (`k8s.io/api/core/v1/generated.proto`,
//! `k8s.io.api.core.v1`), which is all that differs: messages, field names,
//! numbers and types are go-to-protobuf's.

use std::path::{Path, PathBuf};

use prost::Message;
use prost_types::{DescriptorProto, FileDescriptorSet};

/// The package and the Kubernetes version of its `.proto` files.
const PACKAGE: &str = "k8s-rs-pb-0.5.0";
const KUBERNETES: &str = "v1_35";

/// The directory of the package's 1.35 `.proto` files, in Cargo's registry
/// sources (`$CARGO_HOME/registry/src/<registry>/k8s-rs-pb-0.5.0`), where
/// Cargo unpacked the build-dependency.
fn proto_root() -> PathBuf {
    let cargo_home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cargo")))
        .expect("CARGO_HOME or HOME is set");
    let registries = cargo_home.join("registry").join("src");
    let found = std::fs::read_dir(&registries)
        .unwrap_or_else(|e| panic!("{}: {e} (the sources of {PACKAGE} are read from Cargo's registry)", registries.display()))
        .flatten()
        .map(|registry| registry.path().join(PACKAGE).join("src").join(KUBERNETES))
        .find(|dir| dir.join("api/core/v1/generated.proto").is_file());
    found.unwrap_or_else(|| panic!("no {PACKAGE}/src/{KUBERNETES} under {}: run `cargo fetch`", registries.display()))
}

fn proto_files(root: &Path, dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir).expect("read proto dir").flatten().map(|e| e.path()).collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            proto_files(root, &path, out);
        } else if path.extension().is_some_and(|e| e == "proto") {
            out.push(path.strip_prefix(root).expect("under root").to_path_buf());
        }
    }
}

/// `.api.core.v1.Pod` -> `.k8s.io.api.core.v1.Pod`.
fn rooted_type(name: &mut String) {
    if let Some(rest) = name.strip_prefix('.') {
        *name = format!(".k8s.io.{rest}");
    }
}

fn root_message(message: &mut DescriptorProto) {
    for field in &mut message.field {
        if let Some(name) = field.type_name.as_mut() {
            rooted_type(name);
        }
    }
    for nested in &mut message.nested_type {
        root_message(nested);
    }
}

/// Kubernetes' own file and package names in every descriptor.
fn root_names(set: &mut FileDescriptorSet) {
    for file in &mut set.file {
        if let Some(name) = file.name.as_mut() {
            *name = format!("k8s.io/{name}");
        }
        for dependency in &mut file.dependency {
            *dependency = format!("k8s.io/{dependency}");
        }
        if let Some(package) = file.package.as_mut() {
            *package = format!("k8s.io.{package}");
        }
        for message in &mut file.message_type {
            root_message(message);
        }
    }
}

fn main() {
    let root = proto_root();
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=inline-fields.txt");
    // The built-in API groups and apimachinery, as kube-apiserver serves them.
    let mut files = Vec::new();
    proto_files(&root, &root.join("api"), &mut files);
    proto_files(&root, &root.join("apimachinery"), &mut files);
    let mut compiler = protox::Compiler::new([&root]).expect("proto include path");
    compiler.include_imports(true).include_source_info(true);
    compiler.open_files(&files).unwrap_or_else(|e| panic!("compiling the Kubernetes .proto files of {}: {e}", root.display()));
    let mut set = compiler.file_descriptor_set();
    root_names(&mut set);
    // go-to-protobuf marks a Go named slice type (`type ExtraValue []string`)
    // with `+protobuf.nullable=true` and writes it as a message with one
    // repeated `items` field; its JSON is the bare array.
    let mut wrappers = Vec::new();
    for file in &mut set.file {
        if let Some(info) = file.source_code_info.take() {
            for location in &info.location {
                let comments = location.leading_comments.as_deref().unwrap_or_default();
                if location.path.len() == 2 && location.path[0] == 4 && comments.contains("+protobuf.nullable=true") {
                    let message = &file.message_type[location.path[1] as usize];
                    wrappers.push(format!("{}.{}", file.package(), message.name()));
                }
            }
        }
    }
    wrappers.sort();
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("out dir"));
    let bytes = set.encode_to_vec();
    std::fs::write(out.join("kubernetes.bin"), &bytes).expect("write descriptors");
    let list: String = wrappers.iter().map(|w| format!("    {w:?},\n")).collect();
    std::fs::write(out.join("wrappers.rs"), format!("&[\n{list}]\n")).expect("write wrappers");
    // Embedded Go structs that JSON inlines (inline-fields.txt), checked
    // against the descriptors; an entry of a type this Kubernetes version
    // does not have yet is left out.
    let inline = std::fs::read_to_string("inline-fields.txt").expect("read inline-fields.txt");
    let pool = prost_reflect::DescriptorPool::decode(&bytes[..]).expect("the renamed descriptors are consistent");
    let mut entries = String::new();
    for line in inline.lines().filter(|l| !l.trim().is_empty() && !l.starts_with('#')) {
        let (message, number) = line.split_once(' ').expect("inline-fields.txt: MESSAGE NUMBER");
        let number: u32 = number.trim().parse().expect("inline-fields.txt: field number");
        let Some(descriptor) = pool.get_message_by_name(message) else { continue };
        let field = descriptor.get_field(number).unwrap_or_else(|| panic!("{message} has no field {number}"));
        assert!(field.kind().as_message().is_some() && !field.is_list(), "{message} field {number} is not one message");
        entries.push_str(&format!("    ({message:?}, {number}),\n"));
    }
    std::fs::write(out.join("inline.rs"), format!("&[\n{entries}]\n")).expect("write inline");
}

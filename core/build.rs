//! Says which packages to install when the Ceph client's development files are missing, where
//! the link would fail at the very end of the build with `cannot find -lrbd` among pages of
//! output: on a host building the sdist (`pip install --no-binary`) with no wheel to take.

use std::path::PathBuf;

/// The files the link needs (`-lrbd`, `-lrados`), and the Debian and EL packages that hold them.
const NEEDED: [(&str, &str, &str); 2] = [
    ("librbd.so", "librbd-dev", "librbd-devel"),
    ("librados.so", "librados-dev", "librados-devel"),
];

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-env-changed=LIBRARY_PATH");
    // The target's C compiler, which knows the directories its linker searches (the cross
    // compiler's multiarch ones for aarch64).
    let compiler = cc::Build::new().cargo_metadata(false).get_compiler();
    let searched = link_dirs();
    let missing: Vec<_> = NEEDED
        .iter()
        .filter(|(file, _, _)| {
            !found(&compiler, file) && !searched.iter().any(|dir| dir.join(file).exists())
        })
        .collect();
    if missing.is_empty() {
        return;
    }
    let files: Vec<_> = missing.iter().map(|(file, _, _)| *file).collect();
    let debian: Vec<_> = missing.iter().map(|(_, deb, _)| *deb).collect();
    let el: Vec<_> = missing.iter().map(|(_, _, rpm)| *rpm).collect();
    eprintln!(
        "glance-rbd-native links the Ceph client libraries, and {} cannot be found: install {} \
         (Debian, Ubuntu) or {} (EL), of Ceph 16 (Pacific) or later, then build again.",
        files.join(" and "),
        debian.join(" "),
        el.join(" "),
    );
    std::process::exit(1);
}

/// Whether the compiler finds `file`: gcc and clang print the path of a library they would
/// link, or the bare name if none. Without a compiler to ask, the link says what is wrong.
fn found(compiler: &cc::Tool, file: &str) -> bool {
    compiler
        .to_command()
        .arg(format!("-print-file-name={file}"))
        .output()
        .map(|out| String::from_utf8_lossy(&out.stdout).trim() != file)
        .unwrap_or(true)
}

/// The directories given to the link with `-L` in the rustflags (Ceph installed elsewhere than
/// where the compiler looks, as `RUSTFLAGS="-L /opt/ceph/lib"`).
fn link_dirs() -> Vec<PathBuf> {
    let flags = std::env::var("CARGO_ENCODED_RUSTFLAGS").unwrap_or_default();
    let mut flags = flags.split('\x1f');
    let mut dirs = Vec::new();
    while let Some(flag) = flags.next() {
        let value = match flag.strip_prefix("-L") {
            Some("") => flags.next().unwrap_or_default(),
            Some(value) => value,
            None => continue,
        };
        let dir = value.split_once('=').map_or(value, |(_, dir)| dir);
        dirs.push(PathBuf::from(dir));
    }
    dirs
}

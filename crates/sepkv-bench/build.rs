//! Builds the Badger driver (`badger/`, Go) as a static library when the
//! cargo feature `badger` is on. It needs the Go toolchain (1.24 or newer)
//! with cgo; Go fetches Badger's modules on the first build, checked against
//! `badger/go.sum`.

use std::env;
use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    if env::var_os("CARGO_FEATURE_BADGER").is_none() {
        return;
    }
    let src = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("set by cargo")).join("badger");
    for f in ["driver.go", "go.mod", "go.sum"] {
        println!("cargo:rerun-if-changed={}", src.join(f).display());
    }
    println!("cargo:rerun-if-env-changed=GO");
    let out = PathBuf::from(env::var("OUT_DIR").expect("set by cargo"));
    let lib = out.join("libsepkvbadger.a");
    let go = env::var("GO").unwrap_or_else(|_| "go".into());
    let status = Command::new(&go)
        .current_dir(&src)
        .env("CGO_ENABLED", "1")
        // Use the installed toolchain; never download another one.
        .env("GOTOOLCHAIN", "local")
        .args([
            "build",
            "-buildmode=c-archive",
            "-trimpath",
            "-mod=readonly",
            "-o",
        ])
        .arg(&lib)
        .arg(".")
        .status();
    match status {
        Ok(s) if s.success() => {}
        Ok(s) => panic!(
            "the Badger driver failed to build ({go} build in badger/ exited with {s}): \
             the feature `badger` needs Go 1.24 or newer with cgo and a C compiler"
        ),
        Err(e) => panic!(
            "the feature `badger` needs the Go toolchain ({go}: {e}); install Go 1.24 or newer, \
             or set GO to its go binary"
        ),
    }
    println!("cargo:rustc-link-search=native={}", out.display());
    println!("cargo:rustc-link-lib=static=sepkvbadger");
    // The Go runtime's own needs.
    println!("cargo:rustc-link-lib=dylib=pthread");
    println!("cargo:rustc-link-lib=dylib=resolv");
}

//! Generates include/limiter.h and include/v2/limiter.h with cbindgen and
//! sets the soname.
//!
//! The header is committed; `make check-headers` (part of `make test`)
//! fails when the generated copy differs from the committed one.

use std::path::Path;

fn main() {
    let crate_dir = std::env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR");
    println!("cargo:rerun-if-changed=src");
    println!("cargo:rerun-if-changed=cbindgen.toml");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,liblimiter.so.1");

    let config = cbindgen::Config::from_file(Path::new(&crate_dir).join("cbindgen.toml"))
        .expect("cbindgen.toml");
    let header = cbindgen::Builder::new()
        .with_crate(&crate_dir)
        .with_config(config)
        .generate()
        .expect("cbindgen could not generate include/limiter.h");
    header.write_to_file(Path::new(&crate_dir).join("../include/limiter.h"));

    // include/v2/limiter.h: the same functions, returning AccelResult (same
    // values as Result), beside the v2 accelerator.h it includes.
    println!("cargo:rerun-if-changed=cbindgen-v2.toml");
    let config = cbindgen::Config::from_file(Path::new(&crate_dir).join("cbindgen-v2.toml"))
        .expect("cbindgen-v2.toml");
    cbindgen::Builder::new()
        .with_crate(&crate_dir)
        .with_config(config)
        .generate()
        .expect("cbindgen could not generate include/v2/limiter.h")
        .write_to_file(Path::new(&crate_dir).join("../include/v2/limiter.h"));
}

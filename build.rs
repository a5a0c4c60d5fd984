//! Generates the headers with cbindgen and sets the build-tree soname.
//!
//! - include/accelerator.h: ABI.md, from the whole crate (src/abi/v2 is
//!   marked cbindgen:ignore).
//! - include/v2/accelerator.h: ABI-v2.md, from src/abi/v2/{types,exports}.rs.
//!
//! Both are committed; `make check-headers` (part of `make test`) fails when
//! a generated copy differs from the committed one.
//!
//! Soname: `libaccelerator_<vendor>.so` (`libaccelerator_universal.so` for
//! the build with every real vendor), the name of the file the Makefile
//! copies to build/, so a program linked against a build-tree library by
//! `-l` or by path loads that same vendor build. `make install` / `make
//! dist` set the versioned soname `libaccelerator.so.1` on the installed
//! copy (patchelf; packaging/packaging.mk).

use std::path::Path;

const VENDORS: &[&str] = &["stub", "nvidia", "ascend", "amd", "habana"];

fn main() {
    let crate_dir = std::env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR");
    let dir = Path::new(&crate_dir);
    println!("cargo:rerun-if-changed=src");
    println!("cargo:rerun-if-changed=vendors");
    println!("cargo:rerun-if-changed=common/src");
    println!("cargo:rerun-if-changed=cbindgen.toml");
    println!("cargo:rerun-if-changed=cbindgen-v2.toml");
    let feature =
        |v: &str| std::env::var_os(format!("CARGO_FEATURE_{}", v.to_uppercase())).is_some();
    // The universal build names itself, not the vendors it turns on.
    let name = if feature("universal") {
        "universal".to_string()
    } else {
        let vendors: Vec<&str> = VENDORS.iter().copied().filter(|v| feature(v)).collect();
        vendors.join("_")
    };
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libaccelerator_{name}.so");

    let config = cbindgen::Config::from_file(dir.join("cbindgen.toml")).expect("cbindgen.toml");
    cbindgen::Builder::new()
        .with_crate(&crate_dir)
        .with_config(config)
        .generate()
        .expect("cbindgen could not generate include/accelerator.h")
        // write_to_file leaves the file alone when the content is unchanged.
        .write_to_file(dir.join("include/accelerator.h"));

    let config =
        cbindgen::Config::from_file(dir.join("cbindgen-v2.toml")).expect("cbindgen-v2.toml");
    cbindgen::Builder::new()
        .with_src(dir.join("src/abi/v2/types.rs"))
        .with_src(dir.join("src/abi/v2/exports.rs"))
        .with_config(config)
        .generate()
        .expect("cbindgen could not generate include/v2/accelerator.h")
        .write_to_file(dir.join("include/v2/accelerator.h"));
}

//! Host files a container mounts (v2 `AccelGetVendorMountLibs`): the
//! vendor's user-space driver libraries, found beside the library the
//! vendor actually loaded, and the project's CUDA preload library beside
//! this one. Paths come from /proc/self/maps: what is loaded, not a guess.

use crate::vendor::Mount;
use std::path::PathBuf;

/// The project's preload hook (hook/, built to build/libcuda_limiter.so).
pub const PRELOAD_LIB: &str = "libcuda_limiter.so";
/// Where a container finds it.
pub const PRELOAD_GUEST_DIR: &str = "/usr/local/lib/accelerator";

/// Files mapped into this process whose name starts with `prefix`.
#[cfg(any(
    feature = "nvidia",
    feature = "ascend",
    feature = "amd",
    feature = "habana"
))]
fn mapped(prefix: &str) -> Vec<PathBuf> {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
    let mut out: Vec<PathBuf> = Vec::new();
    for line in maps.lines() {
        // address perms offset dev inode path
        let Some(path) = line.split_whitespace().nth(5) else {
            continue;
        };
        let p = std::path::Path::new(path);
        let named = p
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with(prefix));
        if named && !out.iter().any(|o| o == p) {
            out.push(p.to_path_buf());
        }
    }
    out
}

/// The object mapped at `addr` (this library, for the address of one of
/// its functions).
fn mapped_at(addr: usize) -> Option<PathBuf> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines().find_map(|line| {
        let mut parts = line.split_whitespace();
        let (lo, hi) = parts.next()?.split_once('-')?;
        let (lo, hi) = (
            usize::from_str_radix(lo, 16).ok()?,
            usize::from_str_radix(hi, 16).ok()?,
        );
        let path = parts.nth(4)?;
        (lo..hi).contains(&addr).then(|| PathBuf::from(path))
    })
}

/// Every file in the directory of the loaded `loaded_prefix` library whose
/// name starts with one of `prefixes` (symlinks included: a container
/// resolves the same names), mounted at the same path.
#[cfg(any(
    feature = "nvidia",
    feature = "ascend",
    feature = "amd",
    feature = "habana"
))]
pub fn driver_libs(loaded_prefix: &str, prefixes: &[&str]) -> Vec<Mount> {
    let mut dirs: Vec<PathBuf> = mapped(loaded_prefix)
        .iter()
        .filter_map(|p| p.parent().map(std::path::Path::to_path_buf))
        .collect();
    dirs.dedup();
    let mut out = Vec::new();
    for dir in dirs {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        let mut names: Vec<String> = entries
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| prefixes.iter().any(|p| n.starts_with(p)) && n.contains(".so"))
            .collect();
        names.sort();
        for n in names {
            let path = dir.join(&n).to_string_lossy().into_owned();
            out.push(Mount {
                host_path: path.clone(),
                guest_path: path,
            });
        }
    }
    out
}

/// The preload library beside this libaccelerator, when it exists.
pub fn preload_lib() -> Option<Mount> {
    let this = mapped_at(preload_lib as *const () as usize)?;
    let lib = this.parent()?.join(PRELOAD_LIB);
    lib.is_file().then(|| Mount {
        host_path: lib.to_string_lossy().into_owned(),
        guest_path: format!("{PRELOAD_GUEST_DIR}/{PRELOAD_LIB}"),
    })
}

//! How a container reaches a MIG partition: its GPU's device node and the
//! /dev/nvidia-caps nodes that grant access to its GPU instance and
//! compute instance. The driver publishes each capability's device minor in
//! /proc/driver/nvidia/capabilities/gpu<minor>/mig/gi<GI>/access and
//! .../gi<GI>/ci<CI>/access ("DeviceFileMinor: N"); the node is
//! /dev/nvidia-caps/nvidia-cap<N>. `ACCELERATOR_NVIDIA_CAPS_DIR` replaces
//! the /proc directory (tests).
//!
//! Where the driver publishes no such file (caps exposed through
//! /proc/driver/nvidia-caps only, or an older driver), the capability node
//! is left out and a warning logged: the container then relies on the
//! NVIDIA container runtime resolving NVIDIA_VISIBLE_DEVICES.

use super::discovery::Dev;
use crate::log::log_at;
use std::path::{Path, PathBuf};

const CAPS_DIR: &str = "/proc/driver/nvidia/capabilities";
/// The library creates one compute instance per GPU instance, spanning it:
/// NVML numbers the first compute instance of a GPU instance 0.
const CI_ID: u32 = 0;

fn caps_dir() -> PathBuf {
    std::env::var_os("ACCELERATOR_NVIDIA_CAPS_DIR")
        .filter(|v| !v.is_empty())
        .map_or_else(|| PathBuf::from(CAPS_DIR), PathBuf::from)
}

/// The capability minor an access file names.
fn cap_minor(file: &Path) -> Option<u32> {
    let text = std::fs::read_to_string(file).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("DeviceFileMinor:"))
        .and_then(|v| v.trim().parse().ok())
}

fn node(path: &str) -> String {
    format!("{path}={path}")
}

/// "hostPath=guestPath" entries for the MIG device of GPU instance `gi`.
pub(crate) fn device_nodes(dev: &Dev, gi: u32) -> Vec<String> {
    let Some(minor) = dev.minor else {
        log_at!(
            Warn,
            "device {}: NVML gives no minor number: the MIG partition lists no device nodes",
            dev.info.uuid
        );
        return Vec::new();
    };
    let mut out = vec![node(&dev.info.device_node)];
    let gi_dir = caps_dir().join(format!("gpu{minor}/mig/gi{gi}"));
    for file in [
        gi_dir.join("access"),
        gi_dir.join(format!("ci{CI_ID}/access")),
    ] {
        match cap_minor(&file) {
            Some(cap) => out.push(node(&format!("/dev/nvidia-caps/nvidia-cap{cap}"))),
            None => log_at!(
                Warn,
                "{}: no capability minor; the MIG partition's nvidia-caps node is left out",
                file.display()
            ),
        }
    }
    out
}

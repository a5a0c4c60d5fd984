//! Which vendor serves the calls, chosen once on first use.
//!
//! `ACCELERATOR_VENDOR` names one explicitly. Otherwise the first real
//! vendor compiled in whose driver loads and reports devices wins (nvidia,
//! then ascend, then amd). The stub is used only when it is the only vendor compiled
//! or is named: a production build never silently reports simulated devices.

use crate::log::log_at;
use crate::vendor::Vendor;
use accel_common::{Error, Res};
use std::sync::OnceLock;

type Opener = fn() -> Res<Box<dyn Vendor>>;

/// Real vendors in order of preference.
const REAL: &[(&str, Opener)] = &[
    #[cfg(feature = "nvidia")]
    ("nvidia", crate::nvidia::open),
    #[cfg(feature = "ascend")]
    ("ascend", crate::ascend::open),
    #[cfg(feature = "amd")]
    ("amd", crate::amd::open),
];

#[cfg(feature = "stub")]
const STUB: Option<Opener> = Some(crate::stub::open);
#[cfg(not(feature = "stub"))]
const STUB: Option<Opener> = None;

static ACTIVE: OnceLock<Res<Box<dyn Vendor>>> = OnceLock::new();

/// The active vendor, or the configuration error that prevents one.
pub fn vendor() -> Res<&'static dyn Vendor> {
    match ACTIVE.get_or_init(choose) {
        Ok(v) => Ok(v.as_ref()),
        Err(e) => Err(e.clone()),
    }
}

fn compiled() -> Vec<&'static str> {
    let mut names: Vec<&str> = REAL.iter().map(|(n, _)| *n).collect();
    if STUB.is_some() {
        names.push("stub");
    }
    names
}

fn choose() -> Res<Box<dyn Vendor>> {
    if let Ok(name) = std::env::var("ACCELERATOR_VENDOR") {
        if !name.is_empty() {
            return open_named(&name);
        }
    }
    if REAL.is_empty() {
        let open = STUB.ok_or_else(|| Error::Internal("no vendor compiled in".into()))?;
        return open();
    }
    let mut fallback = None;
    for (name, open) in REAL {
        match open() {
            Ok(v) => match v.devices() {
                Ok(d) if !d.is_empty() => return Ok(v),
                Ok(_) => {
                    log_at!(Info, "vendor {name}: driver loaded but reports no devices");
                    fallback.get_or_insert(v);
                }
                Err(e) => log_at!(Warn, "vendor {name}: {e}"),
            },
            Err(e) => log_at!(Warn, "vendor {name} unavailable: {e}"),
        }
    }
    Ok(fallback.unwrap_or_else(|| Box::new(Absent(REAL[0].0))))
}

fn open_named(name: &str) -> Res<Box<dyn Vendor>> {
    if let Some(&(real, open)) = REAL.iter().find(|(n, _)| *n == name) {
        return Ok(open().unwrap_or_else(|e| {
            log_at!(Warn, "vendor {real} unavailable: {e}");
            Box::new(Absent(real))
        }));
    }
    match (name, STUB) {
        ("stub", Some(open)) => open(),
        _ => Err(Error::InvalidParam(format!(
            "ACCELERATOR_VENDOR={name:?} is not compiled into this library (available: {})",
            compiled().join(", ")
        ))),
    }
}

/// Stands in for a vendor whose driver is missing: no devices, so every
/// device-addressed call is NOT_FOUND and nothing is invented.
struct Absent(&'static str);

impl Vendor for Absent {
    fn name(&self) -> &'static str {
        self.0
    }
    fn devices(&self) -> Res<Vec<crate::vendor::DeviceInfo>> {
        Ok(Vec::new())
    }
    fn related_devices(&self, index: usize) -> Res<Vec<crate::vendor::Link>> {
        Err(no_device(index))
    }
    fn partition_templates(&self, index: usize) -> Res<Vec<crate::vendor::Template>> {
        Err(no_device(index))
    }
    fn topology(&self, indices: &[usize]) -> Res<crate::vendor::Topology> {
        Err(no_device(indices.first().copied().unwrap_or(0)))
    }
    fn assign_partition(&self, _: &str, uuid: &str) -> Res<crate::vendor::Partition> {
        Err(no_uuid(uuid))
    }
    fn remove_partition(&self, _: &str, uuid: &str) -> Res<()> {
        Err(no_uuid(uuid))
    }
    fn snapshot(&self, _: &[i32], _: &str) -> Res<()> {
        Err(Error::NotSupported(format!("{} driver not loaded", self.0)))
    }
    fn resume(&self, _: &[i32], _: &str) -> Res<()> {
        Err(Error::NotSupported(format!("{} driver not loaded", self.0)))
    }
    fn process_compute(
        &self,
        _: &crate::vendor::ProcessQuery,
    ) -> Res<Vec<crate::vendor::ProcessCompute>> {
        Ok(Vec::new())
    }
    fn process_memory(
        &self,
        _: &crate::vendor::ProcessQuery,
    ) -> Res<Vec<crate::vendor::ProcessMemory>> {
        Ok(Vec::new())
    }
    fn metrics(&self, uuid: &str) -> Res<crate::vendor::Metrics> {
        Err(no_uuid(uuid))
    }
    fn extended_metrics(&self, uuid: &str) -> Res<crate::vendor::ExtendedMetrics> {
        Err(no_uuid(uuid))
    }
    fn partition_metrics(&self, uuid: &str) -> Res<crate::vendor::Metrics> {
        Err(no_uuid(uuid))
    }
    fn mount_libs(&self) -> Res<Vec<crate::vendor::Mount>> {
        Ok(Vec::new())
    }
}

fn no_device(index: usize) -> Error {
    Error::NotFound(format!(
        "device index {index}: no devices (driver not loaded)"
    ))
}

fn no_uuid(uuid: &str) -> Error {
    Error::NotFound(format!("device {uuid:?}: no devices (driver not loaded)"))
}

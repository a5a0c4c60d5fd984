//! The Habana vendor: Intel Gaudi accelerators managed through HLML
//! (libhlml.so), loaded at run time. docs/habana.md lists the HLML
//! functions used, where each ABI field comes from, the units converted,
//! the error mapping and what HLML cannot tell.
//!
//! `hlml` is the only module with `unsafe`; `discovery` describes the
//! devices once, `metrics` reads them.

mod discovery;
mod error;
mod hlml;
mod layout;
mod metrics;

/// `DRIVER` serializes HLML calls (nothing takes `PARTITION`: Gaudi has
/// no partitions).
mod locks {
    crate::fork_lock::driver_locks!();
}

use crate::device_table::Devices;
use crate::log::log_at;
use crate::vendor::*;
use accel_common::{Error, Res};
use discovery::Dev;

/// Load libhlml.so (once), initialise it and describe the devices. A
/// missing library, a failing `hlml_init`, an unknown release or a missing
/// required symbol is an error here, which the selector logs and turns
/// into 0 devices with the reason.
pub fn open() -> Res<Box<dyn Vendor>> {
    locks::install_fork_handlers();
    let hlml = hlml::shared()?;
    hlml.syms.log_missing("habana");
    let devices = Devices::new(discovery::discover(hlml).inspect_err(|_| hlml.shut_down())?);
    log_at!(
        Debug,
        "habana: {} (HLML {}) loaded, {} devices",
        hlml.syms.path,
        hlml.version,
        devices.len()
    );
    Ok(Box::new(Habana { hlml, devices }))
}

struct Habana {
    hlml: &'static hlml::Hlml,
    devices: Devices<Dev>,
}

const NO_PARTITIONS: &str = "Gaudi has no partitions: HLML offers none; share a Gaudi by \
     time (the limiter's records) or give whole devices";
const NO_SNAPSHOT: &str = "HLML has no checkpoint/restore of device state";

impl Vendor for Habana {
    fn name(&self) -> &'static str {
        "habana"
    }

    fn devices(&self) -> Res<Vec<DeviceInfo>> {
        Ok(self.devices.infos())
    }

    /// HLML names no peer of a device's scale-up (RoCE) ports: no link is
    /// known.
    fn related_devices(&self, index: usize) -> Res<Vec<Link>> {
        self.devices.at(index).map(|_| Vec::new())
    }

    fn partition_templates(&self, index: usize) -> Res<Vec<Template>> {
        self.devices.at(index).map(|_| Vec::new())
    }

    /// Each device's NUMA node; the links between them are unknown.
    fn topology(&self, indices: &[usize]) -> Res<Topology> {
        let (devices, pairs) = self.devices.topology(indices, |_, _| Ok(Vec::new()))?;
        Ok(Topology {
            devices,
            nvlink_bandwidth_mbps: 0,
            ib_nic_count: 0,
            topology_type: if pairs == 0 { "Single" } else { "Unknown" }.into(),
        })
    }

    fn assign_partition(&self, _template_id: &str, device_uuid: &str) -> Res<Partition> {
        self.devices.by_uuid(device_uuid)?;
        Err(Error::NotSupported(NO_PARTITIONS.into()))
    }

    fn remove_partition(&self, _template_id: &str, device_uuid: &str) -> Res<()> {
        self.devices.by_uuid(device_uuid)?;
        Err(Error::NotSupported(NO_PARTITIONS.into()))
    }

    fn snapshot(&self, _pids: &[i32], _device_uuid: &str) -> Res<()> {
        Err(Error::NotSupported(NO_SNAPSHOT.into()))
    }

    fn resume(&self, _pids: &[i32], _device_uuid: &str) -> Res<()> {
        Err(Error::NotSupported(NO_SNAPSHOT.into()))
    }

    /// HLML lists no processes: only the limiter's records.
    fn process_compute(&self, query: &ProcessQuery) -> Res<Vec<ProcessCompute>> {
        crate::usage::merge_compute(Vec::new(), &self.devices.infos(), query)
    }

    fn process_memory(&self, query: &ProcessQuery) -> Res<Vec<ProcessMemory>> {
        crate::usage::merge_memory(Vec::new(), &self.devices.infos(), query)
    }

    fn metrics(&self, device_uuid: &str) -> Res<Metrics> {
        metrics::metrics(self.hlml, self.devices.by_uuid(device_uuid)?)
    }

    /// HLML gives no per-link rates (and no unit for its PCIe counters).
    fn extended_metrics(&self, device_uuid: &str) -> Res<ExtendedMetrics> {
        let dev = self.devices.by_uuid(device_uuid)?;
        Ok(ExtendedMetrics {
            device_uuid: dev.info.uuid.clone(),
            ..ExtendedMetrics::default()
        })
    }

    fn partition_metrics(&self, uuid: &str) -> Res<Metrics> {
        Err(Error::NotFound(format!(
            "{uuid:?}: Gaudi has no partitions"
        )))
    }

    /// The HLML library a container's tools (hl-smi) load.
    fn mount_libs(&self) -> Res<Vec<Mount>> {
        Ok(crate::hostfiles::driver_libs("libhlml.so", &["libhlml.so"]))
    }
}

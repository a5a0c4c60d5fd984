//! The AMD vendor: Instinct GPUs managed through AMD SMI (libamd_smi.so),
//! loaded at run time. docs/amd.md lists the AMD SMI functions used, where
//! each ABI field comes from, the units converted, the error mapping and
//! what is not supported and why.
//!
//! `smi` is the only module with `unsafe`; `discovery` describes the
//! devices once, `partition` changes their partition modes, `metrics`
//! reads them.

mod discovery;
mod error;
mod layout;
mod metrics;
mod partition;
mod smi;

/// `DRIVER` serializes AMD SMI calls, `PARTITION` a mode change (an idle
/// check and the change: the driver arbitrates between processes).
mod locks {
    crate::fork_lock::driver_locks!();
}

use crate::device_table::{links_of, Devices};
use crate::log::log_at;
use crate::vendor::*;
use accel_common::{Error, Res};
use discovery::Dev;

/// Load libamd_smi.so (once), initialise it for GPUs and describe them. A
/// missing library, a failing `amdsmi_init` or a missing required symbol
/// is an error here, which the selector logs and turns into 0 devices.
pub fn open() -> Res<Box<dyn Vendor>> {
    locks::install_fork_handlers();
    let smi = smi::shared()?;
    smi.syms.log_missing("amd");
    let devices = Devices::new(discovery::discover(smi).inspect_err(|_| smi.shut_down())?);
    log_at!(
        Debug,
        "amd: {} (AMD SMI {}) loaded, {} GPUs",
        smi.syms.path,
        smi.version,
        devices.len()
    );
    Ok(Box::new(Amd { smi, devices }))
}

struct Amd {
    smi: &'static smi::Smi,
    devices: Devices<Dev>,
}

/// Why there is no snapshot (docs/amd.md: CRIU's amdgpu plugin).
const NO_SNAPSHOT: &str = "AMD SMI has no checkpoint/restore of GPU process state; ROCm \
     checkpoints whole processes with CRIU and its amdgpu plugin, driven from outside the process";

impl Vendor for Amd {
    fn name(&self) -> &'static str {
        "amd"
    }

    fn devices(&self) -> Res<Vec<DeviceInfo>> {
        Ok(self.devices.infos())
    }

    fn related_devices(&self, index: usize) -> Res<Vec<Link>> {
        let dev = self.devices.at(index)?;
        metrics::links(self.smi, dev, &self.devices.all())
    }

    fn partition_templates(&self, index: usize) -> Res<Vec<Template>> {
        Ok(partition::templates(self.devices.at(index)?))
    }

    fn topology(&self, indices: &[usize]) -> Res<Topology> {
        let (devices, pairs) = self
            .devices
            .topology(indices, |dev, chosen| metrics::links(self.smi, dev, chosen))?;
        let links = links_of(&devices);
        let topology_type = if pairs == 0 {
            "Single"
        } else if links.len() == pairs && links.iter().all(|l| l.connection_type == "XGMI") {
            "XGMI"
        } else if links.len() == pairs && links.iter().all(|l| l.connection_type == "PCIe") {
            "PCIe"
        } else {
            "System"
        };
        Ok(Topology {
            // The ABI's fabric bandwidth field: XGMI here.
            nvlink_bandwidth_mbps: links
                .iter()
                .filter(|l| l.connection_type == "XGMI")
                .map(|l| l.bandwidth_mbps)
                .max()
                .unwrap_or(0),
            devices,
            ib_nic_count: 0,
            topology_type: topology_type.into(),
        })
    }

    fn assign_partition(&self, template_id: &str, device_uuid: &str) -> Res<Partition> {
        let dev = self.devices.by_uuid(device_uuid)?;
        let _g = locks::PARTITION.lock();
        partition::assign(self.smi, dev, template_id)
    }

    fn remove_partition(&self, template_id: &str, device_uuid: &str) -> Res<()> {
        let dev = self.devices.by_uuid(device_uuid)?;
        let _g = locks::PARTITION.lock();
        partition::remove(self.smi, dev, template_id)
    }

    fn snapshot(&self, _pids: &[i32], _device_uuid: &str) -> Res<()> {
        Err(Error::NotSupported(NO_SNAPSHOT.into()))
    }

    fn resume(&self, _pids: &[i32], _device_uuid: &str) -> Res<()> {
        Err(Error::NotSupported(NO_SNAPSHOT.into()))
    }

    fn process_compute(&self, query: &ProcessQuery) -> Res<Vec<ProcessCompute>> {
        let driver = metrics::driver_compute(self.smi, &self.devices.covered(query));
        crate::usage::merge_compute(driver, &self.devices.infos(), query)
    }

    fn process_memory(&self, query: &ProcessQuery) -> Res<Vec<ProcessMemory>> {
        let driver = metrics::driver_memory(self.smi, &self.devices.covered(query));
        crate::usage::merge_memory(driver, &self.devices.infos(), query)
    }

    fn metrics(&self, device_uuid: &str) -> Res<Metrics> {
        metrics::metrics(self.smi, self.devices.by_uuid(device_uuid)?)
    }

    fn extended_metrics(&self, device_uuid: &str) -> Res<ExtendedMetrics> {
        metrics::extended(self.smi, self.devices.by_uuid(device_uuid)?)
    }

    /// The AMD SMI calls used report per device, not per compute partition.
    fn partition_metrics(&self, uuid: &str) -> Res<Metrics> {
        Err(Error::NotFound(format!(
            "{uuid:?}: AMD SMI reports no per-partition figures here"
        )))
    }

    /// The ROCm user-space libraries beside the libamd_smi.so in use.
    fn mount_libs(&self) -> Res<Vec<Mount>> {
        Ok(crate::hostfiles::driver_libs(
            "libamd_smi.so",
            &["libamd_smi.so", "libdrm_amdgpu.so", "libdrm.so"],
        ))
    }
}

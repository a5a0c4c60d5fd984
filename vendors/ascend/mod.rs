//! The Huawei Ascend vendor: NPUs managed through DCMI (libdcmi.so), loaded
//! at run time. docs/ascend.md lists the DCMI functions used, the units
//! converted, the error mapping and what is unverified without hardware.
//!
//! `dcmi` is the only module with `unsafe`; `discovery` describes the
//! devices once, `vnpu` partitions them, `metrics` reads them; `chips`
//! holds the chip families' vNPU tables both of the first two read.

mod chips;
mod dcmi;
mod discovery;
mod error;
mod metrics;
mod vnpu;

/// `DRIVER` serializes DCMI calls, `PARTITION` a vNPU change (a capacity
/// check and the create: the driver arbitrates between processes).
mod locks {
    crate::fork_lock::driver_locks!();
}

use crate::device_table::{links_of, Devices};
use crate::log::log_at;
use crate::vendor::*;
use accel_common::{Error, Res};
use discovery::Dev;

/// Load libdcmi.so (once), initialise it and describe its devices. A
/// missing library, a failing `dcmi_init` or a missing required symbol is
/// an error here, which the selector logs and turns into 0 devices.
pub fn open() -> Res<Box<dyn Vendor>> {
    locks::install_fork_handlers();
    let dcmi = dcmi::shared()?;
    dcmi.syms.log_missing("ascend");
    let devices = Devices::new(discovery::discover(dcmi)?);
    log_at!(
        Debug,
        "ascend: {} loaded, {} devices",
        dcmi.syms.path,
        devices.len()
    );
    Ok(Box::new(Ascend { dcmi, devices }))
}

struct Ascend {
    dcmi: &'static dcmi::Dcmi,
    devices: Devices<Dev>,
}

impl Vendor for Ascend {
    fn name(&self) -> &'static str {
        "ascend"
    }

    fn devices(&self) -> Res<Vec<DeviceInfo>> {
        Ok(self.devices.infos())
    }

    fn related_devices(&self, index: usize) -> Res<Vec<Link>> {
        let dev = self.devices.at(index)?;
        metrics::links(self.dcmi, dev, &self.devices.all())
    }

    fn partition_templates(&self, index: usize) -> Res<Vec<Template>> {
        Ok(vnpu::templates(self.devices.at(index)?))
    }

    fn topology(&self, indices: &[usize]) -> Res<Topology> {
        let (devices, pairs) = self.devices.topology(indices, |dev, chosen| {
            metrics::links(self.dcmi, dev, chosen)
        })?;
        let links = links_of(&devices);
        let topology_type = if pairs > 0 && links.len() == pairs {
            if links.iter().all(|l| l.connection_type == "HCCS") {
                "HCCS"
            } else {
                "System"
            }
        } else if pairs == 0 {
            "Single"
        } else {
            "Unknown"
        };
        Ok(Topology {
            devices,
            nvlink_bandwidth_mbps: 0,
            ib_nic_count: 0,
            topology_type: topology_type.into(),
        })
    }

    fn assign_partition(&self, template_id: &str, device_uuid: &str) -> Res<Partition> {
        let dev = self.devices.by_uuid(device_uuid)?;
        let _g = locks::PARTITION.lock();
        vnpu::assign(self.dcmi, dev, template_id)
    }

    fn remove_partition(&self, template_id: &str, device_uuid: &str) -> Res<()> {
        let dev = self.devices.by_uuid(device_uuid)?;
        let _g = locks::PARTITION.lock();
        vnpu::remove(self.dcmi, dev, template_id)
    }

    fn snapshot(&self, _pids: &[i32], _device_uuid: &str) -> Res<()> {
        Err(Error::NotSupported(
            "DCMI has no checkpoint/restore of NPU process state".into(),
        ))
    }

    fn resume(&self, _pids: &[i32], _device_uuid: &str) -> Res<()> {
        Err(Error::NotSupported(
            "DCMI has no checkpoint/restore of NPU process state".into(),
        ))
    }

    /// DCMI reports no per-process AI core use: only the processes the
    /// limiter recorded are listed, with nothing invented.
    fn process_compute(&self, query: &ProcessQuery) -> Res<Vec<ProcessCompute>> {
        crate::usage::merge_compute(Vec::new(), &self.devices.infos(), query)
    }

    fn process_memory(&self, query: &ProcessQuery) -> Res<Vec<ProcessMemory>> {
        let mut out = Vec::new();
        for dev in self.devices.covered(query) {
            out.extend(metrics::driver_processes(self.dcmi, dev)?);
        }
        crate::usage::merge_memory(out, &self.devices.infos(), query)
    }

    fn metrics(&self, device_uuid: &str) -> Res<Metrics> {
        metrics::metrics(self.dcmi, self.devices.by_uuid(device_uuid)?)
    }

    fn extended_metrics(&self, device_uuid: &str) -> Res<ExtendedMetrics> {
        Ok(metrics::extended(self.devices.by_uuid(device_uuid)?))
    }

    /// DCMI reports usage per chip, not per vNPU.
    fn partition_metrics(&self, uuid: &str) -> Res<Metrics> {
        Err(Error::NotFound(format!(
            "{uuid:?}: DCMI reports no per-vNPU figures"
        )))
    }

    /// The driver's user-space libraries beside the libdcmi.so in use.
    fn mount_libs(&self) -> Res<Vec<Mount>> {
        Ok(crate::hostfiles::driver_libs(
            "libdcmi.so",
            &[
                "libdcmi.so",
                "libascend_hal.so",
                "libc_sec.so",
                "libdrvdsmi_host.so",
            ],
        ))
    }
}

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

use crate::fork_lock::{self, ForkMutex};
use crate::log::log_at;
use crate::vendor::*;
use accel_common::{Error, Res};
use discovery::Dev;
use std::sync::atomic::AtomicBool;

/// Load libdcmi.so (once), initialise it and describe its devices. A
/// missing library, a failing `dcmi_init` or a missing required symbol is
/// an error here, which the selector logs and turns into 0 devices.
pub fn open() -> Res<Box<dyn Vendor>> {
    static FORK_HANDLERS: AtomicBool = AtomicBool::new(false);
    fork_lock::install(hold_for_fork, &FORK_HANDLERS);
    let dcmi = dcmi::shared()?;
    if !dcmi.missing.is_empty() {
        log_at!(
            Info,
            "ascend: {} lacks optional functions {}; what needs them is reported unsupported",
            dcmi.path,
            dcmi.missing.join(", ")
        );
    }
    let devices = discovery::discover(dcmi)?;
    log_at!(
        Debug,
        "ascend: {} loaded, {} devices",
        dcmi.path,
        devices.len()
    );
    Ok(Box::new(Ascend { dcmi, devices }))
}

struct Ascend {
    dcmi: &'static dcmi::Dcmi,
    devices: Vec<Dev>,
}

/// Serializes this process's capacity check + create (the driver
/// arbitrates between processes).
static PARTITION: ForkMutex<()> = ForkMutex::new(());

/// Before `fork()`: hold this vendor's locks, outer first (a partition
/// call takes the DCMI lock inside [`PARTITION`]).
extern "C" fn hold_for_fork() {
    PARTITION.hold();
    dcmi::LOCK.hold();
}

impl Ascend {
    fn at(&self, index: usize) -> Res<&Dev> {
        self.devices
            .get(index)
            .ok_or_else(|| Error::NotFound(format!("device index {index}")))
    }

    fn infos(&self) -> Vec<DeviceInfo> {
        self.devices.iter().map(|d| d.info.clone()).collect()
    }

    fn by_uuid(&self, uuid: &str) -> Res<&Dev> {
        self.devices
            .iter()
            .find(|d| d.info.uuid == uuid)
            .ok_or_else(|| Error::NotFound(format!("device {uuid:?}")))
    }
}

impl Vendor for Ascend {
    fn name(&self) -> &'static str {
        "ascend"
    }

    fn devices(&self) -> Res<Vec<DeviceInfo>> {
        Ok(self.devices.iter().map(|d| d.info.clone()).collect())
    }

    fn related_devices(&self, index: usize) -> Res<Vec<Link>> {
        let dev = self.at(index)?;
        let peers: Vec<&Dev> = self.devices.iter().collect();
        metrics::links(self.dcmi, dev, &peers)
    }

    fn partition_templates(&self, index: usize) -> Res<Vec<Template>> {
        Ok(vnpu::templates(self.at(index)?))
    }

    fn topology(&self, indices: &[usize]) -> Res<Topology> {
        let chosen: Vec<&Dev> = indices.iter().map(|&i| self.at(i)).collect::<Res<_>>()?;
        let mut devices = Vec::with_capacity(chosen.len());
        for dev in &chosen {
            devices.push(DeviceTopology {
                uuid: dev.info.uuid.clone(),
                numa_node: dev.info.numa_node,
                connections: metrics::links(self.dcmi, dev, &chosen)?,
            });
        }
        let pairs = chosen.len() * chosen.len().saturating_sub(1);
        let links: Vec<&Link> = devices.iter().flat_map(|d| &d.connections).collect();
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
        let dev = self.by_uuid(device_uuid)?;
        let _g = PARTITION.lock();
        vnpu::assign(self.dcmi, dev, template_id)
    }

    fn remove_partition(&self, template_id: &str, device_uuid: &str) -> Res<()> {
        let dev = self.by_uuid(device_uuid)?;
        let _g = PARTITION.lock();
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
        crate::usage::merge_compute(Vec::new(), &self.infos(), query)
    }

    fn process_memory(&self, query: &ProcessQuery) -> Res<Vec<ProcessMemory>> {
        let mut out = Vec::new();
        for dev in self
            .devices
            .iter()
            .filter(|d| query.covers_device(&d.info.uuid))
        {
            out.extend(metrics::driver_processes(self.dcmi, dev)?);
        }
        crate::usage::merge_memory(out, &self.infos(), query)
    }

    fn metrics(&self, device_uuid: &str) -> Res<Metrics> {
        metrics::metrics(self.dcmi, self.by_uuid(device_uuid)?)
    }

    fn extended_metrics(&self, device_uuid: &str) -> Res<ExtendedMetrics> {
        Ok(metrics::extended(self.by_uuid(device_uuid)?))
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

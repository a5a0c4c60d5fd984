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

use crate::fork_lock::{self, ForkMutex};
use crate::log::log_at;
use crate::vendor::*;
use accel_common::{Error, Res};
use discovery::Dev;
use std::sync::atomic::AtomicBool;

/// Load libamd_smi.so (once), initialise it for GPUs and describe them. A
/// missing library, a failing `amdsmi_init` or a missing required symbol
/// is an error here, which the selector logs and turns into 0 devices.
pub fn open() -> Res<Box<dyn Vendor>> {
    static FORK_HANDLERS: AtomicBool = AtomicBool::new(false);
    fork_lock::install(hold_for_fork, &FORK_HANDLERS);
    let smi = smi::shared()?;
    if !smi.missing.is_empty() {
        log_at!(
            Info,
            "amd: {} lacks optional functions {}; what needs them is reported unsupported",
            smi.path,
            smi.missing.join(", ")
        );
    }
    let devices = discovery::discover(smi).inspect_err(|_| smi.shut_down())?;
    log_at!(
        Debug,
        "amd: {} (AMD SMI {}) loaded, {} GPUs",
        smi.path,
        smi.version,
        devices.len()
    );
    Ok(Box::new(Amd { smi, devices }))
}

struct Amd {
    smi: &'static smi::Smi,
    devices: Vec<Dev>,
}

/// Serializes this process's idle check + mode change (the driver
/// arbitrates between processes).
static PARTITION: ForkMutex<()> = ForkMutex::new(());

/// Before `fork()`: hold this vendor's locks, outer first (a mode change
/// calls AMD SMI, whose lock it takes, inside [`PARTITION`]), so a child
/// forked while another thread is inside starts with both free.
extern "C" fn hold_for_fork() {
    PARTITION.hold();
    smi::LOCK.hold();
}

impl Amd {
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

    fn covered(&self, query: &ProcessQuery) -> Vec<&Dev> {
        self.devices
            .iter()
            .filter(|d| query.covers_device(&d.info.uuid))
            .collect()
    }
}

/// Why there is no snapshot (docs/amd.md: CRIU's amdgpu plugin).
const NO_SNAPSHOT: &str = "AMD SMI has no checkpoint/restore of GPU process state; ROCm \
     checkpoints whole processes with CRIU and its amdgpu plugin, driven from outside the process";

impl Vendor for Amd {
    fn name(&self) -> &'static str {
        "amd"
    }

    fn devices(&self) -> Res<Vec<DeviceInfo>> {
        Ok(self.infos())
    }

    fn related_devices(&self, index: usize) -> Res<Vec<Link>> {
        let dev = self.at(index)?;
        let peers: Vec<&Dev> = self.devices.iter().collect();
        metrics::links(self.smi, dev, &peers)
    }

    fn partition_templates(&self, index: usize) -> Res<Vec<Template>> {
        Ok(partition::templates(self.at(index)?))
    }

    fn topology(&self, indices: &[usize]) -> Res<Topology> {
        let chosen: Vec<&Dev> = indices.iter().map(|&i| self.at(i)).collect::<Res<_>>()?;
        let mut devices = Vec::with_capacity(chosen.len());
        for dev in &chosen {
            devices.push(DeviceTopology {
                uuid: dev.info.uuid.clone(),
                numa_node: dev.info.numa_node,
                connections: metrics::links(self.smi, dev, &chosen)?,
            });
        }
        let pairs = chosen.len() * chosen.len().saturating_sub(1);
        let links: Vec<&Link> = devices.iter().flat_map(|d| &d.connections).collect();
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
        let dev = self.by_uuid(device_uuid)?;
        let _g = PARTITION.lock();
        partition::assign(self.smi, dev, template_id)
    }

    fn remove_partition(&self, template_id: &str, device_uuid: &str) -> Res<()> {
        let dev = self.by_uuid(device_uuid)?;
        let _g = PARTITION.lock();
        partition::remove(self.smi, dev, template_id)
    }

    fn snapshot(&self, _pids: &[i32], _device_uuid: &str) -> Res<()> {
        Err(Error::NotSupported(NO_SNAPSHOT.into()))
    }

    fn resume(&self, _pids: &[i32], _device_uuid: &str) -> Res<()> {
        Err(Error::NotSupported(NO_SNAPSHOT.into()))
    }

    fn process_compute(&self, query: &ProcessQuery) -> Res<Vec<ProcessCompute>> {
        let driver = metrics::driver_compute(self.smi, &self.covered(query));
        crate::usage::merge_compute(driver, &self.infos(), query)
    }

    fn process_memory(&self, query: &ProcessQuery) -> Res<Vec<ProcessMemory>> {
        let driver = metrics::driver_memory(self.smi, &self.covered(query));
        crate::usage::merge_memory(driver, &self.infos(), query)
    }

    fn metrics(&self, device_uuid: &str) -> Res<Metrics> {
        metrics::metrics(self.smi, self.by_uuid(device_uuid)?)
    }

    fn extended_metrics(&self, device_uuid: &str) -> Res<ExtendedMetrics> {
        metrics::extended(self.smi, self.by_uuid(device_uuid)?)
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

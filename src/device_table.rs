//! The devices a vendor discovered, looked up the ways the ABI asks for
//! them: by index, by UUID, by a process query; the per-device part of a
//! topology; a process's memory on a device. Each vendor's device type carries its `DeviceInfo` and what
//! its driver needs to address it (a handle, a card and chip number).

use crate::vendor::{DeviceInfo, DeviceTopology, Link};
#[cfg(any(feature = "ascend", feature = "amd"))]
use crate::vendor::{ProcessMemory, ProcessQuery};
use accel_common::{Error, Res};

/// A discovered device: its description, plus the vendor's own fields.
pub trait Described {
    fn info(&self) -> &DeviceInfo;
}

pub struct Devices<D>(Vec<D>);

impl<D: Described> Devices<D> {
    pub fn new(devices: Vec<D>) -> Self {
        Devices(devices)
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    #[cfg(any(feature = "ascend", feature = "amd"))]
    pub fn all(&self) -> Vec<&D> {
        self.0.iter().collect()
    }

    pub fn at(&self, index: usize) -> Res<&D> {
        self.0
            .get(index)
            .ok_or_else(|| Error::NotFound(format!("device index {index}")))
    }

    pub fn by_uuid(&self, uuid: &str) -> Res<&D> {
        self.0
            .iter()
            .find(|d| d.info().uuid == uuid)
            .ok_or_else(|| Error::NotFound(format!("device {uuid:?}")))
    }

    pub fn infos(&self) -> Vec<DeviceInfo> {
        self.0.iter().map(|d| d.info().clone()).collect()
    }

    /// The devices a process query covers.
    #[cfg(any(feature = "ascend", feature = "amd"))]
    pub fn covered(&self, query: &ProcessQuery) -> Vec<&D> {
        self.0
            .iter()
            .filter(|d| query.covers_device(&d.info().uuid))
            .collect()
    }

    /// The devices at `indices`, each with its links to the others chosen
    /// (`links(device, chosen)`), and how many ordered pairs they make.
    pub fn topology(
        &self,
        indices: &[usize],
        links: impl Fn(&D, &[&D]) -> Res<Vec<Link>>,
    ) -> Res<(Vec<DeviceTopology>, usize)> {
        let chosen: Vec<&D> = indices.iter().map(|&i| self.at(i)).collect::<Res<_>>()?;
        let mut devices = Vec::with_capacity(chosen.len());
        for dev in &chosen {
            devices.push(DeviceTopology {
                uuid: dev.info().uuid.clone(),
                numa_node: dev.info().numa_node,
                connections: links(dev, &chosen)?,
            });
        }
        let pairs = chosen.len() * chosen.len().saturating_sub(1);
        Ok((devices, pairs))
    }
}

/// Every link of a topology's devices.
#[cfg(any(feature = "ascend", feature = "amd"))]
pub fn links_of(devices: &[DeviceTopology]) -> Vec<&Link> {
    devices.iter().flat_map(|d| &d.connections).collect()
}

/// A process's device memory as the driver reports it (`used` bytes), with
/// its share of the device's memory.
#[cfg(any(feature = "ascend", feature = "amd"))]
pub fn process_memory(info: &DeviceInfo, pid: impl ToString, used: u64) -> ProcessMemory {
    let total = info.total_memory_bytes;
    ProcessMemory {
        process_id: pid.to_string(),
        device_uuid: info.uuid.clone(),
        used_bytes: used,
        reserved_bytes: 0,
        utilization_percent: if total > 0 {
            (used as f64 * 100.0 / total as f64).min(100.0)
        } else {
            0.0
        },
    }
}

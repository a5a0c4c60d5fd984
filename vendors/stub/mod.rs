//! The stub vendor: a faithful simulator of ABI.md's reference dataset.
//!
//! `ACCELERATOR_STUB_DEVICES` (1–64, default 4) devices `stub-device-<i>` sit
//! on one simulated board, every pair joined by NVLink. Partitions and
//! tracked processes live in the state directory (see `state.rs`), so every
//! process on the node and a restarted hypervisor see the same simulation.
//! Metrics are deterministic functions of the device and its simulated load
//! (partitions, hard limits, tracked processes): the same state gives the
//! same numbers in every call and in both calling styles.

mod model;
mod state;

use crate::vendor::*;
use accel_common::{Error, Res};
use model::*;

pub fn open() -> Res<Box<dyn Vendor>> {
    Ok(Box::new(Stub::from_env()?))
}

struct Stub {
    devices: Vec<DeviceInfo>,
}

/// (process id, device index, running, bytes recorded by the limiter).
type Covered = (String, usize, bool, Option<u64>);

impl Stub {
    fn from_env() -> Res<Stub> {
        let count = match std::env::var("ACCELERATOR_STUB_DEVICES") {
            Err(_) => DEFAULT_DEVICES,
            Ok(v) => v
                .parse::<usize>()
                .ok()
                .filter(|n| (1..=MAX_DEVICES).contains(n))
                .ok_or_else(|| {
                    Error::InvalidParam(format!(
                        "ACCELERATOR_STUB_DEVICES={v:?}: expected a whole number from 1 to {MAX_DEVICES}"
                    ))
                })?,
        };
        Ok(Stub {
            devices: (0..count).map(|i| device(i, count)).collect(),
        })
    }

    fn index_of(&self, uuid: &str) -> Res<usize> {
        self.devices
            .iter()
            .position(|d| d.uuid == uuid)
            .ok_or_else(|| Error::NotFound(format!("device {uuid:?}")))
    }

    fn check_index(&self, index: usize) -> Res<()> {
        if index < self.devices.len() {
            Ok(())
        } else {
            Err(Error::NotFound(format!("device index {index}")))
        }
    }

    fn links(&self, index: usize) -> Vec<Link> {
        (0..self.devices.len())
            .filter(|&j| j != index)
            .map(|j| nvlink(&self.devices[j].uuid))
            .collect()
    }

    /// Where a tracked process runs: the device it was given, else one
    /// chosen from its pid.
    fn home_of(&self, p: &state::Process) -> usize {
        self.index_of(&p.device_uuid)
            .unwrap_or(p.pid as usize % self.devices.len())
    }

    /// Every (process id, device index, running, bytes the limiter
    /// recorded) the query covers: the tracked processes, the processes
    /// liblimiter.so recorded on this vendor's devices, and named ones.
    fn covered(&self, query: &ProcessQuery) -> Res<Vec<Covered>> {
        let mut out: Vec<Covered> = Vec::new();
        for p in state::processes()? {
            let dev = self.home_of(&p);
            if query.covers_device(&self.devices[dev].uuid) {
                out.push((p.pid.to_string(), dev, !p.snapshotted, None));
            }
        }
        // (pid, device) → index in `out`.
        let mut at: std::collections::HashMap<(String, usize), usize> = out
            .iter()
            .enumerate()
            .map(|(i, (id, d, _, _))| ((id.clone(), *d), i))
            .collect();
        for u in crate::usage::records()?.iter() {
            let Ok(dev) = self.index_of(&u.device_uuid) else {
                continue;
            };
            if !query.covers_device(&u.device_uuid) {
                continue;
            }
            let id = u.pid.to_string();
            match at.get(&(id.clone(), dev)) {
                Some(&i) => out[i].3 = Some(u.memory_bytes),
                None => {
                    at.insert((id.clone(), dev), out.len());
                    out.push((id, dev, true, Some(u.memory_bytes)));
                }
            }
        }
        for (dev, d) in self.devices.iter().enumerate() {
            if !query.covers_device(&d.uuid) {
                continue;
            }
            for name in query.named {
                if !out.iter().any(|(id, i, _, _)| id == name && *i == dev) {
                    out.push((name.clone(), dev, true, None));
                }
            }
        }
        Ok(out)
    }

    /// The simulated load on one device.
    fn load(&self, index: usize) -> Res<Load> {
        let uuid = &self.devices[index].uuid;
        let parts = state::partitions()?;
        let slices = parts
            .iter()
            .filter(|p| &p.device_uuid == uuid)
            .map(|p| template(&p.template_id).map_or(0, |t| t.slice_count))
            .sum();
        let partition_bytes = parts
            .iter()
            .filter(|p| &p.device_uuid == uuid)
            .filter_map(|p| template(&p.template_id))
            .map(|t| t.memory_bytes + overhead(&t))
            .sum();
        let limited_workers = accel_common::shm::limits()?
            .iter()
            .filter(|l| &l.device_uuid == uuid)
            .count() as u32;
        let (mut process_util, mut process_bytes) = (0.0, 0);
        for p in state::processes()? {
            if !p.snapshotted && self.home_of(&p) == index {
                let id = p.pid.to_string();
                process_util += process_utilization(&id, uuid);
                process_bytes += process_memory(&id, uuid);
            }
        }
        Ok(Load {
            slices,
            partition_bytes,
            limited_workers,
            process_util,
            process_bytes,
        })
    }
}

impl Vendor for Stub {
    fn name(&self) -> &'static str {
        "stub"
    }

    fn devices(&self) -> Res<Vec<DeviceInfo>> {
        Ok(self.devices.clone())
    }

    fn related_devices(&self, index: usize) -> Res<Vec<Link>> {
        self.check_index(index)?;
        Ok(self.links(index))
    }

    fn partition_templates(&self, index: usize) -> Res<Vec<Template>> {
        self.check_index(index)?;
        Ok(templates())
    }

    fn topology(&self, indices: &[usize]) -> Res<Topology> {
        for &i in indices {
            self.check_index(i)?;
        }
        Ok(Topology {
            devices: indices
                .iter()
                .map(|&i| DeviceTopology {
                    uuid: self.devices[i].uuid.clone(),
                    numa_node: self.devices[i].numa_node,
                    connections: self.links(i),
                })
                .collect(),
            nvlink_bandwidth_mbps: NVLINK_PAIR_MBPS,
            ib_nic_count: IB_NICS,
            topology_type: "NVLink".into(),
        })
    }

    fn assign_partition(&self, template_id: &str, device_uuid: &str) -> Res<Partition> {
        self.index_of(device_uuid)?;
        let t = template(template_id)
            .ok_or_else(|| Error::NotFound(format!("partition template {template_id:?}")))?;
        let uuid = state::add_partition(device_uuid, &t, SLICES)?;
        Ok(Partition {
            env: vec![format!("{PARTITION_ENV}={uuid}")],
            device_nodes: Vec::new(),
            uuid,
            overhead_bytes: overhead(&t),
        })
    }

    fn remove_partition(&self, template_id: &str, device_uuid: &str) -> Res<()> {
        self.index_of(device_uuid)?;
        if template(template_id).is_none() && !template_id.starts_with(PARTITION_PREFIX) {
            return Err(Error::NotFound(format!(
                "partition template {template_id:?}"
            )));
        }
        state::remove_partition(device_uuid, template_id)
    }

    fn snapshot(&self, pids: &[i32], device_uuid: &str) -> Res<()> {
        state::set_snapshotted(pids, device_uuid, true)
    }

    fn resume(&self, pids: &[i32], device_uuid: &str) -> Res<()> {
        state::set_snapshotted(pids, device_uuid, false)
    }

    fn process_compute(&self, query: &ProcessQuery) -> Res<Vec<ProcessCompute>> {
        Ok(self
            .covered(query)?
            .into_iter()
            .map(|(id, dev, running, _)| {
                let uuid = &self.devices[dev].uuid;
                let util = if running {
                    process_utilization(&id, uuid)
                } else {
                    0.0
                };
                ProcessCompute {
                    active_sms: (util / 100.0 * COMPUTE_UNITS as f64).round() as u64,
                    total_sms: COMPUTE_UNITS,
                    tflops_used: util / 100.0 * MAX_TFLOPS,
                    utilization_percent: util,
                    process_id: id,
                    device_uuid: uuid.clone(),
                }
            })
            .collect())
    }

    fn process_memory(&self, query: &ProcessQuery) -> Res<Vec<ProcessMemory>> {
        Ok(self
            .covered(query)?
            .into_iter()
            .map(|(id, dev, running, recorded)| {
                let uuid = &self.devices[dev].uuid;
                // What the limiter recorded is the truth; otherwise simulate.
                let used = match (running, recorded) {
                    (_, Some(bytes)) => bytes,
                    (true, None) => process_memory(&id, uuid),
                    (false, None) => 0,
                };
                ProcessMemory {
                    used_bytes: used,
                    reserved_bytes: if running { used + RESERVE_BYTES } else { 0 },
                    utilization_percent: used as f64 * 100.0 / TOTAL_MEMORY as f64,
                    process_id: id,
                    device_uuid: uuid.clone(),
                }
            })
            .collect())
    }

    fn metrics(&self, device_uuid: &str) -> Res<Metrics> {
        let i = self.index_of(device_uuid)?;
        Ok(metrics(i, device_uuid, &self.load(i)?))
    }

    fn extended_metrics(&self, device_uuid: &str) -> Res<ExtendedMetrics> {
        let i = self.index_of(device_uuid)?;
        Ok(extended_metrics(
            device_uuid,
            self.devices.len(),
            &self.load(i)?,
        ))
    }

    /// The simulation keeps figures per device, not per partition.
    fn partition_metrics(&self, uuid: &str) -> Res<Metrics> {
        Err(Error::NotFound(format!(
            "{uuid:?}: the stub simulates no per-partition figures"
        )))
    }

    /// A simulated board has no driver files.
    fn mount_libs(&self) -> Res<Vec<Mount>> {
        Ok(Vec::new())
    }
}

//! Partitioned mode: the compute partition modes (SPX/DPX/QPX/CPX) and
//! memory partition modes (NPS1/NPS4/...) a device supports are its
//! templates. Assigning one is a device-wide mode change: the driver
//! refuses it while any process uses the device, and afterwards each
//! compute partition is a logical GPU of its own (docs/amd.md).

use super::discovery::{sysfs_dir, Dev};
use super::smi::{Handle, Smi};
use crate::driver_error::optional;
use crate::log::log_at;
use crate::vendor::{Partition, Template};
use accel_common::{Error, Res};

const GIB: u64 = 1 << 30;

/// One mode: its amdsmi enum value, its name and how many partitions it
/// makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mode {
    pub value: u32,
    pub name: &'static str,
    pub parts: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Compute,
    Memory,
}

/// What a device supports and is set to.
#[derive(Debug, Clone, Default)]
pub struct Modes {
    pub compute: Vec<Mode>,
    pub memory: Vec<Mode>,
    pub current_compute: Option<String>,
    pub current_memory: Option<String>,
}

/// amdsmi_compute_partition_type_t, with the partitions each makes (CPX:
/// one per XCD, filled in per device).
const COMPUTE: &[(u32, &str, u32)] = &[
    (1, "SPX", 1),
    (2, "DPX", 2),
    (3, "TPX", 3),
    (4, "QPX", 4),
    (5, "CPX", 0),
];
/// The memory partition modes, their partition count and amdsmi_nps_caps_t
/// bit; their amdsmi_memory_partition_type_t values are the version's
/// (`Layout::nps`, in this order).
const MEMORY: [(&str, u32, u32); 4] = [
    ("NPS1", 1, 0),
    ("NPS2", 2, 1),
    ("NPS4", 4, 2),
    ("NPS8", 8, 3),
];

/// XCDs per device by PCI device ID, for the CPX partition count when the
/// device is not in CPX (AMD Instinct MI300 data sheets): MI300X and MI325X
/// have 8, MI300A 6.
fn xcds(device_id: Option<u64>) -> Option<u32> {
    match device_id? {
        0x74a1 | 0x74a5 | 0x74a9 | 0x74bd => Some(8),
        0x74a0 => Some(6),
        _ => None,
    }
}

impl Modes {
    /// The current modes from AMD SMI; the supported memory modes from the
    /// current accelerator profile's `memory_caps`; the supported compute
    /// modes from the kernel's `available_compute_partition`, which AMD SMI
    /// 24.7 had no call for.
    pub fn read(smi: &Smi, h: Handle, bdf: &str) -> Modes {
        let fact = |r| {
            optional(r).unwrap_or_else(|e| {
                log_at!(Debug, "amd: {e}");
                None
            })
        };
        let current_compute = fact(smi.compute_partition(h));
        let current_memory = fact(smi.memory_partition(h));
        let profile = optional(smi.partition_profile(h)).ok().flatten();
        let device_id = smi.asic_info(h).ok().map(|a| a.device_id);
        let nps = smi.layout.nps;
        let mut out = Modes {
            current_compute,
            current_memory,
            ..Modes::default()
        };
        if out.current_compute.is_some() && !bdf.is_empty() {
            let path = sysfs_dir(bdf).join("available_compute_partition");
            let listed = std::fs::read_to_string(&path).unwrap_or_default();
            for name in listed
                .split(|c: char| c == ',' || c.is_whitespace())
                .filter(|n| !n.is_empty())
            {
                let Some(&(value, name, parts)) = COMPUTE
                    .iter()
                    .find(|(_, n, _)| n.eq_ignore_ascii_case(name))
                else {
                    log_at!(
                        Debug,
                        "amd: {}: unknown compute mode {name:?}",
                        path.display()
                    );
                    continue;
                };
                let parts = if parts > 0 {
                    parts
                } else if let Some(p) = profile.filter(|p| p.profile_type == value) {
                    p.num_partitions
                } else if let Some(x) = xcds(device_id) {
                    x
                } else {
                    log_at!(
                        Info,
                        "amd: {bdf}: CPX partition count unknown for this device; CPX not offered"
                    );
                    continue;
                };
                out.compute.push(Mode { value, name, parts });
            }
        }
        if out.current_memory.is_some() {
            if let Some(p) = profile {
                for (&(name, parts, bit), &value) in MEMORY.iter().zip(&nps) {
                    if p.memory_caps & (1 << bit) != 0 {
                        out.memory.push(Mode { value, name, parts });
                    }
                }
            }
        }
        out
    }

    pub fn is_empty(&self) -> bool {
        self.compute.is_empty() && self.memory.is_empty()
    }

    pub fn max_partitions(&self) -> u32 {
        self.compute.iter().map(|m| m.parts).max().unwrap_or(0)
    }

    fn find(&self, id: &str) -> Option<(Kind, Mode)> {
        let c = self
            .compute
            .iter()
            .find(|m| m.name.eq_ignore_ascii_case(id));
        let m = self.memory.iter().find(|m| m.name.eq_ignore_ascii_case(id));
        c.map(|&m| (Kind::Compute, m))
            .or(m.map(|&m| (Kind::Memory, m)))
    }
}

pub fn templates(dev: &Dev) -> Vec<Template> {
    let total = dev.info.total_memory_bytes;
    let cus = dev.info.total_compute_units;
    let mut out = Vec::new();
    for m in &dev.modes.compute {
        let n = u64::from(m.parts.max(1));
        out.push(Template {
            id: m.name.into(),
            name: m.name.into(),
            memory_bytes: total / n,
            compute_units: cus / n,
            tflops: 0.0,
            slice_count: m.parts,
            is_default: m.name == "SPX",
            description: format!(
                "compute partition mode {}: {} logical GPU(s) of {} CUs each, sharing {} GiB \
                 ({} GiB each when memory is split as many ways); a device-wide change that needs an idle device",
                m.name,
                m.parts,
                cus / n,
                total / GIB,
                total / n / GIB
            ),
        });
    }
    for m in &dev.modes.memory {
        let n = u64::from(m.parts.max(1));
        out.push(Template {
            id: m.name.into(),
            name: m.name.into(),
            memory_bytes: total / n,
            compute_units: cus,
            tflops: 0.0,
            slice_count: m.parts,
            is_default: m.name == "NPS1",
            description: format!(
                "memory partition mode {}: {} NUMA memory partition(s) of {} GiB; a device-wide change \
                 that needs an idle device (and on real hardware an amdgpu reload)",
                m.name,
                m.parts,
                total / n / GIB
            ),
        });
    }
    out
}

/// The partition handle for a device in a mode.
fn partition_uuid(dev: &Dev, mode: &str) -> String {
    format!("{}/{mode}", dev.info.uuid)
}

/// Refuse a mode change on a device any process uses.
fn require_idle(smi: &Smi, dev: &Dev, what: &str) -> Res<()> {
    let procs = smi.processes(dev.handle).map_err(Error::from)?;
    if procs.is_empty() {
        return Ok(());
    }
    let pids: Vec<String> = procs.iter().map(|p| p.pid.to_string()).collect();
    Err(Error::OperationFailed(format!(
        "device {:?} is busy ({} process(es): pid {}): {what} is a device-wide partition mode \
         change that needs an idle device",
        dev.info.uuid,
        procs.len(),
        pids.join(", ")
    )))
}

fn set(smi: &Smi, dev: &Dev, kind: Kind, mode: Mode) -> Res<()> {
    let r = match kind {
        Kind::Compute => smi.set_compute_partition(dev.handle, mode.value),
        Kind::Memory => smi.set_memory_partition(dev.handle, mode.value),
    };
    r.map_err(|e| match e {
        super::error::AmdError::Call {
            code: super::error::status::BUSY,
            ..
        } => Error::OperationFailed(format!(
            "device {:?} is busy: the driver refused {}: {e}",
            dev.info.uuid, mode.name
        )),
        e => Error::from(e),
    })
}

/// The device's container view after a mode change: its index for the
/// ROCm container toolkit, the KFD node and its render node.
fn access(dev: &Dev, uuid: String) -> Partition {
    let mut device_nodes = vec!["/dev/kfd=/dev/kfd".to_string()];
    if !dev.info.device_node.is_empty() {
        device_nodes.push(format!("{0}={0}", dev.info.device_node));
    }
    Partition {
        uuid,
        overhead_bytes: 0,
        env: vec![format!("AMD_VISIBLE_DEVICES={}", dev.info.index)],
        device_nodes,
    }
}

pub fn assign(smi: &Smi, dev: &Dev, template_id: &str) -> Res<Partition> {
    if dev.modes.is_empty() {
        return Err(Error::NotSupported(format!(
            "device {:?} ({}) reports no partition modes",
            dev.info.uuid, dev.info.model
        )));
    }
    let (kind, mode) = dev.modes.find(template_id).ok_or_else(|| {
        Error::NotFound(format!(
            "partition mode {template_id:?} on device {:?} (supported: {})",
            dev.info.uuid,
            dev.modes
                .compute
                .iter()
                .chain(&dev.modes.memory)
                .map(|m| m.name)
                .collect::<Vec<_>>()
                .join(", ")
        ))
    })?;
    require_idle(smi, dev, mode.name)?;
    set(smi, dev, kind, mode)?;
    log_at!(Info, "amd: device {} set to {}", dev.info.uuid, mode.name);
    Ok(access(dev, partition_uuid(dev, mode.name)))
}

/// Undo a mode: back to the default (SPX, NPS1) if the device is in it.
pub fn remove(smi: &Smi, dev: &Dev, id: &str) -> Res<()> {
    // The partition UUID ("<device uuid>/<mode>", any case: the hypervisor
    // lowercases UUIDs) or the mode itself.
    let name = id
        .rsplit_once('/')
        .filter(|(u, _)| u.eq_ignore_ascii_case(&dev.info.uuid))
        .map_or(id, |(_, m)| m);
    let (kind, mode) = dev.modes.find(name).ok_or_else(|| {
        Error::NotFound(format!("no partition {id:?} on device {:?}", dev.info.uuid))
    })?;
    let current = match kind {
        Kind::Compute => smi.compute_partition(dev.handle),
        Kind::Memory => smi.memory_partition(dev.handle),
    }
    .map_err(Error::from)?;
    if !current.eq_ignore_ascii_case(mode.name) {
        return Err(Error::NotFound(format!(
            "device {:?} is in {current}, not {}",
            dev.info.uuid, mode.name
        )));
    }
    let default = match kind {
        Kind::Compute => dev.modes.compute.iter().find(|m| m.name == "SPX"),
        Kind::Memory => dev.modes.memory.iter().find(|m| m.name == "NPS1"),
    }
    .copied()
    .ok_or_else(|| {
        Error::NotSupported(format!(
            "device {:?} has no default mode to return to",
            dev.info.uuid
        ))
    })?;
    if default == mode {
        return Ok(());
    }
    require_idle(smi, dev, default.name)?;
    set(smi, dev, kind, default)
}

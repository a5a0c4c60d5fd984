//! vNPU partitions: the capacity check made before the driver is asked,
//! and create/destroy/list through DCMI (the template tables are `chips`).
//!
//! Partitions are never kept in our own files: the driver's list of vNPUs
//! (DCMI_VMNG_SUB_CMD_GET_TOTAL_RESOURCE) is the truth, so a restarted
//! hypervisor finds them again, and a partition's UUID is derived from the
//! device UUID and the driver's vNPU ID.

use super::chips::MAX_VDEVS;
use super::dcmi::{c_chars, Dcmi};
use super::discovery::Dev;
use crate::vendor::{Partition, Template};
use accel_common::{Error, Res};

const MIB: u64 = 1 << 20;
/// The driver's management nodes every Ascend container opens beside its NPU.
const MANAGEMENT_NODES: &[&str] = &["/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc"];
/// Partition UUIDs: `<device uuid>-vnpu-<vdev id>`.
const PART_INFIX: &str = "-vnpu-";

/// A template's share of device memory: its AI cores' share of the chip
/// (vNPU memory is split in proportion to AI cores), whole MiB.
fn template_memory(dev: &Dev, aicore: u32) -> u64 {
    let total = u64::from(dev.aicore).max(1);
    dev.info.total_memory_bytes / total * u64::from(aicore) / MIB * MIB
}

pub fn templates(dev: &Dev) -> Vec<Template> {
    let Some(spec) = dev.spec.filter(|_| dev.info.caps.partitioning) else {
        return Vec::new();
    };
    spec.templates
        .iter()
        .filter(|t| t.aicore <= dev.aicore)
        .map(|t| Template {
            id: t.id.into(),
            name: t.id.into(),
            memory_bytes: template_memory(dev, t.aicore),
            compute_units: u64::from(t.aicore),
            tflops: 0.0,
            slice_count: t.aicore,
            is_default: t.is_default,
            description: format!(
                "Ascend {} vNPU: {}, {} MiB",
                spec.family,
                t.desc,
                template_memory(dev, t.aicore) / MIB
            ),
        })
        .collect()
}

/// One vNPU as the driver reports it.
pub struct Vnpu {
    pub vdev_id: u32,
    pub name: String,
    pub aicore: u32,
    pub aicpu: u32,
    pub memory_bytes: u64,
}

pub fn list(dcmi: &Dcmi, dev: &Dev) -> Res<Vec<Vnpu>> {
    let total = dcmi.total_resource(dev.card, dev.device)?;
    let n = (total.vdev_num as usize).min(total.vdev_id.len());
    let mut out = Vec::with_capacity(n);
    for &id in &total.vdev_id[..n] {
        let q = dcmi.vdev_resource(dev.card, dev.device, id)?;
        let name = c_chars(&q.query_info.name);
        let c = &q.query_info.computing;
        // A known template's resources are the table's; otherwise what the
        // driver says the vNPU holds.
        let (aicore, aicpu) = dev
            .spec
            .and_then(|s| s.templates.iter().find(|t| t.id == name))
            .map_or(
                (c.aic.round().max(0.0) as u32, u32::from(c.device_aicpu)),
                |t| (t.aicore, t.aicpu),
            );
        let memory_bytes = if c.memory_size > 0 {
            c.memory_size * MIB
        } else {
            template_memory(dev, aicore)
        };
        out.push(Vnpu {
            vdev_id: id,
            name,
            aicore,
            aicpu,
            memory_bytes,
        });
    }
    Ok(out)
}

pub fn partition_uuid(dev: &Dev, vdev_id: u32) -> String {
    format!("{}{PART_INFIX}{vdev_id}", dev.info.uuid)
}

/// Create a vNPU of `template_id`, refusing with RESOURCE_EXHAUSTED before
/// the driver is asked when the device's AI cores, AI CPUs, memory or vNPU
/// slots would be overcommitted.
pub fn assign(dcmi: &Dcmi, dev: &Dev, template_id: &str) -> Res<Partition> {
    let uuid = &dev.info.uuid;
    let spec = match dev.spec {
        Some(s) if dev.info.caps.partitioning => s,
        _ => {
            return Err(Error::NotSupported(format!(
                "device {uuid:?} ({}) has no vNPU support here",
                dev.info.model
            )))
        }
    };
    let t = spec
        .templates
        .iter()
        .find(|t| t.id == template_id && t.aicore <= dev.aicore)
        .ok_or_else(|| {
            Error::NotFound(format!(
                "vNPU template {template_id:?} on device {uuid:?} (Ascend {})",
                spec.family
            ))
        })?;
    let existing = list(dcmi, dev)?;
    let cores: u32 = existing.iter().map(|v| v.aicore).sum();
    let cpus: u32 = existing.iter().map(|v| v.aicpu).sum();
    let mem: u64 = existing.iter().map(|v| v.memory_bytes).sum();
    let t_mem = template_memory(dev, t.aicore);
    let short = if existing.len() as u32 >= MAX_VDEVS {
        Some(format!("all {MAX_VDEVS} vNPU slots are in use"))
    } else if cores + t.aicore > dev.aicore {
        Some(format!(
            "{} of {} AI cores free, {} needs {}",
            dev.aicore.saturating_sub(cores),
            dev.aicore,
            t.id,
            t.aicore
        ))
    } else if cpus + t.aicpu > spec.aicpu_total {
        Some(format!(
            "{} of {} AI CPUs free, {} needs {}",
            spec.aicpu_total.saturating_sub(cpus),
            spec.aicpu_total,
            t.id,
            t.aicpu
        ))
    } else if mem + t_mem > dev.info.total_memory_bytes {
        Some(format!(
            "{} MiB of device memory free, {} needs {} MiB",
            dev.info.total_memory_bytes.saturating_sub(mem) / MIB,
            t.id,
            t_mem / MIB
        ))
    } else {
        None
    };
    if let Some(why) = short {
        return Err(Error::ResourceExhausted(format!("device {uuid:?}: {why}")));
    }
    let out = dcmi.create_vdevice(dev.card, dev.device, t.id)?;
    let node = format!("/dev/vdavinci{}", out.vdev_id);
    Ok(Partition {
        uuid: partition_uuid(dev, out.vdev_id),
        overhead_bytes: 0,
        // Ascend Docker Runtime's variable, naming the vNPU by its ID.
        env: vec![format!("ASCEND_VISIBLE_DEVICES={}", out.vdev_id)],
        device_nodes: std::iter::once(node.as_str())
            .chain(MANAGEMENT_NODES.iter().copied())
            .map(|n| format!("{n}={n}"))
            .collect(),
    })
}

/// Destroy the vNPU whose partition UUID is `id`, or the newest (highest
/// vNPU ID) of template `id`.
pub fn remove(dcmi: &Dcmi, dev: &Dev, id: &str) -> Res<()> {
    if !dev.info.caps.partitioning {
        return Err(Error::NotSupported(format!(
            "device {:?} has no vNPU support here",
            dev.info.uuid
        )));
    }
    let existing = list(dcmi, dev)?;
    let by_uuid = existing
        .iter()
        .find(|v| partition_uuid(dev, v.vdev_id) == id);
    let target = by_uuid.or_else(|| {
        existing
            .iter()
            .filter(|v| v.name == id)
            .max_by_key(|v| v.vdev_id)
    });
    let v = target
        .ok_or_else(|| Error::NotFound(format!("no vNPU {id:?} on device {:?}", dev.info.uuid)))?;
    dcmi.destroy_vdevice(dev.card, dev.device, v.vdev_id)?;
    Ok(())
}

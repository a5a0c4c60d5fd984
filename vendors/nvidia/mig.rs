//! MIG partitions: templates from NVML's GPU-instance profiles; a partition
//! is one GPU instance with one compute instance spanning it. The library
//! never changes MIG mode: with MIG off, partitioning is NOT_SUPPORTED.

use super::discovery::Dev;
use super::ffi::{Gi, GiProfile};
use super::mig_access as access;
use super::{handle, Driver, NvError};
use crate::fork_lock::ForkMutex as Mutex;
use crate::vendor::{Metrics, Partition, Template};
use accel_common::{Error, Res};
use nvml_wrapper::Device;

const MIB: u64 = 1 << 20;
/// NVML_COMPUTE_INSTANCE_PROFILE_COUNT of nvml.h 13.x (profiles 0..=8), all
/// probed on removal: a compute instance of a profile not probed would be
/// left behind and the GPU instance could not be destroyed.
const CI_PROFILE_IDS: u32 = 9;

type Created = Mutex<Vec<(usize, String, u32)>>;

fn supported(dev: &Dev) -> Res<()> {
    if !dev.mig_supported {
        return Err(Error::NotSupported(format!(
            "device {} ({}) does not support MIG partitioning",
            dev.info.uuid, dev.info.model
        )));
    }
    Ok(())
}

fn mig_on(dev: &Dev, d: &Device) -> Res<()> {
    supported(dev)?;
    let on = d.mig_mode().map(|m| m.current == 1).unwrap_or(dev.mig_on);
    if !on {
        return Err(Error::NotSupported(format!(
            "MIG mode is off on device {}: an administrator enables it (nvidia-smi -i {} -mig 1); this library never changes MIG mode",
            dev.info.uuid, dev.info.index
        )));
    }
    Ok(())
}

fn default_profile(profiles: &[GiProfile]) -> Option<&GiProfile> {
    profiles
        .iter()
        .min_by_key(|p| (p.slices, p.memory_mb, p.profile_id))
}

pub(crate) fn templates(dev: &Dev) -> Res<Vec<Template>> {
    supported(dev)?;
    if dev.profiles.is_empty() {
        return Err(Error::NotSupported(format!(
            "device {}: NVML lists no MIG GPU-instance profiles (MIG mode off?)",
            dev.info.uuid
        )));
    }
    let max_slices = dev.profiles.iter().map(|p| p.slices).max().unwrap_or(0);
    let default = default_profile(&dev.profiles).map(|p| p.profile_id);
    Ok(dev
        .profiles
        .iter()
        .map(|p| Template {
            id: p.name.clone(),
            name: p.name.clone(),
            memory_bytes: p.memory_mb * MIB,
            compute_units: u64::from(p.sms),
            tflops: if dev.info.total_compute_units == 0 {
                0.0
            } else {
                dev.info.max_tflops * f64::from(p.sms) / dev.info.total_compute_units as f64
            },
            slice_count: p.slices,
            is_default: Some(p.profile_id) == default,
            description: format!(
                "MIG {}: {} of {} slices, {} SMs, {} MiB, up to {} instances (NVML GPU-instance profile {})",
                p.name, p.slices, max_slices, p.sms, p.memory_mb, p.instance_count, p.profile_id
            ),
        })
        .collect())
}

fn profile<'a>(dev: &'a Dev, template_id: &str) -> Option<&'a GiProfile> {
    dev.profiles.iter().find(|p| p.name == template_id)
}

/// The compute-instance profile that spans a GPU instance of `slices` slices.
fn ci_profile_for(slices: u32) -> Option<u32> {
    Some(match slices {
        1 => 0,
        2 => 1,
        3 => 2,
        4 => 3,
        7 => 4,
        8 => 5,
        6 => 6,
        _ => return None,
    })
}

pub(crate) fn assign(
    drv: &Driver,
    index: usize,
    dev: &Dev,
    template_id: &str,
    created: &Created,
) -> Res<Partition> {
    supported(dev)?;
    let p = profile(dev, template_id).ok_or_else(|| {
        Error::NotFound(format!(
            "MIG template {template_id:?} on device {}",
            dev.info.uuid
        ))
    })?;
    let d = handle(drv, dev)?;
    mig_on(dev, &d)?;
    let gi = drv
        .ext
        .create_gi(&d, p.nvml_id)
        .map_err(|c| NvError::raw("nvmlDeviceCreateGpuInstance", c))?;
    let done = (|| -> Res<Partition> {
        let (gi_id, _) = drv
            .ext
            .gi_info(&gi)
            .map_err(|c| NvError::raw("nvmlGpuInstanceGetInfo", c))?;
        let cip = ci_profile_for(p.slices).ok_or_else(|| {
            Error::NotSupported(format!(
                "no compute-instance profile for {} slices",
                p.slices
            ))
        })?;
        let (ci_id, _) = drv
            .ext
            .ci_profile(&gi, cip)
            .map_err(|c| NvError::raw("nvmlGpuInstanceGetComputeInstanceProfileInfo", c))?;
        drv.ext
            .create_ci(&gi, ci_id)
            .map_err(|c| NvError::raw("nvmlGpuInstanceCreateComputeInstance", c))?;
        let migs = drv
            .ext
            .mig_devices(&d)
            .map_err(|c| NvError::raw("nvmlDeviceGetMigDeviceHandleByIndex", c))?;
        let (_, uuid, [mem, _, _]) = migs
            .into_iter()
            .find(|(id, _, _)| *id == gi_id)
            .ok_or_else(|| {
                Error::OperationFailed(format!(
                    "MIG device of GPU instance {gi_id} not found after creation"
                ))
            })?;
        created.lock().push((index, template_id.to_string(), gi_id));
        Ok(Partition {
            env: vec![format!("NVIDIA_VISIBLE_DEVICES={uuid}")],
            device_nodes: access::device_nodes(dev, gi_id),
            uuid,
            // What the profile reserves beyond what the MIG device offers.
            overhead_bytes: (p.memory_mb * MIB).saturating_sub(mem),
        })
    })();
    if done.is_err() {
        let _ = destroy(drv, gi);
    }
    done
}

/// Destroys a GPU instance and every compute instance in it (best effort
/// for the compute instances; the GPU instance's result is returned).
fn destroy(drv: &Driver, gi: Gi) -> Res<()> {
    for cip in 0..CI_PROFILE_IDS {
        if let Ok((id, count)) = drv.ext.ci_profile(&gi, cip) {
            for ci in drv.ext.cis(&gi, id, count).unwrap_or_default() {
                let _ = drv.ext.destroy_ci(ci);
            }
        }
    }
    drv.ext
        .destroy_gi(gi)
        .map_err(|c| NvError::raw("nvmlGpuInstanceDestroy", c).into())
}

pub(crate) fn remove(
    drv: &Driver,
    index: usize,
    dev: &Dev,
    template_id: &str,
    created: &Created,
) -> Res<()> {
    supported(dev)?;
    let d = handle(drv, dev)?;
    let gi_id = if let Some(p) = profile(dev, template_id) {
        mig_on(dev, &d)?;
        let ids: Vec<u32> = drv
            .ext
            .gis(&d, p.nvml_id, p.instance_count)
            .map_err(|c| NvError::raw("nvmlDeviceGetGpuInstances", c))?
            .iter()
            .filter_map(|gi| drv.ext.gi_info(gi).ok().map(|(id, _)| id))
            .collect();
        let newest_ours = created
            .lock()
            .iter()
            .rev()
            .find(|(i, t, id)| *i == index && t == template_id && ids.contains(id))
            .map(|(_, _, id)| *id);
        newest_ours
            .or_else(|| ids.iter().copied().max())
            .ok_or_else(|| {
                Error::NotFound(format!(
                    "no {template_id} partition on device {}",
                    dev.info.uuid
                ))
            })?
    } else {
        mig_on(dev, &d)?;
        let migs = drv
            .ext
            .mig_devices(&d)
            .map_err(|c| NvError::raw("nvmlDeviceGetMigDeviceHandleByIndex", c))?;
        migs.into_iter()
            // The hypervisor passes MIG UUIDs lowercased ("mig-…").
            .find(|(_, uuid, _)| uuid.eq_ignore_ascii_case(template_id))
            .map(|(id, _, _)| id)
            .ok_or_else(|| {
                Error::NotFound(format!(
                    "{template_id:?} is neither a MIG template nor a MIG device of {}",
                    dev.info.uuid
                ))
            })?
    };
    let gi = drv
        .ext
        .gi_by_id(&d, gi_id)
        .map_err(|c| NvError::raw("nvmlDeviceGetGpuInstanceById", c))?;
    destroy(drv, gi)?;
    created
        .lock()
        .retain(|(i, _, id)| !(*i == index && *id == gi_id));
    Ok(())
}

/// What NVML says of a MIG device itself: its memory (power, temperature
/// and activity are the whole GPU's, reported under the GPU's UUID).
pub(crate) fn metrics(drv: &Driver, devs: &[Dev], uuid: &str) -> Res<Metrics> {
    for dev in devs.iter().filter(|d| d.mig_supported) {
        let d = handle(drv, dev)?;
        let Ok(migs) = drv.ext.mig_devices(&d) else {
            continue;
        };
        if let Some((_, _, [total, _, used])) = migs
            .into_iter()
            .find(|(_, u, _)| u.eq_ignore_ascii_case(uuid))
        {
            return Ok(Metrics {
                device_uuid: uuid.to_string(),
                memory_used_bytes: used,
                memory_total_bytes: total,
                ..Metrics::default()
            });
        }
    }
    Err(Error::NotFound(format!("MIG device {uuid:?}")))
}

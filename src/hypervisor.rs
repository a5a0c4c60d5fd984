//! What ABI-v2.md asks of each call beyond the vendor trait, in safe Rust:
//! properties as key/value text, topology rows with levels, one process
//! listing with compute and memory together, metrics that never fail a
//! batch, device-level snapshot targets and the mount list.

use crate::api;
use crate::hostfiles;
use crate::log::log_at;
use crate::vendor::{DeviceInfo, LinkLevel, Metrics, Mount, ProcessQuery};
use accel_common::{Error, Res};

/// The device a caller's UUID names, ignoring ASCII case: the hypervisor
/// lowercases every UUID it reads ("GPU-…" comes back as "gpu-…").
pub fn device_uuid(given: &str) -> Res<String> {
    api::devices()?
        .into_iter()
        .find(|d| d.uuid.eq_ignore_ascii_case(given))
        .map(|d| d.uuid)
        .ok_or_else(|| Error::NotFound(format!("device {given:?}")))
}

/// `DeviceProperties` as key/value text; keys in docs/hypervisor.md. A
/// figure the driver did not give (0 or empty) is left out.
pub fn properties(d: &DeviceInfo) -> Vec<(String, String)> {
    let p = &d.props;
    let mut out: Vec<(String, String)> = Vec::new();
    let mut num = |k: &str, v: u32| {
        if v != 0 {
            out.push((k.into(), v.to_string()));
        }
    };
    num("clock.graphics.max_mhz", p.clock_graphics_mhz);
    num("clock.sm.max_mhz", p.clock_sm_mhz);
    num("clock.memory.max_mhz", p.clock_mem_mhz);
    num("clock.ai.max_mhz", p.clock_ai_mhz);
    num("power.limit_w", p.power_limit_w);
    num("temperature.threshold_c", p.temperature_threshold_c);
    out.push(("ecc.enabled".into(), p.ecc_enabled.to_string()));
    out.push((
        "persistence_mode.enabled".into(),
        p.persistence_mode_enabled.to_string(),
    ));
    for (k, v) in [
        ("compute_capability", &p.compute_capability),
        ("chip_type", &p.chip_type),
    ] {
        if !v.is_empty() {
            out.push((k.into(), v.clone()));
        }
    }
    out.extend(d.extra_props.iter().cloned());
    out
}

pub struct Peer {
    pub uuid: String,
    pub index: i32,
    pub level: LinkLevel,
    pub bandwidth_bytes_per_sec: i64,
}

pub struct Row {
    pub uuid: String,
    pub index: i32,
    pub numa_node: i32,
    pub peers: Vec<Peer>,
}

/// A row per device (the first `max`), a peer per other device.
pub fn topology(max: usize) -> Res<Vec<Row>> {
    let devices = api::devices()?;
    let indices: Vec<usize> = (0..devices.len().min(max)).collect();
    if indices.is_empty() {
        return Ok(Vec::new());
    }
    let topo = api::active()?.topology(&indices)?;
    let index_of = |uuid: &str| {
        devices
            .iter()
            .find(|d| d.uuid == uuid)
            .map_or(-1, |d| d.index)
    };
    Ok(topo
        .devices
        .iter()
        .map(|d| Row {
            uuid: d.uuid.clone(),
            index: index_of(&d.uuid),
            numa_node: d.numa_node,
            peers: d
                .connections
                .iter()
                .map(|l| Peer {
                    uuid: l.peer_uuid.clone(),
                    index: index_of(&l.peer_uuid),
                    level: l.level,
                    bandwidth_bytes_per_sec: i64::from(l.bandwidth_mbps) * 1_000_000,
                })
                .collect(),
        })
        .collect())
}

#[derive(Debug, Default, Clone, PartialEq)]
pub struct ProcessInfo {
    pub pid: String,
    pub device_uuid: String,
    pub compute_percent: f64,
    pub active_sms: u64,
    pub total_sms: u64,
    pub memory_used: u64,
    pub memory_reserved: u64,
    pub memory_percent: f64,
}

/// Every process on every device: compute and memory in one entry (the
/// limiter's records read once for both lists: `usage::one_scan`).
pub fn processes() -> Res<Vec<ProcessInfo>> {
    let v = api::active()?;
    let query = ProcessQuery::default();
    let (compute, memory) = crate::usage::one_scan(|| {
        Ok::<_, Error>((v.process_compute(&query)?, v.process_memory(&query)?))
    })?;
    let mut out: Vec<ProcessInfo> = compute
        .into_iter()
        .map(|c| ProcessInfo {
            pid: c.process_id,
            device_uuid: c.device_uuid,
            compute_percent: c.utilization_percent,
            active_sms: c.active_sms,
            total_sms: c.total_sms,
            ..ProcessInfo::default()
        })
        .collect();
    // pid → (device, index in `out`): looked up by the memory list's &strs.
    let mut at: std::collections::HashMap<String, Vec<(String, usize)>> =
        std::collections::HashMap::with_capacity(out.len());
    for (i, p) in out.iter().enumerate() {
        at.entry(p.pid.clone())
            .or_default()
            .push((p.device_uuid.clone(), i));
    }
    for m in memory {
        let found = at
            .get(m.process_id.as_str())
            .and_then(|v| v.iter().find(|(d, _)| *d == m.device_uuid))
            .map(|&(_, i)| i);
        let i = match found {
            Some(i) => i,
            None => {
                out.push(ProcessInfo {
                    pid: m.process_id,
                    device_uuid: m.device_uuid,
                    ..ProcessInfo::default()
                });
                out.len() - 1
            }
        };
        let slot = &mut out[i];
        slot.memory_used = m.used_bytes;
        slot.memory_reserved = m.reserved_bytes;
        slot.memory_percent = m.utilization_percent;
    }
    Ok(out)
}

/// The processes the vendor sees on one device (device-level snapshot).
pub fn device_pids(uuid: &str) -> Res<Vec<i32>> {
    let mut pids: Vec<i32> = processes()?
        .into_iter()
        .filter(|p| p.device_uuid == uuid)
        .filter_map(|p| p.pid.parse().ok())
        .collect();
    pids.sort_unstable();
    pids.dedup();
    Ok(pids)
}

/// One entry of a metrics batch: the vendor's figures, or all zeros (the
/// reason logged at debug) when `uuid` names no device or partition.
pub fn metrics(given: &str) -> (Metrics, Vec<(String, f64)>) {
    let got = api::active().and_then(|v| {
        // A device by its UUID in any case; anything else may be a partition.
        let Ok(uuid) = device_uuid(given) else {
            return Ok((v.partition_metrics(given)?, None));
        };
        let m = v.metrics(&uuid)?;
        let ext = v.extended_metrics(&uuid).ok();
        Ok((m, ext))
    });
    match got {
        Ok((m, ext)) => {
            let mut extra = vec![
                ("sm_active_percent".into(), f64::from(m.sm_active_percent)),
                (
                    "tensor_core_percent".into(),
                    f64::from(m.tensor_core_percent),
                ),
                ("memory_total_bytes".into(), m.memory_total_bytes as f64),
            ];
            if let Some(e) = ext {
                for (i, mbps) in e.nvlink_mbps.iter().enumerate() {
                    extra.push((format!("nvlink.{i}.mbps"), f64::from(*mbps)));
                }
                for (i, mbps) in e.pcie_mbps.iter().enumerate() {
                    extra.push((format!("pcie.{i}.mbps"), f64::from(*mbps)));
                }
                for (i, mbps) in e.ib_nic_mbps.iter().enumerate() {
                    extra.push((format!("ib.{i}.mbps"), *mbps as f64));
                }
            }
            (m, extra)
        }
        Err(e) => {
            log_at!(
                Debug,
                "AccelGetDeviceMetrics: {given:?}: {e}; reported as zeros"
            );
            (Metrics::default(), Vec::new())
        }
    }
}

/// The vendor's driver files and, where the CUDA hook applies, the
/// project's preload library.
pub fn mounts() -> Res<Vec<Mount>> {
    let v = api::active()?;
    let mut out = v.mount_libs()?;
    if matches!(v.name(), "nvidia" | "stub") {
        out.extend(hostfiles::preload_lib());
    }
    Ok(out)
}

/// `AccelInit`: the configuration must name a usable vendor; a vendor
/// with no devices is fine.
pub fn init() -> Res<()> {
    let v = api::active()?;
    let n = v.devices()?.len();
    log_at!(Info, "vendor {} with {n} devices", v.name());
    crate::sampler::start();
    Ok(())
}

/// `AccelShutdown`: the compute sampler stops (the vendor stays loaded).
pub fn shutdown() {
    crate::sampler::stop();
}

/// A snapshot target: explicit processes, else every process the vendor
/// sees on the device.
pub fn snapshot_targets(pids: Option<&[i32]>, uuid: Option<&str>) -> Res<(Vec<i32>, String)> {
    match (pids, uuid) {
        (Some(p), u) => {
            let u = u.map(device_uuid).transpose()?.unwrap_or_default();
            api::check_processes(p, &u)?;
            Ok((p.to_vec(), u))
        }
        (None, Some(u)) => {
            let u = device_uuid(u)?;
            Ok((device_pids(&u)?, u))
        }
        (None, None) => Err(Error::InvalidParam(
            "SnapshotContext names neither processes nor a device".into(),
        )),
    }
}

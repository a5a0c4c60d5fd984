//! Device and per-process metrics from NVML.

use super::discovery::Dev;
use super::{ffi, handle, Driver, NvError};
use crate::fork_lock::ForkMutex as Mutex;
use crate::vendor::{
    ExtendedMetrics, Metrics, ProcessCompute, ProcessMemory, ProcessQuery, UtilizationSample,
};
use accel_common::{Error, Res};
use nvml_wrapper::enum_wrappers::device::{PcieUtilCounter, TemperatureSensor};
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::error::NvmlError;
use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

/// NVML field ids (nvml.h).
const FI_PCIE_COUNT_TX_BYTES: u32 = 197;
const FI_PCIE_COUNT_RX_BYTES: u32 = 198;
const FI_NVLINK_THROUGHPUT_DATA_TX: u32 = 138;
const FI_NVLINK_THROUGHPUT_DATA_RX: u32 = 139;
/// GPM metric ids (nvmlGpmMetricId_t).
const GPM_SM_UTIL: u32 = 2;
const GPM_ANY_TENSOR_UTIL: u32 = 5;
/// Shortest interval between the two GPM samples of a reading: calls closer
/// together than this get the previous reading again.
const GPM_MIN_INTERVAL: Duration = Duration::from_millis(100);
/// Interval for the first NVLink throughput reading of a device.
const COUNTER_INTERVAL: Duration = Duration::from_millis(20);

/// Per device: the last GPM sample, when it was taken, and the reading it
/// ended (SM %, tensor %).
pub(crate) type GpmSamples = BTreeMap<usize, (ffi::GpmSample, Instant, Option<(u32, u32)>)>;

/// Previous NVLink data counters (KiB, tx + rx per link) per device.
pub(crate) type Counters = BTreeMap<usize, (Instant, Vec<u64>)>;

pub(crate) fn device(
    drv: &Driver,
    index: usize,
    dev: &Dev,
    gpm: &Mutex<GpmSamples>,
) -> Res<Metrics> {
    let d = handle(drv, dev)?;
    let pcie = drv
        .ext
        .field_values(
            &d,
            &[(FI_PCIE_COUNT_RX_BYTES, 0), (FI_PCIE_COUNT_TX_BYTES, 0)],
        )
        .unwrap_or_default();
    let field = |k: usize| pcie.get(k).and_then(|r| r.ok()).unwrap_or(0);
    let (sm, tensor) = activity(drv, index, dev, &d, gpm);
    let mem = d.memory_info().ok();
    Ok(Metrics {
        device_uuid: dev.info.uuid.clone(),
        power_w: d.power_usage().map_or(0.0, |mw| f64::from(mw) / 1000.0),
        temperature_c: d.temperature(TemperatureSensor::Gpu).map_or(0.0, f64::from),
        pcie_rx_bytes: field(0),
        pcie_tx_bytes: field(1),
        sm_active_percent: sm,
        tensor_core_percent: tensor,
        memory_used_bytes: mem.as_ref().map_or(0, |m| m.used),
        memory_total_bytes: mem
            .as_ref()
            .map_or(dev.info.total_memory_bytes, |m| m.total),
    })
}

/// SM active % and tensor-core activity %: GPM where the device has it,
/// else NVML's utilization rate (and no tensor figure: 0).
///
/// GPM measures between two samples. Rather than sleeping inside the call,
/// each call takes one sample and measures against the previous call's, so
/// a reading covers the interval since the last one. The first call on a
/// device has no previous sample and reports the utilization rate instead.
fn activity(
    drv: &Driver,
    index: usize,
    dev: &Dev,
    d: &nvml_wrapper::Device,
    gpm: &Mutex<GpmSamples>,
) -> (u32, u32) {
    if dev.gpm {
        let mut samples = gpm.lock();
        match samples.get(&index) {
            Some((_, at, Some(reading))) if at.elapsed() < GPM_MIN_INTERVAL => return *reading,
            _ => {}
        }
        if let Ok(now) = drv.ext.gpm_sample(d) {
            let reading = samples.get(&index).and_then(|(prev, _, _)| {
                let v = drv
                    .ext
                    .gpm_metrics(prev, &now, &[GPM_SM_UTIL, GPM_ANY_TENSOR_UTIL])
                    .ok()?;
                let pct = |k: usize| {
                    v.get(k)
                        .and_then(|r| r.as_ref().ok())
                        .map_or(0, |x| x.clamp(0.0, 100.0).round() as u32)
                };
                Some((pct(0), pct(1)))
            });
            samples.insert(index, (now, Instant::now(), reading));
            if let Some(r) = reading {
                return r;
            }
        }
    }
    (d.utilization_rates().map_or(0, |u| u.gpu), 0)
}

fn nvlink_counters(drv: &Driver, dev: &Dev, d: &nvml_wrapper::Device) -> Vec<u64> {
    let ids: Vec<(u32, u32)> = dev
        .nvlinks
        .iter()
        .flat_map(|(l, _, _)| {
            [
                (FI_NVLINK_THROUGHPUT_DATA_TX, *l),
                (FI_NVLINK_THROUGHPUT_DATA_RX, *l),
            ]
        })
        .collect();
    let vals = drv.ext.field_values(d, &ids).unwrap_or_default();
    (0..dev.nvlinks.len())
        .map(|k| {
            let v = |i: usize| vals.get(i).and_then(|r| r.ok()).unwrap_or(0);
            v(2 * k).saturating_add(v(2 * k + 1))
        })
        .collect()
}

pub(crate) fn extended(
    drv: &Driver,
    index: usize,
    dev: &Dev,
    counters: &Mutex<Counters>,
) -> Res<ExtendedMetrics> {
    let d = handle(drv, dev)?;
    let mut nvlink_mbps = vec![0; dev.nvlinks.len()];
    if !dev.nvlinks.is_empty() {
        let prev = counters.lock().get(&index).cloned();
        let (t0, c0) = match prev {
            Some(p) => p,
            None => {
                let first = (Instant::now(), nvlink_counters(drv, dev, &d));
                std::thread::sleep(COUNTER_INTERVAL);
                first
            }
        };
        let now = Instant::now();
        let c1 = nvlink_counters(drv, dev, &d);
        let secs = now.duration_since(t0).as_secs_f64();
        if secs > 0.0 {
            for (k, slot) in nvlink_mbps.iter_mut().enumerate() {
                let kib = c1
                    .get(k)
                    .copied()
                    .unwrap_or(0)
                    .saturating_sub(c0.get(k).copied().unwrap_or(0));
                *slot = ((kib as f64 * 1024.0 / 1e6) / secs).min(f64::from(u32::MAX)) as u32;
            }
        }
        counters.lock().insert(index, (now, c1));
    }
    let pcie_mbps = match (
        d.pcie_throughput(PcieUtilCounter::Receive),
        d.pcie_throughput(PcieUtilCounter::Send),
    ) {
        (Ok(rx), Ok(tx)) => vec![rx.saturating_add(tx) / 1000],
        _ => Vec::new(),
    };
    Ok(ExtendedMetrics {
        device_uuid: dev.info.uuid.clone(),
        nvlink_mbps,
        ib_nic_mbps: Vec::new(),
        pcie_mbps,
    })
}

fn covered<'a>(devs: &'a [Dev], query: &'a ProcessQuery) -> impl Iterator<Item = &'a Dev> {
    devs.iter().filter(|d| query.covers_device(&d.info.uuid))
}

pub(crate) fn process_compute(
    drv: &Driver,
    devs: &[Dev],
    query: &ProcessQuery,
) -> Res<Vec<ProcessCompute>> {
    let mut out = Vec::new();
    for dev in covered(devs, query) {
        let d = handle(drv, dev)?;
        // The latest SM utilization sample of each process.
        let mut util: HashMap<u32, (u64, u32)> = HashMap::new();
        for s in d.process_utilization_stats(None).unwrap_or_default() {
            let e = util.entry(s.pid).or_insert((0, 0));
            if s.timestamp >= e.0 {
                *e = (s.timestamp, s.sm_util);
            }
        }
        let mut pids: Vec<u32> = d
            .running_compute_processes()
            .map_err(|e| NvError::nvml("nvmlDeviceGetComputeRunningProcesses", e))?
            .iter()
            .map(|p| p.pid)
            .collect();
        pids.extend(
            util.keys()
                .copied()
                .filter(|p| !pids.contains(p))
                .collect::<Vec<_>>(),
        );
        let mut ids: Vec<String> = pids.iter().map(u32::to_string).collect();
        for n in query.named {
            if !ids.contains(n) {
                ids.push(n.clone());
            }
        }
        let total = dev.info.total_compute_units;
        for id in ids {
            let pct = id
                .parse::<u32>()
                .ok()
                .and_then(|p| util.get(&p))
                .map_or(0.0, |&(_, u)| f64::from(u.min(100)));
            out.push(ProcessCompute {
                process_id: id,
                device_uuid: dev.info.uuid.clone(),
                utilization_percent: pct,
                active_sms: (total as f64 * pct / 100.0).round() as u64,
                total_sms: total,
                tflops_used: dev.info.max_tflops * pct / 100.0,
            });
        }
    }
    Ok(out)
}

pub(crate) fn process_memory(
    drv: &Driver,
    devs: &[Dev],
    query: &ProcessQuery,
) -> Res<Vec<ProcessMemory>> {
    let mut out = Vec::new();
    for dev in covered(devs, query) {
        let d = handle(drv, dev)?;
        let total = dev.info.total_memory_bytes;
        let mut seen = Vec::new();
        for p in d
            .running_compute_processes()
            .map_err(|e| NvError::nvml("nvmlDeviceGetComputeRunningProcesses", e))?
        {
            let used = match p.used_gpu_memory {
                UsedGpuMemory::Used(b) => b,
                UsedGpuMemory::Unavailable => 0,
            };
            let id = p.pid.to_string();
            match out
                .iter_mut()
                .find(|m: &&mut ProcessMemory| m.process_id == id && m.device_uuid == dev.info.uuid)
            {
                // One entry per process and device (MIG instances add up).
                Some(m) => m.used_bytes += used,
                None => out.push(ProcessMemory {
                    process_id: id.clone(),
                    device_uuid: dev.info.uuid.clone(),
                    used_bytes: used,
                    reserved_bytes: 0,
                    utilization_percent: 0.0,
                }),
            }
            seen.push(id);
        }
        for n in query.named {
            if !seen.contains(n) {
                out.push(ProcessMemory {
                    process_id: n.clone(),
                    device_uuid: dev.info.uuid.clone(),
                    ..Default::default()
                });
            }
        }
        for m in out.iter_mut().filter(|m| m.device_uuid == dev.info.uuid) {
            if total > 0 {
                m.utilization_percent = m.used_bytes as f64 * 100.0 / total as f64;
            }
        }
    }
    Ok(out)
}

/// `nvmlDeviceGetProcessUtilization` newer than `since` (µs); NVML's
/// NOT_FOUND (no sample newer) is an empty list.
pub(crate) fn process_utilization(
    drv: &Driver,
    dev: &Dev,
    since: u64,
) -> Res<Vec<UtilizationSample>> {
    match handle(drv, dev)?.process_utilization_stats(since) {
        Ok(samples) => Ok(samples
            .into_iter()
            .map(|s| UtilizationSample {
                pid: s.pid,
                sm_percent: s.sm_util,
                timestamp: s.timestamp,
            })
            .collect()),
        Err(NvmlError::NotFound) => Ok(Vec::new()),
        Err(NvmlError::NotSupported) => Err(Error::NotSupported(format!(
            "nvmlDeviceGetProcessUtilization on {}",
            dev.info.uuid
        ))),
        Err(e) => Err(NvError::nvml("nvmlDeviceGetProcessUtilization", e).into()),
    }
}

//! The simulated hardware: fixed identities and the formulas that turn a
//! device's load into metrics.

use crate::vendor::*;

pub(crate) const DEFAULT_DEVICES: usize = 4;
pub(crate) const MAX_DEVICES: usize = 64;
pub(crate) const COMPUTE_UNITS: u64 = 108;
pub(crate) const MAX_TFLOPS: f64 = 312.0;
pub(crate) const SLICES: u32 = 7;
const GIB: u64 = 1 << 30;
/// 7 slices of 8 GiB: 7 GiB usable per slice plus 1 GiB of partition overhead.
pub(crate) const TOTAL_MEMORY: u64 = 56 * GIB;
const SLICE_MEMORY: u64 = 7 * GIB;
const SLICE_OVERHEAD: u64 = GIB;
/// 14 of the 108 compute units per slice (98 usable when fully partitioned).
const SLICE_UNITS: u64 = 14;
/// Per device pair: 12 NVLink links at 25 GB/s.
pub(crate) const NVLINK_PAIR_MBPS: u32 = 300_000;
const NVLINK_LATENCY_NS: u32 = 700;
pub(crate) const IB_NICS: u32 = 2;
/// Memory a running process reserves beyond what it uses.
pub(crate) const RESERVE_BYTES: u64 = 256 << 20;
pub(crate) const PARTITION_PREFIX: &str = "stub-mig-";
/// The variable that tells a container which stub partition is its own.
pub(crate) const PARTITION_ENV: &str = "ACCELERATOR_STUB_PARTITION";
const POWER_IDLE_W: f64 = 60.0;
const POWER_LIMIT_W: u32 = 400;

pub fn device(index: usize, count: usize) -> DeviceInfo {
    DeviceInfo {
        uuid: format!("stub-device-{index}"),
        vendor: "STUB".into(),
        model: "Stub Accelerator S108".into(),
        driver_version: "stub-1.0.0".into(),
        firmware_version: "stub-fw-1.0".into(),
        index: index as i32,
        // Two simulated sockets: the first half of the board on node 0.
        numa_node: if index < count.div_ceil(2) { 0 } else { 1 },
        total_memory_bytes: TOTAL_MEMORY,
        total_compute_units: COMPUTE_UNITS,
        max_tflops: MAX_TFLOPS,
        pcie_gen: 4,
        pcie_width: 16,
        // A simulated board has no device node.
        device_node: String::new(),
        extra_props: vec![("simulated".into(), "true".into())],
        props: DeviceProps {
            clock_graphics_mhz: 1410,
            clock_sm_mhz: 1410,
            clock_mem_mhz: 1593,
            clock_ai_mhz: 1410,
            power_limit_w: POWER_LIMIT_W,
            temperature_threshold_c: 85,
            ecc_enabled: true,
            persistence_mode_enabled: true,
            compute_capability: "8.0".into(),
            chip_type: "STUB-S108".into(),
        },
        caps: Capabilities {
            partitioning: true,
            soft_isolation: true,
            hard_isolation: true,
            snapshot: true,
            metrics: true,
            max_partitions: SLICES,
            max_workers_per_device: 64,
        },
    }
}

pub fn templates() -> Vec<Template> {
    [(1, false), (2, true), (3, false)]
        .into_iter()
        .map(|(slices, is_default)| {
            let gb = slices * 7;
            let units = SLICE_UNITS * u64::from(slices);
            Template {
                id: format!("mig-{slices}g.{gb}gb"),
                name: format!("{slices}g.{gb}gb"),
                memory_bytes: SLICE_MEMORY * u64::from(slices),
                compute_units: units,
                tflops: MAX_TFLOPS * units as f64 / COMPUTE_UNITS as f64,
                slice_count: slices,
                is_default,
                description: format!(
                    "{slices} of {SLICES} slices: {gb} GiB, {units} compute units (simulated)"
                ),
            }
        })
        .collect()
}

pub fn template(id: &str) -> Option<Template> {
    templates().into_iter().find(|t| t.id == id)
}

/// Device memory a partition costs beyond what it offers.
pub fn overhead(t: &Template) -> u64 {
    SLICE_OVERHEAD * u64::from(t.slice_count)
}

pub fn nvlink(peer: &str) -> Link {
    Link {
        peer_uuid: peer.into(),
        connection_type: "NVLink".into(),
        bandwidth_mbps: NVLINK_PAIR_MBPS,
        latency_ns: NVLINK_LATENCY_NS,
        level: LinkLevel::Internal,
    }
}

/// FNV-1a: a stable hash, so a process's simulated usage is the same in
/// every process and every run.
fn hash(parts: &[&str]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for b in part.bytes().chain([0]) {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

/// A running process's SM utilization on a device: 5–40 %.
pub fn process_utilization(process_id: &str, uuid: &str) -> f64 {
    5.0 + (hash(&[process_id, uuid, "sm"]) % 36) as f64
}

/// A running process's device memory: 256 MiB to 4 GiB in 256 MiB steps.
pub fn process_memory(process_id: &str, uuid: &str) -> u64 {
    (1 + hash(&[process_id, uuid, "mem"]) % 16) * (256 << 20)
}

pub struct Load {
    pub slices: u32,
    pub partition_bytes: u64,
    pub limited_workers: u32,
    pub process_util: f64,
    pub process_bytes: u64,
}

impl Load {
    /// Overall busyness 0–100: processes' SM use, plus a little per
    /// partition slice and per hard-limited worker (their housekeeping).
    fn busy(&self) -> f64 {
        (self.process_util + 2.0 * f64::from(self.slices) + f64::from(self.limited_workers))
            .min(100.0)
    }
}

pub fn metrics(index: usize, uuid: &str, load: &Load) -> Metrics {
    let busy = load.busy();
    let power = POWER_IDLE_W + busy / 100.0 * (f64::from(POWER_LIMIT_W) - POWER_IDLE_W);
    // Traffic since the simulated boot grows with the work on the device.
    let traffic = (index as u64 + 1) * GIB + (busy * 64.0) as u64 * (1 << 20);
    Metrics {
        device_uuid: uuid.into(),
        power_w: power,
        temperature_c: 30.0 + busy * 0.45,
        pcie_rx_bytes: traffic,
        pcie_tx_bytes: traffic / 2,
        sm_active_percent: busy.round() as u32,
        tensor_core_percent: (busy * 0.6).round() as u32,
        memory_used_bytes: (load.partition_bytes + load.process_bytes).min(TOTAL_MEMORY),
        memory_total_bytes: TOTAL_MEMORY,
    }
}

pub fn extended_metrics(uuid: &str, devices: usize, load: &Load) -> ExtendedMetrics {
    let busy = load.busy();
    ExtendedMetrics {
        device_uuid: uuid.into(),
        nvlink_mbps: vec![(busy / 100.0 * f64::from(NVLINK_PAIR_MBPS) / 4.0) as u32; devices - 1],
        ib_nic_mbps: vec![(busy / 100.0 * 25_000.0) as u64; IB_NICS as usize],
        pcie_mbps: vec![(busy / 100.0 * 32_000.0) as u32],
    }
}

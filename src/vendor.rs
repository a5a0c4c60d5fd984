//! The vendor trait: everything a vendor implements, in safe Rust.
//!
//! The ABI layer (`abi/`) validates every argument, converts between C and
//! these types and maps `Error` onto `Result` codes; a vendor never sees a
//! raw pointer. Hard limits and per-process accounting that are not the
//! driver's business live in the limiter's shared state (`accel_common::shm`),
//! reached through `api`, the same for all vendors. A vendor that knows its
//! devices' PCI addresses sets the `pci.bus_id` property: `pci::report`
//! matches them with the bus.

use accel_common::Res;

/// Static description of one device (ABI.md DeviceBasicInfo + DeviceProperties
/// + DeviceCapabilities). Vendors cache these: `devices()` must be cheap.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DeviceInfo {
    pub uuid: String,
    pub vendor: String,
    pub model: String,
    pub driver_version: String,
    pub firmware_version: String,
    pub index: i32,
    /// -1 when the platform has no NUMA affinity for the device.
    pub numa_node: i32,
    pub total_memory_bytes: u64,
    pub total_compute_units: u64,
    pub max_tflops: f64,
    pub pcie_gen: u32,
    pub pcie_width: u32,
    /// The device's node under /dev ("" when the driver cannot say).
    pub device_node: String,
    pub props: DeviceProps,
    /// Vendor facts beyond `props`, as v2 property keys and values
    /// (documented in docs/hypervisor.md).
    pub extra_props: Vec<(String, String)>,
    pub caps: Capabilities,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct DeviceProps {
    pub clock_graphics_mhz: u32,
    pub clock_sm_mhz: u32,
    pub clock_mem_mhz: u32,
    pub clock_ai_mhz: u32,
    pub power_limit_w: u32,
    pub temperature_threshold_c: u32,
    pub ecc_enabled: bool,
    pub persistence_mode_enabled: bool,
    pub compute_capability: String,
    pub chip_type: String,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Capabilities {
    pub partitioning: bool,
    pub soft_isolation: bool,
    pub hard_isolation: bool,
    pub snapshot: bool,
    pub metrics: bool,
    pub max_partitions: u32,
    pub max_workers_per_device: u32,
}

/// How far apart two devices are (ABI-v2.md TopoLevelType), nearest first.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum LinkLevel {
    /// NVLink, HCCS, the same board.
    Internal,
    SingleSwitch,
    MultiSwitch,
    HostBridge,
    NumaNode,
    System,
    #[default]
    Unknown,
}

/// A link from one device to another (ABI.md RelatedDevice).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Link {
    pub peer_uuid: String,
    /// "NVLink", "PCIe", "HCCS", ...
    pub connection_type: String,
    /// As the vendor quotes the link: NVLink both directions together
    /// (links × per-link rate), PCIe per direction; 0 when unknown.
    pub bandwidth_mbps: u32,
    pub latency_ns: u32,
    pub level: LinkLevel,
}

/// A partition template (ABI.md PartitionTemplate).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Template {
    pub id: String,
    pub name: String,
    pub memory_bytes: u64,
    pub compute_units: u64,
    pub tflops: f64,
    pub slice_count: u32,
    pub is_default: bool,
    pub description: String,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct DeviceTopology {
    pub uuid: String,
    pub numa_node: i32,
    pub connections: Vec<Link>,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Topology {
    pub devices: Vec<DeviceTopology>,
    pub nvlink_bandwidth_mbps: u32,
    pub ib_nic_count: u32,
    /// The common-ancestor level or fabric, e.g. "NVLink", "SameBoard", "System".
    pub topology_type: String,
}

/// A partition created by `assign_partition`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Partition {
    pub uuid: String,
    pub overhead_bytes: u64,
    /// How a container reaches it: "KEY=VALUE" variables...
    pub env: Vec<String>,
    /// ...and "hostPath=guestPath" device nodes.
    pub device_nodes: Vec<String>,
}

/// A host file a container of this vendor mounts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Mount {
    pub host_path: String,
    pub guest_path: String,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProcessCompute {
    pub process_id: String,
    pub device_uuid: String,
    pub utilization_percent: f64,
    pub active_sms: u64,
    pub total_sms: u64,
    pub tflops_used: f64,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProcessMemory {
    pub process_id: String,
    pub device_uuid: String,
    pub used_bytes: u64,
    pub reserved_bytes: u64,
    pub utilization_percent: f64,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Metrics {
    pub device_uuid: String,
    pub power_w: f64,
    pub temperature_c: f64,
    pub pcie_rx_bytes: u64,
    pub pcie_tx_bytes: u64,
    pub sm_active_percent: u32,
    pub tensor_core_percent: u32,
    pub memory_used_bytes: u64,
    pub memory_total_bytes: u64,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct ExtendedMetrics {
    pub device_uuid: String,
    pub nvlink_mbps: Vec<u32>,
    pub ib_nic_mbps: Vec<u64>,
    pub pcie_mbps: Vec<u32>,
}

/// One process's SM utilization over one of the driver's sample periods.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UtilizationSample {
    /// The host pid the driver names.
    pub pid: u32,
    pub sm_percent: u32,
    /// The driver's timestamp of the sample (NVML: µs); pass the newest
    /// seen back as `since` to get only newer ones.
    pub timestamp: u64,
}

/// Which processes a per-process query covers: the devices asked about
/// (all when `None`) and processes the caller names in addition to those
/// the vendor and the limiter know of.
#[derive(Debug, Clone, Default)]
pub struct ProcessQuery<'a> {
    pub devices: Option<&'a [String]>,
    pub named: &'a [String],
}

impl ProcessQuery<'_> {
    pub fn covers_device(&self, uuid: &str) -> bool {
        self.devices.is_none_or(|d| d.iter().any(|u| u == uuid))
    }
}

/// One vendor's implementation. Device indices and UUIDs passed in have
/// been checked to be well formed, not to exist: unknown ones are the
/// vendor's to report as `Error::NotFound`.
pub trait Vendor: Send + Sync {
    /// Short lowercase name ("stub", "nvidia", "ascend").
    fn name(&self) -> &'static str;

    /// Every device, in index order. Must be cheap (cache static facts).
    fn devices(&self) -> Res<Vec<DeviceInfo>>;

    /// Devices linked to `index` (ExtendedDeviceInfo.relatedDevices).
    fn related_devices(&self, index: usize) -> Res<Vec<Link>>;

    fn partition_templates(&self, index: usize) -> Res<Vec<Template>>;

    fn topology(&self, indices: &[usize]) -> Res<Topology>;

    fn assign_partition(&self, template_id: &str, device_uuid: &str) -> Res<Partition>;

    /// Remove the newest partition of `template_id` on the device, or the
    /// partition whose UUID is `template_id`.
    fn remove_partition(&self, template_id: &str, device_uuid: &str) -> Res<()>;

    /// Checkpoint the device state of `pids` (all of them or none: a failure
    /// rolls back the ones already done). `device_uuid` empty = any device.
    fn snapshot(&self, pids: &[i32], device_uuid: &str) -> Res<()>;

    fn resume(&self, pids: &[i32], device_uuid: &str) -> Res<()>;

    fn process_compute(&self, query: &ProcessQuery) -> Res<Vec<ProcessCompute>>;

    fn process_memory(&self, query: &ProcessQuery) -> Res<Vec<ProcessMemory>>;

    fn metrics(&self, device_uuid: &str) -> Res<Metrics>;

    fn extended_metrics(&self, device_uuid: &str) -> Res<ExtendedMetrics>;

    /// What the driver says of one partition, by its UUID (v2 metrics):
    /// NOT_FOUND when `uuid` names no partition.
    fn partition_metrics(&self, uuid: &str) -> Res<Metrics>;

    /// The vendor's user-space driver files a container needs (the
    /// project's own preload library is added by the caller).
    fn mount_libs(&self) -> Res<Vec<Mount>>;

    /// Per-process SM utilization samples on a device newer than `since`
    /// (the host compute sampler's input, `sampler.rs`); none newer is an
    /// empty list. NOT_SUPPORTED where the driver cannot say: then no
    /// sampler runs.
    fn process_utilization(&self, device_uuid: &str, since: u64) -> Res<Vec<UtilizationSample>> {
        let _ = (device_uuid, since);
        Err(accel_common::Error::NotSupported(format!(
            "per-process utilization samples ({} vendor)",
            self.name()
        )))
    }
}

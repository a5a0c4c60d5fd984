//! The C types of ABI.md, field for field. Names, order and array sizes are
//! the contract: do not change them. `c-tests/layout.c` checks every offset
//! against `tests/layout.rs`.

use libc::{c_char, pid_t};

pub use accel_common::ResultCode;

#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IsolationMode {
    Shared = 0,
    Soft = 1,
    Hard = 2,
    Partitioned = 3,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct DeviceCapabilities {
    pub supportsPartitioning: bool,
    pub supportsSoftIsolation: bool,
    pub supportsHardIsolation: bool,
    pub supportsSnapshot: bool,
    pub supportsMetrics: bool,
    pub maxPartitions: u32,
    pub maxWorkersPerDevice: u32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct DeviceBasicInfo {
    pub uuid: [c_char; 64],
    pub vendor: [c_char; 32],
    pub model: [c_char; 128],
    pub driverVersion: [c_char; 64],
    pub firmwareVersion: [c_char; 64],
    pub index: i32,
    pub numaNode: i32,
    pub totalMemoryBytes: u64,
    pub totalComputeUnits: u64,
    pub maxTflops: f64,
    pub pcieGen: u32,
    pub pcieWidth: u32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct DeviceProperties {
    pub clockGraphics: u32,
    pub clockSM: u32,
    pub clockMem: u32,
    pub clockAI: u32,
    pub powerLimit: u32,
    pub temperatureThreshold: u32,
    pub eccEnabled: bool,
    pub persistenceModeEnabled: bool,
    pub computeCapability: [c_char; 16],
    pub chipType: [c_char; 32],
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct RelatedDevice {
    pub deviceUUID: [c_char; 64],
    pub connectionType: [c_char; 32],
    pub bandwidthMBps: u32,
    pub latencyNs: u32,
}

#[repr(C)]
#[derive(Debug)]
pub struct ExtendedDeviceInfo {
    pub basic: DeviceBasicInfo,
    pub props: DeviceProperties,
    pub relatedDevices: *mut RelatedDevice,
    pub relatedDeviceCount: usize,
    pub capabilities: DeviceCapabilities,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct PartitionTemplate {
    pub templateId: [c_char; 64],
    pub name: [c_char; 128],
    pub memoryBytes: u64,
    pub computeUnits: u64,
    pub tflops: f64,
    pub sliceCount: u32,
    pub isDefault: bool,
    pub description: [c_char; 256],
}

#[repr(C)]
#[derive(Debug)]
pub struct DeviceTopology {
    pub deviceUUID: [c_char; 64],
    pub numaNode: i32,
    pub connections: *mut RelatedDevice,
    pub connectionCount: usize,
}

#[repr(C)]
#[derive(Debug)]
pub struct ExtendedDeviceTopology {
    pub devices: *mut DeviceTopology,
    pub deviceCount: usize,
    pub nvlinkBandwidthMBps: u32,
    pub ibNicCount: u32,
    pub topologyType: [c_char; 32],
}

#[repr(C)]
#[derive(Debug)]
pub struct PartitionAssignment {
    pub templateId: [c_char; 64],
    pub deviceUUID: [c_char; 64],
    pub partitionUUID: [c_char; 64],
    pub partitionOverheadBytes: u64,
}

#[repr(C)]
#[derive(Debug)]
pub struct WorkerInfo {
    pub workerId: [c_char; 64],
    pub deviceUUID: [c_char; 64],
    pub processId: pid_t,
    pub memoryLimitBytes: u64,
    pub computeUnitLimit: u32,
    pub isolationMode: IsolationMode,
}

#[repr(C)]
#[derive(Debug)]
pub struct ProcessArray {
    pub processIds: *mut pid_t,
    pub processCount: usize,
    pub deviceUUID: [c_char; 64],
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ComputeUtilization {
    pub processId: [c_char; 32],
    pub deviceUUID: [c_char; 64],
    pub utilizationPercent: f64,
    pub activeSMs: u64,
    pub totalSMs: u64,
    pub tflopsUsed: f64,
}

/// One worker's compute request, limit, priority and grant on one device
/// (soft mode, docs/compute.md), and the device time its live processes
/// took so far: two readings give its measured share.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct WorkerShare {
    pub workerId: [c_char; 64],
    pub deviceUUID: [c_char; 64],
    /// Percent; 0: best-effort.
    pub requestPercent: u32,
    /// The hard limit, percent; 0: none.
    pub limitPercent: u32,
    /// 1..=100, higher first.
    pub priority: u32,
    /// The share the host's scheduler grants, basis points of the device;
    /// 0: none (the hard limit applies).
    pub grantedBasisPoints: u32,
    /// ns of the device the worker's live processes took so far.
    pub usedNs: u64,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct MemoryUtilization {
    pub processId: [c_char; 32],
    pub deviceUUID: [c_char; 64],
    pub usedBytes: u64,
    pub reservedBytes: u64,
    pub utilizationPercent: f64,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct DeviceMetrics {
    pub deviceUUID: [c_char; 64],
    pub powerUsageWatts: f64,
    pub temperatureCelsius: f64,
    pub pcieRxBytes: u64,
    pub pcieTxBytes: u64,
    pub smActivePercent: u32,
    pub tensorCoreUsagePercent: u32,
    pub memoryUsedBytes: u64,
    pub memoryTotalBytes: u64,
}

#[repr(C)]
#[derive(Debug)]
pub struct ExtendedDeviceMetrics {
    pub deviceUUID: [c_char; 64],
    pub nvlinkBandwidthMBps: *mut u32,
    pub nvlinkCount: usize,
    pub ibNicBandwidthMBps: *mut u64,
    pub ibNicCount: usize,
    pub pcieBandwidthMBps: *mut u32,
    pub pcieLinkCount: usize,
}

/// One row of `acceleratorGetPciDevices` (an extension, not in ABI.md): an
/// accelerator PCI shows, a device the vendor lists, or both, matched by
/// bus id. Fields a row does not have are "" / 0 / -1.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct AcceleratorPciDevice {
    /// "dddd:bb:dd.f"; "" for a vendor device PCI does not show.
    pub address: [c_char; 32],
    pub vendorId: u16,
    pub deviceId: u16,
    /// 24-bit class code (0x030200: 3D controller; 0x120000: processing accelerator).
    pub classCode: u32,
    /// "NVIDIA", "AMD", "Huawei", ...
    pub vendorName: [c_char; 32],
    /// -1 when none.
    pub numaNode: i32,
    /// -1 when the device is in no IOMMU group.
    pub iommuGroup: i32,
    /// Link speed in GT/s per lane (0 unknown) and lanes, now and at most.
    pub currentLinkSpeedGTs: f64,
    pub currentLinkWidth: u32,
    pub maxLinkSpeedGTs: f64,
    pub maxLinkWidth: u32,
    /// The kernel driver bound ("" when none).
    pub driver: [c_char; 64],
    pub sriovTotalVfs: u32,
    pub sriovNumVfs: u32,
    /// A virtual function's physical function ("" for a physical one).
    pub physfn: [c_char; 32],
    /// The vendor's device index and UUID; -1 and "" when it does not list it.
    pub deviceIndex: i32,
    pub deviceUUID: [c_char; 64],
    /// "listed", "not-listed", "passed-through", "other-vendor",
    /// "no-pci-record" or "simulated".
    pub state: [c_char; 16],
    /// Whether the two views disagree on this row.
    pub mismatch: bool,
    /// What the row is, in one line.
    pub note: [c_char; 256],
    /// What to do about a mismatch, in one line ("" when nothing).
    pub fix: [c_char; 256],
}

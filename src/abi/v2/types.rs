//! The C types of ABI-v2.md, field for field. Names, order and array sizes
//! are the contract; `c-tests/v2/layout.c` asserts every size and offset.
//!
//! Topology rows follow the hypervisor's Go layout (`int64
//! bandwidthBytesPerSec` in `DeviceTopoNode`: 80-byte nodes, a 332,808-byte
//! `ExtendedDeviceTopology`), not the upstream C header's 72-byte nodes.

use libc::{c_char, pid_t};

pub const MAX_DEVICE_PROPERTIES: usize = 64;
pub const MAX_TOPOLOGY_DEVICES: usize = 64;
pub const MAX_PARTITION_ENVS: usize = 16;
pub const MAX_ENV_KEY_LENGTH: usize = 64;
pub const MAX_ENV_VALUE_LENGTH: usize = 256;
pub const MAX_PROCESSES: usize = 1024;
pub const MAX_EXTRA_METRICS: usize = 64;
pub const MAX_MOUNT_PATH: usize = 512;
pub const MAX_PARTITION_DEVICE_NODES: usize = 16;
/// "hostPath=guestPath": two paths, the '=' and the NUL.
pub const MAX_PARTITION_DEVICE_NODE_LENGTH: usize = MAX_MOUNT_PATH * 2 + 2;

/// Outcome of every v2 call: the values and meanings of ABI.md's `Result`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(clippy::enum_variant_names)]
pub enum AccelResult {
    AccelSuccess = 0,
    AccelErrorInvalidParam = 1,
    AccelErrorNotFound = 2,
    AccelErrorNotSupported = 3,
    AccelErrorResourceExhausted = 4,
    AccelErrorOperationFailed = 5,
    AccelErrorInternal = 6,
}

/// The host's log sink: `level` is "DEBUG", "INFO", "WARN" or "ERROR" (never
/// "FATAL"); both strings are valid only during the call.
pub type LogCallbackFunc =
    Option<unsafe extern "C" fn(level: *const c_char, message: *const c_char)>;

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct VirtualizationCapabilities {
    pub supportsPartitioning: bool,
    pub supportsSoftIsolation: bool,
    pub supportsHardIsolation: bool,
    pub supportsSnapshot: bool,
    pub supportsMetrics: bool,
    pub supportsRemoting: bool,
    pub maxPartitions: u32,
    pub maxWorkersPerDevice: u32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct DeviceBasicInfo {
    pub uuid: [c_char; 64],
    pub vendor: [c_char; 32],
    pub model: [c_char; 128],
    pub driverVersion: [c_char; 80],
    pub firmwareVersion: [c_char; 64],
    /// The device's node, e.g. "/dev/nvidia0" ("" when unknown).
    pub deviceNode: [c_char; 64],
    pub index: i32,
    /// -1: no NUMA affinity.
    pub numaNode: i32,
    pub totalMemoryBytes: u64,
    pub totalComputeUnits: u64,
    pub maxTflops: f64,
    pub pcieGen: u32,
    pub pcieWidth: u32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct DevicePropertyKV {
    pub key: [c_char; MAX_ENV_KEY_LENGTH],
    pub value: [c_char; MAX_ENV_VALUE_LENGTH],
}

/// Key/value properties; the keys are documented in docs/hypervisor.md.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct DeviceProperties {
    pub properties: [DevicePropertyKV; MAX_DEVICE_PROPERTIES],
    pub count: usize,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ExtendedDeviceInfo {
    pub basic: DeviceBasicInfo,
    pub props: DeviceProperties,
    pub virtualizationCapabilities: VirtualizationCapabilities,
}

/// As ABI.md's PartitionTemplate; no v2 function uses it.
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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TopoLevelType {
    TopoLevelInternal = 0,
    TopoLevelSingleSwitch = 1,
    TopoLevelMultiSwitch = 2,
    TopoLevelHostBridge = 3,
    TopoLevelNumaNode = 4,
    TopoLevelSystem = 5,
    TopoLevelSelf = 6,
    TopoLevelUnknown = 7,
}

/// One peer of a topology row: the hypervisor's Go layout (80 bytes).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct DeviceTopoNode {
    pub peerUUID: [c_char; 64],
    pub peerIndex: i32,
    pub topoLevel: TopoLevelType,
    /// 0 when unknown.
    pub bandwidthBytesPerSec: i64,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct DeviceTopologyInfo {
    pub deviceUUID: [c_char; 64],
    pub deviceIndex: i32,
    pub numaNode: i32,
    pub peers: [DeviceTopoNode; MAX_TOPOLOGY_DEVICES],
    pub peerCount: usize,
}

/// 332,808 bytes (the hypervisor's Go layout; the upstream C header's
/// 300,040-byte version lacks bandwidthBytesPerSec).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ExtendedDeviceTopology {
    pub devices: [DeviceTopologyInfo; MAX_TOPOLOGY_DEVICES],
    pub deviceCount: usize,
}

#[repr(C)]
#[derive(Debug)]
pub struct SnapshotContext {
    pub processIds: *mut pid_t,
    pub processCount: usize,
    pub deviceUUID: *const c_char,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ExtraMetric {
    pub key: [c_char; 64],
    pub value: f64,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ProcessInformation {
    /// Decimal host pid.
    pub processId: [c_char; 32],
    pub deviceUUID: [c_char; 64],
    pub computeUtilizationPercent: f64,
    pub activeSMs: u64,
    pub totalSMs: u64,
    pub memoryUsedBytes: u64,
    pub memoryReservedBytes: u64,
    pub memoryUtilizationPercent: f64,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct DeviceMetrics {
    pub deviceUUID: [c_char; 64],
    pub powerUsageWatts: f64,
    pub temperatureCelsius: f64,
    pub pcieRxBytes: u64,
    pub pcieTxBytes: u64,
    /// The device's compute utilization.
    pub utilizationPercent: u32,
    pub memoryUsedBytes: u64,
    /// Keys documented in docs/hypervisor.md.
    pub extraMetrics: [ExtraMetric; MAX_EXTRA_METRICS],
    pub extraMetricsCount: usize,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct MountPath {
    pub hostPath: [c_char; MAX_MOUNT_PATH],
    pub guestPath: [c_char; MAX_MOUNT_PATH],
}

#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(clippy::enum_variant_names)]
pub enum PartitionResultType {
    PartitionTypeEnvironmentVariable = 0,
    PartitionTypeDeviceNode = 1,
}

/// cbindgen:field-names=[type, deviceUUID, envVars, deviceNodes]
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct PartitionResult {
    pub kind: PartitionResultType,
    /// The new partition's UUID.
    pub deviceUUID: [c_char; 64],
    /// "KEY=VALUE"; unused entries all zero.
    pub envVars: [[c_char; MAX_ENV_VALUE_LENGTH]; MAX_PARTITION_ENVS],
    /// "hostPath=guestPath"; unused entries all zero.
    pub deviceNodes: [[c_char; MAX_PARTITION_DEVICE_NODE_LENGTH]; MAX_PARTITION_DEVICE_NODES],
}

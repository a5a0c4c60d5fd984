//! libamd_smi.so, loaded at run time: the C structures AMD SMI fills, the
//! symbol table, and one safe wrapper per function. This is the only module
//! of the AMD vendor with `unsafe`.
//!
//! The library's version is read first and picks the layout of every
//! structure that changed between versions (`layout.rs`); those are read
//! by offset from a buffer sized for that layout plus headroom. The
//! structures every supported version shares are declared here, as
//! `amd_smi/amdsmi.h` lays them out; `tests::layouts` and
//! c-tests/amd_layout.c check their sizes and offsets (docs/amd.md). Calls
//! are serialized on one mutex. The library (`Symbols`) lives in a static and is
//! never unloaded, so processor handles and function pointers stay valid.

use super::error::{AmdError, Status};
use super::layout::{self, Layout};
use crate::cbuf::{c_str, known_u32, OutBuf, Padded, Zeroed};
use crate::dynlib::{optional, required, Symbols};
use std::ffi::{c_char, c_uint, c_void};
use std::sync::OnceLock;

/// Where ROCm installs the library, tried after `ACCELERATOR_AMDSMI_PATH`;
/// the bare names are left to the dynamic loader's path.
pub const SEARCH_PATHS: &[&str] = &[
    "/opt/rocm/lib/libamd_smi.so",
    "/opt/rocm/lib/libamd_smi.so.26",
    "/opt/rocm/lib/libamd_smi.so.25",
    "/opt/rocm/lib/libamd_smi.so.24",
    "libamd_smi.so",
    "libamd_smi.so.26",
    "libamd_smi.so.25",
    "libamd_smi.so.24",
];
pub const PATH_ENV: &str = "ACCELERATOR_AMDSMI_PATH";

/// amdsmi_init_flags_t: GPUs only.
const INIT_AMD_GPUS: u64 = 1 << 1;
/// processor_type_t.
const PROCESSOR_TYPE_AMD_GPU: u32 = 1;
/// AMDSMI_GPU_UUID_SIZE.
const UUID_SIZE: usize = 38;
/// amdsmi_temperature_type_t / amdsmi_temperature_metric_t.
pub const TEMP_HOTSPOT: u32 = 1;
pub const TEMP_CURRENT: u32 = 0;
pub const TEMP_CRITICAL: u32 = 5;
/// amdsmi_clk_type_t.
pub const CLK_GFX: u32 = 0;
pub const CLK_MEM: u32 = 4;
/// Processes offered to amdsmi_get_gpu_process_list per try.
const MAX_PROCS: usize = 256;

// ---------------------------------------------------------------- structs

#[repr(C)]
#[derive(Clone, Copy)]
pub struct PcieStatic {
    pub max_pcie_width: u16,
    /// MT/s
    pub max_pcie_speed: u32,
    /// The PCIe generation.
    pub pcie_interface_version: u32,
    pub slot_type: u32,
    pub reserved: [u64; 10],
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct PcieMetric {
    pub pcie_width: u16,
    pub pcie_speed: u32,
    pub pcie_bandwidth: u32,
    pub pcie_replay_count: u64,
    pub pcie_l0_to_recovery_count: u64,
    pub pcie_replay_roll_over_count: u64,
    pub pcie_nak_sent_count: u64,
    pub pcie_nak_received_count: u64,
    pub pcie_lc_perf_other_end_recovery_count: u32,
    pub reserved: [u64; 12],
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct PcieInfo {
    pub pcie_static: PcieStatic,
    pub pcie_metric: PcieMetric,
    pub reserved: [u64; 32],
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct PowerCapInfo {
    /// µW
    pub power_cap: u64,
    pub default_power_cap: u64,
    pub dpm_cap: u64,
    pub min_power_cap: u64,
    pub max_power_cap: u64,
    pub reserved: [u64; 3],
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ClkInfo {
    /// MHz
    pub clk: u32,
    pub min_clk: u32,
    pub max_clk: u32,
    pub clk_locked: u8,
    pub clk_deep_sleep: u8,
    pub reserved: [u32; 4],
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct EngineUsage {
    /// %
    pub gfx_activity: u32,
    pub umc_activity: u32,
    pub mm_activity: u32,
    pub reserved: [u32; 13],
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct VramUsage {
    /// MB
    pub vram_total: u32,
    pub vram_used: u32,
    pub reserved: [u32; 2],
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct LinkEntry {
    /// amdsmi_bdf_t of the peer.
    pub bdf: u64,
    /// Gb/s
    pub bit_rate: u32,
    pub max_bandwidth: u32,
    /// amdsmi_link_type_t
    pub link_type: u32,
    /// KB received / sent since load.
    pub read: u64,
    pub write: u64,
    pub reserved: [u64; 2],
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct LinkMetrics {
    pub num_links: u32,
    pub links: [LinkEntry; 64],
    pub reserved: [u64; 7],
}

impl Zeroed for PcieInfo {}
impl Zeroed for PowerCapInfo {}
impl Zeroed for ClkInfo {}
impl Zeroed for EngineUsage {}
impl Zeroed for VramUsage {}
impl Zeroed for LinkMetrics {}

// ------------------------------------------- what the versioned structures say

/// What this vendor reads of amdsmi_asic_info_t.
pub struct Asic {
    pub market_name: String,
    pub device_id: u64,
    /// None where AMD SMI marks it not supported.
    pub compute_units: Option<u32>,
}

/// What this vendor reads of amdsmi_vram_info_t.
pub struct Vram {
    /// amdsmi_vram_type_t
    pub vram_type: u32,
    pub size_mb: u64,
}

/// Socket power in W, each None where AMD SMI marks it not supported:
/// MI300 reports the current power, MI200 and earlier the average.
pub struct Power {
    pub current: Option<u32>,
    pub average: Option<u32>,
}

/// One process of amdsmi_get_gpu_process_list.
pub struct Proc {
    pub pid: u32,
    pub vram_bytes: u64,
}

/// The current accelerator partition profile.
#[derive(Clone, Copy)]
pub struct Profile {
    /// amdsmi_accelerator_partition_type_t
    pub profile_type: u32,
    pub num_partitions: u32,
    /// amdsmi_nps_caps_t: bit 0 NPS1, 1 NPS2, 2 NPS4, 3 NPS8.
    pub memory_caps: u32,
}

/// What amdsmi_topo_get_link_type says connects two GPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkKind {
    Pcie,
    Xgmi,
    Other,
}

// ---------------------------------------------------------------- symbols

/// A processor handle: an opaque pointer AMD SMI owns. Kept as an address
/// so devices can be shared between threads; only passed back to AMD SMI.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Handle(usize);

type H = *mut c_void;
type FnInit = unsafe extern "C" fn(u64) -> Status;
type FnSockets = unsafe extern "C" fn(*mut u32, *mut H) -> Status;
type FnProcessors = unsafe extern "C" fn(H, *mut u32, *mut H) -> Status;
type FnOut<T> = unsafe extern "C" fn(H, *mut T) -> Status;
type FnUuid = unsafe extern "C" fn(H, *mut c_uint, *mut c_char) -> Status;
type FnClock = unsafe extern "C" fn(H, u32, *mut ClkInfo) -> Status;
type FnPowerCap = unsafe extern "C" fn(H, u32, *mut PowerCapInfo) -> Status;
type FnTemp = unsafe extern "C" fn(H, u32, u32, *mut i64) -> Status;
type FnThroughput = unsafe extern "C" fn(H, *mut u64, *mut u64, *mut u64) -> Status;
/// A function filling a structure whose layout depends on the version.
type FnRaw = unsafe extern "C" fn(H, *mut c_void) -> Status;
type FnVersion = unsafe extern "C" fn(*mut c_void) -> Status;
type FnProcs = unsafe extern "C" fn(H, *mut u32, *mut c_void) -> Status;
type FnLinkType = unsafe extern "C" fn(H, H, *mut u64, *mut u32) -> Status;
type FnMinMax = unsafe extern "C" fn(H, H, *mut u64, *mut u64) -> Status;
type FnGetMode = unsafe extern "C" fn(H, *mut c_char, u32) -> Status;
type FnSetMode = unsafe extern "C" fn(H, u32) -> Status;
type FnProfile = unsafe extern "C" fn(H, *mut c_void, *mut u32) -> Status;

struct Required {
    socket_handles: FnSockets,
    processor_handles: FnProcessors,
    processor_type: FnOut<u32>,
    uuid: FnUuid,
}

#[derive(Default)]
struct Optional {
    shut_down: Option<unsafe extern "C" fn() -> Status>,
    bdf: Option<FnOut<u64>>,
    asic_info: Option<FnRaw>,
    vram_info: Option<FnRaw>,
    driver_info: Option<FnRaw>,
    vbios_info: Option<FnRaw>,
    pcie_info: Option<FnOut<PcieInfo>>,
    numa_affinity: Option<FnOut<i32>>,
    power_cap: Option<FnPowerCap>,
    clock_info: Option<FnClock>,
    ecc_enabled: Option<FnOut<u64>>,
    temp: Option<FnTemp>,
    power_info: Option<FnRaw>,
    activity: Option<FnOut<EngineUsage>>,
    vram_usage: Option<FnOut<VramUsage>>,
    pci_throughput: Option<FnThroughput>,
    link_metrics: Option<FnOut<LinkMetrics>>,
    process_list: Option<FnProcs>,
    link_type: Option<FnLinkType>,
    minmax_bandwidth: Option<FnMinMax>,
    get_compute_partition: Option<FnGetMode>,
    set_compute_partition: Option<FnSetMode>,
    get_memory_partition: Option<FnGetMode>,
    set_memory_partition: Option<FnSetMode>,
    partition_profile: Option<FnProfile>,
}

pub struct Smi {
    pub syms: Symbols,
    req: Required,
    opt: Optional,
    /// The library's version, as it reports it, and its layouts.
    pub version: String,
    pub layout: &'static Layout,
}

type R<T> = Result<T, AmdError>;

impl Smi {
    fn load() -> R<Smi> {
        let mut syms = Symbols::open(PATH_ENV, SEARCH_PATHS).map_err(AmdError::NotLoaded)?;
        let init: FnInit = required!(syms, "amdsmi_init");
        let lib_version: FnVersion = required!(syms, "amdsmi_get_lib_version");
        let req = Required {
            socket_handles: required!(syms, "amdsmi_get_socket_handles"),
            processor_handles: required!(syms, "amdsmi_get_processor_handles"),
            processor_type: required!(syms, "amdsmi_get_processor_type"),
            uuid: required!(syms, "amdsmi_get_gpu_device_uuid"),
        };
        let opt = Optional {
            shut_down: optional!(syms, "amdsmi_shut_down"),
            bdf: optional!(syms, "amdsmi_get_gpu_device_bdf"),
            asic_info: optional!(syms, "amdsmi_get_gpu_asic_info"),
            vram_info: optional!(syms, "amdsmi_get_gpu_vram_info"),
            driver_info: optional!(syms, "amdsmi_get_gpu_driver_info"),
            vbios_info: optional!(syms, "amdsmi_get_gpu_vbios_info"),
            pcie_info: optional!(syms, "amdsmi_get_pcie_info"),
            numa_affinity: optional!(syms, "amdsmi_get_gpu_topo_numa_affinity"),
            power_cap: optional!(syms, "amdsmi_get_power_cap_info"),
            clock_info: optional!(syms, "amdsmi_get_clock_info"),
            ecc_enabled: optional!(syms, "amdsmi_get_gpu_ecc_enabled"),
            temp: optional!(syms, "amdsmi_get_temp_metric"),
            power_info: optional!(syms, "amdsmi_get_power_info"),
            activity: optional!(syms, "amdsmi_get_gpu_activity"),
            vram_usage: optional!(syms, "amdsmi_get_gpu_vram_usage"),
            pci_throughput: optional!(syms, "amdsmi_get_gpu_pci_throughput"),
            link_metrics: optional!(syms, "amdsmi_get_link_metrics"),
            process_list: optional!(syms, "amdsmi_get_gpu_process_list"),
            link_type: optional!(syms, "amdsmi_topo_get_link_type"),
            minmax_bandwidth: optional!(syms, "amdsmi_get_minmax_bandwidth_between_processors"),
            get_compute_partition: optional!(syms, "amdsmi_get_gpu_compute_partition"),
            set_compute_partition: optional!(syms, "amdsmi_set_gpu_compute_partition"),
            get_memory_partition: optional!(syms, "amdsmi_get_gpu_memory_partition"),
            set_memory_partition: optional!(syms, "amdsmi_set_gpu_memory_partition"),
            partition_profile: optional!(syms, "amdsmi_get_gpu_accelerator_partition_profile"),
        };
        // SAFETY: documented signature; GPUs only, as the issue asks.
        AmdError::check("amdsmi_init", unsafe { init(INIT_AMD_GPUS) })?;
        let (version, layout) = match version_of(lib_version) {
            Ok((version, Some(layout))) => (version, layout),
            Ok((found, None)) => {
                shut_down(opt.shut_down);
                return Err(AmdError::Refused(format!(
                    "{} is AMD SMI {found}, whose structure layouts this build does not know; \
                     it reads AMD SMI {}",
                    syms.path,
                    layout::supported()
                )));
            }
            Err(e) => {
                shut_down(opt.shut_down);
                return Err(e);
            }
        };
        Ok(Smi {
            syms,
            req,
            opt,
            version,
            layout,
        })
    }

    /// Run `f` with the AMD SMI lock held (one library per process:
    /// `shared`).
    fn call<T>(&self, f: impl FnOnce() -> T) -> T {
        super::locks::DRIVER.run(f)
    }

    /// `amdsmi_shut_down`, when discovery gives up after a successful init.
    pub fn shut_down(&self) {
        self.call(|| shut_down(self.opt.shut_down));
    }

    /// Whether any live figure can be read.
    pub fn has_metrics(&self) -> bool {
        let o = &self.opt;
        o.power_info.is_some() || o.activity.is_some() || o.vram_usage.is_some() || o.temp.is_some()
    }

    /// Every AMD GPU's processor handle, socket by socket (and any processor
    /// whose type query fails).
    pub fn gpus(&self) -> R<Vec<Handle>> {
        let mut n: u32 = 0;
        // SAFETY: a NULL array asks for the count only.
        let rc = self.call(|| unsafe { (self.req.socket_handles)(&mut n, std::ptr::null_mut()) });
        AmdError::check("amdsmi_get_socket_handles", rc)?;
        let mut sockets: Vec<H> = vec![std::ptr::null_mut(); n as usize];
        // SAFETY: `sockets` holds `n` handles, the count passed.
        let rc = self.call(|| unsafe { (self.req.socket_handles)(&mut n, sockets.as_mut_ptr()) });
        AmdError::check("amdsmi_get_socket_handles", rc)?;
        sockets.truncate(n as usize);
        let mut out = Vec::new();
        for s in sockets {
            let mut k: u32 = 0;
            // SAFETY: count only, for a socket AMD SMI just gave.
            let rc = self
                .call(|| unsafe { (self.req.processor_handles)(s, &mut k, std::ptr::null_mut()) });
            AmdError::check("amdsmi_get_processor_handles", rc)?;
            let mut procs: Vec<H> = vec![std::ptr::null_mut(); k as usize];
            // SAFETY: `procs` holds `k` handles, the count passed.
            let rc = self
                .call(|| unsafe { (self.req.processor_handles)(s, &mut k, procs.as_mut_ptr()) });
            AmdError::check("amdsmi_get_processor_handles", rc)?;
            procs.truncate(k as usize);
            for p in procs {
                let mut t: u32 = 0;
                // SAFETY: `p` is a handle AMD SMI gave; `t` a processor_type_t.
                let rc = self.call(|| unsafe { (self.req.processor_type)(p, &mut t) });
                // A processor that cannot say is kept: the identity query
                // that follows decides (and reports) whether it is usable.
                if rc != 0 || t == PROCESSOR_TYPE_AMD_GPU {
                    out.push(Handle(p as usize));
                }
            }
        }
        Ok(out)
    }

    pub fn uuid(&self, h: Handle) -> R<String> {
        let mut buf = [0u8; UUID_SIZE + 26];
        let mut len = buf.len() as c_uint;
        // SAFETY: `buf` holds `len` bytes (≥ AMDSMI_GPU_UUID_SIZE).
        let rc =
            self.call(|| unsafe { (self.req.uuid)(ptr(h), &mut len, buf.as_mut_ptr().cast()) });
        AmdError::check("amdsmi_get_gpu_device_uuid", rc)?;
        Ok(c_str(&buf))
    }

    /// One call of an optional `f(handle, *out)` function, into a T with
    /// headroom behind it.
    fn out<T: Zeroed>(&self, f: Option<FnOut<T>>, name: &'static str, h: Handle) -> R<T> {
        let f = f.ok_or(AmdError::MissingOptional(name))?;
        let mut v = Padded::<T>::new();
        // SAFETY: `f` has this signature; `v` is a T (and room) to fill.
        let rc = self.call(|| unsafe { f(ptr(h), v.ptr()) });
        AmdError::check(name, rc).map(|()| v.value)
    }

    /// One call of an optional `f(handle, *out)` function whose structure
    /// is `size` bytes in this version.
    fn raw(&self, f: Option<FnRaw>, name: &'static str, h: Handle, size: usize) -> R<OutBuf> {
        let f = f.ok_or(AmdError::MissingOptional(name))?;
        let mut b = OutBuf::new(size);
        // SAFETY: `b` holds this version's structure and headroom.
        let rc = self.call(|| unsafe { f(ptr(h), b.ptr()) });
        AmdError::check(name, rc).map(|()| b)
    }

    pub fn bdf(&self, h: Handle) -> R<u64> {
        self.out(self.opt.bdf, "amdsmi_get_gpu_device_bdf", h)
    }
    pub fn asic_info(&self, h: Handle) -> R<Asic> {
        let l = self.layout;
        let b = self.raw(
            self.opt.asic_info,
            "amdsmi_get_gpu_asic_info",
            h,
            l.asic_size,
        )?;
        Ok(Asic {
            market_name: b.str(0, 256),
            device_id: b.u64(l.asic_device_id),
            compute_units: known_u32(b.u32(l.asic_cus)),
        })
    }
    pub fn vram_info(&self, h: Handle) -> R<Vram> {
        let l = self.layout;
        let b = self.raw(
            self.opt.vram_info,
            "amdsmi_get_gpu_vram_info",
            h,
            l.vram_size_of,
        )?;
        Ok(Vram {
            vram_type: b.u32(0),
            size_mb: b.u64(l.vram_size),
        })
    }
    pub fn driver_version(&self, h: Handle) -> R<String> {
        let l = self.layout;
        let b = self.raw(
            self.opt.driver_info,
            "amdsmi_get_gpu_driver_info",
            h,
            l.driver_size,
        )?;
        Ok(b.str(0, l.driver_version_len))
    }
    pub fn vbios_version(&self, h: Handle) -> R<String> {
        let l = self.layout;
        let b = self.raw(
            self.opt.vbios_info,
            "amdsmi_get_gpu_vbios_info",
            h,
            l.vbios_size,
        )?;
        Ok(b.str(l.vbios_version, l.vbios_version_len))
    }
    pub fn pcie_info(&self, h: Handle) -> R<PcieInfo> {
        self.out(self.opt.pcie_info, "amdsmi_get_pcie_info", h)
    }
    pub fn numa_node(&self, h: Handle) -> R<i32> {
        self.out(
            self.opt.numa_affinity,
            "amdsmi_get_gpu_topo_numa_affinity",
            h,
        )
    }
    /// The bit mask of GPU blocks with ECC enabled (amdsmi_gpu_block_t).
    pub fn ecc_enabled(&self, h: Handle) -> R<u64> {
        self.out(self.opt.ecc_enabled, "amdsmi_get_gpu_ecc_enabled", h)
    }
    pub fn power_info(&self, h: Handle) -> R<Power> {
        let l = self.layout;
        let b = self.raw(
            self.opt.power_info,
            "amdsmi_get_power_info",
            h,
            l.power_size,
        )?;
        Ok(Power {
            current: known_u32(b.u32(l.power_current)),
            average: known_u32(b.u32(l.power_average)),
        })
    }
    pub fn activity(&self, h: Handle) -> R<EngineUsage> {
        self.out(self.opt.activity, "amdsmi_get_gpu_activity", h)
    }
    pub fn vram_usage(&self, h: Handle) -> R<VramUsage> {
        self.out(self.opt.vram_usage, "amdsmi_get_gpu_vram_usage", h)
    }
    pub fn link_metrics(&self, h: Handle) -> R<LinkMetrics> {
        self.out(self.opt.link_metrics, "amdsmi_get_link_metrics", h)
    }

    pub fn power_cap(&self, h: Handle) -> R<PowerCapInfo> {
        let name = "amdsmi_get_power_cap_info";
        let f = self.opt.power_cap.ok_or(AmdError::MissingOptional(name))?;
        let mut v = Padded::<PowerCapInfo>::new();
        // SAFETY: documented signature; sensor 0.
        let rc = self.call(|| unsafe { f(ptr(h), 0, v.ptr()) });
        AmdError::check(name, rc).map(|()| v.value)
    }

    /// One clock domain's current, minimum and maximum frequency.
    pub fn clock(&self, h: Handle, domain: u32) -> R<ClkInfo> {
        let name = "amdsmi_get_clock_info";
        let f = self.opt.clock_info.ok_or(AmdError::MissingOptional(name))?;
        let mut c = Padded::<ClkInfo>::new();
        // SAFETY: documented signature; `domain` an amdsmi_clk_type_t.
        let rc = self.call(|| unsafe { f(ptr(h), domain, c.ptr()) });
        AmdError::check(name, rc).map(|()| c.value)
    }

    /// A temperature metric of the hotspot sensor, as AMD SMI returns it.
    pub fn temperature(&self, h: Handle, metric: u32) -> R<i64> {
        let name = "amdsmi_get_temp_metric";
        let f = self.opt.temp.ok_or(AmdError::MissingOptional(name))?;
        let mut t: i64 = 0;
        // SAFETY: documented signature; enum values from amdsmi.h.
        let rc = self.call(|| unsafe { f(ptr(h), TEMP_HOTSPOT, metric, &mut t) });
        AmdError::check(name, rc).map(|()| t)
    }

    /// (bytes sent, bytes received) over PCIe in the last second.
    pub fn pci_throughput(&self, h: Handle) -> R<(u64, u64)> {
        let name = "amdsmi_get_gpu_pci_throughput";
        let f = self
            .opt
            .pci_throughput
            .ok_or(AmdError::MissingOptional(name))?;
        let (mut sent, mut recv, mut pkt) = (0u64, 0u64, 0u64);
        // SAFETY: documented signature, three u64 outputs.
        let rc = self.call(|| unsafe { f(ptr(h), &mut sent, &mut recv, &mut pkt) });
        AmdError::check(name, rc).map(|()| (sent, recv))
    }

    /// The processes using the device, grown until the list fits. Each
    /// entry is read at this version's stride, in a buffer with room for
    /// entries twice that size.
    pub fn processes(&self, h: Handle) -> R<Vec<Proc>> {
        let name = "amdsmi_get_gpu_process_list";
        let f = self
            .opt
            .process_list
            .ok_or(AmdError::MissingOptional(name))?;
        let l = self.layout;
        let mut room = 16usize;
        loop {
            let mut list = OutBuf::new(room * l.proc_size * 2);
            let mut n = room as u32;
            // SAFETY: `list` holds `n` entries of this version, the size passed.
            let rc = self.call(|| unsafe { f(ptr(h), &mut n, list.ptr()) });
            if rc == super::error::status::OUT_OF_RESOURCES && room < MAX_PROCS && n as usize > room
            {
                room = (n as usize).min(MAX_PROCS);
                continue;
            }
            AmdError::check(name, rc)?;
            return Ok((0..(n as usize).min(room))
                .map(|i| i * l.proc_size)
                .map(|at| Proc {
                    pid: list.u32(at + l.proc_pid),
                    vram_bytes: list.u64(at + l.proc_vram_mem),
                })
                .collect());
        }
    }

    /// (hops, link kind) between two GPUs.
    pub fn link_type(&self, a: Handle, b: Handle) -> R<(u64, LinkKind)> {
        let name = "amdsmi_topo_get_link_type";
        let f = self.opt.link_type.ok_or(AmdError::MissingOptional(name))?;
        let (mut hops, mut t) = (0u64, 0u32);
        // SAFETY: documented signature (the type an enum: 4 bytes).
        let rc = self.call(|| unsafe { f(ptr(a), ptr(b), &mut hops, &mut t) });
        AmdError::check(name, rc)?;
        let l = self.layout;
        let kind = match t {
            t if t == l.topo_xgmi => LinkKind::Xgmi,
            t if t == l.topo_pcie => LinkKind::Pcie,
            _ => LinkKind::Other,
        };
        Ok((hops, kind))
    }

    /// (min, max) bandwidth between XGMI neighbours, as AMD SMI gives it.
    pub fn minmax_bandwidth(&self, a: Handle, b: Handle) -> R<(u64, u64)> {
        let name = "amdsmi_get_minmax_bandwidth_between_processors";
        let f = self
            .opt
            .minmax_bandwidth
            .ok_or(AmdError::MissingOptional(name))?;
        let (mut lo, mut hi) = (0u64, 0u64);
        // SAFETY: documented signature.
        let rc = self.call(|| unsafe { f(ptr(a), ptr(b), &mut lo, &mut hi) });
        AmdError::check(name, rc).map(|()| (lo, hi))
    }

    fn get_mode(&self, f: Option<FnGetMode>, name: &'static str, h: Handle) -> R<String> {
        let f = f.ok_or(AmdError::MissingOptional(name))?;
        let mut buf = [0u8; 32];
        // SAFETY: `buf` holds the length passed.
        let rc = self.call(|| unsafe { f(ptr(h), buf.as_mut_ptr().cast(), buf.len() as u32) });
        AmdError::check(name, rc).map(|()| c_str(&buf))
    }

    /// The current compute partition mode ("SPX", "CPX", ...).
    pub fn compute_partition(&self, h: Handle) -> R<String> {
        self.get_mode(
            self.opt.get_compute_partition,
            "amdsmi_get_gpu_compute_partition",
            h,
        )
    }

    /// The current memory partition mode ("NPS1", "NPS4", ...).
    pub fn memory_partition(&self, h: Handle) -> R<String> {
        self.get_mode(
            self.opt.get_memory_partition,
            "amdsmi_get_gpu_memory_partition",
            h,
        )
    }

    fn set_mode(&self, f: Option<FnSetMode>, name: &'static str, h: Handle, mode: u32) -> R<()> {
        let f = f.ok_or(AmdError::MissingOptional(name))?;
        // SAFETY: documented signature; `mode` a value of the header's enum.
        AmdError::check(name, self.call(|| unsafe { f(ptr(h), mode) }))
    }

    pub fn set_compute_partition(&self, h: Handle, mode: u32) -> R<()> {
        self.set_mode(
            self.opt.set_compute_partition,
            "amdsmi_set_gpu_compute_partition",
            h,
            mode,
        )
    }

    pub fn set_memory_partition(&self, h: Handle, mode: u32) -> R<()> {
        self.set_mode(
            self.opt.set_memory_partition,
            "amdsmi_set_gpu_memory_partition",
            h,
            mode,
        )
    }

    /// The current accelerator partition profile (its `memory_caps` are the
    /// memory modes the device supports).
    pub fn partition_profile(&self, h: Handle) -> R<Profile> {
        let name = "amdsmi_get_gpu_accelerator_partition_profile";
        let f = self
            .opt
            .partition_profile
            .ok_or(AmdError::MissingOptional(name))?;
        let l = self.layout;
        let mut p = OutBuf::new(l.profile_size);
        let mut ids = Padded::<[u32; 8]>::new();
        // SAFETY: `p` holds this version's profile and headroom, `ids`
        // AMDSMI_MAX_ACCELERATOR_PARTITIONS entries and headroom.
        let rc = self.call(|| unsafe { f(ptr(h), p.ptr(), ids.ptr().cast()) });
        AmdError::check(name, rc)?;
        Ok(Profile {
            profile_type: p.u32(0),
            num_partitions: p.u32(4),
            memory_caps: p.u32(l.profile_memory_caps),
        })
    }
}

fn ptr(h: Handle) -> H {
    h.0 as H
}

fn shut_down(f: Option<unsafe extern "C" fn() -> Status>) {
    if let Some(f) = f {
        // SAFETY: documented signature, no arguments.
        let _ = unsafe { f() };
    }
}

/// amdsmi_get_lib_version: the version found and its layout, if known.
fn version_of(f: FnVersion) -> R<(String, Option<&'static Layout>)> {
    let mut b = OutBuf::new(layout::VERSION_SIZE);
    // SAFETY: `b` holds the largest amdsmi_version_t known, and headroom.
    AmdError::check("amdsmi_get_lib_version", unsafe { f(b.ptr()) })?;
    Ok(layout::detect([b.u32(0), b.u32(4), b.u32(8), b.u32(12)]))
}

/// The process-wide AMD SMI: loaded and initialized on first use.
pub fn shared() -> Result<&'static Smi, AmdError> {
    static SMI: OnceLock<Result<Smi, AmdError>> = OnceLock::new();
    SMI.get_or_init(Smi::load).as_ref().map_err(Clone::clone)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    /// The structures every supported version shares, at the figures of
    /// amd_smi/amdsmi.h 24.7 to 26.x (c-tests/amd_layout.c checks the same
    /// for the fake's C declarations; layout.rs holds those that differ).
    #[test]
    fn layouts() {
        assert_eq!(size_of::<PcieInfo>(), 512);
        assert_eq!(offset_of!(PcieInfo, pcie_metric), 96);
        assert_eq!(offset_of!(PcieStatic, max_pcie_speed), 4);
        assert_eq!(offset_of!(PcieStatic, pcie_interface_version), 8);
        assert_eq!(offset_of!(PcieMetric, pcie_speed), 4);
        assert_eq!(size_of::<PowerCapInfo>(), 64);
        assert_eq!(offset_of!(PowerCapInfo, max_power_cap), 32);
        assert_eq!(size_of::<ClkInfo>(), 32);
        assert_eq!(offset_of!(ClkInfo, max_clk), 8);
        assert_eq!(size_of::<EngineUsage>(), 64);
        assert_eq!(size_of::<VramUsage>(), 16);
        assert_eq!(offset_of!(VramUsage, vram_used), 4);
        assert_eq!(size_of::<LinkMetrics>(), 3648);
        assert_eq!(offset_of!(LinkMetrics, links), 8);
        assert_eq!(size_of::<LinkEntry>(), 56);
        assert_eq!(offset_of!(LinkEntry, bit_rate), 8);
        assert_eq!(offset_of!(LinkEntry, link_type), 16);
        assert_eq!(offset_of!(LinkEntry, read), 24);
    }
}

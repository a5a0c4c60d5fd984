//! libdcmi.so, loaded at run time: the C structures DCMI fills, the symbol
//! table, and one safe wrapper per function. This is the only module of the
//! Ascend vendor with `unsafe`.
//!
//! Every call is serialized on one mutex: DCMI does not document whether it
//! is thread safe. The library is loaded and `dcmi_init` called once per
//! load of our library (see `shared`); the `Library` lives in a static and is
//! never unloaded, so the function pointers stay valid for the process.

use super::error::AscendError;
pub use crate::cbuf::{c_chars, c_str};
use crate::cbuf::{Padded, Zeroed};
use crate::dynlib::{optional, required, Symbols};
use std::ffi::{c_char, c_int, c_uint, c_ulong, c_void};
use std::sync::OnceLock;

/// Where the driver installs libdcmi.so, tried in order after
/// `ACCELERATOR_DCMI_PATH`; the last is left to the dynamic loader's path.
pub const SEARCH_PATHS: &[&str] = &[
    "/usr/local/Ascend/driver/lib64/driver/libdcmi.so",
    "/usr/local/Ascend/driver/lib64/libdcmi.so",
    "/usr/local/dcmi/libdcmi.so",
    "libdcmi.so",
];
pub const PATH_ENV: &str = "ACCELERATOR_DCMI_PATH";

pub const MAX_CARDS: usize = 64;
/// dcmi_get_device_utilization_rate input types.
pub const UTIL_AICORE: c_int = 2;
/// enum dcmi_die_type.
pub const VDIE: c_int = 1;
/// enum dcmi_freq_type.
pub const FREQ_HBM: c_int = 6;
pub const FREQ_AICORE_MAX: c_int = 9;
/// enum dcmi_main_cmd / DCMI_VDEV_MNG_SUB_CMD.
const MAIN_CMD_VDEV_MNG: c_int = 52;
const VMNG_GET_VDEV_RESOURCE: c_uint = 0;
const VMNG_GET_TOTAL_RESOURCE: c_uint = 1;
/// Lets the driver choose the vNPU and group IDs (unverified, see docs).
pub const VDEV_ID_AUTO: u32 = 0xFFFF_FFFF;
/// Process entries offered to dcmi_get_device_resource_info.
const MAX_PROCS: usize = 1024;

// ---------------------------------------------------------------- structs

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ChipInfo {
    pub chip_type: [u8; 32],
    pub chip_name: [u8; 32],
    pub chip_ver: [u8; 32],
    pub aicore_cnt: c_uint,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ChipInfoV2 {
    pub chip_type: [u8; 32],
    pub chip_name: [u8; 32],
    pub chip_ver: [u8; 32],
    pub aicore_cnt: c_uint,
    pub npu_name: [u8; 32],
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct PcieInfoAll {
    pub venderid: c_uint,
    pub subvenderid: c_uint,
    pub deviceid: c_uint,
    pub subdeviceid: c_uint,
    pub domain: c_int,
    pub bdf_busid: c_uint,
    pub bdf_deviceid: c_uint,
    pub bdf_funcid: c_uint,
    pub reserve: [u8; 32],
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct DieId {
    pub soc_die: [c_uint; 5],
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct HbmInfo {
    /// MB
    pub memory_size: u64,
    /// MHz
    pub freq: c_uint,
    /// MB
    pub memory_usage: u64,
    pub temp: c_int,
    pub bandwith_util_rate: c_uint,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct MemoryInfoV3 {
    /// MB
    pub memory_size: u64,
    /// MB
    pub memory_available: u64,
    pub freq: c_uint,
    pub hugepagesize: c_ulong,
    pub hugepages_total: c_ulong,
    pub hugepages_free: c_ulong,
    pub utiliza: c_uint,
    pub reserve: [u8; 60],
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ProcMemInfo {
    pub proc_id: c_int,
    pub proc_mem_usage: c_ulong,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct CreateVdevRes {
    pub vdev_id: c_uint,
    pub vfg_id: c_uint,
    pub template_name: [c_char; 32],
    pub reserved: [u8; 64],
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct CreateVdevOut {
    pub vdev_id: c_uint,
    pub pcie_bus: c_uint,
    pub pcie_device: c_uint,
    pub pcie_func: c_uint,
    pub vfg_id: c_uint,
    pub reserved: [u8; 32],
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct BaseResource {
    pub token: u64,
    pub token_max: u64,
    pub task_timeout: u64,
    pub vfg_id: c_uint,
    pub vip_mode: u8,
    pub reserved: [u8; 31],
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ComputingResource {
    pub aic: f32,
    pub aiv: f32,
    pub dsa: u16,
    pub rtsq: u16,
    pub acsq: u16,
    pub cdqm: u16,
    pub c_core: u16,
    pub ffts: u16,
    pub sdma: u16,
    pub pcie_dma: u16,
    /// MB
    pub memory_size: u64,
    pub event_id: c_uint,
    pub notify_id: c_uint,
    pub stream_id: c_uint,
    pub model_id: c_uint,
    pub topic_schedule_aicpu: u16,
    pub host_ctrl_cpu: u16,
    pub host_aicpu: u16,
    pub device_aicpu: u16,
    pub topic_ctrl_cpu_slot: u16,
    pub vdev_aicore_utilization: c_uint,
    pub vdev_memory_total: u64,
    pub vdev_memory_free: u64,
    pub reserved: [u8; 12],
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct MediaResource {
    pub jpegd: f32,
    pub jpege: f32,
    pub vpc: f32,
    pub vdec: f32,
    pub pngd: f32,
    pub venc: f32,
    pub reserved: [u8; 32],
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct SocTotalResource {
    pub vdev_num: c_uint,
    pub vdev_id: [c_uint; 32],
    pub vfg_num: c_uint,
    pub vfg_bitmap: c_uint,
    pub base: BaseResource,
    pub computing: ComputingResource,
    pub media: MediaResource,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct VdevQueryInfo {
    pub name: [c_char; 16],
    pub status: c_uint,
    pub is_container_used: c_uint,
    pub vfid: c_uint,
    pub vfg_id: c_uint,
    pub container_id: u64,
    pub base: BaseResource,
    pub computing: ComputingResource,
    pub media: MediaResource,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct VdevQuery {
    pub vdev_id: c_uint,
    pub query_info: VdevQueryInfo,
}

impl Zeroed for ChipInfo {}
impl Zeroed for ChipInfoV2 {}
impl Zeroed for PcieInfoAll {}
impl Zeroed for DieId {}
impl Zeroed for HbmInfo {}
impl Zeroed for MemoryInfoV3 {}
impl Zeroed for ProcMemInfo {}
impl Zeroed for CreateVdevRes {}
impl Zeroed for CreateVdevOut {}
impl Zeroed for SocTotalResource {}
impl Zeroed for VdevQuery {}

// ---------------------------------------------------------------- symbols

type FnVoid = unsafe extern "C" fn() -> c_int;
type FnCardList = unsafe extern "C" fn(*mut c_int, *mut c_int, c_int) -> c_int;
type FnNumInCard = unsafe extern "C" fn(c_int, *mut c_int) -> c_int;
type FnLogicId = unsafe extern "C" fn(*mut c_int, c_int, c_int) -> c_int;
type FnOut<T> = unsafe extern "C" fn(c_int, c_int, *mut T) -> c_int;
type FnTyped<T> = unsafe extern "C" fn(c_int, c_int, c_int, *mut T) -> c_int;
type FnVersion = unsafe extern "C" fn(*mut c_char, c_uint) -> c_int;
type FnCreate = unsafe extern "C" fn(c_int, c_int, *mut CreateVdevRes, *mut CreateVdevOut) -> c_int;
type FnDestroy = unsafe extern "C" fn(c_int, c_int, c_uint) -> c_int;
type FnDevInfo =
    unsafe extern "C" fn(c_int, c_int, c_int, c_uint, *mut c_void, *mut c_uint) -> c_int;
type FnTopo = unsafe extern "C" fn(c_int, c_int, c_int, c_int, *mut c_int) -> c_int;
type FnProcs = unsafe extern "C" fn(c_int, c_int, *mut ProcMemInfo, *mut c_int) -> c_int;

struct Required {
    init: FnVoid,
    /// `dcmi_get_card_list`, or on drivers that predate it the deprecated
    /// V1 name `dcmi_get_card_num_list` (same signature); `card_list_name`
    /// says which, for messages.
    card_list: FnCardList,
    card_list_name: &'static str,
    device_num_in_card: FnNumInCard,
    chip_info: FnOut<ChipInfo>,
}

#[derive(Default)]
struct Optional {
    logic_id: Option<FnLogicId>,
    chip_info_v2: Option<FnOut<ChipInfoV2>>,
    pcie_info_v2: Option<FnOut<PcieInfoAll>>,
    die_v2: Option<FnTyped<DieId>>,
    hbm_info: Option<FnOut<HbmInfo>>,
    memory_info_v3: Option<FnOut<MemoryInfoV3>>,
    power_info: Option<FnOut<c_int>>,
    temperature: Option<FnOut<c_int>>,
    utilization_rate: Option<FnTyped<c_uint>>,
    frequency: Option<FnTyped<c_uint>>,
    driver_version: Option<FnVersion>,
    create_vdevice: Option<FnCreate>,
    destroy_vdevice: Option<FnDestroy>,
    device_info: Option<FnDevInfo>,
    topo_info: Option<FnTopo>,
    resource_info: Option<FnProcs>,
}

/// Optional DCMI functions, for capability checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Feature {
    Power,
    Temperature,
    Utilization,
    Memory,
    Vnpu,
}

pub struct Dcmi {
    pub syms: Symbols,
    req: Required,
    opt: Optional,
}

type R<T> = Result<T, AscendError>;

impl Dcmi {
    fn load() -> R<Dcmi> {
        let mut syms = Symbols::open(PATH_ENV, SEARCH_PATHS).map_err(AscendError::NotLoaded)?;
        // SAFETY: both names have the signature DCMI documents for dcmi_get_card_list.
        let (card_list, card_list_name) = match unsafe { syms.get("dcmi_get_card_list") } {
            Some(f) => (f, "dcmi_get_card_list"),
            // SAFETY: as above.
            None => match unsafe { syms.get("dcmi_get_card_num_list") } {
                Some(f) => (f, "dcmi_get_card_num_list"),
                None => {
                    return Err(AscendError::MissingRequired(
                        "dcmi_get_card_list (or its V1 name dcmi_get_card_num_list)",
                    ))
                }
            },
        };
        let req = Required {
            init: required!(syms, "dcmi_init"),
            card_list,
            card_list_name,
            device_num_in_card: required!(syms, "dcmi_get_device_num_in_card"),
            chip_info: required!(syms, "dcmi_get_device_chip_info"),
        };
        let opt = Optional {
            logic_id: optional!(syms, "dcmi_get_device_logic_id"),
            chip_info_v2: optional!(syms, "dcmi_get_device_chip_info_v2"),
            pcie_info_v2: optional!(syms, "dcmi_get_device_pcie_info_v2"),
            die_v2: optional!(syms, "dcmi_get_device_die_v2"),
            hbm_info: optional!(syms, "dcmi_get_device_hbm_info"),
            memory_info_v3: optional!(syms, "dcmi_get_device_memory_info_v3"),
            power_info: optional!(syms, "dcmi_get_device_power_info"),
            temperature: optional!(syms, "dcmi_get_device_temperature"),
            utilization_rate: optional!(syms, "dcmi_get_device_utilization_rate"),
            frequency: optional!(syms, "dcmi_get_device_frequency"),
            driver_version: optional!(syms, "dcmi_get_driver_version"),
            create_vdevice: optional!(syms, "dcmi_create_vdevice"),
            destroy_vdevice: optional!(syms, "dcmi_set_destroy_vdevice"),
            device_info: optional!(syms, "dcmi_get_device_info"),
            topo_info: optional!(syms, "dcmi_get_topo_info_by_device_id"),
            resource_info: optional!(syms, "dcmi_get_device_resource_info"),
        };
        let dcmi = Dcmi { syms, req, opt };
        // SAFETY: documented signature, no arguments.
        AscendError::check("dcmi_init", dcmi.call(|| unsafe { (dcmi.req.init)() }))?;
        Ok(dcmi)
    }

    pub fn has(&self, f: Feature) -> bool {
        let o = &self.opt;
        match f {
            Feature::Power => o.power_info.is_some(),
            Feature::Temperature => o.temperature.is_some(),
            Feature::Utilization => o.utilization_rate.is_some(),
            Feature::Memory => o.hbm_info.is_some() || o.memory_info_v3.is_some(),
            Feature::Vnpu => {
                o.create_vdevice.is_some() && o.destroy_vdevice.is_some() && o.device_info.is_some()
            }
        }
    }

    /// Run `f` with the DCMI lock held (one library per process:
    /// `shared`).
    fn call<T>(&self, f: impl FnOnce() -> T) -> T {
        super::locks::DRIVER.run(f)
    }

    pub fn card_list(&self) -> R<Vec<i32>> {
        let mut num: c_int = 0;
        let mut list = [0 as c_int; MAX_CARDS];
        // SAFETY: list holds MAX_CARDS ints, the length passed.
        let rc = self.call(|| unsafe {
            (self.req.card_list)(&mut num, list.as_mut_ptr(), MAX_CARDS as c_int)
        });
        AscendError::check(self.req.card_list_name, rc)?;
        let n = usize::try_from(num).unwrap_or(0).min(MAX_CARDS);
        Ok(list[..n].to_vec())
    }

    pub fn device_num_in_card(&self, card: i32) -> R<i32> {
        let mut n: c_int = 0;
        // SAFETY: one int out.
        let rc = self.call(|| unsafe { (self.req.device_num_in_card)(card, &mut n) });
        AscendError::check("dcmi_get_device_num_in_card", rc)?;
        Ok(n.max(0))
    }

    pub fn logic_id(&self, card: i32, dev: i32) -> R<i32> {
        let f = self
            .opt
            .logic_id
            .ok_or(AscendError::MissingOptional("dcmi_get_device_logic_id"))?;
        let mut id: c_int = 0;
        // SAFETY: one int out.
        let rc = self.call(|| unsafe { f(&mut id, card, dev) });
        AscendError::check("dcmi_get_device_logic_id", rc)?;
        Ok(id)
    }

    pub fn chip_info(&self, card: i32, dev: i32) -> R<ChipInfo> {
        let mut out = Padded::<ChipInfo>::new();
        // SAFETY: out is a dcmi_chip_info, with headroom.
        let rc = self.call(|| unsafe { (self.req.chip_info)(card, dev, out.ptr()) });
        AscendError::check("dcmi_get_device_chip_info", rc)?;
        Ok(out.value)
    }

    fn out<T: Zeroed>(&self, f: Option<FnOut<T>>, name: &'static str, card: i32, dev: i32) -> R<T> {
        let f = f.ok_or(AscendError::MissingOptional(name))?;
        let mut out = Padded::<T>::new();
        // SAFETY: f's out parameter is a T (see the Optional table), with headroom.
        let rc = self.call(|| unsafe { f(card, dev, out.ptr()) });
        AscendError::check(name, rc)?;
        Ok(out.value)
    }

    fn typed<T: Zeroed>(
        &self,
        f: Option<FnTyped<T>>,
        name: &'static str,
        card: i32,
        dev: i32,
        kind: c_int,
    ) -> R<T> {
        let f = f.ok_or(AscendError::MissingOptional(name))?;
        let mut out = Padded::<T>::new();
        // SAFETY: f's out parameter is a T (see the Optional table), with headroom.
        let rc = self.call(|| unsafe { f(card, dev, kind, out.ptr()) });
        AscendError::check(name, rc)?;
        Ok(out.value)
    }

    pub fn chip_info_v2(&self, card: i32, dev: i32) -> R<ChipInfoV2> {
        self.out(
            self.opt.chip_info_v2,
            "dcmi_get_device_chip_info_v2",
            card,
            dev,
        )
    }

    pub fn pcie_info(&self, card: i32, dev: i32) -> R<PcieInfoAll> {
        self.out(
            self.opt.pcie_info_v2,
            "dcmi_get_device_pcie_info_v2",
            card,
            dev,
        )
    }

    pub fn die_id(&self, card: i32, dev: i32) -> R<DieId> {
        self.typed(self.opt.die_v2, "dcmi_get_device_die_v2", card, dev, VDIE)
    }

    pub fn hbm_info(&self, card: i32, dev: i32) -> R<HbmInfo> {
        self.out(self.opt.hbm_info, "dcmi_get_device_hbm_info", card, dev)
    }

    pub fn memory_info(&self, card: i32, dev: i32) -> R<MemoryInfoV3> {
        self.out(
            self.opt.memory_info_v3,
            "dcmi_get_device_memory_info_v3",
            card,
            dev,
        )
    }

    /// Power draw in units of 0.1 W.
    pub fn power(&self, card: i32, dev: i32) -> R<i32> {
        self.out(self.opt.power_info, "dcmi_get_device_power_info", card, dev)
    }

    /// Chip temperature in °C.
    pub fn temperature(&self, card: i32, dev: i32) -> R<i32> {
        self.out(
            self.opt.temperature,
            "dcmi_get_device_temperature",
            card,
            dev,
        )
    }

    /// Utilization in percent of the unit `kind` (UTIL_*).
    pub fn utilization(&self, card: i32, dev: i32, kind: c_int) -> R<u32> {
        self.typed(
            self.opt.utilization_rate,
            "dcmi_get_device_utilization_rate",
            card,
            dev,
            kind,
        )
    }

    /// Frequency in MHz of the clock `kind` (FREQ_*).
    pub fn frequency(&self, card: i32, dev: i32, kind: c_int) -> R<u32> {
        self.typed(
            self.opt.frequency,
            "dcmi_get_device_frequency",
            card,
            dev,
            kind,
        )
    }

    pub fn driver_version(&self) -> R<String> {
        let f = self
            .opt
            .driver_version
            .ok_or(AscendError::MissingOptional("dcmi_get_driver_version"))?;
        let mut buf = [0 as c_char; 256];
        // SAFETY: buf holds the length passed (one byte kept for the NUL).
        let rc = self.call(|| unsafe { f(buf.as_mut_ptr(), (buf.len() - 1) as c_uint) });
        AscendError::check("dcmi_get_driver_version", rc)?;
        Ok(c_chars(&buf))
    }

    pub fn create_vdevice(&self, card: i32, dev: i32, template: &str) -> R<CreateVdevOut> {
        let f = self
            .opt
            .create_vdevice
            .ok_or(AscendError::MissingOptional("dcmi_create_vdevice"))?;
        let mut res = CreateVdevRes::zeroed();
        res.vdev_id = VDEV_ID_AUTO;
        res.vfg_id = VDEV_ID_AUTO;
        for (dst, &b) in res
            .template_name
            .iter_mut()
            .zip(template.as_bytes().iter().take(31))
        {
            *dst = b as c_char;
        }
        let mut res = Padded::with(res);
        let mut out = Padded::<CreateVdevOut>::new();
        // SAFETY: both pointers are the documented structures, with headroom.
        let rc = self.call(|| unsafe { f(card, dev, res.ptr(), out.ptr()) });
        AscendError::check("dcmi_create_vdevice", rc)?;
        Ok(out.value)
    }

    pub fn destroy_vdevice(&self, card: i32, dev: i32, vdev_id: u32) -> R<()> {
        let f = self
            .opt
            .destroy_vdevice
            .ok_or(AscendError::MissingOptional("dcmi_set_destroy_vdevice"))?;
        // SAFETY: scalar arguments only.
        let rc = self.call(|| unsafe { f(card, dev, vdev_id) });
        AscendError::check("dcmi_set_destroy_vdevice", rc)
    }

    fn device_info<T: Zeroed>(&self, card: i32, dev: i32, sub: c_uint, buf: T) -> R<T> {
        let f = self
            .opt
            .device_info
            .ok_or(AscendError::MissingOptional("dcmi_get_device_info"))?;
        let mut buf = Padded::with(buf);
        let mut size = std::mem::size_of::<T>() as c_uint;
        // SAFETY: buf is a T of `size` bytes (and headroom), the structure
        // this sub-command fills.
        let rc = self.call(|| unsafe {
            f(
                card,
                dev,
                MAIN_CMD_VDEV_MNG,
                sub,
                buf.ptr().cast::<c_void>(),
                &mut size,
            )
        });
        AscendError::check("dcmi_get_device_info", rc)?;
        Ok(buf.value)
    }

    /// The vNPUs on a device (DCMI_VMNG_SUB_CMD_GET_TOTAL_RESOURCE).
    pub fn total_resource(&self, card: i32, dev: i32) -> R<SocTotalResource> {
        self.device_info(
            card,
            dev,
            VMNG_GET_TOTAL_RESOURCE,
            SocTotalResource::zeroed(),
        )
    }

    /// One vNPU (DCMI_VMNG_SUB_CMD_GET_VDEV_RESOURCE).
    pub fn vdev_resource(&self, card: i32, dev: i32, vdev_id: u32) -> R<VdevQuery> {
        let mut q = VdevQuery::zeroed();
        q.vdev_id = vdev_id;
        self.device_info(card, dev, VMNG_GET_VDEV_RESOURCE, q)
    }

    /// The topology type between two devices (DCMI_TOPO_TYPE_*).
    pub fn topo(&self, a: (i32, i32), b: (i32, i32)) -> R<i32> {
        let f = self.opt.topo_info.ok_or(AscendError::MissingOptional(
            "dcmi_get_topo_info_by_device_id",
        ))?;
        let mut t: c_int = 0;
        // SAFETY: one int out.
        let rc = self.call(|| unsafe { f(a.0, a.1, b.0, b.1, &mut t) });
        AscendError::check("dcmi_get_topo_info_by_device_id", rc)?;
        Ok(t)
    }

    /// (pid, memory in bytes) of the processes using a device.
    pub fn processes(&self, card: i32, dev: i32) -> R<Vec<(i32, u64)>> {
        let f = self.opt.resource_info.ok_or(AscendError::MissingOptional(
            "dcmi_get_device_resource_info",
        ))?;
        // Room for twice the entries offered: a library whose entries grew
        // writes past the offered count's bytes into that room, not ours.
        let mut buf = vec![ProcMemInfo::zeroed(); 2 * MAX_PROCS];
        let mut n: c_int = MAX_PROCS as c_int;
        // SAFETY: buf holds 2 × MAX_PROCS entries (more than DCMI ever reports).
        let rc = self.call(|| unsafe { f(card, dev, buf.as_mut_ptr(), &mut n) });
        AscendError::check("dcmi_get_device_resource_info", rc)?;
        let n = usize::try_from(n).unwrap_or(0).min(MAX_PROCS);
        // `unsigned long` is u64 on LP64 targets only.
        #[allow(clippy::useless_conversion)]
        Ok(buf[..n]
            .iter()
            .map(|p| (p.proc_id, u64::from(p.proc_mem_usage)))
            .collect())
    }
}

/// The library, loaded and initialised once per load of libaccelerator.so
/// (a failure is remembered too: it is reported, not retried).
pub fn shared() -> Result<&'static Dcmi, AscendError> {
    static DCMI: OnceLock<Result<Dcmi, AscendError>> = OnceLock::new();
    DCMI.get_or_init(Dcmi::load).as_ref().map_err(Clone::clone)
}

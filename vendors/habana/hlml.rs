//! libhlml.so, loaded at run time: the C structures HLML fills, the symbol
//! table, and one safe wrapper per function. This is the only module of
//! the habana vendor with `unsafe`.
//!
//! The library's version is read first (`hlml_get_hlml_version`) and picks
//! the layout of the structures that changed between releases
//! (`layout.rs`); those are read by offset from a buffer sized for the
//! largest layout plus headroom. Calls are serialized on one mutex. The
//! library (`Symbols`) lives in a static and is never unloaded, so device
//! handles and function pointers stay valid.

use super::error::{HlmlError, Status};
use super::layout::{self, Layout};
use crate::cbuf::{c_str, OutBuf, Padded, Zeroed};
use crate::dynlib::{optional, required, Symbols};
use std::ffi::{c_char, c_uint, c_ulong, c_void};
use std::sync::OnceLock;

/// Where the habanalabs packages install the library (and where Kepler
/// loads it), tried after `ACCELERATOR_HLML_PATH`; the bare name is left
/// to the dynamic loader's path.
pub const SEARCH_PATHS: &[&str] = &["/usr/lib/habanalabs/libhlml.so", "libhlml.so"];
pub const PATH_ENV: &str = "ACCELERATOR_HLML_PATH";

/// The string buffers pyhlml hands to the version, UUID and serial calls
/// (VERSION_MAX_LEN; HL_FIELD_MAX_SIZE, 32, for the others).
const STR_LEN: usize = 128;
/// hlml_temperature_sensors_t.
pub const TEMP_ON_AIP: u32 = 0;
/// hlml_clock_type_t: Gaudi has the SoC clock (IC, MME, TPC are Goya's).
pub const CLOCK_SOC: u32 = 0;
/// HLML_AFFINITY_SCOPE_NODE.
const SCOPE_NODE: c_uint = 0;
/// NUMA nodes asked about (bits of unsigned long words).
const NODE_WORDS: usize = 16;

/// hlml_memory_t (bytes), the same in every release.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Memory {
    pub free: u64,
    pub total: u64,
    pub used: u64,
}

impl Zeroed for Memory {}

/// What this vendor reads of hlml_pci_info_t.
pub struct Pci {
    pub bus_id: String,
    /// The device id over the vendor id (16 bits each).
    pub pci_device_id: u32,
}

/// A device handle: an opaque pointer HLML owns. Kept as an address so
/// devices can be shared between threads; only passed back to HLML.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Handle(usize);

type H = *mut c_void;
type FnVoid = unsafe extern "C" fn() -> Status;
type FnLibStr = unsafe extern "C" fn(*mut c_char, c_uint) -> Status;
type FnCount = unsafe extern "C" fn(*mut c_uint) -> Status;
type FnByIndex = unsafe extern "C" fn(c_uint, *mut H) -> Status;
type FnStr = unsafe extern "C" fn(H, *mut c_char, c_uint) -> Status;
type FnOut<T> = unsafe extern "C" fn(H, *mut T) -> Status;
/// A function filling a structure whose layout depends on the release.
type FnRaw = unsafe extern "C" fn(H, *mut c_void) -> Status;
type FnOfKind = unsafe extern "C" fn(H, u32, *mut c_uint) -> Status;
type FnAffinity = unsafe extern "C" fn(H, c_uint, *mut c_ulong, c_uint) -> Status;
type FnEccMode = unsafe extern "C" fn(H, *mut u32, *mut u32) -> Status;

struct Required {
    count: FnCount,
    by_index: FnByIndex,
    uuid: FnStr,
    pci_info: FnRaw,
}

struct Optional {
    shutdown: Option<FnVoid>,
    driver_version: Option<FnLibStr>,
    name: Option<FnStr>,
    serial: Option<FnStr>,
    firmware: Option<FnStr>,
    minor: Option<FnOut<c_uint>>,
    module_id: Option<FnOut<c_uint>>,
    memory_affinity: Option<FnAffinity>,
    link_gen: Option<FnOut<c_uint>>,
    link_width: Option<FnOut<c_uint>>,
    memory: Option<FnOut<Memory>>,
    utilization: Option<FnRaw>,
    power: Option<FnOut<c_uint>>,
    power_limit: Option<FnOut<c_uint>>,
    temperature: Option<FnOfKind>,
    max_clock: Option<FnOfKind>,
    ecc_mode: Option<FnEccMode>,
}

pub struct Hlml {
    pub syms: Symbols,
    req: Required,
    opt: Optional,
    /// The library's version, as it reports it, and its layouts.
    pub version: String,
    layout: &'static Layout,
}

type R<T> = Result<T, HlmlError>;

impl Hlml {
    fn load() -> R<Hlml> {
        let mut syms = Symbols::open(PATH_ENV, SEARCH_PATHS).map_err(HlmlError::NotLoaded)?;
        let init: FnVoid = required!(syms, "hlml_init");
        let lib_version: FnLibStr = required!(syms, "hlml_get_hlml_version");
        let req = Required {
            count: required!(syms, "hlml_device_get_count"),
            by_index: required!(syms, "hlml_device_get_handle_by_index"),
            uuid: required!(syms, "hlml_device_get_uuid"),
            pci_info: required!(syms, "hlml_device_get_pci_info"),
        };
        let opt = Optional {
            shutdown: optional!(syms, "hlml_shutdown"),
            driver_version: optional!(syms, "hlml_get_driver_version"),
            name: optional!(syms, "hlml_device_get_name"),
            serial: optional!(syms, "hlml_device_get_serial"),
            firmware: optional!(syms, "hlml_get_firmware_fit_version"),
            minor: optional!(syms, "hlml_device_get_minor_number"),
            module_id: optional!(syms, "hlml_device_get_module_id"),
            memory_affinity: optional!(syms, "hlml_device_get_memory_affinity"),
            link_gen: optional!(syms, "hlml_device_get_curr_pcie_link_generation"),
            link_width: optional!(syms, "hlml_device_get_curr_pcie_link_width"),
            memory: optional!(syms, "hlml_device_get_memory_info"),
            utilization: optional!(syms, "hlml_device_get_utilization_rates"),
            power: optional!(syms, "hlml_device_get_power_usage"),
            power_limit: optional!(syms, "hlml_device_get_power_management_default_limit"),
            temperature: optional!(syms, "hlml_device_get_temperature"),
            max_clock: optional!(syms, "hlml_device_get_max_clock_info"),
            ecc_mode: optional!(syms, "hlml_device_get_ecc_mode"),
        };
        // SAFETY: documented signature, no arguments.
        HlmlError::check("hlml_init", unsafe { init() })?;
        let version = match lib_string(lib_version, "hlml_get_hlml_version") {
            Ok(v) => v,
            Err(e) => {
                shut_down(opt.shutdown);
                return Err(e);
            }
        };
        let Some(layout) = layout::detect(&version) else {
            shut_down(opt.shutdown);
            return Err(HlmlError::Refused(format!(
                "{} is HLML {version:?}, whose structure layouts this build does not know; \
                 it reads HLML {}",
                syms.path,
                layout::supported()
            )));
        };
        Ok(Hlml {
            syms,
            req,
            opt,
            version,
            layout,
        })
    }

    /// Run `f` with the HLML lock held (one library per process: `shared`).
    fn call<T>(&self, f: impl FnOnce() -> T) -> T {
        super::locks::DRIVER.run(f)
    }

    /// `hlml_shutdown`, when discovery gives up after a successful init.
    pub fn shut_down(&self) {
        self.call(|| shut_down(self.opt.shutdown));
    }

    /// Whether any live figure can be read.
    pub fn has_metrics(&self) -> bool {
        let o = &self.opt;
        o.power.is_some()
            || o.utilization.is_some()
            || o.memory.is_some()
            || o.temperature.is_some()
    }

    /// Every device's handle, in HLML's index order.
    pub fn devices(&self) -> R<Vec<Handle>> {
        let mut n: c_uint = 0;
        // SAFETY: `n` is the count to fill.
        HlmlError::check(
            "hlml_device_get_count",
            self.call(|| unsafe { (self.req.count)(&mut n) }),
        )?;
        let mut out = Vec::new();
        for i in 0..n {
            let mut h: H = std::ptr::null_mut();
            // SAFETY: an index below the count; `h` the handle to fill.
            let rc = self.call(|| unsafe { (self.req.by_index)(i, &mut h) });
            HlmlError::check("hlml_device_get_handle_by_index", rc)?;
            out.push(Handle(h as usize));
        }
        Ok(out)
    }

    /// One call of a `f(handle, char *, length)` function.
    fn string(&self, f: Option<FnStr>, name: &'static str, h: Handle) -> R<String> {
        let f = f.ok_or(HlmlError::MissingOptional(name))?;
        let mut buf = [0u8; STR_LEN];
        // SAFETY: `buf` holds the length passed.
        let rc = self.call(|| unsafe { f(ptr(h), buf.as_mut_ptr().cast(), STR_LEN as c_uint) });
        HlmlError::check(name, rc).map(|()| c_str(&buf))
    }

    /// One call of an optional `f(handle, *out)` function, into a T with
    /// headroom behind it.
    fn out<T: Zeroed>(&self, f: Option<FnOut<T>>, name: &'static str, h: Handle) -> R<T> {
        let f = f.ok_or(HlmlError::MissingOptional(name))?;
        let mut v = Padded::<T>::new();
        // SAFETY: `f` has this signature; `v` is a T (and room) to fill.
        let rc = self.call(|| unsafe { f(ptr(h), v.ptr()) });
        HlmlError::check(name, rc).map(|()| v.value)
    }

    /// One call of a `f(handle, kind, unsigned *)` function.
    fn of_kind(&self, f: Option<FnOfKind>, name: &'static str, h: Handle, kind: u32) -> R<u32> {
        let f = f.ok_or(HlmlError::MissingOptional(name))?;
        let mut v = Padded::<u32>::new();
        // SAFETY: `f` has this signature; `v` an unsigned (and room).
        let rc = self.call(|| unsafe { f(ptr(h), kind, v.ptr()) });
        HlmlError::check(name, rc).map(|()| v.value)
    }

    /// One call of a `f(handle, *out)` function whose structure is
    /// `max` bytes at most.
    fn raw(&self, f: FnRaw, name: &'static str, h: Handle, max: usize) -> R<OutBuf> {
        let mut b = OutBuf::new(max);
        // SAFETY: `b` holds the largest layout known and headroom.
        let rc = self.call(|| unsafe { f(ptr(h), b.ptr()) });
        HlmlError::check(name, rc).map(|()| b)
    }

    pub fn uuid(&self, h: Handle) -> R<String> {
        self.string(Some(self.req.uuid), "hlml_device_get_uuid", h)
    }

    pub fn pci(&self, h: Handle) -> R<Pci> {
        let l = self.layout;
        let b = self.raw(
            self.req.pci_info,
            "hlml_device_get_pci_info",
            h,
            layout::PCI_MAX,
        )?;
        Ok(Pci {
            bus_id: b.str(4, l.pci_bus_id_len),
            pci_device_id: b.u32(l.pci_device_id),
        })
    }

    pub fn name(&self, h: Handle) -> R<String> {
        self.string(self.opt.name, "hlml_device_get_name", h)
    }

    pub fn serial(&self, h: Handle) -> R<String> {
        self.string(self.opt.serial, "hlml_device_get_serial", h)
    }

    pub fn firmware(&self, h: Handle) -> R<String> {
        self.string(self.opt.firmware, "hlml_get_firmware_fit_version", h)
    }

    pub fn driver_version(&self) -> R<String> {
        let f = self
            .opt
            .driver_version
            .ok_or(HlmlError::MissingOptional("hlml_get_driver_version"))?;
        self.call(|| lib_string(f, "hlml_get_driver_version"))
    }

    pub fn minor(&self, h: Handle) -> R<u32> {
        self.out(self.opt.minor, "hlml_device_get_minor_number", h)
    }

    pub fn module_id(&self, h: Handle) -> R<u32> {
        self.out(self.opt.module_id, "hlml_device_get_module_id", h)
    }

    /// The lowest NUMA node the device's memory is local to, if any.
    pub fn numa_node(&self, h: Handle) -> R<Option<u32>> {
        let name = "hlml_device_get_memory_affinity";
        let f = self
            .opt
            .memory_affinity
            .ok_or(HlmlError::MissingOptional(name))?;
        let mut words = [0 as c_ulong; NODE_WORDS];
        // SAFETY: `words` holds the NODE_WORDS words passed.
        let rc = self
            .call(|| unsafe { f(ptr(h), NODE_WORDS as c_uint, words.as_mut_ptr(), SCOPE_NODE) });
        HlmlError::check(name, rc)?;
        let bits = c_ulong::BITS;
        Ok(words
            .iter()
            .enumerate()
            .find(|(_, w)| **w != 0)
            .map(|(i, w)| i as u32 * bits + w.trailing_zeros()))
    }

    pub fn link_generation(&self, h: Handle) -> R<u32> {
        self.out(
            self.opt.link_gen,
            "hlml_device_get_curr_pcie_link_generation",
            h,
        )
    }

    pub fn link_width(&self, h: Handle) -> R<u32> {
        self.out(
            self.opt.link_width,
            "hlml_device_get_curr_pcie_link_width",
            h,
        )
    }

    pub fn memory(&self, h: Handle) -> R<Memory> {
        self.out(self.opt.memory, "hlml_device_get_memory_info", h)
    }

    /// The AIP's utilization over the last second, percent.
    pub fn utilization(&self, h: Handle) -> R<u32> {
        let name = "hlml_device_get_utilization_rates";
        let f = self
            .opt
            .utilization
            .ok_or(HlmlError::MissingOptional(name))?;
        Ok(self.raw(f, name, h, layout::UTILIZATION_MAX)?.u32(0))
    }

    /// mW.
    pub fn power(&self, h: Handle) -> R<u32> {
        self.out(self.opt.power, "hlml_device_get_power_usage", h)
    }

    /// mW.
    pub fn power_limit(&self, h: Handle) -> R<u32> {
        let name = "hlml_device_get_power_management_default_limit";
        self.out(self.opt.power_limit, name, h)
    }

    /// Celsius.
    pub fn temperature(&self, h: Handle, sensor: u32) -> R<u32> {
        self.of_kind(
            self.opt.temperature,
            "hlml_device_get_temperature",
            h,
            sensor,
        )
    }

    /// MHz.
    pub fn max_clock(&self, h: Handle, kind: u32) -> R<u32> {
        self.of_kind(
            self.opt.max_clock,
            "hlml_device_get_max_clock_info",
            h,
            kind,
        )
    }

    pub fn ecc_enabled(&self, h: Handle) -> R<bool> {
        let name = "hlml_device_get_ecc_mode";
        let f = self.opt.ecc_mode.ok_or(HlmlError::MissingOptional(name))?;
        let (mut current, mut pending) = (0u32, 0u32);
        // SAFETY: two hlml_enable_state_t to fill.
        HlmlError::check(
            name,
            self.call(|| unsafe { f(ptr(h), &mut current, &mut pending) }),
        )?;
        Ok(current == 1)
    }
}

fn ptr(h: Handle) -> H {
    h.0 as H
}

fn shut_down(f: Option<FnVoid>) {
    if let Some(f) = f {
        // SAFETY: documented signature, no arguments.
        let _ = unsafe { f() };
    }
}

/// A library-wide string (`f(char *, length)`).
fn lib_string(f: FnLibStr, name: &'static str) -> R<String> {
    let mut buf = [0u8; STR_LEN];
    // SAFETY: `buf` holds the length passed.
    HlmlError::check(name, unsafe {
        f(buf.as_mut_ptr().cast(), STR_LEN as c_uint)
    })?;
    Ok(c_str(&buf))
}

/// The process-wide HLML: loaded and initialized on first use.
pub fn shared() -> Result<&'static Hlml, HlmlError> {
    static HLML: OnceLock<Result<Hlml, HlmlError>> = OnceLock::new();
    HLML.get_or_init(Hlml::load).as_ref().map_err(Clone::clone)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::size_of;

    /// hlml_memory_t, the same in every release (c-tests/hlml_layout.c
    /// checks the fake's declaration; layout.rs holds what changed).
    #[test]
    fn layouts() {
        assert_eq!(size_of::<Memory>(), 24);
        assert_eq!(std::mem::offset_of!(Memory, used), 16);
    }
}

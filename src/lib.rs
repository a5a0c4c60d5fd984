//! libaccelerator.so: two C ABIs (ABI.md, and the `Accel*` ABI of
//! ABI-v2.md) over many accelerator vendors. `abi` is the boundary (the
//! only `unsafe`); `hypervisor` is what v2 asks beyond the vendor trait;
//! `hostfiles` finds what a container mounts; `api` holds the
//! vendor-independent rules (hard limits go to the limiter's shared
//! state); `vendor` is the trait each directory under `vendors/`
//! implements; `select` picks the vendor at run time; `usage` merges the
//! limiter's per-process records into the real vendors' listings;
//! `sampler` is the host's compute sampler (measured utilization steers
//! the hook's launch throttling); `pci` finds the accelerators on the bus
//! whatever the vendor libraries see.

pub mod abi;
mod api;
#[cfg(any(
    feature = "nvidia",
    feature = "ascend",
    feature = "amd",
    feature = "habana"
))]
mod cbuf;
#[cfg(any(feature = "ascend", feature = "amd", feature = "habana"))]
mod device_table;
#[cfg(any(feature = "ascend", feature = "amd", feature = "habana"))]
mod driver_error;
#[cfg(any(feature = "ascend", feature = "amd", feature = "habana"))]
mod dynlib;
#[cfg(any(
    feature = "nvidia",
    feature = "ascend",
    feature = "amd",
    feature = "habana"
))]
mod fork_lock;
mod hostfiles;
mod hypervisor;
mod log;
mod pci;
mod sampler;
mod schedule;
mod select;
mod usage;
pub mod vendor;

// One module per vendor directory under vendors/, compiled in by its feature.
// Vendors export nothing; cbindgen:ignore keeps their FFI constants out of
// the header.
/// cbindgen:ignore
#[cfg(feature = "amd")]
#[path = "../vendors/amd/mod.rs"]
mod amd;
/// cbindgen:ignore
#[cfg(feature = "ascend")]
#[path = "../vendors/ascend/mod.rs"]
mod ascend;
/// cbindgen:ignore
#[cfg(feature = "habana")]
#[path = "../vendors/habana/mod.rs"]
mod habana;
/// cbindgen:ignore
#[cfg(feature = "nvidia")]
#[path = "../vendors/nvidia/mod.rs"]
mod nvidia;
/// cbindgen:ignore
#[cfg(feature = "stub")]
#[path = "../vendors/stub/mod.rs"]
mod stub;

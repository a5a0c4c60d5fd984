//! The two C ABIs, siblings over the one vendor trait: `v1` is ABI.md
//! (include/accelerator.h), `v2` is ABI-v2.md's `Accel*` functions
//! (include/v2/accelerator.h). `boundary` is the one panic-catching wrapper
//! and pointer/string checking both use.

pub mod boundary;
pub mod v1;
/// cbindgen:ignore
pub mod v2;

// The v1 types keep their old path (`accelerator::abi::types`).
pub use v1::types;

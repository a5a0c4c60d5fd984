//! The C ABI of ABI.md: types, the boundary, and the exported functions.
// Parameter and field names are ABI.md's, which cbindgen copies into the header.
#![allow(non_snake_case)]

pub mod boundary;
mod caller;
mod convert;
mod ext;
mod library;
pub mod types;

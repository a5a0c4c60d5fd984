//! The C ABI of ABI.md: types, and the exported functions in both calling
//! styles.
// Parameter and field names are ABI.md's, which cbindgen copies into the header.
#![allow(non_snake_case)]

mod caller;
mod convert;
mod ext;
mod library;
pub mod types;

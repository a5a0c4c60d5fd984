//! Code shared by `libaccelerator.so` and `liblimiter.so`.
//!
//! This crate exports no C symbols: a `#[no_mangle]` function here would be
//! re-exported by both cdylibs. It holds the result codes both ABIs return,
//! the one error enum that maps onto them, and the secure handling of the
//! node-wide state directory.

pub mod cabi;
pub mod error;
pub mod result;
pub mod shm;
pub mod statedir;
pub mod store;

pub use error::{Error, Res};
pub use result::ResultCode;

//! ascend vendor (work in progress: replaced by the ascend issue).
use crate::vendor::Vendor;
use accel_common::{Error, Res};

pub fn open() -> Res<Box<dyn Vendor>> {
    Err(Error::NotSupported(
        "the ascend vendor is not implemented yet".into(),
    ))
}

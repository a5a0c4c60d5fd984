//! nvidia vendor (work in progress: replaced by the nvidia issue).
use crate::vendor::Vendor;
use accel_common::{Error, Res};

pub fn open() -> Res<Box<dyn Vendor>> {
    Err(Error::NotSupported(
        "the nvidia vendor is not implemented yet".into(),
    ))
}

//! The failures of a vendor whose driver library is loaded at run time,
//! one enum for all of them: the library not loaded, a symbol missing, a
//! library refused (e.g. a version whose layouts are unknown), a call
//! failing with the library's own status code. What differs per library
//! (its name, its status codes, which of them mean "not supported" and
//! which Result code each maps to) is its [`DriverLib`].

use crate::log::log_at;
use accel_common::Error;
use std::fmt::Debug;
use std::marker::PhantomData;

/// What a driver library says about its own failures.
pub trait DriverLib: Debug + Clone + PartialEq + Eq + 'static {
    /// The status code type its functions return.
    type Code: Copy + Debug + PartialEq + Eq + std::fmt::Display;
    /// The vendor's name, for the log.
    const VENDOR: &'static str;
    /// The library's file name.
    const FILE: &'static str;
    /// What to do when it cannot be loaded (after the loader's reasons).
    const INSTALL_HINT: &'static str;
    /// How its status codes are called in a message ("AMD SMI status").
    const CODE_NAME: &'static str;

    fn describe(code: Self::Code) -> &'static str;
    /// The device or the library cannot do this: an optional fact is
    /// unknown rather than an error.
    fn unsupported(code: Self::Code) -> bool;
    /// The Result a failing call maps to (`msg` is the whole message).
    fn result(code: Self::Code, msg: String) -> Error;
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DriverError<L: DriverLib> {
    #[error("{file} could not be loaded ({}){hint}", .0, file = L::FILE, hint = L::INSTALL_HINT)]
    NotLoaded(String),
    #[error("{}", .0)]
    Refused(String),
    #[error("{file} lacks the required function {}", .0, file = L::FILE)]
    MissingRequired(&'static str),
    #[error("this {file} does not provide {}", .0, file = L::FILE)]
    MissingOptional(&'static str),
    #[error("{func} failed: {name} {code} ({what})", name = L::CODE_NAME, what = L::describe(*code))]
    Call {
        func: &'static str,
        code: L::Code,
        lib: PhantomData<L>,
    },
}

impl<L: DriverLib> DriverError<L> {
    pub fn call(func: &'static str, code: L::Code) -> Self {
        DriverError::Call {
            func,
            code,
            lib: PhantomData,
        }
    }

    /// `Ok` for the library's success status (0 in every library here),
    /// else the call's error.
    pub fn check(func: &'static str, code: L::Code) -> Result<(), Self>
    where
        L::Code: Default,
    {
        if code == L::Code::default() {
            Ok(())
        } else {
            Err(Self::call(func, code))
        }
    }

    /// The library or the device cannot do this: callers of optional facts
    /// turn it into "not available" (0 / empty).
    pub fn is_unsupported(&self) -> bool {
        match self {
            DriverError::MissingOptional(_) => true,
            DriverError::Call { code, .. } => L::unsupported(*code),
            _ => false,
        }
    }
}

impl<L: DriverLib> From<DriverError<L>> for Error {
    fn from(e: DriverError<L>) -> Error {
        let msg = e.to_string();
        match e {
            DriverError::NotLoaded(_) | DriverError::MissingRequired(_) => {
                Error::OperationFailed(msg)
            }
            DriverError::Refused(_) | DriverError::MissingOptional(_) => Error::NotSupported(msg),
            DriverError::Call { code, .. } => L::result(code, msg),
        }
    }
}

/// A result whose "not supported" failure means "unknown".
pub fn optional<T, L: DriverLib>(
    r: Result<T, DriverError<L>>,
) -> Result<Option<T>, DriverError<L>> {
    match r {
        Ok(v) => Ok(Some(v)),
        Err(e) if e.is_unsupported() => {
            log_at!(Debug, "{}: {e}", L::VENDOR);
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// An optional static fact at discovery: any failure leaves it unknown.
pub fn fact<T, L: DriverLib>(r: Result<T, DriverError<L>>) -> Option<T> {
    r.map_err(|e| log_at!(Debug, "{}: {e}", L::VENDOR)).ok()
}

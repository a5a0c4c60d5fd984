//! Loading a vendor's driver library at run time with libloading (ascend:
//! libdcmi.so, amd: libamd_smi.so): finding it, and its functions, the
//! required ones and the optional ones (those missing are listed, logged
//! once, and only what needs them is unsupported). Each vendor's FFI module
//! declares its functions' signatures and wraps each call; the `unsafe`
//! lives here and there only.

use crate::log::log_at;
use libloading::Library;

/// A loaded driver library: where it was found, and the optional functions
/// it lacks. Kept for the process's life (in the vendor's static), so
/// function pointers taken from it stay valid.
pub struct Symbols {
    lib: Library,
    pub path: String,
    pub missing: Vec<&'static str>,
}

impl Symbols {
    /// Load the library named by `env` when it is set and non-empty (a
    /// failure is reported, not replaced by the search), else the first of
    /// `paths` that loads. The error lists every path tried with the
    /// loader's reason.
    pub fn open(env: &str, paths: &[&str]) -> Result<Symbols, String> {
        let from_env = std::env::var(env).ok().filter(|p| !p.is_empty());
        let candidates: Vec<String> = match from_env {
            Some(p) => vec![p],
            None => paths.iter().map(|s| s.to_string()).collect(),
        };
        let mut tried = Vec::new();
        for path in candidates {
            // SAFETY: loading the vendor's library runs its initializers; it
            // is loaded exactly as the vendor's own tools load it.
            match unsafe { Library::new(&path) } {
                Ok(lib) => {
                    return Ok(Symbols {
                        lib,
                        path,
                        missing: Vec::new(),
                    })
                }
                Err(e) => tried.push(format!("{path}: {e}")),
            }
        }
        Err(tried.join("; "))
    }

    /// `name` as a function of type `T`, if the library has it.
    ///
    /// # Safety
    /// `T` must be the function's true C signature.
    pub unsafe fn get<T: Copy>(&self, name: &'static str) -> Option<T> {
        let mut z = name.as_bytes().to_vec();
        z.push(0);
        self.lib.get::<T>(&z).ok().map(|s| *s)
    }

    /// A function the vendor cannot work without; its name when missing.
    ///
    /// # Safety
    /// As [`Symbols::get`].
    pub unsafe fn required<T: Copy>(&self, name: &'static str) -> Result<T, &'static str> {
        self.get(name).ok_or(name)
    }

    /// A function only some figures need: a missing one is listed.
    ///
    /// # Safety
    /// As [`Symbols::get`].
    pub unsafe fn optional<T: Copy>(&mut self, name: &'static str) -> Option<T> {
        let f = self.get(name);
        if f.is_none() {
            self.missing.push(name);
        }
        f
    }

    /// Say once which optional functions the library lacks.
    pub fn log_missing(&self, vendor: &str) {
        if !self.missing.is_empty() {
            log_at!(
                Info,
                "{vendor}: {} lacks optional functions {}; what needs them is reported unsupported",
                self.path,
                self.missing.join(", ")
            );
        }
    }
}

/// A required function of `$syms` as the field's type, or the enclosing
/// function returns `DriverError::MissingRequired`.
macro_rules! required {
    ($syms:expr, $name:literal) => {
        // SAFETY: the field's type is the signature the vendor's header
        // declares for $name.
        unsafe { $syms.required($name) }
            .map_err(crate::driver_error::DriverError::MissingRequired)?
    };
}

/// An optional function of `$syms` as the field's type (listed if missing).
macro_rules! optional {
    ($syms:expr, $name:literal) => {
        // SAFETY: the field's type is the signature the vendor's header
        // declares for $name.
        unsafe { $syms.optional($name) }
    };
}
pub(crate) use {optional, required};

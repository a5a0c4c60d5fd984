//! What the vendors that load their driver's C library at run time with
//! libloading (ascend: libdcmi.so, amd: libamd_smi.so) share: finding the
//! library, looking up its functions, zero-filled C structures and reading
//! a fixed C char buffer. Each vendor's FFI module declares the structures
//! and wraps each function; the `unsafe` lives here and there only.

use libloading::Library;

/// Load the library named by `env` when it is set and non-empty (a failure
/// is reported, not replaced by the search), else the first of `paths`
/// that loads. The error lists every path tried with the loader's reason.
pub fn open(env: &str, paths: &[&str]) -> Result<(Library, String), String> {
    let from_env = std::env::var(env).ok().filter(|p| !p.is_empty());
    let candidates: Vec<String> = match from_env {
        Some(p) => vec![p],
        None => paths.iter().map(|s| s.to_string()).collect(),
    };
    let mut tried = Vec::new();
    for path in candidates {
        // SAFETY: loading the vendor's library runs its initializers; it is
        // loaded exactly as the vendor's own tools load it.
        match unsafe { Library::new(&path) } {
            Ok(lib) => return Ok((lib, path)),
            Err(e) => tried.push(format!("{path}: {e}")),
        }
    }
    Err(tried.join("; "))
}

/// Look up `name` as a function of type `T`.
///
/// # Safety
/// `T` must be the function's true C signature.
pub unsafe fn sym<T: Copy>(lib: &Library, name: &'static str) -> Option<T> {
    let mut z = name.as_bytes().to_vec();
    z.push(0);
    lib.get::<T>(&z).ok().map(|s| *s)
}

/// All-zero values of plain C structures, to hand to a C function to fill.
pub trait Zeroed: Copy {
    fn zeroed() -> Self {
        // SAFETY: implemented only for repr(C) structs of integers, floats
        // and arrays of them, for which all-zero bits are a valid value.
        unsafe { std::mem::zeroed() }
    }
}
impl Zeroed for i32 {}
impl Zeroed for u32 {}
impl Zeroed for u64 {}

/// A fixed C char buffer as a string: up to the first NUL (never past the
/// buffer), lossy UTF-8, trimmed.
pub fn c_str(buf: &[u8]) -> String {
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).trim().to_string()
}

/// `c_str` of a `c_char` buffer (DCMI declares its strings so).
#[cfg(feature = "ascend")]
pub fn c_chars(buf: &[std::ffi::c_char]) -> String {
    let bytes: Vec<u8> = buf.iter().map(|&c| c as u8).collect();
    c_str(&bytes)
}

#[cfg(test)]
mod tests {
    #[test]
    fn c_str_stops_at_nul_or_the_end() {
        assert_eq!(super::c_str(b"MI300X\0garbage"), "MI300X");
        assert_eq!(super::c_str(b"no nul"), "no nul");
        assert_eq!(super::c_str(b" padded \0"), "padded");
    }
}

//! The C-side helpers both libraries' boundaries share: bounded reading of
//! `const char*` and `char[N]`, the NUL-terminating writer for `char[N]`,
//! the NULL check of an out pointer, and the error a caught panic becomes.
//! Each library keeps its own panic-catching `call` wrapper and last-error
//! slot (their hot paths differ), built on these.

use crate::{Error, Res};
use libc::c_char;
use std::any::Any;

/// Longest `const char*` read; anything longer is INVALID_PARAM.
pub const MAX_CSTR: usize = 4096;

/// The error a panic caught at the boundary becomes.
pub fn panic_error(panic: Box<dyn Any + Send>) -> Error {
    let what = panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into());
    Error::Internal(format!("panic caught at the ABI boundary: {what}"))
}

fn checked_str<'a>(bytes: &'a [u8], max: usize, what: &str) -> Res<&'a str> {
    if bytes.is_empty() {
        return Err(Error::InvalidParam(format!("{what} is empty")));
    }
    if bytes.len() > max {
        return Err(Error::InvalidParam(format!(
            "{what} is {} bytes long (at most {max})",
            bytes.len()
        )));
    }
    std::str::from_utf8(bytes)
        .map_err(|_| Error::InvalidParam(format!("{what} is not valid UTF-8")))
}

/// Read a caller's `const char*`: non-NULL, NUL-terminated within
/// `MAX_CSTR` bytes, non-empty, at most `max` bytes, UTF-8.
///
/// # Safety
/// `p` is NULL or points to readable memory up to its NUL or `MAX_CSTR` bytes.
pub unsafe fn cstr<'a>(p: *const c_char, max: usize, what: &str) -> Res<&'a str> {
    if p.is_null() {
        return Err(Error::InvalidParam(format!("{what} is NULL")));
    }
    let len = libc::strnlen(p, MAX_CSTR + 1);
    if len > MAX_CSTR {
        return Err(Error::InvalidParam(format!(
            "{what} is longer than {MAX_CSTR} bytes"
        )));
    }
    checked_str(std::slice::from_raw_parts(p.cast::<u8>(), len), max, what)
}

/// Read a fixed `char[N]` field: it must hold a NUL within its N bytes.
pub fn fixed<'a, const N: usize>(field: &'a [c_char; N], what: &str) -> Res<&'a str> {
    // SAFETY: c_char and u8 have the same size and alignment.
    let bytes: &[u8; N] = unsafe { &*(field as *const [c_char; N]).cast::<[u8; N]>() };
    let len = bytes.iter().position(|&b| b == 0).ok_or_else(|| {
        Error::InvalidParam(format!("{what} is not NUL-terminated within {N} bytes"))
    })?;
    checked_str(&bytes[..len], N - 1, what)
}

/// Like `fixed`, but an empty field is allowed (an optional filter).
pub fn fixed_opt<'a, const N: usize>(field: &'a [c_char; N], what: &str) -> Res<&'a str> {
    if field[0] == 0 {
        return Ok("");
    }
    fixed(field, what)
}

/// Write `s` into a `char[N]`, truncated on a UTF-8 character boundary to
/// N-1 bytes, NUL-terminated and zero-padded.
pub fn write_fixed<const N: usize>(field: &mut [c_char; N], s: &str) {
    let mut end = s.len().min(N - 1);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    for (dst, &b) in field.iter_mut().zip(&s.as_bytes()[..end]) {
        *dst = b as c_char;
    }
    field[end..].fill(0);
}

/// A `char[N]` holding `s` (see `write_fixed`).
pub fn fixed_from<const N: usize>(s: &str) -> [c_char; N] {
    let mut field = [0; N];
    write_fixed(&mut field, s);
    field
}

/// A required pointer to one value the caller owns.
///
/// # Safety
/// `p` is NULL or valid for reads and writes of a `T`.
#[inline(always)]
pub unsafe fn out<'a, T>(p: *mut T, what: &str) -> Res<&'a mut T> {
    match p.as_mut() {
        Some(v) => Ok(v),
        None => Err(null_arg(what)),
    }
}

/// Kept out of line: building the message would otherwise cost the
/// success path of every hot call (the name stored for the closure).
#[cold]
#[inline(never)]
fn null_arg(what: &str) -> Error {
    Error::InvalidParam(format!("{what} is NULL"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CString;

    fn field<const N: usize>(bytes: &[u8]) -> [c_char; N] {
        let mut f = [0 as c_char; N];
        for (d, &b) in f.iter_mut().zip(bytes) {
            *d = b as c_char;
        }
        f
    }

    #[test]
    fn write_fixed_truncates_on_a_char_boundary_and_terminates() {
        let mut f = [0x55 as c_char; 8];
        write_fixed(&mut f, "abcdefé");
        // 7 bytes fit, but "é" spans bytes 6..8: it is dropped whole.
        assert_eq!(fixed(&f, "f").unwrap(), "abcdef");
        assert!(f[6..].iter().all(|&b| b == 0));
        write_fixed(&mut f, "");
        assert_eq!(f, [0; 8]);
    }

    #[test]
    fn fixed_rejects_unterminated_empty_and_non_utf8() {
        let full: [c_char; 4] = field(b"AAAA");
        assert!(
            matches!(fixed(&full, "x"), Err(Error::InvalidParam(m)) if m.contains("NUL-terminated"))
        );
        let empty: [c_char; 4] = field(b"");
        assert!(matches!(fixed(&empty, "x"), Err(Error::InvalidParam(m)) if m.contains("empty")));
        assert_eq!(fixed_opt(&empty, "x").unwrap(), "");
        let bad: [c_char; 4] = field(b"\xff\xfe");
        assert!(matches!(fixed(&bad, "x"), Err(Error::InvalidParam(m)) if m.contains("UTF-8")));
    }

    #[test]
    fn cstr_checks_null_length_and_encoding() {
        unsafe {
            assert!(cstr(std::ptr::null(), 8, "s").is_err());
            assert_eq!(cstr(c"dev".as_ptr(), 8, "s").unwrap(), "dev");
            assert!(matches!(
                cstr(c"toolong".as_ptr(), 3, "s"),
                Err(Error::InvalidParam(_))
            ));
            assert!(matches!(
                cstr(c"\xff".as_ptr(), 8, "s"),
                Err(Error::InvalidParam(_))
            ));
            let long = CString::new(vec![b'a'; MAX_CSTR + 10]).unwrap();
            assert!(cstr(long.as_ptr(), usize::MAX, "s").is_err());
        }
    }
}

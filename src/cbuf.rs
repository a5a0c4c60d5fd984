//! C structures handed to a vendor library to fill, and what comes back
//! in them: zero-filled structures with headroom behind them, buffers read
//! by offset for layouts that depend on the library's version, C strings,
//! and "not supported" values (docs/vendors.md, "Structure layouts of a
//! driver library").

/// All-zero values of plain C structures, to hand to a C function to fill.
pub trait Zeroed: Copy {
    fn zeroed() -> Self {
        // SAFETY: implemented only for repr(C) structs of integers, floats,
        // raw pointers (null) and arrays of them, for which all-zero bits
        // are a valid value.
        unsafe { std::mem::zeroed() }
    }
}
#[cfg(any(feature = "ascend", feature = "amd", feature = "habana"))]
impl Zeroed for i32 {}
#[cfg(any(feature = "ascend", feature = "amd", feature = "habana"))]
impl Zeroed for u32 {}
#[cfg(any(feature = "ascend", feature = "amd", feature = "habana"))]
impl Zeroed for u64 {}
#[cfg(feature = "amd")]
impl<const N: usize> Zeroed for [u32; N] {}

/// Bytes of room behind every structure handed to a vendor library to
/// fill. A library newer than the header a layout was read from may write
/// a larger structure (AMD SMI 26 writes up to 1,568 bytes where 24.7
/// declared 256): the room takes those writes instead of our memory.
/// docs/vendors.md says how a new layout is added.
pub(crate) const HEADROOM: usize = 4096;

/// A C structure with [`HEADROOM`] behind it: hand `ptr()` to the library,
/// read `value` afterwards (the fields this layout declares; anything a
/// newer library wrote past them is ignored).
#[repr(C)]
pub struct Padded<T: Zeroed> {
    pub value: T,
    room: [u8; HEADROOM],
}

impl<T: Zeroed> Padded<T> {
    pub fn new() -> Box<Self> {
        Self::with(T::zeroed())
    }

    /// `value` (a request the library reads before it fills it) with room.
    pub fn with(value: T) -> Box<Self> {
        Box::new(Padded {
            value,
            room: [0; HEADROOM],
        })
    }

    pub fn ptr(&mut self) -> *mut T {
        &mut self.value
    }
}

#[cfg(any(feature = "amd", feature = "habana"))]
/// A zero-filled, 8-byte-aligned buffer for a structure (or an array of
/// them) whose layout depends on the library's version: sized for the
/// layout in use plus [`HEADROOM`], its fields read by offset with bounds
/// checks (a field outside the buffer reads as 0, never out of bounds).
pub struct OutBuf {
    words: Vec<u64>,
}

#[cfg(any(feature = "amd", feature = "habana"))]
impl OutBuf {
    pub fn new(bytes: usize) -> OutBuf {
        OutBuf {
            words: vec![0; (bytes + HEADROOM).div_ceil(8)],
        }
    }

    pub fn ptr<T>(&mut self) -> *mut T {
        self.words.as_mut_ptr().cast()
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: the u64s are plain bytes; the slice covers exactly them.
        unsafe { std::slice::from_raw_parts(self.words.as_ptr().cast(), self.words.len() * 8) }
    }

    fn get<const N: usize>(&self, off: usize) -> [u8; N] {
        off.checked_add(N)
            .and_then(|end| self.bytes().get(off..end))
            .and_then(|b| b.try_into().ok())
            .unwrap_or([0; N])
    }

    pub fn u32(&self, off: usize) -> u32 {
        u32::from_ne_bytes(self.get(off))
    }
    #[cfg(feature = "amd")]
    pub fn u64(&self, off: usize) -> u64 {
        u64::from_ne_bytes(self.get(off))
    }
    /// The C string in the `len` bytes at `off`.
    pub fn str(&self, off: usize, len: usize) -> String {
        off.checked_add(len)
            .and_then(|end| self.bytes().get(off..end))
            .map(c_str)
            .unwrap_or_default()
    }
}

#[cfg(feature = "amd")]
/// A figure a vendor library marks "not supported" with an all-ones value
/// of its own width or of a narrower field it was once declared as (AMD SMI
/// 24 reports 0xFFFF where 26 reports 0xFFFFFFFF): unknown, never a reading.
pub fn known_u32(v: u32) -> Option<u32> {
    (v != u32::MAX && v != u32::from(u16::MAX)).then_some(v)
}

#[cfg(feature = "amd")]
/// [`known_u32`] for 64-bit figures.
pub fn known_u64(v: u64) -> Option<u64> {
    (v != u64::MAX && v != u64::from(u32::MAX) && v != u64::from(u16::MAX)).then_some(v)
}

#[cfg(any(feature = "ascend", feature = "amd", feature = "habana"))]
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

#[cfg(all(test, feature = "amd"))]
mod tests {
    #[test]
    fn c_str_stops_at_nul_or_the_end() {
        assert_eq!(super::c_str(b"MI300X\0garbage"), "MI300X");
        assert_eq!(super::c_str(b"no nul"), "no nul");
        assert_eq!(super::c_str(b" padded \0"), "padded");
    }

    #[test]
    fn out_buf_reads_by_offset_and_never_past_its_end() {
        let mut b = super::OutBuf::new(16);
        // SAFETY: the buffer holds at least 16 bytes.
        unsafe { b.ptr::<u32>().add(1).write(7) };
        assert_eq!(b.u32(4), 7);
        assert_eq!(b.u64(usize::MAX - 3), 0);
        assert_eq!(b.str(1 << 30, 8), "");
    }

    #[test]
    fn all_ones_is_unknown() {
        assert_eq!(super::known_u32(0xFFFF), None);
        assert_eq!(super::known_u32(u32::MAX), None);
        assert_eq!(super::known_u32(300), Some(300));
        assert_eq!(super::known_u64(u64::MAX), None);
        assert_eq!(super::known_u64(750_000_000), Some(750_000_000));
    }
}

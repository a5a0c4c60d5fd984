//! The library's log: a level threshold from `ACCELERATOR_LOG` (error, warn,
//! info, debug, trace; default warn) and one sink, stderr unless the host
//! installs a callback. Read lazily: loading the library does no I/O.

use parking_lot::RwLock;
use std::ffi::CString;
use std::os::raw::c_char;
use std::sync::OnceLock;

/// Log levels, most severe first (also the callback's `level` argument).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum AcceleratorLogLevel {
    Error = 0,
    Warn = 1,
    Info = 2,
    Debug = 3,
    Trace = 4,
}

impl AcceleratorLogLevel {
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s.to_ascii_lowercase().as_str() {
            "error" => Self::Error,
            "warn" | "warning" => Self::Warn,
            "info" => Self::Info,
            "debug" => Self::Debug,
            "trace" => Self::Trace,
            _ => return None,
        })
    }

    fn as_str(self) -> &'static str {
        match self {
            Self::Error => "ERROR",
            Self::Warn => "WARN",
            Self::Info => "INFO",
            Self::Debug => "DEBUG",
            Self::Trace => "TRACE",
        }
    }
}

/// A host-supplied sink: receives the level and a NUL-terminated message
/// that is valid only during the call. Called from any thread.
pub type AcceleratorLogCallback =
    Option<unsafe extern "C" fn(level: AcceleratorLogLevel, message: *const c_char)>;

/// The v2 ABI's sink: the level as text ("DEBUG", "INFO", "WARN", "ERROR").
pub type TextLogCallback = unsafe extern "C" fn(level: *const c_char, message: *const c_char);

/// Where messages go: the sink registered last, by either ABI.
#[derive(Clone, Copy)]
enum Sink {
    Stderr,
    Level(unsafe extern "C" fn(level: AcceleratorLogLevel, message: *const c_char)),
    Text(TextLogCallback),
}

static SINK: RwLock<Sink> = RwLock::new(Sink::Stderr);
static THRESHOLD: OnceLock<AcceleratorLogLevel> = OnceLock::new();

fn threshold() -> AcceleratorLogLevel {
    *THRESHOLD.get_or_init(|| {
        std::env::var("ACCELERATOR_LOG")
            .ok()
            .and_then(|v| AcceleratorLogLevel::parse(&v))
            .unwrap_or(AcceleratorLogLevel::Warn)
    })
}

pub fn enabled(level: AcceleratorLogLevel) -> bool {
    level <= threshold()
}

pub fn set_callback(cb: AcceleratorLogCallback) {
    *SINK.write() = cb.map_or(Sink::Stderr, Sink::Level);
}

/// The v2 registration; NULL restores stderr.
pub fn set_text_callback(cb: Option<TextLogCallback>) {
    *SINK.write() = cb.map_or(Sink::Stderr, Sink::Text);
}

/// The v2 level names: the host knows DEBUG, INFO, WARN, ERROR (and exits
/// on FATAL, which is never sent); TRACE goes out as DEBUG.
fn text_level(level: AcceleratorLogLevel) -> &'static std::ffi::CStr {
    match level {
        AcceleratorLogLevel::Error => c"ERROR",
        AcceleratorLogLevel::Warn => c"WARN",
        AcceleratorLogLevel::Info => c"INFO",
        AcceleratorLogLevel::Debug | AcceleratorLogLevel::Trace => c"DEBUG",
    }
}

pub fn emit(level: AcceleratorLogLevel, message: &str) {
    if !enabled(level) {
        return;
    }
    let sink = *SINK.read();
    let text = || CString::new(message.replace('\0', "\u{FFFD}")).unwrap_or_default();
    match sink {
        // SAFETY (both): the host registered this function for exactly
        // this signature; the strings outlive the call.
        Sink::Level(cb) => unsafe { cb(level, text().as_ptr()) },
        Sink::Text(cb) => unsafe { cb(text_level(level).as_ptr(), text().as_ptr()) },
        Sink::Stderr => eprintln!("[accelerator] {}: {message}", level.as_str()),
    }
}

macro_rules! log_at {
    ($level:ident, $($arg:tt)*) => {
        if $crate::log::enabled($crate::log::AcceleratorLogLevel::$level) {
            $crate::log::emit($crate::log::AcceleratorLogLevel::$level, &format!($($arg)*));
        }
    };
}
pub(crate) use log_at;

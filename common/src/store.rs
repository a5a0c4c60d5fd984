//! A small crash-safe record store: one text file in the state directory.
//!
//! Readers take no lock: the file is only ever replaced whole by `rename`,
//! so a reader sees the old or the new version, never a torn one. Writers
//! serialize on an `flock` of the state directory (`statedir::lock_dir`:
//! nothing a process can delete or swap, released by the kernel if the
//! writer dies, never inherited by a forked child), write a temporary file
//! of their own, fsync it and rename it over the old one. A `kill -9` at
//! any instruction leaves either the old or the new state; a dead writer's
//! temporary file is removed by the next writer.
//!
//! Format: a header line `<magic> v2 <records> <checksum>`, then one record
//! per line, fields separated by single spaces, each field percent-encoded
//! so that any UTF-8 value (spaces included) round-trips. The checksum is
//! FNV-1a (64 bits, hex) of everything after the header line. A file whose
//! header, record count or checksum does not match, or that does not end
//! with a newline, was changed by something other than this library (an
//! edit, a truncation, a half-copied file): every read and write refuses it
//! with an error naming it, and it is left untouched for inspection.

use crate::statedir::{self, Create};
use crate::{Error, Res};
use std::io::{Read, Write};
use std::path::PathBuf;

/// One line of the store: a kind followed by its fields.
pub type Record = Vec<String>;

pub struct Store {
    path: PathBuf,
    magic: &'static str,
}

impl Store {
    /// The store `name` in the state directory, identified by `magic` in its
    /// header so that a foreign file is refused rather than misread.
    pub fn new(name: &str, magic: &'static str) -> Store {
        Store {
            path: statedir::path().join(name),
            magic,
        }
    }

    pub fn path(&self) -> &std::path::Path {
        &self.path
    }

    /// The current records (empty when the store does not exist yet).
    pub fn read(&self) -> Res<Vec<Record>> {
        match statedir::open(&self.path, Create::Never)? {
            None => Ok(Vec::new()),
            Some(mut file) => {
                let mut text = String::new();
                file.read_to_string(&mut text).map_err(|e| {
                    if e.kind() == std::io::ErrorKind::InvalidData {
                        self.corrupt(0, "not UTF-8")
                    } else {
                        Error::io("cannot read state file", &self.path, e)
                    }
                })?;
                self.parse(&text)
            }
        }
    }

    /// Read, let `f` change the records, and write them back atomically,
    /// serialized against every other writer on the node. Nothing is
    /// written when `f` fails.
    pub fn update<T>(&self, f: impl FnOnce(&mut Vec<Record>) -> Res<T>) -> Res<T> {
        let dir = statedir::ensure()?;
        let _lock = statedir::lock_dir(&dir)?;
        let mut records = self.read()?;
        let out = f(&mut records)?;
        self.remove_stale_temporaries(&dir)?;
        // Unique among writers (pids repeat across pid namespaces); only
        // this writer ever opens it.
        let tmp = dir.join(format!(
            "{}{}.{}.tmp",
            self.temporary_prefix(),
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos())
        ));
        let result = (|| {
            let mut file = statedir::open(&tmp, Create::IfMissing)?
                .ok_or_else(|| Error::Internal("temporary file vanished".into()))?;
            file.write_all(self.render(&records).as_bytes())
                .and_then(|()| file.sync_all())
                .map_err(|e| Error::io("cannot write", &tmp, e))?;
            std::fs::rename(&tmp, &self.path)
                .map_err(|e| Error::io("cannot replace state file", &self.path, e))
        })();
        if result.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        result?;
        if let Ok(d) = std::fs::File::open(&dir) {
            // Durability of the rename across power loss; failure here does
            // not affect crash consistency, so it is not an error.
            let _ = d.sync_all();
        }
        Ok(out)
    }

    fn temporary_prefix(&self) -> String {
        let name = self.path.file_name().unwrap_or_default().to_string_lossy();
        format!(".{name}.")
    }

    /// Temporary files of writers that died (the directory lock is held, so
    /// no live writer has one).
    fn remove_stale_temporaries(&self, dir: &std::path::Path) -> Res<()> {
        let prefix = self.temporary_prefix();
        let entries =
            std::fs::read_dir(dir).map_err(|e| Error::io("cannot list state directory", dir, e))?;
        for entry in entries.flatten() {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if name.starts_with(&prefix) && name.ends_with(".tmp") {
                let _ = std::fs::remove_file(entry.path());
            }
        }
        Ok(())
    }

    fn corrupt(&self, line: usize, why: &str) -> Error {
        Error::OperationFailed(format!(
            "state file {} is corrupt: changed by something other than this library (line {line}: {why}); \
             it is left as it is for inspection: move it aside to start afresh",
            self.path.display()
        ))
    }

    fn parse(&self, text: &str) -> Res<Vec<Record>> {
        let (header, body) = text.split_once('\n').unwrap_or((text, ""));
        let mut words = header.split(' ');
        if words.next() != Some(self.magic) {
            return Err(self.corrupt(1, &format!("expected a header starting {:?}", self.magic)));
        }
        if words.next() != Some("v2") {
            return Err(self.corrupt(1, "not format v2 (records, checksum)"));
        }
        let count = words.next().and_then(|w| w.parse::<usize>().ok());
        let sum = words.next().and_then(|w| u64::from_str_radix(w, 16).ok());
        let (Some(count), Some(sum), None) = (count, sum, words.next()) else {
            return Err(self.corrupt(1, "malformed header"));
        };
        if !text.ends_with('\n') {
            return Err(self.corrupt(text.lines().count(), "truncated"));
        }
        let lines = body.lines().count();
        if lines != count {
            return Err(self.corrupt(
                lines + 1,
                &format!("{lines} records where the header says {count}"),
            ));
        }
        if checksum(body) != sum {
            return Err(self.corrupt(1, "checksum mismatch"));
        }
        body.lines()
            .enumerate()
            .map(|(i, line)| {
                line.split(' ')
                    .map(decode)
                    .collect::<Option<Record>>()
                    .filter(|r| r.first().is_some_and(|k| !k.is_empty()))
                    .ok_or_else(|| self.corrupt(i + 2, "bad field encoding"))
            })
            .collect()
    }

    fn render(&self, records: &[Record]) -> String {
        let mut body = String::new();
        for record in records {
            let fields: Vec<String> = record.iter().map(|f| encode(f)).collect();
            body.push_str(&fields.join(" "));
            body.push('\n');
        }
        format!(
            "{} v2 {} {:016x}\n{body}",
            self.magic,
            records.len(),
            checksum(&body)
        )
    }
}

/// FNV-1a, 64 bits: detects edits and truncation (not an adversary who
/// recomputes it; the directory's permissions keep those out).
fn checksum(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

fn encode(field: &str) -> String {
    let mut out = String::with_capacity(field.len());
    for b in field.bytes() {
        if b.is_ascii_graphic() && b != b'%' {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    if out.is_empty() {
        out.push_str("%-");
    }
    out
}

fn decode(field: &str) -> Option<String> {
    if field == "%-" {
        return Some(String::new());
    }
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_round_trip() {
        for f in ["", "plain", "with space", "100%", "tab\there", "ünï"] {
            assert_eq!(decode(&encode(f)).as_deref(), Some(f));
        }
        assert_eq!(decode("%G1"), None);
        assert_eq!(decode("%4"), None);
    }
}

//! A small crash-safe record store: one text file in the state directory.
//!
//! Readers take no lock: the file is only ever replaced whole by `rename`,
//! so a reader sees the old or the new version, never a torn one. Writers
//! serialize on an `flock` of a sibling `.lock` file (released by the kernel
//! if the writer dies), write a temporary file, fsync it and rename it over
//! the old one. A `kill -9` at any instruction leaves either the old or the
//! new state, and the next writer simply overwrites a stale temporary file.
//!
//! Format: a header line `<magic> v1`, then one record per line, fields
//! separated by single spaces, each field percent-encoded so that any UTF-8
//! value (spaces included) round-trips.

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
        let lock_path = self.path.with_extension("lock");
        let lock = statedir::open(&lock_path, Create::IfMissing)?
            .ok_or_else(|| Error::Internal("lock file vanished".into()))?;
        statedir::lock_exclusive(&lock, &lock_path)?;
        let mut records = self.read()?;
        let out = f(&mut records)?;
        let tmp = self.path.with_extension("tmp");
        // A temporary file left by a writer that died is ours to replace.
        match std::fs::remove_file(&tmp) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io("cannot remove stale", &tmp, e)),
        }
        let mut file = statedir::open(&tmp, Create::IfMissing)?
            .ok_or_else(|| Error::Internal("temporary file vanished".into()))?;
        file.write_all(self.render(&records).as_bytes())
            .and_then(|()| file.sync_all())
            .map_err(|e| Error::io("cannot write", &tmp, e))?;
        std::fs::rename(&tmp, &self.path)
            .map_err(|e| Error::io("cannot replace state file", &self.path, e))?;
        if let Ok(d) = std::fs::File::open(&dir) {
            // Durability of the rename across power loss; failure here does
            // not affect crash consistency, so it is not an error.
            let _ = d.sync_all();
        }
        Ok(out)
    }

    fn corrupt(&self, line: usize, why: &str) -> Error {
        Error::OperationFailed(format!(
            "state file {} is corrupt (line {line}: {why}); move it aside to start afresh",
            self.path.display()
        ))
    }

    fn parse(&self, text: &str) -> Res<Vec<Record>> {
        let mut lines = text.lines();
        let header = format!("{} v1", self.magic);
        if lines.next() != Some(header.as_str()) {
            return Err(self.corrupt(1, &format!("expected header {header:?}")));
        }
        if !text.ends_with('\n') {
            return Err(self.corrupt(text.lines().count(), "truncated"));
        }
        lines
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
        let mut out = format!("{} v1\n", self.magic);
        for record in records {
            let fields: Vec<String> = record.iter().map(|f| encode(f)).collect();
            out.push_str(&fields.join(" "));
            out.push('\n');
        }
        out
    }
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

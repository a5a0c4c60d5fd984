//! Opening (and creating) the state file, and checking it before it is mapped.
//!
//! The file is created sparse (holes read as zero), filled with the header
//! in a temporary file and published with `link(2)`, which never replaces an
//! existing file: a racing process either sees no file or a complete header.
//! A file with another magic, version or size, or a truncated one, is
//! refused with RESULT_ERROR_OPERATION_FAILED and a message saying which.
//!
//! Whoever creates (or first opens) the file records its identity (device
//! and inode) beside it, in `limiter.shm.id` (in the worker's directory,
//! `workers.rs`). A process that finds the file
//! missing while the record exists, or a file with another identity, refuses
//! it with an error saying the file was removed, renamed or replaced: the
//! hard limits and books were in the old file, and starting afresh silently
//! would drop them (and the one-time rule with them). Processes that have
//! the old file mapped keep using it; to start afresh, an operator removes
//! the record (with the file) once no process uses them.
//!
//! The same rules hold for the host-owned limits file (`limits.rs`), a
//! [`Kind`] of its own: another name, magic number and size, mode 0644.

use super::*;
use crate::statedir::{self, Create};
use std::fs::File;
use std::os::unix::fs::{FileExt, MetadataExt, PermissionsExt};
use std::path::Path;

#[cold]
#[inline(never)]
pub(super) fn open_shared() -> Res<&'static Layout> {
    // Before the lock below: a fork while it is held must find the
    // handler that frees it in the child.
    owner::init();
    let _g = owner::OPEN.lock();
    if let Some(l) = map::published() {
        return Ok(l);
    }
    let l = workers::open_own()?;
    // Before any check can take a stripe of the process-local lock.
    local::init();
    map::publish(l);
    Ok(l)
}

/// A kind of state file: its name in the state directory, header and size.
pub(super) struct Kind {
    pub(super) name: &'static str,
    pub(super) magic: u64,
    pub(super) version: u64,
    pub(super) size: usize,
    /// Mode bits of a new file.
    pub(super) mode: fn() -> u32,
}

/// `limiter.shm`: a worker's books (in its directory, `workers.rs`).
pub(super) const BOOKS: Kind = Kind {
    name: FILE_NAME,
    magic: MAGIC,
    version: VERSION,
    size: SIZE,
    mode: statedir::file_mode,
};

impl Kind {
    pub(super) fn id_name(&self) -> String {
        format!("{}.id", self.name)
    }
}

/// Open (creating it if it never existed, its header's tail `tail` at
/// byte 24) the state file of `kind` in the directory `dir`, read-write,
/// checked against its identity record and its header. The record and the
/// file are read and written through one descriptor of the directory: a
/// directory removed and made again meanwhile never gets the identity of
/// the old one's file (which would refuse its own books for ever).
pub(super) fn open_kind(kind: &Kind, dir: &Path, tail: &[u8]) -> Res<(File, std::path::PathBuf)> {
    let d = statedir::Dir::open(dir)?.ok_or_else(|| {
        Error::OperationFailed(format!("state directory {} is missing", dir.display()))
    })?;
    let path = d.path_of(kind.name);
    let id_name = kind.id_name();
    let recorded = read_id(&d, &id_name)?;
    for _ in 0..3 {
        if let Some(file) = d.open_file(kind.name, Create::Never)? {
            let meta = file
                .metadata()
                .map_err(|e| Error::io("cannot stat", &path, e))?;
            let id = (meta.dev(), meta.ino());
            if recorded.is_some_and(|r| r != id) {
                return Err(lost(&d, kind, "replaced by another file"));
            }
            validate(kind, &file, &path)?;
            if recorded.is_none() {
                write_id(&d, &id_name, id)?;
            }
            return Ok((file, path));
        }
        if recorded.is_some() {
            return Err(lost(&d, kind, "removed or renamed"));
        }
        create(kind, &d, tail)?;
    }
    Err(Error::OperationFailed(format!(
        "limiter state file {} keeps disappearing",
        path.display()
    )))
}

/// Open the existing state file of `kind` in `dir` for reading only,
/// checked against its identity record and header; None when it never existed.
pub(super) fn open_kind_read(kind: &Kind, dir: &Path) -> Res<Option<(File, std::path::PathBuf)>> {
    let Some(d) = statedir::Dir::open(dir)? else {
        return Ok(None);
    };
    let path = d.path_of(kind.name);
    let recorded = read_id(&d, &kind.id_name())?;
    let Some(file) = d.open_read(kind.name)? else {
        return match recorded {
            Some(_) => Err(lost(&d, kind, "removed or renamed")),
            None => Ok(None),
        };
    };
    let meta = file
        .metadata()
        .map_err(|e| Error::io("cannot stat", &path, e))?;
    if recorded.is_some_and(|r| r != (meta.dev(), meta.ino())) {
        return Err(lost(&d, kind, "replaced by another file"));
    }
    validate(kind, &file, &path)?;
    Ok(Some((file, path)))
}

#[cold]
fn lost(d: &statedir::Dir, kind: &Kind, how: &str) -> Error {
    Error::OperationFailed(format!(
        "limiter state file {} was {how} since it was created (its identity is recorded in \
         {}): the hard limits and books are in the old file; refusing to start afresh \
         (to do so, remove both once no process uses them)",
        d.path_of(kind.name).display(),
        d.path_of(&kind.id_name()).display()
    ))
}

/// The recorded (device, inode), if any.
fn read_id(d: &statedir::Dir, id_name: &str) -> Res<Option<(u64, u64)>> {
    let Some(mut file) = d.open_read(id_name)? else {
        return Ok(None);
    };
    let mut text = String::new();
    let _ = std::io::Read::read_to_string(&mut file, &mut text);
    let mut words = text.split_ascii_whitespace().map(str::parse::<u64>);
    match (words.next(), words.next(), words.next()) {
        (Some(Ok(dev)), Some(Ok(ino)), None) => Ok(Some((dev, ino))),
        _ => Err(Error::OperationFailed(format!(
            "limiter identity record {} is corrupt; remove it and the state file \
             once no process uses them",
            d.path_of(id_name).display()
        ))),
    }
}

/// A temporary file name of this writer's own: unique among writers, as
/// pids repeat across pid namespaces.
fn temporary(name: &str) -> String {
    format!(
        ".{name}.{}.{}.{}.tmp",
        owner::pid_ns(),
        std::process::id(),
        map::monotonic_ns()
    )
}

/// Record the state file's identity (written whole: a temporary file of
/// this writer's own, renamed over; racing writers record the same).
fn write_id(d: &statedir::Dir, id_name: &str, (dev, ino): (u64, u64)) -> Res<()> {
    let tmp = temporary(id_name);
    let file = d
        .open_file(&tmp, Create::IfMissing)?
        .ok_or_else(|| Error::Internal("create returned no file".into()))?;
    let result = file
        .set_permissions(std::fs::Permissions::from_mode(statedir::file_mode()))
        .and_then(|()| file.write_all_at(format!("{dev} {ino}\n").as_bytes(), 0))
        .and_then(|()| d.rename(&tmp, id_name))
        .map_err(|e| {
            Error::io(
                "cannot record the identity of the state file in",
                &d.path_of(id_name),
                e,
            )
        });
    d.remove(&tmp);
    result
}

/// Create the state file of `kind` in `d`, whole (see the module docs).
fn create(kind: &Kind, d: &statedir::Dir, tail: &[u8]) -> Res<()> {
    let tmp = temporary(kind.name);
    let tmp_path = d.path_of(&tmp);
    d.remove(&tmp);
    let file = d
        .open_file(&tmp, Create::IfMissing)?
        .ok_or_else(|| Error::Internal("create returned no file".into()))?;
    let result = (|| {
        // The umask must not strip the group bits ACCELERATOR_STATE_GROUP_ACCESS asks for.
        file.set_permissions(std::fs::Permissions::from_mode((kind.mode)()))
            .map_err(|e| Error::io("cannot set the mode of", &tmp_path, e))?;
        file.set_len(kind.size as u64)
            .map_err(|e| Error::io("cannot size", &tmp_path, e))?;
        let mut head = [0u8; 24];
        head[0..8].copy_from_slice(&kind.magic.to_le_bytes());
        head[8..16].copy_from_slice(&kind.version.to_le_bytes());
        head[16..24].copy_from_slice(&(kind.size as u64).to_le_bytes());
        file.write_all_at(&head, 0)
            .and_then(|()| file.write_all_at(tail, head.len() as u64))
            .map_err(|e| Error::io("cannot write", &tmp_path, e))?;
        match d.link(&tmp, kind.name) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
            Err(e) => Err(Error::io("cannot publish", &d.path_of(kind.name), e)),
        }
    })();
    d.remove(&tmp);
    result
}

/// Check the header and size of the state file `file` (at `path`).
pub(super) fn validate(kind: &Kind, file: &File, path: &Path) -> Res<()> {
    let fail = |why: String| {
        Err(Error::OperationFailed(format!(
            "limiter state file {} {why}; refusing to use it (remove it when no process uses it)",
            path.display()
        )))
    };
    let len = file
        .metadata()
        .map_err(|e| Error::io("cannot stat", path, e))?
        .len();
    let mut head = [0u8; 24];
    if len < 24 || file.read_exact_at(&mut head, 0).is_err() {
        return fail("is truncated (shorter than its header)".into());
    }
    let word = |i: usize| u64::from_le_bytes(head[i * 8..i * 8 + 8].try_into().unwrap_or([0; 8]));
    if word(0) != kind.magic {
        return fail("is not a limiter state file (bad magic number)".into());
    }
    if word(1) > kind.version {
        return fail(format!(
            "has layout version {}, newer than this library's {}",
            word(1),
            kind.version
        ));
    }
    if word(1) != kind.version {
        return fail(format!(
            "has layout version {}, this library needs {}",
            word(1),
            kind.version
        ));
    }
    if word(2) != kind.size as u64 {
        return fail(format!(
            "declares {} bytes, layout version {} has {}",
            word(2),
            kind.version,
            kind.size
        ));
    }
    if len != kind.size as u64 {
        // Not its size now: a tenant cutting its books to ever new sizes
        // must not make ever new messages.
        return fail(format!("is truncated (its layout has {} bytes)", kind.size));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMALL: Kind = Kind {
        name: "small.shm",
        magic: 0x5eed,
        version: 1,
        size: 4096,
        mode: statedir::file_mode,
    };

    /// An opener that found the file in a directory removed (renamed away)
    /// and made again before it recorded the file's identity records it
    /// in the old directory: the new one's books open, never "removed or
    /// renamed" for ever (CI, stop 39: 99 of 400 clients refused).
    #[test]
    fn a_record_goes_to_the_directory_its_file_was_found_in() {
        let root = std::env::temp_dir().join(format!("file-record-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let dir = root.join("w");
        std::fs::create_dir_all(&dir).unwrap();
        let old = statedir::Dir::open(&dir).unwrap().unwrap();
        create(&SMALL, &old, &[]).unwrap();
        let file = old.open_file(SMALL.name, Create::Never).unwrap().unwrap();
        let meta = file.metadata().unwrap();
        // The removal and the next worker's directory, between the open
        // and the record.
        std::fs::rename(&dir, root.join(".removing")).unwrap();
        std::fs::create_dir(&dir).unwrap();
        write_id(&old, &SMALL.id_name(), (meta.dev(), meta.ino())).unwrap();
        assert!(root.join(".removing").join(SMALL.id_name()).exists());
        assert!(!dir.join(SMALL.id_name()).exists());
        let (new, _) = open_kind(&SMALL, &dir, &[]).unwrap();
        assert_ne!(new.metadata().unwrap().ino(), meta.ino());
        assert!(open_kind_read(&SMALL, &dir).unwrap().is_some());
        std::fs::remove_dir_all(&root).unwrap();
    }
}

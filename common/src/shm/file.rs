//! Opening (and creating) the state file, and checking it before it is mapped.
//!
//! The file is created sparse (holes read as zero), filled with the header
//! in a temporary file and published with `link(2)`, which never replaces an
//! existing file: a racing process either sees no file or a complete header.
//! A file with another magic, version or size, or a truncated one, is
//! refused with RESULT_ERROR_OPERATION_FAILED and a message saying which.

use super::*;
use crate::statedir::{self, Create};
use std::fs::File;
use std::os::unix::fs::{FileExt, PermissionsExt};
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
    let l = open_or_create()?;
    // Before any check can take a stripe of the process-local lock.
    local::init();
    map::publish(l);
    Ok(l)
}

pub(super) fn open_or_create() -> Res<&'static Layout> {
    let dir = statedir::ensure()?;
    let path = dir.join(FILE_NAME);
    for _ in 0..3 {
        if let Some(file) = statedir::open(&path, Create::Never)? {
            let l = validate_and_map(&file, &path)?;
            owner::adopt(file, &path)?;
            return Ok(l);
        }
        create(&dir, &path)?;
    }
    Err(Error::OperationFailed(format!(
        "limiter state file {} keeps disappearing",
        path.display()
    )))
}

pub(super) fn create(dir: &Path, path: &Path) -> Res<()> {
    // Unique among creators: pids repeat across pid namespaces.
    let tmp = dir.join(format!(
        ".{FILE_NAME}.{}.{}.{}.tmp",
        owner::pid_ns(),
        std::process::id(),
        map::monotonic_ns()
    ));
    let _ = std::fs::remove_file(&tmp);
    let file = statedir::open(&tmp, Create::IfMissing)?
        .ok_or_else(|| Error::Internal("create returned no file".into()))?;
    let result = (|| {
        // The umask must not strip the group bits ACCELERATOR_STATE_GROUP_ACCESS asks for.
        file.set_permissions(std::fs::Permissions::from_mode(statedir::file_mode()))
            .map_err(|e| Error::io("cannot set the mode of", &tmp, e))?;
        file.set_len(SIZE as u64)
            .map_err(|e| Error::io("cannot size", &tmp, e))?;
        let mut head = [0u8; 24];
        head[0..8].copy_from_slice(&MAGIC.to_le_bytes());
        head[8..16].copy_from_slice(&VERSION.to_le_bytes());
        head[16..24].copy_from_slice(&(SIZE as u64).to_le_bytes());
        file.write_all_at(&head, 0)
            .map_err(|e| Error::io("cannot write", &tmp, e))?;
        match std::fs::hard_link(&tmp, path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
            Err(e) => Err(Error::io("cannot publish", path, e)),
        }
    })();
    let _ = std::fs::remove_file(&tmp);
    result
}

pub(super) fn validate_and_map(file: &File, path: &Path) -> Res<&'static Layout> {
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
        return fail(format!("is truncated ({len} bytes)"));
    }
    let word = |i: usize| u64::from_le_bytes(head[i * 8..i * 8 + 8].try_into().unwrap_or([0; 8]));
    if word(0) != MAGIC {
        return fail("is not a limiter state file (bad magic number)".into());
    }
    if word(1) > VERSION {
        return fail(format!(
            "has layout version {}, newer than this library's {VERSION}",
            word(1)
        ));
    }
    if word(1) != VERSION {
        return fail(format!(
            "has layout version {}, this library needs {VERSION}",
            word(1)
        ));
    }
    if word(2) != SIZE as u64 {
        return fail(format!(
            "declares {} bytes, layout version {VERSION} has {SIZE}",
            word(2)
        ));
    }
    if len != SIZE as u64 {
        return fail(format!("is truncated ({len} of {SIZE} bytes)"));
    }
    map::map(file, SIZE)
}

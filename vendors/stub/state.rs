//! The simulator's node-wide state: partitions and tracked processes, kept
//! in the state directory through the crash-safe record store.

use super::model::PARTITION_PREFIX;
use crate::vendor::Template;
use accel_common::statedir::{pid_alive, process_start_time};
use accel_common::store::Store;
use accel_common::{Error, Res};

const MAGIC: &str = "accelerator-stub";

fn store() -> Store {
    Store::new("stub-state", MAGIC)
}

/// The records, checked beyond what the store checks (its checksum catches
/// edits; this catches a consistent file the simulator cannot have written).
fn read() -> Res<Vec<Vec<String>>> {
    let records = store().read()?;
    check(&records)?;
    Ok(records)
}

/// Read, check, change and write back (see `Store::update`).
fn update<T>(f: impl FnOnce(&mut Vec<Vec<String>>) -> Res<T>) -> Res<T> {
    store().update(|records| {
        check(records)?;
        f(records)
    })
}

/// Every partition of a known template; a seq record when there are
/// partitions (without it the next UUID could be one of theirs).
fn check(records: &[Vec<String>]) -> Res<()> {
    let mut partitions = 0;
    for r in records.iter().filter(|r| r[0] == "partition") {
        parse_partition(r)?;
        partitions += 1;
    }
    if partitions > 0 && !records.iter().any(|r| r[0] == "seq") {
        return Err(Error::OperationFailed(format!(
            "stub state file {} has partitions but no seq record; \
             it is left as it is for inspection: move it aside to start afresh",
            store().path().display()
        )));
    }
    Ok(())
}

pub struct PartitionRec {
    pub device_uuid: String,
    pub template_id: String,
    pub uuid: String,
}

pub struct Process {
    pub pid: i32,
    pub device_uuid: String,
    pub snapshotted: bool,
}

fn bad(record: &[String]) -> Error {
    Error::OperationFailed(format!(
        "stub state file {} holds a malformed record {record:?}",
        store().path().display()
    ))
}

/// A partition record; one of a template the simulator does not have is
/// refused (counting it as 0 slices would overcommit the device).
fn parse_partition(r: &[String]) -> Res<PartitionRec> {
    match r {
        [_, _, tpl, _] if super::model::template(tpl).is_none() => {
            Err(Error::OperationFailed(format!(
                "stub state file {} holds a partition of unknown template {tpl:?}; \
                 it is left as it is for inspection: move it aside to start afresh",
                store().path().display()
            )))
        }
        [_, dev, tpl, uuid] => Ok(PartitionRec {
            device_uuid: dev.clone(),
            template_id: tpl.clone(),
            uuid: uuid.clone(),
        }),
        _ => Err(bad(r)),
    }
}

/// A process record: pid, start time (so a recycled pid is not mistaken for
/// the process), device, state.
fn parse_process(r: &[String]) -> Res<(Process, u64)> {
    match r {
        [_, pid, start, dev, st] => Ok((
            Process {
                pid: pid.parse().map_err(|_| bad(r))?,
                device_uuid: dev.clone(),
                snapshotted: st == "snapshotted",
            },
            start.parse().map_err(|_| bad(r))?,
        )),
        _ => Err(bad(r)),
    }
}

fn is_live(pid: i32, start: u64) -> bool {
    pid_alive(pid) && process_start_time(pid).is_none_or(|s| s == start)
}

pub fn partitions() -> Res<Vec<PartitionRec>> {
    read()?
        .iter()
        .filter(|r| r[0] == "partition")
        .map(|r| parse_partition(r))
        .collect()
}

/// Live tracked processes (records of dead ones are ignored, and dropped at
/// the next update).
pub fn processes() -> Res<Vec<Process>> {
    let mut out = Vec::new();
    for r in read()?.iter().filter(|r| r[0] == "process") {
        let (p, start) = parse_process(r)?;
        if is_live(p.pid, start) {
            out.push(p);
        }
    }
    Ok(out)
}

/// Charge a partition against the device's slice budget.
pub fn add_partition(device_uuid: &str, t: &Template, slices: u32) -> Res<String> {
    update(|records| {
        let mut used = 0;
        for r in records.iter().filter(|r| r[0] == "partition") {
            let p = parse_partition(r)?;
            if p.device_uuid == device_uuid {
                used += super::model::template(&p.template_id).map_or(0, |t| t.slice_count);
            }
        }
        if used + t.slice_count > slices {
            return Err(Error::ResourceExhausted(format!(
                "device {device_uuid:?} has {} of {slices} slices free; {} needs {}",
                slices - used,
                t.id,
                t.slice_count
            )));
        }
        let seq = next_seq(records)?;
        let uuid = format!("{PARTITION_PREFIX}{device_uuid}-{seq}");
        records.push(vec![
            "partition".into(),
            device_uuid.into(),
            t.id.clone(),
            uuid.clone(),
        ]);
        Ok(uuid)
    })
}

fn next_seq(records: &mut Vec<Vec<String>>) -> Res<u64> {
    let pos = records.iter().position(|r| r[0] == "seq");
    let seq = match pos {
        Some(i) => {
            records[i]
                .get(1)
                .and_then(|s| s.parse::<u64>().ok())
                .ok_or_else(|| bad(&records[i]))?
                + 1
        }
        // (`check` refused partitions without one.)
        None => 1,
    };
    let rec = vec!["seq".to_string(), seq.to_string()];
    match pos {
        Some(i) => records[i] = rec,
        None => records.insert(0, rec),
    }
    Ok(seq)
}

/// Remove the newest partition of a template on a device, or the one whose
/// UUID is `id`.
pub fn remove_partition(device_uuid: &str, id: &str) -> Res<()> {
    update(|records| {
        let mut found = None;
        for (i, r) in records
            .iter()
            .enumerate()
            .filter(|(_, r)| r[0] == "partition")
        {
            let p = parse_partition(r)?;
            if p.device_uuid == device_uuid && (p.template_id == id || p.uuid == id) {
                found = Some(i);
            }
        }
        let i = found.ok_or_else(|| {
            Error::NotFound(format!("no partition {id:?} on device {device_uuid:?}"))
        })?;
        records.remove(i);
        Ok(())
    })
}

/// Checkpoint (or restore) the device state of `pids`: all or none. A
/// process must be running to be snapshotted and snapshotted to be resumed.
pub fn set_snapshotted(pids: &[i32], device_uuid: &str, snapshotted: bool) -> Res<()> {
    update(|records| {
        // Drop records of processes that have exited.
        let mut kept = Vec::with_capacity(records.len());
        for r in records.drain(..) {
            if r[0] == "process" {
                let (p, start) = parse_process(&r)?;
                if !is_live(p.pid, start) {
                    continue;
                }
            }
            kept.push(r);
        }
        *records = kept;
        for &pid in pids {
            let current = records
                .iter()
                .filter(|r| r[0] == "process")
                .map(|r| parse_process(r))
                .collect::<Res<Vec<_>>>()?
                .into_iter()
                .find(|(p, _)| p.pid == pid)
                .is_some_and(|(p, _)| p.snapshotted);
            if current == snapshotted {
                let (verb, state) = if snapshotted {
                    ("snapshot", "already snapshotted")
                } else {
                    ("resume", "not snapshotted")
                };
                return Err(Error::OperationFailed(format!(
                    "cannot {verb} process {pid}: it is {state}; no process was changed"
                )));
            }
        }
        for &pid in pids {
            records.retain(|r| !(r[0] == "process" && r[1] == pid.to_string()));
            records.push(vec![
                "process".into(),
                pid.to_string(),
                process_start_time(pid).unwrap_or(0).to_string(),
                device_uuid.into(),
                if snapshotted {
                    "snapshotted"
                } else {
                    "running"
                }
                .into(),
            ]);
        }
        Ok(())
    })
}

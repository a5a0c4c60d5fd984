//! Graph memory: what a graph's allocation nodes (`cuGraphAddMemAllocNode`,
//! or `cuMemAllocAsync` captured from a stream) take from their devices'
//! graph memory pools.
//!
//! The driver maps a graph's allocations to physical memory from the
//! device's graph pool when the instantiated graph is uploaded or first
//! launched, keeps it reserved for the graph after it runs, hands it back to
//! the pool (not to the device) when the graph is destroyed, and gives the
//! pool's unused reserve back to the device only on `cuDeviceGraphMemTrim`.
//! A launch is the hot path and says nothing of memory, so the hook
//! reserves up front: at instantiation it charges what the new graph's
//! allocation nodes need beyond what it already charged for the device's
//! graph pool (refused: the instantiation returns
//! `CUDA_ERROR_OUT_OF_MEMORY` and never reaches the driver). Per device it
//! keeps `needs`, the sum over live instantiated graphs, and `charged`,
//! what it charged (never below `needs`); a destroyed graph lowers `needs`
//! only; a trim lowers `charged` to the larger of `needs` and what the
//! driver still reserves (`CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT`: it
//! includes allocations still live after their graph was destroyed).
//!
//! A `cuMemAllocAsync` captured from a stream is charged as an allocation
//! while the capture lasts (the hook's allocation path cannot tell a
//! capturing stream without asking the driver on every call); when the
//! capture ends it is the graph's allocation node, charged at
//! instantiation like the others, and that first charge is given back
//! (`captured`).

use crate::devices::{self, Device};
use crate::forksafe::{books, ForkSafe};
use crate::limits::{self, Verdict};
use crate::memory::{self, CuResult, Driver, Kind, CUDA_ERROR_OUT_OF_MEMORY, CUDA_SUCCESS};
use std::collections::HashMap;

#[derive(Debug, Default)]
pub struct Books {
    /// Each live instantiated graph's needs: (device slot, bytes).
    execs: HashMap<u64, Vec<(usize, u64)>>,
    needs: HashMap<usize, u64>,
    charged: HashMap<usize, u64>,
}

/// The process's books (the fork handlers in `ffi` hold them across `fork()`).
pub static BOOKS: ForkSafe<Books> = ForkSafe::new();

/// The device of an ordinal, if the worker's limit applies there.
fn device(drv: &impl Driver, ordinal: i32) -> Option<Device> {
    devices::resolve(ordinal, |o| drv.uuid(o)).ok()?
}

/// Instantiate a graph whose allocation nodes take `nodes` (device ordinal,
/// bytes): charge what they need beyond the graph pools' charge, run the
/// driver's `call`, record the new exec (`exec()`) or give the charge back.
pub fn instantiate(
    drv: &impl Driver,
    nodes: &[(i32, u64)],
    call: impl FnOnce() -> CuResult,
    exec: impl FnOnce() -> u64,
) -> CuResult {
    if nodes.is_empty() || !limits::active() || limits::passes_through() {
        return call();
    }
    let mut need: Vec<(usize, u64)> = Vec::new();
    for &(ordinal, bytes) in nodes {
        if let Some(d) = device(drv, ordinal) {
            match need.iter_mut().find(|(s, _)| *s == d.slot) {
                Some((_, b)) => *b = b.saturating_add(bytes),
                None => need.push((d.slot, bytes)),
            }
        }
    }
    let mut guard = BOOKS.lock();
    let state = books(&mut guard);
    // (slot, what was charged now)
    let mut extra: Vec<(usize, u64)> = Vec::new();
    for &(slot, bytes) in &need {
        let wanted = state
            .needs
            .get(&slot)
            .copied()
            .unwrap_or(0)
            .saturating_add(bytes);
        let more = wanted.saturating_sub(state.charged.get(&slot).copied().unwrap_or(0));
        if more == 0 {
            continue;
        }
        match limits::charge(slot, more) {
            Verdict::Charged => extra.push((slot, more)),
            Verdict::Unaccounted => {}
            Verdict::Refused => {
                for (s, b) in extra {
                    limits::give_back(s, b);
                }
                return CUDA_ERROR_OUT_OF_MEMORY;
            }
        }
    }
    let result = call();
    if result != CUDA_SUCCESS {
        for (s, b) in extra {
            limits::give_back(s, b);
        }
        return result;
    }
    for &(slot, bytes) in &need {
        *state.needs.entry(slot).or_default() += bytes;
    }
    for (slot, bytes) in extra {
        *state.charged.entry(slot).or_default() += bytes;
    }
    state.execs.insert(exec(), need);
    result
}

/// A stream capture ended in a graph whose allocation nodes are at
/// `addresses`: the allocations captured there were charged as such, and
/// the driver took nothing for them (it backs them when the graph is
/// instantiated and launched, charged then): those charges end.
pub fn captured(addresses: &[u64]) {
    if limits::active() {
        for &a in addresses {
            memory::uncharge(Kind::Pointer, a);
        }
    }
}

/// `cuGraphExecDestroy(exec)`: its memory goes back to the graph pool,
/// which keeps it (and so its charge) until a trim.
pub fn destroy(exec: u64, call: impl FnOnce() -> CuResult) -> CuResult {
    if !limits::active() {
        return call();
    }
    let mut guard = BOOKS.lock();
    let result = call();
    if result == CUDA_SUCCESS {
        let state = books(&mut guard);
        for (slot, bytes) in state.execs.remove(&exec).unwrap_or_default() {
            let n = state.needs.entry(slot).or_default();
            *n = n.saturating_sub(bytes);
        }
    }
    result
}

/// `cuDeviceGraphMemTrim(ordinal)`: the charge comes down to what the live
/// graphs need or the driver still reserves (`reserved()` after the trim),
/// whichever is more.
pub fn trim(
    drv: &impl Driver,
    ordinal: i32,
    call: impl FnOnce() -> CuResult,
    reserved: impl FnOnce() -> Option<u64>,
) -> CuResult {
    if !limits::active() {
        return call();
    }
    let mut guard = BOOKS.lock();
    let result = call();
    let Some(d) = device(drv, ordinal).filter(|_| result == CUDA_SUCCESS) else {
        return result;
    };
    let state = books(&mut guard);
    let keep = state
        .needs
        .get(&d.slot)
        .copied()
        .unwrap_or(0)
        .max(reserved().unwrap_or(0));
    let charged = state.charged.entry(d.slot).or_default();
    if *charged > keep {
        limits::give_back(d.slot, *charged - keep);
        *charged = keep;
    }
    result
}

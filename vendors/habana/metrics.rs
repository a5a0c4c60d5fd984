//! Live figures, converted to the ABI's units. What HLML cannot say is 0;
//! a failure other than "not supported" is the call's error (a device
//! lost between calls shows as HLML's AIP_IS_LOST: NOT_FOUND here).
//!
//! Not read: the PCIe throughput (HLML gives no unit for it), the energy
//! counter and the ECC error counts (the ABI's metrics have no field for
//! them), the per-process figures (HLML lists no processes).

use super::discovery::Dev;
use super::hlml::{Hlml, TEMP_ON_AIP};
use crate::driver_error::optional;
use crate::vendor::Metrics;
use accel_common::Res;

pub fn metrics(hlml: &Hlml, dev: &Dev) -> Res<Metrics> {
    let h = dev.handle;
    let memory = optional(hlml.memory(h))?;
    Ok(Metrics {
        device_uuid: dev.info.uuid.clone(),
        // mW → W
        power_w: optional(hlml.power(h))?.map_or(0.0, |mw| f64::from(mw) / 1000.0),
        temperature_c: optional(hlml.temperature(h, TEMP_ON_AIP))?.map_or(0.0, f64::from),
        pcie_rx_bytes: 0,
        pcie_tx_bytes: 0,
        // The AIP's (TPCs and MMEs together) busy share of the last second.
        sm_active_percent: optional(hlml.utilization(h))?.map_or(0, |u| u.min(100)),
        tensor_core_percent: 0,
        memory_used_bytes: memory.map_or(0, |m| m.used.min(m.total)),
        memory_total_bytes: memory.map_or(0, |m| m.total),
    })
}

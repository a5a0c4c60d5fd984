//! Per-architecture tables, keyed by CUDA compute capability (major, minor).
//!
//! FP32 cores per SM: CUDA C++ Programming Guide, "Arithmetic Instructions"
//! throughput table (32-bit floating-point add/multiply results per clock
//! per SM). Used to turn NVML's CUDA-core count into SMs where NVML has no
//! SM count of its own (devices without MIG).
//!
//! Dense FP16/BF16 tensor FLOPs per SM per clock (an FMA counts 2) are
//! derived from NVIDIA's published peaks divided by SMs × boost clock:
//! - 7.0 Volta V100: 125 TFLOPS / (80 SMs × 1530 MHz) = 1024
//! - 7.5 Turing T4: 65 TFLOPS / (40 × 1590 MHz) = 1024
//! - 8.0 Ampere A100: 312 TFLOPS / (108 × 1410 MHz) = 2048 (A100 whitepaper)
//! - 8.6 Ampere GA10x A10/A40: 125 TFLOPS / (72 × 1695 MHz) = 1024
//! - 8.9 Ada L40S: 362 TFLOPS / (142 × 2520 MHz) = 1024 (L40S datasheet)
//! - 9.0 Hopper H100 SXM: 989.4 TFLOPS / (132 × 1830 MHz) = 4096 (H100 whitepaper)
//! - 10.0 Blackwell B200: twice Hopper per SM = 8192 (Blackwell technical brief)
//! - 12.0 Blackwell RTX: 1024 (RTX Blackwell whitepaper, FP16 accumulate)
//!
//! Architectures not listed have no entry: their TFLOPS are reported as 0
//! (unknown) rather than guessed.

/// FP32 cores per SM, or `None` for an unknown compute capability.
pub fn cores_per_sm(cc: (i32, i32)) -> Option<u32> {
    Some(match cc {
        (3, _) => 192,
        (5, _) => 128,
        (6, 0) => 64,
        (6, _) => 128,
        (7, _) => 64,
        (8, 0) => 64,
        (8, _) => 128,
        (9, 0) => 128,
        (10, _) | (12, _) => 128,
        _ => return None,
    })
}

/// Dense FP16/BF16 tensor FLOPs per SM per clock, or `None` if unknown.
pub fn tensor_flops_per_sm_clock(cc: (i32, i32)) -> Option<u32> {
    Some(match cc {
        (7, 0) | (7, 2) | (7, 5) => 1024,
        (8, 0) => 2048,
        (8, 6) | (8, 7) | (8, 9) => 1024,
        (9, 0) => 4096,
        (10, _) => 8192,
        (12, _) => 1024,
        _ => return None,
    })
}

/// Peak dense FP16 tensor TFLOPS: SMs × max SM clock × per-SM rate.
pub fn max_tflops(sms: u64, max_sm_clock_mhz: u32, cc: (i32, i32)) -> f64 {
    match tensor_flops_per_sm_clock(cc) {
        Some(rate) => sms as f64 * f64::from(max_sm_clock_mhz) * 1e6 * f64::from(rate) / 1e12,
        None => 0.0,
    }
}

/// NVLink bandwidth per link, both directions together, in MB/s, by the
/// `nvmlNvlinkVersion_t` code nvmlDeviceGetNvLinkVersion returns (a code,
/// not a generation: NVML_NVLINK_VERSION_1_0 = 1, 2_0 = 2, 2_2 = 3, 3_0 = 4,
/// 3_1 = 5, 4_0 = 6, 5_0 = 7, 6_0 = 8). NVLink 1.0 20 GB/s per direction
/// (P100); 2.x, 3.x and 4.0 25 GB/s (V100 6 links = 300 GB/s, A100 12 =
/// 600 GB/s, H100 18 = 900 GB/s); 5.0 50 GB/s (B200 18 = 1.8 TB/s). 6.0 and
/// codes this table does not know: 0 (unknown), not a guess.
pub fn nvlink_mbps_per_link(version_code: u32) -> u32 {
    match version_code {
        1 => 40_000,
        2..=6 => 50_000,
        7 => 100_000,
        _ => 0,
    }
}

/// PCIe bandwidth per direction in MB/s for one link of `width` lanes
/// (PCI-SIG: 2.5/5/8/16/32/64 GT/s, 8b/10b to gen 2, 128b/130b after).
pub fn pcie_mbps(gen: u32, width: u32) -> u32 {
    let per_lane = match gen {
        1 => 250,
        2 => 500,
        3 => 985,
        4 => 1969,
        5 => 3938,
        6 => 7877,
        _ => 0,
    };
    per_lane * width
}

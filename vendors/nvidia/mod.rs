//! The NVIDIA vendor: NVML (through nvml-wrapper) for discovery, MIG,
//! topology and metrics; the CUDA driver's checkpoint API (through
//! libloading) for snapshot/resume. Both libraries are loaded at run time,
//! from `ACCELERATOR_NVML_PATH` / `ACCELERATOR_CUDA_PATH` when set.
//!
//! NVML is initialised once, on the first call of the library, and shut
//! down when the library is unloaded or the process exits (see `Driver`).
//! Static facts are discovered then and cached; everything dynamic is asked
//! of the driver on each call. `ffi` holds the only `unsafe`.

mod arch;
mod checkpoint;
mod discovery;
mod error;
mod ffi;
mod metrics;
mod mig;
mod mig_access;
mod topology;

use crate::fork_lock::{self, ForkMutex, ForkRwLock};
use crate::log::log_at;
use crate::vendor::*;
use accel_common::{Error, Res};
use discovery::Dev;
use nvml_wrapper::{Device, Nvml};
use std::ffi::OsString;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

pub use error::NvError;

const NVML_DEFAULT: &str = "libnvidia-ml.so.1";
const CUDA_DEFAULT: &str = "libcuda.so.1";
/// Driver user-space libraries a CUDA container needs (name prefixes).
const DRIVER_LIBS: &[&str] = &[
    "libnvidia-ml.so",
    "libcuda.so",
    "libcudadebugger.so",
    "libnvidia-ptxjitcompiler.so",
    "libnvidia-nvvm.so",
    "libnvidia-gpucomp.so",
    "libnvidia-allocator.so",
    "libnvidia-cfg.so",
    "libnvidia-opencl.so",
];

/// The loaded driver libraries. Held in a static so that the unload hook
/// can shut NVML down; every call holds the read lock while it uses them.
pub(crate) struct Driver {
    pub nvml: Nvml,
    pub ext: ffi::NvmlExt,
    pub cuda: Option<ffi::Cuda>,
}

static DRIVER: ForkRwLock<Option<Driver>> = ForkRwLock::new(None);

/// MIG instances this process created, oldest first: (device, template, GI id).
static CREATED: ForkMutex<Vec<(usize, String, u32)>> = ForkMutex::new(Vec::new());
/// Previous NVLink counters per device, for throughput.
static COUNTERS: ForkMutex<metrics::Counters> = ForkMutex::new(metrics::Counters::new());
/// Previous GPM sample per device, for SM and tensor activity.
static GPM: ForkMutex<metrics::GpmSamples> = ForkMutex::new(metrics::GpmSamples::new());

/// Before `fork()`: hold this vendor's locks, the driver's first (every
/// call holds it outside the others, none of which nests in another).
extern "C" fn hold_for_fork() {
    DRIVER.hold();
    CREATED.hold();
    COUNTERS.hold();
    GPM.hold();
}

pub(crate) extern "C" fn shut_down() {
    // A thread still inside a call at exit keeps NVML up rather than deadlock.
    let deadline = std::time::Instant::now() + Duration::from_millis(200);
    let mut guard = DRIVER.try_write();
    while guard.is_none() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
        guard = DRIVER.try_write();
    }
    if let Some(mut guard) = guard {
        // Dropping Nvml calls nvmlShutdown; then the handles are closed.
        guard.take();
    }
}

fn env_path(var: &str, default: &str) -> OsString {
    std::env::var_os(var)
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| default.into())
}

pub fn open() -> Res<Box<dyn Vendor>> {
    let mut slot = DRIVER.write();
    if slot.is_none() {
        let path = env_path("ACCELERATOR_NVML_PATH", NVML_DEFAULT);
        let nvml = Nvml::builder().lib_path(&path).init().map_err(|e| {
            Error::NotSupported(format!("NVML ({}) not usable: {e}", path.to_string_lossy()))
        })?;
        let ext = ffi::NvmlExt::open(&path).map_err(Error::OperationFailed)?;
        let cuda_path = env_path("ACCELERATOR_CUDA_PATH", CUDA_DEFAULT);
        let cuda = match ffi::Cuda::open(&cuda_path) {
            Ok(c) => {
                if !c.has_checkpoint {
                    log_at!(
                        Info,
                        "nvidia: CUDA driver {} has no checkpoint API: snapshot unsupported",
                        c.driver_version
                    );
                }
                Some(c)
            }
            Err(e) => {
                log_at!(
                    Info,
                    "nvidia: CUDA driver ({}) not loaded, snapshot unsupported: {e}",
                    cuda_path.to_string_lossy()
                );
                None
            }
        };
        *slot = Some(Driver { nvml, ext, cuda });
    }
    let drv = slot
        .as_ref()
        .ok_or_else(|| Error::Internal("driver slot empty".into()))?;
    let devs = discovery::discover(drv)?;
    drop(slot);
    static FORK_HANDLERS: AtomicBool = AtomicBool::new(false);
    fork_lock::install(hold_for_fork, &FORK_HANDLERS);
    // The caches start empty with each opened vendor, as they did when
    // they were its fields.
    COUNTERS.lock().clear();
    GPM.lock().clear();
    Ok(Box::new(Nvidia { devs }))
}

/// Runs `f` with the loaded driver.
pub(crate) fn with_driver<T>(f: impl FnOnce(&Driver) -> Res<T>) -> Res<T> {
    let guard = DRIVER.read();
    match guard.as_ref() {
        Some(d) => f(d),
        None => Err(Error::OperationFailed("NVML has been shut down".into())),
    }
}

pub(crate) struct Nvidia {
    devs: Vec<Dev>,
}

impl Nvidia {
    fn dev(&self, index: usize) -> Res<&Dev> {
        self.devs.get(index).ok_or_else(|| {
            Error::NotFound(format!(
                "device index {index} (there are {} devices)",
                self.devs.len()
            ))
        })
    }

    fn infos(&self) -> Vec<DeviceInfo> {
        self.devs.iter().map(|d| d.info.clone()).collect()
    }

    fn by_uuid(&self, uuid: &str) -> Res<(usize, &Dev)> {
        self.devs
            .iter()
            .enumerate()
            .find(|(_, d)| d.info.uuid == uuid)
            .ok_or_else(|| Error::NotFound(format!("device {uuid:?}")))
    }
}

/// The NVML handle of a cached device (looked up by UUID, which is stable).
pub(crate) fn handle<'a>(drv: &'a Driver, dev: &Dev) -> Res<Device<'a>> {
    drv.nvml
        .device_by_uuid(dev.info.uuid.as_str())
        .map_err(|e| NvError::nvml("nvmlDeviceGetHandleByUUID", e).into())
}

impl Vendor for Nvidia {
    fn name(&self) -> &'static str {
        "nvidia"
    }

    fn devices(&self) -> Res<Vec<DeviceInfo>> {
        Ok(self.devs.iter().map(|d| d.info.clone()).collect())
    }

    fn related_devices(&self, index: usize) -> Res<Vec<Link>> {
        Ok(self.dev(index)?.links.clone())
    }

    fn partition_templates(&self, index: usize) -> Res<Vec<Template>> {
        mig::templates(self.dev(index)?)
    }

    fn topology(&self, indices: &[usize]) -> Res<Topology> {
        for &i in indices {
            self.dev(i)?;
        }
        with_driver(|drv| topology::topology(drv, &self.devs, indices))
    }

    fn assign_partition(&self, template_id: &str, device_uuid: &str) -> Res<Partition> {
        let (i, dev) = self.by_uuid(device_uuid)?;
        with_driver(|drv| mig::assign(drv, i, dev, template_id, &CREATED))
    }

    fn remove_partition(&self, template_id: &str, device_uuid: &str) -> Res<()> {
        let (i, dev) = self.by_uuid(device_uuid)?;
        with_driver(|drv| mig::remove(drv, i, dev, template_id, &CREATED))
    }

    fn snapshot(&self, pids: &[i32], device_uuid: &str) -> Res<()> {
        if !device_uuid.is_empty() {
            self.by_uuid(device_uuid)?;
        }
        with_driver(|drv| checkpoint::snapshot(drv, pids))
    }

    fn resume(&self, pids: &[i32], device_uuid: &str) -> Res<()> {
        if !device_uuid.is_empty() {
            self.by_uuid(device_uuid)?;
        }
        with_driver(|drv| checkpoint::resume(drv, pids))
    }

    fn process_compute(&self, query: &ProcessQuery) -> Res<Vec<ProcessCompute>> {
        let driver = with_driver(|drv| metrics::process_compute(drv, &self.devs, query))?;
        crate::usage::merge_compute(driver, &self.infos(), query)
    }

    fn process_memory(&self, query: &ProcessQuery) -> Res<Vec<ProcessMemory>> {
        let driver = with_driver(|drv| metrics::process_memory(drv, &self.devs, query))?;
        crate::usage::merge_memory(driver, &self.infos(), query)
    }

    fn metrics(&self, device_uuid: &str) -> Res<Metrics> {
        let (i, dev) = self.by_uuid(device_uuid)?;
        with_driver(|drv| metrics::device(drv, i, dev, &GPM))
    }

    fn extended_metrics(&self, device_uuid: &str) -> Res<ExtendedMetrics> {
        let (i, dev) = self.by_uuid(device_uuid)?;
        with_driver(|drv| metrics::extended(drv, i, dev, &COUNTERS))
    }

    fn partition_metrics(&self, uuid: &str) -> Res<Metrics> {
        with_driver(|drv| mig::metrics(drv, &self.devs, uuid))
    }

    fn process_utilization(&self, device_uuid: &str, since: u64) -> Res<Vec<UtilizationSample>> {
        let (_, dev) = self.by_uuid(device_uuid)?;
        with_driver(|drv| metrics::process_utilization(drv, dev, since))
    }

    /// The driver's user-space libraries in the directory NVML was loaded
    /// from (what nvidia-container-toolkit mounts for compute and utility).
    fn mount_libs(&self) -> Res<Vec<Mount>> {
        Ok(crate::hostfiles::driver_libs(
            "libnvidia-ml.so",
            DRIVER_LIBS,
        ))
    }
}

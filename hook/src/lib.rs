//! libcuda_limiter.so: the preload library that makes CUDA processes obey
//! the limiter's memory limits (`LD_PRELOAD=…/libcuda_limiter.so`).
//!
//! - `ffi`: the only `unsafe` module: exported `cu*`/`nvml*` symbols, the
//!   interposed `dlsym`, `cuGetProcAddress[_v2]` and the real functions.
//! - `memory`: charging allocations before the driver runs, giving frees
//!   back exactly, the virtualized `cuMemGetInfo`/NVML view.
//! - `vmm`: how long `cuMemCreate`'s memory stays charged (handle
//!   references, mappings, multicast bindings).
//! - `graphs`: graph memory, charged when a graph with allocation nodes is
//!   instantiated.
//! - `ctxlimits`: what a context's raised stack, printf FIFO and heap limits
//!   take (`cuCtxSetLimit`).
//! - `modules`: what a module's or library's `__device__` globals take
//!   (`cuModuleLoad*`, `cuLibraryLoad*`), read from the image.
//! - `context`: the memory the driver reserves for a context, charged
//!   from its creation to its destruction.
//! - `forksafe`: books behind one mutex, held across `fork()`.
//! - `devices`: CUDA ordinals to the limiter's device slots.
//! - `current`: the calling thread's current context and its device, as
//!   its last launch found them (one thread-local block).
//! - `localmem`: the local memory a launch grows its context to, charged
//!   on a function's first launch in a context.
//! - `launch`: kernel launches wait for their worker's tokens (compute limits);
//! - `depth`: and, for a worker whose queue is capped, until few enough of
//!   its launches are queued on the device (events the hook records);
//! - `refresh`: one thread per limited process, keeping each launch's
//!   charge in step with the gain the host's compute sampler stores.
//! - `limits`: the one door to the limiter's shared state (and the
//!   fail-open / fail-closed policy).
//!
//! Loaded into programs we do not control: no constructors, no threads at
//! load (the refresh thread starts on the first launch of a limited
//! worker), nothing printed unless the limiter's state is unusable (one
//! line); the only library it loads itself is NVML (contexts' memory).

mod context;
mod ctxlimits;
mod current;
mod depth;
mod devices;
mod ffi;
mod forksafe;
mod graphs;
mod launch;
mod limits;
mod localmem;
mod memory;
mod modules;
mod refresh;
mod vmm;

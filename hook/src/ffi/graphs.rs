//! Graph memory entry points: instantiation charged for the graph's
//! allocation nodes (`crate::graphs`) and its kernel nodes' local memory
//! (`crate::localmem::reserve`), exec destruction and
//! `cuDeviceGraphMemTrim` reported. Launches are not touched (`launch.rs`).

use super::*;
use crate::graphs;

type CUgraph = *mut c_void;
type CUgraphExec = *mut c_void;
type CUgraphNode = *mut c_void;

/// `CUgraphNodeType` (cuda.h): CU_GRAPH_NODE_TYPE_KERNEL, _GRAPH, _MEM_ALLOC.
const CU_GRAPH_NODE_TYPE_KERNEL: c_int = 0;
const CU_GRAPH_NODE_TYPE_GRAPH: c_int = 1;
const CU_GRAPH_NODE_TYPE_MEM_ALLOC: c_int = 10;
/// `CUgraphMem_attribute` (cuda.h).
const CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT: c_int = 2;

/// `CUmemPoolProps` (cuda.h, 88 bytes in CUDA 11 and 12 alike).
#[repr(C)]
struct PoolProps {
    alloc_type: c_uint,
    handle_types: c_uint,
    location: MemLocation,
    win32_security_attributes: *mut c_void,
    rest: [u8; 64],
}

/// `CUDA_MEM_ALLOC_NODE_PARAMS` (cuda.h).
#[repr(C)]
struct AllocNodeParams {
    pool_props: PoolProps,
    access_descs: *const c_void,
    access_desc_count: usize,
    bytesize: usize,
    dptr: CUdeviceptr,
}

/// `CUDA_KERNEL_NODE_PARAMS_v2` (cuda.h); `_v1` is its first fields, up
/// to `extra`.
#[repr(C)]
pub struct KernelNodeParams {
    func: *mut c_void,
    dims: [c_uint; 6],
    shared_mem_bytes: c_uint,
    kernel_params: *mut *mut c_void,
    extra: *mut *mut c_void,
    kern: *mut c_void,
    ctx: *mut c_void,
}

/// A graph's nodes that take memory.
#[derive(Default)]
struct Nodes {
    /// Allocation nodes on a device: (device ordinal, bytes) each.
    allocations: Vec<(i32, u64)>,
    /// Every allocation node's address.
    addresses: Vec<u64>,
    /// Kernel nodes' functions (a `CUkernel` where the node names one).
    kernels: Vec<*mut c_void>,
}

/// The function of a kernel node (None: the driver would not say).
unsafe fn kernel_function(node: CUgraphNode) -> Option<*mut c_void> {
    type Params = unsafe extern "C" fn(CUgraphNode, *mut KernelNodeParams) -> CuResult;
    let get = CUDA
        .real::<Params>(Cu::GraphKernelNodeGetParamsV2 as usize)
        .or_else(|| CUDA.real::<Params>(Cu::GraphKernelNodeGetParams as usize))?;
    // Zeroed and of _v2's size: a driver writing _v1 leaves kern NULL.
    let mut p: KernelNodeParams = std::mem::zeroed();
    (get(node, &mut p) == CUDA_SUCCESS).then_some(if p.func.is_null() { p.kern } else { p.func })
}

/// What `graph`'s allocation and kernel nodes take, its child graphs'
/// included.
unsafe fn graph_nodes(graph: CUgraph) -> Nodes {
    let mut found = Nodes::default();
    collect_nodes(graph, CHILD_DEPTH, &mut found);
    found
}

/// How deep child graphs are followed (a graph cannot contain itself: a
/// bound against a driver that says otherwise).
const CHILD_DEPTH: u32 = 16;

/// [`graph_nodes`] of `graph` into `found`, child graphs `depth` levels
/// deeper at most.
unsafe fn collect_nodes(graph: CUgraph, depth: u32, found: &mut Nodes) {
    type GetNodes = unsafe extern "C" fn(CUgraph, *mut CUgraphNode, *mut usize) -> CuResult;
    type NodeType = unsafe extern "C" fn(CUgraphNode, *mut c_int) -> CuResult;
    type Params = unsafe extern "C" fn(CUgraphNode, *mut AllocNodeParams) -> CuResult;
    type Child = unsafe extern "C" fn(CUgraphNode, *mut CUgraph) -> CuResult;
    let (Some(get_nodes), Some(node_type), Some(params)) = (
        CUDA.real::<GetNodes>(Cu::GraphGetNodes as usize),
        CUDA.real::<NodeType>(Cu::GraphNodeGetType as usize),
        CUDA.real::<Params>(Cu::GraphMemAllocNodeGetParams as usize),
    ) else {
        return;
    };
    let mut n = 0usize;
    if graph.is_null() || get_nodes(graph, std::ptr::null_mut(), &mut n) != CUDA_SUCCESS {
        return;
    }
    let mut nodes = vec![std::ptr::null_mut(); n];
    if get_nodes(graph, nodes.as_mut_ptr(), &mut n) != CUDA_SUCCESS {
        return;
    }
    nodes.truncate(n);
    for node in nodes {
        let mut kind: c_int = -1;
        if node_type(node, &mut kind) != CUDA_SUCCESS {
            continue;
        }
        if kind == CU_GRAPH_NODE_TYPE_KERNEL {
            found.kernels.extend(kernel_function(node));
            continue;
        }
        if kind == CU_GRAPH_NODE_TYPE_GRAPH {
            let child = CUDA.real::<Child>(Cu::GraphChildGraphNodeGetGraph as usize);
            let mut g: CUgraph = std::ptr::null_mut();
            if let (Some(child), Some(depth)) = (child, depth.checked_sub(1)) {
                if child(node, &mut g) == CUDA_SUCCESS {
                    collect_nodes(g, depth, found);
                }
            }
            continue;
        }
        let mut p: AllocNodeParams = std::mem::zeroed();
        if kind != CU_GRAPH_NODE_TYPE_MEM_ALLOC || params(node, &mut p) != CUDA_SUCCESS {
            continue;
        }
        found.addresses.push(p.dptr);
        // A device or one of its locality domains: that device's memory.
        if let Some(memory::Place::Device(ordinal)) = place_of(&p.pool_props.location) {
            found.allocations.push((ordinal, p.bytesize as u64));
        }
    }
}

unsafe fn instantiate(
    exec: *mut CUgraphExec,
    graph: CUgraph,
    call: impl FnOnce() -> CuResult,
) -> CuResult {
    if exec.is_null() || !limits::active() {
        return call();
    }
    boundary(CUDA_ERROR_UNKNOWN, || {
        let nodes = graph_nodes(graph);
        let grown = reserve_local_memory(&nodes.kernels);
        if grown != CUDA_SUCCESS {
            return grown;
        }
        graphs::instantiate(&Cuda, &nodes.allocations, call, || *exec as u64)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphInstantiate_v2(
    exec: *mut CUgraphExec,
    graph: CUgraph,
    error_node: *mut CUgraphNode,
    log: *mut c_char,
    log_size: usize,
) -> CuResult {
    type F = unsafe extern "C" fn(
        *mut CUgraphExec,
        CUgraph,
        *mut CUgraphNode,
        *mut c_char,
        usize,
    ) -> CuResult;
    let real = real_or_return!(Cu::GraphInstantiateV2, F);
    instantiate(exec, graph, || real(exec, graph, error_node, log, log_size))
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphInstantiateWithFlags(
    exec: *mut CUgraphExec,
    graph: CUgraph,
    flags: u64,
) -> CuResult {
    type F = unsafe extern "C" fn(*mut CUgraphExec, CUgraph, u64) -> CuResult;
    let real = real_or_return!(Cu::GraphInstantiateWithFlags, F);
    instantiate(exec, graph, || real(exec, graph, flags))
}

macro_rules! instantiate_with_params {
    ($name:ident, $id:expr) => {
        /// `CUDA_GRAPH_INSTANTIATE_PARAMS` passed through, never read.
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            exec: *mut CUgraphExec,
            graph: CUgraph,
            params: *mut c_void,
        ) -> CuResult {
            type F = unsafe extern "C" fn(*mut CUgraphExec, CUgraph, *mut c_void) -> CuResult;
            let real = real_or_return!($id, F);
            instantiate(exec, graph, || real(exec, graph, params))
        }
    };
}

instantiate_with_params!(cuGraphInstantiateWithParams, Cu::GraphInstantiateWithParams);
instantiate_with_params!(
    cuGraphInstantiateWithParams_ptsz,
    Cu::GraphInstantiateWithParamsPtsz
);

/// The local memory of `kernels`, the largest of them, charged in the
/// current context as their first launches would (`localmem::reserve`).
fn reserve_local_memory(kernels: &[*mut c_void]) -> CuResult {
    if kernels.is_empty() {
        return CUDA_SUCCESS;
    }
    let need = |dev| {
        let each = kernels.iter();
        each.filter_map(|&f| super::launch::local_memory(f, dev))
            .max()
    };
    crate::localmem::reserve(&Cuda, need)
}

/// `cuGraphExecKernelNodeSetParams[_v2]`: a kernel set into an
/// instantiated graph, its local memory charged first (refused:
/// `CUDA_ERROR_OUT_OF_MEMORY`, the exec unchanged). `$v2`: the parameters
/// are `_v2`'s, whose `kern` may name the kernel.
macro_rules! exec_kernel_set {
    ($name:ident, $id:expr, $v2:expr) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            exec: CUgraphExec,
            node: CUgraphNode,
            params: *const KernelNodeParams,
        ) -> CuResult {
            type F =
                unsafe extern "C" fn(CUgraphExec, CUgraphNode, *const KernelNodeParams) -> CuResult;
            let real = real_or_return!($id, F);
            if !params.is_null() && limits::active() {
                let p = &*params;
                // `kern` is read only from `_v2`'s parameters (`_v1` ends before it).
                let f = if p.func.is_null() && $v2 {
                    p.kern
                } else {
                    p.func
                };
                let grown = boundary(CUDA_SUCCESS, || reserve_local_memory(&[f]));
                if grown != CUDA_SUCCESS {
                    return grown;
                }
            }
            real(exec, node, params)
        }
    };
}

exec_kernel_set!(
    cuGraphExecKernelNodeSetParams,
    Cu::GraphExecKernelNodeSetParams,
    false
);
exec_kernel_set!(
    cuGraphExecKernelNodeSetParams_v2,
    Cu::GraphExecKernelNodeSetParamsV2,
    true
);

/// `cuGraphExecUpdate[_v2]`: the exec takes `graph`'s kernels, their local
/// memory charged first (refused: `CUDA_ERROR_OUT_OF_MEMORY`, the exec
/// unchanged).
unsafe fn exec_update(graph: CUgraph, call: impl FnOnce() -> CuResult) -> CuResult {
    if limits::active() {
        let grown = boundary(CUDA_SUCCESS, || {
            reserve_local_memory(&graph_nodes(graph).kernels)
        });
        if grown != CUDA_SUCCESS {
            return grown;
        }
    }
    call()
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphExecUpdate(
    exec: CUgraphExec,
    graph: CUgraph,
    error_node: *mut CUgraphNode,
    result: *mut c_int,
) -> CuResult {
    type F = unsafe extern "C" fn(CUgraphExec, CUgraph, *mut CUgraphNode, *mut c_int) -> CuResult;
    let real = real_or_return!(Cu::GraphExecUpdate, F);
    exec_update(graph, || real(exec, graph, error_node, result))
}

/// `CUgraphExecUpdateResultInfo` passed through, never read.
#[no_mangle]
pub unsafe extern "C" fn cuGraphExecUpdate_v2(
    exec: CUgraphExec,
    graph: CUgraph,
    result_info: *mut c_void,
) -> CuResult {
    type F = unsafe extern "C" fn(CUgraphExec, CUgraph, *mut c_void) -> CuResult;
    let real = real_or_return!(Cu::GraphExecUpdateV2, F);
    exec_update(graph, || real(exec, graph, result_info))
}

/// `cuStreamEndCapture[_ptsz]`: the graph's allocation nodes captured from
/// `cuMemAllocAsync` stop being charged as allocations (`graphs::captured`).
macro_rules! end_capture {
    ($name:ident, $id:expr) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(stream: CUstream, graph: *mut CUgraph) -> CuResult {
            type F = unsafe extern "C" fn(CUstream, *mut CUgraph) -> CuResult;
            let real = real_or_return!($id, F);
            let result = real(stream, graph);
            if result == CUDA_SUCCESS && !graph.is_null() && limits::active() {
                boundary((), || graphs::captured(&graph_nodes(*graph).addresses));
            }
            result
        }
    };
}

end_capture!(cuStreamEndCapture, Cu::StreamEndCapture);
end_capture!(cuStreamEndCapture_ptsz, Cu::StreamEndCapturePtsz);

#[no_mangle]
pub unsafe extern "C" fn cuGraphExecDestroy(exec: CUgraphExec) -> CuResult {
    type F = unsafe extern "C" fn(CUgraphExec) -> CuResult;
    let real = real_or_return!(Cu::GraphExecDestroy, F);
    boundary(CUDA_ERROR_UNKNOWN, || {
        graphs::destroy(exec as u64, || real(exec))
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGraphMemTrim(dev: CUdevice) -> CuResult {
    type F = unsafe extern "C" fn(CUdevice) -> CuResult;
    type Attr = unsafe extern "C" fn(CUdevice, c_int, *mut c_void) -> CuResult;
    let real = real_or_return!(Cu::DeviceGraphMemTrim, F);
    boundary(CUDA_ERROR_UNKNOWN, || {
        graphs::trim(
            &Cuda,
            dev,
            || real(dev),
            || {
                let attr = CUDA.real::<Attr>(Cu::DeviceGetGraphMemAttribute as usize)?;
                let mut v: u64 = 0;
                let r = attr(
                    dev,
                    CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT,
                    &mut v as *mut u64 as *mut c_void,
                );
                (r == CUDA_SUCCESS).then_some(v)
            },
        )
    })
}

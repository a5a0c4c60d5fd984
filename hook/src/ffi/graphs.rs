//! Graph memory entry points: instantiation charged for the graph's
//! allocation nodes (`crate::graphs`), exec destruction and
//! `cuDeviceGraphMemTrim` reported. Launches are not touched (`launch.rs`).

use super::*;
use crate::graphs;

type CUgraph = *mut c_void;
type CUgraphExec = *mut c_void;
type CUgraphNode = *mut c_void;

/// `CUgraphNodeType` (cuda.h): CU_GRAPH_NODE_TYPE_MEM_ALLOC.
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

/// What `graph`'s allocation nodes take: (device ordinal, bytes) each.
unsafe fn allocation_nodes(graph: CUgraph) -> Vec<(i32, u64)> {
    type GetNodes = unsafe extern "C" fn(CUgraph, *mut CUgraphNode, *mut usize) -> CuResult;
    type NodeType = unsafe extern "C" fn(CUgraphNode, *mut c_int) -> CuResult;
    type Params = unsafe extern "C" fn(CUgraphNode, *mut AllocNodeParams) -> CuResult;
    let (Some(get_nodes), Some(node_type), Some(params)) = (
        CUDA.real::<GetNodes>(Cu::GraphGetNodes as usize),
        CUDA.real::<NodeType>(Cu::GraphNodeGetType as usize),
        CUDA.real::<Params>(Cu::GraphMemAllocNodeGetParams as usize),
    ) else {
        return Vec::new();
    };
    let mut n = 0usize;
    if graph.is_null() || get_nodes(graph, std::ptr::null_mut(), &mut n) != CUDA_SUCCESS {
        return Vec::new();
    }
    let mut nodes = vec![std::ptr::null_mut(); n];
    if get_nodes(graph, nodes.as_mut_ptr(), &mut n) != CUDA_SUCCESS {
        return Vec::new();
    }
    nodes.truncate(n);
    let mut found = Vec::new();
    for node in nodes {
        let mut kind: c_int = -1;
        if node_type(node, &mut kind) != CUDA_SUCCESS || kind != CU_GRAPH_NODE_TYPE_MEM_ALLOC {
            continue;
        }
        let mut p: AllocNodeParams = std::mem::zeroed();
        if params(node, &mut p) == CUDA_SUCCESS
            && p.pool_props.location.kind == CU_MEM_LOCATION_TYPE_DEVICE
        {
            found.push((p.pool_props.location.id, p.bytesize as u64));
        }
    }
    found
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
        let nodes = allocation_nodes(graph);
        graphs::instantiate(&Cuda, &nodes, call, || *exec as u64)
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

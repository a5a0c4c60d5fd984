/* The directly linked app: built with -lcuda against the fake driver, its
 * calls bind to exported names at load time. Scenarios in hook_app.h. */
#include "hook_app.h"

CUresult cuInit(unsigned);
CUresult cuCtxCreate_v2(CUcontext *, unsigned, CUdevice);
CUresult cuCtxSetCurrent(CUcontext);
CUresult cuCtxDestroy_v2(CUcontext);
CUresult cuDevicePrimaryCtxRetain(CUcontext *, CUdevice);
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice);
CUresult cuDevicePrimaryCtxReset_v2(CUdevice);
CUresult cuMemPoolCreate(CUmemoryPool *, const CUmemPoolProps *);
CUresult cuMemPoolDestroy(CUmemoryPool);
CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *, CUdevice);
CUresult cuDeviceGetMemPool(CUmemoryPool *, CUdevice);
CUresult cuDeviceSetMemPool(CUdevice, CUmemoryPool);
CUresult cuMemAlloc_v2(CUdeviceptr *, size_t);
CUresult cuMemFree_v2(CUdeviceptr);
CUresult cuMemGetInfo_v2(size_t *, size_t *);
CUresult cuDeviceTotalMem_v2(size_t *, CUdevice);
CUresult cuMemAllocManaged(CUdeviceptr *, size_t, unsigned);
CUresult cuMemAllocAsync(CUdeviceptr *, size_t, CUstream);
CUresult cuMemAllocFromPoolAsync(CUdeviceptr *, size_t, CUmemoryPool, CUstream);
CUresult cuMemFreeAsync(CUdeviceptr, CUstream);
CUresult cuCtxSynchronize(void);
CUresult cuMemPoolTrimTo(CUmemoryPool, size_t);
CUresult cuMemPoolSetAttribute(CUmemoryPool, int, void *);
CUresult cuMemAllocPitch_v2(CUdeviceptr *, size_t *, size_t, size_t, unsigned);
CUresult cuMemCreate(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
                     unsigned long long);
CUresult cuMemRelease(CUmemGenericAllocationHandle);
CUresult cuArrayCreate_v2(CUarray *, const CUDA_ARRAY_DESCRIPTOR *);
CUresult cuArray3DCreate_v2(CUarray *, const CUDA_ARRAY3D_DESCRIPTOR *);
CUresult cuArrayDestroy(CUarray);
CUresult cuMipmappedArrayCreate(CUmipmappedArray *, const CUDA_ARRAY3D_DESCRIPTOR *, unsigned);
CUresult cuMipmappedArrayDestroy(CUmipmappedArray);
unsigned long long fake_cuda_calls(const char *);
int fake_cuda_mem(int, unsigned long long *, unsigned long long *);

int main(int argc, char **argv) {
  A.Init = cuInit;
  A.CtxCreate = cuCtxCreate_v2;
  A.CtxSetCurrent = cuCtxSetCurrent;
  A.CtxDestroy = cuCtxDestroy_v2;
  A.PrimaryCtxRetain = cuDevicePrimaryCtxRetain;
  A.PrimaryCtxRelease = cuDevicePrimaryCtxRelease_v2;
  A.PrimaryCtxReset = cuDevicePrimaryCtxReset_v2;
  A.MemPoolCreate = cuMemPoolCreate;
  A.MemPoolDestroy = cuMemPoolDestroy;
  A.DeviceGetDefaultMemPool = cuDeviceGetDefaultMemPool;
  A.DeviceGetMemPool = cuDeviceGetMemPool;
  A.DeviceSetMemPool = cuDeviceSetMemPool;
  A.MemAlloc = cuMemAlloc_v2;
  A.MemFree = cuMemFree_v2;
  A.MemGetInfo = cuMemGetInfo_v2;
  A.DeviceTotalMem = cuDeviceTotalMem_v2;
  A.MemAllocManaged = cuMemAllocManaged;
  A.MemAllocAsync = cuMemAllocAsync;
  A.MemAllocFromPoolAsync = cuMemAllocFromPoolAsync;
  A.MemFreeAsync = cuMemFreeAsync;
  A.CtxSynchronize = cuCtxSynchronize;
  A.MemPoolTrimTo = cuMemPoolTrimTo;
  A.MemPoolSetAttribute = cuMemPoolSetAttribute;
  A.MemAllocPitch = cuMemAllocPitch_v2;
  A.MemCreate = cuMemCreate;
  A.MemRelease = cuMemRelease;
  A.ArrayCreate = cuArrayCreate_v2;
  A.Array3DCreate = cuArray3DCreate_v2;
  A.ArrayDestroy = cuArrayDestroy;
  A.MipmappedArrayCreate = cuMipmappedArrayCreate;
  A.MipmappedArrayDestroy = cuMipmappedArrayDestroy;
  A.fake_calls = fake_cuda_calls;
  A.fake_mem = fake_cuda_mem;
  A.async_name = "cuMemAllocAsync";
  return app_main(argc, argv);
}

/* The Triton-like app: dlopen("libcuda.so.1") and dlsym of each versioned
 * name, as Triton reaches cuLaunchKernelEx; context destruction by its v1
 * names, which the driver exports beside the _v2 ones. Scenarios in
 * hook_app.h. */
#include "hook_app.h"

static void *handle;

static void *get(const char *name) {
  void *p = dlsym(handle, name);
  if (!p) {
    fprintf(stderr, "dlsym(%s): %s\n", name, dlerror());
    exit(2);
  }
  return p;
}

int main(int argc, char **argv) {
  handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    fprintf(stderr, "dlopen libcuda.so.1: %s\n", dlerror());
    return 2;
  }
  A.Init = get("cuInit");
  A.CtxCreate = get("cuCtxCreate_v2");
  A.CtxSetCurrent = get("cuCtxSetCurrent");
  A.CtxDestroy = get("cuCtxDestroy"); /* v1 names: exported beside _v2 */
  A.PrimaryCtxRetain = get("cuDevicePrimaryCtxRetain");
  A.PrimaryCtxRelease = get("cuDevicePrimaryCtxRelease");
  A.PrimaryCtxReset = get("cuDevicePrimaryCtxReset");
  A.MemPoolCreate = get("cuMemPoolCreate");
  A.MemPoolDestroy = get("cuMemPoolDestroy");
  A.DeviceGetDefaultMemPool = get("cuDeviceGetDefaultMemPool");
  A.DeviceGetMemPool = get("cuDeviceGetMemPool");
  A.DeviceSetMemPool = get("cuDeviceSetMemPool");
  A.MemAlloc = get("cuMemAlloc_v2");
  A.MemFree = get("cuMemFree_v2");
  A.MemGetInfo = get("cuMemGetInfo_v2");
  A.DeviceTotalMem = get("cuDeviceTotalMem_v2");
  A.MemAllocManaged = get("cuMemAllocManaged");
  A.MemAllocAsync = get("cuMemAllocAsync");
  A.MemAllocFromPoolAsync = get("cuMemAllocFromPoolAsync");
  A.MemFreeAsync = get("cuMemFreeAsync");
  A.CtxSynchronize = get("cuCtxSynchronize");
  A.MemPoolTrimTo = get("cuMemPoolTrimTo");
  A.MemPoolSetAttribute = get("cuMemPoolSetAttribute");
  A.MemAllocPitch = get("cuMemAllocPitch_v2");
  A.MemCreate = get("cuMemCreate");
  A.MemRelease = get("cuMemRelease");
  A.ArrayCreate = get("cuArrayCreate_v2");
  A.Array3DCreate = get("cuArray3DCreate_v2");
  A.ArrayDestroy = get("cuArrayDestroy");
  A.MipmappedArrayCreate = get("cuMipmappedArrayCreate");
  A.MipmappedArrayDestroy = get("cuMipmappedArrayDestroy");
  A.fake_calls = get("fake_cuda_calls");
  A.fake_mem = get("fake_cuda_mem");
  A.async_name = "cuMemAllocAsync";
  return app_main(argc, argv);
}

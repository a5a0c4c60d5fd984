/* The host's calls that the scale benchmark and the host-calls test make,
 * loaded from liblimiter and libaccelerator as a hypervisor loads them
 * (dlopen RTLD_LOCAL, dlsym by name). */
#ifndef HOST_API_H
#define HOST_API_H

#include "accelerator.h"
#include "limiter.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

typedef int (*info_fn)(void *, size_t, size_t *);

static __typeof__(&CheckAndRecordMemoryOps) mem;
static __typeof__(&AddWorkerProcess) addProcess;
static __typeof__(&limiterGetWorkerUsage) usage;
static __typeof__(&LimiterRemoveWorker) removeWorker;
static __typeof__(&SetMemHardLimit) setMem;
static __typeof__(&SetComputeUnitHardLimit) setCompute;
static __typeof__(&GetProcessMemoryUtilization) procMem;
static info_fn procInfo;
static __typeof__(&CheckAndRecordComputeOps) compute;
static __typeof__(&SetComputeUnitRequest) setRequest;
static __typeof__(&SetWorkerPriority) setPriority;

static void *host_sym(void *lib, const char *name) {
  void *p = dlsym(lib, name);
  if (!p) {
    fprintf(stderr, "missing %s\n", name);
    exit(2);
  }
  return p;
}

/* Load both libraries and the calls above, then AccelInit (the host's
 * sampler starts); exits 2 when a library or a call is missing. */
static void host_api_load(const char *limiter, const char *accelerator) {
  void *lim = dlopen(limiter, RTLD_NOW | RTLD_LOCAL), *acc = dlopen(accelerator, RTLD_NOW | RTLD_LOCAL);
  if (!lim || !acc) {
    fprintf(stderr, "dlopen: %s\n", dlerror());
    exit(2);
  }
  *(void **)&mem = host_sym(lim, "CheckAndRecordMemoryOps");
  *(void **)&addProcess = host_sym(lim, "AddWorkerProcess");
  *(void **)&usage = host_sym(lim, "limiterGetWorkerUsage");
  *(void **)&removeWorker = host_sym(lim, "LimiterRemoveWorker");
  *(void **)&setMem = host_sym(acc, "SetMemHardLimit");
  *(void **)&setCompute = host_sym(acc, "SetComputeUnitHardLimit");
  *(void **)&procMem = host_sym(acc, "GetProcessMemoryUtilization");
  *(void **)&procInfo = host_sym(acc, "AccelGetProcessInformation");
  *(void **)&compute = host_sym(lim, "CheckAndRecordComputeOps");
  *(void **)&setRequest = host_sym(acc, "SetComputeUnitRequest");
  *(void **)&setPriority = host_sym(acc, "SetWorkerPriority");
  int (*init)(void) = (int (*)(void))host_sym(acc, "AccelInit");
  if (init() != 0) {
    fprintf(stderr, "AccelInit failed\n");
    exit(2);
  }
}

#endif

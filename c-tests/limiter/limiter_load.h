/* Loading liblimiter.so and libaccelerator.so for the limiter's C tests.
 *
 * Both libraries are opened with dlopen (their sonames name .so.1 files that
 * build/ does not have), and every function is called through a pointer
 * typed from the headers, so a signature drift fails to compile. */
#ifndef LIMITER_LOAD_H
#define LIMITER_LOAD_H

#include "accelerator.h"
#include "limiter.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct {
  void *lim, *acc;
  __typeof__(&CheckAndRecordMemoryOps) mem;
  __typeof__(&CheckAndRecordComputeOps) compute;
  __typeof__(&FreezeWorker) freeze;
  __typeof__(&ResumeWorker) resume;
  __typeof__(&AutoFreeze) autoFreeze;
  __typeof__(&AutoResume) autoResume;
  __typeof__(&AddWorkerProcess) addProcess;
  __typeof__(&limiterGetLastError) lastError;
  __typeof__(&limiterGetWorkerUsage) usage;
  __typeof__(&SetMemHardLimit) setMem;
  __typeof__(&SetComputeUnitHardLimit) setCompute;
  __typeof__(&setMemHardLimit) setMemLower;
  __typeof__(&GetProcessMemoryUtilization) procMem;
  __typeof__(&acceleratorGetLastError) accLastError;
  __typeof__(&AssignPartition) assign;
  __typeof__(&RemovePartition) removePartition;
  __typeof__(&GetProcessComputeUtilization) procCompute;
} limiter_api;

static limiter_api L;

static void *load_sym(void *lib, const char *name) {
  void *p = dlsym(lib, name);
  if (!p) {
    fprintf(stderr, "missing symbol %s: %s\n", name, dlerror());
    exit(2);
  }
  return p;
}

#define LOAD(lib, field, name) *(void **)(&L.field) = load_sym(lib, name)

/* argv: [1] liblimiter.so, [2] libaccelerator.so (optional). */
static void limiter_load(const char *limiter, const char *accelerator) {
  L.lim = dlopen(limiter, RTLD_NOW | RTLD_LOCAL);
  if (!L.lim) {
    fprintf(stderr, "dlopen %s: %s\n", limiter, dlerror());
    exit(2);
  }
  LOAD(L.lim, mem, "CheckAndRecordMemoryOps");
  LOAD(L.lim, compute, "CheckAndRecordComputeOps");
  LOAD(L.lim, freeze, "FreezeWorker");
  LOAD(L.lim, resume, "ResumeWorker");
  LOAD(L.lim, autoFreeze, "AutoFreeze");
  LOAD(L.lim, autoResume, "AutoResume");
  LOAD(L.lim, addProcess, "AddWorkerProcess");
  LOAD(L.lim, lastError, "limiterGetLastError");
  LOAD(L.lim, usage, "limiterGetWorkerUsage");
  if (accelerator) {
    L.acc = dlopen(accelerator, RTLD_NOW | RTLD_LOCAL);
    if (!L.acc) {
      fprintf(stderr, "dlopen %s: %s\n", accelerator, dlerror());
      exit(2);
    }
    LOAD(L.acc, setMem, "SetMemHardLimit");
    LOAD(L.acc, setCompute, "SetComputeUnitHardLimit");
    LOAD(L.acc, setMemLower, "setMemHardLimit");
    LOAD(L.acc, procMem, "GetProcessMemoryUtilization");
    LOAD(L.acc, accLastError, "acceleratorGetLastError");
    LOAD(L.acc, assign, "AssignPartition");
    LOAD(L.acc, removePartition, "RemovePartition");
    LOAD(L.acc, procCompute, "GetProcessComputeUtilization");
  }
}

static void limiter_unload(void) {
  if (L.acc)
    dlclose(L.acc);
  if (L.lim)
    dlclose(L.lim);
}

#endif

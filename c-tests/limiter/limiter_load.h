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
#include <string.h>
#include <sys/types.h>

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

/* The state directory of a test run as `test liblimiter.so
 * libaccelerator.so` with ACCELERATOR_STATE_DIR set; exits 2 saying how
 * to run it otherwise. */
static inline const char *limiter_test_state(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s liblimiter.so libaccelerator.so\n", argv[0]);
    exit(2);
  }
  const char *dir = getenv("ACCELERATOR_STATE_DIR");
  if (!dir) {
    fprintf(stderr, "set ACCELERATOR_STATE_DIR\n");
    exit(2);
  }
  return dir;
}

/* The host's v1 memory report's entries for process `pid`: how many (-1
 * when the report fails), and the bytes of the last in *bytes (if given). */
static inline int limiter_listed(pid_t pid, unsigned long long *bytes) {
  static MemoryUtilization mu[4096];
  size_t n = 0;
  char text[32];
  snprintf(text, sizeof text, "%d", (int)pid);
  if (L.procMem(mu, 4096, &n) != RESULT_SUCCESS)
    return -1;
  int found = 0;
  for (size_t i = 0; i < n; i++)
    if (strcmp(mu[i].processId, text) == 0) {
      found++;
      if (bytes)
        *bytes = mu[i].usedBytes;
    }
  return found;
}

static void limiter_unload(void) {
  if (L.acc)
    dlclose(L.acc);
  if (L.lim)
    dlclose(L.lim);
}

#endif

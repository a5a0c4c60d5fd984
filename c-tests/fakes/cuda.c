/* A scripted fake of libcuda.so.1: cuInit, cuDriverGetVersion,
 * cuGetErrorName and the process checkpoint API (CUDA 12.8) as a state
 * machine per process:
 *
 *   RUNNING --lock--> LOCKED --checkpoint--> CHECKPOINTED
 *   CHECKPOINTED --restore--> LOCKED --unlock--> RUNNING
 *
 * A step from the wrong state is CUDA_ERROR_ILLEGAL_STATE.
 * Scripting (read on every call):
 *   FAKE_CUDA_PIDS=pid,pid,...  the CUDA processes (others: CUDA_ERROR_NOT_FOUND)
 *   FAKE_CUDA_FAIL_PID=pid      cuCheckpointProcessLock of that pid times out
 *   FAKE_CUDA_FAIL=<function>   that function returns CUDA_ERROR_UNKNOWN
 * fake_cuda_state(pid) reads a process's state back for the tests. */
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
enum {
  CUDA_SUCCESS = 0,
  CUDA_ERROR_INVALID_VALUE = 1,
  CUDA_ERROR_NOT_INITIALIZED = 3,
  CUDA_ERROR_ILLEGAL_STATE = 401,
  CUDA_ERROR_NOT_FOUND = 500,
  CUDA_ERROR_TIMEOUT = 909,
  CUDA_ERROR_UNKNOWN = 999,
};
enum { RUNNING = 0, LOCKED = 1, CHECKPOINTED = 2, FAILED = 3 };

typedef struct {
  unsigned int timeoutMs;
  unsigned int reserved0;
  unsigned long long reserved1[7];
} CUcheckpointLockArgs;

#define MAXP 64
static struct { int pid, state; } table[MAXP];
static int initialised;

static int failing(const char *fn) {
  const char *f = getenv("FAKE_CUDA_FAIL");
  return f && strcmp(f, fn) == 0;
}

static int is_cuda(int pid) {
  const char *s = getenv("FAKE_CUDA_PIDS");
  while (s && *s) {
    char *end;
    long p = strtol(s, &end, 10);
    if (end == s)
      break;
    if (p == pid)
      return 1;
    s = *end == ',' ? end + 1 : end;
  }
  return 0;
}

/* The state slot of a CUDA process (RUNNING when first seen). */
static int *state_of(int pid) {
  if (!is_cuda(pid))
    return NULL;
  for (int i = 0; i < MAXP; i++)
    if (table[i].pid == pid)
      return &table[i].state;
  for (int i = 0; i < MAXP; i++)
    if (table[i].pid == 0) {
      table[i].pid = pid;
      table[i].state = RUNNING;
      return &table[i].state;
    }
  return NULL;
}

CUresult cuInit(unsigned flags) {
  if (failing(__func__) || flags != 0)
    return CUDA_ERROR_INVALID_VALUE;
  initialised = 1;
  return CUDA_SUCCESS;
}
CUresult cuDriverGetVersion(int *v) {
  if (!v)
    return CUDA_ERROR_INVALID_VALUE;
  *v = 12080;
  return CUDA_SUCCESS;
}
CUresult cuGetErrorName(CUresult r, const char **name) {
  switch (r) {
  case CUDA_SUCCESS: *name = "CUDA_SUCCESS"; break;
  case CUDA_ERROR_INVALID_VALUE: *name = "CUDA_ERROR_INVALID_VALUE"; break;
  case CUDA_ERROR_ILLEGAL_STATE: *name = "CUDA_ERROR_ILLEGAL_STATE"; break;
  case CUDA_ERROR_NOT_FOUND: *name = "CUDA_ERROR_NOT_FOUND"; break;
  case CUDA_ERROR_TIMEOUT: *name = "CUDA_ERROR_TIMEOUT"; break;
  case CUDA_ERROR_UNKNOWN: *name = "CUDA_ERROR_UNKNOWN"; break;
  default: return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

#ifndef FAKE_CUDA_NO_CHECKPOINT /* a driver before r570 (CUDA 12.8) */
#define STEP(fn, from, to)                                                     \
  do {                                                                         \
    if (!initialised)                                                          \
      return CUDA_ERROR_NOT_INITIALIZED;                                       \
    if (failing(fn))                                                           \
      return CUDA_ERROR_UNKNOWN;                                               \
    int *s = state_of(pid);                                                    \
    if (!s)                                                                    \
      return CUDA_ERROR_NOT_FOUND;                                             \
    if (*s != (from))                                                          \
      return CUDA_ERROR_ILLEGAL_STATE;                                         \
    *s = (to);                                                                 \
    return CUDA_SUCCESS;                                                       \
  } while (0)

CUresult cuCheckpointProcessGetState(int pid, int *state) {
  if (!initialised)
    return CUDA_ERROR_NOT_INITIALIZED;
  int *s = state_of(pid);
  if (!s)
    return CUDA_ERROR_NOT_FOUND;
  *state = *s;
  return CUDA_SUCCESS;
}
CUresult cuCheckpointProcessLock(int pid, CUcheckpointLockArgs *args) {
  const char *f = getenv("FAKE_CUDA_FAIL_PID");
  if (args && (args->reserved0 || args->reserved1[0]))
    return CUDA_ERROR_INVALID_VALUE;
  if (f && atoi(f) == pid && is_cuda(pid))
    return CUDA_ERROR_TIMEOUT;
  STEP(__func__, RUNNING, LOCKED);
}
CUresult cuCheckpointProcessCheckpoint(int pid, void *args) {
  (void)args;
  STEP(__func__, LOCKED, CHECKPOINTED);
}
CUresult cuCheckpointProcessRestore(int pid, void *args) {
  (void)args;
  STEP(__func__, CHECKPOINTED, LOCKED);
}
CUresult cuCheckpointProcessUnlock(int pid, void *args) {
  (void)args;
  STEP(__func__, LOCKED, RUNNING);
}
#endif

/* For the tests: the state of a process, -1 if it is not a CUDA process. */
int fake_cuda_state(int pid) {
  int *s = state_of(pid);
  return s ? *s : -1;
}

/* ==== GPU verification kit (gpu-kit/kit_cuda.c): context, module, launch
 * and memory entry points, prototypes as in cuda.h (CUdevice int,
 * CUdeviceptr 64-bit, handles opaque pointers). Device memory is host
 * memory; a launch does no work. Scripting: FAKE_CUDA_MEM_TOTAL=bytes
 * (default 80 GiB) is what cuMemGetInfo_v2 reports as total;
 * FAKE_CUDA_NO_DEVICE=1 makes cuDeviceGet/Count see no device
 * (CUDA_ERROR_NO_DEVICE, 100), as on a GPU in MIG mode with no instance. ==== */
#include <stddef.h>
#include <stdint.h>

typedef uint64_t CUdeviceptr;
static size_t kit_allocated;
static int kit_module, kit_function, kit_context;

static int kit_no_device(void) {
  const char *n = getenv("FAKE_CUDA_NO_DEVICE");
  return n && *n && strcmp(n, "0") != 0;
}

static size_t kit_total(void) {
  const char *t = getenv("FAKE_CUDA_MEM_TOTAL");
  return t && *t ? (size_t)strtoull(t, NULL, 10) : (size_t)80 << 30;
}

CUresult cuDeviceGetCount(int *n) {
  if (!initialised)
    return CUDA_ERROR_NOT_INITIALIZED;
  if (!n)
    return CUDA_ERROR_INVALID_VALUE;
  *n = kit_no_device() ? 0 : 1;
  return CUDA_SUCCESS;
}
CUresult cuDeviceGet(int *dev, int ordinal) {
  if (!initialised)
    return CUDA_ERROR_NOT_INITIALIZED;
  if (!dev)
    return CUDA_ERROR_INVALID_VALUE;
  if (kit_no_device())
    return 100; /* CUDA_ERROR_NO_DEVICE */
  if (ordinal != 0)
    return CUDA_ERROR_INVALID_VALUE;
  *dev = 0;
  return CUDA_SUCCESS;
}
/* CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT (16): the fake H100's 132 SMs. */
CUresult cuDeviceGetAttribute(int *v, int attr, int dev) {
  if (!initialised)
    return CUDA_ERROR_NOT_INITIALIZED;
  if (!v || dev != 0 || attr != 16)
    return CUDA_ERROR_INVALID_VALUE;
  *v = 132;
  return CUDA_SUCCESS;
}
CUresult cuDevicePrimaryCtxRetain(void **ctx, int dev) {
  if (!initialised)
    return CUDA_ERROR_NOT_INITIALIZED;
  if (!ctx || dev != 0)
    return CUDA_ERROR_INVALID_VALUE;
  *ctx = &kit_context;
  return CUDA_SUCCESS;
}
CUresult cuDevicePrimaryCtxRelease_v2(int dev) {
  return dev == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
CUresult cuCtxSetCurrent(void *ctx) {
  return ctx == &kit_context ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
CUresult cuCtxSynchronize(void) {
  return initialised ? CUDA_SUCCESS : CUDA_ERROR_NOT_INITIALIZED;
}
/* PTX text with an entry point is accepted. */
CUresult cuModuleLoadData(void **mod, const void *image) {
  if (!initialised)
    return CUDA_ERROR_NOT_INITIALIZED;
  if (!mod || !image || !strstr((const char *)image, ".entry"))
    return CUDA_ERROR_INVALID_VALUE;
  *mod = &kit_module;
  return CUDA_SUCCESS;
}
CUresult cuModuleGetFunction(void **fn, void *mod, const char *name) {
  if (!fn || mod != &kit_module || !name)
    return CUDA_ERROR_INVALID_VALUE;
  *fn = &kit_function;
  return CUDA_SUCCESS;
}
CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                        unsigned bz, unsigned shared, void *stream, void **params, void **extra) {
  (void)shared, (void)stream, (void)extra;
  if (f != &kit_function || !gx || !gy || !gz || !bx || !by || !bz || bx * by * bz > 1024 || !params)
    return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}
CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total) {
  if (!initialised)
    return CUDA_ERROR_NOT_INITIALIZED;
  if (!free_bytes || !total)
    return CUDA_ERROR_INVALID_VALUE;
  *total = kit_total();
  *free_bytes = *total - kit_allocated;
  return CUDA_SUCCESS;
}
/* CUDA_ERROR_OUT_OF_MEMORY (2) past the reported total. Each block keeps its
 * size in front of the memory handed out. */
CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t bytes) {
  if (!initialised)
    return CUDA_ERROR_NOT_INITIALIZED;
  if (!p || !bytes)
    return CUDA_ERROR_INVALID_VALUE;
  if (bytes > kit_total() - kit_allocated)
    return 2;
  size_t *b = malloc(bytes + sizeof(size_t));
  if (!b)
    return 2;
  b[0] = bytes;
  kit_allocated += bytes;
  *p = (CUdeviceptr)(uintptr_t)(b + 1);
  return CUDA_SUCCESS;
}
CUresult cuMemFree_v2(CUdeviceptr p) {
  if (!p)
    return CUDA_ERROR_INVALID_VALUE;
  size_t *b = (size_t *)(uintptr_t)p - 1;
  kit_allocated -= b[0];
  free(b);
  return CUDA_SUCCESS;
}
CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n) {
  if (!dst || !src)
    return CUDA_ERROR_INVALID_VALUE;
  memcpy((void *)(uintptr_t)dst, src, n);
  return CUDA_SUCCESS;
}
CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n) {
  if (!dst || !src)
    return CUDA_ERROR_INVALID_VALUE;
  memcpy(dst, (const void *)(uintptr_t)src, n);
  return CUDA_SUCCESS;
}
/* ==== end of the GPU verification kit block ==== */

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
/* Counted and traced (FAKE_CUDA_TRACE, trace.h); queries are only traced
 * (no lock: they stay as cheap as a driver's for the benchmarks). */
static void count(const char *fn);

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
  count(__func__);
  if (failing(__func__) || flags != 0)
    return CUDA_ERROR_INVALID_VALUE;
  initialised = 1;
  return CUDA_SUCCESS;
}
static int driver_version(void); /* cuda_runtime.inc */
CUresult cuDriverGetVersion(int *v) {
  if (!v)
    return CUDA_ERROR_INVALID_VALUE;
  *v = driver_version();
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

/* ==== Device memory, contexts and cuGetProcAddress (the hook's tests) ====
 *
 * Two devices with real accounting of their memory: every allocation entry
 * point takes bytes from its device (CUDA_ERROR_OUT_OF_MEMORY beyond its
 * total), every free gives them back, and a context reserves device
 * memory while it exists (FAKE_CUDA_CTX_RESERVE, default 64 MiB, read at each
 * creation; a primary context from its first retain to its last release or
 * reset), as a driver's does. Destroying a context (a primary one: its last
 * release, or a reset) frees what is still allocated in it, as the driver
 * does; stream-ordered allocations come from a device's memory pool
 * (cuMemPoolCreate, cuDeviceGet[Default]MemPool, cuDeviceSetMemPool) and
 * are taken from the pool's device, outliving contexts; cuMemCreate's
 * memory lives until its last handle reference, mapping and multicast
 * binding end (cuda_vmm.inc); graphs take memory from a device's graph
 * pool at upload or launch, given back by cuDeviceGraphMemTrim
 * (cuda_graphmem.inc); raising a context's stack, printf FIFO or malloc
 * heap limit takes device memory until the context ends
 * (cuda_ctx_limits.inc). Device 0 is the fake NVML's
 * A40 (same UUID, same total), so limits set through libaccelerator's nvidia
 * vendor apply to it; device 1 has no NVML twin.
 *
 * cuGetProcAddress[_v2] select like the driver: by base name ("cuMemAlloc"),
 * the newest variant whose version is <= cudaVersion (cuMemAlloc: the 32-bit
 * v1 before 3020, _v2 from it; cuCtxCreate: _v2 from 3020, _v3 from 11040),
 * and the _ptsz variant with CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM.
 * Built with -Wl,-Bsymbolic: the addresses it hands out are its own
 * functions, never a preloaded library's.
 *
 * Device memory lives at fake addresses (from 1 << 40), backed by nothing,
 * until a cuMemcpy first touches an allocation: then it gets a host buffer
 * of its size (freed with it), so data written to the device reads back.
 * Contexts, modules and launches are just enough for the GPU verification
 * kit (gpu-kit/kit_cuda.c): a launch is checked and does no work.
 * What NVIDIA's CUDA runtime (libcudart 12.9) needs beyond that — its
 * private export tables, context-local storage, a stub for every other name
 * it asks — is cuda_runtime.inc; FAKE_CUDA_DRIVER_VERSION sets what
 * cuDriverGetVersion reports (default 12080).
 *
 * Scripting: FAKE_CUDA_NO_DEVICE=1 makes the driver see no device
 * (cuDeviceGetCount 0, cuDeviceGet CUDA_ERROR_NO_DEVICE), as on a GPU in
 * MIG mode with no instance. Built with -DFAKE_CUDA_NO_CHECKPOINT it is a
 * driver before r570, without the checkpoint API.
 *
 * For the tests: fake_cuda_calls(name) counts calls of one entry point;
 * fake_cuda_mem(dev, &used, &allocations) reads a device's used bytes and
 * how many allocations ever reached the driver; fake_cuda_used_on(uuid) the
 * bytes held on the device of an NVML UUID text (the fake NVML adds them to
 * its used memory, as a real NVML sees the driver's). */
#include <fcntl.h>
#include <stddef.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "trace.h"

enum {
  CUDA_ERROR_OUT_OF_MEMORY = 2,
  CUDA_ERROR_NO_DEVICE = 100,
  CUDA_ERROR_INVALID_DEVICE = 101,
  CUDA_ERROR_INVALID_CONTEXT = 201,
  CUDA_ERROR_INVALID_HANDLE = 400,
};
enum { CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM = 1 << 1 };
enum {
  CU_GET_PROC_ADDRESS_SUCCESS = 0,
  CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND = 1,
  CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT = 2,
};
enum { CU_MEM_LOCATION_TYPE_DEVICE = 1 };
/* CUDA 13.4: a device's locality domain, `id` read as
 * localized { unsigned char deviceId, localityDomainId, reserved[2]; }.
 * Each of this fake's devices has LOCALITY_DOMAINS of them, whose memory
 * is the device's (a domain's pools are its device's here). */
enum { CU_MEM_LOCATION_TYPE_DEVICE_LOCALITY_DOMAIN = 6, LOCALITY_DOMAINS = 2 };

typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef unsigned long long CUmemGenericAllocationHandle;
typedef struct CUctx_st { int dev; } *CUcontext;
typedef void *CUstream, *CUmemoryPool, *CUarray, *CUmipmappedArray;
typedef struct CUmod_st { int dev; } *CUmodule;
typedef struct CUfunc_st {
  CUmodule mod;
  unsigned long long local; /* local memory per thread (cuda_modules.inc) */
} *CUfunction;
typedef struct { unsigned char bytes[16]; } CUuuid;
typedef struct { size_t Width, Height; unsigned Format, NumChannels; } CUDA_ARRAY_DESCRIPTOR;
typedef struct {
  size_t Width, Height, Depth;
  unsigned Format, NumChannels, Flags;
} CUDA_ARRAY3D_DESCRIPTOR;
typedef struct { unsigned type; int id; } CUmemLocation;
typedef struct {
  unsigned type, requestedHandleTypes;
  CUmemLocation location;
  void *win32HandleMetaData;
  unsigned char allocFlags[8];
} CUmemAllocationProp;

#define NDEV 2
/* What a context reserves (FAKE_CUDA_CTX_RESERVE bytes, default 64 MiB). */
static unsigned long long ctx_reserve(void) {
  const char *e = getenv("FAKE_CUDA_CTX_RESERVE");
  return e && *e ? strtoull(e, NULL, 0) : 64ULL << 20;
}
#define PITCH_ALIGN 256
static const unsigned long long dev_total[NDEV] = {51539607552ULL, 25769803776ULL};
static const int dev_sms[NDEV] = {84, 72}; /* an A40's, an A10's */
static const CUuuid dev_uuid[NDEV] = {
    {{0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11,
      0x11, 0xa4}},
    {{0x22, 0x22, 0x22, 0x22, 0x22, 0x22, 0x22, 0x22, 0x22, 0x22, 0x22, 0x22, 0x22, 0x22,
      0x22, 0xb7}},
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static unsigned long long dev_used[NDEV], allocations, next_address = 1ULL << 40;
static struct CUctx_st primary[NDEV];
static unsigned primary_refs[NDEV];
static _Thread_local CUcontext current;

/* The books survive fork() from a threaded program, as a driver's do. */
static void lock_books(void) { pthread_mutex_lock(&mu); }
static void unlock_books(void) { pthread_mutex_unlock(&mu); }
static pthread_once_t fork_once = PTHREAD_ONCE_INIT;
static void install_fork_handlers(void) {
  pthread_atfork(lock_books, unlock_books, unlock_books);
}

enum { K_PTR, K_ARRAY, K_MIPMAP, K_CTX, K_MODULE, K_LIBRARY }; /* what a key names */
/* Live allocations: key -> (device, bytes), a linear table; `host` backs a
 * K_PTR allocation once a memcpy has touched it. */
#define MAXBLK 4096
static struct {
  unsigned long long key, bytes;
  int dev, kind;
  unsigned char *host;
  CUcontext ctx; /* freed with this context (NULL: outlives contexts) */
  struct CUpool_st *pool; /* the memory pool it came from (NULL: none) */
} blk[MAXBLK];
static int nblk;

/* Call counters by entry point name. */
#define MAXCOUNT 128
static struct { const char *name; unsigned long long n; } counts[MAXCOUNT];
static void count(const char *fn) {
  fake_trace("FAKE_CUDA_TRACE", fn);
  pthread_mutex_lock(&mu);
  /* By the name's address first (each caller passes its own __func__):
   * what a call costs must not grow with the names counted before it, or
   * a limiter that made other calls first would look slower here than it
   * is (hook-bench). By its text for a name passed from elsewhere. */
  int i = 0;
  while (i < MAXCOUNT && counts[i].name && counts[i].name != fn)
    i++;
  if (i == MAXCOUNT || !counts[i].name)
    for (i = 0; i < MAXCOUNT; i++)
      if (!counts[i].name || strcmp(counts[i].name, fn) == 0)
        break;
  if (i < MAXCOUNT) {
    counts[i].name = fn;
    counts[i].n++;
  }
  pthread_mutex_unlock(&mu);
}
unsigned long long fake_cuda_calls(const char *fn) {
  unsigned long long n = 0;
  pthread_mutex_lock(&mu);
  for (int i = 0; i < MAXCOUNT && counts[i].name; i++)
    if (strcmp(counts[i].name, fn) == 0)
      n = counts[i].n;
  pthread_mutex_unlock(&mu);
  return n;
}
int fake_cuda_mem(int dev, unsigned long long *used, unsigned long long *allocs) {
  if (dev < 0 || dev >= NDEV)
    return CUDA_ERROR_INVALID_DEVICE;
  pthread_mutex_lock(&mu);
  *used = dev_used[dev];
  *allocs = allocations;
  pthread_mutex_unlock(&mu);
  return CUDA_SUCCESS;
}

/* The devices' UUIDs in NVML's text form, written once (the fake NVML asks
 * on every memory query: it must stay cheap for the benchmarks). */
static char uuid_text[NDEV][48];
static pthread_once_t uuid_once = PTHREAD_ONCE_INIT;
static void write_uuid_texts(void) {
  for (int d = 0; d < NDEV; d++) {
    const unsigned char *b = dev_uuid[d].bytes;
    snprintf(uuid_text[d], sizeof uuid_text[d],
             "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
             b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14],
             b[15]);
  }
}
unsigned long long fake_cuda_used_on(const char *uuid) {
  unsigned long long n = 0;
  pthread_once(&uuid_once, write_uuid_texts);
  for (int d = 0; d < NDEV; d++)
    if (uuid && strcmp(uuid, uuid_text[d]) == 0) {
      pthread_mutex_lock(&mu);
      n = dev_used[d];
      pthread_mutex_unlock(&mu);
    }
  return n;
}

/* Take `bytes` on `dev` for a new object of `kind`, freed with context `in`
 * (NULL: none); its key in *key (a new address, or *key itself when `given`). */
static CUresult take_in(int dev, unsigned long long bytes, int kind, unsigned long long *key,
                        int given, CUcontext in) {
  CUresult r = CUDA_SUCCESS;
  pthread_mutex_lock(&mu);
  allocations++;
  if (bytes == 0)
    r = CUDA_ERROR_INVALID_VALUE;
  else if (bytes > dev_total[dev] - dev_used[dev] || nblk == MAXBLK)
    r = CUDA_ERROR_OUT_OF_MEMORY;
  else {
    if (!given) {
      *key = next_address;
      next_address += (bytes + 511) & ~511ULL;
    }
    blk[nblk].key = *key;
    blk[nblk].bytes = bytes;
    blk[nblk].dev = dev;
    blk[nblk].kind = kind;
    blk[nblk].host = NULL;
    blk[nblk].ctx = in;
    blk[nblk].pool = NULL;
    nblk++;
    dev_used[dev] += bytes;
  }
  pthread_mutex_unlock(&mu);
  return r;
}
static CUresult take_as(int dev, unsigned long long bytes, int kind, unsigned long long *key,
                        int given) {
  return take_in(dev, bytes, kind, key, given, NULL);
}
/* An allocation in the current context: the driver frees it with the context. */
static CUresult take(int dev, unsigned long long bytes, int kind, unsigned long long *key) {
  return take_in(dev, bytes, kind, key, 0, current);
}
static void ctx_limits_end(CUcontext c); /* cuda_ctx_limits.inc */
/* A context is destroyed: so is everything still allocated in it. */
static void free_context(CUcontext c) {
  pthread_mutex_lock(&mu);
  ctx_limits_end(c);
  for (int i = 0; i < nblk;)
    if (blk[i].ctx == c) {
      dev_used[blk[i].dev] -= blk[i].bytes;
      free(blk[i].host);
      blk[i] = blk[--nblk];
    } else {
      i++;
    }
  pthread_mutex_unlock(&mu);
}
static void pool_keep(struct CUpool_st *p, unsigned long long bytes); /* the pools, below */
/* A graph's live allocation, freed by cuMemFree[Async] (cuda_graphmem.inc). */
static int graph_mem_free(CUdeviceptr p);
static CUresult give(unsigned long long key, int kind) {
  CUresult r = CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&mu);
  for (int i = 0; i < nblk; i++)
    if (blk[i].key == key && blk[i].kind == kind) {
      if (blk[i].pool)
        pool_keep(blk[i].pool, blk[i].bytes);
      else
        dev_used[blk[i].dev] -= blk[i].bytes;
      free(blk[i].host);
      blk[i] = blk[--nblk];
      r = CUDA_SUCCESS;
      break;
    }
  pthread_mutex_unlock(&mu);
  if (r != CUDA_SUCCESS && kind == K_PTR && graph_mem_free(key))
    r = CUDA_SUCCESS;
  return r;
}
static void books_fork_safe(void);
static CUresult current_dev(int *dev) {
  books_fork_safe();
  if (!initialised)
    return CUDA_ERROR_NOT_INITIALIZED;
  if (!current)
    return CUDA_ERROR_INVALID_CONTEXT;
  *dev = current->dev;
  return CUDA_SUCCESS;
}

/* Called by every entry point that needs a context (cuInit first). */
static void books_fork_safe(void) { pthread_once(&fork_once, install_fork_handlers); }

/* How many devices the driver sees (none under FAKE_CUDA_NO_DEVICE). */
static int ndev(void) {
  const char *n = getenv("FAKE_CUDA_NO_DEVICE");
  return n && *n && strcmp(n, "0") != 0 ? 0 : NDEV;
}
CUresult cuDeviceGetCount(int *n) {
  fake_trace("FAKE_CUDA_TRACE", __func__);
  if (!initialised)
    return CUDA_ERROR_NOT_INITIALIZED;
  if (!n)
    return CUDA_ERROR_INVALID_VALUE;
  *n = ndev();
  return CUDA_SUCCESS;
}
/* The checks of a call that writes `out` about device `d`, in the driver's order. */
static CUresult device_call(const void *out, CUdevice d) {
  if (!initialised)
    return CUDA_ERROR_NOT_INITIALIZED;
  if (!out)
    return CUDA_ERROR_INVALID_VALUE;
  if (d < 0 || d >= ndev())
    return CUDA_ERROR_INVALID_DEVICE;
  return CUDA_SUCCESS;
}
CUresult cuDeviceGet(CUdevice *d, int ordinal) {
  fake_trace("FAKE_CUDA_TRACE", __func__);
  if (initialised && ndev() == 0)
    return CUDA_ERROR_NO_DEVICE;
  CUresult r = device_call(d, ordinal);
  if (r == CUDA_SUCCESS)
    *d = ordinal;
  return r;
}
static CUresult get_uuid(CUuuid *u, CUdevice d) {
  CUresult r = device_call(u, d);
  if (r == CUDA_SUCCESS)
    *u = dev_uuid[d];
  return r;
}
CUresult cuDeviceGetUuid(CUuuid *u, CUdevice d) { count(__func__); return get_uuid(u, d); }
CUresult cuDeviceGetUuid_v2(CUuuid *u, CUdevice d) { count(__func__); return get_uuid(u, d); }
CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice d) {
  fake_trace("FAKE_CUDA_TRACE", __func__);
  CUresult r = device_call(bytes, d);
  if (r == CUDA_SUCCESS)
    *bytes = dev_total[d];
  return r;
}
CUresult cuDeviceGetAttribute(int *v, int attr, CUdevice d) {
  fake_trace("FAKE_CUDA_TRACE", __func__);
  CUresult r = device_call(v, d);
  if (r == CUDA_SUCCESS && (attr <= 0 || attr > 150)) /* beyond CU_DEVICE_ATTRIBUTE_MAX */
    r = CUDA_ERROR_INVALID_VALUE;
  if (r != CUDA_SUCCESS)
    return r;
  switch (attr) { /* cuda.h's CUdevice_attribute; what an A40 (A10) reports */
  case 1: case 2: case 3: *v = 1024; break; /* MAX_THREADS_PER_BLOCK, MAX_BLOCK_DIM_X/Y */
  case 4: *v = 64; break;                   /* MAX_BLOCK_DIM_Z */
  case 5: *v = 2147483647; break;           /* MAX_GRID_DIM_X */
  case 6: case 7: *v = 65535; break;        /* MAX_GRID_DIM_Y/Z */
  case 8: *v = 49152; break;                /* MAX_SHARED_MEMORY_PER_BLOCK */
  case 9: *v = 65536; break;                /* TOTAL_CONSTANT_MEMORY */
  case 10: *v = 32; break;                  /* WARP_SIZE */
  case 12: case 82: *v = 65536; break;      /* MAX_REGISTERS_PER_BLOCK / _MULTIPROCESSOR */
  case 16: *v = dev_sms[d]; break;          /* MULTIPROCESSOR_COUNT */
  case 33: *v = 0x3b + 0x46 * d; break;     /* PCI_BUS_ID: the A40's is the fake NVML's (3B) */
  case 39: *v = 1536; break;                /* MAX_THREADS_PER_MULTIPROCESSOR */
  case 75: *v = 8; break;                   /* COMPUTE_CAPABILITY_MAJOR */
  case 76: *v = 6; break;                   /* COMPUTE_CAPABILITY_MINOR */
  case 81: *v = 102400; break;              /* MAX_SHARED_MEMORY_PER_MULTIPROCESSOR */
  case 97: *v = 101376; break;              /* MAX_SHARED_MEMORY_PER_BLOCK_OPTIN */
  case 106: *v = 16; break;                 /* MAX_BLOCKS_PER_MULTIPROCESSOR */
  case 115: *v = 1; break;                  /* MEMORY_POOLS_SUPPORTED */
  default: *v = 0; break;                   /* the rest: absent (0) on this fake */
  }
  return CUDA_SUCCESS;
}

static CUresult ctx_create(CUcontext *c, CUdevice d) {
  CUresult r = device_call(c, d);
  if (r != CUDA_SUCCESS)
    return r;
  CUcontext ctx = malloc(sizeof *ctx);
  if (!ctx)
    return CUDA_ERROR_OUT_OF_MEMORY;
  /* The reservation is found again by the context's address. */
  unsigned long long key = (uintptr_t)ctx, reserve = ctx_reserve();
  r = reserve ? take_as(d, reserve, K_CTX, &key, 1) : CUDA_SUCCESS;
  if (r != CUDA_SUCCESS) {
    free(ctx);
    return r;
  }
  ctx->dev = d;
  *c = current = ctx;
  return CUDA_SUCCESS;
}
CUresult cuCtxCreate_v2(CUcontext *c, unsigned flags, CUdevice d) {
  count(__func__);
  (void)flags;
  return ctx_create(c, d);
}
CUresult cuCtxCreate(CUcontext *c, unsigned flags, CUdevice d) { /* v1, before 3.2 */
  count(__func__);
  (void)flags;
  return ctx_create(c, d);
}
CUresult cuCtxCreate_v3(CUcontext *c, void *params, int n, unsigned flags, CUdevice d) {
  count(__func__);
  (void)flags;
  if (n < 0 || (n > 0 && !params))
    return CUDA_ERROR_INVALID_VALUE;
  return ctx_create(c, d);
}
CUresult cuCtxCreate_v4(CUcontext *c, void *params, unsigned flags, CUdevice d) {
  count(__func__);
  (void)params;
  (void)flags;
  return ctx_create(c, d);
}
CUresult cuCtxDestroy_v2(CUcontext c) {
  count(__func__);
  if (!c || (c >= primary && c < primary + NDEV))
    return CUDA_ERROR_INVALID_VALUE;
  CUresult r = ctx_reserve() ? give((uintptr_t)c, K_CTX) : CUDA_SUCCESS;
  if (r != CUDA_SUCCESS)
    return CUDA_ERROR_INVALID_CONTEXT;
  free_context(c);
  if (current == c)
    current = NULL;
  free(c);
  return CUDA_SUCCESS;
}
CUresult cuCtxDestroy(CUcontext c) { /* v1, before 4.0 */
  return cuCtxDestroy_v2(c);
}
static CUresult primary_retain(CUcontext *c, CUdevice d) {
  CUresult r = device_call(c, d);
  if (r != CUDA_SUCCESS)
    return r;
  unsigned long long key = (uintptr_t)&primary[d], reserve = ctx_reserve();
  if (primary_refs[d] == 0 && reserve)
    r = take_as(d, reserve, K_CTX, &key, 1);
  if (r == CUDA_SUCCESS) {
    primary_refs[d]++;
    primary[d].dev = d;
    *c = &primary[d];
  }
  return r;
}
CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d) {
  count(__func__);
  return primary_retain(c, d);
}
static void cls_end(CUcontext c); /* cuda_runtime.inc */
/* The primary context's reservation ends with its last reference. */
static CUresult primary_end(CUdevice d, int all) {
  CUresult r = device_call(&primary[0], d);
  if (r != CUDA_SUCCESS)
    return r;
  if (primary_refs[d] == 0)
    return all ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
  primary_refs[d] = all ? 0 : primary_refs[d] - 1;
  if (primary_refs[d] == 0) {
    cls_end(&primary[d]);
    give((uintptr_t)&primary[d], K_CTX);
    free_context(&primary[d]);
    if (current == &primary[d])
      current = NULL;
  }
  return CUDA_SUCCESS;
}
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d) { count(__func__); return primary_end(d, 0); }
CUresult cuDevicePrimaryCtxReset_v2(CUdevice d) { count(__func__); return primary_end(d, 1); }
/* The v1 functions (what the CUDA runtime asks for at 7000, through 13.x). */
CUresult cuDevicePrimaryCtxRelease(CUdevice d) { count(__func__); return primary_end(d, 0); }
CUresult cuDevicePrimaryCtxReset(CUdevice d) { count(__func__); return primary_end(d, 1); }
CUresult cuCtxSetCurrent(CUcontext c) {
  fake_trace("FAKE_CUDA_TRACE", __func__);
  if (!initialised)
    return CUDA_ERROR_NOT_INITIALIZED;
  current = c;
  return CUDA_SUCCESS;
}
CUresult cuCtxGetCurrent(CUcontext *c) {
  fake_trace("FAKE_CUDA_TRACE", __func__);
  if (!initialised)
    return CUDA_ERROR_NOT_INITIALIZED;
  if (!c)
    return CUDA_ERROR_INVALID_VALUE;
  *c = current;
  return CUDA_SUCCESS;
}
CUresult cuCtxGetDevice(CUdevice *d) {
  fake_trace("FAKE_CUDA_TRACE", __func__);
  int dev;
  if (!d)
    return CUDA_ERROR_INVALID_VALUE;
  CUresult r = current_dev(&dev);
  if (r == CUDA_SUCCESS)
    *d = dev;
  return r;
}
static void wait_kernels(void); /* cuda_launch.inc */
static void pools_sync(void);   /* the memory pools, below */
static void lmem_sync(void);    /* cuda_ctx_limits.inc */
CUresult cuCtxSynchronize(void) {
  fake_trace("FAKE_CUDA_TRACE", __func__);
  int dev;
  CUresult r = current_dev(&dev);
  if (r == CUDA_SUCCESS) {
    wait_kernels();
    pools_sync();
    lmem_sync();
  }
  return r;
}

/* ---- modules: one per device (PTX text with an entry point), one function
 * each; the modules a program loads itself and their globals:
 * cuda_modules.inc ---- */
static struct CUmod_st modules[NDEV];
static struct CUfunc_st functions[NDEV];
static int module_loaded(CUmodule m);           /* cuda_modules.inc */
static CUfunction module_function(CUmodule m); /* cuda_modules.inc */
CUresult cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name) {
  fake_trace("FAKE_CUDA_TRACE", __func__);
  if (!f || !name)
    return CUDA_ERROR_INVALID_VALUE;
  if ((uintptr_t)m - (uintptr_t)modules >= sizeof modules && !module_loaded(m))
    return CUDA_ERROR_INVALID_HANDLE;
  if (module_loaded(m)) {
    *f = module_function(m);
    return CUDA_SUCCESS;
  }
  functions[m->dev].mod = m;
  *f = &functions[m->dev];
  return CUDA_SUCCESS;
}

/* Launches: cuda_launch.inc (the simulated device timeline), included below. */

/* ---- allocations and frees ---- */
static CUresult alloc_ptr(const char *fn, CUdeviceptr *p, unsigned long long bytes) {
  int dev;
  count(fn);
  if (!p)
    return CUDA_ERROR_INVALID_VALUE;
  CUresult r = current_dev(&dev);
  return r != CUDA_SUCCESS ? r : take(dev, bytes, K_PTR, p);
}
/* ---- memory pools: one default pool per device, and created ones. Pools
 * belong to their device, not to a context: what a stream-ordered
 * allocation takes outlives the context it was made from.
 *
 * A pool keeps what is freed into it (cuda.h, CUmemPool_attribute): its
 * reserved bytes are taken from the device, its used bytes are the live
 * allocations; an allocation is served from the reserved bytes not in use
 * first, and the pool grows by the rest. The bytes not in use go back to
 * the device only when the pool releases them: a stream, event or context
 * synchronization releases what lies above the pool's release threshold
 * (CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, default 0), cuMemPoolTrimTo down to
 * the bytes it is asked to keep, and a destroyed pool all of them (its live
 * allocations with their frees). Reserved bytes are fungible here: a real
 * pool's fragments may make it grow earlier. ---- */
struct CUpool_st {
  int dev;
  int dead; /* destroyed with live allocations: freed with the last one */
  int reuse[3]; /* CU_MEMPOOL_ATTR_REUSE_* (1..3), int, default enabled */
  unsigned long long threshold, reserved, used, reserved_high, used_high;
};
typedef struct {
  unsigned allocType, handleTypes;
  CUmemLocation location;
  void *win32SecurityAttributes;
  size_t maxSize;
  unsigned short usage;
  unsigned char reserved[54];
} CUmemPoolProps; /* cuda.h, CUDA 12 */
enum { /* CUmemPool_attribute (cuda.h) */
  CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES = 1,
  CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES = 3,
  CU_MEMPOOL_ATTR_RELEASE_THRESHOLD = 4,
  CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT = 5,
  CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH = 6,
  CU_MEMPOOL_ATTR_USED_MEM_CURRENT = 7,
  CU_MEMPOOL_ATTR_USED_MEM_HIGH = 8,
};
#define NEW_POOL(d) {.dev = (d), .reuse = {1, 1, 1}}
static struct CUpool_st default_pool[NDEV] = {NEW_POOL(0), NEW_POOL(1)};
static struct CUpool_st *device_pool[NDEV] = {&default_pool[0], &default_pool[1]};
#define MAXPOOL 64
static struct CUpool_st *pools[MAXPOOL];
/* The device of a pool this driver made, -1 for anything else. */
static int pool_dev(CUmemoryPool pool) {
  int dev = -1;
  pthread_mutex_lock(&mu);
  for (int d = 0; d < NDEV; d++)
    if (pool == &default_pool[d])
      dev = d;
  for (int i = 0; i < MAXPOOL; i++)
    if (pools[i] && pool == pools[i])
      dev = pools[i]->dev;
  pthread_mutex_unlock(&mu);
  return dev;
}
/* Under mu: give the device back the bytes of `p` not in use above `keep`. */
static void pool_release(struct CUpool_st *p, unsigned long long keep) {
  unsigned long long idle = p->reserved - p->used;
  unsigned long long r = p->reserved > keep ? p->reserved - keep : 0;
  if (r > idle)
    r = idle;
  p->reserved -= r;
  dev_used[p->dev] -= r;
}
/* Under mu: an allocation of `p` freed. A destroyed pool releases it at
 * once, and goes with its last allocation. */
static void pool_keep(struct CUpool_st *p, unsigned long long bytes) {
  p->used -= bytes;
  if (p->dead) {
    pool_release(p, 0);
    if (p->used == 0)
      free(p);
  }
}
/* A synchronization: every pool releases what lies above its threshold. */
static void pools_sync(void) {
  pthread_mutex_lock(&mu);
  for (int d = 0; d < NDEV; d++)
    pool_release(&default_pool[d], default_pool[d].threshold);
  for (int i = 0; i < MAXPOOL; i++)
    if (pools[i])
      pool_release(pools[i], pools[i]->threshold);
  pthread_mutex_unlock(&mu);
}
/* Under mu: a pool this driver made and has not destroyed, or NULL. */
static struct CUpool_st *live_pool(CUmemoryPool pool) {
  for (int d = 0; d < NDEV; d++)
    if (pool == &default_pool[d])
      return &default_pool[d];
  for (int i = 0; i < MAXPOOL; i++)
    if (pools[i] && pool == pools[i])
      return pools[i];
  return NULL;
}
/* The device whose memory location `l` names (-1: not a device's). */
static int located_device(const CUmemLocation *l) {
  int dev = l->type == CU_MEM_LOCATION_TYPE_DEVICE ? l->id : -1;
  if (l->type == CU_MEM_LOCATION_TYPE_DEVICE_LOCALITY_DOMAIN && (l->id >> 8 & 0xff) < LOCALITY_DOMAINS &&
      !(l->id >> 16))
    dev = l->id & 0xff;
  return dev >= 0 && dev < ndev() ? dev : -1;
}
CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *props) {
  count(__func__);
  if (!initialised)
    return CUDA_ERROR_NOT_INITIALIZED;
  int dev = props ? located_device(&props->location) : -1;
  if (!pool || !props || props->allocType != 1 /* PINNED */ || dev < 0)
    return CUDA_ERROR_INVALID_VALUE;
  struct CUpool_st *p = malloc(sizeof *p);
  if (!p)
    return CUDA_ERROR_OUT_OF_MEMORY;
  *p = (struct CUpool_st)NEW_POOL(dev);
  CUresult r = CUDA_ERROR_OUT_OF_MEMORY;
  pthread_mutex_lock(&mu);
  for (int i = 0; i < MAXPOOL; i++)
    if (!pools[i]) {
      pools[i] = p;
      r = CUDA_SUCCESS;
      break;
    }
  pthread_mutex_unlock(&mu);
  if (r != CUDA_SUCCESS)
    free(p);
  else
    *pool = p;
  return r;
}
/* The bytes not in use go back now; the rest with their allocations' frees. */
CUresult cuMemPoolDestroy(CUmemoryPool pool) {
  CUresult r = CUDA_ERROR_INVALID_VALUE;
  count(__func__);
  pthread_mutex_lock(&mu);
  for (int i = 0; i < MAXPOOL; i++)
    if (pools[i] && pool == pools[i]) {
      for (int d = 0; d < NDEV; d++)
        if (device_pool[d] == pools[i])
          device_pool[d] = &default_pool[d];
      pool_release(pools[i], 0);
      if (pools[i]->used == 0)
        free(pools[i]);
      else
        pools[i]->dead = 1;
      pools[i] = NULL;
      r = CUDA_SUCCESS;
    }
  pthread_mutex_unlock(&mu);
  return r;
}
CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t keep) {
  count(__func__);
  pthread_mutex_lock(&mu);
  struct CUpool_st *p = live_pool(pool);
  if (p)
    pool_release(p, keep);
  pthread_mutex_unlock(&mu);
  return p ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
/* cuMemPoolSetAttribute (`set`) and cuMemPoolGetAttribute: the reuse flags
 * are ints, the rest cuuint64_t; the current figures are read-only, the
 * high watermarks may only be reset (set to 0: to the current figure). */
static CUresult pool_attribute(int set, CUmemoryPool pool, int attr, void *value) {
  if (!value)
    return CUDA_ERROR_INVALID_VALUE;
  CUresult r = CUDA_SUCCESS;
  pthread_mutex_lock(&mu);
  struct CUpool_st *p = live_pool(pool);
  unsigned long long *v = value, *field = NULL, *now = NULL;
  int reuse = attr >= CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES &&
              attr <= CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES;
  if (p) {
    switch (attr) {
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD: field = &p->threshold; break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT: field = set ? NULL : &p->reserved; break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH: field = &p->reserved_high, now = &p->reserved; break;
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT: field = set ? NULL : &p->used; break;
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH: field = &p->used_high, now = &p->used; break;
    }
  }
  if (!p || (!reuse && !field))
    r = CUDA_ERROR_INVALID_VALUE;
  else if (reuse && set)
    p->reuse[attr - 1] = *(int *)value != 0;
  else if (reuse)
    *(int *)value = p->reuse[attr - 1];
  else if (!set)
    *v = *field;
  else if (!now)
    *field = *v;
  else if (*v == 0)
    *field = *now;
  else
    r = CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_unlock(&mu);
  return r;
}
CUresult cuMemPoolSetAttribute(CUmemoryPool pool, int attr, void *value) {
  count(__func__);
  return pool_attribute(1, pool, attr, value);
}
CUresult cuMemPoolGetAttribute(CUmemoryPool pool, int attr, void *value) {
  count(__func__);
  return pool_attribute(0, pool, attr, value);
}
CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool, CUdevice d) {
  count(__func__);
  CUresult r = device_call(pool, d);
  if (r == CUDA_SUCCESS)
    *pool = &default_pool[d];
  return r;
}
CUresult cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice d) {
  count(__func__);
  CUresult r = device_call(pool, d);
  if (r == CUDA_SUCCESS) {
    pthread_mutex_lock(&mu);
    *pool = device_pool[d];
    pthread_mutex_unlock(&mu);
  }
  return r;
}
CUresult cuDeviceSetMemPool(CUdevice d, CUmemoryPool pool) {
  count(__func__);
  CUresult r = device_call(&pool, d);
  if (r != CUDA_SUCCESS)
    return r;
  if (pool_dev(pool) != d)
    return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&mu);
  device_pool[d] = pool;
  pthread_mutex_unlock(&mu);
  return CUDA_SUCCESS;
}
/* Graph memory (cuda_graphmem.inc): on a capturing stream an allocation
 * or a free becomes a node (1, its result in *r). */
static int capture_alloc(CUstream s, int dev, unsigned long long bytes, CUdeviceptr *p,
                         CUresult *r);
static int capture_free(CUstream s, CUdeviceptr p, CUresult *r);
static CUresult stream_dev(CUstream s, int *dev); /* cuda_runtime.inc */
/* A stream-ordered allocation from `pool` (NULL: the current pool of the
 * stream's device): from its reserved bytes not in use, the pool growing by
 * the rest. */
static CUresult alloc_pool(const char *fn, CUdeviceptr *p, unsigned long long bytes,
                           CUmemoryPool pool, CUstream s) {
  int dev;
  count(fn);
  if (!p)
    return CUDA_ERROR_INVALID_VALUE;
  CUresult r = current_dev(&dev);
  if (r == CUDA_SUCCESS && !pool)
    r = stream_dev(s, &dev);
  if (r != CUDA_SUCCESS)
    return r;
  pthread_mutex_lock(&mu);
  struct CUpool_st *from = pool ? live_pool(pool) : device_pool[dev];
  int at = from ? from->dev : -1;
  pthread_mutex_unlock(&mu);
  if (at < 0 || bytes == 0)
    return CUDA_ERROR_INVALID_VALUE;
  if (capture_alloc(s, at, bytes, p, &r))
    return r;
  pthread_mutex_lock(&mu);
  from = pool ? live_pool(pool) : device_pool[dev];
  allocations++;
  if (!from)
    r = CUDA_ERROR_INVALID_VALUE;
  else {
    unsigned long long idle = from->reserved - from->used;
    unsigned long long grow = bytes > idle ? bytes - idle : 0;
    if (grow > dev_total[from->dev] - dev_used[from->dev] || nblk == MAXBLK)
      r = CUDA_ERROR_OUT_OF_MEMORY;
    else {
      *p = next_address;
      next_address += (bytes + 511) & ~511ULL;
      memset(&blk[nblk], 0, sizeof blk[nblk]);
      blk[nblk].key = *p;
      blk[nblk].bytes = bytes;
      blk[nblk].dev = from->dev;
      blk[nblk].kind = K_PTR;
      blk[nblk].pool = from;
      nblk++;
      dev_used[from->dev] += grow;
      from->reserved += grow;
      from->used += bytes;
      if (from->reserved > from->reserved_high)
        from->reserved_high = from->reserved;
      if (from->used > from->used_high)
        from->used_high = from->used;
    }
  }
  pthread_mutex_unlock(&mu);
  return r;
}
CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n) { return alloc_ptr(__func__, p, n); }
/* The 32-bit v1 ABI (CUDA < 3.2): 32-bit sizes and pointers. */
CUresult cuMemAlloc(unsigned *p, unsigned n) {
  CUdeviceptr q;
  if (!p)
    return CUDA_ERROR_INVALID_VALUE;
  CUresult r = alloc_ptr(__func__, &q, n);
  if (r == CUDA_SUCCESS)
    *p = (unsigned)q;
  return r;
}
CUresult cuMemAllocManaged(CUdeviceptr *p, size_t n, unsigned flags) {
  if (flags != 1 && flags != 2) /* CU_MEM_ATTACH_GLOBAL / _HOST */
    return CUDA_ERROR_INVALID_VALUE;
  return alloc_ptr(__func__, p, n);
}
CUresult cuMemAllocAsync(CUdeviceptr *p, size_t n, CUstream s) {
  return alloc_pool(__func__, p, n, NULL, s);
}
CUresult cuMemAllocAsync_ptsz(CUdeviceptr *p, size_t n, CUstream s) {
  return alloc_pool(__func__, p, n, NULL, s);
}
CUresult cuMemAllocFromPoolAsync(CUdeviceptr *p, size_t n, CUmemoryPool pool, CUstream s) {
  return pool ? alloc_pool(__func__, p, n, pool, s) : CUDA_ERROR_INVALID_VALUE;
}
CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *p, size_t n, CUmemoryPool pool, CUstream s) {
  return pool ? alloc_pool(__func__, p, n, pool, s) : CUDA_ERROR_INVALID_VALUE;
}
CUresult cuMemAllocPitch_v2(CUdeviceptr *p, size_t *pitch, size_t w, size_t h, unsigned elem) {
  int dev;
  count(__func__);
  if (!p || !pitch || (elem != 4 && elem != 8 && elem != 16))
    return CUDA_ERROR_INVALID_VALUE;
  CUresult r = current_dev(&dev);
  if (r != CUDA_SUCCESS)
    return r;
  size_t pt = (w + PITCH_ALIGN - 1) / PITCH_ALIGN * PITCH_ALIGN;
  r = take(dev, (unsigned long long)pt * h, K_PTR, p);
  if (r == CUDA_SUCCESS)
    *pitch = pt;
  return r;
}
/* The 32-bit v1 ABI. */
CUresult cuMemAllocPitch(unsigned *p, unsigned *pitch, unsigned w, unsigned h, unsigned elem) {
  CUdeviceptr q;
  size_t pt;
  if (!p || !pitch)
    return CUDA_ERROR_INVALID_VALUE;
  CUresult r = cuMemAllocPitch_v2(&q, &pt, w, h, elem);
  if (r == CUDA_SUCCESS) {
    *p = (unsigned)q;
    *pitch = (unsigned)pt;
  }
  return r;
}
static unsigned long long format_bytes(unsigned f) {
  switch (f) {
  case 0x01: case 0x08: return 1;
  case 0x02: case 0x09: case 0x10: return 2;
  case 0x03: case 0x0a: case 0x20: return 4;
  default: return 0;
  }
}
static CUresult alloc_array(const char *fn, void **a, size_t w, size_t h, size_t d, unsigned f,
                            unsigned ch, unsigned levels, int kind) {
  int dev;
  unsigned long long key, bytes = 0;
  count(fn);
  if (!a || !format_bytes(f) || (ch != 1 && ch != 2 && ch != 4) || levels == 0)
    return CUDA_ERROR_INVALID_VALUE;
  CUresult r = current_dev(&dev);
  if (r != CUDA_SUCCESS)
    return r;
  for (unsigned l = 0; l < levels; l++) {
    size_t lw = w >> l ? w >> l : 1, lh = h ? (h >> l ? h >> l : 1) : 1,
           ld = d ? (d >> l ? d >> l : 1) : 1;
    bytes += (unsigned long long)lw * lh * ld * format_bytes(f) * ch;
  }
  r = take(dev, bytes, kind, &key);
  if (r == CUDA_SUCCESS)
    *a = (void *)(uintptr_t)key;
  return r;
}
/* The array creations: _v2, and the v1 (descriptors of 32-bit sizes). */
typedef struct { unsigned Width, Height, Format, NumChannels; } CUDA_ARRAY_DESCRIPTOR_v1;
typedef struct { unsigned Width, Height, Depth, Format, NumChannels, Flags; } CUDA_ARRAY3D_DESCRIPTOR_v1;
#define ARRAY_CREATE(fn, desc, depth)                                            \
  CUresult fn(CUarray *a, const desc *d) {                                       \
    if (!d)                                                                      \
      return CUDA_ERROR_INVALID_VALUE;                                           \
    return alloc_array(__func__, a, d->Width, d->Height, depth, d->Format, d->NumChannels, 1, \
                       K_ARRAY);                                                 \
  }
ARRAY_CREATE(cuArrayCreate_v2, CUDA_ARRAY_DESCRIPTOR, 0)
ARRAY_CREATE(cuArray3DCreate_v2, CUDA_ARRAY3D_DESCRIPTOR, d->Depth)
ARRAY_CREATE(cuArrayCreate, CUDA_ARRAY_DESCRIPTOR_v1, 0)
ARRAY_CREATE(cuArray3DCreate, CUDA_ARRAY3D_DESCRIPTOR_v1, d->Depth)
CUresult cuMipmappedArrayCreate(CUmipmappedArray *a, const CUDA_ARRAY3D_DESCRIPTOR *d,
                                unsigned levels) {
  if (!d)
    return CUDA_ERROR_INVALID_VALUE;
  return alloc_array(__func__, a, d->Width, d->Height, d->Depth, d->Format, d->NumChannels,
                     levels, K_MIPMAP);
}
CUresult cuMemFree_v2(CUdeviceptr p) { count(__func__); return give(p, K_PTR); }
CUresult cuMemFree(unsigned p) { count(__func__); return give(p, K_PTR); }
static CUresult free_async(CUdeviceptr p, CUstream s) {
  CUresult r;
  return capture_free(s, p, &r) ? r : give(p, K_PTR);
}
CUresult cuMemFreeAsync(CUdeviceptr p, CUstream s) { count(__func__); return free_async(p, s); }
CUresult cuMemFreeAsync_ptsz(CUdeviceptr p, CUstream s) {
  count(__func__);
  return free_async(p, s);
}
CUresult cuArrayDestroy(CUarray a) { count(__func__); return give((uintptr_t)a, K_ARRAY); }
CUresult cuMipmappedArrayDestroy(CUmipmappedArray a) {
  count(__func__);
  return give((uintptr_t)a, K_MIPMAP);
}
CUresult cuMemGetInfo_v2(size_t *free_, size_t *total) {
  fake_trace("FAKE_CUDA_TRACE", __func__);
  int dev;
  if (!free_ || !total)
    return CUDA_ERROR_INVALID_VALUE;
  CUresult r = current_dev(&dev);
  if (r != CUDA_SUCCESS)
    return r;
  pthread_mutex_lock(&mu);
  *total = dev_total[dev];
  *free_ = dev_total[dev] - dev_used[dev];
  pthread_mutex_unlock(&mu);
  return CUDA_SUCCESS;
}
/* ---- copies and memsets: through the host buffer behind [p, p + n) of one
 * allocation ---- */
/* Under mu: the host bytes behind [p, p + n) of one allocation (made on
 * first touch), p aligned to `align` in it; NULL with *r set otherwise. */
static unsigned char *backing(CUdeviceptr p, size_t n, size_t align, CUresult *r) {
  *r = CUDA_ERROR_INVALID_VALUE;
  for (int i = 0; i < nblk; i++)
    if (blk[i].kind == K_PTR && p >= blk[i].key && p - blk[i].key < blk[i].bytes) {
      if (n > blk[i].bytes - (p - blk[i].key) || (p - blk[i].key) % align)
        return NULL;
      if (!blk[i].host)
        blk[i].host = calloc(1, blk[i].bytes);
      if (!blk[i].host) {
        *r = CUDA_ERROR_OUT_OF_MEMORY;
        return NULL;
      }
      *r = CUDA_SUCCESS;
      return blk[i].host + (p - blk[i].key);
    }
  return NULL;
}
static CUresult copy(CUdeviceptr p, void *host, size_t n, int to_device) {
  int dev;
  if (!host)
    return CUDA_ERROR_INVALID_VALUE;
  CUresult r = current_dev(&dev);
  if (r != CUDA_SUCCESS)
    return r;
  pthread_mutex_lock(&mu);
  unsigned char *d = backing(p, n, 1, &r);
  if (d)
    memcpy(to_device ? d : host, to_device ? host : d, n);
  pthread_mutex_unlock(&mu);
  return r;
}
CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n) {
  return copy(dst, (void *)src, n, 1);
}
CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n) { return copy(src, dst, n, 0); }
/* The Async ones at once (no real stream). */
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, CUstream s) {
  (void)s;
  return copy(dst, (void *)src, n, 1);
}
CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, CUstream s) {
  (void)s;
  return copy(src, dst, n, 0);
}

/* Memsets: `n` elements of `size` bytes (1, 2, 4) set to `value`; the Async
 * ones at once. */
static CUresult fill(CUdeviceptr p, unsigned value, size_t n, size_t size) {
  int dev;
  CUresult r = current_dev(&dev);
  if (r != CUDA_SUCCESS)
    return r;
  if (n > SIZE_MAX / size)
    return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&mu);
  unsigned char *d = backing(p, n * size, size, &r);
  for (size_t k = 0; d && k < n; k++)
    memcpy(d + k * size, &value, size); /* little-endian: the low bytes */
  pthread_mutex_unlock(&mu);
  return r;
}
CUresult cuMemsetD8_v2(CUdeviceptr p, unsigned char v, size_t n) { return fill(p, v, n, 1); }
CUresult cuMemsetD16_v2(CUdeviceptr p, unsigned short v, size_t n) { return fill(p, v, n, 2); }
CUresult cuMemsetD32_v2(CUdeviceptr p, unsigned v, size_t n) { return fill(p, v, n, 4); }
CUresult cuMemsetD8Async(CUdeviceptr p, unsigned char v, size_t n, CUstream s) {
  (void)s;
  return fill(p, v, n, 1);
}
CUresult cuMemsetD16Async(CUdeviceptr p, unsigned short v, size_t n, CUstream s) {
  (void)s;
  return fill(p, v, n, 2);
}
CUresult cuMemsetD32Async(CUdeviceptr p, unsigned v, size_t n, CUstream s) {
  (void)s;
  return fill(p, v, n, 4);
}

/* The 32-bit v1 ABI. */
CUresult cuDeviceTotalMem(unsigned *bytes, CUdevice d) {
  size_t t;
  count(__func__);
  if (!bytes)
    return CUDA_ERROR_INVALID_VALUE;
  CUresult r = cuDeviceTotalMem_v2(&t, d);
  if (r == CUDA_SUCCESS)
    *bytes = t > 0xffffffffu ? 0xffffffffu : (unsigned)t;
  return r;
}
CUresult cuMemGetInfo(unsigned *free_, unsigned *total) {
  fake_trace("FAKE_CUDA_TRACE", __func__);
  size_t f, t;
  if (!free_ || !total)
    return CUDA_ERROR_INVALID_VALUE;
  CUresult r = cuMemGetInfo_v2(&f, &t);
  *free_ = f > 0xffffffffu ? 0xffffffffu : (unsigned)f;
  *total = t > 0xffffffffu ? 0xffffffffu : (unsigned)t;
  return r;
}

#include "cuda_vmm.inc"
#include "cuda_launch.inc"
#include "cuda_runtime.inc"
#include "cuda_events.inc"
#include "cuda_modules.inc"
#include "cuda_graphmem.inc"
#include "cuda_location_pools.inc"
#include "cuda_ctx_limits.inc"
#include "cuda_green.inc"

/* ---- cuGetProcAddress ---- */
CUresult cuGetProcAddress(const char *, void **, int, unsigned long long);
CUresult cuGetProcAddress_v2(const char *, void **, int, unsigned long long, int *);

#define PT 1 /* the per-thread-default-stream variant */
static const struct { const char *name; void *fn; int since, pt; } procs[] = {
    {"cuInit", (void *)cuInit, 2000, 0},
    {"cuDriverGetVersion", (void *)cuDriverGetVersion, 2020, 0},
    {"cuGetErrorName", (void *)cuGetErrorName, 6000, 0},
    {"cuGetProcAddress", (void *)cuGetProcAddress, 11030, 0},
    {"cuGetProcAddress", (void *)cuGetProcAddress_v2, 12000, 0},
    {"cuDeviceGet", (void *)cuDeviceGet, 2000, 0},
    {"cuDeviceGetCount", (void *)cuDeviceGetCount, 2000, 0},
    {"cuDeviceGetUuid", (void *)cuDeviceGetUuid, 9020, 0},
    {"cuDeviceGetUuid", (void *)cuDeviceGetUuid_v2, 11040, 0},
    {"cuDeviceTotalMem", (void *)cuDeviceTotalMem, 2000, 0},
    {"cuDeviceTotalMem", (void *)cuDeviceTotalMem_v2, 3020, 0},
    {"cuDeviceGetAttribute", (void *)cuDeviceGetAttribute, 2000, 0},
    {"cuCtxCreate", (void *)cuCtxCreate, 2000, 0},
    {"cuCtxCreate", (void *)cuCtxCreate_v2, 3020, 0},
    {"cuCtxCreate", (void *)cuCtxCreate_v3, 11040, 0},
    {"cuCtxCreate", (void *)cuCtxCreate_v4, 13000, 0},
    {"cuCtxDestroy", (void *)cuCtxDestroy, 2000, 0},
    {"cuCtxDestroy", (void *)cuCtxDestroy_v2, 4000, 0},
    {"cuCtxSetCurrent", (void *)cuCtxSetCurrent, 4000, 0},
    {"cuCtxGetCurrent", (void *)cuCtxGetCurrent, 4000, 0},
    {"cuCtxGetDevice", (void *)cuCtxGetDevice, 2000, 0},
    {"cuDevicePrimaryCtxRetain", (void *)cuDevicePrimaryCtxRetain, 7000, 0},
    {"cuDevicePrimaryCtxRelease", (void *)cuDevicePrimaryCtxRelease, 7000, 0},
    {"cuDevicePrimaryCtxRelease", (void *)cuDevicePrimaryCtxRelease_v2, 11000, 0},
    {"cuDevicePrimaryCtxReset", (void *)cuDevicePrimaryCtxReset, 7000, 0},
    {"cuDevicePrimaryCtxReset", (void *)cuDevicePrimaryCtxReset_v2, 11000, 0},
    {"cuCtxSynchronize", (void *)cuCtxSynchronize, 2000, 0},
    {"cuModuleLoad", (void *)cuModuleLoad, 2000, 0},
    {"cuModuleLoadData", (void *)cuModuleLoadData, 2000, 0},
    {"cuModuleLoadDataEx", (void *)cuModuleLoadDataEx, 2010, 0},
    {"cuModuleLoadFatBinary", (void *)cuModuleLoadFatBinary, 2000, 0},
    {"cuModuleUnload", (void *)cuModuleUnload, 2000, 0},
    {"cuModuleGetFunction", (void *)cuModuleGetFunction, 2000, 0},
    {"cuGraphAddKernelNode", (void *)cuGraphAddKernelNode, 10000, 0},
    {"cuGraphAddKernelNode", (void *)cuGraphAddKernelNode_v2, 12000, 0},
    {"cuGraphKernelNodeGetParams", (void *)cuGraphKernelNodeGetParams, 10000, 0},
    {"cuGraphKernelNodeGetParams", (void *)cuGraphKernelNodeGetParams_v2, 12000, 0},
    {"cuGraphAddChildGraphNode", (void *)cuGraphAddChildGraphNode, 10000, 0},
    {"cuGraphExecKernelNodeSetParams", (void *)cuGraphExecKernelNodeSetParams, 10010, 0},
    {"cuGraphExecKernelNodeSetParams", (void *)cuGraphExecKernelNodeSetParams_v2, 12000, 0},
    {"cuGraphExecUpdate", (void *)cuGraphExecUpdate, 10020, 0},
    {"cuGraphExecUpdate", (void *)cuGraphExecUpdate_v2, 12000, 0},
    {"cuGraphChildGraphNodeGetGraph", (void *)cuGraphChildGraphNodeGetGraph, 10000, 0},
    {"cuMemAlloc", (void *)cuMemAlloc, 2000, 0},
    {"cuMemAlloc", (void *)cuMemAlloc_v2, 3020, 0},
    {"cuMemAllocPitch", (void *)cuMemAllocPitch, 2000, 0},
    {"cuMemAllocPitch", (void *)cuMemAllocPitch_v2, 3020, 0},
    {"cuMemAllocManaged", (void *)cuMemAllocManaged, 6000, 0},
    {"cuMemAllocAsync", (void *)cuMemAllocAsync, 11020, 0},
    {"cuMemAllocAsync", (void *)cuMemAllocAsync_ptsz, 11020, PT},
    {"cuMemAllocFromPoolAsync", (void *)cuMemAllocFromPoolAsync, 11020, 0},
    {"cuMemAllocFromPoolAsync", (void *)cuMemAllocFromPoolAsync_ptsz, 11020, PT},
    {"cuMemCreate", (void *)cuMemCreate, 10020, 0},
    {"cuMemPoolCreate", (void *)cuMemPoolCreate, 11020, 0},
    {"cuMemPoolDestroy", (void *)cuMemPoolDestroy, 11020, 0},
    {"cuDeviceGetDefaultMemPool", (void *)cuDeviceGetDefaultMemPool, 11020, 0},
    {"cuDeviceGetMemPool", (void *)cuDeviceGetMemPool, 11020, 0},
    {"cuDeviceSetMemPool", (void *)cuDeviceSetMemPool, 11020, 0},
    {"cuMemGetDefaultMemPool", (void *)cuMemGetDefaultMemPool, 13000, 0},
    {"cuMemGetMemPool", (void *)cuMemGetMemPool, 13000, 0},
    {"cuMemSetMemPool", (void *)cuMemSetMemPool, 13000, 0},
    {"cuMemRelease", (void *)cuMemRelease, 10020, 0},
    /* virtual memory management and multicast (cuda_vmm.inc) */
    {"cuMemGetAllocationGranularity", (void *)cuMemGetAllocationGranularity, 10020, 0},
    {"cuMemAddressReserve", (void *)cuMemAddressReserve, 10020, 0},
    {"cuMemAddressFree", (void *)cuMemAddressFree, 10020, 0},
    {"cuMemMap", (void *)cuMemMap, 10020, 0},
    {"cuMemUnmap", (void *)cuMemUnmap, 10020, 0},
    {"cuMemSetAccess", (void *)cuMemSetAccess, 10020, 0},
    {"cuMemRetainAllocationHandle", (void *)cuMemRetainAllocationHandle, 11000, 0},
    {"cuMemGetAllocationPropertiesFromHandle", (void *)cuMemGetAllocationPropertiesFromHandle, 10020, 0},
    {"cuMemExportToShareableHandle", (void *)cuMemExportToShareableHandle, 10020, 0},
    {"cuMemImportFromShareableHandle", (void *)cuMemImportFromShareableHandle, 10020, 0},
    {"cuMulticastGetGranularity", (void *)cuMulticastGetGranularity, 12010, 0},
    {"cuMulticastCreate", (void *)cuMulticastCreate, 12010, 0},
    {"cuMulticastAddDevice", (void *)cuMulticastAddDevice, 12010, 0},
    {"cuMulticastBindMem", (void *)cuMulticastBindMem, 12010, 0},
    {"cuMulticastBindMem", (void *)cuMulticastBindMem_v2, 13010, 0},
    {"cuMulticastBindAddr", (void *)cuMulticastBindAddr, 12010, 0},
    {"cuMulticastBindAddr", (void *)cuMulticastBindAddr_v2, 13010, 0},
    {"cuMulticastUnbind", (void *)cuMulticastUnbind, 12010, 0},
    {"cuArrayCreate", (void *)cuArrayCreate, 2000, 0},
    {"cuArrayCreate", (void *)cuArrayCreate_v2, 3020, 0},
    {"cuArray3DCreate", (void *)cuArray3DCreate, 2000, 0},
    {"cuArray3DCreate", (void *)cuArray3DCreate_v2, 3020, 0},
    {"cuArrayDestroy", (void *)cuArrayDestroy, 2000, 0},
    {"cuMipmappedArrayCreate", (void *)cuMipmappedArrayCreate, 5000, 0},
    {"cuMipmappedArrayDestroy", (void *)cuMipmappedArrayDestroy, 5000, 0},
    {"cuMemFree", (void *)cuMemFree, 2000, 0},
    {"cuMemFree", (void *)cuMemFree_v2, 3020, 0},
    {"cuMemFreeAsync", (void *)cuMemFreeAsync, 11020, 0},
    {"cuMemFreeAsync", (void *)cuMemFreeAsync_ptsz, 11020, PT},
    {"cuMemGetInfo", (void *)cuMemGetInfo, 2000, 0},
    {"cuMemGetInfo", (void *)cuMemGetInfo_v2, 3020, 0},
    {"cuLaunchKernel", (void *)cuLaunchKernel, 4000, 0},
    {"cuLaunchKernel", (void *)cuLaunchKernel_ptsz, 4000, PT},
    {"cuLaunchKernelEx", (void *)cuLaunchKernelEx, 11060, 0},
    {"cuLaunchKernelEx", (void *)cuLaunchKernelEx_ptsz, 11060, PT},
    {"cuLaunchCooperativeKernel", (void *)cuLaunchCooperativeKernel, 9000, 0},
    {"cuLaunchCooperativeKernel", (void *)cuLaunchCooperativeKernel_ptsz, 9000, PT},
    {"cuGraphLaunch", (void *)cuGraphLaunch, 10000, 0},
    {"cuGraphLaunch", (void *)cuGraphLaunch_ptsz, 10000, PT},
    {"cuMemcpyHtoD", (void *)cuMemcpyHtoD_v2, 3020, 0},
    {"cuMemcpyDtoH", (void *)cuMemcpyDtoH_v2, 3020, 0},
    {"cuMemcpyHtoDAsync", (void *)cuMemcpyHtoDAsync_v2, 3020, 0},
    {"cuMemcpyHtoDAsync", (void *)cuMemcpyHtoDAsync_v2, 7000, PT},
    {"cuMemcpyDtoHAsync", (void *)cuMemcpyDtoHAsync_v2, 3020, 0},
    {"cuMemcpyDtoHAsync", (void *)cuMemcpyDtoHAsync_v2, 7000, PT},
    {"cuMemsetD8", (void *)cuMemsetD8_v2, 3020, 0},
    {"cuMemsetD8", (void *)cuMemsetD8_v2, 7000, PT},
    {"cuMemsetD16", (void *)cuMemsetD16_v2, 3020, 0},
    {"cuMemsetD16", (void *)cuMemsetD16_v2, 7000, PT},
    {"cuMemsetD32", (void *)cuMemsetD32_v2, 3020, 0},
    {"cuMemsetD32", (void *)cuMemsetD32_v2, 7000, PT},
    {"cuMemsetD8Async", (void *)cuMemsetD8Async, 3020, 0},
    {"cuMemsetD8Async", (void *)cuMemsetD8Async, 7000, PT},
    {"cuMemsetD16Async", (void *)cuMemsetD16Async, 3020, 0},
    {"cuMemsetD16Async", (void *)cuMemsetD16Async, 7000, PT},
    {"cuMemsetD32Async", (void *)cuMemsetD32Async, 3020, 0},
    {"cuMemsetD32Async", (void *)cuMemsetD32Async, 7000, PT},
    {"cuMemPoolTrimTo", (void *)cuMemPoolTrimTo, 11020, 0},
    {"cuMemPoolSetAttribute", (void *)cuMemPoolSetAttribute, 11020, 0},
    {"cuMemPoolGetAttribute", (void *)cuMemPoolGetAttribute, 11020, 0},
    /* what NVIDIA's runtime needs at init (cuda_runtime.inc) */
    {"cuGetExportTable", (void *)cuGetExportTable, 3000, 0},
    {"cuGetErrorString", (void *)cuGetErrorString, 6000, 0},
    {"cuDeviceGetName", (void *)cuDeviceGetName, 2000, 0},
    {"cuModuleGetLoadingMode", (void *)cuModuleGetLoadingMode, 11070, 0},
    {"cuLibraryLoadData", (void *)cuLibraryLoadData, 12000, 0},
    {"cuLibraryLoadFromFile", (void *)cuLibraryLoadFromFile, 12000, 0},
    {"cuLibraryUnload", (void *)cuLibraryUnload, 12000, 0},
    {"cuLibraryGetKernel", (void *)cuLibraryGetKernel, 12000, 0},
    {"cuLibraryGetModule", (void *)cuLibraryGetModule, 12000, 0},
    {"cuKernelGetFunction", (void *)cuKernelGetFunction, 12000, 0},
    {"cuKernelGetAttribute", (void *)cuKernelGetAttribute, 12000, 0},
    {"cuFuncGetAttribute", (void *)cuFuncGetAttribute, 2020, 0},
    {"cuThreadExchangeStreamCaptureMode", (void *)cuThreadExchangeStreamCaptureMode, 10010, 0},
    {"cuStreamBeginCapture", (void *)cuStreamBeginCapture, 10000, 0},
    {"cuStreamBeginCapture", (void *)cuStreamBeginCapture, 10000, PT},
    {"cuStreamBeginCapture", (void *)cuStreamBeginCapture_v2, 10010, 0},
    {"cuStreamBeginCapture", (void *)cuStreamBeginCapture_v2, 10010, PT},
    {"cuStreamEndCapture", (void *)cuStreamEndCapture, 10000, 0},
    {"cuStreamEndCapture", (void *)cuStreamEndCapture_ptsz, 10000, PT},
    {"cuStreamIsCapturing", (void *)cuStreamIsCapturing, 10000, 0},
    {"cuStreamIsCapturing", (void *)cuStreamIsCapturing, 10000, PT},
    {"cuStreamGetCaptureInfo", (void *)cuStreamGetCaptureInfo, 10010, 0},
    {"cuStreamGetCaptureInfo", (void *)cuStreamGetCaptureInfo, 10010, PT},
    {"cuStreamGetCaptureInfo", (void *)cuStreamGetCaptureInfo_v2, 11030, 0},
    {"cuStreamGetCaptureInfo", (void *)cuStreamGetCaptureInfo_v2, 11030, PT},
    {"cuStreamGetCaptureInfo", (void *)cuStreamGetCaptureInfo_v3, 12030, 0},
    {"cuStreamGetCaptureInfo", (void *)cuStreamGetCaptureInfo_v3, 12030, PT},
    {"cuGraphInstantiate", (void *)cuGraphInstantiate_v2, 11000, 0},
    {"cuGraphInstantiateWithFlags", (void *)cuGraphInstantiateWithFlags, 11040, 0},
    {"cuGraphInstantiateWithParams", (void *)cuGraphInstantiateWithParams, 12000, 0},
    {"cuGraphInstantiateWithParams", (void *)cuGraphInstantiateWithParams_ptsz, 12000, PT},
    {"cuGraphUpload", (void *)cuGraphUpload, 11010, 0},
    {"cuGraphUpload", (void *)cuGraphUpload, 11010, PT},
    {"cuGraphExecDestroy", (void *)cuGraphExecDestroy, 10000, 0},
    /* graph memory (cuda_graphmem.inc) */
    {"cuGraphCreate", (void *)cuGraphCreate, 10000, 0},
    {"cuGraphAddMemAllocNode", (void *)cuGraphAddMemAllocNode, 11040, 0},
    {"cuGraphAddMemFreeNode", (void *)cuGraphAddMemFreeNode, 11040, 0},
    {"cuGraphGetNodes", (void *)cuGraphGetNodes, 10000, 0},
    {"cuGraphNodeGetType", (void *)cuGraphNodeGetType, 10000, 0},
    {"cuGraphMemAllocNodeGetParams", (void *)cuGraphMemAllocNodeGetParams, 11040, 0},
    {"cuDeviceGraphMemTrim", (void *)cuDeviceGraphMemTrim, 11040, 0},
    {"cuDeviceGetGraphMemAttribute", (void *)cuDeviceGetGraphMemAttribute, 11040, 0},
    {"cuDeviceSetGraphMemAttribute", (void *)cuDeviceSetGraphMemAttribute, 11040, 0},
    {"cuGraphDestroy", (void *)cuGraphDestroy, 10000, 0},
    {"cuDevicePrimaryCtxGetState", (void *)cuDevicePrimaryCtxGetState, 7000, 0},
    {"cuDevicePrimaryCtxSetFlags", (void *)cuDevicePrimaryCtxSetFlags, 7000, 0},
    {"cuDevicePrimaryCtxSetFlags", (void *)cuDevicePrimaryCtxSetFlags_v2, 11000, 0},
    {"cuCtxGetFlags", (void *)cuCtxGetFlags, 7000, 0},
    {"cuCtxGetApiVersion", (void *)cuCtxGetApiVersion, 3020, 0},
    {"cuCtxGetLimit", (void *)cuCtxGetLimit, 3010, 0},
    {"cuCtxSetLimit", (void *)cuCtxSetLimit, 3010, 0},
    {"cuCtxGetCacheConfig", (void *)cuCtxGetCacheConfig, 3020, 0},
    {"cuCtxGetStreamPriorityRange", (void *)cuCtxGetStreamPriorityRange, 5050, 0},
    {"cuCtxPushCurrent", (void *)cuCtxPushCurrent_v2, 4000, 0},
    {"cuCtxPopCurrent", (void *)cuCtxPopCurrent_v2, 4000, 0},
    {"cuStreamCreate", (void *)cuStreamCreate, 2000, 0},
    {"cuStreamCreateWithPriority", (void *)cuStreamCreateWithPriority, 5050, 0},
    {"cuStreamDestroy", (void *)cuStreamDestroy_v2, 4000, 0},
    {"cuStreamGetDevice", (void *)cuStreamGetDevice, 12080, 0},
    {"cuGreenCtxCreate", (void *)cuGreenCtxCreate, 12040, 0},
    {"cuGreenCtxDestroy", (void *)cuGreenCtxDestroy, 12040, 0},
    {"cuStreamGetDevice", (void *)cuStreamGetDevice_ptsz, 12080, PT},
    /* stream queries and events (cuda_events.inc); as for the launches,
     * a per-thread request gets the _ptsz variant at any version */
    {"cuStreamQuery", (void *)cuStreamQuery, 2000, 0},
    {"cuStreamQuery", (void *)cuStreamQuery_ptsz, 2000, PT},
    {"cuStreamSynchronize", (void *)cuStreamSynchronize, 2000, 0},
    {"cuStreamSynchronize", (void *)cuStreamSynchronize_ptsz, 2000, PT},
    {"cuStreamWaitEvent", (void *)cuStreamWaitEvent, 3020, 0},
    {"cuStreamWaitEvent", (void *)cuStreamWaitEvent_ptsz, 3020, PT},
    {"cuEventCreate", (void *)cuEventCreate, 2000, 0},
    {"cuEventDestroy", (void *)cuEventDestroy_v2, 4000, 0},
    {"cuEventRecord", (void *)cuEventRecord, 2000, 0},
    {"cuEventRecord", (void *)cuEventRecord_ptsz, 2000, PT},
    {"cuEventRecordWithFlags", (void *)cuEventRecordWithFlags, 11010, 0},
    {"cuEventRecordWithFlags", (void *)cuEventRecordWithFlags_ptsz, 11010, PT},
    {"cuEventQuery", (void *)cuEventQuery, 2000, 0},
    {"cuEventSynchronize", (void *)cuEventSynchronize, 2000, 0},
    {"cuEventElapsedTime", (void *)cuEventElapsedTime, 2000, 0},
    {"cuEventElapsedTime", (void *)cuEventElapsedTime_v2, 12080, 0},
};

static CUresult lookup(const char *symbol, void **pfn, int version, unsigned long long flags,
                       int *status) {
  int found = -1, named = 0;
  if (!symbol || !pfn)
    return CUDA_ERROR_INVALID_VALUE;
  int pt = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
  for (size_t i = 0; i < sizeof procs / sizeof procs[0]; i++) {
    if (strcmp(procs[i].name, symbol) != 0)
      continue;
    named = 1;
    if (procs[i].since > version)
      continue;
    /* The newest version; of equal versions, the stream variant the flags ask for. */
    if (found < 0 || procs[i].since > procs[found].since ||
        (procs[i].since == procs[found].since && procs[i].pt == pt))
      found = (int)i;
  }
  /* A name the runtime asks that this fake does not implement: a function
   * that answers CUDA_ERROR_NOT_SUPPORTED (cuda_runtime.inc). */
  for (size_t i = 0; found < 0 && !named && i < sizeof asked_names / sizeof asked_names[0]; i++)
    if (strcmp(asked_names[i].name, symbol) == 0) {
      *pfn = asked_names[i].fn;
      if (status)
        *status = CU_GET_PROC_ADDRESS_SUCCESS;
      return CUDA_SUCCESS;
    }
  *pfn = found >= 0 ? procs[found].fn : NULL;
  if (status)
    *status = found >= 0 ? CU_GET_PROC_ADDRESS_SUCCESS
              : named    ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
                         : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  return found >= 0 ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}
CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, unsigned long long flags) {
  count(__func__);
  return lookup(symbol, pfn, version, flags, NULL);
}
CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version,
                             unsigned long long flags, int *status) {
  count(__func__);
  return lookup(symbol, pfn, version, flags, status);
}
/* ==== end of the hook's block ==== */

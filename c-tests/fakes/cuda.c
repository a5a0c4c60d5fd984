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

/* For the tests: the state of a process, -1 if it is not a CUDA process. */
int fake_cuda_state(int pid) {
  int *s = state_of(pid);
  return s ? *s : -1;
}

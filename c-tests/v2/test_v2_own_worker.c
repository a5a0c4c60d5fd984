/* v2 AccelSetMemHardLimit / AccelSetComputeUnitHardLimit called by a process
 * without ACCELERATOR_WORKER_ID: the process is a worker of its own, and the
 * limit binds it (its liblimiter checks block past it) and no other process
 * (a forked child is not bound), under the one-time rule.
 *
 * Usage: test_v2_own_worker LIBACCELERATOR LIBLIMITER
 * The libraries are dlopened RTLD_NOW | RTLD_GLOBAL, as the hypervisor
 * loads the provider; liblimiter is what a worker's hook calls. */
#include "accelerator.h"
#include "limiter.h"
#include "../test_util.h"
#include <dlfcn.h>
#include <stdint.h>
#include <sys/wait.h>
#include <unistd.h>

static __typeof__(&AccelGetAllDevices) p_AccelGetAllDevices;
static __typeof__(&AccelSetMemHardLimit) p_AccelSetMemHardLimit;
static __typeof__(&AccelSetComputeUnitHardLimit) p_AccelSetComputeUnitHardLimit;
static __typeof__(&CheckAndRecordMemoryOps) p_CheckAndRecordMemoryOps;
static const char *(*last_error)(void);
#define EXPECT_RC(call, expected) EXPECT_RC_WITH(last_error, call, expected)

static void *sym(void *lib, const char *name) {
  void *p = dlsym(lib, name);
  if (!p) {
    fprintf(stderr, "dlsym %s: %s\n", name, dlerror());
    exit(2);
  }
  return p;
}

/* Record `bytes` for this process on `uuid`; returns shouldBlock, or -1 on error. */
static int record(const char *uuid, int64_t bytes) {
  char pid[32];
  snprintf(pid, sizeof pid, "%d", (int)getpid());
  MemoryOpRecord r;
  memset(&r, 0, sizeof r);
  snprintf(r.deviceUUID, sizeof r.deviceUUID, "%s", uuid);
  r.bytesDiff = bytes;
  if (p_CheckAndRecordMemoryOps(pid, uuid, bytes, &r) != ACCEL_SUCCESS)
    return -1;
  return r.shouldBlock;
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: %s LIBACCELERATOR LIBLIMITER\n", argv[0]);
    return 2;
  }
  unsetenv("ACCELERATOR_WORKER_ID");
  void *acc = dlopen(argv[1], RTLD_NOW | RTLD_GLOBAL);
  void *lim = dlopen(argv[2], RTLD_NOW | RTLD_GLOBAL);
  if (!acc || !lim) {
    fprintf(stderr, "dlopen: %s\n", dlerror());
    return 2;
  }
  p_AccelGetAllDevices = (__typeof__(p_AccelGetAllDevices))sym(acc, "AccelGetAllDevices");
  p_AccelSetMemHardLimit = (__typeof__(p_AccelSetMemHardLimit))sym(acc, "AccelSetMemHardLimit");
  p_AccelSetComputeUnitHardLimit =
      (__typeof__(p_AccelSetComputeUnitHardLimit))sym(acc, "AccelSetComputeUnitHardLimit");
  p_CheckAndRecordMemoryOps =
      (__typeof__(p_CheckAndRecordMemoryOps))sym(lim, "CheckAndRecordMemoryOps");
  last_error = (const char *(*)(void))sym(acc, "acceleratorGetLastError");

  static ExtendedDeviceInfo devs[2];
  size_t n = 0;
  EXPECT_RC(p_AccelGetAllDevices(devs, 2, &n), ACCEL_SUCCESS);
  CHECK(n == 2, "two devices, got %zu", n);
  if (n < 2)
    return test_summary();
  const char *dev0 = devs[0].basic.uuid, *dev1 = devs[1].basic.uuid;
  const uint64_t limit = 8u << 20;

  /* The limit binds this process: up to it, then blocked. */
  EXPECT_RC(p_AccelSetMemHardLimit(dev0, limit), ACCEL_SUCCESS);
  EXPECT_RC(p_AccelSetMemHardLimit(dev0, limit), ACCEL_SUCCESS);          /* same value again */
  EXPECT_RC(p_AccelSetMemHardLimit(dev0, limit / 2), ACCEL_ERROR_OPERATION_FAILED); /* one-time */
  EXPECT_RC(p_AccelSetComputeUnitHardLimit(dev0, 40), ACCEL_SUCCESS);
  EXPECT_RC(p_AccelSetComputeUnitHardLimit(dev0, 60), ACCEL_ERROR_OPERATION_FAILED);
  EXPECT_RC(p_AccelSetComputeUnitHardLimit(dev0, 101), ACCEL_ERROR_INVALID_PARAM);
  CHECK(record(dev0, limit - 4096) == 0, "up to the limit is granted");
  CHECK(record(dev0, 8192) == 1, "past the limit is blocked");
  CHECK(record(dev1, 3 * limit) == 0, "another device is not limited");

  /* A forked child is a process of its own: not bound by the parent's limit. */
  pid_t c = fork();
  if (c == 0)
    _exit(record(dev0, 2 * limit) == 0 ? 0 : 1);
  int st = 0;
  waitpid(c, &st, 0);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "a forked child is not bound");
  CHECK(record(dev0, 8192) == 1, "the parent is still bound after its child");
  CHECK(record(dev0, -(int64_t)(limit - 4096)) == 0, "free");
  CHECK(record(dev0, limit) == 0, "the whole limit again after the free");
  return test_summary();
}

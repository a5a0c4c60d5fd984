/* Per-process usage that liblimiter.so records shows up through every
 * vendor's per-process functions, merged with what the driver reports.
 *
 * Usage: test_usage_merge LIBACCELERATOR LIBLIMITER
 * The vendor and its (fake) driver are chosen by the environment the
 * Makefile sets (ACCELERATOR_VENDOR, ACCELERATOR_NVML_PATH, ...). */
#include <dlfcn.h>
#include <stdio.h>
#include <unistd.h>

#include "accelerator.h"
#include "limiter.h"
#include "test_util.h"

#define MIB (1024ull * 1024ull)

static const char *(*last_error)(void);
static const char *(*limiter_error)(void);

static void *sym(void *lib, const char *name) {
  void *p = dlsym(lib, name);
  if (!p) {
    fprintf(stderr, "missing symbol %s\n", name);
    exit(2);
  }
  return p;
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: %s LIBACCELERATOR LIBLIMITER\n", argv[0]);
    return 2;
  }
  void *acc = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  void *lim = dlopen(argv[2], RTLD_NOW | RTLD_LOCAL);
  if (!acc || !lim) {
    fprintf(stderr, "dlopen: %s\n", dlerror());
    return 2;
  }
  last_error = (const char *(*)(void))sym(acc, "acceleratorGetLastError");
  limiter_error = (const char *(*)(void))sym(lim, "limiterGetLastError");
  Result (*get_all)(ExtendedDeviceInfo *, size_t, size_t *) =
      (Result(*)(ExtendedDeviceInfo *, size_t, size_t *))sym(acc, "GetAllDevices");
  Result (*get_mem)(MemoryUtilization *, size_t, size_t *) =
      (Result(*)(MemoryUtilization *, size_t, size_t *))sym(acc, "GetProcessMemoryUtilization");
  Result (*get_compute)(ComputeUtilization *, size_t, size_t *) =
      (Result(*)(ComputeUtilization *, size_t, size_t *))sym(acc, "GetProcessComputeUtilization");
  Result (*record)(const char *, const char *, int64_t, MemoryOpRecord *) =
      (Result(*)(const char *, const char *, int64_t, MemoryOpRecord *))sym(
          lim, "CheckAndRecordMemoryOps");

  ExtendedDeviceInfo devs[8];
  size_t n = 0;
  EXPECT_RC_WITH(last_error, get_all(devs, 8, &n), RESULT_SUCCESS);
  CHECK(n >= 1, "the vendor reports devices (%zu)", n);
  if (n == 0)
    return test_summary();
  const char *uuid = devs[0].basic.uuid;

  char me[32];
  snprintf(me, sizeof me, "%d", (int)getpid());
  MemoryOpRecord rec;
  EXPECT_RC_WITH(limiter_error, record(me, uuid, (int64_t)(3 * MIB), &rec), RESULT_SUCCESS);
  CHECK(!rec.shouldBlock, "an unlimited process is not blocked");

  MemoryUtilization mem[64];
  EXPECT_RC_WITH(last_error, get_mem(mem, 64, &n), RESULT_SUCCESS);
  int found = 0;
  for (size_t i = 0; i < n; i++)
    if (strcmp(mem[i].processId, me) == 0 && strcmp(mem[i].deviceUUID, uuid) == 0) {
      found++;
      CHECK(mem[i].usedBytes == 3 * MIB, "recorded bytes reported: %llu",
            (unsigned long long)mem[i].usedBytes);
    }
  CHECK(found == 1, "the limiter's process is listed once on %s (%d)", uuid, found);

  ComputeUtilization cu[64];
  EXPECT_RC_WITH(last_error, get_compute(cu, 64, &n), RESULT_SUCCESS);
  found = 0;
  for (size_t i = 0; i < n; i++)
    if (strcmp(cu[i].processId, me) == 0 && strcmp(cu[i].deviceUUID, uuid) == 0) {
      found++;
      CHECK(cu[i].totalSMs == devs[0].basic.totalComputeUnits, "totalSMs %llu",
            (unsigned long long)cu[i].totalSMs);
    }
  CHECK(found == 1, "the limiter's process is listed in compute use (%d)", found);

  EXPECT_RC_WITH(limiter_error, record(me, uuid, -(int64_t)(3 * MIB), &rec), RESULT_SUCCESS);
  return test_summary();
}

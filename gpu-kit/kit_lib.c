/* The GPU verification kit's measurements through the library, each beside
 * the raw driver calls it stands for, in the same process and run.
 *
 *   kit_lib metrics  LIBACCELERATOR LIBNVML UUID
 *       median of 1,000 single calls of: the raw NVML calls GetDeviceMetrics
 *       makes in steady state, GetDeviceMetrics, and AccelGetDeviceMetrics
 *       (v2 ABI, looked up with dlsym: "absent" where the library lacks it);
 *       then the values each reports.
 *   kit_lib snapshot LIBACCELERATOR LIBCUDA PID UUID
 *       Snapshot then Resume of PID through the library, then the raw
 *       cuCheckpointProcessLock/Checkpoint/Restore/Unlock on the same PID.
 *
 * One JSON object on stdout. Only reads and the checkpoint API are called:
 * nothing here changes a device setting. */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "accelerator.h"
#include "nvml_raw.h"

#define CALLS 1000

/* DeviceMetrics of ../shared/ABI-v2.md (4,728 bytes). */
typedef struct {
  char key[64];
  double value;
} extra_metric_t;
typedef struct {
  char deviceUUID[64];
  double powerUsageWatts, temperatureCelsius;
  uint64_t pcieRxBytes, pcieTxBytes;
  uint32_t utilizationPercent;
  uint64_t memoryUsedBytes;
  extra_metric_t extraMetrics[64];
  size_t extraMetricsCount;
} v2_metrics_t;
_Static_assert(sizeof(v2_metrics_t) == 4728, "ABI-v2 DeviceMetrics is 4,728 bytes");

static void *need(void *lib, const char *name) {
  void *p = dlsym(lib, name);
  if (!p) {
    printf("{\"error\":\"%s missing\"}\n", name);
    exit(1);
  }
  return p;
}

static Result (*get_metrics)(const char **, size_t, DeviceMetrics *);
static int (*accel_metrics)(const char **, size_t, v2_metrics_t *);
static raw_nvml nvml_calls;
static const char *uuid;
static int failures;
static v2_metrics_t v2;

static void op_raw(void) { failures += raw_nvml_calls(&nvml_calls, uuid) != 0; }

static void op_v1(void) {
  DeviceMetrics m;
  failures += get_metrics(&uuid, 1, &m) != RESULT_SUCCESS;
}

static void op_v2(void) { failures += accel_metrics(&uuid, 1, &v2) != 0; }

/* Median and p99 in ns of CALLS single calls, after 100 warm-up calls. */
static void measure(const char *name, void (*op)(void), int last) {
  static double s[CALLS];
  for (int i = 0; i < 100; i++)
    op();
  for (int i = 0; i < CALLS; i++) {
    double t0 = raw_now_ns();
    op();
    s[i] = raw_now_ns() - t0;
  }
  qsort(s, CALLS, sizeof s[0], raw_cmp_double);
  printf("\"%s\":{\"median_ns\":%.0f,\"p99_ns\":%.0f}%s", name, s[CALLS / 2], s[CALLS * 99 / 100],
         last ? "" : ",");
}

static int metrics_cost(const char *lib_path, const char *nvml_path) {
  void *acc = dlopen(lib_path, RTLD_NOW | RTLD_LOCAL);
  void *nvml = dlopen(nvml_path, RTLD_NOW | RTLD_LOCAL);
  if (!acc || !nvml) {
    printf("{\"error\":\"dlopen: %s\"}\n", dlerror());
    return 1;
  }
  get_metrics = (Result(*)(const char **, size_t, DeviceMetrics *))need(acc, "GetDeviceMetrics");
  accel_metrics = (int (*)(const char **, size_t, v2_metrics_t *))dlsym(acc, "AccelGetDeviceMetrics");
  const char *missing = raw_nvml_open(&nvml_calls, nvml);
  if (missing) {
    printf("{\"error\":\"%s missing\"}\n", missing);
    return 1;
  }

  printf("{\"calls\":%d,\"cost\":{", CALLS);
  measure("raw_nvml", op_raw, 0);
  measure("GetDeviceMetrics", op_v1, accel_metrics == NULL);
  if (accel_metrics)
    measure("AccelGetDeviceMetrics", op_v2, 1);
  printf("},\"AccelGetDeviceMetrics\":\"%s\",\"call_failures\":%d,", accel_metrics ? "present" : "absent",
         failures);

  /* Values: the library's and NVML's, read back to back. */
  DeviceMetrics m;
  int rc = get_metrics(&uuid, 1, &m);
  const raw_nvml *r = &nvml_calls;
  void *h = NULL;
  unsigned mw = 0, temp = 0;
  nvml_memory_t mem = {0, 0, 0};
  nvml_util_t u = {0, 0};
  nvml_field_t f[2] = {{.fieldId = 198}, {.fieldId = 197}};
  r->by_uuid(uuid, &h);
  r->power(h, &mw);
  r->temperature(h, 0, &temp);
  r->memory(h, &mem);
  r->utilization(h, &u);
  r->field_values(h, 2, f);
  printf("\"library\":{\"rc\":%d,\"powerUsageWatts\":%.3f,\"temperatureCelsius\":%.1f,"
         "\"memoryUsedBytes\":%llu,\"memoryTotalBytes\":%llu,\"smActivePercent\":%u,"
         "\"tensorCoreUsagePercent\":%u,\"pcieRxBytes\":%llu,\"pcieTxBytes\":%llu},",
         rc, m.powerUsageWatts, m.temperatureCelsius, (unsigned long long)m.memoryUsedBytes,
         (unsigned long long)m.memoryTotalBytes, m.smActivePercent, m.tensorCoreUsagePercent,
         (unsigned long long)m.pcieRxBytes, (unsigned long long)m.pcieTxBytes);
  printf("\"nvml\":{\"powerUsageWatts\":%.3f,\"temperatureCelsius\":%u,\"memoryUsedBytes\":%llu,"
         "\"memoryTotalBytes\":%llu,\"utilizationGpu\":%u,\"pcieRxBytes\":%llu,\"pcieTxBytes\":%llu}",
         mw / 1000.0, temp, mem.used, mem.total, u.gpu, f[0].nvmlReturn ? 0 : f[0].value,
         f[1].nvmlReturn ? 0 : f[1].value);
  if (accel_metrics && accel_metrics(&uuid, 1, &v2) == 0) {
    printf(",\"accel\":{\"utilizationPercent\":%u,\"memoryUsedBytes\":%llu,\"extra\":{", v2.utilizationPercent,
           (unsigned long long)v2.memoryUsedBytes);
    for (size_t i = 0; i < v2.extraMetricsCount && i < 64; i++)
      printf("%s\"%.63s\":%.3f", i ? "," : "", v2.extraMetrics[i].key, v2.extraMetrics[i].value);
    printf("}}");
  }
  printf("}\n");
  return 0;
}

typedef int (*ckpt_fn)(int, void *);

static double ms_since(double t0) { return (raw_now_ns() - t0) / 1e6; }

/* The library's last error as JSON string content (quotes and backslashes
 * replaced, control characters dropped). */
static void error_text(char *out, size_t len, const char *msg) {
  size_t n = 0;
  for (; msg && *msg && n + 1 < len; msg++)
    if ((unsigned char)*msg >= 0x20)
      out[n++] = *msg == '"' ? '\'' : *msg == '\\' ? '/' : *msg;
  out[n] = 0;
}

static int snapshot_pid(const char *lib_path, const char *cuda_path, int pid) {
  void *acc = dlopen(lib_path, RTLD_NOW | RTLD_LOCAL);
  void *cuda = dlopen(cuda_path, RTLD_NOW | RTLD_LOCAL);
  if (!acc || !cuda) {
    printf("{\"error\":\"dlopen: %s\"}\n", dlerror());
    return 1;
  }
  Result (*snap)(ProcessArray *) = (Result(*)(ProcessArray *))need(acc, "Snapshot");
  Result (*resume)(ProcessArray *) = (Result(*)(ProcessArray *))need(acc, "Resume");
  const char *(*last_error)(void) = (const char *(*)(void))need(acc, "acceleratorGetLastError");
  pid_t pids[1] = {pid};
  ProcessArray pa = {.processIds = pids, .processCount = 1};
  snprintf(pa.deviceUUID, sizeof pa.deviceUUID, "%s", uuid);

  double t0 = raw_now_ns();
  int rs = (int)snap(&pa);
  double snap_ms = ms_since(t0);
  char snap_err[512] = "";
  if (rs != RESULT_SUCCESS)
    error_text(snap_err, sizeof snap_err, last_error());
  t0 = raw_now_ns();
  int rr = rs == RESULT_SUCCESS ? (int)resume(&pa) : -1;
  double resume_ms = ms_since(t0);
  char resume_err[512] = "";
  if (rr != RESULT_SUCCESS && rr != -1)
    error_text(resume_err, sizeof resume_err, last_error());
  printf("{\"library\":{\"snapshot_rc\":%d,\"snapshot_ms\":%.3f,\"snapshot_error\":\"%s\","
         "\"resume_rc\":%d,\"resume_ms\":%.3f,\"resume_error\":\"%s\"},",
         rs, snap_ms, snap_err, rr, resume_ms, resume_err);

  /* The same steps through the driver directly. */
  const char *steps[] = {"cuCheckpointProcessLock", "cuCheckpointProcessCheckpoint", "cuCheckpointProcessRestore",
                         "cuCheckpointProcessUnlock"};
  printf("\"raw\":{");
  ((int (*)(unsigned))need(cuda, "cuInit"))(0);
  int ok = 1;
  for (int i = 0; i < 4; i++) {
    ckpt_fn f = (ckpt_fn)dlsym(cuda, steps[i]);
    uint64_t args[8] = {0}; /* lock: timeoutMs 0 = none; the others reserved */
    if (i == 0)
      args[0] = 10000; /* timeoutMs 10 s in the low word, as the library passes */
    t0 = raw_now_ns();
    int r = ok && f ? f(pid, args) : -1;
    double ms = ms_since(t0);
    ok &= r == 0;
    printf("%s\"%s\":{\"rc\":%d,\"ms\":%.3f}", i ? "," : "", steps[i], r, ms);
  }
  printf("}}\n");
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 5 && strcmp(argv[1], "metrics") == 0) {
    uuid = argv[4];
    return metrics_cost(argv[2], argv[3]);
  }
  if (argc == 6 && strcmp(argv[1], "snapshot") == 0) {
    uuid = argv[5];
    return snapshot_pid(argv[2], argv[3], atoi(argv[4]));
  }
  fprintf(stderr,
          "usage: %s metrics LIBACCELERATOR LIBNVML UUID\n"
          "       %s snapshot LIBACCELERATOR LIBCUDA PID UUID\n",
          argv[0], argv[0]);
  return 2;
}

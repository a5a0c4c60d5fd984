/* `make bench` for the NVIDIA vendor: what a cached GetAllDevices costs, and
 * what GetDeviceMetrics costs against the raw NVML calls it makes, as a
 * ratio measured in the same run. Runs against the fake NVML in CI and
 * against the real driver where ACCELERATOR_NVML_PATH points at it (or is
 * unset on a GPU machine).
 *
 * Usage: bench_nvidia LIBACCELERATOR_NVIDIA [LIBNVIDIA_ML] */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "accelerator.h"

#define ROUNDS 201
#define BATCH 100

typedef int (*nvml_fn)();
typedef struct {
  unsigned fieldId, scopeId;
  long long timestamp, latencyUsec;
  int valueType;
  int nvmlReturn;
  unsigned long long value;
} field_t;
typedef struct {
  unsigned long long total, free, used;
} memory_t;
typedef struct {
  unsigned gpu, memory;
} util_t;

static double now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

typedef void (*op_fn)(void);

/* Median and p99 of ROUNDS batches of BATCH calls, in ns per call. */
static void measure(const char *name, op_fn op, double *median_out) {
  double s[ROUNDS];
  for (int i = 0; i < BATCH; i++)
    op(); /* warm-up */
  for (int r = 0; r < ROUNDS; r++) {
    double t0 = now_ns();
    for (int i = 0; i < BATCH; i++)
      op();
    s[r] = (now_ns() - t0) / BATCH;
  }
  qsort(s, ROUNDS, sizeof s[0], cmp);
  printf("| %-44s | %10.0f | %10.0f |\n", name, s[ROUNDS / 2], s[ROUNDS * 99 / 100]);
  if (median_out)
    *median_out = s[ROUNDS / 2];
}

static Result (*get_all)(ExtendedDeviceInfo *, size_t, size_t *);
static Result (*get_metrics)(const char **, size_t, DeviceMetrics *);
static nvml_fn by_uuid, field_values, power, temperature, memory, utilization;
static ExtendedDeviceInfo devs[8];
static const char *uuid;

static void op_all(void) {
  size_t n;
  if (get_all(devs, 8, &n) != RESULT_SUCCESS)
    abort();
}

static void op_metrics(void) {
  DeviceMetrics m;
  if (get_metrics(&uuid, 1, &m) != RESULT_SUCCESS)
    abort();
}

/* The NVML calls GetDeviceMetrics makes for one device in steady state. */
static void op_raw(void) {
  void *h;
  field_t f[2] = {{.fieldId = 198}, {.fieldId = 197}};
  unsigned mw, temp;
  memory_t mem;
  util_t u;
  if (by_uuid(uuid, &h) != 0)
    abort();
  field_values(h, 2, f);
  power(h, &mw);
  temperature(h, 0, &temp);
  memory(h, &mem);
  utilization(h, &u);
}

static void *must(void *lib, const char *name) {
  void *p = dlsym(lib, name);
  if (!p) {
    fprintf(stderr, "missing %s\n", name);
    exit(2);
  }
  return p;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s LIBACCELERATOR_NVIDIA [LIBNVIDIA_ML]\n", argv[0]);
    return 2;
  }
  const char *nvml_path = argc > 2 ? argv[2] : "libnvidia-ml.so.1";
  void *acc = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  void *nvml = dlopen(nvml_path, RTLD_NOW | RTLD_LOCAL);
  if (!acc || !nvml) {
    fprintf(stderr, "dlopen: %s\n", dlerror());
    return 2;
  }
  get_all = (Result(*)(ExtendedDeviceInfo *, size_t, size_t *))must(acc, "GetAllDevices");
  get_metrics = (Result(*)(const char **, size_t, DeviceMetrics *))must(acc, "GetDeviceMetrics");
  ((nvml_fn)must(nvml, "nvmlInit_v2"))();
  by_uuid = (nvml_fn)must(nvml, "nvmlDeviceGetHandleByUUID");
  field_values = (nvml_fn)must(nvml, "nvmlDeviceGetFieldValues");
  power = (nvml_fn)must(nvml, "nvmlDeviceGetPowerUsage");
  temperature = (nvml_fn)must(nvml, "nvmlDeviceGetTemperature");
  memory = (nvml_fn)must(nvml, "nvmlDeviceGetMemoryInfo");
  utilization = (nvml_fn)must(nvml, "nvmlDeviceGetUtilizationRates");

  size_t n = 0;
  if (get_all(devs, 8, &n) != RESULT_SUCCESS || n == 0) {
    fprintf(stderr, "no NVIDIA devices through %s\n", argv[1]);
    return 1;
  }
  uuid = devs[n - 1].basic.uuid;
  printf("NVIDIA vendor bench: %zu devices, metrics of %s (%s), NVML %s\n\n", n, uuid,
         devs[n - 1].basic.model, nvml_path);
  printf("| %-44s | %10s | %10s |\n", "operation", "median ns", "p99 ns");
  printf("|----------------------------------------------|------------|------------|\n");
  double raw = 0, ours = 0;
  measure("GetAllDevices (cached, all devices)", op_all, NULL);
  measure("raw NVML: the calls GetDeviceMetrics makes", op_raw, &raw);
  measure("GetDeviceMetrics (1 device)", op_metrics, &ours);
  printf("\nGetDeviceMetrics / raw NVML = %.2fx (target <= 1.2x)\n", ours / raw);
  dlclose(acc);
  return 0;
}

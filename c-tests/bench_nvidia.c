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
#include "nvml_raw.h"

#define ROUNDS 201
#define BATCH 100

typedef void (*op_fn)(void);

/* Median and p99 of ROUNDS batches of BATCH calls, in ns per call. */
static void measure(const char *name, op_fn op, double *median_out) {
  double s[ROUNDS];
  for (int i = 0; i < BATCH; i++)
    op(); /* warm-up */
  for (int r = 0; r < ROUNDS; r++) {
    double t0 = raw_now_ns();
    for (int i = 0; i < BATCH; i++)
      op();
    s[r] = (raw_now_ns() - t0) / BATCH;
  }
  qsort(s, ROUNDS, sizeof s[0], raw_cmp_double);
  printf("| %-44s | %10.0f | %10.0f |\n", name, s[ROUNDS / 2], s[ROUNDS * 99 / 100]);
  if (median_out)
    *median_out = s[ROUNDS / 2];
}

static Result (*get_all)(ExtendedDeviceInfo *, size_t, size_t *);
static Result (*get_metrics)(const char **, size_t, DeviceMetrics *);
static raw_nvml nvml_calls;
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
  if (raw_nvml_calls(&nvml_calls, uuid) != 0)
    abort();
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
  const char *missing = raw_nvml_open(&nvml_calls, nvml);
  if (missing) {
    fprintf(stderr, "missing %s\n", missing);
    return 2;
  }

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

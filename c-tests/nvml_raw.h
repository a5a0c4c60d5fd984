/* The NVML calls GetDeviceMetrics makes for one device in steady state, so
 * that the benchmark (bench_nvidia.c) and the GPU kit (gpu-kit/kit_lib.c)
 * time the same baseline. Layouts as in nvml.h. */
#ifndef NVML_RAW_H
#define NVML_RAW_H

#include <dlfcn.h>
#include <stdio.h>
#include <time.h>

typedef int (*nvml_fn)();
typedef struct {
  unsigned fieldId, scopeId;
  long long timestamp, latencyUsec;
  int valueType;
  int nvmlReturn;
  unsigned long long value;
} nvml_field_t;
typedef struct {
  unsigned long long total, free, used;
} nvml_memory_t;
typedef struct {
  unsigned gpu, memory;
} nvml_util_t;

typedef struct {
  nvml_fn by_uuid, field_values, power, temperature, memory, utilization;
} raw_nvml;

/* nvmlInit_v2 and the entry points; the name of a missing one, or NULL. */
static inline const char *raw_nvml_open(raw_nvml *r, void *lib) {
  static const char *names[] = {"nvmlInit_v2", "nvmlDeviceGetHandleByUUID", "nvmlDeviceGetFieldValues",
                                "nvmlDeviceGetPowerUsage", "nvmlDeviceGetTemperature",
                                "nvmlDeviceGetMemoryInfo", "nvmlDeviceGetUtilizationRates"};
  nvml_fn f[7];
  for (int i = 0; i < 7; i++)
    if (!(f[i] = (nvml_fn)dlsym(lib, names[i])))
      return names[i];
  f[0]();
  *r = (raw_nvml){f[1], f[2], f[3], f[4], f[5], f[6]};
  return NULL;
}

/* What one GetDeviceMetrics call asks NVML: handle by UUID, the PCIe byte
 * counters (fields 198 RX, 197 TX), power, temperature, memory, utilization.
 * Returns the handle lookup's result. */
static inline int raw_nvml_calls(const raw_nvml *r, const char *uuid) {
  void *h;
  nvml_field_t f[2] = {{.fieldId = 198}, {.fieldId = 197}};
  unsigned mw, temp;
  nvml_memory_t mem;
  nvml_util_t u;
  int rc = r->by_uuid(uuid, &h);
  if (rc != 0)
    return rc;
  r->field_values(h, 2, f);
  r->power(h, &mw);
  r->temperature(h, 0, &temp);
  r->memory(h, &mem);
  r->utilization(h, &u);
  return 0;
}

static inline double raw_now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

static inline int raw_cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

#endif

/* Preloaded before HAMi-core in bench_hook's two "before" modes
 * (tools/hami-bench.sh): gives HAMi-core, which reads its limits from the
 * environment, the limits of the bench worker the child is named for, so
 * that one bench run has HAMi-core without and with limits in the same
 * turns as the driver alone and our hook. HAMi-core reads its environment
 * on the process's first CUDA call, after this constructor has run.
 *
 *   bench-unlimited  no CUDA_DEVICE_MEMORY_LIMIT, no CUDA_DEVICE_SM_LIMIT
 *   bench-limited    CUDA_DEVICE_MEMORY_LIMIT=40g (bench_hook's memory
 *                    limit for that worker, of the A40's 48 GiB) and
 *                    CUDA_DEVICE_SM_LIMIT=50
 *
 * Each has its own shared region (CUDA_DEVICE_MEMORY_SHARED_CACHE under
 * HAMI_BENCH_DIR): HAMi-core keeps the limits of the process that created
 * a region, so the two must not share one. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

__attribute__((constructor)) static void hami_env(void) {
  const char *worker = getenv("ACCELERATOR_WORKER_ID");
  const char *dir = getenv("HAMI_BENCH_DIR");
  char cache[4096];
  int limited = worker && strcmp(worker, "bench-limited") == 0;
  if (!dir || snprintf(cache, sizeof cache, "%s/%s.cache", dir,
                       limited ? "limited" : "unlimited") >= (int)sizeof cache) {
    fputs("hami_env: HAMI_BENCH_DIR is unset or too long\n", stderr);
    exit(2);
  }
  setenv("CUDA_DEVICE_MEMORY_SHARED_CACHE", cache, 1);
  if (limited) {
    setenv("CUDA_DEVICE_MEMORY_LIMIT", "40g", 1);
    setenv("CUDA_DEVICE_SM_LIMIT", "50", 1);
  } else {
    unsetenv("CUDA_DEVICE_MEMORY_LIMIT");
    unsetenv("CUDA_DEVICE_SM_LIMIT");
  }
}

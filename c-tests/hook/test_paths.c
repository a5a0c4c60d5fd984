/* Every path by which a CUDA program takes device memory (issue 35), each
 * reached five ways: app_paths (its header lists the ways and scenarios)
 * under LD_PRELOAD=libcuda_limiter.so as a worker limited to 256 MiB on the
 * fake driver's device 0, the limit set as the hypervisor sets it
 * (SetMemHardLimit through libaccelerator, nvidia vendor on the fake NVML).
 *
 * Each run writes a row per path whose checks all passed; the rows, with the
 * ways that reached each, are docs/hook.md's table of memory paths, written
 * to TABLE (`make hook-paths-test` compares it with the docs, `make
 * hook-paths-table` rewrites them).
 *
 * Usage: test_paths LIBACCELERATOR HOOK APP_PATHS TABLE */
#include <dlfcn.h>
#include <stdint.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../test_util.h"

#define LIMIT (256ull << 20)
#define NWAYS 5
#define MAXROWS 64
#define UUID0 "GPU-11111111-1111-1111-1111-1111111111a4"

int main(int argc, char **argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: %s LIBACCELERATOR HOOK APP_PATHS TABLE\n", argv[0]);
    return 2;
  }
  void *acc = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  int (*set_limit)(const char *, const char *, uint64_t) =
      acc ? (int (*)(const char *, const char *, uint64_t))dlsym(acc, "SetMemHardLimit") : NULL;
  if (!set_limit) {
    fprintf(stderr, "%s: no SetMemHardLimit (%s)\n", argv[1], dlerror());
    return 2;
  }
  static const char *const ways[NWAYS] = {"dlsym", "ptsz", "gpa118", "gpa128pt", "gpa130"};
  /* The rows seen, and by which ways. */
  static char rows[MAXROWS][1024];
  static int reached[MAXROWS][NWAYS];
  int nrows = 0;
  char rowfile[64];
  snprintf(rowfile, sizeof rowfile, "/tmp/test-paths-rows-%d", (int)getpid());
  setenv("APP_PATHS_TABLE", rowfile, 1);
  static const char *const scenarios[] = {"vmm", "graph", "ctxlimit", "stream", "green", "pools13",
                                             "module", "localmem",
                                             "locality"};
  char limit[32];
  snprintf(limit, sizeof limit, "%llu", LIMIT);
  /* Contexts reserve nothing here: the driver's count is the paths' alone. */
  setenv("FAKE_CUDA_CTX_RESERVE", "0", 1);
  for (size_t s = 0; s < sizeof scenarios / sizeof scenarios[0]; s++)
    for (size_t w = 0; w < sizeof ways / sizeof ways[0]; w++) {
      char worker[64];
      snprintf(worker, sizeof worker, "paths-%s-%s-%d", scenarios[s], ways[w], (int)getpid());
      CHECK(set_limit(worker, UUID0, LIMIT) == 0, "SetMemHardLimit(%s)", worker);
      fflush(NULL);
      pid_t pid = fork();
      if (pid == 0) {
        setenv("LD_PRELOAD", argv[2], 1);
        setenv("ACCELERATOR_WORKER_ID", worker, 1);
        execl(argv[3], argv[3], ways[w], scenarios[s], limit, (char *)NULL);
        _exit(127);
      }
      int st = -1;
      CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0,
            "%s reached by %s (status %d)", scenarios[s], ways[w], st);
      FILE *f = fopen(rowfile, "r");
      char line[1024];
      while (f && fgets(line, sizeof line, f)) {
        int i = 0;
        while (i < nrows && strcmp(rows[i], line) != 0)
          i++;
        if (i == nrows && nrows < MAXROWS)
          snprintf(rows[nrows++], sizeof rows[0], "%s", line);
        if (i < nrows)
          reached[i][w] = 1;
      }
      if (f)
        fclose(f);
      unlink(rowfile);
    }
  FILE *t = fopen(argv[4], "w");
  CHECK(t != NULL, "write %s", argv[4]);
  if (!t)
    return test_summary();
  fprintf(t, "| path | charged | given back | approximate | reached |\n|---|---|---|---|---|\n");
  for (int i = 0; i < nrows; i++) {
    char *r = rows[i], *cells[4];
    r[strcspn(r, "\n")] = 0;
    for (int c = 0; c < 4; c++)
      cells[c] = strsep(&r, "\t");
    fprintf(t, "| %s | %s | %s | %s |", cells[0], cells[1], cells[2], cells[3]);
    int all = 1;
    for (size_t w = 0; w < NWAYS; w++)
      all &= reached[i][w];
    if (all)
      fprintf(t, " all five ways |\n");
    else
      for (size_t w = 0; w < NWAYS; w++)
        fprintf(t, "%s%s%s", reached[i][w] ? " " : "", reached[i][w] ? ways[w] : "",
                w + 1 == NWAYS ? " |\n" : "");
  }
  fclose(t);
  CHECK(nrows > 0, "the paths wrote their rows");
  return test_summary();
}

/* Load time of libaccelerator builds as the hypervisor pays it: in a fresh
 * process each time, dlopen(path, RTLD_NOW | RTLD_GLOBAL), then AccelInit()
 * (which chooses the vendor and lists its devices). A process loads the
 * library once (it pins itself), so every sample is a forked child.
 *
 *   bench_load RUNS LIBRARY...
 *
 * Prints, per library, the median and the minimum over RUNS of dlopen,
 * AccelInit and the two together, in milliseconds, and the device count
 * AccelInit found. Run by probe/bench_universal.sh (make bench-universal). */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef int (*init_fn)(void);
typedef int (*count_fn)(size_t *);

struct sample {
  double open_ms, init_ms;
  long devices; /* -1: a call failed */
};

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* In the child: one load, written to `fd`. */
static void measure(const char *path, int fd) {
  struct sample s = {0, 0, -1};
  double t0 = now_ms();
  void *h = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
  double t1 = now_ms();
  if (h) {
    init_fn init = (init_fn)dlsym(h, "AccelInit");
    count_fn count = (count_fn)dlsym(h, "AccelGetDeviceCount");
    int rc = init ? init() : -1;
    double t2 = now_ms();
    size_t n = 0;
    s.open_ms = t1 - t0;
    s.init_ms = t2 - t1;
    if (rc == 0 && count && count(&n) == 0)
      s.devices = (long)n;
  } else {
    fprintf(stderr, "bench_load: %s\n", dlerror());
  }
  ssize_t w = write(fd, &s, sizeof s);
  _exit(w == (ssize_t)sizeof s && s.devices >= 0 ? 0 : 1);
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, int n) {
  qsort(v, n, sizeof *v, cmp);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int main(int argc, char **argv) {
  int runs = argc > 2 ? atoi(argv[1]) : 0;
  if (runs < 1) {
    fprintf(stderr, "usage: bench_load RUNS LIBRARY...\n");
    return 2;
  }
  double *open_ms = calloc(runs, sizeof *open_ms), *init_ms = calloc(runs, sizeof *init_ms),
         *total = calloc(runs, sizeof *total);
  if (!open_ms || !init_ms || !total)
    return 1;
  printf("%-44s %7s %9s %9s %9s %9s\n", "library", "devices", "dlopen", "AccelInit", "both",
         "both-min");
  for (int l = 2; l < argc; l++) {
    long devices = -1;
    for (int r = 0; r < runs; r++) {
      int p[2];
      if (pipe(p) != 0)
        return 1;
      pid_t pid = fork();
      if (pid == 0) {
        close(p[0]);
        measure(argv[l], p[1]);
      }
      close(p[1]);
      struct sample s;
      int status = 0;
      ssize_t got = read(p[0], &s, sizeof s);
      close(p[0]);
      waitpid(pid, &status, 0);
      if (got != (ssize_t)sizeof s || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "bench_load: %s: the load failed\n", argv[l]);
        return 1;
      }
      open_ms[r] = s.open_ms;
      init_ms[r] = s.init_ms;
      total[r] = s.open_ms + s.init_ms;
      devices = s.devices;
    }
    double mo = median(open_ms, runs), mi = median(init_ms, runs), mt = median(total, runs);
    printf("%-44s %7ld %9.2f %9.2f %9.2f %9.2f\n", argv[l], devices, mo, mi, mt, total[0]);
  }
  free(open_ms);
  free(init_ms);
  free(total);
  return 0;
}

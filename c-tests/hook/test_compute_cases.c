/* Compute limits across kernel lengths, processes and sample periods, on
 * the simulated device (c-tests/fakes/timeline.h), the production way:
 * each case is a node of its own (its own state directory, timeline and
 * host sampler: this program, as the hypervisor, dlopens libaccelerator
 * RTLD_NOW|RTLD_GLOBAL, calls AccelInit and sets limits with
 * SetComputeUnitHardLimit), its workers app_launch processes under
 * LD_PRELOAD=libcuda_limiter.so, each in a pid namespace of its own. The
 * cases run side by side (COMPUTE_JOBS at a time, default 3: they mostly
 * sleep on simulated time), each in a process of its own, then the solo
 * case (the unlimited worker against no hook), alone. A case that fails
 * side by side runs once more alone, and its verdict is that run's: the
 * simulated device and apps are CPU threads, so a runner loaded by the
 * other cases can starve them (both runs are printed, and the summary
 * counts the cases that needed the second).
 *
 * Cases, each with the fake NVML sampling every 100 ms and again every 1 s
 * (FAKE_NVML_SAMPLE_MS; real drivers: 1/6 s to 1 s):
 * - accuracy: one saturating worker with kernels of 50 µs, 2 ms, 8 ms,
 *   50 ms, and 100 ms graphs (cuGraphLaunch), at 10, 30, 50 and 80 %;
 * - fairness: 2, 3 and 8 processes of one worker (2 ms kernels), each
 *   launching as fast as allowed, unbatched and with a cuCtxSynchronize
 *   after every 4 launches;
 * - pair: 20 % of 8 ms kernels beside 60 % of 100 µs kernels;
 * - soft mode (issue 34; SetComputeUnitRequest, the sampler's scheduler):
 *   request 30 alone (no limit: ≥ 90 % in every 1 s window from 1 s;
 *   limit 60: 60), requests 30/70 and 60/90 (→ 40/60) both hungry, a
 *   request of 50 given back after idling beside a best-effort worker of
 *   two processes, a request of 70 used in bursts of 20 % donating the
 *   rest (COMPUTE_SVG=FILE: the 60/90 run at 100 ms samples as an SVG).
 * Utilization is read from the timeline: device time over wall time, in
 * windows sliding by 0.25 s. A window is as long as 40 kernels, at least
 * 0.25 s, so that one kernel more or less in it is at most 2.5 points (a
 * 100 ms graph at 10 % runs once a second: its utilization is only defined
 * over seconds; 4 s windows for it, 2 s for 50 ms kernels). Converged:
 * the first window start from which every window is within ±5 points;
 * asserted ≤ 2 s (100 ms samples) or ≤ 4 s (1 s samples).
 *
 * Usage: test_compute_cases LIBACCELERATOR HOOK APP_LAUNCH
 *        test_compute_cases --case N LIBACCELERATOR HOOK APP_LAUNCH (one case)
 * COMPUTE_CASES=N,M,... runs those cases of the table only (a rerun). */
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <sys/stat.h>

#include "compute_util.h"

#define UUID0 "GPU-11111111-1111-1111-1111-1111111111a4"
#define TICK 0.25
#define MAX_TICKS 64
#define MAX_APPS 8

enum kind { ACCURACY, FAIRNESS, PAIR, IDLE, MIXED, SOFT_ALONE, SOFT_PAIR, GIVEBACK, DONATION,
            UNLIMITED };

struct kase {
  enum kind kind;
  int percent, procs, batch, graph, nvml_ms;
  const char *kernel_us;
  double idle;
  int no; /* its number in the table */
  /* Soft mode: two workers' requests and the shares they must get. */
  int req[2], want[2];
};

#define MAX_CASES 96
static struct kase cases[MAX_CASES];
static int ncases;

static void add(struct kase k) {
  k.no = ncases;
  cases[ncases++] = k;
}

static void table(void) {
  static const char *const lengths[] = {"50", "2000", "8000", "50000"};
  static const int ps[] = {10, 30, 50, 80};
  for (int ms = 100; ms <= 1000; ms += 900) {
    for (int l = 0; l < 5; l++)
      for (int p = 0; p < 4; p++)
        add((struct kase){ACCURACY, ps[p], 1, 0, l == 4, ms, l == 4 ? "100000" : lengths[l], 0, 0, {0}, {0}});
    static const int procs[] = {2, 3, 8}, limits[] = {70, 30, 60};
    for (int n = 0; n < 3; n++)
      for (int batch = 0; batch <= 4; batch += 4)
        add((struct kase){FAIRNESS, limits[n], procs[n], batch, 0, ms, "2000", 0, 0, {0}, {0}});
    add((struct kase){PAIR, 20, 2, 0, 0, ms, "8000", 0, 0, {0}, {0}});
    add((struct kase){ACCURACY, 40, 1, 0, 1, ms, "200000", 0, 0, {0}, {0}});
    static const int idle_ps[] = {30, 30, 60};
    static const double idles[] = {1.6, 4.5, 1.6};
    for (int i = 0; i < 3; i++)
      add((struct kase){IDLE, idle_ps[i], 1, 0, 0, ms, "2000", idles[i], 0, {0}, {0}});
    add((struct kase){MIXED, 40, 2, 0, 0, ms, "500", 0, 0, {0}, {0}});
    /* Soft mode (issue 34): a request alone (no limit: the device; a
     * limit of 60: 60), two requests that fit and two that do not, a
     * request given back after idling, an idle request donated. */
    add((struct kase){SOFT_ALONE, 0, 1, .nvml_ms = ms, .kernel_us = "2000", .req = {30}, .want = {90}});
    add((struct kase){SOFT_ALONE, 60, 1, .nvml_ms = ms, .kernel_us = "2000", .req = {30}, .want = {60}});
    add((struct kase){SOFT_PAIR, 0, 2, .nvml_ms = ms, .kernel_us = "2000", .req = {30, 70}, .want = {30, 70}});
    add((struct kase){SOFT_PAIR, 0, 2, .nvml_ms = ms, .kernel_us = "2000", .req = {60, 90}, .want = {40, 60}});
    add((struct kase){GIVEBACK, 0, 3, .nvml_ms = ms, .kernel_us = "2000", .idle = 1.6, .req = {50}, .want = {45, 40}});
    add((struct kase){DONATION, 0, 2, .nvml_ms = ms, .kernel_us = "2000", .req = {70}});
  }
  add((struct kase){UNLIMITED, 0, 1, 0, 0, 100, "20", 0, 0, {0}, {0}});
}

static int (*set_compute)(const char *, const char *, uint32_t);
static int (*set_request)(const char *, const char *, uint32_t);
static const char *lib_path;
static void *acc;

/* Device time of each app at each tick from now (ns), `ticks` + 1 readings. */
static void record(const struct app *apps, int n, int ticks,
                   unsigned long long b[][MAX_TICKS + 1]) {
  unsigned long long t0 = tl_now();
  for (int k = 0; k <= ticks; k++) {
    unsigned long long at = t0 + (unsigned long long)(k * TICK * 1e9), now = tl_now();
    if (at > now)
      nap((double)(at - now) / 1e9);
    for (int i = 0; i < n; i++)
      b[i][k] = busy(apps[i].host);
  }
}

/* Utilization (%) of `b` from tick `from` over `w` ticks. */
static double util(const unsigned long long *b, int from, int w) {
  return 100.0 * (double)(b[from + w] - b[from]) / (w * TICK * 1e9);
}

/* The first window start (s) from which every window of `w` ticks up to
 * `ticks` is within ±5 of `p`; -1: none. */
static double converged(const unsigned long long *b, int ticks, int w, double p) {
  double conv = -1;
  for (int k = 0; k + w <= ticks; k++) {
    double u = util(b, k, w);
    if (fabs(u - p) > 5)
      conv = -1;
    else if (conv < 0)
      conv = k * TICK;
  }
  return conv;
}

/* Window in ticks for kernels of `kernel_ns`: 40 kernels, at least a tick. */
static int window(double kernel_ns) {
  int w = (int)ceil(40.0 * kernel_ns / 1e9 / TICK - 1e-9);
  return w < 1 ? 1 : w;
}

/* app_launch spinning for `secs` (after `warm` s of launches and `idle`
 * s without); the longest gap between its launches after `from` s goes to
 * `out`. */
static struct app start_after(const char *worker, const char *kernel_us, double secs, int batch,
                              int graph, int out, double from, double warm, double idle) {
  char s[32], b[16], f[32], wa[32], id[32];
  snprintf(s, sizeof s, "%.2f", secs);
  snprintf(b, sizeof b, "%d", batch);
  snprintf(f, sizeof f, "%.2f", from);
  snprintf(wa, sizeof wa, "%.2f", warm);
  snprintf(id, sizeof id, "%.2f", idle);
  char *const argv[] = {(char *)app, "spin", s, b, graph ? "graph" : "kernel", f, wa, id, NULL};
  return spawn_argv(worker, kernel_us, -1, out, -1, argv);
}

static struct app start(const char *worker, const char *kernel_us, double secs, int batch,
                        int graph, int out, double from) {
  return start_after(worker, kernel_us, secs, batch, graph, out, from, 0, 0);
}

/* The longest gap between two launches an app reported ("N GAP_MS"). */
static double gap_of(int fd) {
  char line[64] = {0};
  ssize_t n = read(fd, line, sizeof line - 1);
  close(fd);
  double gap = -1;
  unsigned long long launches;
  if (n <= 0 || sscanf(line, "%llu %lf", &launches, &gap) != 2)
    return -1;
  return gap;
}

/* An app that warmed up, idled, then loaded (device time per tick `b`):
 * its idle stretch's first tick without device time after the warm-up
 * (`*k0`), and the tick of its first launch after it (`*k1`; -1: none). */
static void idle_stretch(const unsigned long long *b, int ticks, int *k0, int *k1) {
  *k0 = 4, *k1 = -1;
  while (*k0 < ticks && b[*k0 + 1] != b[*k0])
    (*k0)++;
  for (int t = *k0; t < ticks && *k1 < 0; t++)
    if (b[t + 1] > b[t])
      *k1 = t;
}

/* Sum of the device time of apps [from, to) at each tick. */
static void sum_of(unsigned long long b[][MAX_TICKS + 1], int from, int to, int ticks,
                   unsigned long long *out) {
  for (int t = 0; t <= ticks; t++) {
    out[t] = 0;
    for (int i = from; i < to; i++)
      out[t] += b[i][t];
  }
}

/* The shares of a soft-mode run as an SVG (COMPUTE_SVG names the file):
 * each worker's utilization per 0.25 s on the timeline. */
static void svg(const char *title, unsigned long long b[][MAX_TICKS + 1], int n, int ticks,
                const char *const *names) {
  const char *path = getenv("COMPUTE_SVG");
  FILE *f = path && *path ? fopen(path, "w") : NULL;
  if (!f)
    return;
  static const char *const colors[] = {"#1f77b4", "#d62728", "#2ca02c"};
  const int W = 640, H = 300, L = 50, B = 40, T = 30;
  double sx = (double)(W - L - 20) / ticks, sy = (double)(H - B - T) / 100;
  fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
             "font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%%\" height=\"100%%\" "
             "fill=\"white\"/>\n<text x=\"%d\" y=\"18\">%s</text>\n", W, H, L, title);
  for (int p = 0; p <= 100; p += 25)
    fprintf(f, "<line x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/><text x=\"%d\" "
               "y=\"%.1f\" text-anchor=\"end\">%d %%</text>\n",
            L, W - 20, H - B - p * sy, H - B - p * sy, L - 5, H - B - p * sy + 4, p);
  for (int t = 0; t <= ticks; t += 4)
    fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%d s</text>\n", L + t * sx,
            H - B + 16, t / 4);
  for (int i = 0; i < n; i++) {
    fprintf(f, "<polyline fill=\"none\" stroke-width=\"2\" stroke=\"%s\" points=\"", colors[i % 3]);
    for (int t = 0; t < ticks; t++)
      fprintf(f, "%.1f,%.1f ", L + (t + 0.5) * sx, H - B - util(b[i], t, 1) * sy);
    fprintf(f, "\"/>\n<text x=\"%d\" y=\"%d\" fill=\"%s\">%s</text>\n", L + 10 + 200 * i, H - 6,
            colors[i % 3], names[i]);
  }
  fprintf(f, "</svg>\n");
  fclose(f);
}

/* The probe's view of worker `w` (PROBE: the probe; NULL: not run):
 * its granted share (bp) and the share it measured (%) from `--json`. */
static int probe_worker(const char *w, double *granted, double *share) {
  const char *probe = getenv("PROBE");
  if (!probe || !*probe)
    return 0;
  char cmd[8192], *doc = calloc(1, 1 << 16);
  snprintf(cmd, sizeof cmd, "%s --json %s", probe, lib_path);
  FILE *f = popen(cmd, "r");
  size_t n = f ? fread(doc, 1, (1 << 16) - 1, f) : 0;
  int st = f ? pclose(f) : -1;
  char key[96];
  snprintf(key, sizeof key, "\"workerId\":\"%s\"", w);
  char *at = n ? strstr(doc, key) : NULL, *g = at ? strstr(at, "\"grantedBasisPoints\":") : NULL,
       *sh = at ? strstr(at, "\"sharePercent\":") : NULL;
  int ok = st == 0 && g && sh &&
           sscanf(g, "\"grantedBasisPoints\":%lf", granted) == 1 &&
           sscanf(sh, "\"sharePercent\":%lf", share) == 1;
  free(doc);
  return ok ? 1 : -1;
}

/* Soft mode, hungry workers: one alone (request, maybe a limit) or two
 * with requests, always launching; each within ±5 of its share in every
 * 1 s window once converged (alone without a limit: at least 90 % in
 * every 1 s window from 1 s on, issue 34's "within 2 s"). */
static void soft_share(int id, const struct kase *k, const char *tag, double conv_max) {
  char w[2][32];
  int n = k->procs;
  for (int i = 0; i < n; i++) {
    snprintf(w[i], sizeof w[i], "soft%d-%d", id, i);
    CHECK(set_request(w[i], UUID0, (uint32_t)k->req[i]) == 0, "request");
  }
  if (k->percent)
    CHECK(set_compute(w[0], UUID0, (uint32_t)k->percent) == 0, "limit");
  int ticks = (int)(conv_max / TICK) + 8, from = (int)(conv_max / TICK);
  struct app a[2];
  for (int i = 0; i < n; i++)
    a[i] = start(w[i], k->kernel_us, ticks * TICK + 1.5, 0, 0, -1, 0);
  static unsigned long long b[2][MAX_TICKS + 1];
  record(a, n, ticks, b);
  /* The probe, while they still run: each worker's grant and the share
   * it measures (±10: 0.2 s of 2 ms kernels). */
  for (int i = 0; n == 2 && i < n; i++) {
    double granted = 0, share = 0;
    int r = probe_worker(w[i], &granted, &share);
    if (r == 0)
      break;
    printf("%s probe: %s granted %.0f bp, measured %.1f%%\n", tag, w[i], granted, share);
    CHECK(r == 1, "%s the probe lists %s", tag, w[i]);
    CHECK(granted > 0 && fabs(share - k->want[i]) <= 10, "%s probe: %s %.1f%% near %d", tag,
          w[i], share, k->want[i]);
  }
  for (int i = 0; i < n; i++) {
    double u = util(b[i], from, ticks - from);
    if (n == 1 && !k->percent) {
      double worst = 100;
      for (int t = 4; t + 4 <= ticks; t++)
        worst = util(b[i], t, 4) < worst ? util(b[i], t, 4) : worst;
      printf("%s request %d%% alone, no limit: %5.1f%% over %.2f s, worst 1 s window from 1 s "
             "%.1f%%\n", tag, k->req[0], u, (ticks - from) * TICK, worst);
      CHECK(worst >= k->want[0], "%s at least %d%% from 1 s (worst %.1f)", tag, k->want[0], worst);
    } else {
      /* Shares as issue 34 states them: in 1 s windows. */
      double conv = converged(b[i], ticks, 4, k->want[i]);
      char per[MAX_TICKS * 5] = "";
      for (int t = 0; t < ticks; t++)
        snprintf(per + strlen(per), sizeof per - strlen(per), " %.0f", util(b[i], t, 1));
      printf("%s request %d%%%s%s: %5.1f%% (want %d, %+5.1f); converged in %.2f s; per 0.25 s:%s\n",
             tag, k->req[i], k->percent ? ", limit 60 %" : "",
             n > 1 ? (i ? " (second)" : " (first)") : "", u, k->want[i], u - k->want[i], conv, per);
      CHECK(conv >= 0 && conv <= conv_max, "%s converged (%.2f)", tag, conv);
      CHECK(fabs(u - k->want[i]) <= 5, "%s %.1f%% within ±5 of %d", tag, u, k->want[i]);
    }
  }
  if (n == 2 && k->req[1] == 90) {
    static const char *const names[] = {"request 60 %", "request 90 %"};
    char title[96];
    snprintf(title, sizeof title, "Two hungry workers, requests 60 %% and 90 %% (NVML every %d ms)",
             k->nvml_ms);
    if (k->nvml_ms == 100)
      svg(title, b, 2, ticks, names);
  }
  for (int i = 0; i < n; i++)
    CHECK(wait_status(a[i].harness) == 0, "%s app", tag);
}

/* Give-back: a best-effort worker of two processes fills the device; a
 * worker with request 50 warms up 2 s, idles, then loads: from 1 s after
 * its first launch it has ≥ 45 % in every 1 s window, the best-effort
 * worker ≥ 40 %. */
static void give_back(int id, const struct kase *k, const char *tag) {
  char w[2][32];
  snprintf(w[0], sizeof w[0], "back%d-req", id);
  snprintf(w[1], sizeof w[1], "back%d-be", id);
  /* The host names its best-effort worker (request 0): a worker it never
   * named has no books, and its launches are not the limiter's. */
  CHECK(set_request(w[0], UUID0, (uint32_t)k->req[0]) == 0 && set_request(w[1], UUID0, 0) == 0,
        "requests");
  int ticks = (int)((2.0 + k->idle + 5.0) / TICK);
  double secs = ticks * TICK + 0.5;
  struct app a[3] = {start_after(w[0], k->kernel_us, 5.0, 0, 0, -1, 0, 2.0, k->idle),
                     start(w[1], k->kernel_us, secs, 0, 0, -1, 0),
                     start(w[1], k->kernel_us, secs, 0, 0, -1, 0)};
  static unsigned long long b[3][MAX_TICKS + 1], be[MAX_TICKS + 1];
  record(a, 3, ticks, b);
  sum_of(b, 1, 3, ticks, be);
  int k0, k1;
  idle_stretch(b[0], ticks, &k0, &k1);
  double lo = 100, lo_be = 100;
  for (int t = k1 + 4; k1 >= 0 && t + 4 <= ticks && t + 4 <= k1 + 20; t++) {
    lo = util(b[0], t, 4) < lo ? util(b[0], t, 4) : lo;
    lo_be = util(be, t, 4) < lo_be ? util(be, t, 4) : lo_be;
  }
  char per[MAX_TICKS * 10] = "";
  for (int t = 0; t < ticks; t++)
    snprintf(per + strlen(per), sizeof per - strlen(per), " %.0f/%.0f", util(b[0], t, 1),
             util(be, t, 1));
  printf("%s give-back: request 50 after %.1f s idle (load from %.2f s) beside a best-effort "
         "worker of 2 processes: worst 1 s window from 1 s after its first launch %.1f%%, the "
         "best-effort worker's %.1f%%; per 0.25 s (request/best-effort):%s\n",
         tag, k->idle, k1 * TICK, lo, lo_be, per);
  CHECK(k1 > k0, "%s an idle stretch, then load", tag);
  CHECK(lo >= k->want[0], "%s request 50: every 1 s window ≥ %d (%.1f)", tag, k->want[0], lo);
  CHECK(lo_be >= k->want[1], "%s best-effort: every 1 s window ≥ %d (%.1f)", tag, k->want[1], lo_be);
  for (int i = 0; i < 3; i++)
    CHECK(wait_status(a[i].harness) == 0, "%s app", tag);
}

/* Idle donation: a worker with request 70 answering in bursts (10 × 2 ms
 * every 100 ms: 20 %) alone for 3 s, then beside a hungry best-effort
 * worker: it loses ≤ 5 % of its throughput (device time, and no burst
 * late), the best-effort worker gets ≥ 90 % of the rest. */
static void donation(int id, const struct kase *k, const char *tag, double conv_max) {
  char w[2][32];
  snprintf(w[0], sizeof w[0], "don%d-req", id);
  snprintf(w[1], sizeof w[1], "don%d-be", id);
  CHECK(set_request(w[0], UUID0, (uint32_t)k->req[0]) == 0 && set_request(w[1], UUID0, 0) == 0,
        "requests");
  int with = 12, from = with + (int)(conv_max / TICK), ticks = from + 8;
  int out[2];
  CHECK(pipe(out) == 0, "pipe");
  char secs[32];
  snprintf(secs, sizeof secs, "%.2f", ticks * TICK + 0.25);
  char *const argv[] = {(char *)app, "bursts", secs, "100", "10", NULL};
  struct app a[2];
  a[0] = spawn_argv(w[0], k->kernel_us, -1, out[1], -1, argv);
  close(out[1]);
  static unsigned long long b[2][MAX_TICKS + 1];
  /* As record(), the best-effort worker started at tick `with`. */
  unsigned long long t0 = tl_now();
  a[1].host = -1;
  for (int t = 0; t <= ticks; t++) {
    unsigned long long at = t0 + (unsigned long long)(t * TICK * 1e9), now = tl_now();
    if (at > now)
      nap((double)(at - now) / 1e9);
    if (t == with)
      a[1] = start(w[1], k->kernel_us, (ticks - with) * TICK + 0.5, 0, 0, -1, 0);
    b[0][t] = busy(a[0].host);
    b[1][t] = a[1].host > 0 ? busy(a[1].host) : 0;
  }
  double alone = util(b[0], 4, with - 4), beside = util(b[0], from, ticks - from);
  double be = util(b[1], from, ticks - from), left = 100 - beside;
  char line[64] = {0};
  ssize_t r = read(out[0], line, sizeof line - 1);
  close(out[0]);
  unsigned long long bursts = 0, late = 0;
  CHECK(r > 0 && sscanf(line, "%llu %llu", &bursts, &late) == 2, "%s bursts reported", tag);
  printf("%s idle donation: request 70 in bursts (20 %%): alone %.1f%%, beside a hungry "
         "best-effort worker %.1f%% (%+.1f %%), %llu bursts, %llu late; best-effort %.1f%% of the "
         "%.1f%% left (%.0f %%)\n",
         tag, alone, beside, (beside / alone - 1) * 100, bursts, late, be, left, be / left * 100);
  CHECK(beside >= alone * 0.95, "%s throughput kept within 5 %% (%.1f vs %.1f)", tag, beside, alone);
  CHECK(be >= 0.9 * left, "%s best-effort ≥ 90 %% of the rest (%.1f of %.1f)", tag, be, left);
  for (int i = 0; i < 2; i++)
    CHECK(wait_status(a[i].harness) == 0, "%s app", tag);
}

static void run_case(int id, const struct kase *k) {
  char w[MAX_APPS][32], tag[96];
  double conv_max = k->nvml_ms >= 1000 ? 4.0 : 2.0;
  double kernel_ns = atof(k->kernel_us) * 1e3;
  snprintf(tag, sizeof tag, "case %2d, samples every %4d ms:", k->no, k->nvml_ms);
  if (k->kind == ACCURACY) {
    snprintf(w[0], sizeof w[0], "acc%d", id);
    CHECK(set_compute(w[0], UUID0, (uint32_t)k->percent) == 0, "limit");
    int win = window(kernel_ns), ticks = (int)(conv_max / TICK) + (win > 6 ? win : 6);
    double secs = ticks * TICK;
    struct app a = start(w[0], k->kernel_us, secs + 0.5, 0, k->graph, -1, 0);
    static unsigned long long b[1][MAX_TICKS + 1];
    record(&a, 1, ticks, b);
    int from = (int)(conv_max / TICK);
    double conv = converged(b[0], ticks, win, k->percent);
    double u = util(b[0], from, ticks - from);
    printf("%s %s of %6.2f ms at %2d%%: %5.1f%% (%+5.1f) over %.2f s; converged in %.2f s "
           "(windows of %.2f s)\n",
           tag, k->graph ? "graphs " : "kernels", kernel_ns / 1e6, k->percent, u, u - k->percent,
           secs - conv_max, conv, win * TICK);
    CHECK(conv >= 0 && conv <= conv_max, "%s converged within %.0f s (%.2f)", tag, conv_max, conv);
    CHECK(fabs(u - k->percent) <= 5, "%s %.1f%% within ±5 of %d", tag, u, k->percent);
    CHECK(wait_status(a.harness) == 0, "%s app", tag);
  } else if (k->kind == FAIRNESS) {
    snprintf(w[0], sizeof w[0], "fair%d", id);
    CHECK(set_compute(w[0], UUID0, (uint32_t)k->percent) == 0, "limit");
    int ticks = (int)(conv_max / TICK) + 8, from = (int)(conv_max / TICK);
    struct app a[MAX_APPS];
    int out[MAX_APPS][2];
    for (int i = 0; i < k->procs; i++) {
      CHECK(pipe(out[i]) == 0, "pipe");
      a[i] = start(w[0], k->kernel_us, ticks * TICK + 0.5, k->batch, 0, out[i][1], conv_max);
      close(out[i][1]);
    }
    static unsigned long long b[MAX_APPS][MAX_TICKS + 1];
    record(a, k->procs, ticks, b);
    /* Every 1 s window after convergence: the spread between processes. */
    double spread = 0, lo = 100, hi = 0, total = 0, gap = 0;
    for (int t = from; t + 4 <= ticks; t++) {
      double mn = 100, mx = 0;
      for (int i = 0; i < k->procs; i++) {
        double u = util(b[i], t, 4);
        mn = u < mn ? u : mn;
        mx = u > mx ? u : mx;
      }
      spread = mx - mn > spread ? mx - mn : spread;
    }
    for (int i = 0; i < k->procs; i++) {
      double u = util(b[i], from, ticks - from);
      total += u;
      lo = u < lo ? u : lo;
      hi = u > hi ? u : hi;
      double g = gap_of(out[i][0]);
      gap = g > gap ? g : gap;
      CHECK(wait_status(a[i].harness) == 0, "%s app %d", tag, i);
    }
    printf("%s %d processes of one worker at %d%% (%s): %5.1f%% in all, each %.1f-%.1f%%, "
           "largest spread in a 1 s window %.1f points, longest wait %.1f ms\n",
           tag, k->procs, k->percent, k->batch ? "synchronize every 4 launches" : "unbatched",
           total, lo, hi, spread, gap);
    CHECK(fabs(total - k->percent) <= 5, "%s the worker's total %.1f%%", tag, total);
    CHECK(spread <= 5, "%s shares within ±5 points of each other (%.1f)", tag, spread);
    /* Once converged, 2 refill periods: twice the bucket's 100 ms window. */
    CHECK(gap >= 0 && gap <= 200, "%s no process waits more than 200 ms (%.1f)", tag, gap);
  } else if (k->kind == PAIR) {
    snprintf(w[0], sizeof w[0], "pair%d-20", id);
    snprintf(w[1], sizeof w[1], "pair%d-60", id);
    CHECK(set_compute(w[0], UUID0, 20) == 0 && set_compute(w[1], UUID0, 60) == 0, "limits");
    int win = window(kernel_ns), ticks = (int)(conv_max / TICK) + 6;
    int from = (int)(conv_max / TICK);
    struct app a[2] = {start(w[0], k->kernel_us, ticks * TICK + 0.5, 0, 0, -1, 0),
                       start(w[1], "100", ticks * TICK + 0.5, 0, 0, -1, 0)};
    static unsigned long long b[2][MAX_TICKS + 1];
    record(a, 2, ticks, b);
    const int ps[] = {20, 60};
    for (int i = 0; i < 2; i++) {
      double conv = converged(b[i], ticks, win, ps[i]), u = util(b[i], from, ticks - from);
      printf("%s two workers: %d%% of %s kernels: %5.1f%% (%+5.1f); converged in %.2f s\n", tag,
             ps[i], i ? "0.1 ms" : "8 ms", u, u - ps[i], conv);
      CHECK(conv >= 0 && conv <= conv_max, "%s converged (%.2f)", tag, conv);
      CHECK(fabs(u - ps[i]) <= 5, "%s %.1f%% within ±5 of %d", tag, u, ps[i]);
      CHECK(wait_status(a[i].harness) == 0, "%s app", tag);
    }
  } else if (k->kind == IDLE) {
    /* Warmed up 2 s, idle, then loaded: every 1 s window from 1 s after
     * its first launch after the idle stretch within ±5 of the limit
     * (issue 34: 2-6 % at 30 % for 2.2 s after 1.6 s idle). */
    snprintf(w[0], sizeof w[0], "idle%d", id);
    CHECK(set_compute(w[0], UUID0, (uint32_t)k->percent) == 0, "limit");
    int ticks = (int)((2.0 + k->idle + 5.0) / TICK);
    struct app a = start_after(w[0], k->kernel_us, 5.5, 0, 0, -1, 0, 2.0, k->idle);
    static unsigned long long b[1][MAX_TICKS + 1];
    record(&a, 1, ticks, b);
    int k0, k1;
    idle_stretch(b[0], ticks, &k0, &k1);
    double worst = k->percent, first = -1;
    /* The load's first 4.5 s. */
    for (int t = k1 + 1; k1 >= 0 && t + 4 <= ticks && t + 4 <= k1 + 19; t++) {
      double u = util(b[0], t, 4);
      if (first < 0)
        first = u;
      if (t >= k1 + 5 && fabs(u - k->percent) > fabs(worst - k->percent))
        worst = u;
    }
    /* The device time of each tick, for a failure's reader. */
    char per[MAX_TICKS * 5] = "";
    for (int t = 0; t < ticks; t++)
      snprintf(per + strlen(per), sizeof per - strlen(per), " %.0f", util(b[0], t, 1));
    printf("%s %d%% after %.1f s idle: idle from %.2f s, load from %.2f s; first 1 s window "
           "%.1f%%, worst 1 s window from 1 s after the first launch %.1f%% (%+.1f); per 0.25 s:%s\n",
           tag, k->percent, k->idle, k0 * TICK, k1 * TICK, first, worst, worst - k->percent, per);
    CHECK(k1 > k0 && (k1 - k0) * TICK >= k->idle - 0.5, "%s an idle stretch, then load", tag);
    CHECK(fabs(worst - k->percent) <= 5, "%s every 1 s window from 1 s after the load within "
          "±5 of %d (worst %.1f)", tag, k->percent, worst);
    CHECK(wait_status(a.harness) == 0, "%s app", tag);
  } else if (k->kind == MIXED) {
    /* One worker, a process of 0.5 ms kernels beside one of 8 ms: each
     * gets half the limit's device time (issue 34: 2.3 % and 37.3 %). */
    snprintf(w[0], sizeof w[0], "mixed%d", id);
    CHECK(set_compute(w[0], UUID0, (uint32_t)k->percent) == 0, "limit");
    int ticks = (int)(conv_max / TICK) + 8, from = (int)(conv_max / TICK);
    struct app a[2] = {start(w[0], k->kernel_us, ticks * TICK + 0.5, 0, 0, -1, 0),
                       start(w[0], "8000", ticks * TICK + 0.5, 0, 0, -1, 0)};
    static unsigned long long b[2][MAX_TICKS + 1];
    record(a, 2, ticks, b);
    double u[2], half = k->percent / 2.0;
    for (int i = 0; i < 2; i++)
      u[i] = util(b[i], from, ticks - from);
    printf("%s one worker at %d%%: a process of 0.5 ms kernels %5.1f%%, one of 8 ms kernels "
           "%5.1f%% (each %.0f%% by device time)\n",
           tag, k->percent, u[0], u[1], half);
    for (int i = 0; i < 2; i++) {
      CHECK(fabs(u[i] - half) <= 5, "%s process %d: %.1f%% within ±5 of %.0f", tag, i, u[i], half);
      CHECK(wait_status(a[i].harness) == 0, "%s app", tag);
    }
  } else if (k->kind == SOFT_ALONE || k->kind == SOFT_PAIR) {
    soft_share(id, k, tag, conv_max);
  } else if (k->kind == GIVEBACK) {
    give_back(id, k, tag);
  } else if (k->kind == DONATION) {
    donation(id, k, tag, conv_max);
  } else {
    /* A worker without a compute limit (its books exist: it has a memory
     * limit) against the same program without the hook, alone on the
     * device in turns, twice each: the device time each got. */
    int (*set_mem)(const char *, const char *, uint64_t) =
        (int (*)(const char *, const char *, uint64_t))dlsym(acc, "SetMemHardLimit");
    snprintf(w[0], sizeof w[0], "free%d", id);
    CHECK(set_mem && set_mem(w[0], UUID0, 1ULL << 30) == 0, "memory limit");
    double got[2] = {0, 0};
    for (int round = 0; round < 4; round++) {
      int hooked = round % 2 == 0;
      struct app a = start(hooked ? w[0] : NULL, k->kernel_us, 2.0, 0, 0, -1, 0);
      nap(0.25);
      static unsigned long long b[1][MAX_TICKS + 1];
      record(&a, 1, 6, b);
      got[hooked] += util(b[0], 0, 6);
      CHECK(wait_status(a.harness) == 0, "%s app", tag);
    }
    double ratio = got[1] / got[0];
    printf("%s an unlimited worker (20 us kernels): hooked %.2f%%, not hooked %.2f%% of the "
           "device: ratio %.4f\n",
           tag, got[1] / 2, got[0] / 2, ratio);
    CHECK(ratio >= 0.99, "%s the unlimited worker within 1 %% of no hook (%.4f)", tag, ratio);
  }
}

/* One case in this process: its own node (state directory, timeline). */
static int case_main(int id, const char *lib) {
  lib_path = lib;
  acc = dlopen(lib, RTLD_NOW | RTLD_GLOBAL);
  int (*init)(void) = acc ? (int (*)(void))dlsym(acc, "AccelInit") : NULL;
  set_compute =
      acc ? (int (*)(const char *, const char *, uint32_t))dlsym(acc, "SetComputeUnitHardLimit")
          : NULL;
  set_request =
      acc ? (int (*)(const char *, const char *, uint32_t))dlsym(acc, "SetComputeUnitRequest")
          : NULL;
  tl = tl_map();
  if (!init || !set_compute || !set_request || !tl || init() != 0) {
    printf("case %d: setup failed\n", id);
    return 2;
  }
  run_case(id, &cases[id]);
  return test_summary() ? 1 : 0;
}

/* A case's process (its `attempt`-th run): its own state directory and
 * timeline; its output in `out` (read when it ends). */
static pid_t launch_case(int id, int attempt, const char *self, char **argv, int out) {
  fflush(NULL);
  pid_t pid = fork();
  if (pid != 0)
    return pid;
  char dir[2048], tlp[4096], ms[16], n[16];
  snprintf(dir, sizeof dir, "%s/cases", getenv("ACCELERATOR_STATE_DIR"));
  mkdir(dir, 0700);
  snprintf(dir, sizeof dir, "%s/cases/%d.%d", getenv("ACCELERATOR_STATE_DIR"), id, attempt);
  mkdir(dir, 0700);
  snprintf(tlp, sizeof tlp, "%s/timeline", dir);
  unlink(tlp);
  snprintf(ms, sizeof ms, "%d", cases[id].nvml_ms);
  snprintf(n, sizeof n, "%d", id);
  setenv("ACCELERATOR_STATE_DIR", dir, 1);
  setenv("FAKE_GPU_TIMELINE", tlp, 1);
  setenv("FAKE_NVML_SAMPLE_MS", ms, 1);
  /* A driver's queue holds 1,024 launches: 20 ms here (at most 256 of a
   * process), so that a simulated app on a loaded 2-core runner need not
   * wake every 2 ms to keep its device busy. */
  setenv("FAKE_QUEUE_US", "20000", 1);
  /* A synchronize waits for the process's kernels. */
  setenv("FAKE_SYNC_WAITS", "1", 1);
  if (cases[id].graph)
    setenv("FAKE_GRAPH_US", cases[id].kernel_us, 1);
  dup2(out, 1);
  /* A case that has not ended in 60 s has hung: it fails (its apps end
   * themselves 30 s past their time). */
  alarm(60);
  execl(self, self, "--case", n, argv[1], argv[2], argv[3], (char *)NULL);
  _exit(127);
}

int main(int argc, char **argv) {
  table();
  /* COMPUTE_CASES=N,M,...: those cases only (a rerun of some). */
  const char *only = getenv("COMPUTE_CASES");
  if (only && *only) {
    static struct kase all[MAX_CASES];
    memcpy(all, cases, sizeof all);
    int n = 0;
    for (const char *c = only; *c && n < MAX_CASES;) {
      char *e;
      long id = strtol(c, &e, 10);
      if (e == c || id < 0 || id >= ncases)
        return 2;
      cases[n++] = all[id];
      c = *e == ',' ? e + 1 : e;
    }
    ncases = n;
  }
  if (argc == 6 && strcmp(argv[1], "--case") == 0) {
    hook = argv[4];
    app = argv[5];
    int id = atoi(argv[2]);
    return id >= 0 && id < ncases ? case_main(id, argv[3]) : 2;
  }
  if (argc != 4 || !getenv("ACCELERATOR_STATE_DIR")) {
    fprintf(stderr, "usage: %s LIBACCELERATOR HOOK APP_LAUNCH (ACCELERATOR_STATE_DIR set)\n",
            argv[0]);
    return 2;
  }
  static char self[4096];
  if (readlink("/proc/self/exe", self, sizeof self - 1) <= 0)
    return 2;
  const char *j = getenv("COMPUTE_JOBS");
  int jobs = j && atoi(j) > 0 ? atoi(j) : 3;
  pid_t pids[MAX_CASES];
  int outs[MAX_CASES], running = 0, next = 0, failed = 0, retry[MAX_CASES], nretry = 0;
  unsigned long long t0 = tl_now();
  while (next < ncases || running) {
    /* The unlimited case runs alone, after the others. */
    int solo = next < ncases && cases[next].kind == UNLIMITED;
    while (next < ncases && running < jobs && !(solo && running)) {
      char path[] = "/tmp/test_compute_case.XXXXXX";
      outs[next] = mkstemp(path);
      unlink(path);
      pids[next] = launch_case(next, 1, self, argv, outs[next]);
      next++, running++;
      if (solo)
        break;
      solo = next < ncases && cases[next].kind == UNLIMITED;
    }
    int st;
    pid_t done = wait(&st);
    if (done < 0)
      break;
    for (int i = 0; i < next; i++) {
      if (pids[i] != done)
        continue;
      running--;
      char text[8192] = {0};
      ssize_t n = pread(outs[i], text, sizeof text - 1, 0);
      close(outs[i]);
      int ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
      if (!ok)
        retry[nretry++] = i;
      printf("%s%s", n > 0 ? text : "", ok ? "" : "  ^ FAILED side by side: runs again alone\n");
      fflush(stdout);
    }
  }
  for (int r = 0; r < nretry; r++) {
    int i = retry[r], st;
    char path[] = "/tmp/test_compute_case.XXXXXX";
    int out = mkstemp(path);
    unlink(path);
    pid_t pid = launch_case(i, 2, self, argv, out);
    int ok = waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0;
    char text[8192] = {0};
    ssize_t n = pread(out, text, sizeof text - 1, 0);
    close(out);
    failed += !ok;
    printf("%s%s", n > 0 ? text : "", ok ? "  ^ passed alone\n" : "  ^ FAILED alone too\n");
    fflush(stdout);
  }
  printf("compute cases: %d run, %d failed (%d run again alone), %.1f s\n", ncases, failed,
         nretry, (double)(tl_now() - t0) / 1e9);
  return failed ? 1 : 0;
}

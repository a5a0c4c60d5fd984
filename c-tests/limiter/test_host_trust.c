/* The host against a tenant's books (issue 23): every value the host reads
 * from a worker's books is checked before use.
 *
 * - A forged usage word naming process slot >= 2048 (the tag has 12 bits,
 *   the table 2,048 slots): limiterGetWorkerUsage refuses with
 *   RESULT_ERROR_OPERATION_FAILED and a reason naming the slot, every time,
 *   never RESULT_ERROR_INTERNAL (a panic caught at the boundary).
 * - A fuzz over the books' content from the host's side: words at random
 *   offsets of the header, device table, usage words and the first slots
 *   set to random values (and random bits flipped), then the host's calls
 *   on that worker (its usage, AddWorkerProcess for its live process, the
 *   per-process memory and compute reports). Every call returns a
 *   documented code, none RESULT_ERROR_INTERNAL; built with
 *   -fsanitize=address,undefined (`make test-books-fuzz`).
 *
 * - Host reports trust only what the host can prove: a slot forged in worker
 *   A's books naming worker B's process (one that set its worker id with
 *   setenv, so its starting environment names no worker) with 99,999,999
 *   bytes, or naming the host itself, is not reported; B's process is
 *   listed once, with B's 3,000,000 bytes; A's own slot forged to
 *   99,999,999 bytes is reported at most at A's 1 MiB limit.
 * - One worker's books cannot delay calls about another: worker A's usage
 *   word forged to name a dead process's op that never settles, so every
 *   host call that reclaims in A's books waits out its 2 s budget; while a
 *   thread keeps querying A, worker B's usage query + AddWorkerProcess stay
 *   within 10 ms (and 20x the same run's baseline); main queues them behind
 *   A's calls (seconds). Four queries on A at once are each refused within
 *   twice the budget (it counts from each call's start, the wait behind
 *   the others included).
 * - limits.shm truncated under a running host and a running client (last:
 *   it leaves the file cut): neither dies of SIGBUS. The host's calls on
 *   the limits (a hard limit, a freeze, a usage query) are refused with an
 *   error saying the file was truncated; the client goes on, with no
 *   limits (it fails open, docs/hypervisor.md), and says so on stderr.
 *
 * The worker's client is a separate process (this program run as
 * "client"), so the host maps its books as another worker's.
 *
 * Usage: test_host_trust build/liblimiter.so build/libaccelerator.so [rounds] */
#include "accelerator.h"
#include "limiter.h"
#include "../test_util.h"
#include "limiter_load.h"
#include "../ns_util.h"

#include <errno.h>
#include <pthread.h>
#include <time.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define DEV0 "stub-device-0"
#define MAGIC_BYTES 1234567ULL
#define NAMED_BIT (1ULL << 43)
#define MAX_BYTES (NAMED_BIT - 1)

static char books[PATH_MAX + 64];

/* A client of $ACCELERATOR_WORKER_ID: records `bytes` on DEV0, says "r",
 * and lives until its stdin closes; with `busy`, allocating and freeing
 * 4 KiB meanwhile (exit status: the calls that failed, capped). */
static int client(const char *lib, long long bytes, int busy) {
  limiter_load(lib, NULL);
  char self[32], b;
  snprintf(self, sizeof self, "%d", (int)getpid());
  MemoryOpRecord r;
  if (L.mem(self, DEV0, bytes, &r) != RESULT_SUCCESS || r.shouldBlock)
    return 1;
  if (write(1, "r", 1) != 1)
    return 1;
  int bad = 0;
  if (busy)
    fcntl(0, F_SETFL, O_NONBLOCK);
  for (;;) {
    ssize_t n = read(0, &b, 1);
    if (n == 0 || (n < 0 && errno != EAGAIN))
      break;
    if (busy) {
      bad += L.mem(self, DEV0, 4096, &r) != RESULT_SUCCESS || r.shouldBlock;
      bad += L.mem(self, DEV0, -4096, &r) != RESULT_SUCCESS;
      usleep(200);
    }
  }
  return bad > 100 ? 100 : bad;
}

/* Start a client of `worker` recording `bytes`; its pid, and the fd whose
 * close ends it. */
static pid_t start_client_as(const char *self_exe, const char *lib, const char *worker, long long bytes, int busy,
                             int *stop) {
  int in[2], out[2];
  if (pipe(in) || pipe(out))
    return -1;
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    setenv("ACCELERATOR_WORKER_ID", worker, 1);
    dup2(in[0], 0);
    dup2(out[1], 1);
    close(in[1]);
    close(out[0]);
    char b[32];
    snprintf(b, sizeof b, "%lld", bytes);
    if (busy == 2) { /* its worker set with setenv after it started */
      unsetenv("ACCELERATOR_WORKER_ID");
      execl(self_exe, self_exe, "late-client", lib, b, worker, (char *)NULL);
    }
    execl(self_exe, self_exe, busy ? "busy-client" : "client", lib, b, (char *)NULL);
    _exit(127);
  }
  close(in[0]);
  close(out[1]);
  char b = 0;
  if (read(out[0], &b, 1) != 1 || b != 'r') {
    close(out[0]);
    return -1;
  }
  close(out[0]);
  *stop = in[1];
  return pid;
}

/* Start time (clock ticks since boot) of process `pid`. */
static unsigned long long start_of_pid(pid_t pid) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  return start_of(path);
}

/* In the books at `path`: the live slot of process `pid` (its state word
 * pid << 2 | LIVE followed by its start time, 64-byte aligned) rewritten to
 * name process `as` (start time `as_start`), and its held word of `bytes`
 * set to `forged` bytes. 0: done. */
static int forge_slot(const char *path, pid_t pid, uint64_t bytes, pid_t as, unsigned long long as_start,
                      uint64_t forged) {
  int fd = open(path, O_RDWR);
  struct stat sb;
  if (fd < 0 || fstat(fd, &sb) != 0)
    return 1;
  size_t n = (size_t)sb.st_size / 8;
  uint64_t *w = malloc(n * 8);
  int rc = 2;
  if (w && pread(fd, w, n * 8, 0) == (ssize_t)(n * 8))
    for (size_t i = 0; i + 64 < n; i += 8) {
      if (w[i] != ((uint64_t)pid << 2 | 2) || w[i + 1] != start_of_pid(pid))
        continue;
      uint64_t word[2] = {(uint64_t)as << 2 | 2, as_start};
      rc = pwrite(fd, word, 16, (off_t)(i * 8)) == 16 ? 3 : 4;
      for (size_t h = i + 5; rc == 3 && h < i + 64; h++) /* held[]: bytes | seq << 48 */
        if ((w[h] & 0xffffffffffffULL) == bytes) {
          uint64_t f = (w[h] & ~0xffffffffffffULL) | forged;
          rc = pwrite(fd, &f, 8, (off_t)(h * 8)) == 8 ? 0 : 5;
        }
      break;
    }
  free(w);
  close(fd);
  return rc;
}

static pid_t start_client(const char *self_exe, const char *lib, const char *worker, long long bytes, int *stop) {
  return start_client_as(self_exe, lib, worker, bytes, 0, stop);
}

/* The offset of the usage word that records `bytes` on DEV0 (found by
 * content: the layout is the library's to change), -1 if none. */
static off_t find_usage_word(int fd, uint64_t bytes, uint64_t *word) {
  struct stat sb;
  if (fstat(fd, &sb) != 0)
    return -1;
  size_t n = (size_t)sb.st_size / 8;
  uint64_t *w = malloc(n * 8);
  off_t at = -1;
  if (w && pread(fd, w, n * 8, 0) == (ssize_t)(n * 8))
    for (size_t i = 0; i < n; i += 8) /* 64-byte aligned lines */
      if ((w[i] & MAX_BYTES) == bytes && (w[i] & NAMED_BIT)) {
        at = (off_t)(i * 8);
        *word = w[i];
        break;
      }
  free(w);
  return at;
}

/* A dead process of `worker` (SIGKILLed holding 4096 bytes): the host's
 * next usage query reclaims it. */
static void dead_client(const char *self_exe, const char *lib, const char *worker) {
  int stop = -1;
  pid_t d = start_client(self_exe, lib, worker, 4096, &stop);
  CHECK(d > 0, "a second client of %s starts", worker);
  if (d > 0) {
    kill(d, SIGKILL);
    waitpid(d, NULL, 0);
    close(stop);
  }
}

/* A usage word naming slot 3000: refused with its reason, never a panic;
 * with a dead process to reclaim too (the reclaimer settles the word). */
static void test_forged_slot(const char *self_exe, const char *lib) {
  int stop = -1;
  pid_t c = start_client(self_exe, lib, "forged-w", (long long)MAGIC_BYTES, &stop);
  CHECK(c > 0, "a client of worker forged-w starts");
  if (c <= 0)
    return;
  uint64_t u = 0, lim = 0;
  EXPECT_RC_WITH(L.lastError, L.usage("forged-w", DEV0, &u, &lim), RESULT_SUCCESS);
  CHECK(u == MAGIC_BYTES, "the host reads the worker's usage (%llu)", (unsigned long long)u);
  snprintf(books, sizeof books, "%s/workers/forged-w/limiter.shm", getenv("ACCELERATOR_STATE_DIR"));
  int fd = open(books, O_RDWR);
  uint64_t w = 0;
  off_t at = fd >= 0 ? find_usage_word(fd, MAGIC_BYTES, &w) : -1;
  CHECK(at >= 0, "the usage word is found in %s", books);
  uint64_t forged = (w & ~(0xfffULL << 44)) | 3000ULL << 44;
  CHECK(at >= 0 && pwrite(fd, &forged, 8, at) == 8, "forge it to name slot 3000");
  int internal = 0, refused = 0;
  for (int i = 0; i < 100; i++) {
    int rc = L.usage("forged-w", DEV0, &u, &lim);
    internal += rc == RESULT_ERROR_INTERNAL;
    refused += rc == RESULT_ERROR_OPERATION_FAILED && strstr(L.lastError(), "slot 3000") &&
               strstr(L.lastError(), "forged-w");
  }
  CHECK(internal == 0 && refused == 100,
        "100 usage queries on the forged word: %d refused naming the slot, %d internal errors (%s)", refused,
        internal, L.lastError());
  /* A dead process to reclaim: the query's sweep frees its bytes through
   * the usage protocol, which meets the forged word first. */
  if (at >= 0)
    CHECK(pwrite(fd, &w, 8, at) == 8, "put the word back");
  dead_client(self_exe, lib, "forged-w");
  at = fd >= 0 ? find_usage_word(fd, MAGIC_BYTES + 4096, &w) : -1;
  forged = (w & ~(0xfffULL << 44)) | 3000ULL << 44;
  CHECK(at >= 0 && pwrite(fd, &forged, 8, at) == 8, "forge the word again");
  int rc = L.usage("forged-w", DEV0, &u, &lim);
  CHECK(rc == RESULT_SUCCESS || (rc == RESULT_ERROR_OPERATION_FAILED && strstr(L.lastError(), "slot 3000")),
        "a usage query that reclaims a dead process past the forged word: served or refused with its reason "
        "(%d: %s)",
        rc, L.lastError());
  if (at >= 0)
    CHECK(pwrite(fd, &w, 8, at) == 8, "put the word back");
  EXPECT_RC_WITH(L.lastError, L.usage("forged-w", DEV0, &u, &lim), RESULT_SUCCESS);
  if (fd >= 0)
    close(fd);
  close(stop);
  waitpid(c, NULL, 0);
}

static uint64_t rng = 0x9e3779b97f4a7c15ULL;
static uint64_t next(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}

static int documented(int rc) {
  return rc == RESULT_SUCCESS || rc == RESULT_ERROR_NOT_FOUND || rc == RESULT_ERROR_OPERATION_FAILED ||
         rc == RESULT_ERROR_RESOURCE_EXHAUSTED || rc == RESULT_ERROR_INVALID_PARAM;
}

/* Random content in the first `span` bytes of a live worker's books, then
 * the host's calls on it; the books are put back after each round. */
static void test_fuzz(const char *self_exe, const char *lib, int rounds) {
  int stop = -1;
  pid_t c = start_client(self_exe, lib, "fuzz-w", (long long)MAGIC_BYTES, &stop);
  CHECK(c > 0, "a client of worker fuzz-w starts");
  if (c <= 0)
    return;
  char pid_c[32];
  snprintf(pid_c, sizeof pid_c, "%d", (int)c);
  snprintf(books, sizeof books, "%s/workers/fuzz-w/limiter.shm", getenv("ACCELERATOR_STATE_DIR"));
  int fd = open(books, O_RDWR);
  uint64_t w = 0;
  off_t usage_at = fd >= 0 ? find_usage_word(fd, MAGIC_BYTES, &w) : -1;
  CHECK(usage_at >= 0, "the usage word is found");
  if (usage_at < 0)
    return;
  /* A dead process too: each round's first query reclaims it (the copy
   * put back after each round brings it back). */
  dead_client(self_exe, lib, "fuzz-w");
  /* Header, device table, usage words and the first 8 slots (the client's
   * is the first). */
  size_t span = (size_t)usage_at + 64 * 64 + 8 * 4096;
  uint8_t *pristine = malloc(span);
  CHECK(pristine && pread(fd, pristine, span, 0) == (ssize_t)span, "keep the books' first %zu bytes", span);
  static MemoryUtilization mu[4096];
  static ComputeUtilization cu[4096];
  long calls = 0, bad = 0, internal = 0;
  for (int r = 0; r < rounds; r++) {
    int edits = 1 + (int)(next() % 8);
    for (int e = 0; e < edits; e++) {
      /* Half the edits hit the usage line, the rest anywhere in the span. */
      off_t at = next() % 2 ? usage_at + (off_t)(next() % 8) * 8 : (off_t)(next() % (span / 8)) * 8;
      uint64_t v = 0;
      if (pread(fd, &v, 8, at) != 8)
        break;
      switch (next() % 4) {
      case 0: v = next(); break;                     /* any word */
      case 1: v ^= 1ULL << (next() % 64); break;     /* one bit */
      case 2: v = next() & 0xffff; break;            /* a small number */
      default: v |= 0xfffULL << 44 | NAMED_BIT; break; /* a named high slot */
      }
      if (pwrite(fd, &v, 8, at) != 8)
        break;
    }
    uint64_t u = 0, lim = 0;
    size_t n = 0;
    int rcs[4] = {
        L.usage("fuzz-w", DEV0, &u, &lim),
        L.addProcess(DEV0, pid_c),
        L.procMem(mu, 4096, &n),
        L.procCompute(cu, 4096, &n),
    };
    for (int k = 0; k < 4; k++) {
      calls++;
      internal += rcs[k] == RESULT_ERROR_INTERNAL;
      if (!documented(rcs[k]) && bad++ < 5)
        printf("  round %d call %d: %d\n", r, k, rcs[k]);
    }
    if (rcs[0] == RESULT_SUCCESS && u > MAX_BYTES && bad++ < 5)
      printf("  round %d: usage %llu past the books' range\n", r, (unsigned long long)u);
    if (pwrite(fd, pristine, span, 0) != (ssize_t)span)
      break;
  }
  printf("  fuzz: %d rounds, %ld host calls on random books content: %ld internal errors, %ld undocumented\n",
         rounds, calls, internal, bad);
  CHECK(calls == 4L * rounds && internal == 0 && bad == 0,
        "every host call on fuzzed books returns a documented code, none an internal error");
  uint64_t u = 0, lim = 0;
  EXPECT_RC_WITH(L.lastError, L.usage("fuzz-w", DEV0, &u, &lim), RESULT_SUCCESS);
  free(pristine);
  close(fd);
  close(stop);
  waitpid(c, NULL, 0);
}

static void test_forged_report(const char *self_exe, const char *lib) {
  char books_a[PATH_MAX + 64];
  snprintf(books_a, sizeof books_a, "%s/workers/trust-a/limiter.shm", getenv("ACCELERATOR_STATE_DIR"));
  EXPECT_RC_WITH(L.accLastError, L.setMem("trust-a", DEV0, 1 << 20), RESULT_SUCCESS);
  int stop_a = -1, stop_b = -1;
  pid_t a = start_client(self_exe, lib, "trust-a", 777777, &stop_a);
  pid_t b = start_client_as(self_exe, lib, "trust-b", 3000000, 2, &stop_b);
  CHECK(a > 0 && b > 0, "clients of trust-a and (its worker set with setenv) trust-b start");
  if (a <= 0 || b <= 0)
    return;
  unsigned long long bytes = 0;
  int n = limiter_listed(b, &bytes);
  CHECK(n == 1 && bytes == 3000000, "B's process is listed once with 3,000,000 B (%d, %llu)", n, bytes);

  /* A's slot forged to name B's process with 99,999,999 B. */
  CHECK(forge_slot(books_a, a, 777777, b, start_of_pid(b), 99999999) == 0, "forge A's slot to name B's process");
  n = limiter_listed(b, &bytes);
  CHECK(n == 1 && bytes == 3000000,
        "A's forged slot neither replaces nor joins B's entry: B's process listed %d time(s), last with %llu B", n,
        bytes);
  /* Then naming the host (this process, no worker in its environment). */
  CHECK(forge_slot(books_a, b, 99999999, getpid(), start_of_pid(getpid()), 99999999) == 0,
        "forge A's slot to name the host");
  n = limiter_listed(getpid(), &bytes);
  CHECK(n == 0, "a slot naming the host is not reported (%d entries, %llu B)", n, bytes);
  /* Back to A's own process, with 99,999,999 B over its 1 MiB limit. */
  CHECK(forge_slot(books_a, getpid(), 99999999, a, start_of_pid(a), 99999999) == 0, "forge A's own slot's bytes");
  n = limiter_listed(a, &bytes);
  CHECK(n == 1 && bytes <= 1 << 20, "A's own process is reported within its 1 MiB limit (%d, %llu B)", n, bytes);
  close(stop_a);
  close(stop_b);
  waitpid(a, NULL, 0);
  waitpid(b, NULL, 0);
}

static atomic_int stall_stop;
static atomic_long stall_calls, stall_refused;

static void *query_a(void *arg) {
  (void)arg;
  while (!atomic_load(&stall_stop)) {
    uint64_t u = 0, lim = 0;
    int rc = L.usage("stall-a", DEV0, &u, &lim);
    atomic_fetch_add(&stall_calls, 1);
    atomic_fetch_add(&stall_refused, rc != RESULT_SUCCESS);
  }
  return NULL;
}

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

/* One usage query on A's stalled books: how long it took (ms), refused or
 * not (`arg`: a double[2], filled in). */
static void *one_query_a(void *arg) {
  double *out = arg, t0 = now_ms();
  uint64_t u = 0, lim = 0;
  int rc = L.usage("stall-a", DEV0, &u, &lim);
  out[0] = now_ms() - t0;
  out[1] = rc != RESULT_SUCCESS;
  return NULL;
}

/* The slowest of `n` rounds of B's usage query + AddWorkerProcess (ms). */
static double b_calls(const char *pid_b, int n, int *bad) {
  double worst = 0;
  for (int i = 0; i < n; i++) {
    uint64_t u = 0, lim = 0;
    double t0 = now_ms();
    *bad += L.usage("stall-b", DEV0, &u, &lim) != RESULT_SUCCESS;
    *bad += L.addProcess(DEV0, pid_b) != RESULT_SUCCESS;
    double t = now_ms() - t0;
    worst = t > worst ? t : worst;
    usleep(20000);
  }
  return worst;
}

static void test_stalled_books(const char *self_exe, const char *lib) {
  int stop_a = -1, stop_b = -1;
  pid_t a = start_client(self_exe, lib, "stall-a", 5555, &stop_a);
  pid_t b = start_client(self_exe, lib, "stall-b", 6666, &stop_b);
  CHECK(a > 0 && b > 0, "clients of stall-a and stall-b start");
  if (a <= 0 || b <= 0)
    return;
  /* A dead process of A whose op the usage word names... */
  int stop_d = -1;
  pid_t d = start_client(self_exe, lib, "stall-a", 7777, &stop_d);
  kill(d, SIGKILL);
  waitpid(d, NULL, 0);
  close(stop_d);
  char books_a[PATH_MAX + 64], pid_b[32];
  snprintf(books_a, sizeof books_a, "%s/workers/stall-a/limiter.shm", getenv("ACCELERATOR_STATE_DIR"));
  snprintf(pid_b, sizeof pid_b, "%d", (int)b);
  int fd = open(books_a, O_RDWR);
  uint64_t w = 0;
  off_t at = fd >= 0 ? find_usage_word(fd, 5555 + 7777, &w) : -1;
  /* ...with another sequence number: an op that never settles. */
  uint64_t forged = w ^ 5ULL << 56;
  CHECK(at >= 0 && pwrite(fd, &forged, 8, at) == 8, "A's usage word forged to name an op that never settles");
  if (fd >= 0)
    close(fd);
  int bad = 0;
  double base = b_calls(pid_b, 20, &bad);
  uint64_t u = 0, lim = 0;
  double t0 = now_ms();
  int rc = L.usage("stall-a", DEV0, &u, &lim);
  double stalled = now_ms() - t0;
  CHECK(rc == RESULT_ERROR_OPERATION_FAILED && stalled >= 1000,
        "a usage query on A's books waits out its budget and is refused (%d, %.0f ms: %s)", rc, stalled,
        L.lastError());
  /* Queued on A's books behind each other, each is refused within its own
   * 2 s budget, counted from its start (main: one after the other, 2, 4, 6
   * and 8 s). */
  enum { QUEUED = 4 };
  pthread_t q[QUEUED];
  double took[QUEUED][2], slowest = 0;
  for (int k = 0; k < QUEUED; k++)
    pthread_create(&q[k], NULL, one_query_a, took[k]);
  int refused = 0;
  for (int k = 0; k < QUEUED; k++) {
    pthread_join(q[k], NULL);
    refused += took[k][1] != 0;
    slowest = took[k][0] > slowest ? took[k][0] : slowest;
  }
  printf("  %d usage queries at once on A's stalled books: %d refused, the slowest after %.0f ms\n", QUEUED,
         refused, slowest);
  CHECK(refused == QUEUED && slowest < 4000,
        "%d queries at once on A's stalled books are each refused within 2x the 2 s budget (%d refused, slowest "
        "%.0f ms)",
        QUEUED, refused, slowest);
  pthread_t t[2];
  for (int k = 0; k < 2; k++)
    pthread_create(&t[k], NULL, query_a, NULL);
  usleep(100000);
  double worst = b_calls(pid_b, 40, &bad);
  atomic_store(&stall_stop, 1);
  for (int k = 0; k < 2; k++)
    pthread_join(t[k], NULL);
  printf("  B's usage + AddWorkerProcess: worst %.2f ms alone, %.2f ms while 2 threads query A's stalled books "
         "(%ld queries on A, %ld refused)\n",
         base, worst, atomic_load(&stall_calls), atomic_load(&stall_refused));
  CHECK(bad == 0, "B's calls succeed throughout (%d failed)", bad);
  CHECK(worst < 10.0 || worst < 20 * base,
        "B's calls stay within 10 ms (or 20x their %.2f ms baseline) while A's books stall: worst %.2f ms", base,
        worst);
  close(stop_a);
  close(stop_b);
  waitpid(a, NULL, 0);
  waitpid(b, NULL, 0);
}

/* The host's calls on the limits once limits.shm was cut under it, in a
 * child (the host's state is inherited; a SIGBUS ends the child, not the
 * test): exit status 0 if each was refused as truncated. */
static int host_after_cut(void) {
  WorkerFreezeState fs;
  uint64_t u = 0, lim = 0;
  int bad = 0;
  int rc = L.setMem("cut-w2", DEV0, 1 << 20);
  bad += !(rc == RESULT_ERROR_OPERATION_FAILED && strstr(L.accLastError(), "truncated"));
  if (bad)
    printf("  a hard limit after the cut: %d %s\n", rc, L.accLastError());
  rc = L.freeze("cut-w", &fs);
  bad += !(rc == RESULT_ERROR_OPERATION_FAILED && strstr(L.lastError(), "truncated"));
  rc = L.usage("cut-w", DEV0, &u, &lim);
  bad += !(rc == RESULT_ERROR_OPERATION_FAILED && strstr(L.lastError(), "truncated"));
  if (bad)
    printf("  after the cut: usage %d %s\n", rc, L.lastError());
  static MemoryUtilization mu[256];
  size_t n = 0;
  bad += L.procMem(mu, 256, &n) != RESULT_SUCCESS;
  return bad;
}

static void test_limits_cut(const char *self_exe, const char *lib) {
  char path[PATH_MAX + 32];
  snprintf(path, sizeof path, "%s/limits.shm", getenv("ACCELERATOR_STATE_DIR"));
  EXPECT_RC_WITH(L.accLastError, L.setMem("cut-w", DEV0, 1 << 30), RESULT_SUCCESS);
  uint64_t u = 0, lim = 0;
  int stop = -1;
  pid_t c = start_client_as(self_exe, lib, "cut-w", 4096, 1, &stop);
  CHECK(c > 0, "a busy client of worker cut-w starts");
  EXPECT_RC_WITH(L.lastError, L.usage("cut-w", DEV0, &u, &lim), RESULT_SUCCESS);
  CHECK(lim == 1 << 30, "the host reads its limit (%llu)", (unsigned long long)lim);
  usleep(50000);
  CHECK(truncate(path, 0) == 0, "truncate limits.shm: %s", strerror(errno));
  fflush(NULL);
  pid_t host = fork();
  if (host == 0)
    _exit(host_after_cut());
  int st = 0;
  waitpid(host, &st, 0);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0,
        "the host lives through the cut and refuses its calls on the limits as truncated (%s %d)",
        WIFSIGNALED(st) ? "killed by signal" : "exit", WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
  usleep(100000); /* the client keeps allocating meanwhile */
  if (c > 0) {
    close(stop);
    waitpid(c, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the client lives on and its calls succeed (%s %d)",
          WIFSIGNALED(st) ? "killed by signal" : "exit", WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
  }
}

int main(int argc, char **argv) {
  if (argc == 4 && strcmp(argv[1], "client") == 0)
    return client(argv[2], atoll(argv[3]), 0);
  if (argc == 4 && strcmp(argv[1], "busy-client") == 0)
    return client(argv[2], atoll(argv[3]), 1);
  if (argc == 5 && strcmp(argv[1], "late-client") == 0) {
    setenv("ACCELERATOR_WORKER_ID", argv[4], 1);
    return client(argv[2], atoll(argv[3]), 0);
  }
  if (argc < 3 || !getenv("ACCELERATOR_STATE_DIR")) {
    fprintf(stderr, "usage: ACCELERATOR_STATE_DIR=dir %s liblimiter.so libaccelerator.so [rounds]\n", argv[0]);
    return 2;
  }
  int rounds = argc > 3 ? atoi(argv[3]) : 300;
  char self_exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", self_exe, sizeof self_exe - 1);
  self_exe[n > 0 ? n : 0] = 0;
  unsetenv("ACCELERATOR_WORKER_ID"); /* this process is the host */
  limiter_load(argv[1], argv[2]);
  test_forged_slot(self_exe, argv[1]);
  test_fuzz(self_exe, argv[1], rounds);
  test_forged_report(self_exe, argv[1]);
  test_stalled_books(self_exe, argv[1]);
  test_limits_cut(self_exe, argv[1]);
  limiter_unload();
  return test_summary();
}

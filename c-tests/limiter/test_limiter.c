/* liblimiter.so behaviour through its C ABI: the state file's safety
 * checks, bad inputs, memory limits (exact, racing, reclaimed), the compute
 * token bucket, freezing, and what libaccelerator.so reports back.
 *
 * Usage: test_limiter build/liblimiter.so build/libaccelerator.so
 * (ACCELERATOR_STATE_DIR names a fresh state directory). This file includes
 * both accelerator.h and limiter.h, so it also proves they compile together
 * under -Wall -Wextra -Werror. */
#include "accelerator.h"
#include "limiter.h"
#include "../test_util.h"
#include "limiter_load.h"

#include <errno.h>
#include <pthread.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define D0 "stub-device-0"
#define D1 "stub-device-1"
#define D2 "stub-device-2"
#define D3 "stub-device-3"

#define EXPECT_RC(call, code) EXPECT_RC_WITH(L.lastError, call, code)

static char me[32];

static void pid_text(char *buf, size_t n, pid_t pid) { snprintf(buf, n, "%d", (int)pid); }

static int wait_code(pid_t pid) {
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(st) ? WEXITSTATUS(st) : 100 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

static void write_file(const char *path, const void *data, size_t len) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0 || write(fd, data, len) != (ssize_t)len) {
    perror(path);
    exit(2);
  }
  close(fd);
}

/* In a fresh child (no mapping yet), point the state directory at `dir`
 * and make one call; exit with its code, or 77 when the message lacks `why`. */
static int first_call_in(const char *dir, const char *why, int group) {
  pid_t pid = fork();
  if (pid == 0) {
    setenv("ACCELERATOR_STATE_DIR", dir, 1);
    setenv("ACCELERATOR_WORKER_ID", "w-file", 1);
    if (group)
      setenv("ACCELERATOR_STATE_GROUP_ACCESS", "1", 1);
    char self[32];
    pid_text(self, sizeof self, getpid());
    MemoryOpRecord r;
    int rc = L.mem(self, D0, 1, &r);
    if (why && !strstr(L.lastError(), why)) {
      fprintf(stderr, "message %s lacks %s\n", L.lastError(), why);
      _exit(77);
    }
    _exit(rc);
  }
  return wait_code(pid);
}

/* The state file's layout version (common/src/shm/mod.rs, VERSION). */
#define LAYOUT_VERSION 6

/* `dir` and its worker directory for "w-file", 0700. */
static void mkdir_worker(const char *dir) {
  char sub[300];
  mkdir(dir, 0700);
  snprintf(sub, sizeof sub, "%s/workers", dir);
  mkdir(sub, 0700);
  snprintf(sub, sizeof sub, "%s/workers/w-file", dir);
  mkdir(sub, 0700);
}

static void test_state_file(void) {
  char base[] = "/tmp/limiter-test.XXXXXX";
  CHECK(mkdtemp(base) != NULL, "mkdtemp");
  char dir[256], file[300];
  unsigned char head[24] = "ACCLIMIT";

  snprintf(dir, sizeof dir, "%s/fresh", base);
  CHECK(first_call_in(dir, NULL, 0) == RESULT_SUCCESS, "fresh state directory works");
  snprintf(file, sizeof file, "%s/workers/w-file/limiter.shm", dir);
  struct stat sb;
  CHECK(stat(file, &sb) == 0 && (sb.st_mode & 0777) == 0600, "state file is 0600 (%o)",
        (unsigned)(sb.st_mode & 0777));

  snprintf(dir, sizeof dir, "%s/group", base);
  CHECK(first_call_in(dir, NULL, 1) == RESULT_SUCCESS, "group-access state directory works");
  snprintf(file, sizeof file, "%s/workers/w-file/limiter.shm", dir);
  CHECK(stat(file, &sb) == 0 && (sb.st_mode & 0777) == 0660, "group state file is 0660 (%o)",
        (unsigned)(sb.st_mode & 0777));

  snprintf(dir, sizeof dir, "%s/foreign", base);
  mkdir_worker(dir);
  snprintf(file, sizeof file, "%s/workers/w-file/limiter.shm", dir);
  static char junk[65536];
  memset(junk, 'x', sizeof junk);
  write_file(file, junk, sizeof junk);
  CHECK(first_call_in(dir, "bad magic", 0) == RESULT_ERROR_OPERATION_FAILED, "foreign file refused");

  snprintf(dir, sizeof dir, "%s/truncated", base);
  mkdir_worker(dir);
  snprintf(file, sizeof file, "%s/workers/w-file/limiter.shm", dir);
  write_file(file, head, 12);
  CHECK(first_call_in(dir, "truncated", 0) == RESULT_ERROR_OPERATION_FAILED, "truncated file refused");

  snprintf(dir, sizeof dir, "%s/newer", base);
  mkdir_worker(dir);
  snprintf(file, sizeof file, "%s/workers/w-file/limiter.shm", dir);
  head[8] = 99;
  write_file(file, head, sizeof head);
  CHECK(first_call_in(dir, "newer", 0) == RESULT_ERROR_OPERATION_FAILED, "newer version refused");

  snprintf(dir, sizeof dir, "%s/older", base);
  mkdir_worker(dir);
  snprintf(file, sizeof file, "%s/workers/w-file/limiter.shm", dir);
  head[8] = LAYOUT_VERSION - 1;
  write_file(file, head, sizeof head);
  CHECK(first_call_in(dir, "this library needs", 0) == RESULT_ERROR_OPERATION_FAILED,
        "older version refused");

  snprintf(dir, sizeof dir, "%s/short", base);
  mkdir_worker(dir);
  snprintf(file, sizeof file, "%s/workers/w-file/limiter.shm", dir);
  head[8] = LAYOUT_VERSION;
  head[16] = 0x10; /* a size that is not the layout's */
  write_file(file, head, sizeof head);
  CHECK(first_call_in(dir, "declares", 0) == RESULT_ERROR_OPERATION_FAILED, "wrong size refused");

  snprintf(dir, sizeof dir, "%s/symlink", base);
  mkdir_worker(dir);
  snprintf(file, sizeof file, "%s/workers/w-file/limiter.shm", dir);
  CHECK(symlink("/dev/null", file) == 0, "symlink");
  CHECK(first_call_in(dir, "symlink", 0) == RESULT_ERROR_OPERATION_FAILED, "symlink refused");

  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf %s", base);
  CHECK(system(cmd) == 0, "cleanup");
}

static void test_bad_inputs(void) {
  MemoryOpRecord m;
  ComputeOpRecord c;
  WorkerFreezeState f;
  uint64_t u, lim;
  char longid[128];
  memset(longid, 'a', sizeof longid - 1);
  longid[sizeof longid - 1] = 0;
  const char *bad_pids[] = {"", "\xff", "abc", "0", "-5", " 12", "12x", "99999999999", longid};
  for (size_t i = 0; i < sizeof bad_pids / sizeof *bad_pids; i++) {
    EXPECT_RC(L.mem(bad_pids[i], D0, 1, &m), RESULT_ERROR_INVALID_PARAM);
    EXPECT_RC(L.compute(bad_pids[i], D0, 1, &c), RESULT_ERROR_INVALID_PARAM);
    EXPECT_RC(L.addProcess(D0, bad_pids[i]), RESULT_ERROR_INVALID_PARAM);
  }
  const char *bad_ids[] = {"", "\xff\xfe", "caf\xc3", longid};
  for (size_t i = 0; i < sizeof bad_ids / sizeof *bad_ids; i++) {
    EXPECT_RC(L.mem(me, bad_ids[i], 1, &m), RESULT_ERROR_INVALID_PARAM);
    EXPECT_RC(L.compute(me, bad_ids[i], 1, &c), RESULT_ERROR_INVALID_PARAM);
    EXPECT_RC(L.addProcess(bad_ids[i], me), RESULT_ERROR_INVALID_PARAM);
    EXPECT_RC(L.freeze(bad_ids[i], &f), RESULT_ERROR_INVALID_PARAM);
    EXPECT_RC(L.resume(bad_ids[i], &f), RESULT_ERROR_INVALID_PARAM);
    EXPECT_RC(L.autoFreeze(bad_ids[i], D0, "memory"), RESULT_ERROR_INVALID_PARAM);
    EXPECT_RC(L.autoFreeze("w-func", bad_ids[i], "memory"), RESULT_ERROR_INVALID_PARAM);
    EXPECT_RC(L.autoResume("w-func", D0, bad_ids[i]), RESULT_ERROR_INVALID_PARAM);
  }
  EXPECT_RC(L.mem(NULL, D0, 1, &m), RESULT_ERROR_INVALID_PARAM);
  EXPECT_RC(L.mem(me, NULL, 1, &m), RESULT_ERROR_INVALID_PARAM);
  EXPECT_RC(L.mem(me, D0, 1, NULL), RESULT_ERROR_INVALID_PARAM);
  CHECK(strstr(L.lastError(), "record") != NULL, "last error names the argument: %s", L.lastError());
  EXPECT_RC(L.compute(NULL, D0, 1, &c), RESULT_ERROR_INVALID_PARAM);
  EXPECT_RC(L.compute(me, NULL, 1, &c), RESULT_ERROR_INVALID_PARAM);
  EXPECT_RC(L.compute(me, D0, 1, NULL), RESULT_ERROR_INVALID_PARAM);
  EXPECT_RC(L.freeze(NULL, &f), RESULT_ERROR_INVALID_PARAM);
  EXPECT_RC(L.freeze("w-func", NULL), RESULT_ERROR_INVALID_PARAM);
  EXPECT_RC(L.resume(NULL, &f), RESULT_ERROR_INVALID_PARAM);
  EXPECT_RC(L.resume("w-func", NULL), RESULT_ERROR_INVALID_PARAM);
  EXPECT_RC(L.freeze("no-such-worker", &f), RESULT_ERROR_NOT_FOUND);
  EXPECT_RC(L.resume("no-such-worker", &f), RESULT_ERROR_NOT_FOUND);
  EXPECT_RC(L.autoFreeze("no-such-worker", D0, "memory"), RESULT_ERROR_NOT_FOUND);
  EXPECT_RC(L.autoResume("no-such-worker", D0, "compute"), RESULT_ERROR_NOT_FOUND);
  EXPECT_RC(L.autoFreeze(NULL, D0, "memory"), RESULT_ERROR_INVALID_PARAM);
  EXPECT_RC(L.autoFreeze("w-func", NULL, "memory"), RESULT_ERROR_INVALID_PARAM);
  EXPECT_RC(L.autoFreeze("w-func", D0, NULL), RESULT_ERROR_INVALID_PARAM);
  EXPECT_RC(L.autoFreeze("w-func", D0, "disk"), RESULT_ERROR_INVALID_PARAM);
  EXPECT_RC(L.autoResume("w-func", D0, "Memory"), RESULT_ERROR_INVALID_PARAM);
  EXPECT_RC(L.addProcess(NULL, me), RESULT_ERROR_INVALID_PARAM);
  EXPECT_RC(L.addProcess(D0, NULL), RESULT_ERROR_INVALID_PARAM);
  EXPECT_RC(L.addProcess(D0, "999999999"), RESULT_ERROR_NOT_FOUND);
  EXPECT_RC(L.mem("999999999", D0, 1, &m), RESULT_ERROR_NOT_FOUND);
  EXPECT_RC(L.usage(NULL, D0, &u, &lim), RESULT_ERROR_INVALID_PARAM);
  EXPECT_RC(L.usage("w-func", D0, NULL, &lim), RESULT_ERROR_INVALID_PARAM);
  EXPECT_RC(L.usage("w-func", D0, &u, NULL), RESULT_ERROR_INVALID_PARAM);
  EXPECT_RC(L.usage("no-such-worker", D0, &u, &lim), RESULT_ERROR_NOT_FOUND);
  EXPECT_RC(L.mem(me, D0, INT64_MIN, &m), RESULT_ERROR_INVALID_PARAM);
}

/* Where a processId or deviceUUID text may lie: ending at the last byte of
 * a page whose successor is unmapped, or in a heap block of exactly its
 * size (what valgrind checks). The limiter compares texts it has seen
 * before a word at a time; none of this may read past a caller's NUL. */
enum { EDGE_NAMES = 8 };
static char *edge_page; /* two pages, the second PROT_NONE */
static long page_size;

enum placement { AT_PAGE_END, ON_HEAP };

static char *place(enum placement where, const char *text, char **heap) {
  size_t n = strlen(text) + 1;
  if (where == ON_HEAP) {
    *heap = malloc(n);
    return memcpy(*heap, text, n);
  }
  *heap = NULL;
  return memcpy(edge_page + page_size - n, text, n);
}

static void test_text_edges(void) {
  page_size = sysconf(_SC_PAGESIZE);
  edge_page = mmap(NULL, 2 * (size_t)page_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  CHECK(edge_page != MAP_FAILED && mprotect(edge_page + page_size, (size_t)page_size, PROT_NONE) == 0,
        "two pages, the second unmapped");
  if (edge_page == MAP_FAILED)
    return;
  /* Eight device names of 24..31 bytes: at a page end, all eight alignments. */
  char names[EDGE_NAMES][40];
  MemoryOpRecord r;
  for (int i = 0; i < EDGE_NAMES; i++) {
    snprintf(names[i], sizeof names[i], "edge-%.*s", 19 + i, "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx");
    EXPECT_RC(L.mem(me, names[i], 0, &r), RESULT_SUCCESS); /* seen from here on */
  }
  char text[64];
  for (int w = AT_PAGE_END; w <= ON_HEAP; w++) {
    const char *where = w == AT_PAGE_END ? "at a page end" : "on the heap";
    for (int i = 0; i < EDGE_NAMES; i++) {
      char *h;
      const char *d = place((enum placement)w, names[i], &h);
      int rc = L.mem(me, d, 0, &r);
      CHECK(rc == RESULT_SUCCESS && strcmp(r.deviceUUID, names[i]) == 0, "%s %s: %d %s", where, names[i],
            rc, L.lastError());
      free(h);
      size_t n = strlen(names[i]);
      for (size_t k = 0; k <= n; k++) {
        /* Shorter than a name seen before, differing in its last byte. */
        snprintf(text, sizeof text, "%.*s\xff", (int)k, names[i]);
        d = place((enum placement)w, text, &h);
        EXPECT_RC(L.mem(me, d, 0, &r), RESULT_ERROR_INVALID_PARAM);
        free(h);
      }
      snprintf(text, sizeof text, "%s\xff", names[i]); /* longer */
      d = place((enum placement)w, text, &h);
      EXPECT_RC(L.mem(me, d, 0, &r), RESULT_ERROR_INVALID_PARAM);
      free(h);
    }
    /* processId: every prefix of this process's (seen) pid, and one
     * longer, with a deviceUUID that fails after it ("" is invalid). */
    size_t n = strlen(me);
    for (size_t k = 0; k <= n + 1; k++) {
      snprintf(text, sizeof text, "%.*s%s", (int)k, me, k > n ? "7" : "");
      char *h;
      const char *p = place((enum placement)w, text, &h);
      int rc = L.mem(p, "", 0, &r);
      CHECK(rc == RESULT_ERROR_INVALID_PARAM && strstr(L.lastError(), k == 0 ? "processId" : "deviceUUID"),
            "%s: processId \"%s\": %d %s", where, text, rc, L.lastError());
      free(h);
    }
    char *h;
    const char *p = place((enum placement)w, me, &h);
    CHECK(L.mem(p, D0, 0, &r) == RESULT_SUCCESS, "%s: this process's pid: %s", where, L.lastError());
    free(h);
  }
  munmap(edge_page, 2 * (size_t)page_size);
}

static uint64_t used_of(const char *worker, const char *dev) {
  uint64_t u = 0, lim = 0;
  EXPECT_RC(L.usage(worker, dev, &u, &lim), RESULT_SUCCESS);
  return u;
}

static void *succeed_elsewhere(void *rc) {
  MemoryOpRecord m;
  *(int *)rc = L.mem(me, D0, 0, &m);
  return NULL;
}

/* The last error belongs to its thread: another thread's success leaves it,
 * the thread's own next success clears it. */
static void test_last_error(void) {
  MemoryOpRecord m;
  EXPECT_RC(L.mem("pid-1", D0, 0, &m), RESULT_ERROR_INVALID_PARAM);
  CHECK(strstr(L.lastError(), "processId") != NULL, "the error names processId: %s", L.lastError());
  pthread_t t;
  int rc = -1;
  pthread_create(&t, NULL, succeed_elsewhere, &rc);
  pthread_join(t, NULL);
  CHECK(rc == RESULT_SUCCESS, "the other thread's call succeeds (%d)", rc);
  CHECK(strstr(L.lastError(), "processId") != NULL, "another thread's success leaves this one's error: %s",
        L.lastError());
  CHECK(L.mem(me, D0, 0, &m) == RESULT_SUCCESS, "a good call succeeds: %s", L.lastError());
  CHECK(L.lastError()[0] == 0, "this thread's success clears its error: %s", L.lastError());
}

static void test_memory(void) {
  MemoryOpRecord r;
  EXPECT_RC_WITH(L.accLastError, L.setMem("w-func", D0, 1000), RESULT_SUCCESS);
  EXPECT_RC_WITH(L.accLastError, L.setMem("w-func", D0, 1000), RESULT_SUCCESS);
  EXPECT_RC_WITH(L.accLastError, L.setMemLower("w-func", D0, 1000), RESULT_SUCCESS);
  EXPECT_RC_WITH(L.accLastError, L.setMem("w-func", D0, 2000), RESULT_ERROR_OPERATION_FAILED);
  EXPECT_RC_WITH(L.accLastError, L.setMem("w-func", D0, 0), RESULT_ERROR_INVALID_PARAM);
  EXPECT_RC_WITH(L.accLastError, L.setMem("w-func", "no-such-device", 1), RESULT_ERROR_NOT_FOUND);
  EXPECT_RC_WITH(L.accLastError, L.setCompute("w-func", D0, 101), RESULT_ERROR_INVALID_PARAM);

  EXPECT_RC(L.mem(me, D0, 600, &r), RESULT_SUCCESS);
  CHECK(!r.shouldBlock && r.availableBytes == 400, "600 of 1000: block=%d avail=%llu", r.shouldBlock,
        (unsigned long long)r.availableBytes);
  CHECK(strcmp(r.deviceUUID, D0) == 0 && r.bytesDiff == 600, "record echoes the op");
  EXPECT_RC(L.mem(me, D0, 500, &r), RESULT_SUCCESS);
  CHECK(r.shouldBlock && r.availableBytes == 400, "500 more blocks: block=%d avail=%llu",
        r.shouldBlock, (unsigned long long)r.availableBytes);
  CHECK(used_of("w-func", D0) == 600, "a blocked op is not recorded");
  EXPECT_RC(L.mem(me, D0, 400, &r), RESULT_SUCCESS);
  CHECK(!r.shouldBlock && r.availableBytes == 0, "exactly to the limit");
  EXPECT_RC(L.mem(me, D0, 1, &r), RESULT_SUCCESS);
  CHECK(r.shouldBlock && r.availableBytes == 0, "one byte past blocks");
  EXPECT_RC(L.mem(me, D0, -1001, &r), RESULT_ERROR_INVALID_PARAM);
  CHECK(used_of("w-func", D0) == 1000, "an over-free changes nothing");
  EXPECT_RC(L.mem(me, D0, -1000, &r), RESULT_SUCCESS);
  CHECK(!r.shouldBlock && r.availableBytes == 1000, "free releases: avail=%llu",
        (unsigned long long)r.availableBytes);
  EXPECT_RC(L.mem(me, D0, 0, &r), RESULT_SUCCESS);
  CHECK(!r.shouldBlock && r.availableBytes == 1000, "zero op");
  CHECK(used_of("w-func", D0) == 0, "usage back to 0");

  EXPECT_RC(L.mem(me, D3, 123, &r), RESULT_SUCCESS);
  CHECK(!r.shouldBlock && r.availableBytes == UINT64_MAX, "no limit: unlimited");
  EXPECT_RC(L.mem(me, D1, 4096, &r), RESULT_SUCCESS);

  /* libaccelerator reports the limiter's bytes for this process. */
  MemoryUtilization mu[256];
  size_t n = 0;
  EXPECT_RC_WITH(L.accLastError, L.procMem(mu, 256, &n), RESULT_SUCCESS);
  int found1 = 0, found3 = 0;
  for (size_t i = 0; i < n; i++) {
    if (strcmp(mu[i].processId, me) == 0 && strcmp(mu[i].deviceUUID, D1) == 0)
      found1 = mu[i].usedBytes == 4096;
    if (strcmp(mu[i].processId, me) == 0 && strcmp(mu[i].deviceUUID, D3) == 0)
      found3 = mu[i].usedBytes == 123;
  }
  CHECK(found1 && found3, "GetProcessMemoryUtilization reports the limiter's bytes (%zu entries)", n);
  EXPECT_RC(L.mem(me, D1, -4096, &r), RESULT_SUCCESS);
  EXPECT_RC(L.mem(me, D3, -123, &r), RESULT_SUCCESS);
}

/* Callers reuse their buffers: the limiter remembers the texts (and pairs
 * of texts) it has seen, never pointers, so the same buffers holding
 * other texts, seen before or not, are read anew on every call. */
static void test_reused_buffers(void) {
  MemoryOpRecord r;
  ComputeOpRecord c;
  char pid[32], dev[64];
  snprintf(pid, sizeof pid, "%s", me);
  for (int round = 0; round < 3; round++) { /* later rounds: pairs seen before */
    const char *devs[] = {D1, D3};
    for (int i = 0; i < 2; i++) {
      snprintf(dev, sizeof dev, "%s", devs[i]);
      EXPECT_RC(L.mem(pid, dev, 100, &r), RESULT_SUCCESS);
      CHECK(strcmp(r.deviceUUID, devs[i]) == 0, "round %d: the record names %s: %s", round, devs[i],
            r.deviceUUID);
      EXPECT_RC(L.compute(pid, dev, 1, &c), RESULT_SUCCESS);
      CHECK(strcmp(c.deviceUUID, devs[i]) == 0, "round %d: the compute record names %s: %s", round,
            devs[i], c.deviceUUID);
    }
  }
  CHECK(used_of("w-func", D1) == 300 && used_of("w-func", D3) == 300,
        "each op is charged to the device its text named: %llu, %llu",
        (unsigned long long)used_of("w-func", D1), (unsigned long long)used_of("w-func", D3));
  snprintf(pid, sizeof pid, "999999999"); /* no such process */
  EXPECT_RC(L.mem(pid, dev, 1, &r), RESULT_ERROR_NOT_FOUND);
  snprintf(pid, sizeof pid, "%s", me);
  dev[strlen(dev) - 1] = 0; /* "stub-device-": a prefix of a device seen */
  int rc = L.mem(pid, dev, 1, &r);
  /* Refused (no such device), or recorded there, never on D3. */
  CHECK(rc == RESULT_ERROR_NOT_FOUND || (rc == RESULT_SUCCESS && strcmp(r.deviceUUID, dev) == 0),
        "a prefix of a device's text is another device: %d %s", rc, r.deviceUUID);
  if (rc == RESULT_SUCCESS)
    EXPECT_RC(L.mem(pid, dev, -1, &r), RESULT_SUCCESS);
  CHECK(used_of("w-func", D3) == 300, "nothing charged to %s", D3);
  snprintf(dev, sizeof dev, "%s", D3);
  pid[strlen(pid) - 1] = 0; /* a prefix of this process's pid: another pid */
  rc = L.mem(pid, dev, -1, &r);
  CHECK(rc != RESULT_SUCCESS, "a prefix of the pid is another process: %d", rc);
  snprintf(pid, sizeof pid, "%s", me);
  EXPECT_RC(L.mem(pid, dev, -300, &r), RESULT_SUCCESS);
  snprintf(dev, sizeof dev, "%s", D1);
  EXPECT_RC(L.mem(pid, dev, -300, &r), RESULT_SUCCESS);
  CHECK(used_of("w-func", D1) == 0 && used_of("w-func", D3) == 0, "usage back to 0");
}

/* Threads of one process on one device: every allocation and free is in
 * the books exactly once (the limiter is called from every thread of a
 * CUDA application). */
enum { THREADS = 8 };
static pthread_barrier_t thread_barrier;
static atomic_int thread_errors;

static void *thread_ops(void *arg) {
  long ops = (long)arg;
  MemoryOpRecord r;
  for (long i = 0; i < ops; i++)
    if (L.mem(me, D2, 4096, &r) != RESULT_SUCCESS || r.shouldBlock)
      atomic_fetch_add(&thread_errors, 1);
  pthread_barrier_wait(&thread_barrier); /* all allocated */
  pthread_barrier_wait(&thread_barrier); /* main has checked the total */
  for (long i = 0; i < ops; i++)
    if (L.mem(me, D2, -4096, &r) != RESULT_SUCCESS)
      atomic_fetch_add(&thread_errors, 1);
  return NULL;
}

static void test_threads(void) {
  long ops = test_quick() ? 200 : 20000;
  pthread_t th[THREADS];
  pthread_barrier_init(&thread_barrier, NULL, THREADS + 1);
  for (int i = 0; i < THREADS; i++)
    pthread_create(&th[i], NULL, thread_ops, (void *)ops);
  /* This thread has made every call so far (it owns the process's bias):
   * it keeps allocating while the others start, so the bias is revoked
   * while its owner is inside operations. */
  MemoryOpRecord r;
  for (long i = 0; i < ops; i++)
    if (L.mem(me, D2, 4096, &r) != RESULT_SUCCESS || r.shouldBlock)
      atomic_fetch_add(&thread_errors, 1);
  pthread_barrier_wait(&thread_barrier);
  uint64_t expect = (uint64_t)(THREADS + 1) * (uint64_t)ops * 4096;
  CHECK(used_of("w-func", D2) == expect, "%d threads x %ld allocations: used %llu, expected %llu",
        THREADS + 1, ops, (unsigned long long)used_of("w-func", D2), (unsigned long long)expect);
  MemoryUtilization mu[256];
  size_t n = 0;
  uint64_t mine = 0;
  EXPECT_RC_WITH(L.accLastError, L.procMem(mu, 256, &n), RESULT_SUCCESS);
  for (size_t i = 0; i < n; i++)
    if (strcmp(mu[i].processId, me) == 0 && strcmp(mu[i].deviceUUID, D2) == 0)
      mine = mu[i].usedBytes;
  CHECK(mine == expect, "the process's own books hold every allocation: %llu",
        (unsigned long long)mine);
  pthread_barrier_wait(&thread_barrier);
  for (long i = 0; i < ops; i++)
    if (L.mem(me, D2, -4096, &r) != RESULT_SUCCESS)
      atomic_fetch_add(&thread_errors, 1);
  for (int i = 0; i < THREADS; i++)
    pthread_join(th[i], NULL);
  pthread_barrier_destroy(&thread_barrier);
  CHECK(atomic_load(&thread_errors) == 0, "%d failed or blocked thread ops",
        atomic_load(&thread_errors));
  CHECK(used_of("w-func", D2) == 0, "every thread's frees released: used %llu",
        (unsigned long long)used_of("w-func", D2));
}

/* Processes racing on one limit never overshoot; their memory comes back
 * when they are killed. */
static void test_race(void) {
  enum { KIDS = 4 };
  const int per = test_quick() ? 300 : 1000;
  EXPECT_RC_WITH(L.accLastError, L.setMem("w-race", D2, 1000), RESULT_SUCCESS);
  int up[2], down[2];
  CHECK(pipe(up) == 0 && pipe(down) == 0, "pipes");
  pid_t kids[KIDS];
  for (int k = 0; k < KIDS; k++) {
    kids[k] = fork();
    if (kids[k] == 0) {
      setenv("ACCELERATOR_WORKER_ID", "w-race", 1);
      char self[32];
      pid_text(self, sizeof self, getpid());
      int ok = 0;
      for (int i = 0; i < per; i++) {
        MemoryOpRecord r;
        if (L.mem(self, D2, 1, &r) == RESULT_SUCCESS && !r.shouldBlock)
          ok++;
      }
      if (write(up[1], &ok, sizeof ok) != sizeof ok)
        _exit(3);
      char c;
      while (read(down[0], &c, 1) < 0 && errno == EINTR) {
      }
      _exit(0);
    }
  }
  int total = 0;
  for (int k = 0; k < KIDS; k++) {
    int ok = 0;
    CHECK(read(up[0], &ok, sizeof ok) == sizeof ok, "child count");
    total += ok;
  }
  int expect = KIDS * per < 1000 ? KIDS * per : 1000;
  CHECK(total == expect, "racing allocations granted %d bytes, limit allows %d", total, expect);
  CHECK(used_of("w-race", D2) == (uint64_t)expect, "usage equals the granted bytes");
  for (int k = 0; k < KIDS; k++) {
    kill(kids[k], SIGKILL);
    wait_code(kids[k]);
  }
  close(down[1]);
  /* A new process of the worker gets the dead processes' memory back. */
  pid_t pid = fork();
  if (pid == 0) {
    setenv("ACCELERATOR_WORKER_ID", "w-race", 1);
    char self[32];
    pid_text(self, sizeof self, getpid());
    MemoryOpRecord r;
    int rc = L.mem(self, D2, 1000, &r);
    _exit(rc == RESULT_SUCCESS && !r.shouldBlock ? 0 : 1);
  }
  CHECK(wait_code(pid) == 0, "killed processes' memory is reclaimed on the next blocked op");
  MemoryUtilization mu[256];
  size_t n = 0;
  EXPECT_RC_WITH(L.accLastError, L.procMem(mu, 256, &n), RESULT_SUCCESS);
  CHECK(used_of("w-race", D2) == 0, "a sweep leaves only live processes' usage");
  close(up[0]);
  close(up[1]);
  close(down[0]);
}

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {
  }
}

static void test_compute(void) {
  ComputeOpRecord c;
  EXPECT_RC_WITH(L.accLastError, L.setCompute("w-func", D1, 10), RESULT_SUCCESS);
  EXPECT_RC_WITH(L.accLastError, L.setCompute("w-func", D1, 10), RESULT_SUCCESS);
  EXPECT_RC_WITH(L.accLastError, L.setCompute("w-func", D1, 20), RESULT_ERROR_OPERATION_FAILED);
  /* 10 %: 10^8 tokens/s, burst 10^7. */
  EXPECT_RC(L.compute(me, D1, 10000000, &c), RESULT_SUCCESS);
  CHECK(!c.shouldBlock && c.availableTokens < 1000000, "the whole burst: block=%d avail=%llu",
        c.shouldBlock, (unsigned long long)c.availableTokens);
  EXPECT_RC(L.compute(me, D1, 5000000, &c), RESULT_SUCCESS);
  CHECK(c.shouldBlock, "an empty bucket blocks (avail=%llu)", (unsigned long long)c.availableTokens);
  sleep_ms(60);
  EXPECT_RC(L.compute(me, D1, 5000000, &c), RESULT_SUCCESS);
  CHECK(!c.shouldBlock, "refilled after 60 ms (avail=%llu)", (unsigned long long)c.availableTokens);
  EXPECT_RC(L.compute(me, D1, 20000000, &c), RESULT_SUCCESS);
  CHECK(c.shouldBlock, "more than the burst waits for a full bucket");
  CHECK(strcmp(c.deviceUUID, D1) == 0 && c.computeTokens == 20000000, "record echoes the op");
  /* Full (100 ms at 10 %): granted, and the bucket is in debt for the rest. */
  sleep_ms(110);
  EXPECT_RC(L.compute(me, D1, 20000000, &c), RESULT_SUCCESS);
  CHECK(!c.shouldBlock && c.availableTokens == 0, "more than the burst, on a full bucket: into debt");
  sleep_ms(60);
  EXPECT_RC(L.compute(me, D1, 1, &c), RESULT_SUCCESS);
  CHECK(c.shouldBlock, "the debt is paid back before the next grant");
  EXPECT_RC(L.compute(me, D3, 1u << 30, &c), RESULT_SUCCESS);
  CHECK(!c.shouldBlock && c.availableTokens == UINT64_MAX, "no compute limit: unlimited");
}

static void test_freeze(void) {
  MemoryOpRecord r;
  ComputeOpRecord c;
  WorkerFreezeState f;
  EXPECT_RC(L.freeze("w-func", &f), RESULT_SUCCESS);
  CHECK(f.isFrozen && strcmp(f.workerId, "w-func") == 0, "frozen");
  EXPECT_RC(L.mem(me, D0, 1, &r), RESULT_SUCCESS);
  CHECK(r.shouldBlock, "memory blocks while frozen");
  EXPECT_RC(L.compute(me, D3, 1, &c), RESULT_SUCCESS);
  CHECK(c.shouldBlock, "compute blocks while frozen");
  CHECK(used_of("w-func", D0) == 0, "nothing recorded while frozen");
  sleep_ms(50);
  EXPECT_RC(L.freeze("w-func", &f), RESULT_SUCCESS); /* idempotent */
  EXPECT_RC(L.resume("w-func", &f), RESULT_SUCCESS);
  CHECK(!f.isFrozen && f.freezeTimeMs >= 50, "resumed after %llu ms", (unsigned long long)f.freezeTimeMs);
  uint64_t first = f.freezeTimeMs;
  EXPECT_RC(L.mem(me, D0, 1, &r), RESULT_SUCCESS);
  CHECK(!r.shouldBlock, "memory flows again");
  EXPECT_RC(L.freeze("w-func", &f), RESULT_SUCCESS);
  sleep_ms(20);
  EXPECT_RC(L.resume("w-func", &f), RESULT_SUCCESS);
  EXPECT_RC(L.resume("w-func", &f), RESULT_SUCCESS);
  CHECK(f.freezeTimeMs >= first + 20, "freeze time accumulates: %llu", (unsigned long long)f.freezeTimeMs);

  EXPECT_RC(L.autoFreeze("w-func", D0, "memory"), RESULT_SUCCESS);
  EXPECT_RC(L.mem(me, D0, 1, &r), RESULT_SUCCESS);
  CHECK(r.shouldBlock, "auto-frozen memory blocks");
  EXPECT_RC(L.compute(me, D0, 1, &c), RESULT_SUCCESS);
  CHECK(!c.shouldBlock, "compute of a memory-frozen worker flows");
  EXPECT_RC(L.autoResume("w-func", D0, "memory"), RESULT_SUCCESS);
  EXPECT_RC(L.mem(me, D0, -1, &r), RESULT_SUCCESS);
  CHECK(!r.shouldBlock, "auto-resumed memory flows");
  EXPECT_RC(L.autoFreeze("w-func", D0, "compute"), RESULT_SUCCESS);
  EXPECT_RC(L.compute(me, D0, 1, &c), RESULT_SUCCESS);
  CHECK(c.shouldBlock, "auto-frozen compute blocks");
  EXPECT_RC(L.autoResume("w-func", D0, "compute"), RESULT_SUCCESS);
  EXPECT_RC(L.compute(me, D0, 1, &c), RESULT_SUCCESS);
  CHECK(!c.shouldBlock, "auto-resumed compute flows");
}

/* A process id other than the caller's: its worker comes from its own
 * environment. */
static void test_other_process(void) {
  /* /proc/<pid>/environ is a process's initial environment: start one
   * with the variable through execve. The write end of this pipe closes
   * at the exec (O_CLOEXEC), so the parent's read returns only once the
   * new environment is in place: registering the pid earlier would file
   * it under the worker it inherited from us, and a process keeps the
   * worker it registered with. */
  int ready[2];
  CHECK(pipe2(ready, O_CLOEXEC) == 0, "pipe2");
  pid_t pid = fork();
  if (pid == 0) {
    char *argv[] = {"sleep", "5", NULL};
    char *envp[] = {"ACCELERATOR_WORKER_ID=w-env", NULL};
    close(ready[0]);
    execve("/bin/sleep", argv, envp);
    _exit(127);
  }
  close(ready[1]);
  char byte;
  while (read(ready[0], &byte, 1) < 0 && errno == EINTR)
    ;
  close(ready[0]);
  char other[32];
  pid_text(other, sizeof other, pid);
  WorkerFreezeState f0;
  int rc = L.addProcess(D0, other);
  if (rc == RESULT_SUCCESS)
    rc = L.freeze("w-env", &f0);
  CHECK(rc == RESULT_SUCCESS, "a foreign process joins the worker of its environment (%s)", L.lastError());
  WorkerFreezeState f;
  EXPECT_RC(L.resume("w-env", &f), RESULT_SUCCESS);
  kill(pid, SIGKILL);
  wait_code(pid);
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s liblimiter.so libaccelerator.so\n", argv[0]);
    return 2;
  }
  limiter_load(argv[1], argv[2]);
  pid_text(me, sizeof me, getpid());
  test_state_file(); /* first: children that have not mapped anything yet */
  setenv("ACCELERATOR_WORKER_ID", "w-func", 1);
  test_bad_inputs();
  test_last_error();
  test_text_edges();
  test_memory();
  test_reused_buffers();
  test_threads();
  test_race();
  test_compute();
  test_freeze();
  test_other_process();
  limiter_unload();
  return test_summary();
}

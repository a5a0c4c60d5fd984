/* kill -9 test: no dead process can jam the limiter or leak its memory.
 *
 * 8 processes in 3 workers do random allocations, frees and compute ops on
 * 2 devices; 100 times one of them is SIGKILLed (wherever it is, usually
 * inside a limiter call) and replaced. Meanwhile the parent samples every
 * worker's usage against its limit. At the end the survivors stop, and the
 * books must balance to the byte three ways: each worker's recorded usage
 * = the limiter's per-process bytes summed over its live processes = what
 * those processes themselves hold. Every survivor times every limiter call;
 * the longest must stay under 50 ms.
 *
 * Usage: test_limiter_kill build/liblimiter.so build/libaccelerator.so */
#include "accelerator.h"
#include "limiter.h"
#include "../test_util.h"
#include "limiter_load.h"

#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum { PROCS = 8, WORKERS = 3, DEVS = 2 };
static const char *devs[DEVS] = {"stub-device-0", "stub-device-1"};
static const char *workers[WORKERS] = {"kill-w0", "kill-w1", "kill-w2"};
#define LIMIT 1000000ull

struct child_slot {
  _Atomic uint64_t max_wait_ns;
  _Atomic uint64_t ops;
  _Atomic uint64_t in_call_ns;
  _Atomic uint64_t held[DEVS];
  _Atomic int ready;
  _Atomic int errors;
};
struct shared {
  _Atomic int stop, leave;
  struct child_slot slot[PROCS];
};
static struct shared *S;

#define lerr() L.lastError()

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void sleep_us(long us) {
  struct timespec ts = {us / 1000000, (us % 1000000) * 1000L};
  while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {
  }
}

static void note_wait(struct child_slot *s, uint64_t t0) {
  uint64_t dt = now_ns() - t0;
  atomic_fetch_add(&s->in_call_ns, dt);
  if (dt > atomic_load(&s->max_wait_ns))
    atomic_store(&s->max_wait_ns, dt);
  atomic_fetch_add(&s->ops, 1);
}

static void child(int k) {
  struct child_slot *s = &S->slot[k];
  setenv("ACCELERATOR_WORKER_ID", workers[k % WORKERS], 1);
  char self[32];
  snprintf(self, sizeof self, "%d", (int)getpid());
  unsigned seed = (unsigned)getpid() * 2654435761u;
  uint64_t held[DEVS] = {0, 0};
  for (int d = 0; d < DEVS; d++)
    atomic_store(&s->held[d], 0);
  for (unsigned iter = 1; !atomic_load(&S->stop); iter++) {
    /* A hook calls the limiter between pieces of device work, not in a
     * tight loop: a short pause every few ops keeps 8 processes on a small
     * machine from turning scheduler preemption into "waits". */
    if (iter % 64 == 0)
      sleep_us(20);
    int d = rand_r(&seed) % DEVS;
    int what = rand_r(&seed) % 100;
    if (what < 45) {
      int64_t n = 1 + rand_r(&seed) % 200000;
      MemoryOpRecord r;
      uint64_t t0 = now_ns();
      int rc = L.mem(self, devs[d], n, &r);
      note_wait(s, t0);
      if (rc != RESULT_SUCCESS || r.availableBytes > LIMIT) {
        fprintf(stderr, "alloc rc=%d avail=%llu: %s\n", rc, (unsigned long long)r.availableBytes,
                lerr());
        atomic_fetch_add(&s->errors, 1);
      } else if (!r.shouldBlock) {
        held[d] += (uint64_t)n;
      }
    } else if (what < 80) {
      if (held[d] == 0)
        continue;
      int64_t n = 1 + (int64_t)(rand_r(&seed) % held[d]);
      MemoryOpRecord r;
      uint64_t t0 = now_ns();
      int rc = L.mem(self, devs[d], -n, &r);
      note_wait(s, t0);
      if (rc != RESULT_SUCCESS || r.shouldBlock) {
        fprintf(stderr, "free rc=%d block=%d: %s\n", rc, r.shouldBlock, lerr());
        atomic_fetch_add(&s->errors, 1);
      } else {
        held[d] -= (uint64_t)n;
      }
    } else {
      ComputeOpRecord c;
      uint64_t t0 = now_ns();
      int rc = L.compute(self, devs[d], 1 + rand_r(&seed) % 1000000, &c);
      note_wait(s, t0);
      if (rc != RESULT_SUCCESS) {
        fprintf(stderr, "compute rc=%d: %s\n", rc, lerr());
        atomic_fetch_add(&s->errors, 1);
      }
    }
  }
  for (int d = 0; d < DEVS; d++)
    atomic_store(&s->held[d], held[d]);
  atomic_store(&s->ready, 1);
  while (!atomic_load(&S->leave))
    sleep_us(1000);
  _exit(0);
}

static pid_t spawn(int k) {
  atomic_store(&S->slot[k].ready, 0);
  pid_t pid = fork();
  if (pid == 0)
    child(k);
  if (pid < 0) {
    perror("fork");
    exit(2);
  }
  return pid;
}

static void reap(pid_t pid) {
  while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
  }
}

static int limit_checks, limit_violations;

static void check_limits(void) {
  for (int w = 0; w < WORKERS; w++)
    for (int d = 0; d < DEVS; d++) {
      uint64_t used = 0, lim = 0;
      if (L.usage(workers[w], devs[d], &used, &lim) != RESULT_SUCCESS)
        continue; /* not seen yet */
      limit_checks++;
      if (used > LIMIT || lim != LIMIT)
        limit_violations++;
    }
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s liblimiter.so libaccelerator.so\n", argv[0]);
    return 2;
  }
  limiter_load(argv[1], argv[2]);
  unsetenv("ACCELERATOR_WORKER_ID");
  const int kills = test_quick() ? 10 : 100;
  S = mmap(NULL, sizeof *S, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  CHECK(S != MAP_FAILED, "mmap");
  for (int w = 0; w < WORKERS; w++)
    for (int d = 0; d < DEVS; d++) {
      EXPECT_RC_WITH(L.accLastError, L.setMem(workers[w], devs[d], LIMIT), RESULT_SUCCESS);
      EXPECT_RC_WITH(L.accLastError, L.setCompute(workers[w], devs[d], 30), RESULT_SUCCESS);
    }

  pid_t pids[PROCS];
  for (int k = 0; k < PROCS; k++)
    pids[k] = spawn(k);
  unsigned seed = 12345;
  uint64_t t_start = now_ns();
  for (int i = 0; i < kills; i++) {
    long wait_us = 2000 + rand_r(&seed) % 13000;
    for (long t = 0; t < wait_us; t += 1000) {
      sleep_us(1000);
      check_limits();
    }
    int k = rand_r(&seed) % PROCS;
    kill(pids[k], SIGKILL);
    reap(pids[k]);
    pids[k] = spawn(k);
  }
  sleep_us(20000);
  atomic_store(&S->stop, 1);
  for (int k = 0; k < PROCS; k++)
    while (!atomic_load(&S->slot[k].ready))
      sleep_us(500);
  check_limits();
  double secs = (double)(now_ns() - t_start) / 1e9;

  /* Reconcile: the sweep inside GetProcessMemoryUtilization reclaims what
   * the killed processes held; then the books balance to the byte. */
  static MemoryUtilization mu[4096];
  size_t n = 0;
  EXPECT_RC_WITH(L.accLastError, L.procMem(mu, 4096, &n), RESULT_SUCCESS);
  uint64_t ops = 0, max_wait = 0, in_call = 0;
  int errors = 0, balanced = 0;
  for (int k = 0; k < PROCS; k++) {
    ops += atomic_load(&S->slot[k].ops);
    in_call += atomic_load(&S->slot[k].in_call_ns);
    errors += atomic_load(&S->slot[k].errors);
    if (atomic_load(&S->slot[k].max_wait_ns) > max_wait)
      max_wait = atomic_load(&S->slot[k].max_wait_ns);
  }
  for (int w = 0; w < WORKERS; w++)
    for (int d = 0; d < DEVS; d++) {
      uint64_t used = 0, lim = 0, self_view = 0, reported = 0;
      EXPECT_RC_WITH(L.lastError, L.usage(workers[w], devs[d], &used, &lim), RESULT_SUCCESS);
      for (int k = w; k < PROCS; k += WORKERS) {
        self_view += atomic_load(&S->slot[k].held[d]);
        char id[32];
        snprintf(id, sizeof id, "%d", (int)pids[k]);
        for (size_t i = 0; i < n; i++)
          if (strcmp(mu[i].processId, id) == 0 && strcmp(mu[i].deviceUUID, devs[d]) == 0)
            reported += mu[i].usedBytes;
      }
      CHECK(used == self_view && used == reported,
            "%s on %s: worker usage %llu, survivors hold %llu, per-process sum %llu", workers[w],
            devs[d], (unsigned long long)used, (unsigned long long)self_view,
            (unsigned long long)reported);
      balanced += used == self_view && used == reported;
    }
  CHECK(errors == 0, "%d unexpected limiter results in the workers", errors);
  CHECK(limit_violations == 0, "%d of %d samples saw a worker past its limit", limit_violations,
        limit_checks);
  if (!test_quick())
    CHECK(max_wait < 50000000ull, "longest survivor wait %.3f ms (limit 50 ms)", max_wait / 1e6);

  atomic_store(&S->leave, 1);
  for (int k = 0; k < PROCS; k++)
    reap(pids[k]);
  EXPECT_RC_WITH(L.accLastError, L.procMem(mu, 4096, &n), RESULT_SUCCESS);
  int empty = 1;
  for (int w = 0; w < WORKERS; w++)
    for (int d = 0; d < DEVS; d++) {
      uint64_t used = 1, lim = 0;
      L.usage(workers[w], devs[d], &used, &lim);
      empty &= used == 0;
    }
  CHECK(empty, "after every process exited, every worker's usage is 0");

  printf("kill test: %d SIGKILLs in %.1f s, %d processes (%d workers, %d devices), %llu limiter "
         "calls (%.0f%% of the processes' time inside them), %d/%d usage samples within limits, %d/%d worker-device books balanced to the "
         "byte, longest survivor wait %.3f ms\n",
         kills, secs, PROCS, WORKERS, DEVS, (unsigned long long)ops,
         100.0 * (double)in_call / (secs * 1e9 * PROCS),
         limit_checks - limit_violations, limit_checks, balanced, WORKERS * DEVS, max_wait / 1e6);
  munmap(S, sizeof *S);
  limiter_unload();
  return test_summary();
}

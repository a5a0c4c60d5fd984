/* The host's calls cost what changed, not what exists (docs/scale.md, "Host
 * calls: a view kept current"): run under `strace -o TRACE` (this thread
 * only: no -f), with markers written around each measured loop, by
 * `make host-calls-test`, whose check_host_calls.sh counts the system calls
 * between the markers.
 *
 * Usage: test_host_calls LIBLIMITER LIBACCELERATOR DEVICE_UUID
 * (libaccelerator of the nvidia build on the fake NVML.) N workers with a
 * memory limit and one forked process each, registered by its own
 * allocation through the limiter (as a hooked process is). Then, between
 * markers, REPS calls each of limiterGetWorkerUsage, AddWorkerProcess of a
 * process already registered, GetProcessMemoryUtilization and
 * AccelGetProcessInformation. And what the view must see at once: a killed
 * process leaves the reports and its bytes leave its worker's usage; a new
 * worker's process appears; a removed worker's books are gone. */
#include "host_api.h"
#include "../test_util.h"
#include "worker_proc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { WORKERS = 100, REPS = 200 };

static const char *dev;
static MemoryUtilization listed[256];

/* A marker in the trace: a write to a closed descriptor (EBADF). */
static void mark(const char *what) {
  ssize_t r = write(-1, what, strlen(what));
  (void)r;
}

/* Entries of the v1 memory report naming `pid`. */
static int reported(pid_t pid) {
  size_t n = 0;
  if (procMem(listed, sizeof listed / sizeof listed[0], &n) != RESULT_SUCCESS)
    return -1;
  int found = 0;
  char id[16];
  snprintf(id, sizeof id, "%d", (int)pid);
  for (size_t i = 0; i < n; i++)
    found += strcmp(listed[i].processId, id) == 0;
  return found;
}

/* A process of worker `w` as a container's is: started (exec) with its
 * ACCELERATOR_WORKER_ID, not yet using the limiter (the host registers it). */
static pid_t started_as(const char *w) {
  pid_t pid = fork();
  if (pid == 0) {
    setenv("ACCELERATOR_WORKER_ID", w, 1);
    execl("/bin/sleep", "sleep", "600", (char *)NULL);
    _exit(127);
  }
  usleep(50 * 1000); /* exec'd: its environment is the new one */
  return pid;
}

static uint64_t used(const char *w) {
  uint64_t u = 0, l = 0;
  return usage(w, dev, &u, &l) == RESULT_SUCCESS ? u : UINT64_MAX;
}

int main(int argc, char **argv) {
  if (argc < 4 || !getenv("ACCELERATOR_STATE_DIR")) {
    fprintf(stderr, "usage: ACCELERATOR_STATE_DIR=dir %s liblimiter.so libaccelerator.so device-uuid\n", argv[0]);
    return 2;
  }
  dev = argv[3];
  unsetenv("ACCELERATOR_WORKER_ID");
  host_api_load(argv[1], argv[2]);

  pid_t pids[WORKERS];
  char w[64];
  for (int i = 0; i < WORKERS; i++) {
    snprintf(w, sizeof w, "calls-%d", i);
    CHECK(setMem(w, dev, 1ULL << 30) == RESULT_SUCCESS && setCompute(w, dev, 50) == RESULT_SUCCESS, "limit %s", w);
    pids[i] = worker_process(mem, w, dev);
    CHECK(pids[i] > 0, "a process of %s registered", w);
  }
  /* AddWorkerProcess's process: a container's, registered by the host. */
  pid_t added = started_as("calls-0");
  char pid0[16];
  snprintf(pid0, sizeof pid0, "%d", (int)added);
  size_t cap = WORKERS + 16, count = 0;
  void *buf = calloc(cap, 512);
  uint64_t u = 0, l = 0;
  /* Each call once first: whatever a first look costs is paid here. */
  CHECK(usage("calls-0", dev, &u, &l) == RESULT_SUCCESS && u == 1 << 20, "calls-0 uses 1 MiB (%llu)",
        (unsigned long long)u);
  CHECK(addProcess(dev, pid0) == RESULT_SUCCESS, "AddWorkerProcess of a container's process");
  CHECK(addProcess(dev, pid0) == RESULT_SUCCESS, "AddWorkerProcess again (registered)");
  CHECK(procInfo(buf, cap, &count) == RESULT_SUCCESS && count == WORKERS + 1, "v2: %d processes (%zu)",
        WORKERS + 1, count);
  CHECK(reported(pids[0]) == 1 && reported(added) == 1, "v1 reports each process once");

  mark("begin usage");
  for (int r = 0; r < REPS; r++)
    usage("calls-0", dev, &u, &l);
  mark("end usage");
  mark("begin add");
  for (int r = 0; r < REPS; r++)
    addProcess(dev, pid0);
  mark("end add");
  mark("begin v1");
  for (int r = 0; r < REPS; r++)
    procMem(listed, sizeof listed / sizeof listed[0], &count);
  mark("end v1");
  mark("begin v2");
  for (int r = 0; r < REPS; r++)
    procInfo(buf, cap, &count);
  mark("end v2");
  printf("measured %d calls of each at %d workers x 1 process (state directory: %llu KiB)\n", REPS, WORKERS,
         (unsigned long long)tree_ram(getenv("ACCELERATOR_STATE_DIR")) / 1024);

  /* What changed is seen at once. */
  end_worker_process(pids[0]);
  CHECK(used("calls-0") == 0, "a killed process's bytes leave its worker's usage at once (%llu)",
        (unsigned long long)used("calls-0"));
  CHECK(reported(pids[0]) == 0, "a killed process leaves the reports at once");
  CHECK(procInfo(buf, cap, &count) == RESULT_SUCCESS && count == WORKERS, "v2: %d processes (%zu)", WORKERS,
        count);
  end_worker_process(added);
  CHECK(reported(added) == 0, "a registered process that exits leaves the reports at once");
  CHECK(addProcess(dev, pid0) == RESULT_ERROR_NOT_FOUND, "AddWorkerProcess of a process gone: NOT_FOUND");
  pid_t fresh = worker_process(mem, "calls-new", dev);
  CHECK(fresh > 0 && reported(fresh) == 1, "a new worker's process is reported at once");
  CHECK(used("calls-new") == 1 << 20, "the new worker uses 1 MiB");
  end_worker_process(fresh);
  CHECK(removeWorker(NULL, "calls-new") == RESULT_SUCCESS, "the new worker removed");
  CHECK(usage("calls-new", dev, &u, &l) == RESULT_ERROR_NOT_FOUND, "a removed worker is not found");
  pid_t again = worker_process(mem, "calls-new", dev);
  CHECK(again > 0 && reported(again) == 1 && used("calls-new") == 1 << 20,
        "a worker made again under the same id is reported from its new books");
  end_worker_process(again);
  for (int i = 1; i < WORKERS; i++)
    end_worker_process(pids[i]);
  CHECK(procInfo(buf, cap, &count) == RESULT_SUCCESS && count == 0, "no process left (%zu)", count);
  free(buf);
  return test_summary();
}

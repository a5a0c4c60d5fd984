/* fork() from a threaded host while its threads are inside the vendor
 * (issue 23): 4 threads call every vendor function in a loop (discovery,
 * templates, topology, metrics, extended metrics, per-process reports,
 * assign + remove of a partition) while the main thread forks 500 times.
 * Each child, under alarm(10), calls the functions whose locks the threads
 * held (metrics, extended metrics, a partition call) and exits normally
 * (its library destructors run too): a child still there at the alarm is a
 * hang. 0 hangs, 0 failed children.
 *
 * The vendor is the one the environment selects (the Makefile runs it on
 * the stub, the NVIDIA fakes and the Ascend fake).
 *
 * Usage: test_fork_vendors libaccelerator_X.so [forks] */
#include "accelerator.h"
#include "test_util.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_DEVS 16
#define NVL 32

static struct {
  __typeof__(&GetDeviceCount) count;
  __typeof__(&GetAllDevices) all;
  __typeof__(&GetPartitionTemplates) templates;
  __typeof__(&GetDeviceTopology) topology;
  __typeof__(&GetDeviceMetrics) metrics;
  __typeof__(&GetExtendedDeviceMetrics) extended;
  __typeof__(&GetProcessComputeUtilization) procCompute;
  __typeof__(&GetProcessMemoryUtilization) procMem;
  __typeof__(&AssignPartition) assign;
  __typeof__(&RemovePartition) remove;
  __typeof__(&acceleratorVendorName) vendor;
} A;

static const char *uuids[MAX_DEVS];
static char uuid_store[MAX_DEVS][64];
static size_t ndev;
static char tpl[64];
static atomic_int stop;

static void *sym(void *lib, const char *name) {
  void *p = dlsym(lib, name);
  if (!p) {
    fprintf(stderr, "missing %s\n", name);
    exit(2);
  }
  return p;
}

/* The calls whose vendor locks a forking thread may find held; 0: every
 * call returned (any result code: only a hang is a failure here). */
static void metrics_calls(void) {
  DeviceMetrics m[MAX_DEVS];
  A.metrics(uuids, ndev, m);
  static __thread uint32_t nvl[MAX_DEVS][NVL], pcie[MAX_DEVS][4];
  static __thread uint64_t ib[MAX_DEVS][4];
  ExtendedDeviceMetrics x[MAX_DEVS];
  for (size_t i = 0; i < ndev; i++) {
    x[i].nvlinkBandwidthMBps = nvl[i];
    x[i].ibNicBandwidthMBps = ib[i];
    x[i].pcieBandwidthMBps = pcie[i];
  }
  A.extended(uuids, ndev, x, NVL, 4, 4);
}

static void partition_calls(void) {
  if (ndev == 0)
    return;
  /* A template that does not exist: the vendor takes its partition lock,
   * then refuses; nothing is created. */
  PartitionAssignment pa;
  memset(&pa, 0, sizeof pa);
  snprintf(pa.templateId, sizeof pa.templateId, "no-such-template");
  snprintf(pa.deviceUUID, sizeof pa.deviceUUID, "%s", uuids[0]);
  A.assign(&pa);
  A.remove("no-such-template", uuids[0]);
}

static void *caller(void *arg) {
  long k = (long)arg;
  static __thread ExtendedDeviceInfo infos[MAX_DEVS];
  static __thread PartitionTemplate t[32];
  static __thread ComputeUtilization cu[256];
  static __thread MemoryUtilization mu[256];
  while (!atomic_load(&stop)) {
    size_t n = 0;
    A.count(&n);
    A.all(infos, MAX_DEVS, &n);
    A.templates(0, t, 32, &n);
    int32_t idx[2] = {0, ndev > 1 ? 1 : 0};
    DeviceTopology dt[2];
    RelatedDevice conn[2][8];
    dt[0].connections = conn[0];
    dt[1].connections = conn[1];
    ExtendedDeviceTopology topo;
    memset(&topo, 0, sizeof topo);
    topo.devices = dt;
    if (ndev)
      A.topology(idx, ndev > 1 ? 2 : 1, &topo, 8);
    metrics_calls();
    A.procCompute(cu, 256, &n);
    A.procMem(mu, 256, &n);
    if (k == 0 && tpl[0]) {
      /* A real partition, made and removed (one thread: the budget). */
      PartitionAssignment pa;
      memset(&pa, 0, sizeof pa);
      snprintf(pa.templateId, sizeof pa.templateId, "%s", tpl);
      snprintf(pa.deviceUUID, sizeof pa.deviceUUID, "%s", uuids[0]);
      if (A.assign(&pa))
        A.remove(pa.partitionUUID, uuids[0]);
    } else {
      partition_calls();
    }
  }
  return NULL;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s libaccelerator_X.so [forks]\n", argv[0]);
    return 2;
  }
  int forks = argc > 2 ? atoi(argv[2]) : 500;
  void *lib = dlopen(argv[1], RTLD_NOW | RTLD_GLOBAL);
  if (!lib) {
    fprintf(stderr, "dlopen %s: %s\n", argv[1], dlerror());
    return 2;
  }
  *(void **)&A.count = sym(lib, "GetDeviceCount");
  *(void **)&A.all = sym(lib, "GetAllDevices");
  *(void **)&A.templates = sym(lib, "GetPartitionTemplates");
  *(void **)&A.topology = sym(lib, "GetDeviceTopology");
  *(void **)&A.metrics = sym(lib, "GetDeviceMetrics");
  *(void **)&A.extended = sym(lib, "GetExtendedDeviceMetrics");
  *(void **)&A.procCompute = sym(lib, "GetProcessComputeUtilization");
  *(void **)&A.procMem = sym(lib, "GetProcessMemoryUtilization");
  *(void **)&A.assign = sym(lib, "AssignPartition");
  *(void **)&A.remove = sym(lib, "RemovePartition");
  *(void **)&A.vendor = sym(lib, "acceleratorVendorName");

  static ExtendedDeviceInfo infos[MAX_DEVS];
  int rc = A.all(infos, MAX_DEVS, &ndev);
  CHECK(rc == RESULT_SUCCESS, "GetAllDevices: %d", rc);
  for (size_t i = 0; i < ndev; i++) {
    snprintf(uuid_store[i], sizeof uuid_store[i], "%.63s", infos[i].basic.uuid);
    uuids[i] = uuid_store[i];
  }
  PartitionTemplate t[32];
  size_t nt = 0;
  if (ndev && A.templates(0, t, 32, &nt) == RESULT_SUCCESS && nt > 0)
    snprintf(tpl, sizeof tpl, "%s", t[0].templateId);
  CHECK(ndev > 0, "%s: devices found (%zu)", A.vendor(), ndev);

  pthread_t th[4];
  for (long k = 0; k < 4; k++)
    pthread_create(&th[k], NULL, caller, (void *)k);
  usleep(50000);
  int hung = 0, failed = 0, done = 0;
  for (int i = 0; i < forks; i++) {
    pid_t pid = fork();
    if (pid == 0) {
      alarm(10);
      metrics_calls();
      partition_calls();
      size_t n = 0;
      MemoryUtilization mu[64];
      A.procMem(mu, 64, &n);
      exit(0);
    }
    if (pid < 0) {
      failed++;
      continue;
    }
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    if (WIFSIGNALED(st) && WTERMSIG(st) == SIGALRM)
      hung++;
    else if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
      failed++;
    else
      done++;
  }
  atomic_store(&stop, 1);
  for (int k = 0; k < 4; k++)
    pthread_join(th[k], NULL);
  printf("%s: %d forks while 4 threads call every vendor function: %d hung, %d failed, %d fine\n", A.vendor(),
         forks, hung, failed, done);
  CHECK(hung == 0 && failed == 0 && done == forks, "every forked child's vendor calls returned");
  return test_summary();
}

/* What the suites of the vendors that load a fake driver library
 * (test_amd.c, test_ascend.c) share: the library under test, dlopened per
 * scenario as one vendor; the calls every scenario makes; and the driver
 * that runs each scenario in a fresh forked child (a vendor and its driver
 * library are chosen once per process) and adds up the counts the child
 * reports through a pipe.
 *
 * A suite sets suite_lib_path, lists its scenarios as `struct run` and
 * returns suite_run(runs, n, before) from main. */
#ifndef VENDOR_SUITE_H
#define VENDOR_SUITE_H
#include "accelerator.h"
#include "test_util.h"
#include "vendor_api.h"

#include <dlfcn.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *suite_lib_path;
static void *lib;

VENDOR_API(VENDOR_API_SYM)

#define EXPECT_RC(call, code) EXPECT_RC_WITH(p_acceleratorGetLastError, call, code)

#define GIB (1ull << 30)
#define MIB (1ull << 20)

/* dlopen the library under test as `vendor` and resolve its ABI. */
static void suite_load(const char *vendor) {
  setenv("ACCELERATOR_VENDOR", vendor, 1);
  lib = dlopen(suite_lib_path, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    fprintf(stderr, "dlopen %s: %s\n", suite_lib_path, dlerror());
    exit(2);
  }
  VENDOR_API(VENDOR_API_LOAD)
}

static size_t count(void) {
  size_t n = 999;
  EXPECT_RC(p_getDeviceCount(&n), RESULT_SUCCESS);
  return n;
}

static const char *err(void) {
  const char *e = p_acceleratorGetLastError();
  return e ? e : "";
}

static bool assign(const char *tpl, const char *dev, char *uuid_out) {
  PartitionAssignment a;
  memset(&a, 0, sizeof a);
  snprintf(a.templateId, sizeof a.templateId, "%s", tpl);
  snprintf(a.deviceUUID, sizeof a.deviceUUID, "%s", dev);
  bool ok = p_assignPartition(&a);
  if (uuid_out)
    snprintf(uuid_out, 64, "%s", ok ? a.partitionUUID : "");
  return ok;
}

/* The vendor stands in without devices: 0 of them, index 0 not found, and
 * its name still `vendor`. */
static void expect_no_devices(const char *vendor, const char *why) {
  CHECK(count() == 0, "%s: expected 0 devices", why);
  ExtendedDeviceInfo info;
  memset(&info, 0, sizeof info);
  EXPECT_RC(p_getDeviceInfo(0, &info), RESULT_ERROR_NOT_FOUND);
  CHECK(strcmp(p_acceleratorVendorName(), vendor) == 0, "%s: vendor %s", why, p_acceleratorVendorName());
}

/* One scenario: `fn()`, or `with(arg)` where fn is NULL, in a child whose
 * environment also has `env` ("NAME=value"). */
struct run {
  const char *name;
  void (*fn)(void);
  const char *env[3];
  void (*with)(const char *arg);
  const char *arg;
};

static int suite_passed, suite_failed;

static void run_child(const struct run *r) {
  int fds[2];
  if (pipe(fds) != 0) {
    perror("pipe");
    exit(2);
  }
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    for (int i = 0; i < 3 && r->env[i]; i++)
      putenv((char *)r->env[i]);
    if (r->fn)
      r->fn();
    else
      r->with(r->arg);
    int counts[2] = {atomic_load(&test_passed), atomic_load(&test_failed)};
    if (write(fds[1], counts, sizeof counts) != (ssize_t)sizeof counts)
      _exit(3);
    close(fds[1]);
    dlclose(lib);
    exit(0);
  }
  close(fds[1]);
  int counts[2] = {0, 0};
  ssize_t got = read(fds[0], counts, sizeof counts);
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  suite_passed += counts[0];
  suite_failed += counts[1];
  if (got != (ssize_t)sizeof counts || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    fprintf(stderr, "FAIL scenario %s: child status %d\n", r->name, status);
    suite_failed++;
  } else if (counts[1]) {
    fprintf(stderr, "scenario %s: %d failed\n", r->name, counts[1]);
  }
}

/* Run every scenario (`before`, if any, first in the parent) and report. */
static int suite_run(const struct run *runs, size_t n, void (*before)(const struct run *)) {
  for (size_t i = 0; i < n; i++) {
    if (before)
      before(&runs[i]);
    run_child(&runs[i]);
  }
  atomic_store(&test_passed, suite_passed);
  atomic_store(&test_failed, suite_failed);
  return test_summary();
}
#endif

/* The compute sampler after fork() from a threaded host (ABI.md: every
 * function is safe in the child after fork()).
 *
 * One thread starts and stops the sampler in a loop (AccelInit, a compute
 * hard limit, AccelShutdown: the stop joins the sampler thread) while the
 * main thread forks; each child starts its own sampler, sets a limit and
 * shuts it down, then exits, under an alarm: a child that copied a lock
 * held by a thread it does not have, or its parent's stop flag, hangs and
 * the alarm kills it.
 *
 * usage: test_sampler_fork LIBACCELERATOR (nvidia, with the fake NVML:
 *        ACCELERATOR_VENDOR=nvidia ACCELERATOR_NVML_PATH=...) */
#include "../test_util.h"
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define UUID0 "GPU-11111111-1111-1111-1111-1111111111a4"
#define FORKS 60

static int (*accel_init)(void);
static int (*accel_shutdown)(void);
static int (*set_compute)(const char *, const char *, uint32_t);
static atomic_bool done;
static atomic_int cycles;

static void *churn(void *arg) {
  (void)arg;
  while (!atomic_load(&done)) {
    accel_init();
    set_compute("fork-churn", UUID0, 50);
    accel_shutdown();
    atomic_fetch_add(&cycles, 1);
  }
  return NULL;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s LIBACCELERATOR\n", argv[0]);
    return 2;
  }
  void *acc = dlopen(argv[1], RTLD_NOW | RTLD_GLOBAL);
  if (!acc) {
    fprintf(stderr, "dlopen: %s\n", dlerror());
    return 2;
  }
  accel_init = (int (*)(void))dlsym(acc, "AccelInit");
  accel_shutdown = (int (*)(void))dlsym(acc, "AccelShutdown");
  set_compute = (int (*)(const char *, const char *, uint32_t))dlsym(acc, "SetComputeUnitHardLimit");
  if (!accel_init || !accel_shutdown || !set_compute) {
    fprintf(stderr, "dlsym: %s\n", dlerror());
    return 2;
  }
  CHECK(accel_init() == 0, "AccelInit");
  CHECK(set_compute("fork-churn", UUID0, 50) == 0, "SetComputeUnitHardLimit");
  CHECK(accel_shutdown() == 0, "AccelShutdown");

  pthread_t t;
  CHECK(pthread_create(&t, NULL, churn, NULL) == 0, "churn thread");
  int hung = 0, failed = 0;
  for (int i = 0; i < FORKS; i++) {
    pid_t pid = fork();
    if (pid == 0) {
      alarm(3);
      int rc = accel_shutdown();
      rc |= accel_init();
      rc |= set_compute("fork-child", UUID0, 30);
      rc |= accel_shutdown();
      _exit(rc == 0 ? 0 : 1);
    }
    int st = 0;
    if (pid < 0 || waitpid(pid, &st, 0) != pid)
      failed++;
    else if (WIFSIGNALED(st) && WTERMSIG(st) == SIGALRM)
      hung++;
    else if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
      failed++;
    struct timespec pause = {0, 2 * 1000 * 1000};
    nanosleep(&pause, NULL);
  }
  atomic_store(&done, 1);
  pthread_join(t, NULL);
  CHECK(hung == 0, "%d of %d children hung after fork()", hung, FORKS);
  CHECK(failed == 0, "%d of %d children failed", failed, FORKS);
  CHECK(atomic_load(&cycles) > 0, "the churn thread started and stopped the sampler");
  printf("%d forks, %d start/stop cycles meanwhile\n", FORKS, atomic_load(&cycles));
  return test_summary();
}

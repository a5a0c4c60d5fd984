/* A simulated device timeline shared by every process of a test through
 * the file named by FAKE_GPU_TIMELINE: per device, the time the device is
 * busy until, and per process the device time its kernels took. The fake
 * driver's launches advance it (kernels serialize, as on one GPU); the fake
 * NVML reports per-process utilization from it. Times: CLOCK_MONOTONIC ns.
 * A process's device time is counted as its kernels run (`tl_busy`): the
 * parts still to run of its last TL_RING kernels are left out (the fake
 * driver never lets a process queue more), so a 100 ms graph shows as it
 * runs, not at its launch. */
#ifndef FAKE_TIMELINE_H
#define FAKE_TIMELINE_H

#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define TL_DEVS 2
#define TL_PIDS 256
#define TL_RING 256

struct tl_proc {
  unsigned pid;
  unsigned long long busy_ns;
  /* The process's kernels so far, and the last TL_RING of them (start, end). */
  unsigned long long kernels;
  unsigned long long ring[TL_RING][2];
};
struct tl_dev {
  unsigned long long busy_until;
  struct tl_proc procs[TL_PIDS];
};
struct timeline {
  struct tl_dev dev[TL_DEVS];
};

static inline unsigned long long tl_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (unsigned long long)ts.tv_sec * 1000000000ULL + (unsigned long long)ts.tv_nsec;
}

/* The mapped timeline, or NULL when FAKE_GPU_TIMELINE is unset. */
static inline struct timeline *tl_map(void) {
  static struct timeline *t;
  static int tried;
  if (__atomic_load_n(&tried, __ATOMIC_ACQUIRE))
    return t;
  const char *path = getenv("FAKE_GPU_TIMELINE");
  if (path) {
    int fd = open(path, O_RDWR | O_CREAT, 0600);
    if (fd >= 0) {
      if (lseek(fd, 0, SEEK_END) < (off_t)sizeof *t && ftruncate(fd, sizeof *t) != 0) {
        close(fd);
        fd = -1;
      }
    }
    if (fd >= 0) {
      void *p = mmap(NULL, sizeof *t, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      close(fd);
      if (p != MAP_FAILED)
        t = p;
    }
  }
  __atomic_store_n(&tried, 1, __ATOMIC_RELEASE);
  return t;
}

/* The entry of `pid` on a device, claimed if new; NULL when full. */
static inline struct tl_proc *tl_proc(struct tl_dev *d, unsigned pid) {
  for (int i = 0; i < TL_PIDS; i++) {
    unsigned cur = __atomic_load_n(&d->procs[i].pid, __ATOMIC_ACQUIRE);
    if (cur == pid)
      return &d->procs[i];
    unsigned zero = 0;
    if (cur == 0 && __atomic_compare_exchange_n(&d->procs[i].pid, &zero, pid, 0,
                                                __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
      return &d->procs[i];
    if (zero == pid)
      return &d->procs[i];
  }
  return NULL;
}

/* The device time of `p`'s kernels up to `now`. (Read while the process
 * launches, a reading may come out a little low: readers take a reading
 * below an earlier one as no progress.) */
static inline unsigned long long tl_busy(struct tl_proc *p, unsigned long long now) {
  unsigned long long busy = __atomic_load_n(&p->busy_ns, __ATOMIC_ACQUIRE);
  unsigned long long n = __atomic_load_n(&p->kernels, __ATOMIC_ACQUIRE), left = 0;
  for (unsigned long long k = n > TL_RING ? n - TL_RING : 0; k < n; k++) {
    unsigned long long start = __atomic_load_n(&p->ring[k % TL_RING][0], __ATOMIC_ACQUIRE);
    unsigned long long end = __atomic_load_n(&p->ring[k % TL_RING][1], __ATOMIC_ACQUIRE);
    if (end > now)
      left += end - (start > now ? start : now);
  }
  return busy - (left < busy ? left : busy);
}

#endif

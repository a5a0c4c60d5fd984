/* Workers' processes and the state directory's RAM, for the limiter's
 * lifetime test and scale benchmark (docs/scale.md). */
#ifndef WORKER_PROC_H
#define WORKER_PROC_H

#include "limiter.h"

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* A process of worker `w`: forked, asks for `bytes` on `dev` through the
 * limiter's `mem` (registering itself in w's books, as a hooked process
 * does), then waits to be killed. Its pid, and in *blocked whether the
 * limiter refused the bytes; -1 when the call failed. */
static pid_t asking_process(__typeof__(&CheckAndRecordMemoryOps) mem, const char *w, const char *dev,
                            int64_t bytes, int *blocked) {
  int p[2];
  if (pipe(p) != 0)
    return -1;
  pid_t pid = fork();
  if (pid == 0) {
    close(p[0]);
    setenv("ACCELERATOR_WORKER_ID", w, 1);
    char me[16];
    snprintf(me, sizeof me, "%d", (int)getpid());
    MemoryOpRecord r;
    memset(&r, 0, sizeof r);
    char b = mem(me, dev, bytes, &r) != RESULT_SUCCESS ? 'e' : r.shouldBlock ? 'b' : 'a';
    if (write(p[1], &b, 1) != 1)
      _exit(1);
    for (;;)
      pause();
  }
  close(p[1]);
  char b = 0;
  if (pid < 0 || read(p[0], &b, 1) != 1 || b == 'e') {
    if (pid > 0) {
      kill(pid, SIGKILL);
      waitpid(pid, NULL, 0);
    }
    pid = -1;
  }
  *blocked = b == 'b';
  close(p[0]);
  return pid;
}

static inline void end_worker_process(pid_t pid) {
  if (pid > 0) {
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
  }
}

/* A process of worker `w` that allocated 1 MiB on `dev` (see
 * asking_process) and waits to be killed; -1 when the allocation failed. */
static pid_t worker_process(__typeof__(&CheckAndRecordMemoryOps) mem, const char *w, const char *dev) {
  int blocked = 0;
  pid_t pid = asking_process(mem, w, dev, 1 << 20, &blocked);
  if (blocked) {
    end_worker_process(pid);
    pid = -1;
  }
  return pid;
}

/* RAM a tree takes on tmpfs: its files' and directories' allocated blocks. */
static uint64_t tree_ram_bytes;
static int tree_ram_add(const char *p, const struct stat *st, int flag, struct FTW *f) {
  (void)p, (void)flag, (void)f;
  tree_ram_bytes += (uint64_t)st->st_blocks * 512;
  return 0;
}
static inline uint64_t tree_ram(const char *path) {
  tree_ram_bytes = 0;
  nftw(path, tree_ram_add, 16, FTW_PHYS);
  return tree_ram_bytes;
}

#endif

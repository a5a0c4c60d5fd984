/* For the container tests: a process started through
 * `unshare --pid --fork --mount-proc` is the child of the `unshare`
 * process; its pid as the caller's pid namespace sees it. */
#ifndef ACCELERATOR_NS_UTIL_H
#define ACCELERATOR_NS_UTIL_H

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

/* The (first) child of `parent`, waited for up to 5 s; -1 if none. */
static inline pid_t child_of(pid_t parent) {
  for (int tries = 0; tries < 500; tries++) {
    DIR *d = opendir("/proc");
    struct dirent *e;
    while (d && (e = readdir(d))) {
      char path[300], buf[4096];
      snprintf(path, sizeof path, "/proc/%s/status", e->d_name);
      FILE *f = fopen(path, "r");
      if (!f)
        continue;
      size_t n = fread(buf, 1, sizeof buf - 1, f);
      fclose(f);
      buf[n] = 0;
      char *pp = strstr(buf, "\nPPid:");
      if (pp && atoi(pp + 6) == parent) {
        pid_t child = (pid_t)atoi(e->d_name); /* before closedir frees `e` */
        closedir(d);
        return child;
      }
    }
    if (d)
      closedir(d);
    usleep(10000);
  }
  return -1;
}

/* The start time (field 22) in a /proc/<pid>/stat; 0 when unreadable. */
static inline unsigned long long start_of(const char *stat_path) {
  unsigned long long start = 0;
  FILE *st = fopen(stat_path, "r");
  if (st && fscanf(st, "%*d (%*[^)]) %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d "
                       "%*d %*d %llu",
                   &start) != 1)
    start = 0;
  if (st)
    fclose(st);
  return start;
}

#endif

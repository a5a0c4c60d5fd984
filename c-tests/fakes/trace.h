/* The calls a fake library answered, in order, for the tests that compare
 * what a program makes the library see with the hook and without it: with
 * the environment variable `env` naming a file, each call appends its
 * function's name and a newline (O_APPEND, one write per call: whole lines
 * from every thread and process). The variable is read once per process. */
#ifndef FAKE_TRACE_H
#define FAKE_TRACE_H
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void fake_trace(const char *env, const char *fn) {
  static const char *path;
  static int read_once;
  if (!read_once) {
    path = getenv(env);
    read_once = 1;
  }
  if (!path || !*path)
    return;
  int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0)
    return;
  char line[128];
  size_t n = strlen(fn);
  if (n > sizeof line - 1)
    n = sizeof line - 1;
  memcpy(line, fn, n);
  line[n++] = '\n';
  ssize_t w = write(fd, line, n);
  (void)w;
  close(fd);
}
#endif

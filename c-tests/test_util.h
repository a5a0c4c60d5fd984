/* A minimal test harness shared by the C suites.
 *
 * CHECK(cond, ...) records one assertion; EXPECT_RC(call, code) checks a
 * Result and prints the library's last error when it differs. A suite
 * ends with `return test_summary();`, whose last line reads
 * "N passed, N failed" and whose exit status is non-zero on any failure. */
#ifndef ACCELERATOR_TEST_UTIL_H
#define ACCELERATOR_TEST_UTIL_H

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static atomic_int test_passed;
static atomic_int test_failed;

static void test_fail(const char *file, int line, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "FAIL %s:%d: ", file, line);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  atomic_fetch_add(&test_failed, 1);
}

#define CHECK(cond, ...)                                                       \
  do {                                                                         \
    if (cond)                                                                  \
      atomic_fetch_add(&test_passed, 1);                                       \
    else                                                                       \
      test_fail(__FILE__, __LINE__, __VA_ARGS__);                              \
  } while (0)

/* A call that returns a status code: it must be `expected`. */
#define EXPECT(call, expected)                                                 \
  do {                                                                         \
    int rc_ = (int)(call);                                                     \
    CHECK(rc_ == (int)(expected), "%s returned %d, expected %d", #call, rc_,   \
          (int)(expected));                                                    \
  } while (0)

/* `lasterr` is a function returning the library's last error text (NULL ok). */
#define EXPECT_RC_WITH(lasterr, call, expected)                                \
  do {                                                                         \
    int rc_ = (int)(call);                                                     \
    const char *le_ = (lasterr) ? (lasterr)() : "";                            \
    CHECK(rc_ == (int)(expected), "%s returned %d, expected %d (%s)", #call,   \
          rc_, (int)(expected), le_ ? le_ : "");                               \
  } while (0)

/* Run `cmd` (a child that prints "<failures> <what it saw>") and read its
 * reply: the failure count (-1 when it printed none), the rest of the line
 * in `out`. */
static inline int child_reply(const char *cmd, char *out, size_t n) {
  FILE *p = popen(cmd, "r");
  int failures = -1;
  out[0] = 0;
  if (p) {
    if (fscanf(p, "%d ", &failures) != 1 || !fgets(out, (int)n, p))
      failures = -1;
    pclose(p);
  }
  out[strcspn(out, "\n")] = 0;
  return failures;
}

static inline int test_quick(void) {
  /* Under valgrind the suites scale their loops down. */
  return getenv("ACCELERATOR_TEST_QUICK") != NULL;
}

static int test_summary(void) {
  int p = atomic_load(&test_passed), f = atomic_load(&test_failed);
  printf("%d passed, %d failed\n", p, f);
  fflush(stdout);
  return f == 0 ? 0 : 1;
}

/* The whole file `path` (up to 1 MiB), NUL-terminated, its length in *len;
 * NULL when unreadable. The caller frees it. */
static inline char *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return NULL;
  char *buf = malloc(1 << 20);
  *len = buf ? fread(buf, 1, (1 << 20) - 1, f) : 0;
  fclose(f);
  if (buf)
    buf[*len] = 0;
  return buf;
}

#endif

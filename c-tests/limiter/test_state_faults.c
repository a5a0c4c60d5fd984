/* Hostile conditions for the node-wide state files (issue 15).
 *
 * stub-state (the simulator's partitions, through libaccelerator):
 * - every edit the library did not make is refused with an error naming
 *   the file, and the file is kept byte for byte: a cut at a line boundary,
 *   a cut mid-line, a changed template, a removed seq line, and (with the
 *   checksum recomputed, as a careful editor would) an unknown template and
 *   a missing seq line;
 * - 8 writer processes assigning and removing while the old lock file and
 *   any temporary files are deleted under them: no UUID handed out twice,
 *   no failed replace, the slice budget exact afterwards;
 * - fork() from a process whose threads update the state and the limiter:
 *   every child's own updates complete (none inherits a held lock), and the
 *   parent's threads keep going.
 * limiter.shm:
 * - 1,000 made-up device UUIDs from a process that then exits, and from
 *   one that lives on: each named at most 48 (the rest refused with an
 *   error naming the device), and afterwards known devices, a device never
 *   named before and the host's limits all work.
 *
 * Usage: test_state_faults build/liblimiter.so build/libaccelerator.so */
#include "accelerator.h"
#include "limiter.h"
#include "../test_util.h"
#include "limiter_load.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define DEV0 "stub-device-0"
#define DEV1 "stub-device-1"
#define TPL "mig-1g.7gb"
#define SLICES 7

static char state_dir[PATH_MAX], state_file[PATH_MAX + 16];
static char me[32];

#define aerr() L.accLastError()

static char *slurp(const char *path, size_t *len) {
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

static void spit(const char *path, const char *text, size_t len) {
  char tmp[PATH_MAX + 32];
  snprintf(tmp, sizeof tmp, "%s.c-test", path);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd >= 0) {
    CHECK(write(fd, text, len) == (ssize_t)len, "write %s", tmp);
    close(fd);
  }
  CHECK(rename(tmp, path) == 0, "rename to %s: %s", path, strerror(errno));
}

static uint64_t fnv(const char *s, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; i++)
    h = (h ^ (unsigned char)s[i]) * 0x100000001b3ull;
  return h;
}

/* `body` (records, one a line) under a header whose count and checksum
 * match it, as the library would write it. */
static void spit_signed(const char *body) {
  size_t lines = 0, n = strlen(body);
  for (size_t i = 0; i < n; i++)
    lines += body[i] == '\n';
  char *text = malloc(n + 128);
  int h = snprintf(text, 128, "accelerator-stub v2 %zu %016llx\n", lines, (unsigned long long)fnv(body, n));
  memcpy(text + h, body, n);
  spit(state_file, text, (size_t)h + n);
  free(text);
}

static int assign(const char *dev, char *uuid_out) {
  PartitionAssignment a;
  memset(&a, 0, sizeof a);
  snprintf(a.templateId, sizeof a.templateId, "%s", TPL);
  snprintf(a.deviceUUID, sizeof a.deviceUUID, "%s", dev);
  bool ok = L.assign(&a);
  if (ok && uuid_out)
    snprintf(uuid_out, 64, "%s", a.partitionUUID);
  return ok;
}

/* One silently edited file: refused by a read and a write, kept as is. */
static void refused(const char *what, const char *text, size_t len, const char *needle) {
  spit(state_file, text, len);
  CHECK(!assign(DEV0, NULL), "%s: an assignment on an edited file is refused", what);
  const char *e = aerr();
  CHECK(strstr(e, "stub-state") != NULL && strstr(e, needle) != NULL,
        "%s: the error names the file and says why (%s)", what, e);
  CHECK(!L.removePartition(TPL, DEV0), "%s: a removal is refused", what);
  size_t n2 = 0;
  char *after = slurp(state_file, &n2);
  CHECK(after && n2 == len && memcmp(after, text, len) == 0, "%s: the refused file is kept as it was", what);
  free(after);
}

static void test_silent_edits(void) {
  char u[64];
  for (int i = 0; i < 3; i++)
    CHECK(assign(DEV0, u), "assign %d (%s)", i, aerr());
  size_t len = 0;
  char *orig = slurp(state_file, &len);
  CHECK(orig != NULL && len > 0, "read %s", state_file);
  if (!orig)
    return;
  char *buf = malloc(len + 256);

  /* The last line cut off at a line boundary. */
  size_t cut = len - 1;
  while (cut > 0 && orig[cut - 1] != '\n')
    cut--;
  refused("cut at a line boundary", orig, cut, "corrupt");
  /* Cut in the middle of a line. */
  refused("cut mid-line", orig, len - 3, "corrupt");

  /* A record's template changed. */
  memcpy(buf, orig, len);
  char *t = strstr(buf, "mig-1g.7gb");
  if (t)
    memcpy(t, "mig-9g.7gb", 10);
  refused("template changed", buf, len, "corrupt");

  /* The seq line removed. */
  char *body = strchr(orig, '\n') + 1;
  char *seq = strstr(body, "seq ");
  CHECK(seq != NULL, "the file has a seq line");
  if (seq) {
    char *end = strchr(seq, '\n') + 1;
    size_t n = (size_t)(seq - orig);
    memcpy(buf, orig, n);
    memcpy(buf + n, end, len - (size_t)(end - orig));
    refused("seq removed", buf, len - (size_t)(end - seq), "corrupt");
  }

  /* Careful edits, the checksum recomputed: the records themselves are checked. */
  char signed_body[4096];
  snprintf(signed_body, sizeof signed_body, "%s", body);
  t = strstr(signed_body, "mig-1g.7gb");
  if (t)
    memcpy(t, "mig-9g.7gb", 10);
  spit_signed(signed_body);
  size_t slen = 0;
  char *s = slurp(state_file, &slen);
  refused("unknown template, checksum recomputed", s, slen, "unknown template");
  free(s);
  snprintf(signed_body, sizeof signed_body, "%s", body);
  seq = strstr(signed_body, "seq ");
  if (seq) {
    char *end = strchr(seq, '\n') + 1;
    memmove(seq, end, strlen(end) + 1);
  }
  spit_signed(signed_body);
  s = slurp(state_file, &slen);
  refused("seq removed, checksum recomputed", s, slen, "no seq");
  free(s);

  /* Put back, everything works again. */
  spit(state_file, orig, len);
  int removed = 0;
  while (L.removePartition(TPL, DEV0))
    removed++;
  CHECK(removed == 3, "the restored file's 3 partitions removed (%d)", removed);
  free(buf);
  free(orig);
}

/* ---- writers while files are deleted under them -------------------------- */

enum { WRITERS = 8, ROUNDS = 60 };

static int writer(int out) {
  int bad = 0;
  for (int r = 0; r < ROUNDS; r++) {
    char u[64];
    if (!assign(DEV1, u)) {
      if (!strstr(aerr(), "resource exhausted")) {
        fprintf(stderr, "writer: %s\n", aerr());
        bad++;
      }
      continue;
    }
    char line[80];
    int n = snprintf(line, sizeof line, "%s\n", u);
    if (write(out, line, (size_t)n) != n)
      bad++;
    if (!L.removePartition(u, DEV1)) {
      fprintf(stderr, "writer: remove %s: %s\n", u, aerr());
      bad++;
    }
  }
  return bad ? 1 : 0;
}

static void test_writers_and_deletions(void) {
  int fds[2];
  CHECK(pipe(fds) == 0, "pipe");
  pid_t kids[WRITERS];
  fflush(NULL);
  for (int i = 0; i < WRITERS; i++) {
    kids[i] = fork();
    if (kids[i] == 0) {
      close(fds[0]);
      _exit(writer(fds[1]));
    }
  }
  close(fds[1]);
  /* Delete what a lock file or a temporary file could be, while they run. */
  char path[PATH_MAX + 64];
  for (int i = 0; i < 200; i++) {
    snprintf(path, sizeof path, "%s/stub-state.lock", state_dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/stub-state.tmp", state_dir);
    unlink(path);
    usleep(500);
  }
  /* Every UUID handed out once. */
  static char seen[WRITERS * ROUNDS][80];
  int n = 0, dup = 0;
  FILE *in = fdopen(fds[0], "r");
  char line[80];
  while (in && fgets(line, sizeof line, in)) {
    line[strcspn(line, "\n")] = 0;
    for (int i = 0; i < n; i++)
      dup += strcmp(seen[i], line) == 0;
    if (n < WRITERS * ROUNDS)
      snprintf(seen[n++], sizeof seen[0], "%s", line);
  }
  if (in)
    fclose(in);
  int failed = 0;
  for (int i = 0; i < WRITERS; i++) {
    int st = 0;
    waitpid(kids[i], &st, 0);
    failed += !(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  }
  CHECK(n > 0 && dup == 0, "%d partitions handed out, %d UUIDs twice", n, dup);
  CHECK(failed == 0, "%d writers saw errors other than a full device", failed);
  int got = 0;
  while (assign(DEV1, NULL))
    got++;
  CHECK(got == SLICES, "the slice budget is exact afterwards (%d of %d free)", got, SLICES);
  while (L.removePartition(TPL, DEV1))
    ;
}

/* ---- fork while other threads update -------------------------------------- */

static atomic_int stop_threads;
static atomic_long thread_ops;

static void *updater(void *arg) {
  int limiter = arg != NULL;
  while (!atomic_load(&stop_threads)) {
    if (limiter) {
      MemoryOpRecord r;
      if (L.mem(me, DEV0, 4096, &r) == RESULT_SUCCESS && !r.shouldBlock)
        L.mem(me, DEV0, -4096, &r);
    } else {
      char u[64];
      if (assign(DEV0, u))
        L.removePartition(u, DEV0);
    }
    atomic_fetch_add(&thread_ops, 1);
  }
  return NULL;
}

/* In the child: its own state update and limiter calls, within 10 s. */
static int forked_child(void) {
  alarm(getenv("FORK_HANG_SLEEP") ? 1000 : 10);
  char self[32], u[64];
  snprintf(self, sizeof self, "%d", (int)getpid());
  MemoryOpRecord r;
  if (!assign(DEV0, u) || !L.removePartition(u, DEV0)) {
    fprintf(stderr, "forked child: %s\n", aerr());
    return 1;
  }
  if (L.mem(self, DEV0, 4096, &r) != RESULT_SUCCESS || r.shouldBlock ||
      L.mem(self, DEV0, -4096, &r) != RESULT_SUCCESS) {
    fprintf(stderr, "forked child: %s\n", L.lastError());
    return 1;
  }
  return 0;
}

static void test_fork_during_updates(void) {
  pthread_t t[4];
  atomic_store(&stop_threads, 0);
  for (int i = 0; i < 4; i++)
    pthread_create(&t[i], NULL, updater, i % 2 ? (void *)1 : NULL);
  int forks = test_quick() ? 10 : 60, failed = 0;
  for (int i = 0; i < forks; i++) {
    pid_t pid = fork();
    if (pid == 0)
      _exit(forked_child());
    int st = 0;
    waitpid(pid, &st, 0);
    if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0)) {
      failed++;
      fprintf(stderr, "forked child %d: %s %d\n", i, WIFEXITED(st) ? "exit" : "signal",
              WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
    }
    usleep(2000);
  }
  long before = atomic_load(&thread_ops);
  usleep(100000);
  long after = atomic_load(&thread_ops);
  atomic_store(&stop_threads, 1);
  for (int i = 0; i < 4; i++)
    pthread_join(t[i], NULL);
  CHECK(failed == 0, "%d of %d children forked during updates failed or hung", failed, forks);
  CHECK(after > before, "the parent's threads keep updating after the forks (%ld → %ld)", before, after);
}

/* ---- made-up device UUIDs ---------------------------------------------------- */

/* Name `n` made-up devices from this process (1 byte each); how many were
 * refused, each with an error naming the device and the table. */
static int name_made_up(const char *who, int from, int n) {
  MemoryOpRecord r;
  char self[32];
  snprintf(self, sizeof self, "%d", (int)getpid());
  int refused_n = 0;
  for (int i = from; i < from + n; i++) {
    char dev[64];
    snprintf(dev, sizeof dev, "no-such-device-%s-%d", who, i);
    if (L.mem(self, dev, 1, &r) != RESULT_SUCCESS) {
      refused_n++;
      if (!strstr(L.lastError(), dev) || !strstr(L.lastError(), "device table")) {
        fprintf(stderr, "unclear error: %s\n", L.lastError());
        return -1;
      }
    }
  }
  return refused_n;
}

static void test_made_up_uuids(void) {
  /* A process names 1,000 made-up devices, then exits. */
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    int refused_n = name_made_up("a", 0, 1000);
    _exit(refused_n >= 1000 - 48 && refused_n < 1000 ? 0 : 1);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "a client names at most 48 made-up devices, the rest refused clearly");

  /* Normal use afterwards: known devices, a device never named before
   * (its entry retires one of the dead client's), and host limits. */
  MemoryOpRecord r;
  EXPECT_RC_WITH(L.lastError, L.mem(me, DEV1, 1000, &r), RESULT_SUCCESS);
  CHECK(!r.shouldBlock, "a known device still works");
  EXPECT_RC_WITH(L.lastError, L.mem(me, DEV1, -1000, &r), RESULT_SUCCESS);
  EXPECT_RC_WITH(L.lastError, L.mem(me, "stub-device-3", 1000, &r), RESULT_SUCCESS);
  EXPECT_RC_WITH(L.lastError, L.mem(me, "stub-device-3", -1000, &r), RESULT_SUCCESS);

  /* A live process holding made-up devices: the host's limits still fit. */
  int refused_n = name_made_up("b", 0, 1000);
  CHECK(refused_n >= 1000 - 48 && refused_n < 1000, "a live client is refused past its share (%d refused)", refused_n);
  EXPECT_RC_WITH(L.accLastError, L.setMem("faults-w", "stub-device-2", 1 << 20), RESULT_SUCCESS);
  EXPECT_RC_WITH(L.accLastError, L.setMem("faults-w", DEV1, 1 << 20), RESULT_SUCCESS);
  EXPECT_RC_WITH(L.lastError, L.mem(me, DEV1, 1000, &r), RESULT_SUCCESS);
  EXPECT_RC_WITH(L.lastError, L.mem(me, DEV1, -1000, &r), RESULT_SUCCESS);
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s liblimiter.so libaccelerator.so\n", argv[0]);
    return 2;
  }
  const char *dir = getenv("ACCELERATOR_STATE_DIR");
  if (!dir) {
    fprintf(stderr, "set ACCELERATOR_STATE_DIR\n");
    return 2;
  }
  snprintf(state_dir, sizeof state_dir, "%s", dir);
  snprintf(state_file, sizeof state_file, "%s/stub-state", dir);
  limiter_load(argv[1], argv[2]);
  snprintf(me, sizeof me, "%d", (int)getpid());
  test_silent_edits();
  test_writers_and_deletions();
  test_fork_during_updates();
  test_made_up_uuids();
  limiter_unload();
  return test_summary();
}

/* Containers: limiter clients in their own pid namespaces.
 *
 * Each client runs as `unshare --pid --fork --mount-proc` (so it is pid 1 of
 * its own namespace, with its own /proc, like a container's first process)
 * and takes commands from this program over pipes. Cases:
 * - same pid in two namespaces, same worker: the books are kept apart and
 *   the worker's limit holds across both (issue 15: 12 MB were granted
 *   against 10 MB, and the final frees failed);
 * - a host-side report while both live reclaims nothing and names each
 *   client by its host pid;
 * - SIGKILL of one: its bytes are reclaimed, the other's are untouched;
 * - same pid, different workers: each worker's books are its own;
 * - a tenant of worker A in a mount namespace of its own that sees what a
 *   container of A mounts (workers/A read-write, limits.shm and its .id
 *   read-only) sets ACCELERATOR_WORKER_ID=B and writes and truncates
 *   everything it can see: B's usage as the host reports it is unchanged
 *   and B's client keeps working;
 * - a private worker's directory (a client without ACCELERATOR_WORKER_ID)
 *   stays while its process lives and is removed by the host's report
 *   once it exited;
 * - a tenant's forged slot naming a host process is not reported, and a
 *   named worker whose books say "private" is not removed.
 * Needs root (unshare); CI runs as root. Not having it is a failure.
 *
 * Usage: test_limiter_ns build/liblimiter.so build/libaccelerator.so */
#include "accelerator.h"
#include "limiter.h"
#include "../test_util.h"
#include "limiter_load.h"
#include "../ns_util.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define DEV "stub-device-0"

/* ---- the client (inside its namespace) ---------------------------------- */

/* This client's worker's books, opened read-write as its container can. */
static int own_books(void) {
  char path[4200];
  const char *w = getenv("ACCELERATOR_WORKER_ID");
  snprintf(path, sizeof path, "%s/workers/%s/limiter.shm", getenv("ACCELERATOR_STATE_DIR"), w ? w : "");
  return open(path, O_RDWR);
}

/* A tenant's forgery: rewrite this client's own live slot (found by its
 * state word, pid << 2 | LIVE, and its start time, at a 64-byte aligned
 * offset) to name process `pid` of pid namespace `ns` started at `start`,
 * with 777777 bytes where it recorded 4096. Its lock byte stays held: as
 * the books go, the slot is live. 0: done. */
static int forge(int pid, unsigned long long ns, unsigned long long start) {
  unsigned long long mine = start_of("/proc/self/stat");
  int fd = own_books();
  struct stat sb;
  if (fd < 0 || fstat(fd, &sb) != 0)
    return 2;
  uint64_t *w = malloc((size_t)sb.st_size);
  if (!w || pread(fd, w, (size_t)sb.st_size, 0) != sb.st_size)
    return 3;
  int rc = 4;
  for (size_t i = 0; i + 64 < (size_t)sb.st_size / 8; i += 8) {
    if (w[i] != ((uint64_t)getpid() << 2 | 2) || w[i + 1] != mine)
      continue;
    uint64_t word[2] = {(uint64_t)pid << 2 | 2, start};
    int ok = pwrite(fd, word, 16, (off_t)(i * 8)) == 16 &&
             pwrite(fd, &ns, 8, (off_t)((i + 3) * 8)) == 8;
    for (size_t h = i + 5; ok && h < i + 64; h++) /* held[]: bytes | seq << 48 */
      if ((w[h] & 0xffffffffffffULL) == 4096) {
        uint64_t forged = (w[h] & ~0xffffffffffffULL) | 777777;
        ok = pwrite(fd, &forged, 8, (off_t)(h * 8)) == 8;
        rc = ok ? 0 : 5;
        break;
      }
    break;
  }
  free(w);
  close(fd);
  return rc;
}

/* Commands, one a line: "mem <delta>" → "<rc> <shouldBlock> <availableBytes>",
 * "pid" → "<getpid()>", "forge <pid> <ns> <start>" → "<0: done>",
 * "private" (set its books' private flag) → "<0: done>", "quit". */
static int client(const char *lib, int in, int out) {
  limiter_load(lib, NULL);
  FILE *cmd = fdopen(in, "r");
  FILE *rep = fdopen(out, "w");
  if (!cmd || !rep)
    return 3;
  char self[32], line[128];
  snprintf(self, sizeof self, "%d", (int)getpid());
  while (fgets(line, sizeof line, cmd)) {
    long long delta;
    if (sscanf(line, "mem %lld", &delta) == 1) {
      MemoryOpRecord r;
      memset(&r, 0, sizeof r);
      int rc = L.mem(self, DEV, delta, &r);
      fprintf(rep, "%d %d %llu %s\n", rc, (int)r.shouldBlock, (unsigned long long)r.availableBytes,
              rc ? L.lastError() : "-");
    } else if (strncmp(line, "pid", 3) == 0) {
      fprintf(rep, "%d\n", (int)getpid());
    } else if (strncmp(line, "forge ", 6) == 0) {
      int pid = 0;
      unsigned long long ns = 0, start = 0;
      sscanf(line, "forge %d %llu %llu", &pid, &ns, &start);
      fprintf(rep, "%d\n", forge(pid, ns, start));
    } else if (strncmp(line, "private", 7) == 0) {
      int fd = own_books();
      fprintf(rep, "%d\n", !(fd >= 0 && pwrite(fd, "\1", 1, 24) == 1));
      if (fd >= 0)
        close(fd);
    } else {
      break;
    }
    fflush(rep);
  }
  return 0;
}

/* A tenant of worker `a` (run through `unshare --mount --pid --fork
 * --mount-proc`, with ACCELERATOR_WORKER_ID set to another worker by the
 * caller): first its state directory is made what a container of `a`
 * mounts, then it uses the limiter and writes and truncates every file it
 * sees. Prints "<failures> <what it saw>". */
static int tenant(const char *lib, const char *a) {
  const char *state = getenv("ACCELERATOR_STATE_DIR");
  char real[] = "/tmp/ns-real.XXXXXX", from[1200], to[1200];
  if (!mkdtemp(real) || mount(state, real, NULL, MS_BIND, NULL) ||
      mount("tmpfs", state, "tmpfs", 0, "mode=0700")) {
    printf("1 setting up the mount view: %s\n", strerror(errno));
    return 0;
  }
  snprintf(to, sizeof to, "%s/workers", state);
  mkdir(to, 0700);
  snprintf(to, sizeof to, "%s/workers/%s", state, a);
  mkdir(to, 0700);
  snprintf(from, sizeof from, "%s/workers/%s", real, a);
  int bad = mount(from, to, NULL, MS_BIND, NULL) != 0;
  const char *ro[] = {"limits.shm", "limits.shm.id"};
  for (int i = 0; i < 2; i++) {
    snprintf(from, sizeof from, "%s/%s", real, ro[i]);
    snprintf(to, sizeof to, "%s/%s", state, ro[i]);
    close(open(to, O_CREAT | O_WRONLY, 0600));
    bad += mount(from, to, NULL, MS_BIND, NULL) != 0 ||
           mount(NULL, to, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY, NULL) != 0;
  }
  bad += umount2(real, MNT_DETACH) != 0;
  rmdir(real);
  if (bad) {
    printf("1 bind mounts: %s\n", strerror(errno));
    return 0;
  }
  limiter_load(lib, NULL);
  char self[32];
  snprintf(self, sizeof self, "%d", (int)getpid());
  MemoryOpRecord r;
  int rc = L.mem(self, DEV, 1 << 20, &r); /* in books of its own view only */
  /* Every file it sees: write garbage over it, then truncate it. */
  char seen[1024] = "", dir[600];
  int changed = 0;
  snprintf(dir, sizeof dir, "%s/workers", state);
  DIR *d = opendir(dir);
  struct dirent *e;
  while (d && (e = readdir(d)))
    if (e->d_name[0] != '.') {
      strncat(seen, e->d_name, sizeof seen - strlen(seen) - 2);
      strcat(seen, " ");
      const char *files[] = {"limiter.shm", "limiter.shm.id"};
      for (int i = 0; i < 2; i++) {
        snprintf(to, sizeof to, "%s/%s/%s", dir, e->d_name, files[i]);
        int fd = open(to, O_RDWR);
        changed += fd >= 0 && pwrite(fd, "garbage!", 8, 0) == 8 && ftruncate(fd, 0) == 0;
        if (fd >= 0)
          close(fd);
      }
    }
  if (d)
    closedir(d);
  for (int i = 0; i < 2; i++) {
    snprintf(to, sizeof to, "%s/%s", state, ro[i]);
    int fd = open(to, O_RDWR);
    bad += fd >= 0 || errno != EROFS || truncate(to, 0) == 0;
    if (fd >= 0)
      close(fd);
  }
  printf("%d its call: %d; workers it sees: %s; %d books files overwritten and truncated; limits.shm "
         "read-only\n",
         bad, rc, seen, changed);
  return 0;
}

/* ---- the host side ------------------------------------------------------- */

typedef struct {
  pid_t unshare_pid, host_pid;
  FILE *cmd, *rep;
} ns_client;

static char self_exe[4096];
static const char *lib_path;

static ns_client start(const char *worker) {
  ns_client c = {-1, -1, NULL, NULL};
  int to[2], from[2];
  if (pipe(to) || pipe(from))
    return c;
  pid_t pid = fork();
  if (pid == 0) {
    char in[16], out[16];
    snprintf(in, sizeof in, "%d", to[0]);
    snprintf(out, sizeof out, "%d", from[1]);
    close(to[1]);
    close(from[0]);
    if (worker)
      setenv("ACCELERATOR_WORKER_ID", worker, 1);
    else
      unsetenv("ACCELERATOR_WORKER_ID");
    execlp("unshare", "unshare", "--pid", "--fork", "--mount-proc", self_exe, "client", lib_path,
           in, out, (char *)NULL);
    _exit(127);
  }
  close(to[0]);
  close(from[1]);
  c.unshare_pid = pid;
  c.cmd = fdopen(to[1], "w");
  c.rep = fdopen(from[0], "r");
  c.host_pid = child_of(pid);
  return c;
}

/* Send one command; the reply line in `out`. False when the client is gone. */
static int ask(ns_client *c, const char *command, char *out, size_t n) {
  fprintf(c->cmd, "%s\n", command);
  fflush(c->cmd);
  return fgets(out, (int)n, c->rep) != NULL;
}

/* A memory op in the client: 1 granted, 0 blocked, -1 error. */
static int client_mem(ns_client *c, long long delta) {
  char command[64], reply[512];
  snprintf(command, sizeof command, "mem %lld", delta);
  if (!ask(c, command, reply, sizeof reply))
    return -1;
  int rc = -1, block = 0;
  sscanf(reply, "%d %d", &rc, &block);
  if (rc != 0) {
    fprintf(stderr, "(client reply to mem %lld: %s)", delta, reply);
    return -1;
  }
  return block ? 0 : 1;
}

static void stop(ns_client *c) {
  if (c->cmd) {
    fprintf(c->cmd, "quit\n");
    fclose(c->cmd);
  }
  if (c->rep)
    fclose(c->rep);
  int st;
  while (waitpid(c->unshare_pid, &st, 0) < 0 && errno == EINTR)
    ;
}

static uint64_t used(const char *worker) {
  uint64_t u = 0, lim = 0;
  if (L.usage(worker, DEV, &u, &lim) != RESULT_SUCCESS)
    return UINT64_MAX;
  return u;
}

/* The bytes GetProcessMemoryUtilization reports for `pid` on DEV (-1: absent). */
static long long reported(pid_t pid) {
  MemoryUtilization mu[512];
  size_t n = 0;
  if (L.procMem(mu, 512, &n) != RESULT_SUCCESS)
    return -2;
  char id[32];
  snprintf(id, sizeof id, "%d", (int)pid);
  for (size_t i = 0; i < n; i++)
    if (strcmp(mu[i].processId, id) == 0 && strcmp(mu[i].deviceUUID, DEV) == 0)
      return (long long)mu[i].usedBytes;
  return -1;
}

static void same_pid_same_worker(void) {
  EXPECT_RC_WITH(L.accLastError, L.setMem("ns-w", DEV, 10000000), RESULT_SUCCESS);
  ns_client a = start("ns-w"), b = start("ns-w");
  CHECK(a.host_pid > 0 && b.host_pid > 0, "clients started");
  char pa[32] = "", pb[32] = "";
  ask(&a, "pid", pa, sizeof pa);
  ask(&b, "pid", pb, sizeof pb);
  CHECK(atoi(pa) == 1 && atoi(pb) == 1, "both clients are pid 1 of their namespace (%d, %d)", atoi(pa),
        atoi(pb));
  CHECK(client_mem(&a, 6000000) == 1, "A's 6 MB granted");
  CHECK(client_mem(&b, 6000000) == 0, "B's 6 MB blocked: 12 MB would pass the 10 MB limit");
  CHECK(used("ns-w") == 6000000, "usage 6 MB (%llu)", (unsigned long long)used("ns-w"));
  CHECK(client_mem(&b, 4000000) == 1, "B's 4 MB granted");
  CHECK(used("ns-w") == 10000000, "usage 10 MB");

  /* The host's report reclaims nobody and names host pids. */
  CHECK(reported(a.host_pid) == 6000000, "host report: A (host pid %d) holds 6 MB (%lld)", (int)a.host_pid,
        reported(a.host_pid));
  CHECK(reported(b.host_pid) == 4000000, "host report: B (host pid %d) holds 4 MB", (int)b.host_pid);
  CHECK(used("ns-w") == 10000000, "usage still 10 MB after the host's report");

  CHECK(client_mem(&a, -6000000) == 1, "A frees its 6 MB");
  CHECK(client_mem(&b, -4000000) == 1, "B frees its 4 MB");
  CHECK(client_mem(&b, -1) == -1, "B cannot free what it does not hold");
  CHECK(used("ns-w") == 0, "usage back to 0");

  /* SIGKILL of one: its bytes go, the other's stay. */
  CHECK(client_mem(&a, 6000000) == 1, "A takes 6 MB again");
  CHECK(client_mem(&b, 3000000) == 1, "B takes 3 MB");
  kill(a.host_pid, SIGKILL);
  stop(&a);
  CHECK(client_mem(&b, 6000000) == 1, "B's 6 MB granted once A's bytes are reclaimed");
  CHECK(used("ns-w") == 9000000, "usage 9 MB: B's alone (%llu)", (unsigned long long)used("ns-w"));
  CHECK(reported(a.host_pid) == -1, "A is gone from the report");
  CHECK(reported(b.host_pid) == 9000000, "B holds 9 MB in the report");
  CHECK(client_mem(&b, -9000000) == 1, "B frees everything");
  stop(&b);
}

static void same_pid_two_workers(void) {
  EXPECT_RC_WITH(L.accLastError, L.setMem("ns-w1", DEV, 5000000), RESULT_SUCCESS);
  EXPECT_RC_WITH(L.accLastError, L.setMem("ns-w2", DEV, 5000000), RESULT_SUCCESS);
  ns_client a = start("ns-w1"), b = start("ns-w2");
  CHECK(client_mem(&a, 4000000) == 1, "worker 1's 4 MB granted");
  CHECK(client_mem(&b, 4000000) == 1, "worker 2's 4 MB granted");
  CHECK(client_mem(&a, 2000000) == 0, "worker 1 stays under its own limit");
  CHECK(used("ns-w1") == 4000000 && used("ns-w2") == 4000000, "each worker's books hold its own 4 MB");
  kill(b.host_pid, SIGKILL);
  stop(&b);
  CHECK(reported(b.host_pid) == -1 && used("ns-w2") == 0, "worker 2's killed client reclaimed by the report");
  CHECK(used("ns-w1") == 4000000, "worker 1 untouched");
  CHECK(client_mem(&a, -4000000) == 1, "worker 1 frees its bytes");
  stop(&a);
}

static void tenant_cannot_reach_another_worker(void) {
  EXPECT_RC_WITH(L.accLastError, L.setMem("iso-a", DEV, 5000000), RESULT_SUCCESS);
  EXPECT_RC_WITH(L.accLastError, L.setMem("iso-b", DEV, 5000000), RESULT_SUCCESS);
  ns_client b = start("iso-b");
  CHECK(client_mem(&b, 3000000) == 1, "worker B's client takes 3 MB");
  long long before = reported(b.host_pid);
  CHECK(before == 3000000 && used("iso-b") == 3000000, "B's 3 MB reported (%lld)", before);
  char cmd[3 * 4096], out[1024] = "";
  snprintf(cmd, sizeof cmd,
           "ACCELERATOR_WORKER_ID=iso-b unshare --mount --pid --fork --mount-proc '%s' tenant '%s' iso-a",
           self_exe, lib_path);
  int failures = child_reply(cmd, out, sizeof out);
  CHECK(failures == 0 && (strstr(out, "sees: iso-a iso-b ") || strstr(out, "sees: iso-b iso-a ")),
        "a tenant of A sees only A's books and its own made-up B (%s)", out);
  long long after = reported(b.host_pid);
  CHECK(after == 3000000 && used("iso-b") == 3000000,
        "B's usage as the host reports it is unchanged (%lld, %llu)", after,
        (unsigned long long)used("iso-b"));
  CHECK(client_mem(&b, 1000000) == 1 && client_mem(&b, 1500000) == 0,
        "B's client keeps working, under B's limit (4 MB granted, 5.5 MB blocked)");
  CHECK(client_mem(&b, -4000000) == 1, "B frees its bytes");
  stop(&b);
}

/* The private worker directories of process `pid` (host pid) in the state
 * directory: workers/process-<ns>-<pid in its namespace>-<start>. */
static int private_dirs(pid_t pid) {
  char dir[4200];
  snprintf(dir, sizeof dir, "%s/workers", getenv("ACCELERATOR_STATE_DIR"));
  char tag[32];
  snprintf(tag, sizeof tag, "-%d-", (int)pid);
  int n = 0;
  DIR *d = opendir(dir);
  struct dirent *e;
  while (d && (e = readdir(d)))
    n += strncmp(e->d_name, "process-", 8) == 0 && strstr(e->d_name + 8, tag) != NULL;
  if (d)
    closedir(d);
  return n;
}

static void private_worker_removed(void) {
  int to[2], from[2];
  CHECK(pipe(to) == 0 && pipe(from) == 0, "pipes");
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    unsetenv("ACCELERATOR_WORKER_ID");
    char self[32], b;
    snprintf(self, sizeof self, "%d", (int)getpid());
    MemoryOpRecord r;
    int rc = L.mem(self, DEV, 4096, &r);
    if (write(from[1], rc == 0 ? "y" : "n", 1) != 1 || read(to[0], &b, 1) != 1)
      _exit(1);
    _exit(0);
  }
  char b = 0;
  CHECK(read(from[0], &b, 1) == 1 && b == 'y', "a client without ACCELERATOR_WORKER_ID records 4 KiB");
  CHECK(private_dirs(pid) == 1, "it has a private worker directory");
  CHECK(reported(pid) == 4096 && private_dirs(pid) == 1, "a report while it lives keeps it");
  CHECK(write(to[1], "x", 1) == 1, "let it exit");
  waitpid(pid, NULL, 0);
  CHECK(reported(pid) == -1, "the exited client is not reported");
  CHECK(private_dirs(pid) == 0, "the host's report removed its private worker directory");
  close(to[0]);
  close(to[1]);
  close(from[0]);
  close(from[1]);
}

/* Entries GetProcessMemoryUtilization reports with `bytes` on DEV. */
static int reported_with(unsigned long long bytes) {
  MemoryUtilization mu[512];
  size_t n = 0;
  if (L.procMem(mu, 512, &n) != RESULT_SUCCESS)
    return -1;
  int found = 0;
  for (size_t i = 0; i < n; i++)
    found += mu[i].usedBytes == bytes && strcmp(mu[i].deviceUUID, DEV) == 0;
  return found;
}

/* A tenant of worker A rewrites its own live slot (it holds the lock byte)
 * to name this host process, in this host's pid namespace, with a start
 * time that is not this process's (a container cannot see the host's
 * /proc): the host's report leaves it out. Before, a slot of the report's
 * own pid namespace was reported as stored. */
static void forged_slot_left_out(void) {
  ns_client f = start("forge-a");
  CHECK(client_mem(&f, 4096) == 1, "the tenant records 4 KiB");
  CHECK(reported(f.host_pid) == 4096, "its own process is reported");
  struct stat ns;
  CHECK(stat("/proc/self/ns/pid", &ns) == 0, "this process's pid namespace");
  char cmd[128], reply[64] = "";
  snprintf(cmd, sizeof cmd, "forge %d %llu %llu", (int)getpid(), (unsigned long long)ns.st_ino, 12345ULL);
  CHECK(ask(&f, cmd, reply, sizeof reply) && atoi(reply) == 0 && reply[0] == '0',
        "the tenant rewrote its slot to name this host process (%s)", reply);
  CHECK(reported_with(777777) == 0 && reported(getpid()) == -1,
        "the forged slot is not reported (%d entries with its bytes)", reported_with(777777));
  CHECK(reported(f.host_pid) == -1, "nor is the tenant under its own pid any more");
  /* Again, naming worker B's live client exactly: its namespace, pid and
   * start time (a tenant may learn them); it started as B's. */
  ns_client b = start("forge-b");
  CHECK(client_mem(&b, 8192) == 1 && reported(b.host_pid) == 8192, "worker B's client records 8 KiB");
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/ns/pid", (int)b.host_pid);
  CHECK(stat(path, &ns) == 0, "B's pid namespace");
  snprintf(path, sizeof path, "/proc/%d/stat", (int)b.host_pid);
  CHECK(ask(&f, "mem 4096", reply, sizeof reply), "the tenant records 4 KiB again (a new slot)");
  snprintf(cmd, sizeof cmd, "forge 1 %llu %llu", (unsigned long long)ns.st_ino, start_of(path));
  CHECK(ask(&f, cmd, reply, sizeof reply) && reply[0] == '0', "the tenant's slot names B's client (%s)",
        reply);
  CHECK(reported_with(777777) == 0 && reported(b.host_pid) == 8192,
        "the forged slot is not reported; B's own is (%d entries with the forged bytes)",
        reported_with(777777));
  CHECK(client_mem(&b, -8192) == 1, "B frees its bytes");
  stop(&b);
  stop(&f);
}

/* A named worker whose books' header says "private" (the tenant wrote it)
 * stays a named worker: its directory is not removed once its processes
 * exited, and its usage is still its own. */
static void private_flag_of_named_worker(void) {
  ns_client c = start("priv-named");
  CHECK(client_mem(&c, 4096) == 1, "a client of worker priv-named records 4 KiB");
  char reply[64] = "";
  CHECK(ask(&c, "private", reply, sizeof reply) && reply[0] == '0', "it set its books' private flag");
  CHECK(reported(c.host_pid) == 4096, "its process is reported");
  stop(&c);
  CHECK(reported(c.host_pid) == -1, "the exited client is not reported");
  char dir[4200];
  snprintf(dir, sizeof dir, "%s/workers/priv-named/limiter.shm", getenv("ACCELERATOR_STATE_DIR"));
  struct stat sb;
  CHECK(stat(dir, &sb) == 0, "the host's report left the named worker's books in place");
}

int main(int argc, char **argv) {
  if (argc == 5 && strcmp(argv[1], "client") == 0)
    return client(argv[2], atoi(argv[3]), atoi(argv[4]));
  if (argc == 4 && strcmp(argv[1], "tenant") == 0)
    return tenant(argv[2], argv[3]);
  if (argc < 3) {
    fprintf(stderr, "usage: %s liblimiter.so libaccelerator.so\n", argv[0]);
    return 2;
  }
  ssize_t n = readlink("/proc/self/exe", self_exe, sizeof self_exe - 1);
  CHECK(n > 0, "readlink /proc/self/exe");
  self_exe[n > 0 ? n : 0] = 0;
  lib_path = argv[1];
  signal(SIGPIPE, SIG_IGN);
  int rc = system("unshare --pid --fork --mount-proc true");
  CHECK(rc == 0, "unshare --pid --fork --mount-proc works here (needs root; status %d)", rc);
  if (rc != 0)
    return test_summary();
  limiter_load(argv[1], argv[2]);
  same_pid_same_worker();
  same_pid_two_workers();
  tenant_cannot_reach_another_worker();
  private_worker_removed();
  forged_slot_left_out();
  private_flag_of_named_worker();
  limiter_unload();
  return test_summary();
}

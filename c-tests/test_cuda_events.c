/* The fake CUDA driver's events and stream queries on its simulated device
 * timeline (c-tests/fakes/cuda_events.inc), as cuda.h documents the real
 * driver's: a record completes once the work queued before it on its
 * stream has run, queries say CUDA_ERROR_NOT_READY until then, the
 * synchronizations wait for it, cuStreamWaitEvent orders, elapsed times
 * come from the timeline; the legacy and per-thread default streams; the
 * flags and error codes. Kernels of 2 ms (FAKE_KERNEL_US), on a timeline
 * of the test's own.
 *
 * Usage: test_cuda_events LIBCUDA (the fake libcuda.so.1) */
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>

#include "test_util.h"

typedef int CUresult;
typedef void *CUstream, *CUevent, *CUcontext;
enum {
  OK = 0,
  INVALID_VALUE = 1,
  INVALID_HANDLE = 400,
  NOT_READY = 600,
  CAPTURED_EVENT = 907,
};
enum { DISABLE_TIMING = 0x2, INTERPROCESS = 0x4, NON_BLOCKING = 0x1, RECORD_EXTERNAL = 0x1 };
#define LEGACY ((CUstream)1)
#define PER_THREAD ((CUstream)2)
#define KERNEL_MS 2.0

static void *lib;
static void *sym(const char *name) {
  void *f = dlsym(lib, name);
  if (!f) {
    fprintf(stderr, "no %s in the driver\n", name);
    exit(2);
  }
  return f;
}

static CUresult (*launch_fn)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             unsigned, CUstream, void **, void **);
static CUresult (*launch_ptsz)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                               unsigned, CUstream, void **, void **);
static CUresult (*stream_create)(CUstream *, unsigned);
static CUresult (*stream_destroy)(CUstream);
static CUresult (*stream_query)(CUstream), (*stream_query_ptsz)(CUstream);
static CUresult (*stream_sync)(CUstream);
static CUresult (*stream_wait)(CUstream, CUevent, unsigned);
static CUresult (*begin_capture)(CUstream, int);
static CUresult (*end_capture)(CUstream, void **);
static CUresult (*graph_destroy)(void *);
static CUresult (*event_create)(CUevent *, unsigned);
static CUresult (*event_destroy)(CUevent);
static CUresult (*record)(CUevent, CUstream), (*record_ptsz)(CUevent, CUstream);
static CUresult (*record_flags)(CUevent, CUstream, unsigned);
static CUresult (*query)(CUevent);
static CUresult (*event_sync)(CUevent);
static CUresult (*elapsed)(float *, CUevent, CUevent);
static CUresult (*set_current)(CUcontext);
static CUcontext ctx;

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int dummy_function;
static CUresult kernel(CUstream s) {
  return launch_fn(&dummy_function, 1, 1, 1, 32, 1, 1, 0, s, NULL, NULL);
}
static CUresult event(unsigned flags, CUevent *e) { return event_create(e, flags); }

/* Wait until the device has nothing of this test queued. */
static void drain(void) { EXPECT(stream_sync(LEGACY), OK); }

static void test_record_query_synchronize(void) {
  CUstream s;
  CUevent before, after;
  EXPECT(stream_create(&s, 0), OK);
  EXPECT(event(0, &before), OK);
  EXPECT(event(0, &after), OK);
  EXPECT(query(after), OK); /* never recorded: complete */
  EXPECT(stream_query(s), OK);
  double recorded = now_ms();
  EXPECT(record(before, s), OK);
  double t0 = now_ms();
  for (int i = 0; i < 3; i++)
    EXPECT(kernel(s), OK);
  EXPECT(record(after, s), OK);
  EXPECT(query(before), OK);
  EXPECT(query(after), NOT_READY);
  EXPECT(stream_query(s), NOT_READY);
  float ms = 0;
  EXPECT(elapsed(&ms, before, after), NOT_READY);
  EXPECT(event_sync(after), OK);
  double waited = now_ms() - t0, recorded_to_done = now_ms() - recorded;
  CHECK(waited >= 3 * KERNEL_MS - 0.1, "cuEventSynchronize returned after %.2f ms of 3 kernels",
        waited);
  EXPECT(query(after), OK);
  EXPECT(stream_query(s), OK);
  EXPECT(elapsed(&ms, before, after), OK);
  /* The 3 kernels ran between the records, and the second completed
   * before the synchronization returned. */
  CHECK(ms >= 3 * KERNEL_MS && ms <= recorded_to_done, "elapsed %.3f ms over 3 kernels (%.3f ms)",
        ms, recorded_to_done);
  EXPECT(elapsed(&ms, after, before), OK);
  CHECK(ms <= -3 * KERNEL_MS, "elapsed backwards %.3f ms", ms);
  /* cuStreamSynchronize waits for the stream's work. */
  t0 = now_ms();
  EXPECT(kernel(s), OK);
  EXPECT(kernel(s), OK);
  EXPECT(stream_sync(s), OK);
  waited = now_ms() - t0;
  CHECK(waited >= 2 * KERNEL_MS - 0.1, "cuStreamSynchronize returned after %.2f ms", waited);
  EXPECT(stream_query(s), OK);
  EXPECT(event_destroy(before), OK);
  EXPECT(event_destroy(after), OK);
  EXPECT(stream_destroy(s), OK);
}

/* A record on another stream does not wait for this one's work. */
static void test_streams_are_independent(void) {
  CUstream busy, idle;
  CUevent e;
  EXPECT(stream_create(&busy, 0), OK);
  EXPECT(stream_create(&idle, 0), OK);
  EXPECT(event(0, &e), OK);
  EXPECT(kernel(busy), OK);
  EXPECT(record(e, idle), OK);
  EXPECT(query(e), OK);
  EXPECT(stream_query(idle), OK);
  EXPECT(stream_query(busy), NOT_READY);
  drain();
  EXPECT(event_destroy(e), OK);
  EXPECT(stream_destroy(busy), OK);
  EXPECT(stream_destroy(idle), OK);
}

/* The legacy default stream waits for the blocking streams, not for a
 * CU_STREAM_NON_BLOCKING one; a blocking stream waits for it. */
static void test_legacy_stream(void) {
  CUstream blocking, nonblocking;
  CUevent e;
  EXPECT(stream_create(&blocking, 0), OK);
  EXPECT(stream_create(&nonblocking, NON_BLOCKING), OK);
  EXPECT(event(0, &e), OK);
  EXPECT(kernel(nonblocking), OK);
  EXPECT(record(e, NULL), OK);
  EXPECT(query(e), OK);
  EXPECT(stream_query(LEGACY), OK);
  EXPECT(kernel(blocking), OK);
  EXPECT(record(e, NULL), OK);
  EXPECT(query(e), NOT_READY);
  EXPECT(stream_query(NULL), NOT_READY);
  drain();
  EXPECT(query(e), OK);
  EXPECT(kernel(LEGACY), OK);
  EXPECT(record(e, blocking), OK);
  EXPECT(query(e), NOT_READY);
  EXPECT(record(e, nonblocking), OK);
  EXPECT(query(e), OK);
  drain();
  EXPECT(event_destroy(e), OK);
  EXPECT(stream_destroy(blocking), OK);
  EXPECT(stream_destroy(nonblocking), OK);
}

static void *record_elsewhere(void *e) {
  set_current(ctx);
  /* This thread's per-thread stream has nothing queued. */
  intptr_t r = record_ptsz(e, NULL);
  return (void *)(r == OK ? (intptr_t)query(e) : -r);
}

/* Handle 0 from a _ptsz entry point (or CU_STREAM_PER_THREAD) is the
 * calling thread's stream; the legacy stream waits for it. */
static void test_per_thread_stream(void) {
  CUevent e;
  EXPECT(event(0, &e), OK);
  EXPECT(launch_ptsz(&dummy_function, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL), OK);
  EXPECT(record_ptsz(e, NULL), OK);
  EXPECT(query(e), NOT_READY);
  EXPECT(stream_query_ptsz(NULL), NOT_READY);
  EXPECT(stream_query(PER_THREAD), NOT_READY);
  EXPECT(stream_query(LEGACY), NOT_READY);
  pthread_t t;
  void *r = NULL;
  CHECK(pthread_create(&t, NULL, record_elsewhere, e) == 0, "thread");
  pthread_join(t, &r);
  CHECK((intptr_t)r == OK, "another thread's per-thread stream: %d", (int)(intptr_t)r);
  drain();
  EXPECT(stream_query_ptsz(NULL), OK);
  EXPECT(event_destroy(e), OK);
}

/* cuStreamWaitEvent: the waiting stream's later records come after the
 * event. */
static void test_wait_event(void) {
  CUstream a, b;
  CUevent done_a, done_b;
  EXPECT(stream_create(&a, NON_BLOCKING), OK);
  EXPECT(stream_create(&b, NON_BLOCKING), OK);
  EXPECT(event(0, &done_a), OK);
  EXPECT(event(0, &done_b), OK);
  EXPECT(kernel(a), OK);
  EXPECT(record(done_a, a), OK);
  EXPECT(stream_wait(b, done_a, 0), OK);
  EXPECT(stream_query(b), NOT_READY);
  EXPECT(record(done_b, b), OK);
  EXPECT(query(done_b), NOT_READY);
  EXPECT(event_sync(done_b), OK);
  EXPECT(query(done_a), OK);
  float ms = -1;
  EXPECT(elapsed(&ms, done_a, done_b), OK);
  CHECK(ms >= 0, "the waiting stream's record came %.3f ms before the event", ms);
  EXPECT(stream_wait(b, done_a, 2), INVALID_VALUE);
  EXPECT(stream_wait(b, NULL, 0), INVALID_HANDLE);
  EXPECT(event_destroy(done_a), OK);
  EXPECT(event_destroy(done_b), OK);
  EXPECT(stream_destroy(a), OK);
  EXPECT(stream_destroy(b), OK);
}

static void test_flags_and_errors(void) {
  CUevent e, untimed, never;
  float ms;
  EXPECT(event(INTERPROCESS, &e), INVALID_VALUE);
  EXPECT(event(0x8, &e), INVALID_VALUE);
  EXPECT(event(0, NULL), INVALID_VALUE);
  EXPECT(event(INTERPROCESS | DISABLE_TIMING, &e), OK);
  EXPECT(event_destroy(e), OK);
  EXPECT(event(0, &e), OK);
  EXPECT(event(DISABLE_TIMING, &untimed), OK);
  EXPECT(event(0, &never), OK);
  EXPECT(record(e, NULL), OK);
  EXPECT(record(untimed, NULL), OK);
  EXPECT(event_sync(untimed), OK);
  EXPECT(elapsed(&ms, e, untimed), INVALID_HANDLE);
  EXPECT(elapsed(&ms, e, never), INVALID_HANDLE);
  EXPECT(elapsed(NULL, e, e), INVALID_VALUE);
  EXPECT(elapsed(&ms, e, e), OK);
  CHECK(ms == 0, "an event from itself: %.3f ms", ms);
  EXPECT(record(NULL, NULL), INVALID_HANDLE);
  EXPECT(query(NULL), INVALID_HANDLE);
  EXPECT(event_destroy(NULL), INVALID_HANDLE);
  /* An external record exists only in a graph being captured. */
  EXPECT(record_flags(e, NULL, RECORD_EXTERNAL), INVALID_VALUE);
  EXPECT(record_flags(e, NULL, 2), INVALID_VALUE);
  EXPECT(record_flags(e, NULL, 0), OK);
  /* A record into a capturing stream is a node of its graph: the event
   * cannot be queried until recorded again outside. */
  CUstream s;
  void *graph = NULL;
  EXPECT(stream_create(&s, 0), OK);
  EXPECT(begin_capture(s, 0), OK);
  EXPECT(record(e, s), OK);
  EXPECT(record_flags(never, s, RECORD_EXTERNAL), OK);
  EXPECT(stream_query(s), OK);
  EXPECT(end_capture(s, &graph), OK);
  EXPECT(query(e), CAPTURED_EVENT);
  EXPECT(record(e, s), OK);
  EXPECT(query(e), OK);
  EXPECT(graph_destroy(graph), OK);
  EXPECT(stream_destroy(s), OK);
  EXPECT(event_destroy(e), OK);
  EXPECT(event_destroy(untimed), OK);
  EXPECT(event_destroy(never), OK);
}

/* The entry points a per-thread lookup hands out are the _ptsz ones. */
static void test_lookup(void) {
  CUresult (*get)(const char *, void **, int, unsigned long long, int *) =
      (CUresult(*)(const char *, void **, int, unsigned long long, int *))sym("cuGetProcAddress_v2");
  static const char *const names[] = {"cuEventRecord", "cuEventRecordWithFlags", "cuStreamQuery",
                                      "cuStreamSynchronize", "cuStreamWaitEvent"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    void *plain = NULL, *pt = NULL;
    char ptsz[64];
    snprintf(ptsz, sizeof ptsz, "%s_ptsz", names[i]);
    EXPECT(get(names[i], &plain, 12000, 0, NULL), OK);
    EXPECT(get(names[i], &pt, 12000, 2, NULL), OK);
    CHECK(plain == sym(names[i]) && pt == sym(ptsz), "%s: the lookups", names[i]);
  }
  void *v2 = NULL;
  EXPECT(get("cuEventElapsedTime", &v2, 12080, 0, NULL), OK);
  CHECK(v2 == sym("cuEventElapsedTime_v2"), "cuEventElapsedTime at 12.8");
}

int main(int argc, char **argv) {
  if (argc < 2)
    return 2;
  char timeline[] = "/tmp/cuda-events-timeline.XXXXXX";
  int fd = mkstemp(timeline);
  if (fd < 0)
    return 2;
  close(fd);
  setenv("FAKE_GPU_TIMELINE", timeline, 1);
  setenv("FAKE_KERNEL_US", "2000", 1);
  /* Launches return at once: the queue is what the test looks at. */
  setenv("FAKE_QUEUE_US", "100000", 1);
  lib = dlopen(argv[1], RTLD_NOW);
  if (!lib) {
    fprintf(stderr, "dlopen: %s\n", dlerror());
    return 2;
  }
  CUresult (*init)(unsigned) = (CUresult(*)(unsigned))sym("cuInit");
  CUresult (*retain)(CUcontext *, int) = (CUresult(*)(CUcontext *, int))sym("cuDevicePrimaryCtxRetain");
  set_current = (CUresult(*)(CUcontext))sym("cuCtxSetCurrent");
  launch_fn = sym("cuLaunchKernel");
  launch_ptsz = sym("cuLaunchKernel_ptsz");
  stream_create = (CUresult(*)(CUstream *, unsigned))sym("cuStreamCreate");
  stream_destroy = (CUresult(*)(CUstream))sym("cuStreamDestroy_v2");
  stream_query = (CUresult(*)(CUstream))sym("cuStreamQuery");
  stream_query_ptsz = (CUresult(*)(CUstream))sym("cuStreamQuery_ptsz");
  stream_sync = (CUresult(*)(CUstream))sym("cuStreamSynchronize");
  stream_wait = (CUresult(*)(CUstream, CUevent, unsigned))sym("cuStreamWaitEvent");
  begin_capture = (CUresult(*)(CUstream, int))sym("cuStreamBeginCapture_v2");
  end_capture = (CUresult(*)(CUstream, void **))sym("cuStreamEndCapture");
  graph_destroy = (CUresult(*)(void *))sym("cuGraphDestroy");
  event_create = (CUresult(*)(CUevent *, unsigned))sym("cuEventCreate");
  event_destroy = (CUresult(*)(CUevent))sym("cuEventDestroy_v2");
  record = (CUresult(*)(CUevent, CUstream))sym("cuEventRecord");
  record_ptsz = (CUresult(*)(CUevent, CUstream))sym("cuEventRecord_ptsz");
  record_flags = (CUresult(*)(CUevent, CUstream, unsigned))sym("cuEventRecordWithFlags");
  query = (CUresult(*)(CUevent))sym("cuEventQuery");
  event_sync = (CUresult(*)(CUevent))sym("cuEventSynchronize");
  elapsed = (CUresult(*)(float *, CUevent, CUevent))sym("cuEventElapsedTime");
  if (init(0) || retain(&ctx, 0) || set_current(ctx)) {
    fprintf(stderr, "no context\n");
    return 2;
  }
  test_record_query_synchronize();
  test_streams_are_independent();
  test_legacy_stream();
  test_per_thread_stream();
  test_wait_event();
  test_flags_and_errors();
  test_lookup();
  unlink(timeline);
  return test_summary();
}

/* What the hook hands out for every entry point a CUDA program can ask
 * for: each cuGetProcAddress_v2 request (name, version, flags) that
 * libcudart 12.9 and 13.5 make (c-tests/hook/cudart-*-driver-requests.txt,
 * traced from NVIDIA's runtimes), and each name the driver exports (what a
 * program linked with -lcuda, or one calling dlsym, resolves).
 *
 * Usage (under LD_PRELOAD=libcuda_limiter.so, the fake libcuda.so.1 on the
 * library path): entry_table REQUESTS-12.9 REQUESTS-13.5 EXPORTS
 * Prints the docs/hook.md table (markdown) and checks the rule: the hook
 * returns its wrapper exactly for the functions that allocate, free (or
 * start or end a reference to memory, or instantiate, destroy or trim
 * graph memory),
 * create or destroy contexts, launch work, report memory (or tell it where
 * a pool is, or hand out entry points), v1 and _v2/_v3/_v4/_ptsz alike,
 * and the driver's own pointer for the rest; every such request must be
 * answered by the fake driver, so the rule is checked on it. A violation
 * is printed on stderr and the exit status is 1. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int (*gpa_t)(const char *, void **, int, unsigned long long, int *);

/* The driver functions the hook must wrap, by their exported names. */
static const char *const must_wrap[] = {
    /* allocate */
    "cuMemAlloc", "cuMemAlloc_v2", "cuMemAllocPitch", "cuMemAllocPitch_v2", "cuMemAllocManaged",
    "cuMemAllocAsync", "cuMemAllocAsync_ptsz", "cuMemAllocFromPoolAsync",
    "cuMemAllocFromPoolAsync_ptsz", "cuMemCreate", "cuArrayCreate", "cuArrayCreate_v2",
    "cuArray3DCreate", "cuArray3DCreate_v2", "cuMipmappedArrayCreate",
    /* free */
    "cuMemFree", "cuMemFree_v2", "cuMemFreeAsync", "cuMemFreeAsync_ptsz", "cuMemRelease",
    "cuArrayDestroy", "cuMipmappedArrayDestroy",
    /* start or end a reference to cuMemCreate's memory */
    "cuMemMap", "cuMemUnmap", "cuMemRetainAllocationHandle", "cuMemExportToShareableHandle",
    "cuMemImportFromShareableHandle", "cuMulticastCreate", "cuMulticastBindMem",
    "cuMulticastBindMem_v2", "cuMulticastBindAddr", "cuMulticastBindAddr_v2", "cuMulticastUnbind",
    /* graph memory: charged at instantiation, given back by a trim */
    "cuGraphInstantiate_v2", "cuGraphInstantiateWithFlags", "cuGraphInstantiateWithParams",
    "cuGraphInstantiateWithParams_ptsz", "cuGraphExecDestroy", "cuDeviceGraphMemTrim",
    /* kernels set into an instantiated graph: their local memory */
    "cuGraphExecKernelNodeSetParams", "cuGraphExecKernelNodeSetParams_v2", "cuGraphExecUpdate",
    "cuGraphExecUpdate_v2",
    /* a captured cuMemAllocAsync: a graph's allocation node from then on */
    "cuStreamEndCapture", "cuStreamEndCapture_ptsz",
    /* what a context's raised limits take */
    "cuCtxSetLimit",
    /* a module's or library's globals */
    "cuModuleLoad", "cuModuleLoadData", "cuModuleLoadDataEx", "cuModuleLoadFatBinary",
    "cuModuleUnload", "cuLibraryLoadData", "cuLibraryLoadFromFile", "cuLibraryUnload",
    /* contexts */
    "cuCtxCreate", "cuCtxCreate_v2", "cuCtxCreate_v3", "cuCtxCreate_v4", "cuCtxDestroy",
    "cuCtxDestroy_v2", "cuDevicePrimaryCtxRetain", "cuDevicePrimaryCtxRelease",
    "cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxReset", "cuDevicePrimaryCtxReset_v2",
    "cuGreenCtxCreate", "cuGreenCtxDestroy",
    /* launch */
    "cuLaunchKernel", "cuLaunchKernel_ptsz", "cuLaunchKernelEx", "cuLaunchKernelEx_ptsz",
    "cuLaunchCooperativeKernel", "cuLaunchCooperativeKernel_ptsz", "cuGraphLaunch",
    "cuGraphLaunch_ptsz",
    /* report memory */
    "cuMemGetInfo", "cuMemGetInfo_v2", "cuDeviceTotalMem", "cuDeviceTotalMem_v2",
    /* where a pool allocates */
    "cuMemPoolCreate", "cuMemPoolDestroy", "cuDeviceGetDefaultMemPool", "cuDeviceGetMemPool",
    "cuDeviceSetMemPool", "cuMemGetDefaultMemPool", "cuMemGetMemPool", "cuMemSetMemPool",
    /* when a pool releases what it keeps */
    "cuCtxSynchronize", "cuStreamSynchronize", "cuStreamSynchronize_ptsz", "cuEventSynchronize",
    "cuMemPoolTrimTo",
    /* entry points */
    "cuGetProcAddress", "cuGetProcAddress_v2",
};

static int must(const char *fn) {
  for (size_t i = 0; i < sizeof must_wrap / sizeof must_wrap[0]; i++)
    if (strcmp(must_wrap[i], fn) == 0)
      return 1;
  return 0;
}

static int failures;

/* One row: what `p` is (the hook's wrapper or the driver's own function). */
static void row(const char *asked, const char *how, int in129, int in135, void *p) {
  Dl_info i;
  const char *fn = "—", *who = "not in the fake driver";
  int hooked = 0;
  if (p && dladdr(p, &i) && i.dli_sname) {
    fn = i.dli_sname;
    hooked = i.dli_fname && strstr(i.dli_fname, "libcuda_limiter") != NULL;
    who = hooked ? "**hook's wrapper**" : "driver's own";
  }
  printf("| `%s` | %s | %s | %s | `%s` | %s |\n", asked, how, in129 ? "✓" : "", in135 ? "✓" : "",
         fn, who);
  if (p && hooked != must(fn)) {
    fprintf(stderr, "FAIL: %s %s: %s is %s\n", asked, how, fn,
            hooked ? "wrapped, but not one the hook should wrap" : "not wrapped");
    failures++;
  }
  if (!p && must(asked)) {
    fprintf(stderr, "FAIL: %s %s: the fake driver does not answer it\n", asked, how);
    failures++;
  }
}

#define MAXREQ 2048
typedef struct { char name[96]; int ver, flags, in[2]; } request_t;
static request_t req[MAXREQ];
static int nreq;

static void read_requests(const char *path, int which) {
  FILE *f = fopen(path, "r");
  char line[256];
  if (!f) {
    perror(path);
    exit(2);
  }
  while (fgets(line, sizeof line, f)) {
    char name[96];
    int ver, flags;
    if (line[0] == '#' || sscanf(line, "%95s ver=%d flags=%d", name, &ver, &flags) != 3)
      continue;
    int k = 0;
    while (k < nreq && !(strcmp(req[k].name, name) == 0 && req[k].ver == ver &&
                         req[k].flags == flags))
      k++;
    if (k == nreq) {
      if (nreq == MAXREQ)
        exit(2);
      snprintf(req[k].name, sizeof req[k].name, "%s", name);
      req[k].ver = ver;
      req[k].flags = flags;
      nreq++;
    }
    req[k].in[which] = 1;
  }
  fclose(f);
}

static int by_name(const void *a, const void *b) {
  const request_t *x = a, *y = b;
  int c = strcmp(x->name, y->name);
  return c ? c : x->ver != y->ver ? x->ver - y->ver : x->flags - y->flags;
}

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: %s REQUESTS-12.9 REQUESTS-13.5 EXPORTS\n", argv[0]);
    return 2;
  }
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  gpa_t gpa = h ? (gpa_t)dlsym(h, "cuGetProcAddress_v2") : NULL;
  int (*init)(unsigned) = h ? (int (*)(unsigned))dlsym(h, "cuInit") : NULL;
  if (!gpa || !init || init(0) != 0) {
    fprintf(stderr, "no driver: %s\n", dlerror());
    return 2;
  }
  read_requests(argv[1], 0);
  read_requests(argv[2], 1);
  qsort(req, nreq, sizeof req[0], by_name);
  printf("| asked | how | 12.9 | 13.5 | function returned | by |\n|---|---|---|---|---|---|\n");
  for (int k = 0; k < nreq; k++) {
    void *p = NULL;
    int st;
    char how[64];
    if (gpa(req[k].name, &p, req[k].ver, (unsigned long long)req[k].flags, &st) != 0)
      p = NULL;
    snprintf(how, sizeof how, "cuGetProcAddress_v2 %d%s", req[k].ver,
             req[k].flags == 2 ? " per-thread" : "");
    row(req[k].name, how, req[k].in[0], req[k].in[1], p);
  }
  FILE *f = fopen(argv[3], "r");
  char name[128];
  if (!f) {
    perror(argv[3]);
    return 2;
  }
  while (fscanf(f, "%127s", name) == 1)
    if (strncmp(name, "cu", 2) == 0 && name[2] >= 'A' && name[2] <= 'Z')
      row(name, "exported (`-lcuda`, `dlsym`)", 0, 0, dlsym(h, name));
  fclose(f);
  return failures ? 1 : 0;
}

/*
 * probe: load libaccelerator.so at run time (dlopen, as the Go hypervisor
 * does) and print what it sees: devices, partition templates, topology,
 * metrics, extended metrics and per-process usage; with --pci, the
 * accelerators on the PCI bus beside the vendor's devices, the mismatches
 * and what to do about each.
 *
 *   probe [--pci] [--json] [--watch SECONDS [--count N]] [LIBRARY]
 *
 * LIBRARY defaults to libaccelerator.so next to this executable, then
 * build/libaccelerator.so under the current directory, then the dynamic
 * loader's search path. --json follows docs/device.schema.json.
 * Any failed call prints its Result name and acceleratorGetLastError() and
 * exits with status 1; bad usage exits with status 2.
 */
#include "accelerator.h"

#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define PROBE_JSON_SCHEMA "accelerator-probe/1"
#define PROBE_JSON_WATCH_SCHEMA "accelerator-probe-metrics/1"

/* Every function the probe resolves, typed from the header's declarations. */
#define API(X)                                                                 \
    X(GetDeviceCount) X(GetAllDevices) X(getDeviceInfo)                        \
    X(freeExtendedDeviceInfo) X(getPartitionTemplates)                         \
    X(freePartitionTemplates) X(getDeviceTopology)                             \
    X(freeExtendedDeviceTopology) X(GetDeviceMetrics)                          \
    X(getExtendedDeviceMetrics) X(freeExtendedDeviceMetrics)                   \
    X(GetProcessComputeUtilization) X(GetProcessMemoryUtilization)             \
    X(GetWorkerShares)                                                         \
    X(acceleratorGetLastError) X(acceleratorAbiVersion)                        \
    X(acceleratorVendorName) X(acceleratorVendorStatus)                        \
    X(acceleratorGetPciDevices)

static struct {
#define FIELD(name) __typeof__(&name) name;
    API(FIELD)
#undef FIELD
} lib;

static const char *lib_path;
static int json;
static const char *vendor_name;
static volatile sig_atomic_t interrupted;

static const char *result_name(Result r) {
    switch (r) {
    case RESULT_SUCCESS: return "RESULT_SUCCESS";
    case RESULT_ERROR_INVALID_PARAM: return "RESULT_ERROR_INVALID_PARAM";
    case RESULT_ERROR_NOT_FOUND: return "RESULT_ERROR_NOT_FOUND";
    case RESULT_ERROR_NOT_SUPPORTED: return "RESULT_ERROR_NOT_SUPPORTED";
    case RESULT_ERROR_RESOURCE_EXHAUSTED: return "RESULT_ERROR_RESOURCE_EXHAUSTED";
    case RESULT_ERROR_OPERATION_FAILED: return "RESULT_ERROR_OPERATION_FAILED";
    case RESULT_ERROR_INTERNAL: return "RESULT_ERROR_INTERNAL";
    }
    return "RESULT_UNKNOWN";
}

static void die(const char *fmt, ...) {
    va_list ap;
    fputs("probe: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(1);
}

/* Abort with the call's Result name and the library's reason. */
static void check(Result r, const char *what) {
    if (r != RESULT_SUCCESS) {
        const char *why = lib.acceleratorGetLastError();
        die("%s failed: %s (%d): %s", what, result_name(r), (int)r,
            why && *why ? why : "(no reason given)");
    }
}

static void *xcalloc(size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size);
    if (!p)
        die("out of memory");
    return p;
}

/* ---- loading ---------------------------------------------------------- */

static const char *default_library(void) {
    static char path[PATH_MAX];
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = '\0';
            if (snprintf(path, sizeof path, "%s/libaccelerator.so", exe) < (int)sizeof path &&
                access(path, R_OK) == 0)
                return path;
        }
    }
    if (access("build/libaccelerator.so", R_OK) == 0)
        return "./build/libaccelerator.so";
    return "libaccelerator.so";
}

static void load(const char *path) {
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h)
        die("cannot load %s: %s", path, dlerror());
#define RESOLVE(name)                                                          \
    lib.name = (__typeof__(&name))dlsym(h, #name);                             \
    if (!lib.name)                                                             \
        die("%s: missing symbol %s", path, #name);
    API(RESOLVE)
#undef RESOLVE
}

/* ---- JSON output -------------------------------------------------------- */

static void jstr(const char *s, size_t max) {
    putchar('"');
    for (size_t i = 0; i < max && s[i]; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\')
            printf("\\%c", c);
        else if (c == '\n')
            fputs("\\n", stdout);
        else if (c == '\t')
            fputs("\\t", stdout);
        else if (c < 0x20 || c == 0x7f)
            printf("\\u%04x", c);
        else
            putchar(c);
    }
    putchar('"');
}
/* A fixed char[N] field, read with its bound. */
#define JFIELD(key, arr) (printf("\"%s\":", key), jstr((arr), sizeof(arr)))
static void jkey(const char *key) { printf("\"%s\":", key); }
static void jdouble(double v) {
    if (isfinite(v))
        printf("%.17g", v); /* round-trips exactly */
    else
        fputs("null", stdout);
}

/* ---- text helpers ----------------------------------------------------- */

/* A bounded copy of a fixed char[N] field, safe to print with %s. */
#define FIX(arr) fix_buf((char[sizeof(arr) + 1]){0}, (arr), sizeof(arr))
static const char *fix_buf(char *dst, const char *src, size_t n) {
    memcpy(dst, src, n);
    dst[n] = '\0';
    return dst;
}

static const char *gib(uint64_t bytes, char *buf, size_t n) {
    snprintf(buf, n, "%.2f GiB", (double)bytes / (1024.0 * 1024.0 * 1024.0));
    return buf;
}
#define GIB(b) gib((b), (char[32]){0}, 32)

static void heading(const char *title) {
    printf("\n== %s ==\n", title);
}

/* ---- data ------------------------------------------------------------- */

typedef struct {
    size_t count;
    ExtendedDeviceInfo *devices; /* caller-allocated style */
    const char **uuids;
    size_t pci_count;
    AcceleratorPciDevice *pci; /* PCI's accelerators joined with the devices */
} Devices;

static Devices get_devices(void) {
    Devices d = {0};
    check(lib.GetDeviceCount(&d.count), "GetDeviceCount");
    if (d.count == 0)
        return d;
    d.devices = xcalloc(d.count, sizeof *d.devices);
    size_t got = 0;
    check(lib.GetAllDevices(d.devices, d.count, &got), "GetAllDevices");
    d.count = got < d.count ? got : d.count;
    d.uuids = xcalloc(d.count, sizeof *d.uuids);
    for (size_t i = 0; i < d.count; i++) {
        d.devices[i].basic.uuid[sizeof d.devices[i].basic.uuid - 1] = '\0';
        d.uuids[i] = d.devices[i].basic.uuid;
    }
    return d;
}

static void free_devices(Devices *d) {
    free(d->devices);
    free(d->uuids);
    free(d->pci);
    memset(d, 0, sizeof *d);
}

/* Caller-allocated process lists: grow the buffer until everything fits. */
#define GROW_FETCH(Type, fn, out, count)                                       \
    do {                                                                       \
        size_t cap_ = 16;                                                      \
        for (;;) {                                                             \
            (out) = xcalloc(cap_, sizeof(Type));                               \
            check(lib.fn((out), cap_, &(count)), #fn);                         \
            if ((count) < cap_)                                                \
                break;                                                         \
            free(out);                                                         \
            cap_ *= 2;                                                         \
        }                                                                      \
    } while (0)

/* PCI's accelerators joined with the vendor's devices (acceleratorGetPciDevices). */
static void get_pci(Devices *d) {
    GROW_FETCH(AcceleratorPciDevice, acceleratorGetPciDevices, d->pci, d->pci_count);
}

/* The PCI row of a vendor device, or NULL when PCI does not show it. */
static const AcceleratorPciDevice *pci_of(const Devices *d, int32_t index) {
    for (size_t i = 0; i < d->pci_count; i++)
        if (d->pci[i].deviceIndex == index && d->pci[i].address[0])
            return &d->pci[i];
    return NULL;
}

/* Backend.AI-style metadata per device kind (docs/device.schema.json
 * checks the same table): one line per vendor. */
static const struct kind {
    const char *vendor, *slot, *unit, *description;
} kinds[] = {
    {"stub", "stub.device", "GPU", "simulated GPU (stub vendor)"},
    {"nvidia", "cuda.device", "GPU", "NVIDIA GPU (CUDA)"},
    {"ascend", "ascend.device", "NPU", "Huawei Ascend NPU (CANN)"},
    {"amd", "rocm.device", "GPU", "AMD GPU (ROCm)"},
    {"habana", "gaudi2.device", "HPU", "Intel Gaudi HPU (HLML)"},
};

static const struct kind *kind_of(const char *vendor) {
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        if (strcmp(kinds[i].vendor, vendor) == 0)
            return &kinds[i];
    return NULL;
}

/* A PCI record: what sysfs says of one function. */
static void json_pci_record(const AcceleratorPciDevice *r) {
    putchar('{');
    JFIELD("address", r->address);
    printf(",\"vendorId\":\"%04x\",\"deviceId\":\"%04x\",\"classCode\":\"%06" PRIx32 "\",",
           r->vendorId, r->deviceId, r->classCode);
    JFIELD("vendorName", r->vendorName);
    printf(",\"numaNode\":%" PRId32 ",\"iommuGroup\":%" PRId32 ",\"currentLink\":{\"speedGTs\":",
           r->numaNode, r->iommuGroup);
    jdouble(r->currentLinkSpeedGTs);
    printf(",\"width\":%" PRIu32 "},\"maxLink\":{\"speedGTs\":", r->currentLinkWidth);
    jdouble(r->maxLinkSpeedGTs);
    printf(",\"width\":%" PRIu32 "},", r->maxLinkWidth);
    JFIELD("driver", r->driver);
    printf(",\"sriov\":{\"totalVfs\":%" PRIu32 ",\"numVfs\":%" PRIu32 ",", r->sriovTotalVfs,
           r->sriovNumVfs);
    JFIELD("physfn", r->physfn);
    printf("}}");
}

/* A row of the joined view: the PCI record, the vendor's device, or both. */
static void json_pci_row(const AcceleratorPciDevice *r) {
    printf("{\"record\":");
    if (r->address[0])
        json_pci_record(r);
    else
        fputs("null", stdout);
    printf(",\"device\":");
    if (r->deviceIndex >= 0) {
        printf("{\"index\":%" PRId32 ",", r->deviceIndex);
        JFIELD("uuid", r->deviceUUID);
        putchar('}');
    } else {
        fputs("null", stdout);
    }
    putchar(',');
    JFIELD("state", r->state);
    printf(",\"mismatch\":%s,", r->mismatch ? "true" : "false");
    JFIELD("note", r->note); putchar(',');
    JFIELD("fix", r->fix);
    putchar('}');
}

/* The device's Backend.AI-style description and its PCI record. */
static void json_metadata(const Devices *d, const DeviceBasicInfo *b) {
    const struct kind *k = kind_of(vendor_name);
    const AcceleratorPciDevice *r = pci_of(d, b->index);
    printf("\"kind\":");
    jstr(vendor_name, SIZE_MAX);
    printf(",\"metadata\":{\"slotName\":");
    jstr(k ? k->slot : "unknown.device", SIZE_MAX);
    printf(",\"humanReadableName\":");
    jstr(k ? k->unit : "device", SIZE_MAX);
    printf(",\"description\":");
    jstr(k ? k->description : vendor_name, SIZE_MAX);
    printf(",\"displayUnit\":");
    jstr(k ? k->unit : "device", SIZE_MAX);
    printf(",\"displayIcon\":");
    jstr(vendor_name, SIZE_MAX);
    printf(",\"numberFormat\":{\"binary\":false,\"roundLength\":0},");
    JFIELD("deviceId", b->uuid);
    printf(",\"hwLocation\":"); /* the PCI address, else the device's own ID */
    if (r)
        jstr(r->address, sizeof r->address);
    else
        jstr(b->uuid, sizeof b->uuid);
    printf(",\"memorySize\":%" PRIu64 ",\"processingUnits\":%" PRIu64 ",\"numaNode\":",
           b->totalMemoryBytes, b->totalComputeUnits);
    if (b->numaNode >= 0)
        printf("%" PRId32, b->numaNode);
    else
        fputs("null", stdout);
    printf("},\"pci\":");
    if (r)
        json_pci_record(r);
    else
        fputs("null", stdout);
    putchar(',');
}

static void print_pci(const Devices *d) {
    if (json) {
        jkey("pci");
        putchar('[');
        for (size_t i = 0; i < d->pci_count; i++) {
            if (i)
                putchar(',');
            json_pci_row(&d->pci[i]);
        }
        printf("],");
        return;
    }
    heading("PCI view (accelerators on the bus)");
    size_t shown = 0;
    for (size_t i = 0; i < d->pci_count; i++) {
        const AcceleratorPciDevice *r = &d->pci[i];
        if (!r->address[0])
            continue;
        if (shown++ == 0)
            printf("%-13s %-8s %-9s %-6s %4s %5s %-13s %-13s %-20s %s\n", "ADDRESS", "VENDOR",
                   "ID", "CLASS", "NUMA", "IOMMU", "LINK NOW", "LINK MAX", "DRIVER", "SR-IOV");
        char now[32], max[32], sriov[48], iommu[16];
        snprintf(now, sizeof now, "%.1f GT/s x%" PRIu32, r->currentLinkSpeedGTs,
                 r->currentLinkWidth);
        snprintf(max, sizeof max, "%.1f GT/s x%" PRIu32, r->maxLinkSpeedGTs, r->maxLinkWidth);
        if (r->physfn[0])
            snprintf(sriov, sizeof sriov, "VF of %s", FIX(r->physfn));
        else if (r->sriovTotalVfs)
            snprintf(sriov, sizeof sriov, "%" PRIu32 "/%" PRIu32 " VFs", r->sriovNumVfs,
                     r->sriovTotalVfs);
        else
            snprintf(sriov, sizeof sriov, "-");
        if (r->iommuGroup >= 0)
            snprintf(iommu, sizeof iommu, "%" PRId32, r->iommuGroup);
        else
            snprintf(iommu, sizeof iommu, "-");
        printf("%-13s %-8s %04x:%04x %06" PRIx32 " %4" PRId32 " %5s %-13s %-13s %-20s %s\n",
               FIX(r->address), FIX(r->vendorName), r->vendorId, r->deviceId, r->classCode,
               r->numaNode, iommu, r->currentLinkWidth ? now : "-", r->maxLinkWidth ? max : "-",
               r->driver[0] ? FIX(r->driver) : "(none)", sriov);
    }
    if (shown == 0)
        printf("(no accelerators on the PCI bus)\n");

    heading("Vendor view");
    if (d->count == 0)
        printf("(%s lists no devices)\n", vendor_name);
    else
        printf("%-5s %-44s %-13s %s\n", "INDEX", "UUID", "PCI", "MODEL");
    for (size_t i = 0; i < d->count; i++) {
        const DeviceBasicInfo *b = &d->devices[i].basic;
        const AcceleratorPciDevice *r = pci_of(d, b->index);
        printf("%-5" PRId32 " %-44s %-13s %s\n", b->index, FIX(b->uuid),
               r ? FIX(r->address) : "-", FIX(b->model));
    }

    heading("Mismatches");
    size_t n = 0;
    for (size_t i = 0; i < d->pci_count; i++) {
        const AcceleratorPciDevice *r = &d->pci[i];
        if (!r->mismatch)
            continue;
        n++;
        printf("! %s %s: %s. Fix: %s\n",
               r->address[0] ? FIX(r->address) : FIX(r->deviceUUID), FIX(r->state),
               FIX(r->note), FIX(r->fix));
    }
    if (n == 0)
        printf("(none)\n");
}

/* ---- sections --------------------------------------------------------- */

static void print_devices(const Devices *d) {
    if (json) {
        jkey("devices");
        putchar('[');
    } else {
        heading("Devices");
        printf("%-5s %-20s %-8s %-24s %-12s %12s %6s %8s %5s %-8s %s\n", "INDEX", "UUID",
               "VENDOR", "MODEL", "DRIVER", "MEMORY", "CUS", "TFLOPS", "NUMA", "PCIE",
               "CAPABILITIES");
    }
    for (size_t i = 0; i < d->count; i++) {
        const ExtendedDeviceInfo *e = &d->devices[i];
        const DeviceBasicInfo *b = &e->basic;
        const DeviceCapabilities *c = &e->capabilities;
        const DeviceProperties *p = &e->props;

        /* The library-allocated style adds the related devices. */
        ExtendedDeviceInfo full;
        memset(&full, 0, sizeof full);
        check(lib.getDeviceInfo(b->index, &full), "getDeviceInfo");

        PartitionTemplate *t = NULL;
        size_t nt = 0;
        Result r = lib.getPartitionTemplates(b->index, &t, &nt);
        if (r == RESULT_ERROR_NOT_SUPPORTED) {
            t = NULL;
            nt = 0;
        } else {
            check(r, "getPartitionTemplates");
        }

        if (json) {
            printf("%s{", i ? "," : "");
            json_metadata(d, b);
            printf("\"index\":%" PRId32 ",", b->index);
            JFIELD("uuid", b->uuid); putchar(',');
            JFIELD("vendor", b->vendor); putchar(',');
            JFIELD("model", b->model); putchar(',');
            JFIELD("driverVersion", b->driverVersion); putchar(',');
            JFIELD("firmwareVersion", b->firmwareVersion); putchar(',');
            printf("\"numaNode\":%" PRId32 ",", b->numaNode);
            printf("\"totalMemoryBytes\":%" PRIu64 ",", b->totalMemoryBytes);
            printf("\"totalComputeUnits\":%" PRIu64 ",", b->totalComputeUnits);
            jkey("maxTflops"); jdouble(b->maxTflops); putchar(',');
            printf("\"pcieGen\":%" PRIu32 ",\"pcieWidth\":%" PRIu32 ",", b->pcieGen, b->pcieWidth);
            printf("\"properties\":{\"clockGraphics\":%" PRIu32 ",\"clockSM\":%" PRIu32
                   ",\"clockMem\":%" PRIu32 ",\"clockAI\":%" PRIu32 ",\"powerLimit\":%" PRIu32
                   ",\"temperatureThreshold\":%" PRIu32 ",\"eccEnabled\":%s"
                   ",\"persistenceModeEnabled\":%s,",
                   p->clockGraphics, p->clockSM, p->clockMem, p->clockAI, p->powerLimit,
                   p->temperatureThreshold, p->eccEnabled ? "true" : "false",
                   p->persistenceModeEnabled ? "true" : "false");
            JFIELD("computeCapability", p->computeCapability); putchar(',');
            JFIELD("chipType", p->chipType);
            printf("},\"capabilities\":{\"supportsPartitioning\":%s,\"supportsSoftIsolation\":%s"
                   ",\"supportsHardIsolation\":%s,\"supportsSnapshot\":%s,\"supportsMetrics\":%s"
                   ",\"maxPartitions\":%" PRIu32 ",\"maxWorkersPerDevice\":%" PRIu32 "},",
                   c->supportsPartitioning ? "true" : "false",
                   c->supportsSoftIsolation ? "true" : "false",
                   c->supportsHardIsolation ? "true" : "false",
                   c->supportsSnapshot ? "true" : "false", c->supportsMetrics ? "true" : "false",
                   c->maxPartitions, c->maxWorkersPerDevice);
            jkey("relatedDevices");
            putchar('[');
            for (size_t k = 0; k < full.relatedDeviceCount; k++) {
                const RelatedDevice *rd = &full.relatedDevices[k];
                printf("%s{", k ? "," : "");
                JFIELD("deviceUUID", rd->deviceUUID); putchar(',');
                JFIELD("connectionType", rd->connectionType);
                printf(",\"bandwidthMBps\":%" PRIu32 ",\"latencyNs\":%" PRIu32 "}",
                       rd->bandwidthMBps, rd->latencyNs);
            }
            printf("],");
            jkey("partitionTemplates");
            putchar('[');
            for (size_t k = 0; k < nt; k++) {
                printf("%s{", k ? "," : "");
                JFIELD("templateId", t[k].templateId); putchar(',');
                JFIELD("name", t[k].name);
                printf(",\"memoryBytes\":%" PRIu64 ",\"computeUnits\":%" PRIu64 ",",
                       t[k].memoryBytes, t[k].computeUnits);
                jkey("tflops"); jdouble(t[k].tflops);
                printf(",\"sliceCount\":%" PRIu32 ",\"isDefault\":%s,", t[k].sliceCount,
                       t[k].isDefault ? "true" : "false");
                JFIELD("description", t[k].description);
                putchar('}');
            }
            printf("]}");
        } else {
            char caps[64];
            snprintf(caps, sizeof caps, "%s%s%s%s%s", c->supportsPartitioning ? "partition " : "",
                     c->supportsSoftIsolation ? "soft " : "",
                     c->supportsHardIsolation ? "hard " : "",
                     c->supportsSnapshot ? "snapshot " : "", c->supportsMetrics ? "metrics" : "");
            char pcie[16];
            snprintf(pcie, sizeof pcie, "Gen%" PRIu32 " x%" PRIu32, b->pcieGen, b->pcieWidth);
            printf("%-5" PRId32 " %-20s %-8s %-24s %-12s %12s %6" PRIu64 " %8.1f %5" PRId32
                   " %-8s %s\n",
                   b->index, FIX(b->uuid), FIX(b->vendor), FIX(b->model), FIX(b->driverVersion),
                   GIB(b->totalMemoryBytes), b->totalComputeUnits, b->maxTflops, b->numaNode,
                   pcie, caps);
            printf("      firmware %s, chip %s, compute capability %s, clocks %" PRIu32 "/%" PRIu32
                   "/%" PRIu32 " MHz, power limit %" PRIu32 " W, max partitions %" PRIu32
                   ", %zu related device(s)\n",
                   FIX(b->firmwareVersion), FIX(p->chipType), FIX(p->computeCapability),
                   p->clockGraphics, p->clockSM, p->clockMem, p->powerLimit, c->maxPartitions,
                   full.relatedDeviceCount);
            if (nt > 0) {
                printf("      %-16s %-28s %12s %6s %8s %6s %s\n", "TEMPLATE", "NAME", "MEMORY",
                       "CUS", "TFLOPS", "SLICES", "DEFAULT");
                for (size_t k = 0; k < nt; k++)
                    printf("      %-16s %-28s %12s %6" PRIu64 " %8.1f %6" PRIu32 " %s\n",
                           FIX(t[k].templateId), FIX(t[k].name), GIB(t[k].memoryBytes),
                           t[k].computeUnits, t[k].tflops, t[k].sliceCount,
                           t[k].isDefault ? "yes" : "");
            } else {
                printf("      (no partition templates)\n");
            }
        }
        lib.freePartitionTemplates(t, nt);
        lib.freeExtendedDeviceInfo(&full);
    }
    if (json)
        printf("],");
}

static void print_topology(const Devices *d) {
    if (d->count == 0) {
        if (json)
            printf("\"topology\":null,");
        return;
    }
    int32_t *idx = xcalloc(d->count, sizeof *idx);
    for (size_t i = 0; i < d->count; i++)
        idx[i] = d->devices[i].basic.index;
    ExtendedDeviceTopology topo;
    memset(&topo, 0, sizeof topo);
    check(lib.getDeviceTopology(idx, d->count, &topo), "getDeviceTopology");
    if (json) {
        printf("\"topology\":{");
        JFIELD("topologyType", topo.topologyType);
        printf(",\"nvlinkBandwidthMBps\":%" PRIu32 ",\"ibNicCount\":%" PRIu32 ",\"devices\":[",
               topo.nvlinkBandwidthMBps, topo.ibNicCount);
        for (size_t i = 0; i < topo.deviceCount; i++) {
            const DeviceTopology *t = &topo.devices[i];
            printf("%s{", i ? "," : "");
            JFIELD("deviceUUID", t->deviceUUID);
            printf(",\"numaNode\":%" PRId32 ",\"connections\":[", t->numaNode);
            for (size_t k = 0; k < t->connectionCount; k++) {
                const RelatedDevice *c = &t->connections[k];
                printf("%s{", k ? "," : "");
                JFIELD("deviceUUID", c->deviceUUID); putchar(',');
                JFIELD("connectionType", c->connectionType);
                printf(",\"bandwidthMBps\":%" PRIu32 ",\"latencyNs\":%" PRIu32 "}",
                       c->bandwidthMBps, c->latencyNs);
            }
            printf("]}");
        }
        printf("]},");
    } else {
        heading("Topology");
        printf("type %s, NVLink bandwidth %" PRIu32 " MB/s, %" PRIu32 " IB NIC(s)\n",
               FIX(topo.topologyType), topo.nvlinkBandwidthMBps, topo.ibNicCount);
        printf("%-20s %5s %-20s %-10s %12s %10s\n", "DEVICE", "NUMA", "PEER", "LINK",
               "BANDWIDTH", "LATENCY");
        for (size_t i = 0; i < topo.deviceCount; i++) {
            const DeviceTopology *t = &topo.devices[i];
            if (t->connectionCount == 0)
                printf("%-20s %5" PRId32 " %-20s\n", FIX(t->deviceUUID), t->numaNode, "-");
            for (size_t k = 0; k < t->connectionCount; k++) {
                const RelatedDevice *c = &t->connections[k];
                char bw[24], lat[24];
                snprintf(bw, sizeof bw, "%" PRIu32 " MB/s", c->bandwidthMBps);
                snprintf(lat, sizeof lat, "%" PRIu32 " ns", c->latencyNs);
                printf("%-20s %5" PRId32 " %-20s %-10s %12s %10s\n",
                       k ? "" : FIX(t->deviceUUID), t->numaNode, FIX(c->deviceUUID),
                       FIX(c->connectionType), bw, lat);
            }
        }
    }
    lib.freeExtendedDeviceTopology(&topo);
    free(idx);
}

static void print_metrics(const Devices *d) {
    DeviceMetrics *m = xcalloc(d->count, sizeof *m);
    ExtendedDeviceMetrics *x = NULL;
    if (d->count > 0) {
        check(lib.GetDeviceMetrics(d->uuids, d->count, m), "GetDeviceMetrics");
        check(lib.getExtendedDeviceMetrics(d->uuids, d->count, &x), "getExtendedDeviceMetrics");
    }
    if (json) {
        printf("\"metrics\":[");
        for (size_t i = 0; i < d->count; i++) {
            printf("%s{", i ? "," : "");
            JFIELD("deviceUUID", m[i].deviceUUID);
            printf(",\"powerUsageWatts\":");
            jdouble(m[i].powerUsageWatts);
            printf(",\"temperatureCelsius\":");
            jdouble(m[i].temperatureCelsius);
            printf(",\"pcieRxBytes\":%" PRIu64 ",\"pcieTxBytes\":%" PRIu64
                   ",\"smActivePercent\":%" PRIu32 ",\"tensorCoreUsagePercent\":%" PRIu32
                   ",\"memoryUsedBytes\":%" PRIu64 ",\"memoryTotalBytes\":%" PRIu64 "}",
                   m[i].pcieRxBytes, m[i].pcieTxBytes, m[i].smActivePercent,
                   m[i].tensorCoreUsagePercent, m[i].memoryUsedBytes, m[i].memoryTotalBytes);
        }
        printf("],\"extendedMetrics\":[");
        for (size_t i = 0; i < d->count; i++) {
            printf("%s{", i ? "," : "");
            JFIELD("deviceUUID", x[i].deviceUUID);
            printf(",\"nvlinkBandwidthMBps\":[");
            for (size_t k = 0; k < x[i].nvlinkCount; k++)
                printf("%s%" PRIu32, k ? "," : "", x[i].nvlinkBandwidthMBps[k]);
            printf("],\"ibNicBandwidthMBps\":[");
            for (size_t k = 0; k < x[i].ibNicCount; k++)
                printf("%s%" PRIu64, k ? "," : "", x[i].ibNicBandwidthMBps[k]);
            printf("],\"pcieBandwidthMBps\":[");
            for (size_t k = 0; k < x[i].pcieLinkCount; k++)
                printf("%s%" PRIu32, k ? "," : "", x[i].pcieBandwidthMBps[k]);
            printf("]}");
        }
        printf("]");
    } else {
        heading("Metrics");
        printf("%-20s %9s %7s %6s %8s %21s %14s %14s\n", "DEVICE", "POWER", "TEMP", "SM%",
               "TENSOR%", "MEMORY USED/TOTAL", "PCIE RX", "PCIE TX");
        for (size_t i = 0; i < d->count; i++) {
            char mem[48];
            snprintf(mem, sizeof mem, "%s/%s", GIB(m[i].memoryUsedBytes),
                     GIB(m[i].memoryTotalBytes));
            printf("%-20s %7.1f W %5.1f C %5" PRIu32 "%% %7" PRIu32 "%% %21s %14" PRIu64
                   " %14" PRIu64 "\n",
                   FIX(m[i].deviceUUID), m[i].powerUsageWatts, m[i].temperatureCelsius,
                   m[i].smActivePercent, m[i].tensorCoreUsagePercent, mem, m[i].pcieRxBytes,
                   m[i].pcieTxBytes);
        }
        heading("Extended metrics (MB/s per link)");
        printf("%-20s %-40s %-16s %s\n", "DEVICE", "NVLINK", "IB NIC", "PCIE");
        for (size_t i = 0; i < d->count; i++) {
            char nv[256] = "-", ib[128] = "-", pc[128] = "-";
            size_t o = 0;
            for (size_t k = 0; k < x[i].nvlinkCount && o < sizeof nv; k++)
                o += snprintf(nv + o, sizeof nv - o, "%s%" PRIu32, k ? " " : "",
                              x[i].nvlinkBandwidthMBps[k]);
            o = 0;
            for (size_t k = 0; k < x[i].ibNicCount && o < sizeof ib; k++)
                o += snprintf(ib + o, sizeof ib - o, "%s%" PRIu64, k ? " " : "",
                              x[i].ibNicBandwidthMBps[k]);
            o = 0;
            for (size_t k = 0; k < x[i].pcieLinkCount && o < sizeof pc; k++)
                o += snprintf(pc + o, sizeof pc - o, "%s%" PRIu32, k ? " " : "",
                              x[i].pcieBandwidthMBps[k]);
            printf("%-20s %-40s %-16s %s\n", FIX(x[i].deviceUUID), nv, ib, pc);
        }
    }
    lib.freeExtendedDeviceMetrics(x, d->count);
    free(m);
}

static void print_processes(void) {
    ComputeUtilization *cu = NULL;
    MemoryUtilization *mu = NULL;
    size_t nc = 0, nm = 0;
    GROW_FETCH(ComputeUtilization, GetProcessComputeUtilization, cu, nc);
    GROW_FETCH(MemoryUtilization, GetProcessMemoryUtilization, mu, nm);
    if (json) {
        printf(",\"processes\":{\"compute\":[");
        for (size_t i = 0; i < nc; i++) {
            printf("%s{", i ? "," : "");
            JFIELD("processId", cu[i].processId); putchar(',');
            JFIELD("deviceUUID", cu[i].deviceUUID);
            printf(",\"utilizationPercent\":");
            jdouble(cu[i].utilizationPercent);
            printf(",\"activeSMs\":%" PRIu64 ",\"totalSMs\":%" PRIu64 ",\"tflopsUsed\":",
                   cu[i].activeSMs, cu[i].totalSMs);
            jdouble(cu[i].tflopsUsed);
            putchar('}');
        }
        printf("],\"memory\":[");
        for (size_t i = 0; i < nm; i++) {
            printf("%s{", i ? "," : "");
            JFIELD("processId", mu[i].processId); putchar(',');
            JFIELD("deviceUUID", mu[i].deviceUUID);
            printf(",\"usedBytes\":%" PRIu64 ",\"reservedBytes\":%" PRIu64
                   ",\"utilizationPercent\":",
                   mu[i].usedBytes, mu[i].reservedBytes);
            jdouble(mu[i].utilizationPercent);
            putchar('}');
        }
        printf("]}");
    } else {
        heading("Process compute usage");
        if (nc == 0)
            printf("(no tracked processes)\n");
        else
            printf("%-10s %-20s %8s %10s %10s\n", "PROCESS", "DEVICE", "UTIL%", "SMS", "TFLOPS");
        for (size_t i = 0; i < nc; i++) {
            char sms[48];
            snprintf(sms, sizeof sms, "%" PRIu64 "/%" PRIu64, cu[i].activeSMs, cu[i].totalSMs);
            printf("%-10s %-20s %7.1f%% %10s %10.2f\n", FIX(cu[i].processId),
                   FIX(cu[i].deviceUUID), cu[i].utilizationPercent, sms, cu[i].tflopsUsed);
        }
        heading("Process memory usage");
        if (nm == 0)
            printf("(no tracked processes)\n");
        else
            printf("%-10s %-20s %12s %12s %8s\n", "PROCESS", "DEVICE", "USED", "RESERVED",
                   "UTIL%");
        for (size_t i = 0; i < nm; i++)
            printf("%-10s %-20s %12s %12s %7.1f%%\n", FIX(mu[i].processId),
                   FIX(mu[i].deviceUUID), GIB(mu[i].usedBytes), GIB(mu[i].reservedBytes),
                   mu[i].utilizationPercent);
    }
    free(cu);
    free(mu);
}

/* Monotonic ns (the interval of a measured share). */
static double mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* Soft mode: each worker's request, limit, priority, granted share, and
 * its share measured here: the device time its processes took over 0.2 s
 * (two readings of GetWorkerShares). */
static void print_workers(void) {
    WorkerShare *a = NULL, *b = NULL;
    size_t na = 0, nb = 0;
    GROW_FETCH(WorkerShare, GetWorkerShares, a, na);
    double t0 = mono_ns(), span = 0;
    if (na > 0) {
        struct timespec pause = {0, 200000000};
        nanosleep(&pause, NULL);
        GROW_FETCH(WorkerShare, GetWorkerShares, b, nb);
        span = mono_ns() - t0;
    }
    if (json)
        printf(",\"workers\":[");
    else {
        heading("Worker shares (soft mode)");
        if (na == 0)
            printf("(no worker with a compute request, limit or grant)\n");
        else
            printf("%-24s %-20s %8s %6s %9s %8s %8s\n", "WORKER", "DEVICE", "REQUEST", "LIMIT",
                   "PRIORITY", "GRANTED", "SHARE");
    }
    for (size_t i = 0; i < nb; i++) {
        double share = 0;
        for (size_t k = 0; k < na; k++)
            if (strncmp(a[k].workerId, b[i].workerId, sizeof a[k].workerId) == 0 &&
                strncmp(a[k].deviceUUID, b[i].deviceUUID, sizeof a[k].deviceUUID) == 0 &&
                b[i].usedNs >= a[k].usedNs)
                share = 100.0 * (double)(b[i].usedNs - a[k].usedNs) / span;
        if (json) {
            printf("%s{", i ? "," : "");
            JFIELD("workerId", b[i].workerId); putchar(',');
            JFIELD("deviceUUID", b[i].deviceUUID);
            printf(",\"requestPercent\":%" PRIu32 ",\"limitPercent\":%" PRIu32
                   ",\"priority\":%" PRIu32 ",\"grantedBasisPoints\":%" PRIu32
                   ",\"usedNs\":%" PRIu64 ",\"sharePercent\":",
                   b[i].requestPercent, b[i].limitPercent, b[i].priority,
                   b[i].grantedBasisPoints, b[i].usedNs);
            jdouble(share);
            putchar('}');
        } else {
            char lim[16] = "-", granted[16] = "-";
            if (b[i].limitPercent)
                snprintf(lim, sizeof lim, "%" PRIu32 "%%", b[i].limitPercent);
            if (b[i].grantedBasisPoints)
                snprintf(granted, sizeof granted, "%.2f%%", b[i].grantedBasisPoints / 100.0);
            printf("%-24s %-20s %7" PRIu32 "%% %6s %9" PRIu32 " %8s %7.1f%%\n",
                   FIX(b[i].workerId), FIX(b[i].deviceUUID), b[i].requestPercent, lim,
                   b[i].priority, granted, share);
        }
    }
    if (json)
        putchar(']');
    free(a);
    free(b);
}

static void print_header(void) {
    const char *vendor = vendor_name = lib.acceleratorVendorName();
    if (!vendor || !*vendor) {
        /* No usable vendor: a Result-returning call reports why. */
        size_t n = 0;
        check(lib.GetDeviceCount(&n), "GetDeviceCount");
        die("acceleratorVendorName returned no vendor: %s", lib.acceleratorGetLastError());
    }
    uint32_t abi = lib.acceleratorAbiVersion();
    const char *status = lib.acceleratorVendorStatus();
    if (!status)
        status = "";
    if (json) {
        printf("{\"schema\":\"%s\",", PROBE_JSON_SCHEMA);
        jkey("library");
        jstr(lib_path, SIZE_MAX);
        printf(",\"vendor\":");
        jstr(vendor, SIZE_MAX);
        printf(",\"abiVersion\":%" PRIu32 ",\"vendorStatus\":", abi);
        jstr(status, SIZE_MAX);
        putchar(',');
    } else {
        printf("library %s: vendor %s, ABI version %" PRIu32 "\n", lib_path, vendor, abi);
        printf("status: %s\n", status);
    }
}

static void on_signal(int sig) {
    (void)sig;
    interrupted = 1;
}

static void watch(double seconds, long count) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    for (long n = 0; !interrupted && (count == 0 || n < count); n++) {
        if (n > 0) {
            struct timespec ts = {(time_t)seconds,
                                  (long)((seconds - (double)(time_t)seconds) * 1e9)};
            while (nanosleep(&ts, &ts) != 0 && errno == EINTR && !interrupted)
                ;
            if (interrupted)
                break;
        }
        struct timespec now;
        clock_gettime(CLOCK_REALTIME, &now);
        char stamp[64];
        strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now.tv_sec));
        Devices d = get_devices();
        if (json) {
            printf("{\"schema\":\"%s\",\"sample\":%ld,\"timestamp\":\"%s\",", PROBE_JSON_WATCH_SCHEMA,
                   n, stamp);
            print_metrics(&d);
            printf("}\n");
        } else {
            printf("\n-- sample %ld at %s --", n, stamp);
            print_metrics(&d);
        }
        fflush(stdout);
        free_devices(&d);
    }
}

static void usage(FILE *to) {
    fputs("usage: probe [--pci] [--json] [--watch SECONDS [--count N]] [LIBRARY]\n"
          "  --pci             the accelerators on the PCI bus beside the vendor's devices,\n"
          "                    the mismatches and what to do about each\n"
          "  --json            machine-readable output (docs/device.schema.json)\n"
          "  --watch SECONDS   re-print metrics every SECONDS until interrupted\n"
          "  --count N         with --watch: stop after N samples\n",
          to);
}

int main(int argc, char **argv) {
    double every = 0;
    long count = 0;
    int pci = 0;
    for (int i = 1; i < argc; i++) {
        char *end;
        if (strcmp(argv[i], "--json") == 0) {
            json = 1;
        } else if (strcmp(argv[i], "--pci") == 0) {
            pci = 1;
        } else if (strcmp(argv[i], "--watch") == 0 && i + 1 < argc) {
            every = strtod(argv[++i], &end);
            if (*end || !(every > 0) || every > 86400) {
                fprintf(stderr, "probe: --watch needs a number of seconds (0 < s <= 86400)\n");
                return 2;
            }
        } else if (strcmp(argv[i], "--count") == 0 && i + 1 < argc) {
            count = strtol(argv[++i], &end, 10);
            if (*end || count < 1) {
                fprintf(stderr, "probe: --count needs a positive whole number\n");
                return 2;
            }
        } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout);
            return 0;
        } else if (argv[i][0] == '-' || lib_path) {
            usage(stderr);
            return 2;
        } else {
            lib_path = argv[i];
        }
    }
    if (pci && every > 0) {
        fprintf(stderr, "probe: --pci does not go with --watch\n");
        return 2;
    }
    if (count && !every) {
        fprintf(stderr, "probe: --count only goes with --watch\n");
        return 2;
    }
    if (!lib_path)
        lib_path = default_library();
    load(lib_path);

    if (every > 0) {
        if (!json)
            print_header();
        watch(every, count);
        return 0;
    }
    print_header();
    Devices d = get_devices();
    get_pci(&d);
    if (pci && !json) {
        print_pci(&d);
        free_devices(&d);
        return 0;
    }
    if (json)
        print_pci(&d);
    print_devices(&d);
    print_topology(&d);
    print_metrics(&d);
    print_processes();
    print_workers();
    if (json)
        printf("}\n");
    free_devices(&d);
    return 0;
}

/* A fake libamd_smi.so: the AMD SMI calls the amd vendor makes, answering
 * as an 8x MI300X node (192 GiB HBM3, 304 CUs, every pair one XGMI hop,
 * SPX/DPX/QPX/CPX over NPS1/NPS4) or, with FAKE_AMDSMI_NODE=mi210, a 2x
 * MI210 PCIe node without partitioning (its current socket power "not
 * supported", as a real MI210 reports it). Built as the AMD SMI version
 * FAKE_AMDSMI_MAJOR (24, 25 or 26) with that version's layouts and enum
 * values: amdsmi.h beside it.
 *
 *   FAKE_AMDSMI_VERSION=M.m.r  amdsmi_get_lib_version reports this version
 *                              (in this build's layout) instead
 *
 * Injected faults, read on every call so a test can change them:
 *   FAKE_AMDSMI_INIT_FAIL=1    amdsmi_init fails (driver not loaded)
 *   FAKE_AMDSMI_GONE=i         GPU i's handle is stale (as after a reset):
 *                              every call on it is AMDSMI_STATUS_NOT_FOUND
 *   FAKE_AMDSMI_FAIL_PROCS=i   amdsmi_get_gpu_process_list fails on GPU i
 * One process (pid 4343) uses MI300X GPU 1, which is therefore busy. */
#include "amdsmi.h"
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_GPUS 8
#define MB (1024ull * 1024)

struct gpu {
  int index;
  uint32_t compute; /* amdsmi_compute_partition_type_t */
  uint32_t memory;  /* amdsmi_memory_partition_type_t */
};

static struct gpu gpus[MAX_GPUS];
static int inits;

static bool mi210(void) {
  const char *n = getenv("FAKE_AMDSMI_NODE");
  return n && strcmp(n, "mi210") == 0;
}
static int count(void) { return mi210() ? 2 : 8; }

static int env_index(const char *name) {
  const char *v = getenv(name);
  return v && *v ? atoi(v) : -1;
}

/* The GPU a handle names, or NULL (stale, foreign or before init). */
static struct gpu *gpu_of(amdsmi_processor_handle h) {
  for (int i = 0; i < count(); i++)
    if (h == &gpus[i])
      return inits > 0 && env_index("FAKE_AMDSMI_GONE") != i ? &gpus[i] : NULL;
  return NULL;
}

#define GPU(h)                                                                                    \
  struct gpu *g = gpu_of(h);                                                                      \
  if (!g)                                                                                         \
    return AMDSMI_STATUS_NOT_FOUND;

amdsmi_status_t amdsmi_init(uint64_t flags) {
  if (getenv("FAKE_AMDSMI_INIT_FAIL"))
    return AMDSMI_STATUS_DRIVER_NOT_LOADED;
  if (!(flags & AMDSMI_INIT_AMD_GPUS))
    return AMDSMI_STATUS_INVAL;
  if (inits++ == 0)
    for (int i = 0; i < MAX_GPUS; i++)
      gpus[i] = (struct gpu){i, AMDSMI_COMPUTE_PARTITION_SPX, AMDSMI_MEMORY_PARTITION_NPS1};
  return AMDSMI_STATUS_SUCCESS;
}

/* 24.7.1 (ROCm 6.3.0), 25.3.0 (6.4.0), 26.0.2 (7.0.2). */
amdsmi_status_t amdsmi_get_lib_version(amdsmi_version_t *v) {
  if (!v)
    return AMDSMI_STATUS_INVAL;
  if (inits == 0)
    return AMDSMI_STATUS_NOT_INIT;
  static const uint32_t minor = FAKE_AMDSMI_MAJOR == 24 ? 7 : FAKE_AMDSMI_MAJOR == 25 ? 3 : 0;
  static const uint32_t release = FAKE_AMDSMI_MAJOR == 24 ? 1 : FAKE_AMDSMI_MAJOR == 25 ? 0 : 2;
  unsigned m = FAKE_AMDSMI_MAJOR, n = minor, r = release;
  const char *force = getenv("FAKE_AMDSMI_VERSION");
  if (force && sscanf(force, "%u.%u.%u", &m, &n, &r) != 3)
    return AMDSMI_STATUS_INVAL;
#if FAKE_AMDSMI_MAJOR == 24
  /* YEAR.MAJOR.MINOR.RELEASE: 24.7.1.0 */
  v->year = m;
  v->major = n;
  v->minor = r;
  v->release = 0;
#elif FAKE_AMDSMI_MAJOR == 25
  /* `year` kept (to be deprecated) and not set; MAJOR.MINOR.RELEASE. */
  v->year = 0;
  v->major = m;
  v->minor = n;
  v->release = r;
#else
  v->major = m;
  v->minor = n;
  v->release = r;
#endif
  v->build = "fake";
  return AMDSMI_STATUS_SUCCESS;
}

amdsmi_status_t amdsmi_shut_down(void) {
  if (inits == 0)
    return AMDSMI_STATUS_NOT_INIT;
  inits--;
  return AMDSMI_STATUS_SUCCESS;
}

/* One socket per GPU, as AMD SMI reports discrete GPUs. */
amdsmi_status_t amdsmi_get_socket_handles(uint32_t *n, amdsmi_socket_handle *sockets) {
  if (!n)
    return AMDSMI_STATUS_INVAL;
  if (inits == 0)
    return AMDSMI_STATUS_NOT_INIT;
  uint32_t have = (uint32_t)count();
  if (sockets)
    for (uint32_t i = 0; i < have && i < *n; i++)
      sockets[i] = (char *)&gpus[i] + 1; /* distinct from the processor handle */
  *n = have;
  return AMDSMI_STATUS_SUCCESS;
}

amdsmi_status_t amdsmi_get_processor_handles(amdsmi_socket_handle s, uint32_t *n,
                                             amdsmi_processor_handle *out) {
  if (!n)
    return AMDSMI_STATUS_INVAL;
  for (int i = 0; i < count(); i++)
    if (s == (char *)&gpus[i] + 1) {
      if (out && *n >= 1)
        out[0] = &gpus[i];
      *n = 1;
      return AMDSMI_STATUS_SUCCESS;
    }
  return AMDSMI_STATUS_INVAL;
}

amdsmi_status_t amdsmi_get_processor_type(amdsmi_processor_handle h, uint32_t *type) {
  GPU(h);
  *type = AMDSMI_PROCESSOR_TYPE_AMD_GPU;
  return AMDSMI_STATUS_SUCCESS;
}

amdsmi_status_t amdsmi_get_gpu_device_uuid(amdsmi_processor_handle h, unsigned *len, char *uuid) {
  GPU(h);
  if (!len || !uuid || *len < AMDSMI_GPU_UUID_SIZE)
    return AMDSMI_STATUS_INSUFFICIENT_SIZE;
  snprintf(uuid, *len, "%02xff%s-0000-1000-8000-0000000000%02x", g->index, mi210() ? "740f" : "74a1",
           g->index);
  *len = (unsigned)strlen(uuid);
  return AMDSMI_STATUS_SUCCESS;
}

/* Bus 0x0c + 0x10*i, device 0, function 0. */
static uint64_t bdf(int i) { return (uint64_t)(0x0c + 0x10 * i) << 8; }

amdsmi_status_t amdsmi_get_gpu_device_bdf(amdsmi_processor_handle h, uint64_t *out) {
  GPU(h);
  *out = bdf(g->index);
  return AMDSMI_STATUS_SUCCESS;
}

amdsmi_status_t amdsmi_get_gpu_asic_info(amdsmi_processor_handle h, amdsmi_asic_info_t *a) {
  GPU(h);
  memset(a, 0, sizeof *a);
  snprintf(a->market_name, sizeof a->market_name, "%s", mi210() ? "AMD Instinct MI210" : "AMD Instinct MI300X");
  a->vendor_id = 0x1002;
  snprintf(a->vendor_name, sizeof a->vendor_name, "Advanced Micro Devices Inc. [AMD/ATI]");
  a->device_id = mi210() ? 0x740f : 0x74a1;
  a->oam_id = mi210() ? 0xFFFF : (uint32_t)g->index;
  a->num_of_compute_units = mi210() ? 104 : 304;
  a->target_graphics_version = UINT64_MAX;
  return AMDSMI_STATUS_SUCCESS;
}

amdsmi_status_t amdsmi_get_gpu_vram_info(amdsmi_processor_handle h, amdsmi_vram_info_t *v) {
  GPU(h);
  memset(v, 0, sizeof *v);
  v->vram_type = mi210() ? AMDSMI_VRAM_TYPE_HBM2E : AMDSMI_VRAM_TYPE_HBM3;
#if FAKE_AMDSMI_MAJOR >= 26
  snprintf(v->vram_vendor, sizeof v->vram_vendor, "SAMSUNG");
#endif
  v->vram_size = mi210() ? 65536 : 196608;
  v->vram_bit_width = mi210() ? 4096 : 8192;
  return AMDSMI_STATUS_SUCCESS;
}

amdsmi_status_t amdsmi_get_gpu_driver_info(amdsmi_processor_handle h, amdsmi_driver_info_t *d) {
  GPU(h);
  memset(d, 0, sizeof *d);
  snprintf(d->driver_version, sizeof d->driver_version, "6.10.5");
  snprintf(d->driver_name, sizeof d->driver_name, "amdgpu");
  return AMDSMI_STATUS_SUCCESS;
}

amdsmi_status_t amdsmi_get_gpu_vbios_info(amdsmi_processor_handle h, amdsmi_vbios_info_t *v) {
  GPU(h);
  memset(v, 0, sizeof *v);
  snprintf(v->version, sizeof v->version, "%s", mi210() ? "113-D67301-063" : "113-M3000100-103");
  snprintf(v->part_number, sizeof v->part_number, "%s", v->version);
  return AMDSMI_STATUS_SUCCESS;
}

amdsmi_status_t amdsmi_get_pcie_info(amdsmi_processor_handle h, amdsmi_pcie_info_t *p) {
  GPU(h);
  memset(p, 0, sizeof *p);
  p->pcie_static.max_pcie_width = 16;
  p->pcie_static.max_pcie_speed = mi210() ? 16000 : 32000;
  p->pcie_static.pcie_interface_version = mi210() ? 4 : 5;
  p->pcie_metric.pcie_width = 16;
  p->pcie_metric.pcie_speed = p->pcie_static.max_pcie_speed;
  return AMDSMI_STATUS_SUCCESS;
}

amdsmi_status_t amdsmi_get_gpu_topo_numa_affinity(amdsmi_processor_handle h, int32_t *node) {
  GPU(h);
  *node = mi210() ? 0 : g->index / 4;
  return AMDSMI_STATUS_SUCCESS;
}

amdsmi_status_t amdsmi_get_power_cap_info(amdsmi_processor_handle h, uint32_t sensor,
                                          amdsmi_power_cap_info_t *c) {
  GPU(h);
  if (sensor != 0)
    return AMDSMI_STATUS_INVAL;
  memset(c, 0, sizeof *c);
  c->power_cap = c->default_power_cap = c->max_power_cap = (mi210() ? 300 : 750) * 1000000ull;
  return AMDSMI_STATUS_SUCCESS;
}

amdsmi_status_t amdsmi_get_temp_metric(amdsmi_processor_handle h, uint32_t sensor, uint32_t metric,
                                       int64_t *t) {
  GPU(h);
  if (sensor != AMDSMI_TEMPERATURE_TYPE_HOTSPOT)
    return AMDSMI_STATUS_NOT_SUPPORTED;
  if (metric == AMDSMI_TEMP_CURRENT)
    *t = 41 + g->index;
  else if (metric == AMDSMI_TEMP_CRITICAL)
    *t = mi210() ? 100 : 105;
  else
    return AMDSMI_STATUS_NOT_SUPPORTED;
  return AMDSMI_STATUS_SUCCESS;
}

amdsmi_status_t amdsmi_get_power_info(amdsmi_processor_handle h, amdsmi_power_info_t *p) {
  GPU(h);
  memset(p, 0, sizeof *p);
  /* MI300 reports the current socket power; MI200 the average, its
   * current power "not supported". */
  if (mi210()) {
    p->average_socket_power = 90;
    p->current_socket_power = FAKE_AMDSMI_MAJOR >= 26 ? UINT32_MAX : 0xFFFF;
  } else {
    p->current_socket_power = 320 + (uint32_t)g->index;
  }
  p->power_limit = mi210() ? 300 : 750;
  return AMDSMI_STATUS_SUCCESS;
}

/* MI300X: GFX up to 2100 MHz, HBM3 1300 MHz; MI210: 1700 / 1600 MHz. */
amdsmi_status_t amdsmi_get_clock_info(amdsmi_processor_handle h, uint32_t domain, amdsmi_clk_info_t *c) {
  GPU(h);
  if (domain != AMDSMI_CLK_TYPE_GFX && domain != AMDSMI_CLK_TYPE_MEM)
    return AMDSMI_STATUS_NOT_SUPPORTED;
  memset(c, 0, sizeof *c);
  if (domain == AMDSMI_CLK_TYPE_GFX)
    c->max_clk = mi210() ? 1700 : 2100;
  else
    c->max_clk = mi210() ? 1600 : 1300;
  c->min_clk = 100;
  c->clk = c->min_clk;
  return AMDSMI_STATUS_SUCCESS;
}

/* Every RAS block with ECC: UMC, SDMA, GFX (amdsmi_gpu_block_t bits 0-2). */
amdsmi_status_t amdsmi_get_gpu_ecc_enabled(amdsmi_processor_handle h, uint64_t *blocks) {
  GPU(h);
  *blocks = 0x7;
  return AMDSMI_STATUS_SUCCESS;
}

amdsmi_status_t amdsmi_get_gpu_activity(amdsmi_processor_handle h, amdsmi_engine_usage_t *u) {
  GPU(h);
  memset(u, 0, sizeof *u);
  u->gfx_activity = g->index == 1 ? 87 : 0;
  u->umc_activity = g->index == 1 ? 40 : 0;
  return AMDSMI_STATUS_SUCCESS;
}

static uint64_t used_mb(int i) { return !mi210() && i == 1 ? 2048 + 256 : 256; }

amdsmi_status_t amdsmi_get_gpu_vram_usage(amdsmi_processor_handle h, amdsmi_vram_usage_t *u) {
  GPU(h);
  memset(u, 0, sizeof *u);
  u->vram_total = mi210() ? 65536 : 196608;
  u->vram_used = (uint32_t)used_mb(g->index);
  return AMDSMI_STATUS_SUCCESS;
}

amdsmi_status_t amdsmi_get_gpu_pci_throughput(amdsmi_processor_handle h, uint64_t *sent,
                                              uint64_t *received, uint64_t *max_pkt) {
  GPU(h);
  if (sent)
    *sent = 1000000ull * (uint64_t)(g->index + 1);
  if (received)
    *received = 2000000ull * (uint64_t)(g->index + 1);
  if (max_pkt)
    *max_pkt = 256;
  return AMDSMI_STATUS_SUCCESS;
}

amdsmi_status_t amdsmi_get_link_metrics(amdsmi_processor_handle h, amdsmi_link_metrics_t *m) {
  GPU(h);
  if (mi210())
    return AMDSMI_STATUS_NOT_SUPPORTED;
  memset(m, 0, sizeof *m);
  for (int i = 0, k = 0; i < count(); i++) {
    if (i == g->index)
      continue;
    m->links[k].bdf = bdf(i);
    m->links[k].bit_rate = 32;
    m->links[k].max_bandwidth = 64;
    m->links[k].link_type = AMDSMI_LINK_TYPE_XGMI;
    m->links[k].read = 1000ull * (uint64_t)(k + 1);
    m->links[k].write = 500ull * (uint64_t)(k + 1);
    m->num_links = (uint32_t)++k;
  }
  return AMDSMI_STATUS_SUCCESS;
}

/* MI300X GPU 1 runs one process. */
amdsmi_status_t amdsmi_get_gpu_process_list(amdsmi_processor_handle h, uint32_t *max,
                                            amdsmi_proc_info_t *list) {
  GPU(h);
  if (!max)
    return AMDSMI_STATUS_INVAL;
  if (env_index("FAKE_AMDSMI_FAIL_PROCS") == g->index)
    return AMDSMI_STATUS_API_FAILED;
  uint32_t have = !mi210() && g->index == 1 ? 1 : 0;
  uint32_t room = *max;
  *max = have;
  if (room == 0)
    return AMDSMI_STATUS_SUCCESS;
  if (!list)
    return AMDSMI_STATUS_INVAL;
  if (have) {
    amdsmi_proc_info_t *p = &list[0];
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "python3");
    p->pid = 4343;
    p->mem = 2048 * MB;
    p->memory_usage.vram_mem = 2048 * MB;
    p->memory_usage.gtt_mem = 16 * MB;
    p->engine_usage.gfx = 123456789;
  }
  return room < have ? AMDSMI_STATUS_OUT_OF_RESOURCES : AMDSMI_STATUS_SUCCESS;
}

static amdsmi_status_t pair(amdsmi_processor_handle a, amdsmi_processor_handle b) {
  if (!gpu_of(a) || !gpu_of(b))
    return AMDSMI_STATUS_NOT_FOUND;
  return a == b ? AMDSMI_STATUS_INVAL : AMDSMI_STATUS_SUCCESS;
}

amdsmi_status_t amdsmi_topo_get_link_type(amdsmi_processor_handle a, amdsmi_processor_handle b,
                                          uint64_t *hops, uint32_t *type) {
  amdsmi_status_t s = pair(a, b);
  if (s)
    return s;
  *hops = mi210() ? 2 : 1;
  *type = mi210() ? TOPO_PCIE : TOPO_XGMI;
  return AMDSMI_STATUS_SUCCESS;
}

amdsmi_status_t amdsmi_topo_get_link_weight(amdsmi_processor_handle a, amdsmi_processor_handle b,
                                            uint64_t *weight) {
  amdsmi_status_t s = pair(a, b);
  if (s)
    return s;
  *weight = mi210() ? 40 : 15;
  return AMDSMI_STATUS_SUCCESS;
}

/* Only for XGMI neighbours one hop apart, as the header says. */
amdsmi_status_t amdsmi_get_minmax_bandwidth_between_processors(amdsmi_processor_handle a,
                                                               amdsmi_processor_handle b,
                                                               uint64_t *min, uint64_t *max) {
  amdsmi_status_t s = pair(a, b);
  if (s)
    return s;
  if (mi210())
    return AMDSMI_STATUS_NOT_SUPPORTED;
  *min = 50000;
  *max = 64000;
  return AMDSMI_STATUS_SUCCESS;
}

static const char *compute_names[] = {"", "SPX", "DPX", "TPX", "QPX", "CPX"};
static const char *memory_name(uint32_t mode) {
  switch (mode) {
  case AMDSMI_MEMORY_PARTITION_NPS1:
    return "NPS1";
  case AMDSMI_MEMORY_PARTITION_NPS2:
    return "NPS2";
  case AMDSMI_MEMORY_PARTITION_NPS4:
    return "NPS4";
  case AMDSMI_MEMORY_PARTITION_NPS8:
    return "NPS8";
  default:
    return "";
  }
}

static amdsmi_status_t put(char *out, uint32_t len, const char *s) {
  if (!out || len == 0)
    return AMDSMI_STATUS_INVAL;
  snprintf(out, len, "%s", s);
  return strlen(s) >= len ? AMDSMI_STATUS_INSUFFICIENT_SIZE : AMDSMI_STATUS_SUCCESS;
}

amdsmi_status_t amdsmi_get_gpu_compute_partition(amdsmi_processor_handle h, char *out, uint32_t len) {
  GPU(h);
  return mi210() ? AMDSMI_STATUS_NOT_SUPPORTED : put(out, len, compute_names[g->compute]);
}

amdsmi_status_t amdsmi_get_gpu_memory_partition(amdsmi_processor_handle h, char *out, uint32_t len) {
  GPU(h);
  return mi210() ? AMDSMI_STATUS_NOT_SUPPORTED : put(out, len, memory_name(g->memory));
}

amdsmi_status_t amdsmi_get_gpu_accelerator_partition_profile(amdsmi_processor_handle h,
                                                             amdsmi_accelerator_partition_profile_t *p,
                                                             uint32_t *ids) {
  GPU(h);
  if (mi210())
    return AMDSMI_STATUS_NOT_SUPPORTED;
  static const uint32_t parts[] = {0, 1, 2, 3, 4, 8};
  memset(p, 0, sizeof *p);
  p->profile_type = g->compute;
  p->num_partitions = parts[g->compute];
  p->memory_caps = 1u << 0 | 1u << 2; /* NPS1, NPS4 */
  for (uint32_t i = 0; ids && i < p->num_partitions; i++)
    ids[i] = i;
  return AMDSMI_STATUS_SUCCESS;
}

/* The driver refuses a mode change while a process holds the device. */
static bool busy(struct gpu *g) { return !mi210() && g->index == 1; }

amdsmi_status_t amdsmi_set_gpu_compute_partition(amdsmi_processor_handle h, uint32_t mode) {
  GPU(h);
  if (mi210())
    return AMDSMI_STATUS_NOT_SUPPORTED;
  if (mode != AMDSMI_COMPUTE_PARTITION_SPX && mode != AMDSMI_COMPUTE_PARTITION_DPX &&
      mode != AMDSMI_COMPUTE_PARTITION_QPX && mode != AMDSMI_COMPUTE_PARTITION_CPX)
    return AMDSMI_STATUS_SETTING_UNAVAILABLE;
  if (busy(g))
    return AMDSMI_STATUS_BUSY;
  g->compute = mode;
  return AMDSMI_STATUS_SUCCESS;
}

amdsmi_status_t amdsmi_set_gpu_memory_partition(amdsmi_processor_handle h, uint32_t mode) {
  GPU(h);
  if (mi210())
    return AMDSMI_STATUS_NOT_SUPPORTED;
  if (mode != AMDSMI_MEMORY_PARTITION_NPS1 && mode != AMDSMI_MEMORY_PARTITION_NPS4)
    return AMDSMI_STATUS_SETTING_UNAVAILABLE;
  if (busy(g))
    return AMDSMI_STATUS_BUSY;
  g->memory = mode;
  return AMDSMI_STATUS_SUCCESS;
}

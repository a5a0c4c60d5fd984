/* A fake libhlml.so: the HLML calls a Habana vendor makes, answering as an
 * 8x Gaudi 2 node (HL-225, 96 GiB HBM2E = 98304 MiB as hl-smi shows it,
 * 600 W, PCIe Gen4 x16, PCI device 0x1020) or, with
 * FAKE_HLML_NODE=gaudi3, an 8x Gaudi 3 node (HL-325L, 128 GiB HBM2E,
 * 900 W, PCIe Gen5 x16, PCI device 0x1060). Built as the HLML of release
 * 1.FAKE_HLML_MINOR, with that release's layouts (hlml.h beside it).
 *
 * HLML's index order is not the bus order on real nodes, and neither is
 * the module id (the OAM slot): here index i is the device on bus
 * bus_of[i], whose accel minor follows the bus order (the driver probes in
 * bus order) and whose module id is module_of[i]. Devices 0-3 by bus sit
 * on NUMA node 0, 4-7 on node 1.
 *
 *   FAKE_HLML_VERSION=s        hlml_get_hlml_version reports s instead
 *
 * Injected faults, read on every call so a test can change them:
 *   FAKE_HLML_INIT_FAIL=1      hlml_init fails (driver not loaded)
 *   FAKE_HLML_GONE=i           device i is lost (as after a fatal error):
 *                              every call on it is HLML_ERROR_AIP_IS_LOST
 */
#include "hlml.h"
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define COUNT 8
#define MIB (1024ull * 1024)

static const unsigned bus_of[COUNT] = {0x33, 0x9a, 0x19, 0xb3, 0x1a, 0x4d, 0xb4, 0x34};
static const unsigned module_of[COUNT] = {2, 5, 0, 6, 1, 3, 7, 4};
static const unsigned long long used_mib[COUNT] = {0, 41984, 0, 0, 512, 0, 0, 96000};
static const unsigned busy[COUNT] = {0, 87, 0, 0, 3, 0, 0, 100};

static int devs[COUNT]; /* a handle is &devs[i] */
static int inits;

static bool gaudi3(void) {
  const char *n = getenv("FAKE_HLML_NODE");
  return n && strcmp(n, "gaudi3") == 0;
}

/* The index of the device a handle names, or -1 (lost, foreign, before
 * init). */
static int index_of(hlml_device_t h) {
  for (int i = 0; i < COUNT; i++)
    if (h == &devs[i]) {
      const char *gone = getenv("FAKE_HLML_GONE");
      return inits > 0 && !(gone && *gone && atoi(gone) == i) ? i : -1;
    }
  return -1;
}

/* The rank of device i's bus among the node's buses: its accel minor. */
static unsigned bus_rank(int i) {
  unsigned r = 0;
  for (int j = 0; j < COUNT; j++)
    r += bus_of[j] < bus_of[i];
  return r;
}

#define DEV(h)                                                                                    \
  int i = index_of(h);                                                                            \
  if (inits == 0)                                                                                 \
    return HLML_ERROR_UNINITIALIZED;                                                              \
  if (i < 0)                                                                                      \
    return HLML_ERROR_AIP_IS_LOST;

/* A string answer as HLML gives one: the whole string or
 * HLML_ERROR_INSUFFICIENT_SIZE. */
static hlml_return_t put(char *out, unsigned length, const char *s) {
  if (!out)
    return HLML_ERROR_INVALID_ARGUMENT;
  if (strlen(s) + 1 > length)
    return HLML_ERROR_INSUFFICIENT_SIZE;
  memcpy(out, s, strlen(s) + 1);
  return HLML_SUCCESS;
}

hlml_return_t hlml_init_with_flags(unsigned int flags) {
  if (flags != 0) /* only the default is supported (pyhlml's docstring) */
    return HLML_ERROR_INVALID_ARGUMENT;
  if (getenv("FAKE_HLML_INIT_FAIL"))
    return HLML_ERROR_DRIVER_NOT_LOADED;
  inits++;
  return HLML_SUCCESS;
}

hlml_return_t hlml_init(void) { return hlml_init_with_flags(0); }

hlml_return_t hlml_shutdown(void) {
  if (inits == 0)
    return HLML_ERROR_UNINITIALIZED;
  inits--;
  return HLML_SUCCESS;
}

#define STR_(x) #x
#define STR(x) STR_(x)

/* The release this build's layouts are: "1.<minor>.0". */
hlml_return_t hlml_get_hlml_version(char *version, unsigned int length) {
  if (inits == 0)
    return HLML_ERROR_UNINITIALIZED;
  const char *force = getenv("FAKE_HLML_VERSION");
  return put(version, length, force ? force : "1." STR(FAKE_HLML_MINOR) ".0");
}

hlml_return_t hlml_get_driver_version(char *driver_version, unsigned int length) {
  if (inits == 0)
    return HLML_ERROR_UNINITIALIZED;
  return put(driver_version, length, "1." STR(FAKE_HLML_MINOR) ".0-7c61dbc");
}

hlml_return_t hlml_device_get_count(unsigned int *device_count) {
  if (inits == 0)
    return HLML_ERROR_UNINITIALIZED;
  if (!device_count)
    return HLML_ERROR_INVALID_ARGUMENT;
  *device_count = COUNT;
  return HLML_SUCCESS;
}

hlml_return_t hlml_device_get_handle_by_index(unsigned int index, hlml_device_t *device) {
  if (inits == 0)
    return HLML_ERROR_UNINITIALIZED;
  if (!device || index >= COUNT)
    return HLML_ERROR_INVALID_ARGUMENT;
  *device = &devs[index];
  return HLML_SUCCESS;
}

/* The domain as wide as the release's bus_id holds it: 4 hex digits up to
 * 1.18, 8 from 1.19 (PCI_DOMAIN_LEN 5 -> 9, as NVML writes it). */
static void bus_id(int i, char *out, size_t n) {
  snprintf(out, n, PCI_DOMAIN_LEN == 9 ? "00000000:%02x:00.0" : "0000:%02x:00.0", bus_of[i]);
}

static void uuid(int i, char *out, size_t n) {
  snprintf(out, n, "01P%d-HL%s-15-TN%04X-0%u-07-0%u", gaudi3() ? 3 : 4, gaudi3() ? "3090A0" : "2080A0",
           0xa62 + bus_of[i], module_of[i], bus_rank(i));
}

hlml_return_t hlml_device_get_handle_by_pci_bus_id(const char *pci_addr, hlml_device_t *device) {
  if (inits == 0)
    return HLML_ERROR_UNINITIALIZED;
  if (!pci_addr || !device)
    return HLML_ERROR_INVALID_ARGUMENT;
  for (int i = 0; i < COUNT; i++) {
    char b[PCI_ADDR_LEN];
    bus_id(i, b, sizeof b);
    if (strcasecmp(b, pci_addr) == 0) {
      *device = &devs[i];
      return HLML_SUCCESS;
    }
  }
  return HLML_ERROR_NOT_FOUND;
}

hlml_return_t hlml_device_get_handle_by_UUID(const char *id, hlml_device_t *device) {
  if (inits == 0)
    return HLML_ERROR_UNINITIALIZED;
  if (!id || !device)
    return HLML_ERROR_INVALID_ARGUMENT;
  for (int i = 0; i < COUNT; i++) {
    char u[HLML_VERSION_MAX_LEN];
    uuid(i, u, sizeof u);
    if (strcmp(u, id) == 0) {
      *device = &devs[i];
      return HLML_SUCCESS;
    }
  }
  return HLML_ERROR_NOT_FOUND;
}

/* hl-smi's "Product Name" is the board's model: HL-225 / HL-325L. */
hlml_return_t hlml_device_get_name(hlml_device_t device, char *name, unsigned int length) {
  DEV(device);
  (void)i;
  return put(name, length, gaudi3() ? "HL-325L" : "HL-225");
}

hlml_return_t hlml_get_model_number(hlml_device_t device, char *model_number, unsigned int length) {
  DEV(device);
  (void)i;
  return put(model_number, length, gaudi3() ? "HL-325L" : "HL-225");
}

hlml_return_t hlml_device_get_uuid(hlml_device_t device, char *out, unsigned int length) {
  DEV(device);
  char u[HLML_VERSION_MAX_LEN];
  uuid(i, u, sizeof u);
  return put(out, length, u);
}

hlml_return_t hlml_device_get_serial(hlml_device_t device, char *serial, unsigned int length) {
  DEV(device);
  char s[HL_FIELD_MAX_SIZE];
  snprintf(s, sizeof s, "%s%06u", gaudi3() ? "AR" : "AN", 451200 + bus_rank(i));
  return put(serial, length, s);
}

hlml_return_t hlml_get_firmware_fit_version(hlml_device_t device, char *firmware_fit, unsigned int length) {
  DEV(device);
  (void)i;
  return put(firmware_fit, length,
             gaudi3() ? "hl-gaudi3-1." STR(FAKE_HLML_MINOR) ".0-fw-61.3.2-sec-3"
                      : "hl-gaudi2-1." STR(FAKE_HLML_MINOR) ".0-fw-61.3.2-sec-9");
}

hlml_return_t hlml_device_get_pci_info(hlml_device_t device, hlml_pci_info_t *pci) {
  DEV(device);
  if (!pci)
    return HLML_ERROR_INVALID_ARGUMENT;
  memset(pci, 0, sizeof *pci);
  pci->bus = bus_of[i];
  bus_id(i, pci->bus_id, sizeof pci->bus_id);
  pci->device = 0;
  pci->domain = 0;
  pci->pci_device_id = (gaudi3() ? 0x1060u : 0x1020u) << 16 | 0x1da3u;
  const char *speed = gaudi3() ? "32GT/s" : "16GT/s";
  snprintf(pci->caps.link_speed, PCI_LINK_INFO_LEN, "%s", speed);
  snprintf(pci->caps.link_width, PCI_LINK_INFO_LEN, "x16");
#if FAKE_HLML_MINOR >= 11
  snprintf(pci->caps.link_max_speed, PCI_LINK_INFO_LEN, "%s", speed);
  snprintf(pci->caps.link_max_width, PCI_LINK_INFO_LEN, "x16");
  pci->pci_rev = 1;
#endif
#if FAKE_HLML_MINOR >= 18
  pci->pci_subsys_id = gaudi3() ? 0x1060u : 0x1020u;
#endif
  return HLML_SUCCESS;
}

hlml_return_t hlml_device_get_minor_number(hlml_device_t device, unsigned int *minor_number) {
  DEV(device);
  if (!minor_number)
    return HLML_ERROR_INVALID_ARGUMENT;
  *minor_number = bus_rank(i);
  return HLML_SUCCESS;
}

hlml_return_t hlml_device_get_module_id(hlml_device_t device, unsigned int *module_id) {
  DEV(device);
  if (!module_id)
    return HLML_ERROR_INVALID_ARGUMENT;
  *module_id = module_of[i];
  return HLML_SUCCESS;
}

hlml_return_t hlml_device_get_memory_affinity(hlml_device_t device, unsigned int node_set_size,
                                              unsigned long *node_set, hlml_affinity_scope_t scope) {
  DEV(device);
  if (!node_set || node_set_size == 0 || scope > HLML_AFFINITY_SCOPE_SOCKET)
    return HLML_ERROR_INVALID_ARGUMENT;
  memset(node_set, 0, node_set_size * sizeof *node_set);
  node_set[0] = 1ul << (bus_rank(i) < COUNT / 2 ? 0 : 1);
  return HLML_SUCCESS;
}

hlml_return_t hlml_device_get_curr_pcie_link_generation(hlml_device_t device, unsigned int *curr_link_gen) {
  DEV(device);
  (void)i;
  if (!curr_link_gen)
    return HLML_ERROR_INVALID_ARGUMENT;
  *curr_link_gen = gaudi3() ? 5 : 4;
  return HLML_SUCCESS;
}

hlml_return_t hlml_device_get_curr_pcie_link_width(hlml_device_t device, unsigned int *curr_link_width) {
  DEV(device);
  (void)i;
  if (!curr_link_width)
    return HLML_ERROR_INVALID_ARGUMENT;
  *curr_link_width = 16;
  return HLML_SUCCESS;
}

hlml_return_t hlml_device_get_memory_info(hlml_device_t device, hlml_memory_t *memory) {
  DEV(device);
  if (!memory)
    return HLML_ERROR_INVALID_ARGUMENT;
  memory->total = (gaudi3() ? 131072 : 98304) * MIB;
  memory->used = used_mib[i] * MIB;
  memory->free = memory->total - memory->used;
  return HLML_SUCCESS;
}

hlml_return_t hlml_device_get_utilization_rates(hlml_device_t device, hlml_utilization_t *utilization) {
  DEV(device);
  if (!utilization)
    return HLML_ERROR_INVALID_ARGUMENT;
  utilization->aip = busy[i];
#if FAKE_HLML_MINOR >= 19
  utilization->memory = (unsigned)(used_mib[i] * 100 / (gaudi3() ? 131072 : 98304));
#endif
  return HLML_SUCCESS;
}

/* mW. */
hlml_return_t hlml_device_get_power_usage(hlml_device_t device, unsigned int *power) {
  DEV(device);
  if (!power)
    return HLML_ERROR_INVALID_ARGUMENT;
  *power = (gaudi3() ? 162000u : 98000u) + busy[i] * 4000u;
  return HLML_SUCCESS;
}

hlml_return_t hlml_device_get_power_management_default_limit(hlml_device_t device, unsigned int *default_limit) {
  DEV(device);
  (void)i;
  if (!default_limit)
    return HLML_ERROR_INVALID_ARGUMENT;
  *default_limit = gaudi3() ? 900000u : 600000u;
  return HLML_SUCCESS;
}

/* mJ since the driver was loaded. */
hlml_return_t hlml_device_get_total_energy_consumption(hlml_device_t device, unsigned long long *energy) {
  DEV(device);
  if (!energy)
    return HLML_ERROR_INVALID_ARGUMENT;
  *energy = 3600000000ull + 1000000ull * (unsigned long long)i;
  return HLML_SUCCESS;
}

/* Celsius. */
hlml_return_t hlml_device_get_temperature(hlml_device_t device, hlml_temperature_sensors_t sensor_type,
                                          unsigned int *temp) {
  DEV(device);
  if (!temp)
    return HLML_ERROR_INVALID_ARGUMENT;
  switch (sensor_type) {
  case HLML_TEMPERATURE_ON_AIP:
    *temp = 31 + busy[i] / 4;
    return HLML_SUCCESS;
  case HLML_TEMPERATURE_ON_BOARD:
    *temp = 29 + busy[i] / 8;
    return HLML_SUCCESS;
  default:
    return HLML_ERROR_NOT_SUPPORTED;
  }
}

/* MHz; Gaudi has the SoC clock only (IC, MME and TPC are Goya's, per
 * pyhlml's docstring). */
static hlml_return_t clock(hlml_device_t device, hlml_clock_type_t type, unsigned int *clock, bool max) {
  DEV(device);
  if (!clock)
    return HLML_ERROR_INVALID_ARGUMENT;
  if (type != HLML_CLOCK_SOC)
    return HLML_ERROR_NOT_SUPPORTED;
  unsigned top = gaudi3() ? 1600 : 1800;
  *clock = max || busy[i] ? top : top / 2;
  return HLML_SUCCESS;
}

hlml_return_t hlml_device_get_clock_info(hlml_device_t device, hlml_clock_type_t type, unsigned int *c) {
  return clock(device, type, c, false);
}

hlml_return_t hlml_device_get_max_clock_info(hlml_device_t device, hlml_clock_type_t type, unsigned int *c) {
  return clock(device, type, c, true);
}

/* The header gives no unit (the counters are named *_BYTES, sampled over
 * 10 ms per pyhlml's docstring). */
hlml_return_t hlml_device_get_pcie_throughput(hlml_device_t device, hlml_pcie_util_counter_t counter,
                                              unsigned int *value) {
  DEV(device);
  if (!value || counter >= HLML_PCIE_UTIL_COUNT)
    return HLML_ERROR_INVALID_ARGUMENT;
  *value = busy[i] * (counter == HLML_PCIE_UTIL_TX_BYTES ? 1000u : 3000u);
  return HLML_SUCCESS;
}

hlml_return_t hlml_device_get_ecc_mode(hlml_device_t device, hlml_enable_state_t *current,
                                       hlml_enable_state_t *pending) {
  DEV(device);
  (void)i;
  if (!current || !pending)
    return HLML_ERROR_INVALID_ARGUMENT;
  *current = *pending = HLML_FEATURE_ENABLED;
  return HLML_SUCCESS;
}

/* Only uncorrected errors are counted ("corrected: not supported" in the
 * header); device 4 has had two. */
hlml_return_t hlml_device_get_total_ecc_errors(hlml_device_t device, hlml_memory_error_type_t error_type,
                                               hlml_ecc_counter_type_t counter_type,
                                               unsigned long long *ecc_counts) {
  DEV(device);
  if (!ecc_counts || counter_type >= HLML_ECC_COUNTER_TYPE_COUNT || error_type >= HLML_MEMORY_ERROR_TYPE_COUNT)
    return HLML_ERROR_INVALID_ARGUMENT;
  if (error_type == HLML_MEMORY_ERROR_TYPE_CORRECTED)
    return HLML_ERROR_NOT_SUPPORTED;
  *ecc_counts = i == 4 ? 2 : 0;
  return HLML_SUCCESS;
}

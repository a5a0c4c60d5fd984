/* The fake libhlml.so against what a real HLML node answers, before any
 * vendor reads it: run once per node (FAKE_HLML_NODE unset: 8x Gaudi 2;
 * gaudi3: 8x Gaudi 3). Index order differs from bus order and from module
 * ids, units are HLML's (mW, mJ, bytes, MHz), the faults the vendor's
 * tests inject behave as documented in c-tests/fakes/hlml.c. */
#include "fakes/hlml.h"
#include "test_util.h"
#include <stdbool.h>

int main(void) {
  const char *node = getenv("FAKE_HLML_NODE");
  bool g3 = node && strcmp(node, "gaudi3") == 0;
  unsigned n = 0;
  hlml_device_t d;
  char s[HLML_VERSION_MAX_LEN];

  EXPECT(hlml_device_get_count(&n), HLML_ERROR_UNINITIALIZED);
  EXPECT(hlml_init_with_flags(1), HLML_ERROR_INVALID_ARGUMENT);
  setenv("FAKE_HLML_INIT_FAIL", "1", 1);
  EXPECT(hlml_init(), HLML_ERROR_DRIVER_NOT_LOADED);
  unsetenv("FAKE_HLML_INIT_FAIL");
  EXPECT(hlml_init(), HLML_SUCCESS);
  EXPECT(hlml_get_hlml_version(s, sizeof s), HLML_SUCCESS);
  CHECK(strcmp(s, "1.24.0") == 0, "version %s", s);
  EXPECT(hlml_get_hlml_version(s, 3), HLML_ERROR_INSUFFICIENT_SIZE);
  EXPECT(hlml_device_get_count(&n), HLML_SUCCESS);
  CHECK(n == 8, "count %u", n);
  EXPECT(hlml_device_get_handle_by_index(8, &d), HLML_ERROR_INVALID_ARGUMENT);

  unsigned minors = 0, modules = 0, by_bus = 0, numa0 = 0, prev_bus = 0;
  for (unsigned i = 0; i < n; i++) {
    EXPECT(hlml_device_get_handle_by_index(i, &d), HLML_SUCCESS);
    EXPECT(hlml_device_get_name(d, s, sizeof s), HLML_SUCCESS);
    CHECK(strcmp(s, g3 ? "HL-325L" : "HL-225") == 0, "name %s", s);
    hlml_pci_info_t pci;
    EXPECT(hlml_device_get_pci_info(d, &pci), HLML_SUCCESS);
    CHECK(pci.pci_device_id == ((g3 ? 0x1060u : 0x1020u) << 16 | 0x1da3u), "pci id %#x", pci.pci_device_id);
    by_bus += i > 0 && pci.bus > prev_bus;
    prev_bus = pci.bus;
    hlml_device_t back;
    EXPECT(hlml_device_get_handle_by_pci_bus_id(pci.bus_id, &back), HLML_SUCCESS);
    CHECK(back == d, "bus id %s names another device", pci.bus_id);
    EXPECT(hlml_device_get_uuid(d, s, sizeof s), HLML_SUCCESS);
    EXPECT(hlml_device_get_handle_by_UUID(s, &back), HLML_SUCCESS);
    CHECK(back == d, "uuid %s names another device", s);
    unsigned minor, module, gen, width, mw, limit, c, cmax;
    EXPECT(hlml_device_get_minor_number(d, &minor), HLML_SUCCESS);
    EXPECT(hlml_device_get_module_id(d, &module), HLML_SUCCESS);
    minors |= 1u << minor;
    modules |= 1u << module;
    CHECK(module != i || i == 7, "module id %u is index %u", module, i);
    unsigned long nodes[2];
    EXPECT(hlml_device_get_memory_affinity(d, 2, nodes, HLML_AFFINITY_SCOPE_NODE), HLML_SUCCESS);
    numa0 += nodes[0] == 1;
    EXPECT(hlml_device_get_curr_pcie_link_generation(d, &gen), HLML_SUCCESS);
    EXPECT(hlml_device_get_curr_pcie_link_width(d, &width), HLML_SUCCESS);
    CHECK(gen == (g3 ? 5u : 4u) && width == 16, "PCIe gen %u x%u", gen, width);
    hlml_memory_t mem;
    EXPECT(hlml_device_get_memory_info(d, &mem), HLML_SUCCESS);
    CHECK(mem.total == (g3 ? 131072ull : 98304ull) << 20 && mem.free + mem.used == mem.total,
          "memory %llu = %llu + %llu", mem.total, mem.free, mem.used);
    EXPECT(hlml_device_get_power_usage(d, &mw), HLML_SUCCESS);
    EXPECT(hlml_device_get_power_management_default_limit(d, &limit), HLML_SUCCESS);
    CHECK(limit == (g3 ? 900000u : 600000u) && mw > 50000 && mw < limit, "power %u of %u mW", mw, limit);
    EXPECT(hlml_device_get_clock_info(d, HLML_CLOCK_SOC, &c), HLML_SUCCESS);
    EXPECT(hlml_device_get_max_clock_info(d, HLML_CLOCK_SOC, &cmax), HLML_SUCCESS);
    CHECK(c > 0 && c <= cmax && cmax <= 2000, "clock %u of %u MHz", c, cmax);
    EXPECT(hlml_device_get_clock_info(d, HLML_CLOCK_TPC, &c), HLML_ERROR_NOT_SUPPORTED);
    unsigned long long ecc;
    EXPECT(hlml_device_get_total_ecc_errors(d, HLML_MEMORY_ERROR_TYPE_CORRECTED, HLML_AGGREGATE_ECC, &ecc),
           HLML_ERROR_NOT_SUPPORTED);
    EXPECT(hlml_device_get_total_ecc_errors(d, HLML_MEMORY_ERROR_TYPE_UNCORRECTED, HLML_AGGREGATE_ECC, &ecc),
           HLML_SUCCESS);
  }
  CHECK(minors == 0xff && modules == 0xff, "minors %#x modules %#x", minors, modules);
  CHECK(by_bus < n - 1, "index order is bus order");
  CHECK(numa0 == 4, "%u devices on NUMA node 0", numa0);

  setenv("FAKE_HLML_GONE", "3", 1);
  EXPECT(hlml_device_get_handle_by_index(3, &d), HLML_SUCCESS);
  unsigned mw;
  EXPECT(hlml_device_get_power_usage(d, &mw), HLML_ERROR_AIP_IS_LOST);
  unsetenv("FAKE_HLML_GONE");
  EXPECT(hlml_device_get_power_usage(d, &mw), HLML_SUCCESS);
  EXPECT(hlml_shutdown(), HLML_SUCCESS);
  EXPECT(hlml_device_get_power_usage(d, &mw), HLML_ERROR_UNINITIALIZED);
  EXPECT(hlml_shutdown(), HLML_ERROR_UNINITIALIZED);
  return test_summary();
}

/* Every size and offset of the HLML structures the habana vendor reads, as
 * the HLML of release 1.FAKE_HLML_MINOR lays them out (x86-64 / aarch64
 * LP64), checked against the declarations the fake is built from
 * (c-tests/fakes/hlml.h). The figures are those ctypes computes from the
 * types of each release's habana-pyhlml wheel; vendors/habana/layout.rs
 * holds the same numbers for the Rust side. */
#include <assert.h>
#include <stddef.h>
#include <stdio.h>
#include "fakes/hlml.h"

#define AT(t, f, n) static_assert(offsetof(t, f) == (n), #t "." #f)
#define SIZE(t, n) static_assert(sizeof(t) == (n), "sizeof " #t)

/* What every release shares. */
SIZE(hlml_memory_t, 24);
AT(hlml_memory_t, free, 0);
AT(hlml_memory_t, total, 8);
AT(hlml_memory_t, used, 16);
AT(hlml_pci_info_t, bus, 0);
AT(hlml_pci_info_t, bus_id, 4);
AT(hlml_pci_cap_t, link_width, 10);
AT(hlml_utilization_t, aip, 0);
static_assert(HLML_ERROR_AIP_IS_LOST == 15 && HLML_ERROR_MEMORY == 20 && HLML_ERROR_NO_DATA == 21 &&
                  HLML_ERROR_UNKNOWN == 49,
              "hlml_return_t");
static_assert(HLML_PCIE_UTIL_RX_BYTES == 1 && HLML_TEMPERATURE_ON_BOARD == 1 && HLML_CLOCK_TPC == 3 &&
                  HLML_MEMORY_ERROR_TYPE_UNCORRECTED == 1 && HLML_AGGREGATE_ECC == 1,
              "enums");

#if FAKE_HLML_MINOR == 10
SIZE(hlml_pci_cap_t, 20);
SIZE(hlml_pci_info_t, 52);
#elif FAKE_HLML_MINOR >= 11 && FAKE_HLML_MINOR <= 18
SIZE(hlml_pci_cap_t, 40);
AT(hlml_pci_cap_t, link_max_speed, 20);
AT(hlml_pci_info_t, pci_rev, 72);
#if FAKE_HLML_MINOR == 18
SIZE(hlml_pci_info_t, 80);
AT(hlml_pci_info_t, pci_subsys_id, 76);
#else
SIZE(hlml_pci_info_t, 76);
#endif
#elif FAKE_HLML_MINOR >= 19 && FAKE_HLML_MINOR <= 24
SIZE(hlml_pci_cap_t, 40);
SIZE(hlml_pci_info_t, 84);
AT(hlml_pci_info_t, device, 24);
AT(hlml_pci_info_t, domain, 28);
AT(hlml_pci_info_t, pci_device_id, 32);
AT(hlml_pci_info_t, caps, 36);
AT(hlml_pci_info_t, pci_rev, 76);
AT(hlml_pci_info_t, pci_subsys_id, 80);
SIZE(hlml_utilization_t, 8);
AT(hlml_utilization_t, memory, 4);
#else
#error "no HLML release 1.FAKE_HLML_MINOR is known"
#endif

#if FAKE_HLML_MINOR <= 18
AT(hlml_pci_info_t, device, 20);
AT(hlml_pci_info_t, domain, 24);
AT(hlml_pci_info_t, pci_device_id, 28);
AT(hlml_pci_info_t, caps, 32);
SIZE(hlml_utilization_t, 4);
#endif

int main(void) {
  printf("HLML 1.%d: pci_info %zu bytes, utilization %zu: ok\n", FAKE_HLML_MINOR, sizeof(hlml_pci_info_t),
         sizeof(hlml_utilization_t));
  return 0;
}

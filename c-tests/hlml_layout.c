/* Every size and offset of the HLML structures a Habana vendor reads, as
 * the real headers lay them out (x86-64 / aarch64 LP64) for the layout the
 * fake is built as (FAKE_HLML_LAYOUT: 1, the gohlml header; 2, the
 * habana-pyhlml 1.24.2.481 wheel), checked against the declarations the
 * fake is built from (c-tests/fakes/hlml.h). Layout 2's figures are those
 * ctypes computes from the wheel's generated types; layout 1's follow from
 * the header's declarations. */
#include <assert.h>
#include <stddef.h>
#include <stdio.h>
#include "fakes/hlml.h"

#define AT(t, f, n) static_assert(offsetof(t, f) == (n), #t "." #f)
#define SIZE(t, n) static_assert(sizeof(t) == (n), "sizeof " #t)

SIZE(hlml_memory_t, 24);
AT(hlml_memory_t, free, 0);
AT(hlml_memory_t, total, 8);
AT(hlml_memory_t, used, 16);
AT(hlml_pci_info_t, bus, 0);
AT(hlml_pci_info_t, bus_id, 4);
AT(hlml_pci_cap_t, link_width, 10);
static_assert(HLML_ERROR_AIP_IS_LOST == 15 && HLML_ERROR_UNKNOWN == 49, "hlml_return_t");
static_assert(HLML_PCIE_UTIL_RX_BYTES == 1 && HLML_TEMPERATURE_ON_BOARD == 1, "enums");

#if FAKE_HLML_LAYOUT == 1
SIZE(hlml_pci_cap_t, 20);
SIZE(hlml_pci_info_t, 52);
AT(hlml_pci_info_t, device, 20);
AT(hlml_pci_info_t, domain, 24);
AT(hlml_pci_info_t, pci_device_id, 28);
AT(hlml_pci_info_t, caps, 32);
SIZE(hlml_utilization_t, 4);
#elif FAKE_HLML_LAYOUT == 2
SIZE(hlml_pci_cap_t, 40);
AT(hlml_pci_cap_t, link_max_speed, 20);
AT(hlml_pci_cap_t, link_max_width, 30);
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
#error "FAKE_HLML_LAYOUT is 1 or 2"
#endif

int main(void) {
  printf("HLML layout %d: pci_info %zu bytes, utilization %zu: ok\n", FAKE_HLML_LAYOUT, sizeof(hlml_pci_info_t),
         sizeof(hlml_utilization_t));
  return 0;
}

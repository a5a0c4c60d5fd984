/* Every size and offset the amd vendor relies on, as the real AMD SMI
 * headers lay them out (x86-64 / aarch64 LP64) for the version the fake is
 * built as (FAKE_AMDSMI_MAJOR: 24, 25, 26), checked against the
 * declarations the fake is built from (c-tests/fakes/amdsmi.h).
 * vendors/amd/layout.rs and smi.rs hold the same numbers for the Rust
 * side. The figures are those of AMD's ctypes wrapper generated from each
 * release's header (docs/amd.md). */
#include <assert.h>
#include <stddef.h>
#include <stdio.h>
#include "fakes/amdsmi.h"

#define AT(t, f, n) static_assert(offsetof(t, f) == (n), #t "." #f)
#define SIZE(t, n) static_assert(sizeof(t) == (n), "sizeof " #t)

/* The structures every version shares. */
SIZE(amdsmi_pcie_info_t, 512);
AT(amdsmi_pcie_info_t, pcie_static.max_pcie_speed, 4);
AT(amdsmi_pcie_info_t, pcie_static.pcie_interface_version, 8);
AT(amdsmi_pcie_info_t, pcie_metric.pcie_width, 96);
AT(amdsmi_pcie_info_t, pcie_metric.pcie_speed, 100);
SIZE(amdsmi_power_cap_info_t, 64);
AT(amdsmi_power_cap_info_t, max_power_cap, 32);
SIZE(amdsmi_clk_info_t, 32);
AT(amdsmi_clk_info_t, max_clk, 8);
SIZE(amdsmi_engine_usage_t, 64);
AT(amdsmi_engine_usage_t, umc_activity, 4);
SIZE(amdsmi_vram_usage_t, 16);
AT(amdsmi_vram_usage_t, vram_used, 4);
SIZE(amdsmi_link_metrics_t, 3648);
AT(amdsmi_link_metrics_t, links, 8);
AT(amdsmi_link_metrics_t, links[0].bit_rate, 16);
AT(amdsmi_link_metrics_t, links[0].link_type, 24);
AT(amdsmi_link_metrics_t, links[0].read, 32);
AT(amdsmi_link_metrics_t, links[0].write, 40);
AT(amdsmi_link_metrics_t, links[1], 64);
SIZE(amdsmi_accelerator_partition_profile_t, 1152);
AT(amdsmi_accelerator_partition_profile_t, num_partitions, 4);
AT(amdsmi_accelerator_partition_profile_t, memory_caps, 8);
AT(amdsmi_accelerator_partition_profile_t, num_resources, 16);
AT(amdsmi_accelerator_partition_profile_t, resources, 20);
SIZE(amdsmi_version_t, 24);
AT(amdsmi_version_t, build, 16);

/* The structures that changed (vendors/amd/layout.rs: V24, V25, V26). */
#if FAKE_AMDSMI_MAJOR == 24
AT(amdsmi_version_t, major, 4);
SIZE(amdsmi_asic_info_t, 456);
AT(amdsmi_asic_info_t, vendor_name, 260);
AT(amdsmi_asic_info_t, device_id, 328);
AT(amdsmi_asic_info_t, asic_serial, 340);
AT(amdsmi_asic_info_t, num_of_compute_units, 376);
AT(amdsmi_asic_info_t, target_graphics_version, 384);
SIZE(amdsmi_vram_info_t, 64);
AT(amdsmi_vram_info_t, vram_size, 8);
AT(amdsmi_vram_info_t, vram_bit_width, 16);
SIZE(amdsmi_driver_info_t, 192);
SIZE(amdsmi_vbios_info_t, 256);
AT(amdsmi_vbios_info_t, part_number, 96);
AT(amdsmi_vbios_info_t, version, 160);
SIZE(amdsmi_power_info_t, 68);
AT(amdsmi_power_info_t, current_socket_power, 0);
AT(amdsmi_power_info_t, average_socket_power, 4);
AT(amdsmi_power_info_t, power_limit, 20);
SIZE(amdsmi_proc_info_t, 224);
AT(amdsmi_proc_info_t, pid, 32);
AT(amdsmi_proc_info_t, mem, 40);
AT(amdsmi_proc_info_t, engine_usage.gfx, 48);
AT(amdsmi_proc_info_t, memory_usage.gtt_mem, 112);
AT(amdsmi_proc_info_t, memory_usage.vram_mem, 128);
AT(amdsmi_proc_info_t, container_name, 176);
#else
AT(amdsmi_asic_info_t, vendor_name, 260);
AT(amdsmi_asic_info_t, device_id, 520);
AT(amdsmi_asic_info_t, asic_serial, 532);
AT(amdsmi_asic_info_t, num_of_compute_units, 792);
AT(amdsmi_asic_info_t, target_graphics_version, 800);
SIZE(amdsmi_asic_info_t, 896);
SIZE(amdsmi_driver_info_t, 768);
AT(amdsmi_power_info_t, current_socket_power, 8);
AT(amdsmi_power_info_t, average_socket_power, 12);
SIZE(amdsmi_proc_info_t, 704);
AT(amdsmi_proc_info_t, pid, 256);
AT(amdsmi_proc_info_t, mem, 264);
AT(amdsmi_proc_info_t, engine_usage.gfx, 272);
AT(amdsmi_proc_info_t, memory_usage.vram_mem, 352);
AT(amdsmi_proc_info_t, container_name, 400);
#endif
#if FAKE_AMDSMI_MAJOR == 25
AT(amdsmi_version_t, major, 4);
SIZE(amdsmi_vram_info_t, 64);
AT(amdsmi_vram_info_t, vram_size, 8);
AT(amdsmi_vram_info_t, vram_max_bandwidth, 24);
SIZE(amdsmi_vbios_info_t, 1056);
AT(amdsmi_vbios_info_t, part_number, 288);
AT(amdsmi_vbios_info_t, version, 544);
SIZE(amdsmi_power_info_t, 40);
AT(amdsmi_power_info_t, power_limit, 28);
#elif FAKE_AMDSMI_MAJOR == 26
AT(amdsmi_version_t, major, 0);
AT(amdsmi_version_t, release, 8);
SIZE(amdsmi_vram_info_t, 584);
AT(amdsmi_vram_info_t, vram_size, 264);
AT(amdsmi_vram_info_t, vram_bit_width, 272);
AT(amdsmi_vram_info_t, vram_max_bandwidth, 280);
SIZE(amdsmi_vbios_info_t, 1568);
AT(amdsmi_vbios_info_t, part_number, 512);
AT(amdsmi_vbios_info_t, version, 768);
SIZE(amdsmi_power_info_t, 192);
AT(amdsmi_power_info_t, gfx_voltage, 16);
AT(amdsmi_power_info_t, power_limit, 40);
AT(amdsmi_proc_info_t, cu_occupancy, 656);
#endif

/* Enum values that were renumbered. */
#if FAKE_AMDSMI_MAJOR >= 26
static_assert(AMDSMI_MEMORY_PARTITION_NPS4 == 4 && AMDSMI_MEMORY_PARTITION_NPS8 == 8, "NPS");
static_assert(AMDSMI_LINK_TYPE_PCIE == 1 && AMDSMI_LINK_TYPE_XGMI == 2, "link type");
#else
static_assert(AMDSMI_MEMORY_PARTITION_NPS4 == 3 && AMDSMI_MEMORY_PARTITION_NPS8 == 4, "NPS");
static_assert(AMDSMI_LINK_TYPE_XGMI == 1 && AMDSMI_LINK_TYPE_PCIE == 2, "link type");
static_assert(AMDSMI_IOLINK_TYPE_PCIEXPRESS == 1 && AMDSMI_IOLINK_TYPE_XGMI == 2, "io link type");
#endif

int main(void) {
  printf("amd_layout: AMD SMI %d.x layouts match\n", FAKE_AMDSMI_MAJOR);
  return 0;
}

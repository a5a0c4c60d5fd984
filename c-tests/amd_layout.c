/* Every size and offset the amd vendor relies on, as the real AMD SMI
 * header lays them out (amd_smi/amdsmi.h 24.7.0.0, x86-64 / aarch64 LP64),
 * checked against the declarations the fake is built from
 * (c-tests/fakes/amdsmi.h). vendors/amd/smi.rs checks the same numbers for
 * the Rust declarations. The figures were printed by a program compiled
 * against the real header (docs/amd.md). */
#include <assert.h>
#include <stddef.h>
#include <stdio.h>
#include "fakes/amdsmi.h"

#define AT(t, f, n) static_assert(offsetof(t, f) == (n), #t "." #f)
#define SIZE(t, n) static_assert(sizeof(t) == (n), "sizeof " #t)

SIZE(amdsmi_asic_info_t, 456);
AT(amdsmi_asic_info_t, vendor_id, 256);
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
SIZE(amdsmi_pcie_info_t, 512);
AT(amdsmi_pcie_info_t, pcie_static.max_pcie_speed, 4);
AT(amdsmi_pcie_info_t, pcie_static.pcie_interface_version, 8);
AT(amdsmi_pcie_info_t, pcie_metric.pcie_width, 96);
AT(amdsmi_pcie_info_t, pcie_metric.pcie_speed, 100);
SIZE(amdsmi_power_cap_info_t, 64);
AT(amdsmi_power_cap_info_t, max_power_cap, 32);
SIZE(amdsmi_power_info_t, 68);
AT(amdsmi_power_info_t, average_socket_power, 4);
AT(amdsmi_power_info_t, power_limit, 20);
SIZE(amdsmi_clk_info_t, 32);
AT(amdsmi_clk_info_t, max_clk, 8);
SIZE(amdsmi_engine_usage_t, 64);
AT(amdsmi_engine_usage_t, umc_activity, 4);
SIZE(amdsmi_vram_usage_t, 16);
AT(amdsmi_vram_usage_t, vram_used, 4);
SIZE(amdsmi_proc_info_t, 224);
AT(amdsmi_proc_info_t, pid, 32);
AT(amdsmi_proc_info_t, mem, 40);
AT(amdsmi_proc_info_t, engine_usage.gfx, 48);
AT(amdsmi_proc_info_t, engine_usage.enc, 56);
AT(amdsmi_proc_info_t, memory_usage.gtt_mem, 112);
AT(amdsmi_proc_info_t, memory_usage.vram_mem, 128);
AT(amdsmi_proc_info_t, container_name, 176);
SIZE(amdsmi_link_metrics_t, 3648);
AT(amdsmi_link_metrics_t, links, 8);
AT(amdsmi_link_metrics_t, links[0].bit_rate, 16);
AT(amdsmi_link_metrics_t, links[0].link_type, 24);
AT(amdsmi_link_metrics_t, links[0].read, 32);
AT(amdsmi_link_metrics_t, links[0].write, 40);
AT(amdsmi_link_metrics_t, links[1], 64);
SIZE(amdsmi_accelerator_partition_profile_t, 1096);
AT(amdsmi_accelerator_partition_profile_t, num_partitions, 4);
AT(amdsmi_accelerator_partition_profile_t, memory_caps, 12);
AT(amdsmi_accelerator_partition_profile_t, num_resources, 16);

int main(void) {
  puts("amd_layout: AMD SMI 24.7.0.0 layouts match");
  return 0;
}

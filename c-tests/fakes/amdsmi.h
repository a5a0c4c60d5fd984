/* The part of AMD SMI's C API (amd_smi/amdsmi.h) the amd vendor uses, as
 * this project reads it: the fake libamd_smi.so implements these and
 * c-tests/amd_layout.c checks every offset against the real header.
 *
 * Source: ROCm/amdsmi include/amd_smi/amdsmi.h, library version 24.7.0.0
 * (AMDSMI_LIB_VERSION_YEAR 24, MAJOR 7, MINOR 0, RELEASE 0; ROCm 6.3;
 * amd-staging commit 0ceca28f). Written from that header, not copied. */
#ifndef FAKE_AMDSMI_H
#define FAKE_AMDSMI_H
#include <stdint.h>

typedef void *amdsmi_socket_handle;
typedef void *amdsmi_processor_handle;
typedef uint32_t amdsmi_status_t; /* an enum: 4 bytes */

enum {
  AMDSMI_STATUS_SUCCESS = 0,
  AMDSMI_STATUS_INVAL = 1,
  AMDSMI_STATUS_NOT_SUPPORTED = 2,
  AMDSMI_STATUS_API_FAILED = 7,
  AMDSMI_STATUS_NO_PERM = 10,
  AMDSMI_STATUS_OUT_OF_RESOURCES = 15,
  AMDSMI_STATUS_BUSY = 30,
  AMDSMI_STATUS_NOT_FOUND = 31,
  AMDSMI_STATUS_NOT_INIT = 32,
  AMDSMI_STATUS_DRIVER_NOT_LOADED = 34,
  AMDSMI_STATUS_INSUFFICIENT_SIZE = 41,
  AMDSMI_STATUS_SETTING_UNAVAILABLE = 55,
};

#define AMDSMI_INIT_AMD_GPUS (1u << 1)
#define AMDSMI_PROCESSOR_TYPE_AMD_GPU 1
#define AMDSMI_GPU_UUID_SIZE 38

enum { AMDSMI_VRAM_TYPE_HBM2E = 3, AMDSMI_VRAM_TYPE_HBM3 = 4 };
enum { AMDSMI_IOLINK_TYPE_UNDEFINED = 0, AMDSMI_IOLINK_TYPE_PCIEXPRESS = 1, AMDSMI_IOLINK_TYPE_XGMI = 2 };
/* amdsmi_link_type_t (link metrics): INTERNAL 0, XGMI 1, PCIE 2 in 24.7. */
enum { AMDSMI_LINK_TYPE_XGMI = 1 };
enum { AMDSMI_TEMPERATURE_TYPE_EDGE = 0, AMDSMI_TEMPERATURE_TYPE_HOTSPOT = 1, AMDSMI_TEMPERATURE_TYPE_VRAM = 2 };
enum { AMDSMI_TEMP_CURRENT = 0, AMDSMI_TEMP_CRITICAL = 5 };
enum {
  AMDSMI_COMPUTE_PARTITION_INVALID = 0,
  AMDSMI_COMPUTE_PARTITION_SPX = 1,
  AMDSMI_COMPUTE_PARTITION_DPX = 2,
  AMDSMI_COMPUTE_PARTITION_TPX = 3,
  AMDSMI_COMPUTE_PARTITION_QPX = 4,
  AMDSMI_COMPUTE_PARTITION_CPX = 5,
};
enum {
  AMDSMI_MEMORY_PARTITION_UNKNOWN = 0,
  AMDSMI_MEMORY_PARTITION_NPS1 = 1,
  AMDSMI_MEMORY_PARTITION_NPS2 = 2,
  AMDSMI_MEMORY_PARTITION_NPS4 = 3,
  AMDSMI_MEMORY_PARTITION_NPS8 = 4,
};

typedef struct {
  char market_name[256];
  uint32_t vendor_id;
  char vendor_name[64];
  uint32_t subvendor_id;
  uint64_t device_id;
  uint32_t rev_id;
  char asic_serial[32];
  uint32_t oam_id;
  uint32_t num_of_compute_units;
  uint64_t target_graphics_version;
  uint32_t reserved[15];
} amdsmi_asic_info_t;

typedef struct {
  uint32_t vram_type;   /* amdsmi_vram_type_t */
  uint32_t vram_vendor; /* amdsmi_vram_vendor_type_t */
  uint64_t vram_size;   /* MB */
  uint32_t vram_bit_width;
  uint64_t reserved[5];
} amdsmi_vram_info_t;

typedef struct {
  char driver_version[64];
  char driver_date[64];
  char driver_name[64];
} amdsmi_driver_info_t;

typedef struct {
  char name[64];
  char build_date[32];
  char part_number[64];
  char version[32];
  uint32_t reserved[16];
} amdsmi_vbios_info_t;

typedef struct {
  struct {
    uint16_t max_pcie_width;
    uint32_t max_pcie_speed; /* MT/s */
    uint32_t pcie_interface_version;
    uint32_t slot_type;
    uint64_t reserved[10];
  } pcie_static;
  struct {
    uint16_t pcie_width;
    uint32_t pcie_speed;
    uint32_t pcie_bandwidth;
    uint64_t pcie_replay_count;
    uint64_t pcie_l0_to_recovery_count;
    uint64_t pcie_replay_roll_over_count;
    uint64_t pcie_nak_sent_count;
    uint64_t pcie_nak_received_count;
    uint32_t pcie_lc_perf_other_end_recovery_count;
    uint64_t reserved[12];
  } pcie_metric;
  uint64_t reserved[32];
} amdsmi_pcie_info_t;

typedef struct {
  uint64_t power_cap; /* uW */
  uint64_t default_power_cap;
  uint64_t dpm_cap;
  uint64_t min_power_cap;
  uint64_t max_power_cap;
  uint64_t reserved[3];
} amdsmi_power_cap_info_t;

typedef struct {
  uint32_t current_socket_power; /* W */
  uint32_t average_socket_power; /* W */
  uint32_t gfx_voltage;
  uint32_t soc_voltage;
  uint32_t mem_voltage;
  uint32_t power_limit;
  uint32_t reserved[11];
} amdsmi_power_info_t;

enum { AMDSMI_CLK_TYPE_GFX = 0, AMDSMI_CLK_TYPE_MEM = 4 };
typedef struct {
  uint32_t clk; /* MHz */
  uint32_t min_clk;
  uint32_t max_clk;
  uint8_t clk_locked;
  uint8_t clk_deep_sleep;
  uint32_t reserved[4];
} amdsmi_clk_info_t;

typedef struct {
  uint32_t gfx_activity; /* % */
  uint32_t umc_activity;
  uint32_t mm_activity;
  uint32_t reserved[13];
} amdsmi_engine_usage_t;

typedef struct {
  uint32_t vram_total; /* MB */
  uint32_t vram_used;
  uint32_t reserved[2];
} amdsmi_vram_usage_t;

typedef struct {
  char name[32];
  uint32_t pid;
  uint64_t mem; /* bytes */
  struct {
    uint64_t gfx; /* ns of engine time */
    uint64_t enc;
    uint32_t reserved[12];
  } engine_usage;
  struct {
    uint64_t gtt_mem;
    uint64_t cpu_mem;
    uint64_t vram_mem;
    uint32_t reserved[10];
  } memory_usage;
  char container_name[32];
  uint32_t reserved[4];
} amdsmi_proc_info_t;

typedef struct {
  uint32_t num_links;
  struct {
    uint64_t bdf; /* amdsmi_bdf_t */
    uint32_t bit_rate;      /* Gb/s */
    uint32_t max_bandwidth;
    uint32_t link_type; /* amdsmi_link_type_t */
    uint64_t read;      /* KB */
    uint64_t write;
    uint64_t reserved[2];
  } links[64];
  uint64_t reserved[7];
} amdsmi_link_metrics_t;

typedef struct {
  uint32_t profile_type; /* amdsmi_accelerator_partition_type_t */
  uint32_t num_partitions;
  uint32_t profile_index;
  uint32_t memory_caps; /* amdsmi_nps_caps_t: bit 0 NPS1, 1 NPS2, 2 NPS4, 3 NPS8 */
  uint32_t num_resources;
  uint32_t resources[8][32];
  uint64_t reserved[6];
} amdsmi_accelerator_partition_profile_t;

#endif

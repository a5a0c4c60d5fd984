/* The part of AMD SMI's C API (amd_smi/amdsmi.h) the amd vendor uses, as
 * this project reads it, for the library version FAKE_AMDSMI_MAJOR (24:
 * ROCm 6.3, the default; 25: ROCm 6.4; 26: ROCm 7.x): the fake
 * libamd_smi.so implements these and c-tests/amd_layout.c checks every
 * offset against the real header's figures.
 *
 * Sources: ROCm/amdsmi include/amd_smi/amdsmi.h (24.7), and the ctypes
 * wrapper AMD generates from each release's header (amdsmi_wrapper.py of
 * the amdsmi wheels 6.3.0, 6.4.0 and 7.0.2). Written from those, not
 * copied. */
#ifndef FAKE_AMDSMI_H
#define FAKE_AMDSMI_H
#include <stdint.h>

#ifndef FAKE_AMDSMI_MAJOR
#define FAKE_AMDSMI_MAJOR 24
#endif
#if FAKE_AMDSMI_MAJOR != 24 && FAKE_AMDSMI_MAJOR != 25 && FAKE_AMDSMI_MAJOR != 26
#error "FAKE_AMDSMI_MAJOR is 24, 25 or 26"
#endif
/* The char arrays that grew from 32/64 to 256 bytes in 25. */
#if FAKE_AMDSMI_MAJOR >= 25
#define AMDSMI_STR 256
#else
#define AMDSMI_STR 64
#endif

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
#if FAKE_AMDSMI_MAJOR >= 26
/* amdsmi_link_type_t, renumbered in 26, is also what
 * amdsmi_topo_get_link_type returns (amdsmi_io_link_type_t is gone). */
enum { AMDSMI_LINK_TYPE_INTERNAL = 0, AMDSMI_LINK_TYPE_PCIE = 1, AMDSMI_LINK_TYPE_XGMI = 2 };
#define TOPO_PCIE AMDSMI_LINK_TYPE_PCIE
#define TOPO_XGMI AMDSMI_LINK_TYPE_XGMI
#else
enum { AMDSMI_IOLINK_TYPE_UNDEFINED = 0, AMDSMI_IOLINK_TYPE_PCIEXPRESS = 1, AMDSMI_IOLINK_TYPE_XGMI = 2 };
/* amdsmi_link_type_t (link metrics): INTERNAL 0, XGMI 1, PCIE 2. */
enum { AMDSMI_LINK_TYPE_INTERNAL = 0, AMDSMI_LINK_TYPE_XGMI = 1, AMDSMI_LINK_TYPE_PCIE = 2 };
#define TOPO_PCIE AMDSMI_IOLINK_TYPE_PCIEXPRESS
#define TOPO_XGMI AMDSMI_IOLINK_TYPE_XGMI
#endif
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
#if FAKE_AMDSMI_MAJOR >= 26
enum {
  AMDSMI_MEMORY_PARTITION_UNKNOWN = 0,
  AMDSMI_MEMORY_PARTITION_NPS1 = 1,
  AMDSMI_MEMORY_PARTITION_NPS2 = 2,
  AMDSMI_MEMORY_PARTITION_NPS4 = 4,
  AMDSMI_MEMORY_PARTITION_NPS8 = 8,
};
#else
enum {
  AMDSMI_MEMORY_PARTITION_UNKNOWN = 0,
  AMDSMI_MEMORY_PARTITION_NPS1 = 1,
  AMDSMI_MEMORY_PARTITION_NPS2 = 2,
  AMDSMI_MEMORY_PARTITION_NPS4 = 3,
  AMDSMI_MEMORY_PARTITION_NPS8 = 4,
};
#endif

/* amdsmi_get_lib_version's structure: `year` first before 26. */
typedef struct {
#if FAKE_AMDSMI_MAJOR < 26
  uint32_t year;
#endif
  uint32_t major;
  uint32_t minor;
  uint32_t release;
  const char *build;
} amdsmi_version_t;

typedef struct {
  char market_name[256];
  uint32_t vendor_id;
  char vendor_name[AMDSMI_STR];
  uint32_t subvendor_id;
  uint64_t device_id;
  uint32_t rev_id;
#if FAKE_AMDSMI_MAJOR >= 25
  char asic_serial[256];
#else
  char asic_serial[32];
#endif
  uint32_t oam_id;
  uint32_t num_of_compute_units;
  uint64_t target_graphics_version;
#if FAKE_AMDSMI_MAJOR >= 26
  uint32_t subsystem_id;
  uint32_t reserved[21];
#elif FAKE_AMDSMI_MAJOR == 25
  uint32_t reserved[22];
#else
  uint32_t reserved[15];
#endif
} amdsmi_asic_info_t;

typedef struct {
  uint32_t vram_type; /* amdsmi_vram_type_t */
#if FAKE_AMDSMI_MAJOR >= 26
  char vram_vendor[256];
#else
  uint32_t vram_vendor; /* amdsmi_vram_vendor_type_t */
#endif
  uint64_t vram_size; /* MB */
  uint32_t vram_bit_width;
#if FAKE_AMDSMI_MAJOR >= 26
  uint64_t vram_max_bandwidth;
  uint64_t reserved[37];
#elif FAKE_AMDSMI_MAJOR == 25
  uint64_t vram_max_bandwidth;
  uint64_t reserved[4];
#else
  uint64_t reserved[5];
#endif
} amdsmi_vram_info_t;

typedef struct {
  char driver_version[AMDSMI_STR];
  char driver_date[AMDSMI_STR];
  char driver_name[AMDSMI_STR];
} amdsmi_driver_info_t;

typedef struct {
#if FAKE_AMDSMI_MAJOR >= 26
  char name[256];
  char build_date[256];
  char part_number[256];
  char version[256];
  uint64_t reserved[68];
#elif FAKE_AMDSMI_MAJOR == 25
  char name[256];
  char build_date[32];
  char part_number[256];
  char version[256];
  uint64_t reserved[32];
#else
  char name[64];
  char build_date[32];
  char part_number[64];
  char version[32];
  uint32_t reserved[16];
#endif
} amdsmi_vbios_info_t;

typedef struct {
  struct {
    uint16_t max_pcie_width;
    uint32_t max_pcie_speed; /* MT/s */
    uint32_t pcie_interface_version;
    uint32_t slot_type;
#if FAKE_AMDSMI_MAJOR >= 25
    uint32_t max_pcie_interface_version;
    uint64_t reserved[9];
#else
    uint64_t reserved[10];
#endif
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

/* "Not supported" in amdsmi_power_info_t: 0xFFFF before 26, UINT32_MAX
 * from 26. */
typedef struct {
#if FAKE_AMDSMI_MAJOR >= 25
  uint64_t socket_power; /* W */
#endif
  uint32_t current_socket_power; /* W */
  uint32_t average_socket_power; /* W */
#if FAKE_AMDSMI_MAJOR >= 26
  uint64_t gfx_voltage;
  uint64_t soc_voltage;
  uint64_t mem_voltage;
  uint32_t power_limit;
  uint64_t reserved[18];
#else
  uint32_t gfx_voltage;
  uint32_t soc_voltage;
  uint32_t mem_voltage;
  uint32_t power_limit;
#if FAKE_AMDSMI_MAJOR == 25
  uint32_t reserved[2];
#else
  uint32_t reserved[11];
#endif
#endif
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

#if FAKE_AMDSMI_MAJOR >= 25
#define AMDSMI_PROC_STR 256
#else
#define AMDSMI_PROC_STR 32
#endif
typedef struct {
  char name[AMDSMI_PROC_STR];
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
  char container_name[AMDSMI_PROC_STR];
#if FAKE_AMDSMI_MAJOR >= 26
  uint32_t cu_occupancy;
  uint32_t reserved[11];
#elif FAKE_AMDSMI_MAJOR == 25
  uint32_t reserved[12];
#else
  uint32_t reserved[4];
#endif
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

/* The same in every released version (an amd-staging 24.7 header before
 * ROCm 6.3 had profile_index before memory_caps and reserved[6]). */
typedef struct {
  uint32_t profile_type; /* amdsmi_accelerator_partition_type_t */
  uint32_t num_partitions;
  uint32_t memory_caps; /* amdsmi_nps_caps_t: bit 0 NPS1, 1 NPS2, 2 NPS4, 3 NPS8 */
  uint32_t profile_index;
  uint32_t num_resources;
  uint32_t resources[8][32];
  uint64_t reserved[13];
} amdsmi_accelerator_partition_profile_t;

#endif

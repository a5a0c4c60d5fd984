/* The subset of HLML (libhlml.so, hlml.h) that the habana vendor reads,
 * transcribed for the fake in hlml.c, as the HLML of SynapseAI release
 * 1.FAKE_HLML_MINOR lays it out. The layouts are those of the
 * habana-pyhlml wheels on PyPI (1.10.0 to 1.24.2: their ctypes types are
 * generated from each release's header; HabanaAI/gohlml's hlml.h is the
 * 1.10 one), and changed three times:
 *
 *   1.10         hlml_pci_info_t 52 bytes: a 5-character PCI domain
 *                (bus_id 15 bytes), the link's current speed and width
 *   1.11 - 1.17  76: the link's maximum speed and width, pci_rev
 *   1.18         80: pci_subsys_id
 *   1.19 - 1.24  84: a 9-character domain (bus_id 19 bytes, every field
 *                after it 4 bytes further); hlml_utilization_t gains
 *                `memory` (4 -> 8 bytes)
 *
 * c-tests/hlml_layout.c checks each release's figures, vendors/habana/
 * layout.rs reads them. Units are the wheels' docstrings': power in mW,
 * energy in mJ, memory in bytes, clocks in MHz, temperature in Celsius. */
#ifndef FAKE_HLML_H
#define FAKE_HLML_H

#ifndef FAKE_HLML_MINOR
#define FAKE_HLML_MINOR 24
#endif

#if FAKE_HLML_MINOR >= 19
#define PCI_DOMAIN_LEN 9
#else
#define PCI_DOMAIN_LEN 5
#endif
#define PCI_ADDR_LEN ((PCI_DOMAIN_LEN) + 10)
#define PCI_LINK_INFO_LEN 10
#define HL_FIELD_MAX_SIZE 32
/* The string buffers pyhlml hands to the version, UUID and serial calls
 * (COMMON_DEFINE.VERSION_MAX_LEN). */
#define HLML_VERSION_MAX_LEN 128

#define HLML_AFFINITY_SCOPE_NODE 0
#define HLML_AFFINITY_SCOPE_SOCKET 1
typedef unsigned int hlml_affinity_scope_t;

/* The same values in every wheel from 1.10 and in gohlml's header (the
 * pyhlml repository's first hlml_types.py numbered AIP_IS_LOST..UNKNOWN
 * 11..14; no release did). */
typedef enum hlml_return {
  HLML_SUCCESS = 0,
  HLML_ERROR_UNINITIALIZED = 1,
  HLML_ERROR_INVALID_ARGUMENT = 2,
  HLML_ERROR_NOT_SUPPORTED = 3,
  HLML_ERROR_ALREADY_INITIALIZED = 5,
  HLML_ERROR_NOT_FOUND = 6,
  HLML_ERROR_INSUFFICIENT_SIZE = 7,
  HLML_ERROR_DRIVER_NOT_LOADED = 9,
  HLML_ERROR_TIMEOUT = 10,
  HLML_ERROR_AIP_IS_LOST = 15,
  HLML_ERROR_MEMORY = 20,
  HLML_ERROR_NO_DATA = 21,
  HLML_ERROR_UNKNOWN = 49,
} hlml_return_t;

typedef struct hlml_pci_cap {
  char link_speed[PCI_LINK_INFO_LEN];
  char link_width[PCI_LINK_INFO_LEN];
#if FAKE_HLML_MINOR >= 11
  char link_max_speed[PCI_LINK_INFO_LEN];
  char link_max_width[PCI_LINK_INFO_LEN];
#endif
} hlml_pci_cap_t;

/* bus_id is domain:bus:device.function; pci_device_id is the 16-bit
 * device id over the 16-bit vendor id. */
typedef struct hlml_pci_info {
  unsigned int bus;
  char bus_id[PCI_ADDR_LEN];
  unsigned int device;
  unsigned int domain;
  unsigned int pci_device_id;
  hlml_pci_cap_t caps;
#if FAKE_HLML_MINOR >= 11
  unsigned int pci_rev;
#endif
#if FAKE_HLML_MINOR >= 18
  unsigned int pci_subsys_id;
#endif
} hlml_pci_info_t;

typedef enum hlml_clock_type {
  HLML_CLOCK_SOC = 0,
  HLML_CLOCK_IC = 1,
  HLML_CLOCK_MME = 2,
  HLML_CLOCK_TPC = 3,
  HLML_CLOCK_COUNT
} hlml_clock_type_t;

typedef struct hlml_utilization {
  unsigned int aip; /* percent over the last second */
#if FAKE_HLML_MINOR >= 19
  unsigned int memory;
#endif
} hlml_utilization_t;

typedef struct hlml_memory {
  unsigned long long free;
  unsigned long long total; /* installed, bytes */
  unsigned long long used;
} hlml_memory_t;

typedef enum hlml_temperature_sensors {
  HLML_TEMPERATURE_ON_AIP = 0,
  HLML_TEMPERATURE_ON_BOARD = 1,
  HLML_TEMPERATURE_OTHER = 2,
  HLML_TEMPERATURE_HBM = 3, /* 3-5: the 1.24 wheel */
  HLML_TEMPERATURE_VRM = 4,
  HLML_TEMPERATURE_CTEMP = 5,
} hlml_temperature_sensors_t;

typedef enum hlml_temperature_thresholds {
  HLML_TEMPERATURE_THRESHOLD_SHUTDOWN = 0,
  HLML_TEMPERATURE_THRESHOLD_SLOWDOWN = 1,
  HLML_TEMPERATURE_THRESHOLD_MEM_MAX = 2,
  HLML_TEMPERATURE_THRESHOLD_GPU_MAX = 3,
  HLML_TEMPERATURE_THRESHOLD_COUNT
} hlml_temperature_thresholds_t;

typedef enum hlml_enable_state { HLML_FEATURE_DISABLED = 0, HLML_FEATURE_ENABLED = 1 } hlml_enable_state_t;

typedef enum hlml_memory_error_type {
  HLML_MEMORY_ERROR_TYPE_CORRECTED = 0, /* "not supported" in the header */
  HLML_MEMORY_ERROR_TYPE_UNCORRECTED = 1,
  HLML_MEMORY_ERROR_TYPE_COUNT
} hlml_memory_error_type_t;

typedef enum hlml_ecc_counter_type {
  HLML_VOLATILE_ECC = 0,
  HLML_AGGREGATE_ECC = 1,
  HLML_ECC_COUNTER_TYPE_COUNT
} hlml_ecc_counter_type_t;

typedef enum hlml_pcie_util_counter {
  HLML_PCIE_UTIL_TX_BYTES = 0,
  HLML_PCIE_UTIL_RX_BYTES = 1,
  HLML_PCIE_UTIL_COUNT,
} hlml_pcie_util_counter_t;

typedef void *hlml_device_t;

hlml_return_t hlml_init(void);
hlml_return_t hlml_init_with_flags(unsigned int flags);
hlml_return_t hlml_shutdown(void);
hlml_return_t hlml_get_hlml_version(char *version, unsigned int length);
hlml_return_t hlml_get_driver_version(char *driver_version, unsigned int length);
hlml_return_t hlml_device_get_count(unsigned int *device_count);
hlml_return_t hlml_device_get_handle_by_index(unsigned int index, hlml_device_t *device);
hlml_return_t hlml_device_get_handle_by_pci_bus_id(const char *pci_addr, hlml_device_t *device);
hlml_return_t hlml_device_get_handle_by_UUID(const char *uuid, hlml_device_t *device);
hlml_return_t hlml_device_get_name(hlml_device_t device, char *name, unsigned int length);
hlml_return_t hlml_device_get_uuid(hlml_device_t device, char *uuid, unsigned int length);
hlml_return_t hlml_device_get_serial(hlml_device_t device, char *serial, unsigned int length);
hlml_return_t hlml_get_model_number(hlml_device_t device, char *model_number, unsigned int length);
hlml_return_t hlml_get_firmware_fit_version(hlml_device_t device, char *firmware_fit, unsigned int length);
hlml_return_t hlml_device_get_pci_info(hlml_device_t device, hlml_pci_info_t *pci);
hlml_return_t hlml_device_get_minor_number(hlml_device_t device, unsigned int *minor_number);
hlml_return_t hlml_device_get_module_id(hlml_device_t device, unsigned int *module_id);
hlml_return_t hlml_device_get_memory_affinity(hlml_device_t device, unsigned int node_set_size,
                                              unsigned long *node_set, hlml_affinity_scope_t scope);
hlml_return_t hlml_device_get_curr_pcie_link_generation(hlml_device_t device, unsigned int *curr_link_gen);
hlml_return_t hlml_device_get_curr_pcie_link_width(hlml_device_t device, unsigned int *curr_link_width);
hlml_return_t hlml_device_get_memory_info(hlml_device_t device, hlml_memory_t *memory);
hlml_return_t hlml_device_get_utilization_rates(hlml_device_t device, hlml_utilization_t *utilization);
hlml_return_t hlml_device_get_power_usage(hlml_device_t device, unsigned int *power);
hlml_return_t hlml_device_get_power_management_default_limit(hlml_device_t device, unsigned int *default_limit);
hlml_return_t hlml_device_get_total_energy_consumption(hlml_device_t device, unsigned long long *energy);
hlml_return_t hlml_device_get_temperature(hlml_device_t device, hlml_temperature_sensors_t sensor_type,
                                          unsigned int *temp);
hlml_return_t hlml_device_get_clock_info(hlml_device_t device, hlml_clock_type_t type, unsigned int *clock);
hlml_return_t hlml_device_get_max_clock_info(hlml_device_t device, hlml_clock_type_t type, unsigned int *clock);
hlml_return_t hlml_device_get_pcie_throughput(hlml_device_t device, hlml_pcie_util_counter_t counter,
                                              unsigned int *value);
hlml_return_t hlml_device_get_ecc_mode(hlml_device_t device, hlml_enable_state_t *current,
                                       hlml_enable_state_t *pending);
hlml_return_t hlml_device_get_total_ecc_errors(hlml_device_t device, hlml_memory_error_type_t error_type,
                                               hlml_ecc_counter_type_t counter_type,
                                               unsigned long long *ecc_counts);

#endif

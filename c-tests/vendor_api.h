/* The first ABI's functions the vendor suites (test_amd.c, test_ascend.c)
 * reach through dlsym, as an X-macro: VENDOR_API(X) applies X to each name,
 * so a suite declares its pointers with one macro and loads them with
 * another from the same list. */
#ifndef VENDOR_API_H
#define VENDOR_API_H

#define VENDOR_API(X)                                                                              \
  X(getDeviceCount)                                                                                \
  X(getDeviceInfo)                                                                                 \
  X(freeExtendedDeviceInfo)                                                                        \
  X(getPartitionTemplates)                                                                         \
  X(freePartitionTemplates)                                                                        \
  X(assignPartition)                                                                               \
  X(removePartition)                                                                               \
  X(getDeviceMetrics)                                                                              \
  X(freeDeviceMetrics)                                                                             \
  X(getDeviceTopology)                                                                             \
  X(freeExtendedDeviceTopology)                                                                    \
  X(getProcessMemoryUtilization)                                                                   \
  X(freeMemoryUtilizations)                                                                        \
  X(getProcessComputeUtilization)                                                                  \
  X(freeComputeUtilizations)                                                                       \
  X(getExtendedDeviceMetrics)                                                                      \
  X(freeExtendedDeviceMetrics)                                                                     \
  X(snapshot)                                                                                      \
  X(acceleratorGetLastError)                                                                       \
  X(acceleratorVendorName)

/* A suite's pointer to each function: p_<name>. */
#define VENDOR_API_SYM(name) static __typeof__(&name) p_##name;
/* Load p_<name> from the dlopen handle `lib`. */
#define VENDOR_API_LOAD(name) p_##name = (__typeof__(p_##name))dlsym(lib, #name);

#endif

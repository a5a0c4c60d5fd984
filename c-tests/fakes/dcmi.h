/* The subset of DCMI (libdcmi.so, dcmi_interface_api.h) that the Ascend
 * vendor uses, transcribed from the public API reference for the fake in
 * dcmi.c. Layouts must match vendors/ascend/dcmi.rs. */
#ifndef FAKE_DCMI_H
#define FAKE_DCMI_H

#define MAX_CHIP_NAME_LEN 32
#define DCMI_VDEV_RES_NAME_LEN 16
#define DCMI_VDEV_FOR_RESERVE 32
#define DCMI_SOC_SPLIT_MAX 32

#define DCMI_OK 0
#define DCMI_ERR_CODE_INVALID_PARAMETER (-8001)
#define DCMI_ERR_CODE_OPER_NOT_PERMITTED (-8002)
#define DCMI_ERR_CODE_INNER_ERR (-8005)
#define DCMI_ERR_CODE_INVALID_DEVICE_ID (-8007)
#define DCMI_ERR_CODE_DEVICE_NOT_EXIST (-8008)
#define DCMI_ERR_CODE_NOT_REDAY (-8012)
#define DCMI_ERR_CODE_RESOURCE_OCCUPIED (-8020)
#define DCMI_ERR_CODE_NOT_SUPPORT (-8255)

#define DCMI_MAIN_CMD_VDEV_MNG 52
#define DCMI_VMNG_SUB_CMD_GET_VDEV_RESOURCE 0
#define DCMI_VMNG_SUB_CMD_GET_TOTAL_RESOURCE 1

struct dcmi_chip_info {
  unsigned char chip_type[MAX_CHIP_NAME_LEN];
  unsigned char chip_name[MAX_CHIP_NAME_LEN];
  unsigned char chip_ver[MAX_CHIP_NAME_LEN];
  unsigned int aicore_cnt;
};

struct dcmi_chip_info_v2 {
  unsigned char chip_type[MAX_CHIP_NAME_LEN];
  unsigned char chip_name[MAX_CHIP_NAME_LEN];
  unsigned char chip_ver[MAX_CHIP_NAME_LEN];
  unsigned int aicore_cnt;
  unsigned char npu_name[MAX_CHIP_NAME_LEN];
};

struct dcmi_pcie_info_all {
  unsigned int venderid;
  unsigned int subvenderid;
  unsigned int deviceid;
  unsigned int subdeviceid;
  int domain;
  unsigned int bdf_busid;
  unsigned int bdf_deviceid;
  unsigned int bdf_funcid;
  unsigned char reserve[32];
};

struct dcmi_die_id {
  unsigned int soc_die[5];
};

struct dcmi_hbm_info {
  unsigned long long memory_size; /* MB */
  unsigned int freq;
  unsigned long long memory_usage; /* MB */
  int temp;
  unsigned int bandwith_util_rate;
};

struct dcmi_get_memory_info_stru {
  unsigned long long memory_size;      /* MB */
  unsigned long long memory_available; /* MB */
  unsigned int freq;
  unsigned long hugepagesize;
  unsigned long hugepages_total;
  unsigned long hugepages_free;
  unsigned int utiliza;
  unsigned char reserve[60];
};

struct dcmi_proc_mem_info {
  int proc_id;
  unsigned long proc_mem_usage;
};

struct dcmi_create_vdev_res_stru {
  unsigned int vdev_id;
  unsigned int vfg_id;
  char template_name[32];
  unsigned char reserved[64];
};

struct dcmi_create_vdev_out {
  unsigned int vdev_id;
  unsigned int pcie_bus;
  unsigned int pcie_device;
  unsigned int pcie_func;
  unsigned int vfg_id;
  unsigned char reserved[DCMI_VDEV_FOR_RESERVE];
};

struct dcmi_base_resource {
  unsigned long long token;
  unsigned long long token_max;
  unsigned long long task_timeout;
  unsigned int vfg_id;
  unsigned char vip_mode;
  unsigned char reserved[DCMI_VDEV_FOR_RESERVE - 1];
};

struct dcmi_computing_resource {
  float aic;
  float aiv;
  unsigned short dsa, rtsq, acsq, cdqm, c_core, ffts, sdma, pcie_dma;
  unsigned long long memory_size; /* MB */
  unsigned int event_id, notify_id, stream_id, model_id;
  unsigned short topic_schedule_aicpu, host_ctrl_cpu, host_aicpu, device_aicpu,
      topic_ctrl_cpu_slot;
  unsigned int vdev_aicore_utilization;
  unsigned long long vdev_memory_total;
  unsigned long long vdev_memory_free;
  unsigned char reserved[12];
};

struct dcmi_media_resource {
  float jpegd, jpege, vpc, vdec, pngd, venc;
  unsigned char reserved[DCMI_VDEV_FOR_RESERVE];
};

struct dcmi_soc_total_resource {
  unsigned int vdev_num;
  unsigned int vdev_id[DCMI_SOC_SPLIT_MAX];
  unsigned int vfg_num;
  unsigned int vfg_bitmap;
  struct dcmi_base_resource base;
  struct dcmi_computing_resource computing;
  struct dcmi_media_resource media;
};

struct dcmi_vdev_query_info {
  char name[DCMI_VDEV_RES_NAME_LEN];
  unsigned int status;
  unsigned int is_container_used;
  unsigned int vfid;
  unsigned int vfg_id;
  unsigned long long container_id;
  struct dcmi_base_resource base;
  struct dcmi_computing_resource computing;
  struct dcmi_media_resource media;
};

struct dcmi_vdev_query_stru {
  unsigned int vdev_id;
  struct dcmi_vdev_query_info query_info;
};

#endif

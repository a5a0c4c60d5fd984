/* A fake libdcmi.so for the Ascend vendor's tests: two Ascend 910 chips by
 * default, or two 310P chips with FAKE_DCMI_CHIP=310P.
 *
 * Scripting (read at each call, so a test can change it between calls):
 *   FAKE_DCMI_FAIL_INIT=1          dcmi_init fails (-8005)
 *   FAKE_DCMI_FAIL=fn:code[,...]   the named function returns code
 *   FAKE_DCMI_REFUSE_VDEV=code     dcmi_create_vdevice returns code
 *   FAKE_DCMI_STATE=dir            vNPUs are kept in dir/vnpus, so another
 *                                  process (a "restart") sees them
 * Built with -DOMIT_CREATE_VDEVICE (an optional symbol missing),
 * -DOMIT_CHIP_INFO (a required one missing) or -DOMIT_CARD_LIST (an old
 * driver: only the V1 name dcmi_get_card_num_list). fake_dcmi_create_calls()
 * counts dcmi_create_vdevice calls that reached the "driver". */
#include "dcmi.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NDEV 2
#define MAX_VNPU 32

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int initialized;
static int create_calls;

/* Cards 1 and 4, one chip each; logical IDs reversed (card 4 is logic 0). */
static const int cards[NDEV] = {1, 4};

int fake_dcmi_create_calls(void) { return create_calls; }

static int is_310p(void) {
  const char *c = getenv("FAKE_DCMI_CHIP");
  return c && strcmp(c, "310P") == 0;
}

static int injected(const char *fn) {
  const char *spec = getenv("FAKE_DCMI_FAIL");
  size_t n = strlen(fn);
  while (spec && *spec) {
    if (strncmp(spec, fn, n) == 0 && spec[n] == ':')
      return atoi(spec + n + 1);
    spec = strchr(spec, ',');
    if (spec)
      spec++;
  }
  return 0;
}

#define ENTER(fn)                                                              \
  do {                                                                         \
    int rc_ = injected(fn);                                                    \
    if (rc_)                                                                   \
      return rc_;                                                              \
    if (!initialized)                                                          \
      return DCMI_ERR_CODE_NOT_REDAY;                                          \
  } while (0)

/* The chip index of (card, device), or -1. */
static int chip(int card, int device) {
  for (int i = 0; i < NDEV; i++)
    if (cards[i] == card && device == 0)
      return i;
  return -1;
}

#define CHIP(card, device)                                                     \
  int idx = chip(card, device);                                                \
  if (idx < 0)                                                                 \
  return DCMI_ERR_CODE_INVALID_DEVICE_ID

int dcmi_init(void) {
  const char *f = getenv("FAKE_DCMI_FAIL_INIT");
  if (f && *f && strcmp(f, "0") != 0)
    return DCMI_ERR_CODE_INNER_ERR;
  initialized = 1;
  return DCMI_OK;
}

static int card_list(const char *fn, int *card_num, int *card_list, int list_len) {
  ENTER(fn);
  if (!card_num || !card_list || list_len < NDEV)
    return DCMI_ERR_CODE_INVALID_PARAMETER;
  *card_num = NDEV;
  for (int i = 0; i < NDEV; i++)
    card_list[i] = cards[i];
  return DCMI_OK;
}

/* dcmi_interface_api.h declares dcmi_get_card_list under DCMI_VERSION_2 and
 * keeps dcmi_get_card_num_list, same signature, as the deprecated V1 name;
 * a driver too old for V2 (-DOMIT_CARD_LIST) has only the V1 name. */
#ifndef OMIT_CARD_LIST
int dcmi_get_card_list(int *card_num, int *card_list_out, int list_len) {
  return card_list("dcmi_get_card_list", card_num, card_list_out, list_len);
}
#endif

int dcmi_get_card_num_list(int *card_num, int *card_list_out, int list_len) {
  return card_list("dcmi_get_card_num_list", card_num, card_list_out, list_len);
}

int dcmi_get_device_num_in_card(int card_id, int *device_num) {
  ENTER("dcmi_get_device_num_in_card");
  if (chip(card_id, 0) < 0)
    return DCMI_ERR_CODE_INVALID_DEVICE_ID;
  *device_num = 1;
  return DCMI_OK;
}

int dcmi_get_device_logic_id(int *device_logic_id, int card_id, int device_id) {
  ENTER("dcmi_get_device_logic_id");
  CHIP(card_id, device_id);
  *device_logic_id = NDEV - 1 - idx;
  return DCMI_OK;
}

static unsigned aicores(void) { return is_310p() ? 8 : 32; }

static void fill_chip(unsigned char *type, unsigned char *name,
                      unsigned char *ver, unsigned int *cores) {
  strcpy((char *)type, "Ascend");
  strcpy((char *)name, is_310p() ? "310P3" : "910");
  strcpy((char *)ver, "V1");
  *cores = aicores();
}

#ifndef OMIT_CHIP_INFO
int dcmi_get_device_chip_info(int card_id, int device_id,
                              struct dcmi_chip_info *info) {
  ENTER("dcmi_get_device_chip_info");
  CHIP(card_id, device_id);
  (void)idx;
  memset(info, 0, sizeof *info);
  fill_chip(info->chip_type, info->chip_name, info->chip_ver,
            &info->aicore_cnt);
  return DCMI_OK;
}
#endif

int dcmi_get_device_chip_info_v2(int card_id, int device_id,
                                 struct dcmi_chip_info_v2 *info) {
  ENTER("dcmi_get_device_chip_info_v2");
  CHIP(card_id, device_id);
  (void)idx;
  memset(info, 0, sizeof *info);
  fill_chip(info->chip_type, info->chip_name, info->chip_ver,
            &info->aicore_cnt);
  strcpy((char *)info->npu_name, is_310p() ? "310P3" : "910ProB");
  return DCMI_OK;
}

int dcmi_get_device_pcie_info_v2(int card_id, int device_id,
                                 struct dcmi_pcie_info_all *p) {
  ENTER("dcmi_get_device_pcie_info_v2");
  CHIP(card_id, device_id);
  memset(p, 0, sizeof *p);
  p->venderid = 0x19e5;
  p->deviceid = is_310p() ? 0xd500 : 0xd801;
  p->domain = 0;
  p->bdf_busid = idx ? 0x86 : 0x3b;
  return DCMI_OK;
}

int dcmi_get_device_die_v2(int card_id, int device_id, int type,
                           struct dcmi_die_id *die) {
  ENTER("dcmi_get_device_die_v2");
  CHIP(card_id, device_id);
  if (type != 1)
    return DCMI_ERR_CODE_INVALID_PARAMETER;
  unsigned base = is_310p() ? 0x310 : 0x910;
  die->soc_die[0] = 0xa5c3d000u | base;
  die->soc_die[1] = 0x00c0ffeeu;
  die->soc_die[2] = 0x12345678u + (unsigned)cards[idx];
  die->soc_die[3] = 0x0badf00du;
  die->soc_die[4] = 0x00000001u + (unsigned)idx;
  return DCMI_OK;
}

/* ------------------------------------------------------------ vNPU state */

struct vnpu {
  int card;
  unsigned id;
  char name[32];
};
static struct vnpu vnpus[MAX_VNPU];
static int nvnpu;

static const struct tpl {
  const char *name;
  unsigned cores, cpus;
  int p310;
} tpls[] = {
    {"vir02", 2, 1, 0},          {"vir04", 4, 1, 0},
    {"vir08", 8, 3, 0},          {"vir16", 16, 7, 0},
    {"vir01", 1, 1, 1},          {"vir02", 2, 2, 1},
    {"vir02_1c", 2, 1, 1},       {"vir04", 4, 4, 1},
    {"vir04_3c", 4, 3, 1},       {"vir04_3c_ndvpp", 4, 3, 1},
    {"vir04_4c_dvpp", 4, 4, 1},
};

static const struct tpl *find_tpl(const char *name) {
  for (size_t i = 0; i < sizeof tpls / sizeof tpls[0]; i++)
    if (tpls[i].p310 == is_310p() && strcmp(tpls[i].name, name) == 0)
      return &tpls[i];
  return NULL;
}

static void state_path(char *buf, size_t n) {
  const char *d = getenv("FAKE_DCMI_STATE");
  if (d && *d)
    snprintf(buf, n, "%s/vnpus", d);
  else
    buf[0] = 0;
}

static void load(void) {
  char path[4096];
  state_path(path, sizeof path);
  if (!path[0])
    return;
  nvnpu = 0;
  FILE *f = fopen(path, "r");
  if (!f)
    return;
  struct vnpu v;
  while (nvnpu < MAX_VNPU &&
         fscanf(f, "%d %u %31s", &v.card, &v.id, v.name) == 3)
    vnpus[nvnpu++] = v;
  fclose(f);
}

static void save(void) {
  char path[4096], tmp[4200];
  state_path(path, sizeof path);
  if (!path[0])
    return;
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *f = fopen(tmp, "w");
  if (!f)
    return;
  for (int i = 0; i < nvnpu; i++)
    fprintf(f, "%d %u %s\n", vnpus[i].card, vnpus[i].id, vnpus[i].name);
  fclose(f);
  rename(tmp, path);
}

static unsigned mem_mb(void) { return is_310p() ? 24576 : 32768; }

#ifndef OMIT_CREATE_VDEVICE
int dcmi_create_vdevice(int card_id, int device_id,
                        struct dcmi_create_vdev_res_stru *vdev,
                        struct dcmi_create_vdev_out *out) {
  ENTER("dcmi_create_vdevice");
  CHIP(card_id, device_id);
  (void)idx;
  if (!vdev || !out)
    return DCMI_ERR_CODE_INVALID_PARAMETER;
  pthread_mutex_lock(&mu);
  create_calls++;
  const char *refuse = getenv("FAKE_DCMI_REFUSE_VDEV");
  if (refuse && *refuse) {
    pthread_mutex_unlock(&mu);
    return atoi(refuse) ? atoi(refuse) : DCMI_ERR_CODE_OPER_NOT_PERMITTED;
  }
  char name[33];
  memcpy(name, vdev->template_name, 32);
  name[32] = 0;
  const struct tpl *t = find_tpl(name);
  if (!t) {
    pthread_mutex_unlock(&mu);
    return DCMI_ERR_CODE_INVALID_PARAMETER;
  }
  load();
  unsigned used = 0, next = 100;
  for (int i = 0; i < nvnpu; i++) {
    if (vnpus[i].card == card_id) {
      const struct tpl *u = find_tpl(vnpus[i].name);
      used += u ? u->cores : 0;
    }
    if (vnpus[i].id >= next)
      next = vnpus[i].id + 1;
  }
  if (used + t->cores > aicores() || nvnpu >= MAX_VNPU) {
    pthread_mutex_unlock(&mu);
    return DCMI_ERR_CODE_RESOURCE_OCCUPIED;
  }
  struct vnpu v = {card_id, next, {0}};
  strcpy(v.name, t->name);
  vnpus[nvnpu++] = v;
  save();
  memset(out, 0, sizeof *out);
  out->vdev_id = next;
  out->vfg_id = 0;
  pthread_mutex_unlock(&mu);
  return DCMI_OK;
}
#endif

int dcmi_set_destroy_vdevice(int card_id, int device_id, unsigned int vdevid) {
  ENTER("dcmi_set_destroy_vdevice");
  CHIP(card_id, device_id);
  (void)idx;
  pthread_mutex_lock(&mu);
  load();
  for (int i = 0; i < nvnpu; i++) {
    if (vnpus[i].card == card_id && vnpus[i].id == vdevid) {
      vnpus[i] = vnpus[--nvnpu];
      save();
      pthread_mutex_unlock(&mu);
      return DCMI_OK;
    }
  }
  pthread_mutex_unlock(&mu);
  return DCMI_ERR_CODE_INVALID_PARAMETER;
}

int dcmi_get_device_info(int card_id, int device_id, int main_cmd,
                         unsigned int sub_cmd, void *buf, unsigned int *size) {
  ENTER("dcmi_get_device_info");
  CHIP(card_id, device_id);
  (void)idx;
  if (main_cmd != DCMI_MAIN_CMD_VDEV_MNG || !buf || !size)
    return DCMI_ERR_CODE_NOT_SUPPORT;
  pthread_mutex_lock(&mu);
  load();
  int rc = DCMI_OK;
  if (sub_cmd == DCMI_VMNG_SUB_CMD_GET_TOTAL_RESOURCE) {
    struct dcmi_soc_total_resource *t = buf;
    if (*size < sizeof *t) {
      rc = DCMI_ERR_CODE_INVALID_PARAMETER;
    } else {
      memset(t, 0, sizeof *t);
      for (int i = 0; i < nvnpu; i++)
        if (vnpus[i].card == card_id)
          t->vdev_id[t->vdev_num++] = vnpus[i].id;
      t->computing.aic = (float)aicores();
      t->computing.memory_size = mem_mb();
    }
  } else if (sub_cmd == DCMI_VMNG_SUB_CMD_GET_VDEV_RESOURCE) {
    struct dcmi_vdev_query_stru *q = buf;
    rc = DCMI_ERR_CODE_INVALID_PARAMETER;
    for (int i = 0; *size >= sizeof *q && i < nvnpu; i++) {
      if (vnpus[i].card == card_id && vnpus[i].id == q->vdev_id) {
        const struct tpl *t = find_tpl(vnpus[i].name);
        memset(&q->query_info, 0, sizeof q->query_info);
        snprintf(q->query_info.name, sizeof q->query_info.name, "%s",
                 vnpus[i].name);
        q->query_info.computing.aic = t ? (float)t->cores : 0;
        q->query_info.computing.device_aicpu =
            (unsigned short)(t ? t->cpus : 0);
        q->query_info.computing.memory_size =
            t ? (unsigned long long)mem_mb() / aicores() * t->cores : 0;
        rc = DCMI_OK;
      }
    }
  } else {
    rc = DCMI_ERR_CODE_NOT_SUPPORT;
  }
  pthread_mutex_unlock(&mu);
  return rc;
}

/* ------------------------------------------------------------ metrics */

int dcmi_get_device_hbm_info(int card_id, int device_id,
                             struct dcmi_hbm_info *h) {
  ENTER("dcmi_get_device_hbm_info");
  CHIP(card_id, device_id);
  if (is_310p())
    return DCMI_ERR_CODE_NOT_SUPPORT;
  memset(h, 0, sizeof *h);
  h->memory_size = mem_mb();
  h->memory_usage = 1024u * (unsigned)(idx + 1);
  h->freq = 1200;
  h->temp = 40;
  return DCMI_OK;
}

int dcmi_get_device_memory_info_v3(int card_id, int device_id,
                                   struct dcmi_get_memory_info_stru *m) {
  ENTER("dcmi_get_device_memory_info_v3");
  CHIP(card_id, device_id);
  memset(m, 0, sizeof *m);
  m->memory_size = mem_mb();
  m->memory_available = mem_mb() - 2048u * (unsigned)(idx + 1);
  return DCMI_OK;
}

int dcmi_get_device_power_info(int card_id, int device_id, int *power) {
  ENTER("dcmi_get_device_power_info");
  CHIP(card_id, device_id);
  *power = (is_310p() ? 150 : 725) + idx; /* 0.1 W */
  return DCMI_OK;
}

int dcmi_get_device_temperature(int card_id, int device_id, int *t) {
  ENTER("dcmi_get_device_temperature");
  CHIP(card_id, device_id);
  *t = 45 + idx;
  return DCMI_OK;
}

int dcmi_get_device_utilization_rate(int card_id, int device_id, int type,
                                     unsigned int *rate) {
  ENTER("dcmi_get_device_utilization_rate");
  CHIP(card_id, device_id);
  if (type != 2)
    return DCMI_ERR_CODE_NOT_SUPPORT;
  *rate = 37u + (unsigned)idx;
  return DCMI_OK;
}

int dcmi_get_device_frequency(int card_id, int device_id, int type,
                              unsigned int *freq) {
  ENTER("dcmi_get_device_frequency");
  CHIP(card_id, device_id);
  (void)idx;
  if (type == 9)
    *freq = 1000;
  else if (type == 6 && !is_310p())
    *freq = 1200;
  else
    return DCMI_ERR_CODE_NOT_SUPPORT;
  return DCMI_OK;
}

int dcmi_get_driver_version(char *ver, unsigned int len) {
  ENTER("dcmi_get_driver_version");
  if (!ver || len < 16)
    return DCMI_ERR_CODE_INVALID_PARAMETER;
  snprintf(ver, len, "%s", "23.0.3-fake");
  return DCMI_OK;
}

int dcmi_get_topo_info_by_device_id(int c1, int d1, int c2, int d2,
                                    int *topo) {
  ENTER("dcmi_get_topo_info_by_device_id");
  if (chip(c1, d1) < 0 || chip(c2, d2) < 0)
    return DCMI_ERR_CODE_INVALID_DEVICE_ID;
  if (is_310p())
    return DCMI_ERR_CODE_NOT_SUPPORT;
  *topo = (c1 == c2) ? 0 : 3; /* HCCS */
  return DCMI_OK;
}

int dcmi_get_device_resource_info(int card_id, int device_id,
                                  struct dcmi_proc_mem_info *procs,
                                  int *num) {
  ENTER("dcmi_get_device_resource_info");
  CHIP(card_id, device_id);
  if (!procs || !num)
    return DCMI_ERR_CODE_INVALID_PARAMETER;
  /* One process on the first chip (card 1): 512 MiB. */
  if (idx == 0) {
    procs[0].proc_id = 4242;
    procs[0].proc_mem_usage = 512ul << 20;
    *num = 1;
  } else {
    *num = 0;
  }
  return DCMI_OK;
}

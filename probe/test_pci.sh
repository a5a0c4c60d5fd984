#!/usr/bin/env bash
# PCI discovery on fake sysfs trees modelled on real machines
# (c-tests/pci/mktrees.py): what each vendor build chooses, the error it
# gives without its driver, what `probe --pci` shows, and `probe --json`
# validated against docs/device.schema.json for every vendor build.
# Usage: probe/test_pci.sh PROBE TREES BUILD
set -euo pipefail
probe=$1 trees=$2 B=$3
state=$(mktemp -d /tmp/accelerator-pci-test.XXXXXX)
trap 'rm -rf "$state"' EXIT
fail() { echo "test_pci: FAIL: $*" >&2; exit 1; }

# Every vendor build and what points it at its fake driver: one line per vendor.
builds=(
  "stub   $B/libaccelerator.so"
  "nvidia $B/libaccelerator_nvidia.so ACCELERATOR_NVML_PATH=$B/fakes/nvidia/libnvidia-ml.so.1 ACCELERATOR_CUDA_PATH=$B/fakes/nvidia/libcuda.so.1"
  "ascend $B/libaccelerator_ascend.so ACCELERATOR_DCMI_PATH=$B/fakes/ascend/libdcmi.so"
  "amd    $B/libaccelerator_amd.so ACCELERATOR_AMDSMI_PATH=$B/fakes/amd/libamd_smi.so ACCELERATOR_AMD_SYSFS=$B/fakes/amd/sys"
  "habana $B/libaccelerator_habana.so ACCELERATOR_HLML_PATH=$B/fakes/habana/libhlml.so ACCELERATOR_HABANA_SYSFS=$B/fakes/habana/sys"
)
# The universal build (every real vendor) with every fake driver present:
# only the PCI bus tells it which node it is on.
all_fakes=$(for b in "${builds[@]:1}"; do set -- $b; shift 2; echo "$@"; done | tr '\n' ' ')
builds+=("universal $B/libaccelerator_universal.so $all_fakes")
# The library (field 2) and environment (the rest) of vendor $want.
lib_of() { local b; for b in "${builds[@]}"; do set -- $b; if [ "$1" = "$want" ]; then echo "$2"; return; fi; done; }
env_of() { local b; for b in "${builds[@]}"; do set -- $b; if [ "$1" = "$want" ]; then shift 2; echo "$@"; return; fi; done; }

# run TREE VENDOR [fake|nodriver] PROBE-ARGS...: stdout to $out, stderr to $err.
run() {
  local tree=$1 want=$2 mode=$3; shift 3
  local lib env
  lib=$(lib_of) env=$(env_of)
  [ "$mode" = nodriver ] && env="ACCELERATOR_NVML_PATH=/nonexistent/libnvidia-ml.so.1 ACCELERATOR_DCMI_PATH=/nonexistent/libdcmi.so ACCELERATOR_AMDSMI_PATH=/nonexistent/libamd_smi.so ACCELERATOR_HLML_PATH=/nonexistent/libhlml.so"
  rm -rf "$state/s" && mkdir "$state/s"
  env ACCELERATOR_SYSFS_ROOT="$trees/$tree" ACCELERATOR_STATE_DIR="$state/s" FAKE_DCMI_STATE="$state/s" \
      ACCELERATOR_LOG=warn $env "$probe" "$@" "$lib" > "$state/out" 2> "$state/err" ||
    fail "$tree/$want/$mode: probe $* exited $?: $(cat "$state/err")"
  out=$(cat "$state/out") err=$(cat "$state/err")
}
has() { grep -qF -- "$2" <<<"$out" || fail "$1: output lacks '$2':"$'\n'"$out"; }
lacks() { if grep -qF -- "$2" <<<"$out"; then fail "$1: output has '$2':"$'\n'"$out"; fi; }
count() { [ "$(grep -cF -- "$2" <<<"$out" || true)" -eq "$3" ] || fail "$1: '$2' $3 times expected:"$'\n'"$out"; }
json() { python3 -c "import json,sys; d=json.load(open('$state/out')); $1" || fail "$2"; }

# --- probe --json follows the schema: every tree, every vendor build, with
# and without its driver.
n=0
for tree in "$trees"/*; do
  tree=$(basename "$tree")
  for b in "${builds[@]}"; do
    set -- $b
    for mode in fake nodriver; do
      [ "$1" = stub ] && [ $mode = nodriver ] && continue
      run "$tree" "$1" $mode --json
      cp "$state/out" "$state/$tree-$1-$mode.json"
      n=$((n + 1))
    done
  done
done
python3 probe/validate_json.py docs/device.schema.json "$state"/*.json ||
  fail "probe --json does not follow docs/device.schema.json"
echo "test_pci: $n probe --json documents follow docs/device.schema.json"

# --- the laptop: an integrated GPU is not an accelerator.
run laptop stub fake --pci
has laptop "status: stub: 4 devices; PCI shows no accelerators"
has laptop "(no accelerators on the PCI bus)"
has laptop "== Mismatches =="$'\n'"(none)"
[ -z "$err" ] || fail "laptop: the stub warned: $err"
run laptop nvidia nodriver --pci
has laptop "PCI shows no NVIDIA devices; PCI shows no accelerators"

# --- HGX H100: 8 GPUs; NVSwitches (bridges), NICs and the BMC's VGA are not accelerators.
hgx="0000:18:00.0, 0000:2a:00.0, 0000:3a:00.0, 0000:5d:00.0, 0000:9a:00.0, 0000:ab:00.0, 0000:ba:00.0, 0000:db:00.0"
run hgx-h100 stub fake --pci
has hgx "PCI shows 8 NVIDIA devices at $hgx, bound to nvidia; 8 mismatch(es)"
count hgx " NVIDIA   10de:2330 030200 " 8
lacks hgx "22a3"
lacks hgx "1a03"
count hgx "other-vendor: a NVIDIA device; this library serves stub. Fix: load libaccelerator_nvidia.so" 8
grep -qF "the stub's simulated devices are reported, but PCI shows 8 NVIDIA devices" <<<"$err" ||
  fail "hgx: the stub did not warn: $err"
run hgx-h100 nvidia nodriver --pci
has hgx "status: nvidia: not supported: NVML (/nonexistent/libnvidia-ml.so.1) not usable"
has hgx "; PCI shows 8 NVIDIA devices at $hgx, bound to nvidia; 8 mismatch(es)"
lacks hgx "driver is not in use"
has hgx "(nvidia lists no devices)"
count hgx "not-listed: bound to nvidia, but NVML is not usable" 8
run hgx-h100 nvidia fake --pci
has hgx "0     GPU-00000000-0000-0000-0000-0000000000h1     0000:18:00.0  NVIDIA H100"
count hgx "not-listed: bound to nvidia, but NVML does not list it. Fix: check the kernel log" 7
has hgx "! GPU-11111111-1111-1111-1111-1111111111a4 no-pci-record: listed by nvidia at 0000:3b:00.0"

# --- the fake NVML's machine: both GPUs matched, properties from PCI.
run nvidia-fake nvidia fake --pci
has nvidia-fake "== Mismatches =="$'\n'"(none)"
[ -z "$err" ] || fail "nvidia-fake: warnings: $err"
run nvidia-fake nvidia fake --json
json "a40=d['devices'][1]; assert a40['pci']['address']=='0000:3b:00.0', a40; \
assert a40['numaNode']==0, 'NUMA from PCI'; assert a40['metadata']['hwLocation']=='0000:3b:00.0'; \
assert a40['metadata']['slotName']=='cuda.device'" "nvidia-fake: device records"

# --- a VM host: VFs and whole GPUs on vfio-pci are reported, not dropped.
run vfio nvidia fake --pci
has vfio "2/32 VFs"
count vfio "vfio-pci             VF of 0000:3b:00.0" 2
count vfio "passed-through: bound to vfio-pci" 4
has vfio "! 0000:86:00.0 passed-through: bound to vfio-pci: passed through to a VM, not seen by NVML. Fix: nothing if a VM uses it; else: echo 0000:86:00.0 > /sys/bus/pci/drivers/vfio-pci/unbind; echo 0000:86:00.0 > /sys/bus/pci/drivers/nvidia/bind"
run vfio nvidia fake --json
json "r=[x for x in d['pci'] if x['state']=='passed-through']; assert len(r)==4; \
assert r[0]['record']['sriov']['physfn']=='0000:3b:00.0'; \
assert d['devices'][1]['pci']['sriov']=={'totalVfs':32,'numVfs':2,'physfn':''}" "vfio: rows"
# The v2 ABI (the hypervisor's, dlopen RTLD_NOW|RTLD_GLOBAL) carries the
# record as pci.* properties and the NUMA node the fake NVML does not give.
env ACCELERATOR_SYSFS_ROOT="$trees/vfio" ACCELERATOR_LOG=error ACCELERATOR_STATE_DIR="$state/s" \
  $(want=nvidia; env_of) python3 - "$B/libaccelerator_nvidia.so" <<'PY' ||
import ctypes, os, sys
lib = ctypes.CDLL(sys.argv[1], mode=os.RTLD_NOW | os.RTLD_GLOBAL)
assert lib.AccelInit() == 0
SIZE, PROPS, KV = 20976, 472, 320          # ABI-v2.md: ExtendedDeviceInfo, props, DevicePropertyKV
buf, n = ctypes.create_string_buffer(SIZE * 4), ctypes.c_size_t()
assert lib.AccelGetAllDevices(buf, 4, ctypes.byref(n)) == 0 and n.value == 2, n.value
raw = buf.raw[SIZE:2 * SIZE]               # device 1: the fake's A40 (NUMA not supported)
count = int.from_bytes(raw[PROPS + 64 * KV:PROPS + 64 * KV + 8], "little")
cstr = lambda b: b.split(b"\0")[0].decode()
props = {cstr(raw[PROPS + j * KV:PROPS + j * KV + 64]): cstr(raw[PROPS + j * KV + 64:PROPS + (j + 1) * KV])
         for j in range(count)}
assert int.from_bytes(raw[436:440], "little", signed=True) == 0, "numaNode from PCI"
want = {"pci.vendor_id": "0x10de", "pci.device_id": "0x2235", "pci.class": "0x030200",
        "pci.driver": "nvidia", "pci.link.max": "16 GT/s x16", "pci.iommu_group": "4",
        "pci.sriov.total_vfs": "32", "pci.sriov.num_vfs": "2"}
assert all(props.get(k) == v for k, v in want.items()), props
PY
  fail "vfio: v2 properties"

run vm-host nvidia nodriver --pci
has vm-host "PCI shows 2 NVIDIA devices at 0000:3b:00.0, 0000:86:00.0, bound to vfio-pci; the NVIDIA driver is not in use"

# --- the NVIDIA driver not loaded: GPUs with no driver bound.
run no-driver nvidia nodriver --pci
has no-driver "PCI shows 2 NVIDIA devices at 0000:3b:00.0, 0000:86:00.0, with no driver bound; the NVIDIA driver is not in use"
count no-driver "not-listed: no kernel driver bound. Fix: load the nvidia kernel driver (modprobe nvidia)" 2

# The library's own error (as the hypervisor sees it through dlopen): a
# device call fails NOT_FOUND, naming what PCI shows and what is missing.
ACCELERATOR_SYSFS_ROOT="$trees/vm-host" ACCELERATOR_NVML_PATH=/nonexistent/libnvidia-ml.so.1 \
ACCELERATOR_LOG=error ACCELERATOR_STATE_DIR="$state/s" python3 - "$B/libaccelerator_nvidia.so" <<'PY' ||
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)
lib.acceleratorGetLastError.restype = ctypes.c_char_p
n = ctypes.c_size_t(99)
assert lib.GetDeviceCount(ctypes.byref(n)) == 0 and n.value == 0, n.value
rc = lib.getDeviceInfo(0, ctypes.create_string_buffer(8192))
why = lib.acceleratorGetLastError().decode()
assert rc == 2, rc
assert "NVML (/nonexistent/libnvidia-ml.so.1) not usable" in why, why
assert "PCI shows 2 NVIDIA devices at 0000:3b:00.0, 0000:86:00.0, bound to vfio-pci; " \
       "the NVIDIA driver is not in use" in why, why
PY
  fail "vm-host: the library's error"

# --- MI300X: AMD devices are seen, and the builds without AMD support say so.
mi="8 AMD devices at 0000:05:00.0, 0000:26:00.0, 0000:46:00.0, 0000:65:00.0, 0000:85:00.0, 0000:a6:00.0, 0000:c6:00.0, 0000:e5:00.0, bound to amdgpu"
run mi300x stub fake --pci
has mi300x "PCI shows $mi"
count mi300x " AMD      1002:74a1 120000 " 8
count mi300x "Fix: load libaccelerator_amd.so" 8
run mi300x nvidia nodriver --pci
has mi300x "PCI shows no NVIDIA devices; PCI shows $mi"
run mi300x ascend nodriver --pci
has mi300x "PCI shows no Huawei devices; PCI shows $mi"

# --- Ascend 910: the NPUs, not the Huawei NIC or the HiSilicon ZIP engine.
run ascend910 ascend fake --pci
count ascend910 " Huawei   19e5:d801 120000 " 2
lacks ascend910 "a250"
lacks ascend910 "1822"
has ascend910 "== Mismatches =="$'\n'"(none)"
run ascend910 ascend fake --json
json "at={x['pci']['address']: x for x in d['devices']}; assert sorted(at)==['0000:3b:00.0','0000:86:00.0']; \
assert [at[a]['numaNode'] for a in sorted(at)]==[0,1], 'NUMA from PCI'; \
assert [x['pcieGen'] for x in d['devices']]==[4,4], 'link from PCI'; \
assert d['devices'][0]['metadata']['slotName']=='ascend.device'" "ascend910: device records"
run ascend910 ascend nodriver --pci
has ascend910 "PCI shows 2 Huawei devices at 0000:3b:00.0, 0000:86:00.0, bound to devdrv_device_driver"
lacks ascend910 "driver is not in use"
run ascend910 nvidia nodriver --pci
has ascend910 "Fix: load libaccelerator_ascend.so"

# --- Gaudi 2: the habana build lists the node's devices (in HLML's order,
# matched to PCI by bus id); the other builds name the build to load.
g2="8 Habana devices at 0000:19:00.0, 0000:1a:00.0, 0000:33:00.0, 0000:34:00.0, 0000:4d:00.0, 0000:9a:00.0, 0000:b3:00.0, 0000:b4:00.0, bound to habanalabs"
run gaudi2 habana fake --pci
has gaudi2 "status: habana: 8 devices"
count gaudi2 " Habana   1da3:1020 120000 " 8
has gaudi2 "== Mismatches =="$'\n'"(none)"
run gaudi2 habana fake --json
json "assert [x['pci']['address'] for x in d['devices']][:3]==['0000:33:00.0','0000:9a:00.0','0000:19:00.0']; \
assert all(x['metadata']['slotName']=='gaudi2.device' for x in d['devices'])" "gaudi2: device records"
run gaudi2 habana nodriver --pci
has gaudi2 "PCI shows $g2"
has gaudi2 "libhlml.so"
run gaudi2 stub fake --pci
count gaudi2 "Fix: load libaccelerator_habana.so" 8
run gaudi2 amd nodriver --pci
has gaudi2 "PCI shows no AMD devices; PCI shows $g2"

# --- the universal build: every fake driver present, each node gets the
# vendor its PCI bus shows; a node with none and no driver gets 0 devices and
# the reason; ACCELERATOR_VENDOR still overrides.
run nvidia-fake universal fake --pci
has universal/nvidia-fake "status: nvidia: 2 devices"
has universal/nvidia-fake "== Mismatches =="$'\n'"(none)"
run hgx-h100 universal fake --pci
has universal/hgx-h100 "status: nvidia: 2 devices"
run mi300x universal fake --pci
has universal/mi300x "status: amd: 8 devices"
run ascend910 universal fake --pci
has universal/ascend910 "status: ascend: 2 devices"
has universal/ascend910 "== Mismatches =="$'\n'"(none)"
run gaudi2 universal fake --pci
has universal/gaudi2 "status: habana: 8 devices"
has universal/gaudi2 "== Mismatches =="$'\n'"(none)"
run laptop universal nodriver --pci
has universal/laptop "status: nvidia: not supported: NVML (/nonexistent/libnvidia-ml.so.1) not usable"
has universal/laptop "; PCI shows no accelerators"
has universal/laptop "(nvidia lists no devices)"
run mi300x universal nodriver --pci
has universal/mi300x-nodriver "status: amd: "
has universal/mi300x-nodriver "PCI shows $mi"
has universal/mi300x-nodriver "(amd lists no devices)"
run ascend910 universal nodriver --pci
has universal/ascend910-nodriver "status: ascend: "
has universal/ascend910-nodriver "(ascend lists no devices)"
run gaudi2 universal nodriver --pci
has universal/gaudi2-nodriver "status: habana: "
has universal/gaudi2-nodriver "PCI shows $g2"
has universal/gaudi2-nodriver "(habana lists no devices)"
ACCELERATOR_VENDOR=ascend run mi300x universal fake --pci
has universal/override "status: ascend: 2 devices"
ACCELERATOR_VENDOR=amd run nvidia-fake universal fake --pci
has universal/override "status: amd: 8 devices"
# The stub is not in the universal build: naming it is an error, never
# simulated devices on a node.
if env ACCELERATOR_SYSFS_ROOT="$trees/laptop" ACCELERATOR_STATE_DIR="$state/s" ACCELERATOR_VENDOR=stub \
     "$probe" "$B/libaccelerator_universal.so" > "$state/out" 2> "$state/err"; then
  fail "universal: ACCELERATOR_VENDOR=stub was accepted: $(cat "$state/out")"
fi
grep -qF 'ACCELERATOR_VENDOR="stub" is not compiled into this library (available: nvidia, ascend, amd, habana)' "$state/err" ||
  fail "universal: ACCELERATOR_VENDOR=stub: $(cat "$state/err")"
echo "test_pci: the universal build chose nvidia, amd, ascend and habana on their nodes, none on the laptop"

echo "test_pci: OK"

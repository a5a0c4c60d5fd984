#!/usr/bin/env bash
# The universal build (every real vendor) beside the single-vendor builds:
# its size, and its load time as the hypervisor pays it (dlopen + AccelInit,
# a fresh process each time: c-tests/bench_load.c) on the PCI test trees
# (c-tests/pci/mktrees.py) with the fake drivers, each node against the
# build of its own vendor in the same run. Asserts no timing.
# Usage: probe/bench_universal.sh BENCH_LOAD TREES BUILD [RUNS]
set -euo pipefail
bench=$1 trees=$2 B=$3 runs=${4:-30}
state=$(mktemp -d /tmp/accelerator-bench-universal.XXXXXX)
trap 'rm -rf "$state"' EXIT

fakes=(ACCELERATOR_NVML_PATH=$B/fakes/nvidia/libnvidia-ml.so.1 ACCELERATOR_CUDA_PATH=$B/fakes/nvidia/libcuda.so.1
       ACCELERATOR_DCMI_PATH=$B/fakes/ascend/libdcmi.so FAKE_DCMI_STATE=$state
       ACCELERATOR_AMDSMI_PATH=$B/fakes/amd/libamd_smi.so ACCELERATOR_AMD_SYSFS=$B/fakes/amd/sys
       ACCELERATOR_HLML_PATH=$B/fakes/habana/libhlml.so ACCELERATOR_HABANA_SYSFS=$B/fakes/habana/sys)
nodriver=(ACCELERATOR_NVML_PATH=/nonexistent/libnvidia-ml.so.1 ACCELERATOR_DCMI_PATH=/nonexistent/libdcmi.so
          ACCELERATOR_AMDSMI_PATH=/nonexistent/libamd_smi.so ACCELERATOR_HLML_PATH=/nonexistent/libhlml.so)

echo "== size: file bytes (release, debuginfo=1) and text+data mapped (size(1))"
uni=$B/libaccelerator_universal.so
loaded() { size "$1" | awk 'NR == 2 { print $1 + $2 }'; }
printf '%-12s %12s %12s %14s %12s\n' build file universal/it text+data universal/it
for v in stub nvidia ascend amd habana universal; do
  f=$B/libaccelerator_$v.so
  awk -v v="$v" -v fb="$(stat -c %s "$f")" -v fu="$(stat -c %s "$uni")" \
      -v lb="$(loaded "$f")" -v lu="$(loaded "$uni")" \
      'BEGIN { printf "%-12s %12d %12.2f %14d %12.2f\n", v, fb, fu / fb, lb, lu / lb }'
done

# load NODE VENDOR ENV...: the vendor's build and the universal one on NODE.
load() {
  local node=$1 vendor=$2; shift 2
  echo "== load: $node (the $vendor build beside the universal one; median of $runs; ms)"
  env -u ACCELERATOR_VENDOR ACCELERATOR_SYSFS_ROOT="$trees/$node" ACCELERATOR_STATE_DIR="$state" \
      ACCELERATOR_LOG=error "$@" "$bench" "$runs" "$B/libaccelerator_$vendor.so" "$uni" | tee "$state/out"
  awk 'NR == 2 { one = $5 } NR == 3 { printf "universal/%s: %.2f (devices: %s vs %s)\n", "'"$vendor"'", $5 / one, d, $2 }
       NR == 2 { d = $2 }' "$state/out"
}
load nvidia-fake nvidia "${fakes[@]}"
load mi300x amd "${fakes[@]}"
load ascend910 ascend "${fakes[@]}"
load gaudi2 habana "${fakes[@]}"
# No accelerator and no driver: the universal build tries all four.
load laptop nvidia "${nodriver[@]}"

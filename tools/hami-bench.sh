#!/bin/sh
# Our hook and HAMi-core side by side on the fake driver (`make hami-bench`).
#
#   tools/hami-bench.sh HAMI_CORE BUILD RUNS
#
# HAMI_CORE: a HAMi-core (github.com/Project-HAMi/HAMi-core) work tree, or a
# bare git directory of it (its HEAD is extracted under BUILD/hami/). Nothing
# of HAMi-core is in this repository, and nothing but this script needs it.
#
# 1. Copies HAMi-core's sources under BUILD/hami/ and builds its libvgpu.so
#    with -O2: the sources and defines of its own build (build.sh:
#    DLSYM_HOOK_ENABLE, MULTIPROCESS_LIMIT_ENABLE, HOOK_MEMINFO_ENABLE,
#    HOOK_NVML_ENABLE; CMAKE_BUILD_TYPE=Debug, whose flags are -g, no -O and
#    no -fvisibility=hidden), -O2 added, against cuda.h of the CUDA 12.9
#    runtime wheel (`make cudart`) and nvml.h of the PyPI wheel
#    nvidia-nvml-dev-cu12 12.9.79 (fetched here once, with pip), linked to
#    the fake driver and NVML as its CMake file links -lcuda -lnvidia-ml.
#    It builds as it is; the one patch (below) is for running on the fake.
#    Its Release flags are not used: -fvisibility=hidden leaves `dlsym` its
#    only export, so a program that looks the driver's functions up by
#    dlsym (bench_hook; the CUDA runtime, for cuGetProcAddress) would reach
#    the driver past it.
# 2. Runs bench_hook RUNS times with HAMi-core in its two "before" modes
#    (LD_PRELOAD of tools/hami_env.c's shim, then libvgpu.so): the driver
#    alone, our hook's modes and HAMi-core without and with limits take
#    turns in every round of one run. HAMi-core's limits come from the
#    shim (CUDA_DEVICE_MEMORY_LIMIT=40g, CUDA_DEVICE_SM_LIMIT=50 for the
#    limited worker; see hami_env.c), CUDA_REDIRECT names libvgpu.so itself
#    (HAMi-core's dlsym looks cu* names up there; it is
#    /usr/local/vgpu/libvgpu.so where HAMi installs it).
# 3. Prints each run's tables, the "before" rows renamed, then over the runs
#    the median and the range of the ns each mode adds over the driver.
#
set -eu

fail() {
  echo "hami-bench: $*" >&2
  exit 1
}

[ $# -eq 3 ] || fail "usage: $0 HAMI_CORE BUILD RUNS"
HAMI_CORE=$1
BUILD=$(cd "$2" && pwd)
RUNS=$3
case $RUNS in '' | *[!0-9]* | 0) fail "RUNS must be a positive number, not '$RUNS'" ;; esac
[ -d "$HAMI_CORE" ] || fail "HAMI_CORE=$HAMI_CORE is not a directory"

OUT=$BUILD/hami
FAKES=$BUILD/fakes/nvidia
CUDA_INC=$BUILD/cudart/12.9.79/nvidia/cuda_runtime/include
NVML_VERSION=12.9.79
NVML_DIR=$OUT/nvml-dev-$NVML_VERSION
mkdir -p "$OUT"

# ---- the sources and their commit, copied to $SRC (the patch below is
# applied to the copy, never to HAMI_CORE)
SRC=$OUT/src
rm -rf "$SRC" && mkdir -p "$SRC"
if [ -f "$HAMI_CORE/src/libvgpu.c" ]; then
  if COMMIT=$(git -C "$HAMI_CORE" rev-parse HEAD 2>/dev/null); then
    git -C "$HAMI_CORE" diff --quiet HEAD -- src || COMMIT="$COMMIT with local changes"
  else
    COMMIT="unknown (not a git checkout)"
  fi
  cp -R "$HAMI_CORE/src" "$SRC/src"
elif COMMIT=$(git --git-dir="$HAMI_CORE" rev-parse HEAD 2>/dev/null); then
  # A git directory without a work tree (what a mirror or `git clone --bare` gives).
  git --git-dir="$HAMI_CORE" archive HEAD src | tar -x -C "$SRC"
else
  fail "HAMI_CORE=$HAMI_CORE is neither a HAMi-core work tree (src/libvgpu.c) nor a git directory"
fi
# HAMi-core's src/CMakeLists.txt and its subdirectories' object libraries.
SRCS="libvgpu.c utils.c log_utils.c nvml/nvml_entry.c nvml/hook.c cuda/context.c cuda/device.c
      cuda/hook.c cuda/event.c cuda/memory.c cuda/stream.c cuda/graph.c allocator/allocator.c
      multiprocess/multiprocess_memory_limit.c multiprocess/multiprocess_utilization_watcher.c"
for f in $SRCS src/static_config.h.in; do
  case $f in src/*) p=$SRC/$f ;; *) p=$SRC/src/$f ;; esac
  [ -f "$p" ] || fail "$f is missing: HAMI_CORE is not a HAMi-core checkout, or its layout changed"
done

# ---- the one patch (HAMI_NO_PID_PATCH=1 leaves it out): postInit keeps the
# compute limiter off (pidfound = 0) when set_task_pid cannot find the
# process's host pid, which it finds as the pid that NVML's running
# processes of the first mapped device gain across cuDevicePrimaryCtxRetain.
# The fake NVML lists only scripted processes, and HAMi-core maps CUDA
# device i to NVML device i (the fake driver's device 0 is the fake NVML's
# device 1), so it never finds it here; on a node where it does, every
# launch goes through rate_limiter. The patch takes that branch as found:
# the launch path and the utilization watcher of a real node, the token
# bucket refilled from the fake NVML's utilization (none: the limit is not
# reached once the first refill, 120 ms in, has come).
if [ "${HAMI_NO_PID_PATCH:-0}" != 1 ]; then
  sed -i '/SET_TASK_PID FAILED/{n;s/pidfound = 0;/pidfound = 1;/}' "$SRC/src/libvgpu.c"
  grep -A1 'SET_TASK_PID FAILED' "$SRC/src/libvgpu.c" | grep -q 'pidfound = 1;' ||
    fail "the pidfound patch no longer applies to src/libvgpu.c ($COMMIT): HAMI_NO_PID_PATCH=1 runs without it"
  PATCHED="host-pid patch applied"
else
  PATCHED="unpatched: its compute limiter stays off on the fake"
fi

# ---- the headers: NVIDIA's, from PyPI wheels, never in the repository
[ -f "$CUDA_INC/cuda.h" ] || fail "no $CUDA_INC/cuda.h: run 'make cudart'"
if [ ! -f "$NVML_DIR/nvidia/nvml_dev/include/nvml.h" ]; then
  rm -rf "$NVML_DIR" && mkdir -p "$NVML_DIR/wheel"
  python3 -m pip download --quiet --no-deps --only-binary=:all: \
    "nvidia-nvml-dev-cu12==$NVML_VERSION" -d "$NVML_DIR/wheel" ||
    { rm -rf "$NVML_DIR"; fail "cannot fetch nvidia-nvml-dev-cu12==$NVML_VERSION (nvml.h) with pip"; }
  python3 -m zipfile -e "$NVML_DIR"/wheel/nvidia_nvml_dev_cu12-*.whl "$NVML_DIR"
fi

# ---- build: static_config.h as HAMi-core's CMake makes it for build.sh
LIB=$OUT/libvgpu.so
mkdir -p "$OUT/config"
sed -e 's/^#cmakedefine \(MULTIPROCESS_LIMIT_ENABLE\|DLSYM_HOOK_ENABLE\|HOOK_MEMINFO_ENABLE\|HOOK_NVML_ENABLE\)$/#define \1/' \
    -e 's/^#cmakedefine \(.*\)$/\/* #undef \1 *\//' \
    -e "s/@GIT_HASH@/$(echo "$COMMIT" | cut -c1-7)/" -e 's/@GIT_BRANCH@/bench/' \
    "$SRC/src/static_config.h.in" > "$OUT/config/static_config.h"
paths=
for f in $SRCS; do paths="$paths $SRC/src/$f"; done
# shellcheck disable=SC2086 # $paths: one word per source
if ! ${CC:-cc} -O2 -g -shared -fPIC -D_GNU_SOURCE -Wall -I"$CUDA_INC" \
  -I"$NVML_DIR/nvidia/nvml_dev/include" -I"$SRC/src" -I"$OUT/config" -o "$LIB.tmp" $paths \
  -L"$FAKES" -l:libcuda.so.1 -l:libnvidia-ml.so.1 > "$OUT/build.log" 2>&1; then
  cat "$OUT/build.log" >&2
  fail "HAMi-core ($COMMIT) does not build here (log: $OUT/build.log)"
fi
mv "$LIB.tmp" "$LIB"
for sym in cuLaunchKernel cuMemAlloc_v2 cuMemFree_v2 cuGetProcAddress_v2 dlsym; do
  nm -D --defined-only "$LIB" | grep -q " T $sym\$" || fail "$LIB does not export $sym"
done
SHIM=$OUT/hami_env.so
${CC:-cc} -std=c11 -Wall -Wextra -Werror -O2 -D_GNU_SOURCE -shared -fPIC -o "$SHIM" "$(dirname "$0")/hami_env.c"

# ---- run
echo "HAMi-core $COMMIT ($PATCHED), built -O2 (build.sh's defines) against cuda.h 12.9.79, nvml.h $NVML_VERSION"
echo "HAMi-core, unlimited: no CUDA_DEVICE_MEMORY_LIMIT, no CUDA_DEVICE_SM_LIMIT"
echo "HAMi-core, limited:   CUDA_DEVICE_MEMORY_LIMIT=40g CUDA_DEVICE_SM_LIMIT=50"
summary=$OUT/runs.txt
: > "$summary"
run=1
while [ "$run" -le "$RUNS" ]; do
  dir=$(mktemp -d /tmp/hami-bench.XXXXXX)
  echo
  echo "== run $run of $RUNS ($(date -u +%H:%M:%S) UTC, load average $(cut -d' ' -f1-3 /proc/loadavg))"
  if ! ACCELERATOR_STATE_DIR=$dir/state HAMI_BENCH_DIR=$dir CUDA_REDIRECT=$LIB \
    "$BUILD/c-tests/hook/bench_hook" "$BUILD/libaccelerator_nvidia.so" "$BUILD/libcuda_limiter.so" \
    "$SHIM $LIB" > "$dir/out" 2> "$dir/err"; then
    cat "$dir/out" "$dir/err" >&2
    fail "bench_hook failed in run $run (its files: $dir)"
  fi
  # bench_hook's other "before" modes (a worker granted a share, one
  # capped for its priority) are our scheduler's: HAMi-core has neither.
  sed -e 's/^before, unlimited worker/HAMi-core, unlimited    /' \
      -e 's/^before, limited worker  /HAMi-core, limited      /' \
      -e '/^before, /d' "$dir/out" | tee "$dir/named"
  # The first table's rows: mode, then alloc+free added (NF-6), launch added (NF-1).
  awk -v run="$run" '/^hook overhead/ {t=1; next} t && /^$/ {exit}
    t && !/^mode/ {m=$0; sub(/ +[0-9].*$/, "", m); printf "%s\t%s\t%s\t%s\n", run, m, $(NF-6), $(NF-1)}' \
    "$dir/named" >> "$summary"
  rm -rf "$dir"
  run=$((run + 1))
done

# ---- over the runs: median [lowest-highest] of the added ns
echo
echo "added ns over the driver, $RUNS run(s): median [lowest-highest]"
printf '%-24s %26s %26s\n' mode "launch" "alloc+free"
cut -f2 "$summary" | awk '!seen[$0]++' | while IFS= read -r mode; do
  stat() {
    awk -F'\t' -v m="$mode" -v c="$1" '$2 == m {print $c}' "$summary" | sort -g |
      awk '{v[NR] = $1} END {med = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2;
        printf "%.1f [%.1f-%.1f]", med, v[1], v[NR]}'
  }
  printf '%-24s %26s %26s\n' "$mode" "$(stat 4)" "$(stat 3)"
done

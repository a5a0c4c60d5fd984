#!/usr/bin/env bash
# Usage: test_link.sh BUILD_DIR NVIDIA_FAKES ASCEND_FAKES
# (the AMD and Habana fakes come from the environment: ACCELERATOR_AMDSMI_PATH,
# ACCELERATOR_AMD_SYSFS, ACCELERATOR_HLML_PATH and ACCELERATOR_HABANA_SYSFS,
# as vendors/amd/vendor.mk and vendors/habana/vendor.mk set them)
# Links c-tests/link/linked.c against each vendor build the way consumers
# do, from a clean copy of the build tree (only the libraries: no stray
# symlink can satisfy the loader), and runs it:
#   -L dir -laccelerator_<vendor> -Wl,-rpath,dir     -> that vendor
#   dir/libaccelerator_<vendor>.so -Wl,-rpath,dir    -> that vendor
#   -L dir -laccelerator -Wl,-rpath,dir              -> the default (stub)
#   the universal build, by -l and by path           -> nvidia (its fake
#     driver loads first on an empty PCI bus)
#   -L dir -llimiter -Wl,-rpath,dir                  -> liblimiter starts
set -euo pipefail
build=$1 nvidia_fakes=$2 ascend_fakes=$3
CC=${CC:-cc}
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d /tmp/accelerator-link-test.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
lib=$tmp/build
mkdir -p "$lib"
cp "$build"/libaccelerator_stub.so "$build"/libaccelerator_nvidia.so \
   "$build"/libaccelerator_ascend.so "$build"/libaccelerator_amd.so "$build"/libaccelerator_habana.so \
   "$build"/libaccelerator.so \
   "$build"/libaccelerator_universal.so "$lib"/
mkdir -p "$tmp/sys"
export ACCELERATOR_STATE_DIR=$tmp/state ACCELERATOR_LOG=error ACCELERATOR_SYSFS_ROOT=$tmp/sys
export ACCELERATOR_NVML_PATH=$nvidia_fakes/libnvidia-ml.so.1
export ACCELERATOR_CUDA_PATH=$nvidia_fakes/libcuda.so.1
export ACCELERATOR_DCMI_PATH=$ascend_fakes/libdcmi.so FAKE_DCMI_STATE=$tmp/state
passed=0 failed=0
run() { # name expected-vendor link-args...
  local name=$1 want=$2
  shift 2
  local exe=$tmp/$name out
  $CC -std=c11 -Wall -Wextra -Werror -o "$exe" "$here/linked.c" "$@" -Wl,-rpath,"$lib"
  if out=$("$exe" 2>&1) && [[ $out == "vendor=$want "* ]]; then
    echo "link: $name: $out"
    passed=$((passed + 1))
  else
    echo "FAIL link: $name: expected vendor $want, got: $out" >&2
    failed=$((failed + 1))
  fi
}
for v in stub nvidia ascend amd habana; do
  run "$v-by-l" "$v" -L"$lib" -laccelerator_"$v"
  run "$v-by-path" "$v" "$lib/libaccelerator_$v.so"
done
run default-by-l stub -L"$lib" -laccelerator
run universal-by-l nvidia -L"$lib" -laccelerator_universal
run universal-by-path nvidia "$lib/libaccelerator_universal.so"

# liblimiter, linked by -l from the build tree: its soname (liblimiter.so.1)
# must be there too (the build rule makes the link).
cp -P "$build"/liblimiter.so "$build"/liblimiter.so.1 "$lib"/
if $CC -std=c11 -Wall -Wextra -Werror -I"$here/../../include" -o "$tmp/limiter-by-l" \
     "$here/limiter_linked.c" -L"$lib" -llimiter -Wl,-rpath,"$lib" &&
   out=$("$tmp/limiter-by-l" 2>&1); then
  echo "link: limiter-by-l: $out"
  passed=$((passed + 1))
else
  echo "FAIL link: limiter-by-l: ${out:-did not build}" >&2
  failed=$((failed + 1))
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]

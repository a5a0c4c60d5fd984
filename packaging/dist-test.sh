#!/usr/bin/env bash
# The tarball `make dist` writes, unpacked where nothing of the build tree
# is: every build in lib/<vendor>/ with its links and the versioned soname,
# lib/libaccelerator.so* on the universal build (pkg-config's default
# vendor too), the headers, the documentation with every relative link of
# its Markdown resolving inside the tarball, and a C program built through
# the unpacked pkg-config files alone that sees the fake NVIDIA driver
# (NVIDIA_FAKES) through the default build. Run by `make dist-test`.
# Usage: packaging/dist-test.sh TARBALL
set -euo pipefail
CC=${CC:-cc}
tarball=$1
root=$(mktemp -d /tmp/accelerator-dist-test.XXXXXX)
trap 'rm -rf "$root"' EXIT
fail() { echo "dist-test: FAIL: $*" >&2; exit 1; }
step() { echo "dist-test: $*"; }

tar -C "$root" -xzf "$tarball"
top=$(ls "$root")
d=$root/$top
version=$(cat "$d/VERSION")
so=${version%%.*}
[ "$top" = "accelerator-$version" ] || fail "the tarball's top directory is $top"

for v in universal stub nvidia ascend amd; do
  l=$d/lib/$v
  [ -f "$l/libaccelerator.so.$version" ] && [ ! -L "$l/libaccelerator.so.$version" ] || fail "no lib/$v build"
  [ "$(readlink "$l/libaccelerator.so.$so")" = "libaccelerator.so.$version" ] || fail "lib/$v: .so.$so link"
  [ "$(readlink "$l/libaccelerator.so")" = "libaccelerator.so.$so" ] || fail "lib/$v: .so link"
  soname=$(objdump -p "$l/libaccelerator.so.$version" | awk '$1 == "SONAME" { print $2 }')
  [ "$soname" = "libaccelerator.so.$so" ] || fail "lib/$v has soname '$soname'"
done
for n in libaccelerator.so.$version libaccelerator.so.$so libaccelerator.so; do
  [ "$(readlink "$d/lib/$n")" = "universal/$n" ] || fail "lib/$n does not point into lib/universal/"
done
[ -f "$d/include/accelerator.h" ] && [ -f "$d/include/accelerator/v2/accelerator.h" ] || fail "headers"
step "lib/{universal,stub,nvidia,ascend,amd}: builds, links, sonames; lib/libaccelerator.so* -> universal/"

for f in README.md CHANGELOG.md docs/abi-reference.md docs/abi-v2-reference.md docs/limiter-reference.md \
         docs/install.md probe/README.md; do
  cmp -s "$f" "$d/$f" || fail "$f is not shipped"
done
shipped=$(cd "$d" && find . -name '*.md' | sort)
python3 - "$d" $shipped <<'PY' || fail "a shipped page links to a file the tarball lacks"
import os, re, sys
root, bad = sys.argv[1], 0
for md in sys.argv[2:]:
    text = re.sub(r"```.*?```", "", open(os.path.join(root, md), encoding="utf-8").read(), flags=re.S)
    for target in set(re.findall(r"\]\(([^)\s#]+)(?:#[^)]*)?\)", text)):
        if re.match(r"[a-z]+:", target):
            continue
        full = os.path.normpath(os.path.join(root, os.path.dirname(md), target))
        if not full.startswith(root + "/") or not os.path.exists(full):
            print(f"dist-test: {md}: link to {target}: not in the tarball", file=sys.stderr)
            bad = 1
sys.exit(bad)
PY
step "README.md, CHANGELOG.md, docs/: $(echo "$shipped" | wc -l) pages shipped, every relative link inside the tarball"

export PKG_CONFIG_PATH=$d/lib/pkgconfig PKG_CONFIG_LIBDIR=$d/lib/pkgconfig
[ "$(pkg-config --variable=vendor accelerator)" = universal ] || fail "pkg-config's default vendor"
[ "$(realpath "$(pkg-config --variable=libdir accelerator)")" = "$(realpath "$d/lib/universal")" ] ||
  fail "pkg-config's libdir: $(pkg-config --variable=libdir accelerator)"
cat > "$root/consumer.c" <<'C'
#include <accelerator.h>
#include <stdio.h>
int main(void) {
    size_t n = 0;
    Result rc = GetDeviceCount(&n);
    printf("vendor '%s' rc %d devices %zu\n", acceleratorVendorName(), (int)rc, n);
    return rc != RESULT_SUCCESS;
}
C
# shellcheck disable=SC2046
$CC -std=c11 -Wall -Wextra -Werror -o "$root/consumer" "$root/consumer.c" \
  $(pkg-config --cflags --libs accelerator) -Wl,-rpath,"$(pkg-config --variable=libdir accelerator)"
mkdir -p "$root/sys"
out=$(env -u ACCELERATOR_VENDOR ACCELERATOR_STATE_DIR="$root/state" ACCELERATOR_SYSFS_ROOT="$root/sys" \
      ACCELERATOR_LOG=error ACCELERATOR_NVML_PATH="$NVIDIA_FAKES/libnvidia-ml.so.1" \
      ACCELERATOR_CUDA_PATH="$NVIDIA_FAKES/libcuda.so.1" ACCELERATOR_DCMI_PATH=/nonexistent/libdcmi.so \
      ACCELERATOR_AMDSMI_PATH=/nonexistent/libamd_smi.so "$root/consumer") || fail "consumer: $out"
[ "$out" = "vendor 'nvidia' rc 0 devices 2" ] || fail "consumer printed: $out"
step "C consumer through the unpacked pkg-config (universal, NVIDIA fake): $out"
step "OK"

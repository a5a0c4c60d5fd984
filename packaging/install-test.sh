#!/usr/bin/env bash
# Installs into a temporary prefix (with DESTDIR) and builds against the
# installed copy through pkg-config alone. The default install (the universal
# build, its documentation): a C program that sees the fake NVIDIA driver
# (NVIDIA_FAKES) through it and is refused the stub. A stub install
# (INSTALL_VENDOR=stub): a C program (both headers when liblimiter is
# installed too) and the Go package, whose tests use the stub's devices.
# Run by `make install-test` (part of `make test-run`), from the repository root.
set -euo pipefail
MAKE=${MAKE:-make}
CC=${CC:-cc}
GO=${GO:-$(command -v go || echo /usr/local/go/bin/go)}
root=$(mktemp -d /tmp/accelerator-install-test.XXXXXX)
trap 'rm -rf "$root"' EXIT
prefix=/opt/accelerator-test
dest=$root/dest
lib=$dest$prefix/lib
version=$(packaging/version.sh)
so=${version%%.*}
fail() { echo "install-test: FAIL: $*" >&2; exit 1; }
step() { echo "install-test: $*"; }

# --- the default install: the universal build and the documentation.
udest=$root/dest-universal
ulib=$udest$prefix/lib
step "make install PREFIX=$prefix DESTDIR=$udest (the default: INSTALL_VENDOR=universal)"
$MAKE -s --no-print-directory install PREFIX="$prefix" DESTDIR="$udest" >/dev/null
soname=$(objdump -p "$ulib/libaccelerator.so.$version" | awk '$1 == "SONAME" { print $2 }')
[ "$soname" = "libaccelerator.so.$so" ] || fail "the universal install's soname is '$soname'"
[ "$(readlink "$ulib/libaccelerator.so.$so")" = "libaccelerator.so.$version" ] ||
  fail "libaccelerator.so.$so does not point to libaccelerator.so.$version"
doc=$udest$prefix/share/doc/accelerator
for f in README.md CHANGELOG.md docs/abi-reference.md docs/abi-v2-reference.md docs/install.md; do
  cmp -s "$f" "$doc/$f" || fail "$f is not installed as $doc/$f"
done
cat > "$root/universal.c" <<'C'
#include <accelerator.h>
#include <stdio.h>
int main(void) {
    size_t n = 0;
    char why[1024];
    Result rc = GetDeviceCount(&n);
    /* The reason lives until this thread's next call: copied first. */
    snprintf(why, sizeof why, "%s", acceleratorGetLastError());
    printf("vendor '%s' rc %d devices %zu: %s\n", acceleratorVendorName(), (int)rc, n, why);
    return 0;
}
C
(cd "$root" && PKG_CONFIG_PATH=$ulib/pkgconfig PKG_CONFIG_LIBDIR=$ulib/pkgconfig PKG_CONFIG_SYSROOT_DIR=$udest \
   $CC -std=c11 -Wall -Wextra -Werror -o universal universal.c \
   $(PKG_CONFIG_PATH=$ulib/pkgconfig PKG_CONFIG_LIBDIR=$ulib/pkgconfig PKG_CONFIG_SYSROOT_DIR=$udest \
     pkg-config --cflags --libs accelerator))
# No accelerator on the (empty) PCI bus: the first driver that loads wins.
empty=$root/sys && mkdir -p "$empty"
out=$(env -u ACCELERATOR_VENDOR LD_LIBRARY_PATH="$ulib" ACCELERATOR_STATE_DIR=$root/state-u \
      ACCELERATOR_SYSFS_ROOT="$empty" ACCELERATOR_LOG=error \
      ACCELERATOR_NVML_PATH="$NVIDIA_FAKES/libnvidia-ml.so.1" ACCELERATOR_CUDA_PATH="$NVIDIA_FAKES/libcuda.so.1" \
      ACCELERATOR_DCMI_PATH=/nonexistent/libdcmi.so ACCELERATOR_AMDSMI_PATH=/nonexistent/libamd_smi.so \
      ACCELERATOR_HLML_PATH=/nonexistent/libhlml.so \
      "$root/universal")
[ "$out" = "vendor 'nvidia' rc 0 devices 2: " ] || fail "universal install on the NVIDIA fake: $out"
step "universal install, NVIDIA fake driver: $out"
out=$(LD_LIBRARY_PATH="$ulib" ACCELERATOR_STATE_DIR=$root/state-u ACCELERATOR_VENDOR=stub ACCELERATOR_LOG=error \
      "$root/universal")
grep -q "^vendor '' rc 1 devices 0: .*ACCELERATOR_VENDOR=\"stub\" is not compiled into this library (available: nvidia, ascend, amd, habana)" <<<"$out" ||
  fail "universal install asked for the stub: $out"
step "universal install, ACCELERATOR_VENDOR=stub: refused (no simulator in a node's library)"

# --- a stub install: the consumers below (the Go package's tests use its devices).
step "make install PREFIX=$prefix DESTDIR=$dest INSTALL_VENDOR=stub"
$MAKE -s --no-print-directory install PREFIX="$prefix" DESTDIR="$dest" INSTALL_VENDOR=stub >/dev/null

libs=(accelerator)
[ -e "$lib/liblimiter.so.$version" ] && libs+=(limiter)
for l in "${libs[@]}"; do
  [ "$(readlink "$lib/lib$l.so")" = "lib$l.so.$so" ] || fail "lib$l.so does not point to lib$l.so.$so"
  [ "$(readlink "$lib/lib$l.so.$so")" = "lib$l.so.$version" ] || fail "lib$l.so.$so does not point to lib$l.so.$version"
  [ -f "$lib/lib$l.so.$version" ] && [ ! -L "$lib/lib$l.so.$version" ] || fail "lib$l.so.$version is not a file"
  [ -f "$dest$prefix/include/$l.h" ] || fail "$l.h not installed"
  [ -f "$lib/pkgconfig/$l.pc" ] || fail "$l.pc not installed"
  if command -v objdump >/dev/null; then
    soname=$(objdump -p "$lib/lib$l.so.$version" | awk '$1 == "SONAME" { print $2 }')
    [ "$soname" = "lib$l.so.$so" ] || fail "lib$l.so.$version has soname '$soname', not lib$l.so.$so"
  fi
done
if [ -f hook/hook.mk ]; then
  [ -f "$lib/libcuda_limiter.so" ] && [ ! -L "$lib/libcuda_limiter.so" ] || fail "libcuda_limiter.so not installed"
fi
step "installed ${libs[*]} $version: links, headers, pkg-config files, sonames OK"

# pkg-config finds the .pc files in the DESTDIR staging tree; the sysroot
# maps their -I/-L paths (under PREFIX) into it.
export PKG_CONFIG_PATH=$lib/pkgconfig PKG_CONFIG_LIBDIR=$lib/pkgconfig PKG_CONFIG_SYSROOT_DIR=$dest
export LD_LIBRARY_PATH=$lib
[ "$(pkg-config --modversion accelerator)" = "$version" ] || fail "pkg-config --modversion accelerator"

work=$root/work
mkdir -p "$work"
cat > "$work/consumer.c" <<'C'
#include <accelerator.h>
#include <stdio.h>
#include <string.h>
int main(void) {
    size_t n = 0;
    if (GetDeviceCount(&n) != RESULT_SUCCESS) {
        fprintf(stderr, "GetDeviceCount: %s\n", acceleratorGetLastError());
        return 1;
    }
    const char *uuid = "stub-device-0";
    DeviceMetrics m;
    memset(&m, 0, sizeof m);
    if (GetDeviceMetrics(&uuid, 1, &m) != RESULT_SUCCESS) {
        fprintf(stderr, "GetDeviceMetrics: %s\n", acceleratorGetLastError());
        return 1;
    }
    printf("vendor %s abi %u devices %zu memory %llu\n", acceleratorVendorName(),
           acceleratorAbiVersion(), n, (unsigned long long)m.memoryTotalBytes);
    return n == 4 ? 0 : 1;
}
C
step "cc \$(pkg-config --cflags --libs accelerator) consumer.c"
# shellcheck disable=SC2046
(cd "$work" && $CC -std=c11 -Wall -Wextra -Werror -o consumer consumer.c \
   $(pkg-config --cflags accelerator) $(pkg-config --libs accelerator))
resolved=$(ldd "$work/consumer" | awk '$1 == "libaccelerator.so.'"$so"'" { print $3 }')
[ "$resolved" = "$lib/libaccelerator.so.$so" ] || fail "consumer loads libaccelerator from '$resolved'"
out=$(ACCELERATOR_STATE_DIR=$root/state "$work/consumer") || fail "consumer: $out"
grep -q "^vendor stub abi 1 devices 4 memory [1-9]" <<<"$out" || fail "consumer printed: $out"
step "C consumer: $out"

if [[ " ${libs[*]} " == *" limiter "* ]]; then
  cat > "$work/both.c" <<'C'
#include <accelerator.h>
#include <limiter.h>
#include <stdio.h>
int main(void) {
    size_t n = 0;
    Result a = GetDeviceCount(&n);
    Result b = FreezeWorker(NULL, NULL); /* every NULL is INVALID_PARAM */
    printf("accelerator %d limiter %d\n", (int)a, (int)b);
    return a == RESULT_SUCCESS && b == RESULT_ERROR_INVALID_PARAM ? 0 : 1;
}
C
  step "cc \$(pkg-config --cflags --libs accelerator limiter) both.c"
  # shellcheck disable=SC2046
  (cd "$work" && $CC -std=c11 -Wall -Wextra -Werror -o both both.c \
     $(pkg-config --cflags accelerator limiter) $(pkg-config --libs accelerator limiter))
  out=$(ACCELERATOR_STATE_DIR=$root/state "$work/both") || fail "limiter consumer: $out"
  step "C consumer of both libraries: $out"
else
  step "liblimiter not installed (no limiter/limiter.mk): C test of limiter.h skipped"
fi

# The Go package, copied out of the tree so that nothing but pkg-config
# tells cgo where the library is.
if [ -x "$GO" ]; then
  mkdir -p "$work/go"
  cp go/go.mod go/*.go "$work/go/"
  export CGO_ENABLED=1 GOTOOLCHAIN=local GOFLAGS=
  export ACCELERATOR_STATE_DIR=$root/state-go
  step "go vet + go test (package copied to $work/go) against the installed copy"
  (cd "$work/go" && "$GO" vet . && "$GO" test -count=1 -c -o accelerator.test .)
  resolved=$(ldd "$work/go/accelerator.test" | awk '$1 == "libaccelerator.so.'"$so"'" { print $3 }')
  [ "$resolved" = "$lib/libaccelerator.so.$so" ] || fail "Go test binary loads libaccelerator from '$resolved'"
  (cd "$work/go" && ./accelerator.test -test.count=1) || fail "Go tests against the installed copy"
else
  fail "no Go toolchain at $GO"
fi
step "OK"

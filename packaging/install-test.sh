#!/usr/bin/env bash
# Installs into a temporary prefix (with DESTDIR) and builds against the
# installed copy through pkg-config alone: a C program (both headers when
# liblimiter is installed too) and the Go package. Run by `make install-test`
# (part of `make test-run`), from the repository root.
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

step "make install PREFIX=$prefix DESTDIR=$dest"
$MAKE -s --no-print-directory install PREFIX="$prefix" DESTDIR="$dest" >/dev/null

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

#!/bin/sh
# make replaces a build output by rename, never in place: a process that
# mapped the old library keeps its pages (a host that loaded
# build/libaccelerator_nvidia.so crashed when a rebuild copied over it).
# A copy in place keeps the file's inode; a rename gives the path a new one.
set -eu
MAKE=${MAKE:-make}
BUILD=${BUILD:-build}
libs="$BUILD/libaccelerator_stub.so $BUILD/libaccelerator.so $BUILD/liblimiter.so"
$MAKE -s "$BUILD/libaccelerator.so" limiter >/dev/null
before=$(for lib in $libs; do stat -c %i "$lib"; done)
# The library targets are FORCE: make copies them in again.
$MAKE -s "$BUILD/libaccelerator.so" limiter >/dev/null
fail=0
set -- $before
for lib in $libs; do
  if [ "$(stat -c %i "$lib")" = "$1" ]; then
    echo "FAIL: $lib was rewritten in place (same inode)"; fail=1
  else
    echo "ok: $lib replaced by rename"
  fi
  shift
done
if ls "$BUILD"/*.tmp.* >/dev/null 2>&1; then
  echo "FAIL: temporary files left in $BUILD"; fail=1
fi
exit $fail

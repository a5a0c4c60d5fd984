#!/bin/sh
# Usage: check_exports.sh LIB EXPECTED
# The library must export exactly the symbols listed in EXPECTED (one per
# line), and never `log`, which would interpose libm's log(double).
set -eu
lib=$1 expected=$2
actual=$(nm -D --defined-only "$lib" | awk '$2 ~ /^[TDBRV]$/ {print $3}' | sort)
if ! diff -u "$expected" - <<EOS
$actual
EOS
then
  echo "FAIL: $lib exports differ from $expected" >&2
  exit 1
fi
if printf '%s\n' "$actual" | grep -qx log; then
  echo "FAIL: $lib exports log" >&2
  exit 1
fi
echo "exports: $(printf '%s\n' "$actual" | wc -l) symbols of $lib match $expected"

#!/bin/sh
# System calls per host call (docs/scale.md): runs test_host_calls under
# strace (its main thread only) and counts the calls between each pair of
# markers it writes ("begin X" / "end X", writes to descriptor -1), per
# repetition. Fails when a host call makes more than the bound below: they
# must not grow with the node's 100 workers.
# Usage: check_host_calls.sh TEST_BINARY LIBLIMITER LIBACCELERATOR DEVICE_UUID
set -eu
trace=$(mktemp /tmp/accelerator-host-calls.XXXXXX)
trap 'rm -f "$trace"' EXIT
strace -o "$trace" -qq "$@"
reps=200
fail=0
for what in usage add v1 v2; do
  n=$(awk -v b="write(-1, \"begin $what\"" -v e="write(-1, \"end $what\"" '
    index($0, e) == 1 { on = 0 }
    on { n++ }
    index($0, b) == 1 { on = 1; n = 0 }
    END { print n + 0 }' "$trace")
  per=$(awk -v n="$n" -v r="$reps" 'BEGIN { printf "%.2f", n / r }')
  # The view's two reads of the kernel's notices (inotify, epoll) per call;
  # a report adds the vendor's own (constant) calls.
  case $what in usage | add) bound=2 ;; *) bound=4 ;; esac
  ok=$(awk -v p="$per" -v b="$bound" 'BEGIN { print (p <= b) ? "ok" : "FAIL" }')
  echo "host calls: $what: $per system calls per call at 100 workers (bound $bound) $ok"
  [ "$ok" = ok ] || fail=1
done
if [ "$fail" -ne 0 ]; then
  echo "the system calls between the markers:" >&2
  grep -v '^write(-1' "$trace" | sed 's/(.*//' | sort | uniq -c | sort -rn | head -20 >&2
fi
exit $fail

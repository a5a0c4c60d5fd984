#!/usr/bin/env bash
# Runs the probe against a library (default build/libaccelerator.so, the
# stub) in text, --json and --watch modes and checks what it prints.
# Usage: probe/test_probe.sh [PROBE] [LIBRARY]
set -euo pipefail
probe=${1:-build/probe}
lib=${2:-build/libaccelerator.so}
state=$(mktemp -d /tmp/accelerator-probe-test.XXXXXX)
trap 'rm -rf "$state"' EXIT
export ACCELERATOR_STATE_DIR=$state
fail() { echo "test_probe: FAIL: $*" >&2; exit 1; }

# Text: every section, every stub device.
out=$("$probe" "$lib")
for want in "vendor stub, ABI version 1" "== Devices ==" "== Topology ==" "== Metrics ==" \
            "== Extended metrics" "== Process compute usage ==" "== Process memory usage ==" \
            stub-device-0 stub-device-3 mig-1g.7gb mig-2g.14gb mig-3g.21gb NVLink; do
  grep -qF -- "$want" <<<"$out" || fail "text output lacks '$want'"
done

# JSON: one valid document with the documented schema.
"$probe" --json "$lib" > "$state/probe.json"
if command -v python3 >/dev/null; then
  python3 -m json.tool "$state/probe.json" > /dev/null || fail "--json is not valid JSON"
  python3 - "$state/probe.json" <<'PY' || fail "--json does not follow the schema"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["schema"] == "accelerator-probe/1"
assert d["vendor"] == "stub" and d["abiVersion"] == 1
for k in ("library", "devices", "topology", "metrics", "extendedMetrics", "processes", "workers"):
    assert k in d, k
assert [x["uuid"] for x in d["devices"]] == ["stub-device-%d" % i for i in range(4)]
for dev in d["devices"]:
    assert dev["vendor"] == "STUB" and dev["totalComputeUnits"] == 108
    assert {t["templateId"] for t in dev["partitionTemplates"]} == {"mig-1g.7gb", "mig-2g.14gb", "mig-3g.21gb"}
    assert len(dev["relatedDevices"]) == 3
    assert set(dev["properties"]) >= {"clockSM", "computeCapability"}
    assert set(dev["capabilities"]) >= {"supportsPartitioning", "maxPartitions"}
assert len(d["topology"]["devices"]) == 4
assert all(len(t["connections"]) == 3 for t in d["topology"]["devices"])
assert [m["deviceUUID"] for m in d["metrics"]] == [x["uuid"] for x in d["devices"]]
assert all(len(x["nvlinkBandwidthMBps"]) == 3 for x in d["extendedMetrics"])
assert isinstance(d["processes"]["compute"], list) and isinstance(d["processes"]["memory"], list)
PY
else
  echo "test_probe: python3 not found; JSON checked by the Go tests only" >&2
fi

# Watch: bounded by --count, one JSON document per line.
"$probe" --json --watch 0.1 --count 3 "$lib" > "$state/watch.json"
[ "$(wc -l < "$state/watch.json")" -eq 3 ] || fail "--watch --count 3 did not print 3 lines"
if command -v python3 >/dev/null; then
  python3 - "$state/watch.json" <<'PY' || fail "--watch --json lines do not follow the schema"
import json, sys
for n, line in enumerate(open(sys.argv[1])):
    s = json.loads(line)
    assert s["schema"] == "accelerator-probe-metrics/1" and s["sample"] == n
    assert len(s["metrics"]) == 4 and len(s["extendedMetrics"]) == 4 and s["timestamp"]
PY
fi
[ "$("$probe" --watch 0.1 --count 2 "$lib" | grep -c '^-- sample')" -eq 2 ] || fail "text --watch"

# Soft mode: a worker's request, limit and priority (set through the
# library, as a host would), in the table and in --json.
if command -v python3 >/dev/null; then
  python3 - "$lib" <<'PY' || fail "could not set a request, limit and priority"
import ctypes, sys
l = ctypes.CDLL(sys.argv[1])
assert l.SetComputeUnitHardLimit(b"probe-w", b"stub-device-1", 60) == 0
assert l.SetComputeUnitRequest(b"probe-w", b"stub-device-1", 30) == 0
assert l.SetWorkerPriority(b"probe-w", 70) == 0
PY
  out=$("$probe" "$lib")
  grep -q "== Worker shares (soft mode) ==" <<<"$out" || fail "text output lacks the worker shares"
  grep -Eq "^probe-w +stub-device-1 +30% +60% +70 +- +0\.0%$" <<<"$out" ||
    fail "worker shares row: $(grep probe-w <<<"$out")"
  "$probe" --json "$lib" > "$state/workers.json"
  python3 - "$state/workers.json" <<'PY' || fail "--json workers"
import json, sys
w = json.load(open(sys.argv[1]))["workers"]
assert w == [{"workerId": "probe-w", "deviceUUID": "stub-device-1", "requestPercent": 30,
              "limitPercent": 60, "priority": 70, "grantedBasisPoints": 0, "usedNs": 0,
              "sharePercent": 0.0}], w
PY
fi

# Errors: the Result name and the library's reason, non-zero exit.
if err=$(ACCELERATOR_VENDOR=no-such-vendor "$probe" "$lib" 2>&1 >/dev/null); then
  fail "a bad vendor did not fail"
fi
grep -q "RESULT_ERROR_INVALID_PARAM (1): .*no-such-vendor" <<<"$err" || fail "error output: $err"
if "$probe" --watch 0 "$lib" >/dev/null 2>&1; then fail "--watch 0 accepted"; fi
if "$probe" /nonexistent/libaccelerator.so >/dev/null 2>&1; then fail "missing library accepted"; fi
echo "test_probe: OK"

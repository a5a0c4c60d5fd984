#!/usr/bin/env bash
# The probe against the AMD build on the fake MI300X node: every GPU, its
# XGMI topology and its partition templates, in text and --json.
# Usage: vendors/amd/test_probe_amd.sh PROBE LIBRARY (with the AMD_ENV of
# vendors/amd/vendor.mk in the environment).
set -euo pipefail
probe=$1 lib=$2
fail() { echo "test_probe_amd: FAIL: $*" >&2; exit 1; }
out=$("$probe" "$lib")
for want in "vendor amd" "AMD Instinct MI300X" "type XGMI" "07ff74a1-0000-1000-8000-000000000007" \
            "CPX" "QPX" "DPX" "NPS4" "XGMI         64000 MB/s"; do
  grep -qF -- "$want" <<<"$out" || fail "text output lacks '$want'"
done
json=$("$probe" --json "$lib")
python3 - <<PY || fail "--json: the MI300X node is not what AMD SMI reports"
import json
d = json.loads('''$json''')
assert d["vendor"] == "amd"
devs = d["devices"]
assert len(devs) == 8, len(devs)
for dev in devs:
    assert dev["totalComputeUnits"] == 304 and dev["totalMemoryBytes"] == 192 << 30
    ids = [t["templateId"] for t in dev["partitionTemplates"]]
    assert ids == ["SPX", "DPX", "QPX", "CPX", "NPS1", "NPS4"], ids
    assert len(dev["relatedDevices"]) == 7
assert d["topology"]["topologyType"] == "XGMI", d["topology"]
assert all(len(t["connections"]) == 7 for t in d["topology"]["devices"])
PY
echo "test_probe_amd: ok"

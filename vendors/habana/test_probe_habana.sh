#!/usr/bin/env bash
# The probe against the habana build on the fake Gaudi 2 node: every
# device in HLML's order, no links HLML cannot tell, no templates, in text
# and --json.
# Usage: vendors/habana/test_probe_habana.sh PROBE LIBRARY TREE (with the
# environment of vendors/habana/vendor.mk's habana_env_v; TREE the PCI test
# tree of the Gaudi 2 node, c-tests/pci/mktrees.py).
set -euo pipefail
probe=$1 lib=$2 tree=$3
fail() { echo "test_probe_habana: FAIL: $*" >&2; exit 1; }
out=$("$probe" "$lib")
for want in "vendor habana" "HL-225" "type Unknown" "01P4-HL2080A0-15-TN0A95-02-07-02" \
            "power limit 600 W" "(no partition templates)" "Gen4 x16"; do
  grep -qF -- "$want" <<<"$out" || fail "text output lacks '$want'"
done
json=$("$probe" --json "$lib")
python3 - <<PY || fail "--json: the Gaudi 2 node is not what HLML reports"
import json
d = json.loads('''$json''')
assert d["vendor"] == "habana"
devs = d["devices"]
assert len(devs) == 8, len(devs)
for dev in devs:
    assert dev["totalMemoryBytes"] == 98304 << 20 and dev["totalComputeUnits"] == 0
    assert dev["partitionTemplates"] == [] and dev["relatedDevices"] == []
assert [dev["numaNode"] for dev in devs] == [0, 1, 0, 1, 0, 1, 1, 0], [dev["numaNode"] for dev in devs]
assert d["topology"]["topologyType"] == "Unknown", d["topology"]
PY
# On the node's PCI tree: each device matched to its PCI function by the bus
# id HLML gives (read through this release's hlml_pci_info_t), in HLML's order.
json=$(ACCELERATOR_SYSFS_ROOT=$tree "$probe" --json "$lib")
python3 - <<PY || fail "--json on the PCI tree: bus ids not matched"
import json
d = json.loads('''$json''')
got = [dev["pci"] and dev["pci"]["address"] for dev in d["devices"]]
assert got == ["0000:%s:00.0" % b for b in ("33", "9a", "19", "b3", "1a", "4d", "b4", "34")], got
PY
echo "test_probe_habana: ok"


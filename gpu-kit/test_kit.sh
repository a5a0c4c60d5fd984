#!/bin/sh
# The GPU kit in fake mode (part of `make test`): the same run.sh a GPU
# machine runs, against the fake NVML/CUDA, plus the cases where something
# cannot be measured and one where the library disagrees with the driver.
# Usage: test_kit.sh KIT_DIR FAKE_DIR OLD_DRIVER_FAKE_DIR STUB_LIBRARY
set -u
kit=$1 fakes=$(cd "$2" && pwd) old=$(cd "$3" && pwd) stub=$(cd "$(dirname "$4")" && pwd)/$(basename "$4")
tmp=$(mktemp -d /tmp/gpu-kit-test.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail=0 pass=0
check() { # description, then a command that must succeed
  what=$1; shift
  if "$@"; then pass=$((pass + 1)); else echo "FAIL: $what" >&2; fail=$((fail + 1)); fi
}
# report field: python expression over r (the report) must be true
report_is() {
  python3 - "$1" "$2" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
ok = eval(sys.argv[2], {"r": r, "s": r["sections"]})
if not ok:
    print("report check failed:", sys.argv[2], file=sys.stderr)
    print(json.dumps({k: r.get(k) for k in ("status", "reason", "problems")}), file=sys.stderr)
sys.exit(0 if ok else 1)
PY
}
run_kit() { # out dir, expected exit status, [VAR=value ...] -- run.sh arguments (kit: $kit_dir or $kit)
  out=$1 want=$2; shift 2
  vars=""
  while [ "$1" != "--" ]; do vars="$vars $1"; shift; done
  shift
  # shellcheck disable=SC2086 # the VAR=value words are meant to split
  env $vars "${kit_dir:-$kit}/run.sh" --out "$out" "$@" > "$out.log" 2>&1
  got=$?
  [ "$got" = "$want" ] || { echo "run.sh $* exited $got, want $want:" >&2; cat "$out.log" >&2; return 1; }
}

# 1. Everything measurable, against the fakes.
start=$(date +%s)
check "fake run passes" run_kit "$tmp/fake" 0 -- --fake "$fakes"
echo "gpu-kit fake run: $(( $(date +%s) - start )) s"
r=$tmp/fake/report.json
check "status pass" report_is "$r" 'r["status"] == "pass" and r["mode"].startswith("fake")'
check "discovery rows all match" report_is "$r" \
  's["discovery"]["mismatches"] == 0 and sum(x["result"] == "match" for x in s["discovery"]["rows"]) >= 30'
check "partition templates with SM counts compared" report_is "$r" \
  'any(x["field"] == "template 7g.80gb SMs" and x["library"] == 132 and x["result"] == "match" for x in s["discovery"]["rows"])'
check "MIG enabled with no instances is reported" report_is "$r" \
  'any("MIG enabled with no instances" in x["result"] for x in s["discovery"]["rows"])'
check "metrics cost: ratio from medians of 1,000" report_is "$r" \
  's["metrics"]["cost"]["GetDeviceMetrics"]["ratio_to_raw"] > 0 and s["metrics"]["cost"]["raw_nvml"]["median_ns"] > 0'
check "AccelGetDeviceMetrics measured or said absent" report_is "$r" \
  'isinstance(s["metrics"]["cost"]["AccelGetDeviceMetrics"], dict) or "symbol absent" in s["metrics"]["cost"]["AccelGetDeviceMetrics"]'
check "metric values compared" report_is "$r" 'all(x["result"] == "match" for x in s["metrics"]["values"])'
check "GPM under the kit's load" report_is "$r" \
  's["metrics"]["gpm_under_load"]["status"] == "measured" and s["metrics"]["gpm_under_load"]["load"]["launches"] > 0'
check "snapshot/resume with checksum intact" report_is "$r" \
  's["snapshot"]["status"] == "measured" and s["snapshot"]["checksum_intact"] and s["snapshot"]["library"]["snapshot_rc"] == 0 and all(v["rc"] == 0 for v in s["snapshot"]["raw"].values())'
# The fake driver's device 0 is the fake NVML's A40 (NVML index 1): the limit
# goes on the device CUDA runs on, not on the first one NVML lists.
check "limits: the hook holds the memory limit" report_is "$r" \
  's["limits"]["status"] == "measured" and s["limits"]["memory_limit"] == "match" and s["limits"]["device"].endswith("a4") and s["limits"]["runs"]["beyond"]["meminfo"]["alloc_result"] == 2'
# Compute limits: the kit's load under the hook on the simulated device,
# read through the fake NVML's per-process utilization.
check "limits: compute accuracy at 30 % and 70 % within ±5 (time to converge reported)" report_is "$r" \
  '(lambda c: c["status"] == "measured" and [x["limit"] for x in c["rows"]] == [30, 70] and all(x["result"] == "match" and abs(x["error"]) <= 5 and "converged_in_s" in x and x["load"]["launches"] > 0 for x in c["rows"]))(s["limits"]["compute_limit"])'
check "limits: a host sampler process ran the closed loop (AccelInit)" report_is "$r" \
  's["limits"]["compute_limit"]["host_sampler"]["accel_init_rc"] == 0 and s["limits"]["compute_limit"]["host_sampler"]["exit"] == 0'
check "report.md has the compute table" grep -q "^| 70 % | .* | match |$" "$tmp/fake/report.md"
check "report.md says fake mode" grep -q "Fake mode" "$tmp/fake/report.md"

# 2. No driver at all.
check "no driver: exit 0" run_kit "$tmp/nodriver" 0 KIT_NVML_PATH=/nonexistent/libnvidia-ml.so.1 -- --fake "$fakes"
check "no driver: not available" report_is "$tmp/nodriver/report.json" \
  'r["status"] == "not available" and "no NVIDIA driver" in r["reason"]'
# 3. A driver whose NVML does not start (no GPU reachable).
check "nvmlInit fails: exit 0" run_kit "$tmp/noinit" 0 FAKE_NVML_FAIL=nvmlInit_v2 -- --fake "$fakes"
check "nvmlInit fails: not available" report_is "$tmp/noinit/report.json" \
  'r["status"] == "not available" and "NVML does not start" in r["reason"]'
# 4. An older driver without the checkpoint API.
check "old driver: exit 0" run_kit "$tmp/old" 0 -- --fake "$old"
check "old driver: snapshot not measured, reason given" report_is "$tmp/old/report.json" \
  'r["status"] == "pass" and s["snapshot"]["status"] == "not measured" and "r570" in s["snapshot"]["reason"]'
# 5. MIG on with no instance: CUDA sees no device, so the CUDA parts cannot run.
check "no CUDA device: exit 0" run_kit "$tmp/nodev" 0 FAKE_CUDA_NO_DEVICE=1 -- --fake "$fakes"
check "no CUDA device: load, snapshot and limits not measured, reason given" report_is "$tmp/nodev/report.json" \
  'r["status"] == "pass" and s["snapshot"]["status"] == "not measured" and "MIG mode on" in s["snapshot"]["reason"] and s["metrics"]["gpm_under_load"]["status"] == "not measured" and s["limits"]["status"] == "not measured" and "MIG mode on" in s["limits"]["reason"]'
# 5b. A hook without launch throttling (here liblimiter.so in its place: no
# cuLaunchKernel): compute not measured, with the reason. Its memory limit
# is not held either, so this run exits 1.
mkdir -p "$tmp/nothrottle-kit"
for f in "$(cd "$kit" && pwd)"/*; do ln -s "$f" "$tmp/nothrottle-kit/"; done
ln -sf "$(cd "$kit" && pwd)/liblimiter.so" "$tmp/nothrottle-kit/libcuda_limiter.so"
kit_dir=$tmp/nothrottle-kit
check "hook without launch throttling: runs" run_kit "$tmp/nothrottle" 1 -- --fake "$fakes"
kit_dir=
check "hook without launch throttling: compute not measured, reason given" report_is "$tmp/nothrottle/report.json" \
  's["limits"]["compute_limit"]["status"] == "not measured" and "no launch throttling" in s["limits"]["compute_limit"]["reason"]'
# 5c. NVML without per-process utilization: compute not measured, exit 0.
check "no per-process utilization: exit 0" run_kit "$tmp/noputil" 0 \
  FAKE_NVML_FAIL=nvmlDeviceGetProcessUtilization -- --fake "$fakes"
check "no per-process utilization: compute not measured, reason given" report_is "$tmp/noputil/report.json" \
  'r["status"] == "pass" and s["limits"]["memory_limit"] == "match" and s["limits"]["compute_limit"]["status"] == "not measured" and "nvmlDeviceGetProcessUtilization returned 999" in s["limits"]["compute_limit"]["reason"]'
# 6. A library that disagrees with the driver: non-zero.
check "wrong library: exit 1" run_kit "$tmp/wrong" 1 ACCELERATOR_VENDOR=stub -- --fake "$fakes" --lib "$stub"
check "wrong library: mismatch rows" report_is "$tmp/wrong/report.json" \
  'r["status"] == "mismatch" and s["discovery"]["mismatches"] > 0'

# 7. The kit never changes device state, and the guard notices when it would.
check "kit has no device-changing call" "$kit/check_forbidden.sh" "$kit"
mkdir -p "$tmp/planted"
cp "$kit/kit.py" "$kit/run.sh" "$tmp/planted/"
echo 'nv.call("nvmlDeviceSetPowerManagementLimit", h, 300000)' >> "$tmp/planted/kit.py"
check "guard catches an NVML setter" sh -c "! '$kit/check_forbidden.sh' '$tmp/planted' >/dev/null 2>&1"
cp "$kit/kit.py" "$tmp/planted/"
echo 'nvidia-smi -i 0 -pl 300' >> "$tmp/planted/run.sh"
check "guard catches nvidia-smi -pl" sh -c "! '$kit/check_forbidden.sh' '$tmp/planted' >/dev/null 2>&1"

echo "gpu-kit fake mode: $pass passed, $fail failed"
[ "$fail" = 0 ]

#!/usr/bin/env python3
"""GPU verification kit: compares what libaccelerator_nvidia.so reports with
what the driver reports directly, and measures its costs beside the raw
driver calls. Standard library and ctypes only; PyTorch is used if present.

THIS KIT NEVER CHANGES DEVICE STATE: it does not change MIG mode, clocks,
power limits, persistence mode, application clocks or ECC, and never resets
a device. It only reads through NVML and nvidia-smi queries, runs a CUDA
load, and checkpoints/restores its own CUDA process. `check_forbidden.sh`
(run in CI) greps the kit for calls that would.

Usage: run.sh [--out DIR] [--fake FAKE_DIR]
Exit status: 0 when everything measured matched (sections that could not be
measured say why: no driver, no GPU, no checkpoint API, ...), 1 on a
mismatch or a failure of the library, 2 on a usage error.
"""

import ctypes
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time

import kit_compute

KIT = os.path.dirname(os.path.abspath(__file__))
MIB = 1 << 20


def argument(name, default=None):
    if name in sys.argv:
        i = sys.argv.index(name)
        if i + 1 >= len(sys.argv):
            sys.exit(f"{name} needs a value")
        return sys.argv[i + 1]
    return default


FAKE = argument("--fake")
OUT = os.path.abspath(argument("--out", os.path.join(KIT, "out")))
LIB = argument("--lib", os.path.join(KIT, "libaccelerator_nvidia.so"))
if FAKE:
    FAKE = os.path.abspath(FAKE)
    NVML_PATH = os.environ.get("KIT_NVML_PATH", os.path.join(FAKE, "libnvidia-ml.so.1"))
    CUDA_PATH = os.environ.get("KIT_CUDA_PATH", os.path.join(FAKE, "libcuda.so.1"))
    HOLD_BYTES = 256 * MIB
    LOAD_SECONDS = 1.0
    # Compute limits: converge, then measure, read in windows (test_compute's).
    COMPUTE_TIMINGS = {"converge_s": 2.0, "measure_s": 2.0, "window_s": 0.25}
else:
    NVML_PATH = os.environ.get("KIT_NVML_PATH", "libnvidia-ml.so.1")
    CUDA_PATH = os.environ.get("KIT_CUDA_PATH", "libcuda.so.1")
    HOLD_BYTES = 4 << 30
    LOAD_SECONDS = 5.0
    # Longer than in fake mode: the spin kernel takes milliseconds, far from the
    # hook's 50 us launch estimate, so its gain has further to go, and NVML's
    # per-process samples come less often than the fake's.
    COMPUTE_TIMINGS = {"converge_s": 5.0, "measure_s": 4.0, "window_s": 0.5}
STATE_DIR = tempfile.mkdtemp(prefix="gpu-kit-state.")
ENV = dict(os.environ)
ENV.update({
    "ACCELERATOR_VENDOR": ENV.get("ACCELERATOR_VENDOR", "nvidia"),
    "ACCELERATOR_NVML_PATH": NVML_PATH,
    "ACCELERATOR_CUDA_PATH": CUDA_PATH,
    "KIT_CUDA_PATH": CUDA_PATH,
    # CUDA device 0 must be NVML's index 0, the device the kit measures.
    "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
    "ACCELERATOR_STATE_DIR": STATE_DIR,
    "ACCELERATOR_LOG": ENV.get("ACCELERATOR_LOG", "warn"),
})
if FAKE:
    # The fake driver's simulated device: kernels of every process serialize on
    # it (FAKE_KERNEL_US each) and the fake NVML reports per-process
    # utilization from it. Set here too: this process reads that NVML.
    ENV.update({"FAKE_GPU_TIMELINE": os.path.join(STATE_DIR, "timeline"), "FAKE_KERNEL_US": "100"})
    os.environ["FAKE_GPU_TIMELINE"] = ENV["FAKE_GPU_TIMELINE"]

report = {
    "schema": "gpu-kit/1",
    "mode": "fake (c-tests/fakes, not a GPU)" if FAKE else "real",
    "date_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
    "host": platform.node(),
    "library": LIB,
    "nvml": NVML_PATH,
    "cuda": CUDA_PATH,
    "sections": {},
}
problems = []  # mismatches and failures of ours: non-zero exit


def section(name, status, reason=None, **rest):
    s = {"status": status}
    if reason:
        s["reason"] = reason
    s.update(rest)
    report["sections"][name] = s
    return s


def run(args, timeout=120, **kw):
    return subprocess.run(args, env=ENV, capture_output=True, text=True, timeout=timeout, **kw)


# ---------------------------------------------------------------- NVML

class NVML:
    """The read-only NVML calls the kit compares against."""

    def __init__(self, path):
        self.lib = ctypes.CDLL(path)
        r = self.lib.nvmlInit_v2()
        if r != 0:
            raise RuntimeError(f"nvmlInit_v2 returned {r}")

    def call(self, name, *args):
        f = getattr(self.lib, name, None)
        if f is None:
            return None, "symbol absent"
        r = f(*args)
        return r, None

    def driver_version(self):
        buf = ctypes.create_string_buffer(96)
        r, _ = self.call("nvmlSystemGetDriverVersion", buf, ctypes.c_uint(96))
        return buf.value.decode() if r == 0 else None

    def count(self):
        n = ctypes.c_uint(0)
        r, _ = self.call("nvmlDeviceGetCount_v2", ctypes.byref(n))
        return n.value if r == 0 else 0

    def handle(self, index):
        h = ctypes.c_void_p()
        r, _ = self.call("nvmlDeviceGetHandleByIndex_v2", ctypes.c_uint(index), ctypes.byref(h))
        return h if r == 0 else None

    def text(self, name, h, size=96):
        buf = ctypes.create_string_buffer(size)
        r, _ = self.call(name, h, buf, ctypes.c_uint(size))
        return buf.value.decode() if r == 0 else None

    def uint(self, name, h, *pre):
        v = ctypes.c_uint(0)
        r, _ = self.call(name, h, *pre, ctypes.byref(v))
        return v.value if r == 0 else None

    def two_ints(self, name, h):
        a, b = ctypes.c_int(0), ctypes.c_int(0)
        r, _ = self.call(name, h, ctypes.byref(a), ctypes.byref(b))
        return (a.value, b.value) if r == 0 else None

    def memory_total(self, h):
        m = (ctypes.c_ulonglong * 3)()
        r, _ = self.call("nvmlDeviceGetMemoryInfo", h, m)
        return m[0] if r == 0 else None

    def pci_bus_id(self, h):
        class Pci(ctypes.Structure):
            _fields_ = [("busIdLegacy", ctypes.c_char * 16), ("domain", ctypes.c_uint),
                        ("bus", ctypes.c_uint), ("device", ctypes.c_uint),
                        ("pciDeviceId", ctypes.c_uint), ("pciSubSystemId", ctypes.c_uint),
                        ("busId", ctypes.c_char * 32)]
        p = Pci()
        r, _ = self.call("nvmlDeviceGetPciInfo_v3", h, ctypes.byref(p))
        return p.busId.decode() if r == 0 else None

    def gi_profile(self, h, profile):
        """nvmlGpuInstanceProfileInfo_v2_t of one profile id, or None."""
        class Info(ctypes.Structure):
            _fields_ = [("version", ctypes.c_uint), ("id", ctypes.c_uint),
                        ("isP2pSupported", ctypes.c_uint), ("sliceCount", ctypes.c_uint),
                        ("instanceCount", ctypes.c_uint), ("multiprocessorCount", ctypes.c_uint),
                        ("copyEngineCount", ctypes.c_uint), ("decoderCount", ctypes.c_uint),
                        ("encoderCount", ctypes.c_uint), ("jpegCount", ctypes.c_uint),
                        ("ofaCount", ctypes.c_uint), ("memorySizeMB", ctypes.c_ulonglong),
                        ("name", ctypes.c_char * 96)]
        info = Info()
        info.version = ctypes.sizeof(Info) | (2 << 24)
        r, _ = self.call("nvmlDeviceGetGpuInstanceProfileInfoV", h, ctypes.c_uint(profile),
                         ctypes.byref(info))
        return info if r == 0 else None

    def gpu_instances(self, h, profile, max_count):
        arr = (ctypes.c_void_p * max(max_count, 1))()
        n = ctypes.c_uint(0)
        r, _ = self.call("nvmlDeviceGetGpuInstances", h, ctypes.c_uint(profile), arr, ctypes.byref(n))
        return n.value if r == 0 else None

    def utilization(self, h):
        u = (ctypes.c_uint * 2)()
        r, _ = self.call("nvmlDeviceGetUtilizationRates", h, u)
        return u[0] if r == 0 else None


def nvidia_smi():
    """Fields of `nvidia-smi --query-gpu` per GPU index, or a reason."""
    if FAKE:
        return None, "not used in fake mode (it would read the real driver)"
    exe = shutil.which("nvidia-smi")
    if not exe:
        return None, "nvidia-smi not found"
    fields = ["index", "name", "uuid", "pci.bus_id", "memory.total", "compute_cap",
              "clocks.max.graphics", "clocks.max.sm", "clocks.max.memory",
              "power.limit", "mig.mode.current", "driver_version", "vbios_version"]
    p = run([exe, "--query-gpu=" + ",".join(fields), "--format=csv,noheader,nounits"], timeout=60)
    if p.returncode != 0:
        return None, f"nvidia-smi failed: {p.stderr.strip() or p.stdout.strip()}"
    rows = {}
    for line in p.stdout.strip().splitlines():
        vals = [v.strip() for v in line.split(",")]
        if len(vals) == len(fields):
            rows[int(vals[0])] = dict(zip(fields, vals))
    return rows, None


def compare(rows, device, field, ours, nvml, smi=None, same=None):
    """A discovery row: match when every present direct reading agrees with ours."""
    same = same or (lambda a, b: str(a) == str(b))
    direct = [v for v in (nvml, smi) if v is not None]
    if not direct:
        result = "unverified (no direct reading)"
    elif all(same(ours, v) for v in direct):
        result = "match"
    else:
        result = "mismatch"
        problems.append(f"discovery: device {device} {field}: library {ours!r}, NVML {nvml!r}, nvidia-smi {smi!r}")
    rows.append({"device": device, "field": field, "library": ours, "nvml": nvml,
                 "nvidia_smi": smi, "result": result})


def near(tolerance):
    def f(a, b):
        try:
            return abs(float(a) - float(b)) <= tolerance
        except (TypeError, ValueError):
            return False
    return f


def discovery(nv, devices):
    rows = []
    smi, smi_reason = nvidia_smi()
    for d in devices:
        i = d["index"]
        h = nv.handle(i)
        s = (smi or {}).get(i, {})
        props = d.get("properties", {})
        compare(rows, i, "name", d["model"], nv.text("nvmlDeviceGetName", h), s.get("name"))
        compare(rows, i, "uuid", d["uuid"], nv.text("nvmlDeviceGetUUID", h), s.get("uuid"))
        compare(rows, i, "driver", d["driverVersion"], nv.driver_version(), s.get("driver_version"))
        compare(rows, i, "vbios", d["firmwareVersion"], nv.text("nvmlDeviceGetVbiosVersion", h),
                s.get("vbios_version"))
        mem = nv.memory_total(h)
        compare(rows, i, "memory MiB", d["totalMemoryBytes"] // MIB, None if mem is None else mem // MIB,
                s.get("memory.total"), near(1))
        rows.append({"device": i, "field": "PCI bus id", "library": "(not in the v1 probe output)",
                     "nvml": nv.pci_bus_id(h), "nvidia_smi": s.get("pci.bus_id"), "result": "info"})
        cc = nv.two_ints("nvmlDeviceGetCudaComputeCapability", h)
        compare(rows, i, "compute capability", props.get("computeCapability"),
                None if cc is None else f"{cc[0]}.{cc[1]}", s.get("compute_cap"))
        for key, clock, smi_key in (("clockGraphics", 0, "clocks.max.graphics"),
                                    ("clockSM", 1, "clocks.max.sm"), ("clockMem", 2, "clocks.max.memory")):
            compare(rows, i, f"max clock {key}", props.get(key),
                    nv.uint("nvmlDeviceGetMaxClockInfo", h, ctypes.c_int(clock)), s.get(smi_key), near(0))
        limit = nv.uint("nvmlDeviceGetEnforcedPowerLimit", h)
        compare(rows, i, "power limit W", props.get("powerLimit"), None if limit is None else limit // 1000,
                s.get("power.limit"), near(1))
        compare(rows, i, "slowdown temperature C", props.get("temperatureThreshold"),
                nv.uint("nvmlDeviceGetTemperatureThreshold", h, ctypes.c_int(1)), None, near(0))
        compare(rows, i, "PCIe max generation", d["pcieGen"],
                nv.uint("nvmlDeviceGetMaxPcieLinkGeneration", h), None, near(0))
        compare(rows, i, "PCIe max width", d["pcieWidth"], nv.uint("nvmlDeviceGetMaxPcieLinkWidth", h), None,
                near(0))
        ecc = nv.two_ints("nvmlDeviceGetEccMode", h)
        compare(rows, i, "ECC enabled", props.get("eccEnabled"), None if ecc is None else ecc[0] == 1)
        pm = nv.uint("nvmlDeviceGetPersistenceMode", h)
        compare(rows, i, "persistence mode", props.get("persistenceModeEnabled"), None if pm is None else pm == 1)
        numa = nv.uint("nvmlDeviceGetNumaNodeId", h)
        compare(rows, i, "NUMA node", d.get("numaNode"), -1 if numa is None else numa)
        mig = nv.two_ints("nvmlDeviceGetMigMode", h)
        mig_on = bool(mig and mig[0] == 1)
        caps = d.get("capabilities", {})
        smi_mig = s.get("mig.mode.current")
        # The library offers MIG partitions exactly when MIG mode is on.
        compare(rows, i, "MIG mode on (library: partitioning offered)", caps.get("supportsPartitioning", False),
                mig_on if mig is not None else False,
                None if smi_mig is None else smi_mig.lower() == "enabled")
        instances = 0
        for t in d.get("partitionTemplates", []):
            desc = t.get("description", "")
            pid = int(desc.rsplit("profile ", 1)[1].rstrip(")")) if "profile " in desc else None
            info = nv.gi_profile(h, pid) if pid is not None else None
            name = None if info is None else info.name.decode().removeprefix("MIG ")
            compare(rows, i, f"template {t['templateId']} name", t["name"], name)
            compare(rows, i, f"template {t['templateId']} SMs", t["computeUnits"],
                    None if info is None else info.multiprocessorCount, None, near(0))
            compare(rows, i, f"template {t['templateId']} memory MiB", t["memoryBytes"] // MIB,
                    None if info is None else info.memorySizeMB, None, near(0))
            if info is not None and instances is not None:
                n = nv.gpu_instances(h, pid, info.instanceCount)
                instances = None if n is None else instances + n
        sms = [t["computeUnits"] for t in d.get("partitionTemplates", [])]
        if sms:  # the full-GPU profile's SMs are the device's SM count
            compare(rows, i, "SM count (largest MIG profile)", d["totalComputeUnits"], max(sms), None, near(0))
        if mig_on:
            note = {0: " (MIG enabled with no instances)", None: " (NVML would not list them: permissions?)"}
            rows.append({"device": i, "field": "MIG GPU instances existing", "library": "-",
                         "nvml": instances, "nvidia_smi": None, "result": "info" + note.get(instances, "")})
    torch = torch_rows(devices)
    rows.extend(torch["rows"])
    bad = sum(r["result"] == "mismatch" for r in rows)
    return section("discovery", "measured", rows=rows, mismatches=bad,
                   nvidia_smi=smi_reason or "used", pytorch=torch["status"])


def torch_rows(devices):
    """PyTorch, where installed, as a third reader of name and memory."""
    code = ("import json,torch\n"
            "ok=torch.cuda.is_available()\n"
            "print(json.dumps({'version':torch.__version__,'cuda':ok,"
            "'devices':[{'name':torch.cuda.get_device_name(i),'memory':torch.cuda.get_device_properties(i)"
            ".total_memory} for i in range(torch.cuda.device_count())] if ok else []}))")
    try:
        p = run([sys.executable, "-"], timeout=120, input=code)
    except (OSError, subprocess.TimeoutExpired) as e:
        return {"status": f"not used: {e}", "rows": []}
    if p.returncode != 0:
        return {"status": "not installed here (optional): its cross-check is skipped", "rows": []}
    t = json.loads(p.stdout.strip().splitlines()[-1])
    rows = []
    if FAKE:
        return {"status": f"installed ({t['version']}) but not used in fake mode", "rows": []}
    for d in devices:
        if d["index"] < len(t["devices"]):
            td = t["devices"][d["index"]]
            compare(rows, d["index"], "name (PyTorch)", d["model"], td["name"])
            compare(rows, d["index"], "memory MiB (PyTorch)", d["totalMemoryBytes"] // MIB, td["memory"] // MIB,
                    None, near(1))
    return {"status": f"used ({t['version']}, CUDA available: {t['cuda']})", "rows": rows}


# ------------------------------------------------------------- metrics

class DeviceMetrics(ctypes.Structure):
    _fields_ = [("deviceUUID", ctypes.c_char * 64), ("powerUsageWatts", ctypes.c_double),
                ("temperatureCelsius", ctypes.c_double), ("pcieRxBytes", ctypes.c_uint64),
                ("pcieTxBytes", ctypes.c_uint64), ("smActivePercent", ctypes.c_uint32),
                ("tensorCoreUsagePercent", ctypes.c_uint32), ("memoryUsedBytes", ctypes.c_uint64),
                ("memoryTotalBytes", ctypes.c_uint64)]


def metrics(nv, dev):
    uuid = dev["uuid"]
    p = run([os.path.join(KIT, "kit_lib"), "metrics", LIB, NVML_PATH, uuid], timeout=300)
    if p.returncode != 0:
        problems.append(f"metrics: kit_lib failed: {p.stdout.strip()} {p.stderr.strip()}")
        return section("metrics", "failed", p.stdout.strip() + p.stderr.strip())
    m = json.loads(p.stdout)
    cost = m["cost"]
    raw = cost["raw_nvml"]["median_ns"]
    cost["GetDeviceMetrics"]["ratio_to_raw"] = round(cost["GetDeviceMetrics"]["median_ns"] / raw, 2)
    if "AccelGetDeviceMetrics" in cost:
        cost["AccelGetDeviceMetrics"]["ratio_to_raw"] = round(cost["AccelGetDeviceMetrics"]["median_ns"] / raw, 2)
    else:
        cost["AccelGetDeviceMetrics"] = "not measured: symbol absent (library without the v2 ABI)"
    if m["call_failures"]:
        problems.append(f"metrics: {m['call_failures']} failed calls while timing")
    lib, raw_v = m["library"], m["nvml"]
    rows = []
    # Readings taken back to back: exact for totals, a tolerance for live values.
    compare(rows, dev["index"], "memory total bytes", lib["memoryTotalBytes"], raw_v["memoryTotalBytes"])
    compare(rows, dev["index"], "memory used MiB (+-64)", lib["memoryUsedBytes"] // MIB,
            raw_v["memoryUsedBytes"] // MIB, None, near(64))
    compare(rows, dev["index"], "power W (+-10 %)", lib["powerUsageWatts"], raw_v["powerUsageWatts"], None,
            near(max(5.0, raw_v["powerUsageWatts"] * 0.1)))
    compare(rows, dev["index"], "temperature C (+-2)", lib["temperatureCelsius"], raw_v["temperatureCelsius"],
            None, near(2))
    for k in ("pcieRxBytes", "pcieTxBytes"):
        ok = lib[k] <= raw_v[k]  # counters, NVML read afterwards
        rows.append({"device": dev["index"], "field": f"{k} (counter, <= NVML read after)", "library": lib[k],
                     "nvml": raw_v[k], "nvidia_smi": None, "result": "match" if ok else "mismatch"})
        if not ok:
            problems.append(f"metrics: {k} {lib[k]} above NVML's later reading {raw_v[k]}")
    gpm = gpm_under_load(nv, dev)
    return section("metrics", "measured", cost=cost, values=rows, accel=m.get("accel"), gpm_under_load=gpm)


def library_metrics(lib, uuid):
    m = DeviceMetrics()
    arr = (ctypes.c_char_p * 1)(uuid.encode())
    rc = lib.GetDeviceMetrics(arr, ctypes.c_size_t(1), ctypes.byref(m))
    return rc, m


def library():
    """The library under test in this process, configured as its subprocesses are."""
    os.environ.update({k: ENV[k] for k in ("ACCELERATOR_VENDOR", "ACCELERATOR_NVML_PATH",
                                           "ACCELERATOR_CUDA_PATH", "ACCELERATOR_STATE_DIR")})
    return ctypes.CDLL(LIB)


def gpm_under_load(nv, dev):
    lib = library()
    h = nv.handle(dev["index"])
    library_metrics(lib, dev["uuid"])
    time.sleep(0.3)
    _, idle = library_metrics(lib, dev["uuid"])
    load = subprocess.Popen([os.path.join(KIT, "kit_cuda"), "load", str(LOAD_SECONDS + 2)], env=ENV,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(min(1.5, LOAD_SECONDS / 2))
    library_metrics(lib, dev["uuid"])
    time.sleep(min(1.0, LOAD_SECONDS / 2))
    _, busy = library_metrics(lib, dev["uuid"])
    nvml_busy = nv.utilization(h)
    out, err = load.communicate(timeout=120)
    if load.returncode in (3, 4):
        return {"status": "not measured", "reason": unavailable(out)}
    if load.returncode != 0:
        problems.append(f"GPM: the load program failed: {out.strip()} {err.strip()}")
        return {"status": "failed", "reason": out.strip() + err.strip()}
    result = {"status": "measured", "load": json.loads(out.strip().splitlines()[-1])["load"],
              "idle": {"smActivePercent": idle.smActivePercent, "tensorCoreUsagePercent": idle.tensorCoreUsagePercent},
              "under_load": {"smActivePercent": busy.smActivePercent,
                             "tensorCoreUsagePercent": busy.tensorCoreUsagePercent,
                             "nvml_utilization_gpu": nvml_busy}}
    if FAKE:
        result["note"] = "fake NVML: constant GPM figures, no real load"
    elif busy.smActivePercent < 50:
        problems.append(f"GPM: SM active {busy.smActivePercent} % under a kernel on every SM")
        result["result"] = "mismatch: SM active below 50 % under full load"
    else:
        result["result"] = "match: SM active >= 50 % under full load"
    return result


def unavailable(out):
    """kit_cuda's reason for exit 3 (no driver) or 4 (no device)."""
    try:
        j = json.loads(out.strip().splitlines()[-1])
        return j.get("unavailable") or f"no CUDA driver: {j.get('error')}"
    except (ValueError, IndexError):
        return out.strip()


# ------------------------------------------------------------ snapshot

def snapshot(dev):
    if not dev.get("capabilities", {}).get("supportsSnapshot"):
        return section("snapshot", "not measured",
                       "the library reports no snapshot support on this device (no CUDA driver, or a driver "
                       "without the checkpoint API: r570 / CUDA 12.8 or newer needed)")
    try:
        cuda = ctypes.CDLL(CUDA_PATH)
    except OSError as e:
        return section("snapshot", "not measured", f"no CUDA driver: {e}")
    if not hasattr(cuda, "cuCheckpointProcessLock"):
        return section("snapshot", "not measured", "the CUDA driver has no checkpoint API (needs r570+)")
    holder = subprocess.Popen([os.path.join(KIT, "kit_cuda"), "hold", str(HOLD_BYTES)], env=ENV,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        ready = holder.stdout.readline().split()
        if ready and ready[0].startswith('{"unavailable"'):
            return section("snapshot", "not measured", unavailable(" ".join(ready)))
        if not ready or ready[0] != "READY":
            problems.append(f"snapshot: the holder did not start: {ready} {holder.stderr.read()}")
            return section("snapshot", "failed", f"holder: {ready}")
        pid, checksum, held = int(ready[1]), ready[2], int(ready[3])
        env = dict(ENV)
        env["FAKE_CUDA_PIDS"] = str(pid)  # read by the fake driver only
        p = subprocess.run([os.path.join(KIT, "kit_lib"), "snapshot", LIB, CUDA_PATH, str(pid), dev["uuid"]],
                           env=env, capture_output=True, text=True, timeout=300)
        if p.returncode != 0:
            problems.append(f"snapshot: kit_lib failed: {p.stdout} {p.stderr}")
            return section("snapshot", "failed", p.stdout + p.stderr)
        r = json.loads(p.stdout)
        holder.stdin.write("verify\n")
        holder.stdin.flush()
        verify = holder.stdout.readline().split()
    finally:
        holder.stdin.close()
        holder.wait(timeout=120)
    intact = len(verify) == 3 and verify[1] == checksum and verify[2] == "ok"
    lib = r["library"]
    ok = lib["snapshot_rc"] == 0 and lib["resume_rc"] == 0 and intact
    if not ok:
        problems.append(f"snapshot: library {lib}, checksum {'intact' if intact else 'CHANGED'}")
    gib = held / (1 << 30)
    return section("snapshot", "measured", held_bytes=held, checksum=checksum,
                   checksum_after=verify[1] if len(verify) > 1 else None, checksum_intact=intact,
                   library=lib, raw=r["raw"],
                   throughput_gib_s={"snapshot": round(gib / (lib["snapshot_ms"] / 1e3), 2) if lib["snapshot_ms"] else None,
                                     "resume": round(gib / (lib["resume_ms"] / 1e3), 2) if lib["resume_ms"] else None},
                   result="match" if ok else "failure")


# -------------------------------------------------------------- limits

def kit_cuda(*args, env=None):
    """Run kit_cuda; its last JSON line, or None when it could not run (the reason in unavailable)."""
    p = subprocess.run([os.path.join(KIT, "kit_cuda"), *args], env=env or ENV, capture_output=True, text=True,
                       timeout=120)
    if p.returncode in (3, 4):
        return None, unavailable(p.stdout)
    lines = p.stdout.strip().splitlines()
    return (json.loads(lines[-1]) if lines else {"error": p.stderr.strip()}), None


def limits(nv, devices):
    hook = os.path.join(KIT, "libcuda_limiter.so")
    if not os.path.exists(hook):
        return section("limits", "not measured", "hook library absent (libcuda_limiter.so not in the kit)")
    # The hook names a device by the UUID the CUDA driver gives it: the limit
    # goes on the device the kit's CUDA program runs on (CUDA device 0).
    got, why = kit_cuda("uuid")
    if got is None:
        return section("limits", "not measured", why)
    uuid = got.get("device", {}).get("uuid")
    if uuid is None:
        problems.append(f"limits: kit_cuda uuid failed: {got}")
        return section("limits", "failed", f"kit_cuda uuid: {got}")
    if uuid not in [d["uuid"] for d in devices]:
        return section("limits", "not measured",
                       f"CUDA device 0 ({uuid}) is not a device the library lists (a MIG instance?)")
    worker = f"gpu-kit-{os.getpid()}"
    limit = 1 << 30
    rc = library().SetMemHardLimit(worker.encode(), uuid.encode(), ctypes.c_uint64(limit))
    env = dict(ENV, LD_PRELOAD=hook, ACCELERATOR_WORKER_ID=worker)
    runs = {name: kit_cuda("meminfo", str(size), env=env)[0] or {}
            for name, size in (("within", limit // 2), ("beyond", limit + 64 * MIB))}
    within, beyond = runs["within"].get("meminfo", {}), runs["beyond"].get("meminfo", {})
    ok = (rc == 0 and within.get("total") == limit and within.get("alloc_result") == 0
          and beyond.get("total") == limit and beyond.get("alloc_result") == 2)  # CUDA_ERROR_OUT_OF_MEMORY
    if not ok:
        problems.append(f"limits: SetMemHardLimit rc {rc}, runs {runs}")
    compute = kit_compute.compute_limits(dict(COMPUTE_TIMINGS, kit=KIT, hook=hook, env=ENV, nvml=nv.lib,
                                              library=library, library_path=LIB), uuid)
    for row in compute["rows"] if "rows" in compute else []:
        if row["result"] in ("mismatch", "failure"):
            problems.append(f"limits: compute limit {row['limit']} %: {row['result']} "
                            f"(measured {row.get('measured')}, {row.get('reason', 'tolerance ±5')})")
    return section("limits", "measured", device=uuid, limit_bytes=limit, set_rc=rc, runs=runs,
                   memory_limit="match" if ok else "mismatch", compute_limit=compute)


# ---------------------------------------------------------------- main

def finish(status, reason=None):
    report["status"] = status
    if reason:
        report["reason"] = reason
    report["problems"] = problems
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "report.json"), "w") as f:
        json.dump(report, f, indent=1, sort_keys=False)
        f.write("\n")
    with open(os.path.join(OUT, "report.md"), "w") as f:
        f.write(markdown())
    shutil.rmtree(STATE_DIR, ignore_errors=True)
    print(f"gpu-kit: {status}{': ' + reason if reason else ''}; report in {OUT}/report.md")
    sys.exit(1 if status in ("mismatch", "failure") else 0)


def cell(v):
    return "" if v is None else str(v).replace("|", "/")


def markdown():
    r = report
    lines = [f"# GPU verification kit report ({r['mode']})", "",
             f"- date (UTC): {r['date_utc']}", f"- host: {r['host']}",
             f"- device: {r.get('device', '-')}", f"- driver: {r.get('driver', '-')}",
             f"- library: `{r['library']}`; NVML `{r['nvml']}`; CUDA `{r['cuda']}`",
             f"- status: **{r['status']}**" + (f" ({r['reason']})" if r.get("reason") else ""), ""]
    if r["mode"] != "real":
        lines += ["> Fake mode: every figure below comes from the project's fake NVML and CUDA libraries",
                  "> (c-tests/fakes), not from a GPU. It shows the kit runs; it measures nothing real.", ""]
    for name, s in r["sections"].items():
        lines.append(f"## {name}: {s['status']}" + (f" — {s['reason']}" if s.get("reason") else ""))
        lines.append("")
        if name == "discovery":
            lines += [f"nvidia-smi: {s['nvidia_smi']}; PyTorch: {s['pytorch']}; mismatches: {s['mismatches']}", "",
                      "| device | field | library | NVML | nvidia-smi | result |", "|---|---|---|---|---|---|"]
            lines += [f"| {x['device']} | {cell(x['field'])} | {cell(x['library'])} | {cell(x['nvml'])} | "
                      f"{cell(x['nvidia_smi'])} | {x['result']} |" for x in s["rows"]]
        elif name == "metrics" and s["status"] == "measured":
            lines += ["| call (median of 1,000) | median ns | p99 ns | ratio to raw NVML |", "|---|---|---|---|"]
            for k, v in s["cost"].items():
                if isinstance(v, dict):
                    lines.append(f"| {k} | {v['median_ns']:.0f} | {v['p99_ns']:.0f} | {v.get('ratio_to_raw', 1.0)} |")
                else:
                    lines.append(f"| {k} | {v} | | |")
            lines += ["", "| field | library | NVML | result |", "|---|---|---|---|"]
            lines += [f"| {x['field']} | {cell(x['library'])} | {cell(x['nvml'])} | {x['result']} |"
                      for x in s["values"]]
            lines += ["", f"GPM under the kit's own load: `{json.dumps(s['gpm_under_load'])}`"]
            if s.get("accel"):
                lines += ["", f"AccelGetDeviceMetrics values: `{json.dumps(s['accel'])}`"]
        elif name == "limits" and s["status"] == "measured":
            body = {k: v for k, v in s.items() if k not in ("status", "compute_limit")}
            lines += [f"memory limit: **{s['memory_limit']}**", "", "```json", json.dumps(body, indent=1), "```", ""]
            lines += compute_table(s["compute_limit"])
        elif s["status"] == "measured":
            body = {k: v for k, v in s.items() if k != "status"}
            lines += ["```json", json.dumps(body, indent=1), "```"]
        lines.append("")
    if problems:
        lines += ["## Problems", ""] + [f"- {p}" for p in problems] + [""]
    return "\n".join(lines)


def compute_table(c):
    """The compute-limit accuracy table (the per-window readings stay in report.json)."""
    head = f"compute limit (kit_cuda load under the hook, utilization from NVML by pid): **{c['status']}**"
    if c.get("reason"):
        head += f" — {c['reason']}"
    if "rows" not in c:
        return [head]
    t = c["timings_s"]
    lines = [head + f"; {t['converge_s']:g} s to converge, then {t['measure_s']:g} s measured, "
             f"read every {t['window_s']:g} s; match within ±{c['tolerance_points']} points; host sampler "
             f"process (AccelInit) {json.dumps(c.get('host_sampler'))}", "",
             "| limit | measured | error | converged in | launches | result |", "|---|---|---|---|---|---|"]
    for r in c["rows"]:
        conv = r.get("converged_in_s")
        conv = f"{conv:g} s" if conv is not None else "not within the run" if "measured" in r else ""
        lines.append(f"| {r['limit']} % | {cell(r.get('measured'))} % | {cell(r.get('error'))} | {conv} | "
                     f"{cell(r.get('load', {}).get('launches'))} | {r['result']}"
                     f"{' (' + r['reason'] + ')' if r.get('reason') else ''} |")
    return lines


def main():
    for exe in ("probe", "kit_lib", "kit_cuda"):
        if not os.access(os.path.join(KIT, exe), os.X_OK):
            print(f"gpu-kit: {exe} missing from {KIT}", file=sys.stderr)
            sys.exit(2)
    try:
        nv = NVML(NVML_PATH)
    except OSError as e:
        finish("not available", f"no NVIDIA driver: {NVML_PATH} cannot be loaded ({e})")
    except RuntimeError as e:
        finish("not available", f"NVIDIA driver present but NVML does not start: {e}")
    report["driver"] = nv.driver_version()
    if nv.count() == 0:
        finish("not available", "NVML reports no GPU")
    p = run([os.path.join(KIT, "probe"), "--json", LIB], timeout=120)
    if p.returncode != 0:
        problems.append(f"probe failed: {p.stderr.strip()}")
        finish("failure", "the probe failed")
    devices = json.loads(p.stdout)["devices"]
    if not devices:
        problems.append(f"the library reports no device where NVML reports {nv.count()}")
        finish("failure", "library found no device")
    dev = devices[0]
    report["device"] = f"{dev['model']} ({dev['uuid']})"
    discovery(nv, devices)
    metrics(nv, dev)
    snapshot(dev)
    limits(nv, devices)
    finish("mismatch" if any(p.startswith("discovery") for p in problems) else
           "failure" if problems else "pass")


if __name__ == "__main__":
    main()

"""Compute-limit accuracy through the preload hook, for the GPU kit's limits
section: the kit's own load kernel (kit_cuda load: a PTX spin kernel on every
SM, launched and synchronized in a loop, so it saturates the device) runs
under LD_PRELOAD=libcuda_limiter.so as a worker whose compute limit the
library set (SetComputeUnitHardLimit); its utilization is read directly from
NVML (nvmlDeviceGetProcessUtilization, by the load's host pid), not from the
hook or the library. The closed loop needs a host process running the
library's compute sampler, as the hypervisor does: a host sampler process
(this interpreter, loading the library RTLD_NOW|RTLD_GLOBAL and calling
AccelInit) runs for the whole section. Standard library and ctypes only; it
only reads the device (no setter, no reset).

In fake mode the same code runs against the project's simulated device
(c-tests/fakes/timeline.h: FAKE_GPU_TIMELINE, FAKE_KERNEL_US), whose fake NVML
reports per-process utilization from it.
"""

import ctypes
import json
import os
import struct
import subprocess
import sys
import time

LIMITS = (30, 70)
TOLERANCE = 5  # points either side of the limit
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NOT_FOUND = 6  # no sample newer than lastSeenTimeStamp
RESULT_ERROR_NOT_SUPPORTED = 3  # enum Result in include/accelerator.h


class Sample(ctypes.Structure):
    """nvmlProcessUtilizationSample_t, as in nvml.h."""
    _fields_ = [("pid", ctypes.c_uint), ("timeStamp", ctypes.c_ulonglong), ("smUtil", ctypes.c_uint),
                ("memUtil", ctypes.c_uint), ("encUtil", ctypes.c_uint), ("decUtil", ctypes.c_uint)]


def elf_exports(path):
    """The names an ELF64 shared object defines in its dynamic symbol table."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:4] != b"\x7fELF" or data[4] != 2:  # ELFCLASS64
        return set()
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    # Elf64_Shdr: name, type, flags, addr, offset, size, link, info, addralign, entsize
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    names = set()
    for s in sections:
        if s[1] != 11:  # SHT_DYNSYM
            continue
        strings = sections[s[6]][4]
        for off in range(s[4], s[4] + s[5], 24):  # Elf64_Sym: name, info, other, shndx, value, size
            name, _, _, shndx = struct.unpack_from("<IBBH", data, off)
            if shndx:  # defined here, not imported
                start = strings + name
                names.add(data[start:data.index(b"\0", start)].decode(errors="replace"))
    return names


class ProcessUtilization:
    """nvmlDeviceGetProcessUtilization on one device: each read returns the
    samples newer than the last one seen, as {pid: [smUtil, ...]}."""

    def __init__(self, nvml, uuid):
        self.nvml = nvml
        self.handle = ctypes.c_void_p()
        self.last = 0
        self.samples = (Sample * 1024)()
        self.rc = nvml.nvmlDeviceGetHandleByUUID(uuid.encode(), ctypes.byref(self.handle))

    def read(self):
        """(NVML return code, {pid: [smUtil, ...]}); NOT_FOUND is success with no sample."""
        n = ctypes.c_uint(len(self.samples))
        rc = self.nvml.nvmlDeviceGetProcessUtilization(self.handle, self.samples, ctypes.byref(n),
                                                       ctypes.c_ulonglong(self.last))
        if rc == NVML_ERROR_NOT_FOUND:
            return 0, {}
        if rc != 0:
            return rc, {}
        got = {}
        for s in self.samples[:n.value]:
            if s.timeStamp > self.last:
                got.setdefault(s.pid, []).append(s.smUtil)
        self.last = max([self.last] + [s.timeStamp for s in self.samples[:n.value]])
        return 0, got


def converged_in(windows, limit):
    """Start (s) of the first window after which every window read is within
    the tolerance; None when the last one is not."""
    at = None
    for start, util in windows:
        if util is None:
            continue
        if abs(util - limit) > TOLERANCE:
            at = None
        elif at is None:
            at = start
    return at


def accuracy(ctx, reader, uuid, limit):
    """One saturating worker at `limit` %: converge, then measure."""
    worker = f"gpu-kit-{os.getpid()}-compute{limit}"
    rc = ctx["library"]().SetComputeUnitHardLimit(worker.encode(), uuid.encode(), ctypes.c_uint32(limit))
    if rc != 0:
        return {"limit": limit, "set_rc": rc, "result": "not measured" if rc == RESULT_ERROR_NOT_SUPPORTED
                else "failure", "reason": f"SetComputeUnitHardLimit returned {rc}"}
    converge, measure, window = ctx["converge_s"], ctx["measure_s"], ctx["window_s"]
    env = dict(ctx["env"], LD_PRELOAD=ctx["hook"], ACCELERATOR_WORKER_ID=worker)
    reader.read()  # only samples from here on
    t0 = time.monotonic()
    load = subprocess.Popen([os.path.join(ctx["kit"], "kit_cuda"), "load", str(converge + measure + 0.5)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    windows, measured, others, nvml_rc = [], [], set(), 0
    for i in range(int(round((converge + measure) / window))):
        time.sleep(max(0.0, t0 + (i + 1) * window - time.monotonic()))
        nvml_rc, got = reader.read()
        if nvml_rc != 0:
            break
        mine = got.pop(load.pid, [])
        others.update(got)
        windows.append((round(i * window, 2), sum(mine) / len(mine) if mine else None))
        if (i + 1) * window > converge + 1e-9:
            measured += mine
    out, err = load.communicate(timeout=120)
    row = {"limit": limit, "set_rc": rc, "worker": worker}
    if nvml_rc != 0:
        return dict(row, result="not measured", reason=f"nvmlDeviceGetProcessUtilization returned {nvml_rc}")
    if load.returncode != 0:
        return dict(row, result="failure", reason=f"the load exited {load.returncode}: {out.strip()} {err.strip()}")
    row["load"] = json.loads(out.strip().splitlines()[-1])["load"]
    if not measured:
        why = (f"NVML's samples name pids {sorted(others)}, not the load's {load.pid} (the kit in a pid namespace?)"
               if others else "NVML returned no per-process sample for the load")
        return dict(row, result="not measured", reason=why)
    util = sum(measured) / len(measured)
    within = abs(util - limit) <= TOLERANCE
    return dict(row, measured=round(util, 1), error=round(util - limit, 1),
                converged_in_s=converged_in(windows, limit), samples=len(measured),
                windows=[[t, None if u is None else round(u, 1)] for t, u in windows],
                result="match" if within else "mismatch")


def sampler_main(library_path):
    """The host sampler process (`kit_compute.py sampler LIBRARY`): loads the
    library as the hypervisor does, calls AccelInit (which starts its compute
    sampler), prints the result and waits until stdin closes."""
    lib = ctypes.CDLL(library_path, mode=os.RTLD_NOW | os.RTLD_GLOBAL)
    print(lib.AccelInit(), flush=True)
    sys.stdin.read()
    lib.AccelShutdown()


def start_sampler(ctx):
    """(the host sampler process, AccelInit's result or None)."""
    p = subprocess.Popen([sys.executable, os.path.abspath(__file__), "sampler", ctx["library_path"]], env=ctx["env"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = p.stdout.readline().strip()
    return p, int(line) if line.lstrip("-").isdigit() else None


def stop_sampler(p):
    """Close its stdin (it shuts the sampler down and exits); its stderr."""
    try:
        _, err = p.communicate(input="", timeout=30)
    except subprocess.TimeoutExpired:
        p.kill()
        _, err = p.communicate()
    return err.strip()


def compute_limits(ctx, uuid):
    """The compute part of the limits section: a dict with status and rows.
    ctx: kit (directory), hook (path), env (for subprocesses), nvml (ctypes
    library), library (a function returning the library under test),
    library_path (its file, for the host sampler process) and the timings
    converge_s, measure_s, window_s."""
    if "cuLaunchKernel" not in elf_exports(ctx["hook"]):
        return {"status": "not measured",
                "reason": "the hook library does not intercept cuLaunchKernel (no launch throttling)"}
    reader = ProcessUtilization(ctx["nvml"], uuid)
    if reader.rc != 0:
        return {"status": "not measured", "reason": f"nvmlDeviceGetHandleByUUID({uuid}) returned {reader.rc}"}
    rc, _ = reader.read()
    if rc != 0:
        why = "not supported on this device" if rc == NVML_ERROR_NOT_SUPPORTED else f"returned {rc}"
        return {"status": "not measured", "reason": f"nvmlDeviceGetProcessUtilization {why}"}
    # This process sets the limits; only the host sampler process measures
    # (AccelShutdown: a limit set here starts no sampler of this process).
    lib = ctx["library"]()
    if hasattr(lib, "AccelShutdown"):
        lib.AccelShutdown()
    sampler, init_rc = start_sampler(ctx)
    try:
        rows = [accuracy(ctx, reader, uuid, p) for p in LIMITS]
    finally:
        sampler_err = stop_sampler(sampler)
    host = {"pid": sampler.pid, "accel_init_rc": init_rc, "exit": sampler.returncode}
    if sampler_err:
        host["stderr"] = sampler_err[-2000:]
    results = {r["result"] for r in rows}
    status = "measured" if results <= {"match", "mismatch"} else \
        "failed" if "failure" in results else "not measured"
    s = {"status": status, "tolerance_points": TOLERANCE, "host_sampler": host,
         "timings_s": {k: ctx[k] for k in ("converge_s", "measure_s", "window_s")}, "rows": rows}
    if status == "not measured":
        s["reason"] = "; ".join(f"{r['limit']} %: {r['reason']}" for r in rows if r.get("reason"))
    return s


if __name__ == "__main__" and len(sys.argv) == 3 and sys.argv[1] == "sampler":
    sampler_main(sys.argv[2])

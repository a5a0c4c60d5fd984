"""CuPy and PyTorch under the hook on the project's fake driver and NVML.

Usage: run.py FRAMEWORK SITE LIBACCELERATOR HOOK LIBLIMITER
  FRAMEWORK  cupy or torch
  SITE       the directory the framework's pinned wheels are installed in
The environment (tests/frameworks/frameworks.mk) picks the nvidia vendor on
the fake NVML, the fake libcuda.so.1 on LD_LIBRARY_PATH and a private
ACCELERATOR_STATE_DIR.

For each of the framework's allocators, a worker limited to 1 GiB (the
hypervisor's SetMemHardLimit through libaccelerator) runs worker.py, and
the host reads the worker's usage with liblimiter's limiterGetWorkerUsage
at each of its checkpoints:
- alone: the framework sees the limit as its device's total (CuPy's
  memsets read back); it fills the
  worker exactly (its context's reservation and its 64 MiB buffers add up
  to 1 GiB) and the next buffer is refused with the framework's own
  out-of-memory error; freed buffers stay charged while its allocator keeps
  them; its release call (free_all_blocks, empty_cache) gives them back,
  and its exit the rest;
- shared: a second process of the worker gets exactly what the first
  leaves, and nothing while the first one's allocator keeps its freed
  bytes; once the first releases them, they are the second's; a process
  that exits while its allocator keeps them gives them back.
A negative control runs the same without the hook: it takes more than the
limit. Prints "N passed, N failed" last; exits 1 on any failure.
"""

import ctypes
import json
import os
import subprocess
import sys

MIB = 1 << 20
LIMIT = 1024 * MIB
CHUNK = 64 * MIB
UUID0 = b"GPU-11111111-1111-1111-1111-1111111111a4"
DRIVER_TOTAL = 51539607552
HERE = os.path.dirname(os.path.abspath(__file__))

# What each framework's allocators are and how they are chosen.
ALLOCATORS = {
    "cupy": {"pool": {}, "async": {}},
    "torch": {
        "caching": {},
        "expandable": {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"},
        "async": {"PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync"},
    },
}
# The framework's out-of-memory error, as worker.py reports its type.
OOM = {"cupy": "cupy.cuda.memory.OutOfMemoryError", "torch": "torch.OutOfMemoryError"}
# What an allocator takes for its buffers: expandable segments map 20 MiB
# pages of one segment; the others take each 64 MiB buffer whole.
GRANULE = {"expandable": 20 * MIB}
# Another tenant's process on the A40 (the fake NVML's GPU 1), in every
# NVML process list: no worker's process may see it.
OTHER_TENANT = "4242:1:8589934592:5"
NVML_LISTS = ("FAKE_NVML_PROCS", "FAKE_NVML_GRAPHICS_PROCS", "FAKE_NVML_MPS_PROCS")

passed = failed = 0


def check(ok, what):
    global passed, failed
    if ok:
        passed += 1
    else:
        failed += 1
        print(f"FAIL: {what}", file=sys.stderr, flush=True)


class Host:
    def __init__(self, libaccelerator, liblimiter):
        acc = ctypes.CDLL(libaccelerator)
        self.set_limit = acc.SetMemHardLimit
        self.set_limit.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_uint64]
        lim = ctypes.CDLL(liblimiter)
        self._usage = lim.limiterGetWorkerUsage
        self._usage.argtypes = [ctypes.c_char_p, ctypes.c_char_p] + [
            ctypes.POINTER(ctypes.c_uint64)
        ] * 2

    def usage(self, worker):
        used, limit = ctypes.c_uint64(), ctypes.c_uint64()
        r = self._usage(worker.encode(), UUID0, ctypes.byref(used), ctypes.byref(limit))
        check(r == 0 and limit.value == LIMIT, f"limiterGetWorkerUsage({worker}): {r}")
        return used.value


class Worker:
    """One worker.py process, stopped at its checkpoints."""

    def __init__(self, framework, site, hook, worker, allocator, hold=None):
        env = dict(os.environ, PYTHONPATH=site, **ALLOCATORS[framework][allocator])
        env.update({v: OTHER_TENANT for v in NVML_LISTS})
        if worker:
            env.update(LD_PRELOAD=hook, ACCELERATOR_WORKER_ID=worker)
        else:
            env.pop("LD_PRELOAD", None)
            env.pop("ACCELERATOR_WORKER_ID", None)
        args = [sys.executable, os.path.join(HERE, "worker.py"), framework, allocator]
        if hold is not None:
            args.append(str(hold))
        self.name = f"{framework}/{allocator}" + (f" (hold {hold})" if hold is not None else "")
        self.p = subprocess.Popen(args, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  text=True)
        self.at = None

    def next(self, want):
        """Let it run to checkpoint `want`; its facts."""
        if self.at is not None:
            self.p.stdin.write("go\n")
            self.p.stdin.flush()
        line = self.p.stdout.readline()
        facts = json.loads(line) if line.startswith("{") else {"at": None, "output": line}
        check(facts.get("at") == want, f"{self.name}: at {want}, got {facts}")
        self.at = facts.get("at")
        return facts

    def end(self):
        if self.p.poll() is None:
            try:
                self.p.stdin.write("exit\n")
                self.p.stdin.flush()
            except BrokenPipeError:
                pass
        rc = self.p.wait(timeout=120)
        check(rc == 0, f"{self.name}: exit status {rc}")


def taken(allocator, chunks):
    """The bytes `chunks` buffers of 64 MiB take under `allocator`."""
    g = GRANULE.get(allocator, CHUNK)
    return -(-chunks * CHUNK // g) * g


def nvml_lists(hook, worker):
    """Every NVML process list of the A40, read by a process of `worker`
    under the hook (no worker: without it)."""
    env = dict(os.environ, **{v: OTHER_TENANT for v in NVML_LISTS})
    if worker:
        env.update(LD_PRELOAD=hook, ACCELERATOR_WORKER_ID=worker)
    out = subprocess.run([sys.executable, os.path.join(HERE, "processes.py")], env=env,
                         capture_output=True, text=True, timeout=60)
    check(out.returncode == 0, f"processes.py: {out.stderr}")
    return json.loads(out.stdout) if out.returncode == 0 else {}


def alone(host, framework, site, hook, allocator):
    worker = f"{framework}-{allocator}-alone"
    check(host.set_limit(worker.encode(), UUID0, LIMIT) == 0, f"SetMemHardLimit({worker})")
    w = Worker(framework, site, hook, worker, allocator)
    start = w.next("start")
    check(start.get("total") == LIMIT, f"{w.name}: the device's total is the limit: {start}")
    if framework == "cupy":
        check(start.get("memsets") is True, f"{w.name}: memsets read back: {start}")
    base = host.usage(worker)
    check(base < LIMIT, f"{w.name}: its context takes {base} before any buffer")
    full = w.next("full")
    refusal = full.get("refusal") or {}
    used = host.usage(worker)
    print(f"{w.name}: {full.get('chunks')} x 64 MiB + {base >> 20} MiB of context, "
          f"then {refusal.get('type')}", flush=True)
    check(refusal.get("type") == OOM[framework],
          f"{w.name}: refused with the framework's error: {refusal}")
    check(used == LIMIT, f"{w.name}: filled the worker exactly: {used} of {LIMIT}")
    check(full.get("chunks", 0) * CHUNK + base == LIMIT,
          f"{w.name}: {full.get('chunks')} chunks + {base} of context fill {LIMIT}")
    check(full.get("free") == 0, f"{w.name}: nothing left free: {full}")
    lists = nvml_lists(hook, worker)
    check(len(lists) == 9 and all(v == [[w.p.pid, LIMIT]] for v in lists.values()),
          f"{w.name}: NVML's process lists show the worker's one process and its bytes: {lists}")
    if framework == "torch":
        message = refusal.get("message", "")
        check("1024.00 MiB" in message, f"{w.name}: the message names the limit: {message}")
        check("4242" not in message and "8.00 GiB" not in message,
              f"{w.name}: the message shows nothing of another tenant: {message}")
        if allocator != "async":
            check("this process has 1024.00 MiB memory in use" in message,
                  f"{w.name}: the message names this process's usage: {message}")
    w.next("freed")
    kept = host.usage(worker)
    check(kept == LIMIT, f"{w.name}: freed buffers stay charged while kept: {kept}")
    w.next("released")
    check(host.usage(worker) == base, f"{w.name}: the release gave back all but the context")
    w.end()
    check(host.usage(worker) == 0, f"{w.name}: its exit gave back the rest")
    return base


def fills(name, host, worker, full, before, framework, allocator):
    """Process `name` at its `full` checkpoint took every 64 MiB buffer that
    fits on top of `before` (the worker's usage without its buffers), and
    was refused the next with the framework's error: its chunk count."""
    k = full.get("chunks", 0)
    used = host.usage(worker)
    check(used == before + taken(allocator, k),
          f"{name}: {k} buffers took {used - before} bytes")
    check(taken(allocator, k + 1) - taken(allocator, k) > LIMIT - used,
          f"{name}: the next buffer does not fit in the {LIMIT - used} bytes left")
    check((full.get("refusal") or {}).get("type") == OOM[framework],
          f"{name}: refused with the framework's error: {full.get('refusal')}")
    return k


def shared(host, framework, site, hook, allocator):
    worker = f"{framework}-{allocator}-shared"
    check(host.set_limit(worker.encode(), UUID0, LIMIT) == 0, f"SetMemHardLimit({worker})")
    a = Worker(framework, site, hook, worker, allocator, hold=6)
    a.next("start")
    a_base = host.usage(worker)
    full_a = a.next("full")
    a_holds = a_base + taken(allocator, 6)
    check(full_a.get("chunks") == 6 and host.usage(worker) == a_holds,
          f"{a.name}: holds 6 buffers: {full_a}")

    def second(at_start):
        w = Worker(framework, site, hook, worker, allocator)
        w.next("start")
        before = host.usage(worker)
        check(before > at_start, f"{w.name}: its context is charged: {before - at_start}")
        k = fills(w.name, host, worker, w.next("full"), before, framework, allocator)
        w.end()
        return k

    # The second gets exactly what the first leaves.
    k_b = second(a_holds)
    # The first frees its buffers; its allocator keeps them: still charged.
    a.next("freed")
    check(host.usage(worker) == a_holds, f"{a.name}: its freed buffers stay charged")
    check(second(a_holds) == k_b, f"{worker}: nothing of what the first keeps is another's")
    # The first releases them: they are the next one's.
    a.next("released")
    check(host.usage(worker) == a_base, f"{a.name}: released all but its context")
    check(second(a_base) > k_b, f"{worker}: what the first released is another's")
    a.end()
    check(host.usage(worker) == 0, f"{worker}: every exit gave back everything")
    # A process that exits while its allocator keeps its freed buffers.
    e = Worker(framework, site, hook, worker, allocator, hold=6)
    e.next("start")
    e.next("full")
    e.next("freed")
    check(host.usage(worker) > taken(allocator, 6), f"{e.name}: keeps its freed buffers")
    e.end()
    check(host.usage(worker) == 0, f"{e.name}: its exit gave back what it kept")


def control(framework, site, allocator):
    w = Worker(framework, site, None, None, allocator, hold=20)
    start = w.next("start")
    check(start.get("total") == DRIVER_TOTAL, f"{w.name} without the hook: the driver's total")
    full = w.next("full")
    check(full.get("chunks") == 20 and not full.get("refusal"),
          f"{w.name} without the hook: 20 x 64 MiB, past 1 GiB: {full}")
    w.end()
    lists = nvml_lists(None, None)
    check(lists.get("nvmlDeviceGetComputeRunningProcesses_v3") == [[4242, 8 << 30]],
          f"without the hook NVML lists the other tenant: {lists}")


def main():
    framework, site, libaccelerator, hook, liblimiter = sys.argv[1:6]
    host = Host(libaccelerator, liblimiter)
    for allocator in ALLOCATORS[framework]:
        alone(host, framework, site, hook, allocator)
        shared(host, framework, site, hook, allocator)
    control(framework, site, next(iter(ALLOCATORS[framework])))
    print(f"frameworks: {passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()

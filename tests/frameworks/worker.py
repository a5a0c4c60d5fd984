"""One framework process of a worker (tests/frameworks/run.py starts it).

Usage: worker.py FRAMEWORK ALLOCATOR [HOLD]
  FRAMEWORK  cupy or torch
  ALLOCATOR  cupy: pool (MemoryPool) or async (MemoryAsyncPool);
             torch: the allocator PYTORCH_CUDA_ALLOC_CONF chose (caching,
             expandable, async), named for the report only
  HOLD       fill at most this many chunks (default: until refused)

CuPy first sets a small buffer with cudaMemset and cudaMemsetAsync and
reads it back (given back before the start). Then it allocates CHUNK-byte
buffers until the framework refuses one with its
own out-of-memory error, then walks the release steps, stopping at each
checkpoint: it prints one JSON line {"at": NAME, ...} and waits for a line
on standard input before going on, so the host can read the worker's
usage (limiterGetWorkerUsage) at that point. A line "exit" ends it there.
"""

import json
import sys

CHUNK = 64 << 20


def checkpoint(at, **facts):
    print(json.dumps({"at": at, **facts}), flush=True)
    if sys.stdin.readline().strip() == "exit":
        sys.exit(0)


class Cupy:
    def __init__(self, allocator):
        import cupy

        self.cp = cupy
        self.oom = cupy.cuda.memory.OutOfMemoryError
        if allocator == "async":
            self.pool = cupy.cuda.MemoryAsyncPool()
        else:
            self.pool = cupy.cuda.MemoryPool()
        cupy.cuda.set_allocator(self.pool.malloc)

    def info(self):
        free, total = self.cp.cuda.runtime.memGetInfo()
        return {"free": free, "total": total}

    def memsets(self):
        """cudaMemset and cudaMemsetAsync of a small buffer read back (the
        driver's cuMemsetD*), the buffer then given back."""
        rt, x = self.cp.cuda.runtime, self.cp.empty(4096, dtype=self.cp.uint8)
        rt.memset(x.data.ptr, 0x5A, 4096)
        ok = bool((x.get() == 0x5A).all())
        rt.memsetAsync(x.data.ptr + 1024, 0xA5, 1024, 0)
        y = x.get()
        ok = ok and bool((y[1024:2048] == 0xA5).all() and (y[2048:] == 0x5A).all())
        del x
        self.release()
        return ok

    def chunk(self):
        return self.cp.empty(CHUNK, dtype=self.cp.uint8)

    def sync(self):
        self.cp.cuda.Device().synchronize()

    def release(self):
        self.pool.free_all_blocks()
        self.sync()


class Torch:
    def __init__(self, allocator):
        import torch

        self.torch = torch
        self.oom = torch.OutOfMemoryError
        self.allocator = allocator

    def info(self):
        free, total = self.torch.cuda.mem_get_info()
        return {
            "free": free,
            "total": total,
            "backend": self.torch.cuda.get_allocator_backend(),
        }

    def chunk(self):
        return self.torch.empty(CHUNK, dtype=self.torch.uint8, device="cuda")

    def sync(self):
        self.torch.cuda.synchronize()

    def release(self):
        self.torch.cuda.empty_cache()
        self.sync()


def main():
    framework, allocator = sys.argv[1], sys.argv[2]
    hold = int(sys.argv[3]) if len(sys.argv) > 3 else None
    fw = (Cupy if framework == "cupy" else Torch)(allocator)
    memsets = fw.memsets() if framework == "cupy" else None
    checkpoint("start", memsets=memsets, **fw.info())
    chunks, refusal = [], None
    while hold is None or len(chunks) < hold:
        try:
            chunks.append(fw.chunk())
        except fw.oom as e:
            refusal = {"type": type(e).__module__ + "." + type(e).__name__, "message": str(e)}
            break
        if len(chunks) > 64:
            break
    fw.sync()
    checkpoint("full", chunks=len(chunks), refusal=refusal, **fw.info())
    del chunks
    fw.sync()
    checkpoint("freed", **fw.info())
    fw.release()
    checkpoint("released", **fw.info())


if __name__ == "__main__":
    main()

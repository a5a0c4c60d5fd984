"""NVML's running-process lists of the A40 as a worker's process reads them
(tests/frameworks/run.py starts it under the hook): one JSON object, each
list function's name to its [[pid, bytes], ...] or its NVML error code."""

import ctypes
import json


class InfoV1(ctypes.Structure):  # nvmlProcessInfo_v1_t
    _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong)]


class InfoV2(ctypes.Structure):  # nvmlProcessInfo_v2_t, nvmlProcessInfo_t
    _fields_ = InfoV1._fields_ + [
        ("gpuInstanceId", ctypes.c_uint),
        ("computeInstanceId", ctypes.c_uint),
    ]


def main():
    nvml = ctypes.CDLL("libnvidia-ml.so.1")
    assert nvml.nvmlInit_v2() == 0
    device = ctypes.c_void_p()
    a40 = b"GPU-11111111-1111-1111-1111-1111111111a4"
    assert nvml.nvmlDeviceGetHandleByUUID(a40, ctypes.byref(device)) == 0
    lists = {}
    for kind in ("Compute", "Graphics", "MPSCompute"):
        for suffix, info in (("", InfoV1), ("_v2", InfoV2), ("_v3", InfoV2)):
            name = f"nvmlDeviceGet{kind}RunningProcesses{suffix}"
            count = ctypes.c_uint(0)
            r = getattr(nvml, name)(device, ctypes.byref(count), None)
            buf = (info * max(count.value, 1))()
            if r in (0, 7):  # NVML_SUCCESS, NVML_ERROR_INSUFFICIENT_SIZE
                r = getattr(nvml, name)(device, ctypes.byref(count), buf)
            lists[name] = (
                [[buf[i].pid, buf[i].usedGpuMemory] for i in range(count.value)] if r == 0 else r
            )
    print(json.dumps(lists))


if __name__ == "__main__":
    main()

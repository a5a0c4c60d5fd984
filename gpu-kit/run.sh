#!/bin/sh
# GPU verification kit: one command on a machine with an NVIDIA GPU and its
# driver (nothing else needed: no toolkit, no network, no Rust).
#
#   ./run.sh [--out DIR]            against the real driver (report in DIR, default ./out)
#   ./run.sh --fake DIR [--out DIR] against the project's fake NVML/CUDA in DIR (CI)
#
# It writes report.md and report.json. It NEVER changes device state: no MIG
# mode change, no clock, power-limit, persistence, application-clock or ECC
# setting, no device reset. It only reads (NVML, nvidia-smi queries), runs its
# own CUDA load, and checkpoints/restores its own CUDA process.
#
# Exit status: 0 when everything that could be measured matched (what could
# not be measured - no driver, no GPU, no checkpoint API - is said in the
# report), 1 on a mismatch or a failure of the library, 2 on a usage error.
# On an H100 it takes about a minute and a half, 19 s of it the compute-limit
# runs (budget: 8 minutes).
set -eu
KIT=$(cd "$(dirname "$0")" && pwd)
command -v python3 >/dev/null 2>&1 || { echo "gpu-kit: python3 is required" >&2; exit 2; }
exec python3 "$KIT/kit.py" "$@"

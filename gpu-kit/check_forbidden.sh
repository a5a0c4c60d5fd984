#!/bin/sh
# CI guard: the GPU kit must never change device state. Fails (exit 1) when a
# kit file calls a setter or reset: nvidia-smi options that change the GPU,
# NVML setters/resets, or the CUDA calls that change device-wide settings.
# Usage: check_forbidden.sh KIT_DIR
set -u
dir=${1:?usage: check_forbidden.sh KIT_DIR}
# Source text: a forbidden call is a quoted name, a call with "(", or an
# nvidia-smi option passed as an argument. Comments that name them are fine.
src_pattern='["'"'"'](nvmlDeviceSet|nvmlDeviceReset|nvmlDeviceClear|nvmlGpuInstanceCreate|nvmlDeviceCreateGpuInstance|nvmlSystemSet|nvmlUnitSet)|(nvmlDeviceSet|nvmlDeviceReset|nvmlDeviceClear|nvmlSystemSet|nvmlUnitSet)[A-Za-z_0-9]*[[:space:]]*\(|["'"'"'](-r|--gpu-reset|-pm|--persistence-mode|-pl|--power-limit|-ac|--applications-clocks|-rac|-lgc|--lock-gpu-clocks|-rgc|-lmc|-rmc|-mig|--multi-instance-gpu|-c|--compute-mode|-e|--ecc-config|-am|-caa|mig)["'"'"']|nvidia-smi[^#\n]*[[:space:]](-r|--gpu-reset|-pm|-pl|-ac|-rac|-lgc|-rgc|-lmc|-rmc|-mig|-c|-e|mig)([[:space:]]|$)'
bad=0
for f in "$dir"/*.sh "$dir"/*.py "$dir"/*.c "$dir"/*.h; do
  [ -f "$f" ] || continue
  [ "$(basename "$f")" = check_forbidden.sh ] && continue
  if grep -nE "$src_pattern" "$f"; then
    echo "forbidden device-changing call in $f" >&2
    bad=1
  fi
done
# The kit's own programs: no setter or reset name may even be linked in.
for f in "$dir"/kit_cuda "$dir"/kit_lib "$dir"/probe; do
  [ -f "$f" ] || continue
  if strings "$f" | grep -E '^(nvmlDeviceSet|nvmlDeviceReset|cuDeviceSet|cuCtxSetLimit|cuDevicePrimaryCtxSetFlags|cuDevicePrimaryCtxReset)'; then
    echo "forbidden device-changing symbol in $f" >&2
    bad=1
  fi
done
exit $bad

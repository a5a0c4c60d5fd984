# `make gpu-kit`: build/gpu-kit/, a self-contained directory to copy to a GPU
# machine and run there with ./run.sh (see docs/hardware/README.md).
# `test-gpu-kit` (in `make test`) runs the same kit against the fake NVML and
# CUDA libraries, including the "not available" cases, and greps it for
# device-changing calls.
KIT_DIR   := $(BUILD)/gpu-kit
KIT_FAKES := $(BUILD)/fakes/gpu-kit

$(KIT_DIR)/kit_cuda: gpu-kit/kit_cuda.c
	@mkdir -p $(KIT_DIR)
	$(CC) $(CFLAGS) -o $@ $< -ldl

$(KIT_DIR)/kit_lib: gpu-kit/kit_lib.c c-tests/nvml_raw.h include/accelerator.h
	@mkdir -p $(KIT_DIR)
	$(CC) $(CFLAGS) -Ic-tests -o $@ $< -ldl

.PHONY: gpu-kit test-gpu-kit
gpu-kit: $(BUILD)/libaccelerator_nvidia.so $(BUILD)/probe $(LIMITER_SO) $(HOOK_SO) $(KIT_DIR)/kit_cuda \
         $(KIT_DIR)/kit_lib
	$(call replace,$(BUILD)/libaccelerator_nvidia.so $(BUILD)/probe $(LIMITER_SO) $(HOOK_SO),$(KIT_DIR))
	$(call replace,gpu-kit/run.sh gpu-kit/kit.py gpu-kit/kit_compute.py gpu-kit/check_forbidden.sh gpu-kit/README.md,$(KIT_DIR))
	@# Sources, to rebuild there if ever needed: cc -I. -o kit_lib kit_lib.c -ldl
	$(call replace,gpu-kit/kit_cuda.c gpu-kit/kit_lib.c c-tests/nvml_raw.h include/accelerator.h,$(KIT_DIR))
	@echo "GPU kit in $(KIT_DIR): copy it to the GPU machine and run ./run.sh there"

# An old driver: libcuda without the checkpoint API (before r570), built as
# the other fake is.
$(KIT_FAKES)/old/libcuda.so.1: c-tests/fakes/cuda.c
	@mkdir -p $(KIT_FAKES)/old
	$(CC) $(CFLAGS) -DFAKE_CUDA_NO_CHECKPOINT -shared -fPIC -Wl,-Bsymbolic -Wl,-soname,libcuda.so.1 \
	  -o $@ $< -lpthread
	ln -sf ../../nvidia/libnvidia-ml.so.1 $(KIT_FAKES)/old/libnvidia-ml.so.1

test-gpu-kit: gpu-kit $(NVIDIA_FAKES)/libnvidia-ml.so.1 $(NVIDIA_FAKES)/libcuda.so.1 \
              $(KIT_FAKES)/old/libcuda.so.1 $(BUILD)/libaccelerator.so
	gpu-kit/test_kit.sh $(KIT_DIR) $(NVIDIA_FAKES) $(KIT_FAKES)/old $(BUILD)/libaccelerator.so

TEST_RUN_EXTRA += test-gpu-kit

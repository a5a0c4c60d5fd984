# The nvidia vendor's tests: fake libnvidia-ml.so.1 / libcuda.so.1 (C,
# c-tests/fakes) and c-tests/test_nvidia.c, driven through the C ABI.
NVIDIA_FAKES := $(BUILD)/fakes/nvidia
NVIDIA_TEST_ENV = ACCELERATOR_STATE_DIR=$(TEST_STATE) ACCELERATOR_LOG=error

$(NVIDIA_FAKES)/libnvidia-ml.so.1: c-tests/fakes/nvml.c
	@mkdir -p $(NVIDIA_FAKES)
	$(CC) $(CFLAGS) -shared -fPIC -o $@ $<

# -Bsymbolic as a real driver: the addresses it hands out are its own.
$(NVIDIA_FAKES)/libcuda.so.1: c-tests/fakes/cuda.c
	@mkdir -p $(NVIDIA_FAKES)
	$(CC) $(CFLAGS) -shared -fPIC -Wl,-Bsymbolic -Wl,-soname,libcuda.so.1 -o $@ $< -lpthread

$(BUILD)/c-tests/test_nvidia: c-tests/test_nvidia.c c-tests/test_util.h include/accelerator.h
	@mkdir -p $(BUILD)/c-tests
	$(CC) $(CFLAGS) -o $@ $< -ldl -lpthread -lm

NVIDIA_TEST_DEPS := $(BUILD)/libaccelerator_nvidia.so $(BUILD)/c-tests/test_nvidia \
                    $(NVIDIA_FAKES)/libnvidia-ml.so.1 $(NVIDIA_FAKES)/libcuda.so.1

.PHONY: test-nvidia test-nvidia-valgrind
test-nvidia: $(NVIDIA_TEST_DEPS)
	$(NVIDIA_TEST_ENV) $(BUILD)/c-tests/test_nvidia $(BUILD)/libaccelerator_nvidia.so $(NVIDIA_FAKES)

test-nvidia-valgrind: $(NVIDIA_TEST_DEPS)
	$(NVIDIA_TEST_ENV) ACCELERATOR_TEST_QUICK=1 \
	  $(VALGRIND) $(BUILD)/c-tests/test_nvidia $(BUILD)/libaccelerator_nvidia.so $(NVIDIA_FAKES)

TEST_RUN_EXTRA += test-nvidia

# The fake driver's events and stream queries on its timeline.
$(BUILD)/c-tests/test_cuda_events: c-tests/test_cuda_events.c c-tests/test_util.h
	@mkdir -p $(BUILD)/c-tests
	$(CC) $(CFLAGS) -o $@ $< -ldl -lpthread

.PHONY: test-cuda-events
test-cuda-events: $(BUILD)/c-tests/test_cuda_events $(NVIDIA_FAKES)/libcuda.so.1
	$(BUILD)/c-tests/test_cuda_events $(abspath $(NVIDIA_FAKES))/libcuda.so.1

TEST_RUN_EXTRA += test-cuda-events
VALGRIND_EXTRA += test-nvidia-valgrind

# Benchmark (part of `make bench`): against the fakes here; on a GPU machine
# run `build/c-tests/bench_nvidia build/libaccelerator_nvidia.so` with the
# real driver (see docs/nvidia.md).
$(BUILD)/c-tests/bench_nvidia: c-tests/bench_nvidia.c c-tests/nvml_raw.h include/accelerator.h
	@mkdir -p $(BUILD)/c-tests
	$(CC) $(CFLAGS) -o $@ $< -ldl

.PHONY: bench-nvidia
bench-nvidia: $(NVIDIA_TEST_DEPS) $(BUILD)/c-tests/bench_nvidia
	$(NVIDIA_TEST_ENV) ACCELERATOR_VENDOR=nvidia \
	  ACCELERATOR_NVML_PATH=$(NVIDIA_FAKES)/libnvidia-ml.so.1 \
	  ACCELERATOR_CUDA_PATH=$(NVIDIA_FAKES)/libcuda.so.1 \
	  $(BUILD)/c-tests/bench_nvidia $(BUILD)/libaccelerator_nvidia.so $(NVIDIA_FAKES)/libnvidia-ml.so.1

bench: bench-nvidia

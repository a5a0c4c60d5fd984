# CuPy and PyTorch under the hook on the fake driver and NVML (issue 36):
# tests/frameworks/run.py. Included by the top-level Makefile.
#
#   make test-cupy         CuPy's MemoryPool and MemoryAsyncPool (part of `make test`)
#   make test-torch        PyTorch's caching allocator, expandable segments and
#                          cudaMallocAsync backend (CI runs it after `make test`)
#   make test-frameworks   both
#
# Each framework's wheels are pinned in tests/frameworks/NAME.txt, fetched
# once with pip into build/frameworks/wheels/NAME/ and installed (no index,
# no byte-compiling: PyTorch's sources took 5.6 min to compile, its install
# takes 1 min without) into build/frameworks/NAME/; a changed pin fetches
# again. No skip: a failed fetch fails the test with pip's reason.

FRAMEWORKS := $(BUILD)/frameworks
FRAMEWORK_TEST_DEPS = $(HOOK_SO) $(LIMITER_SO) $(BUILD)/libaccelerator_nvidia.so \
                      $(NVIDIA_FAKES)/libnvidia-ml.so.1 $(NVIDIA_FAKES)/libcuda.so.1 \
                      tests/frameworks/run.py tests/frameworks/worker.py \
                      tests/frameworks/processes.py

$(FRAMEWORKS)/%/.installed: tests/frameworks/%.txt
	@rm -rf $(FRAMEWORKS)/$* && mkdir -p $(FRAMEWORKS)/wheels/$*
	python3 -m pip download --quiet --no-deps --only-binary=:all: -r $< -d $(FRAMEWORKS)/wheels/$* \
	  || { echo "FAIL: cannot fetch the wheels of $< with 'python3 -m pip download'" \
	       "(pip's reason above): the $* test cannot run" >&2; exit 1; }
	python3 -m pip install --quiet --root-user-action=ignore --no-compile --no-deps --no-index \
	  --find-links $(FRAMEWORKS)/wheels/$* --target $(FRAMEWORKS)/$* -r $<
	@touch $@

# $(call run_framework,NAME,DRIVER-VERSION): run.py against the fakes, the
# driver reporting DRIVER-VERSION (PyTorch's CUDA 13 runtime refuses a
# driver below 13000).
define run_framework
ACCELERATOR_STATE_DIR=$(TEST_STATE) $(HOOK_TEST_ENV) FAKE_CUDA_DRIVER_VERSION=$(2) \
  python3 tests/frameworks/run.py $(1) $(abspath $(FRAMEWORKS)/$(1)) \
  $(BUILD)/libaccelerator_nvidia.so $(abspath $(HOOK_SO)) $(LIMITER_SO)
endef

.PHONY: test-cupy test-torch test-frameworks
test-cupy: $(FRAMEWORK_TEST_DEPS) $(FRAMEWORKS)/cupy/.installed
	$(call run_framework,cupy,12080)

test-torch: $(FRAMEWORK_TEST_DEPS) $(FRAMEWORKS)/torch/.installed
	$(call run_framework,torch,13050)

test-frameworks: test-cupy test-torch

TEST_RUN_EXTRA += test-cupy

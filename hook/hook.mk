# libcuda_limiter.so, the CUDA preload hook: included by the top-level Makefile.
#
#   make hook        build/libcuda_limiter.so (also part of `make`)
#   make hook-test   the three apps against the fake driver, directly and in
#                    a pid namespace (`unshare`, needs root); part of `make test`
#   make hook-bench  hooked vs unhooked driver calls (part of `make bench`)
#   make hook-paths-test  every path that takes device memory, five ways each
#   make hook-paths-table  rewrite docs/hook.md's table of them

HOOK_SO   := $(BUILD)/libcuda_limiter.so
HOOK_BIN  := $(BUILD)/c-tests/hook
HOOK_APPS := $(addprefix $(HOOK_BIN)/,app_runtime app_triton app_direct)

.PHONY: hook hook-test hook-bench

hook: $(HOOK_SO)
all: $(HOOK_SO)

# Its own target directory: building it never rebuilds the others.
$(HOOK_SO): FORCE
	$(CARGO) build --release -p hook --target-dir target/hook
	@mkdir -p $(BUILD)
	$(call replace,target/hook/release/libcuda_limiter.so,$@)

$(HOOK_BIN)/%: c-tests/hook/%.c c-tests/hook/hook_app.h c-tests/test_util.h c-tests/ns_util.h
	@mkdir -p $(HOOK_BIN)
	$(CC) $(CFLAGS) -o $@ $< -ldl -lpthread

# Linked directly against the fake driver (its soname, libcuda.so.1).
$(HOOK_BIN)/app_direct: c-tests/hook/app_direct.c c-tests/hook/hook_app.h c-tests/test_util.h \
                        $(NVIDIA_FAKES)/libcuda.so.1
	@mkdir -p $(HOOK_BIN)
	$(CC) $(CFLAGS) -o $@ $< $(NVIDIA_FAKES)/libcuda.so.1 -ldl -lpthread

# Limits are set the hypervisor's way: SetMemHardLimit through
# libaccelerator (nvidia vendor) on the fake NVML, whose A40 is the fake
# driver's device 0.
HOOK_FAKES    = $(abspath $(NVIDIA_FAKES))
HOOK_TEST_ENV = ACCELERATOR_LOG=error ACCELERATOR_VENDOR=nvidia \
                ACCELERATOR_NVML_PATH=$(HOOK_FAKES)/libnvidia-ml.so.1 \
                ACCELERATOR_CUDA_PATH=$(HOOK_FAKES)/libcuda.so.1 LD_LIBRARY_PATH=$(HOOK_FAKES)
HOOK_TEST_DEPS := $(HOOK_SO) $(LIMITER_SO) $(BUILD)/libaccelerator_nvidia.so $(HOOK_APPS) \
                  $(HOOK_BIN)/test_hook $(NVIDIA_FAKES)/libnvidia-ml.so.1 $(NVIDIA_FAKES)/libcuda.so.1
HOOK_TEST_ARGS = $(BUILD)/libaccelerator_nvidia.so $(abspath $(HOOK_SO)) $(LIMITER_SO) $(HOOK_APPS)

hook-test: $(HOOK_TEST_DEPS)
	c-tests/check_exports.sh $(HOOK_SO) c-tests/hook/hook.exports
	ACCELERATOR_STATE_DIR=$(TEST_STATE) $(HOOK_TEST_ENV) $(HOOK_BIN)/test_hook $(HOOK_TEST_ARGS)
	ACCELERATOR_STATE_DIR=$(TEST_STATE) $(HOOK_TEST_ENV) \
	  unshare --pid --fork --mount-proc $(HOOK_BIN)/test_hook $(HOOK_TEST_ARGS)

# The same under valgrind (memcheck): test_hook and every app it starts
# (not `unshare`, whose apps run natively), in quick mode.
.PHONY: hook-valgrind
hook-valgrind: $(HOOK_TEST_DEPS)
	ACCELERATOR_STATE_DIR=$(TEST_STATE) ACCELERATOR_TEST_QUICK=1 $(HOOK_TEST_ENV) \
	  $(VALGRIND) --trace-children=yes --trace-children-skip='*/unshare,*/sh,*/true' \
	  $(HOOK_BIN)/test_hook $(HOOK_TEST_ARGS)
VALGRIND_EXTRA += hook-valgrind

# HOOK_BEFORE=path/to/libcuda_limiter.so: another build of the hook (same
# books layout) measured in the same turns, for a before/after in one run.
hook-bench: $(HOOK_TEST_DEPS) $(HOOK_BIN)/bench_hook $(HOOK_BIN)/grant
	ACCELERATOR_STATE_DIR=$(TEST_STATE) $(HOOK_TEST_ENV) GRANT_TOOL=$(HOOK_BIN)/grant \
	  $(HOOK_BIN)/bench_hook $(BUILD)/libaccelerator_nvidia.so $(abspath $(HOOK_SO)) \
	  $(if $(HOOK_BEFORE),$(abspath $(HOOK_BEFORE)))

bench: hook-bench

# HAMI_CORE=<a HAMi-core work tree or bare git dir>: bench_hook with HAMi-core
# (built -O2 here) in its "before" modes, beside the driver and our hook in
# the same turns, HAMI_RUNS times (tools/hami-bench.sh; docs/hook.md's
# Overhead). Not part of `make bench` or `make test`: the project does not
# depend on HAMi-core.
HAMI_RUNS ?= 3
.PHONY: hami-bench
ifneq ($(filter hami-bench,$(MAKECMDGOALS)),)
ifeq ($(strip $(HAMI_CORE)),)
$(error hami-bench needs HAMI_CORE=<a HAMi-core checkout> (github.com/Project-HAMi/HAMi-core))
endif
endif
hami-bench: $(HOOK_TEST_DEPS) $(HOOK_BIN)/bench_hook $(HOOK_BIN)/grant $(CUDART12)
	$(HOOK_TEST_ENV) GRANT_TOOL=$(HOOK_BIN)/grant tools/hami-bench.sh $(HAMI_CORE) $(BUILD) $(HAMI_RUNS)
TEST_RUN_EXTRA += hook-test

# ---- every path that takes device memory (issue 35), each reached five ways
# (app_paths.c): the fake driver's own byte count never above the limit, what
# it still holds still charged, host memory, reservations and imports not.
$(HOOK_BIN)/app_paths: c-tests/hook/app_paths.c c-tests/hook/images.h c-tests/test_util.h
	@mkdir -p $(HOOK_BIN)
	$(CC) $(CFLAGS) -o $@ $< -ldl -lpthread

# The rows of the checks that passed are docs/hook.md's table of memory paths:
# hook-paths-test fails when the docs differ, `make hook-paths-table` rewrites them.
PATHS_RUN = ACCELERATOR_STATE_DIR=$(TEST_STATE) $(HOOK_TEST_ENV) $(HOOK_BIN)/test_paths \
  $(BUILD)/libaccelerator_nvidia.so $(abspath $(HOOK_SO)) $(HOOK_BIN)/app_paths \
  $(HOOK_BIN)/paths-table.md
.PHONY: hook-paths-test hook-paths-table
hook-paths-test: $(HOOK_TEST_DEPS) $(HOOK_BIN)/app_paths $(HOOK_BIN)/test_paths
	$(PATHS_RUN)
	sed -n '/^<!-- paths-table -->$$/,/^<!-- end paths-table -->$$/p' docs/hook.md \
	  | sed '1d;$$d' | diff -u - $(HOOK_BIN)/paths-table.md \
	  || { echo "FAIL: docs/hook.md's memory-paths table is stale: make hook-paths-table" >&2; exit 1; }
hook-paths-table: $(HOOK_TEST_DEPS) $(HOOK_BIN)/app_paths $(HOOK_BIN)/test_paths
	$(PATHS_RUN)
	awk -v t=$(HOOK_BIN)/paths-table.md '/^<!-- end paths-table -->$$/ {skip=0} \
	  !skip {print} /^<!-- paths-table -->$$/ {while ((getline l < t) > 0) print l; skip=1}' \
	  docs/hook.md > docs/hook.md.new && mv docs/hook.md.new docs/hook.md
TEST_RUN_EXTRA += hook-paths-test

# ---- compute limits (issue 17): launches throttled, steered by measured utilization.
# test_compute drives app_launch on the fake driver's simulated device timeline
# (c-tests/fakes/timeline.h), measured by the fake NVML.
$(NVIDIA_FAKES)/libcuda.so.1: c-tests/fakes/cuda_vmm.inc c-tests/fakes/cuda_graphmem.inc c-tests/fakes/cuda_location_pools.inc c-tests/fakes/cuda_ctx_limits.inc c-tests/fakes/cuda_green.inc c-tests/fakes/cuda_launch.inc c-tests/fakes/cuda_runtime.inc c-tests/fakes/cuda_events.inc c-tests/fakes/cuda_modules.inc c-tests/fakes/timeline.h c-tests/fakes/trace.h
$(NVIDIA_FAKES)/libnvidia-ml.so.1: c-tests/fakes/timeline.h c-tests/fakes/trace.h
COMPUTE_DEPS := $(HOOK_TEST_DEPS) $(HOOK_BIN)/app_launch $(HOOK_BIN)/test_compute
$(HOOK_BIN)/test_compute: c-tests/hook/test_compute.c c-tests/hook/compute_util.h \
  c-tests/fakes/timeline.h c-tests/test_util.h
	@mkdir -p $(HOOK_BIN)
	$(CC) $(CFLAGS) -o $@ $< -ldl -lm
$(HOOK_BIN)/test_compute_cases: c-tests/hook/test_compute_cases.c c-tests/hook/compute_util.h \
  c-tests/fakes/timeline.h c-tests/test_util.h
	@mkdir -p $(HOOK_BIN)
	$(CC) $(CFLAGS) -o $@ $< -ldl -lm

.PHONY: compute-test
compute-test: $(COMPUTE_DEPS)
	ACCELERATOR_STATE_DIR=$(TEST_STATE) $(HOOK_TEST_ENV) \
	  $(HOOK_BIN)/test_compute $(BUILD)/libaccelerator_nvidia.so $(abspath $(HOOK_SO)) \
	  $(LIMITER_SO) $(HOOK_BIN)/app_launch
TEST_RUN_EXTRA += compute-test

# The charge model and fairness across kernel lengths (50 us .. 100 ms
# graphs), processes of one worker and NVML sample periods (100 ms, 1 s):
# each case a node of its own, three at a time (docs/compute.md).
# Then the priority case: an inference worker's request latency beside a
# training worker of lower priority, whose queue the host's scheduler caps
# (depth_cap: the scheduler's setter, shm::set_depth_cap, as a tool, for
# the hook's gate on caps the scheduler never sets).
.PHONY: compute-cases-test priority-test
compute-cases-test: $(COMPUTE_DEPS) $(HOOK_BIN)/test_compute_cases $(BUILD)/probe priority-test
	ACCELERATOR_STATE_DIR=$(TEST_STATE) $(HOOK_TEST_ENV) PROBE=$(BUILD)/probe \
	  $(HOOK_BIN)/test_compute_cases $(BUILD)/libaccelerator_nvidia.so $(abspath $(HOOK_SO)) \
	  $(HOOK_BIN)/app_launch
TEST_RUN_EXTRA += compute-cases-test

# The host's setters as tools (common/examples/): depth_cap for the
# priority test, grant (the scheduler's grant and the sampler's charge) for
# hook-bench's worker with a request and a priority.
$(HOOK_BIN)/depth_cap $(HOOK_BIN)/grant: FORCE
	$(CARGO) build --release -p accel-common --example $(@F) --target-dir target/hook
	@mkdir -p $(HOOK_BIN)
	$(call replace,target/hook/release/examples/$(@F),$@)
$(HOOK_BIN)/test_priority: c-tests/hook/test_priority.c c-tests/hook/compute_util.h \
  c-tests/fakes/timeline.h c-tests/test_util.h include/accelerator.h
	@mkdir -p $(HOOK_BIN)
	$(CC) $(CFLAGS) -o $@ $< -ldl -lm

priority-test: $(COMPUTE_DEPS) $(HOOK_BIN)/test_priority $(HOOK_BIN)/depth_cap
	$(HOOK_TEST_ENV) $(HOOK_BIN)/test_priority $(BUILD)/libaccelerator_nvidia.so \
	  $(abspath $(HOOK_SO)) $(HOOK_BIN)/app_launch $(abspath $(HOOK_BIN)/depth_cap)

# ---- the compute sampler after fork() from a threaded host (AccelInit /
# AccelShutdown racing fork; each child starts and stops its own).
$(HOOK_BIN)/test_sampler_fork: c-tests/hook/test_sampler_fork.c c-tests/test_util.h
	@mkdir -p $(HOOK_BIN)
	$(CC) $(CFLAGS) -o $@ $< -ldl -lpthread

.PHONY: sampler-fork-test
sampler-fork-test: $(BUILD)/libaccelerator_nvidia.so $(HOOK_BIN)/test_sampler_fork \
                   $(NVIDIA_FAKES)/libnvidia-ml.so.1 $(NVIDIA_FAKES)/libcuda.so.1
	ACCELERATOR_STATE_DIR=$(TEST_STATE) $(HOOK_TEST_ENV) \
	  timeout 60 $(HOOK_BIN)/test_sampler_fork $(BUILD)/libaccelerator_nvidia.so
TEST_RUN_EXTRA += sampler-fork-test

# ---- every versioned entry point (issue 22): what the hook hands out for each
# request libcudart 12.9 / 13.5 make and each name the driver exports, checked
# against the rule (entry_table.c) and against the table in docs/hook.md.
# `make hook-table` rewrites that table.
HOOK_TABLE_ARGS = c-tests/hook/cudart-12.9-driver-requests.txt \
                  c-tests/hook/cudart-13.5-driver-requests.txt $(HOOK_BIN)/driver.exports
HOOK_TABLE_RUN  = $(HOOK_TEST_ENV) LD_PRELOAD=$(abspath $(HOOK_SO)) $(HOOK_BIN)/entry_table \
                  $(HOOK_TABLE_ARGS)
$(HOOK_BIN)/entry_table: c-tests/hook/entry_table.c
	@mkdir -p $(HOOK_BIN)
	$(CC) $(CFLAGS) -o $@ $< -ldl -lpthread

.PHONY: hook-table hook-table-test
$(HOOK_BIN)/driver.exports: $(NVIDIA_FAKES)/libcuda.so.1
	@mkdir -p $(HOOK_BIN)
	nm -D --defined-only $< | awk '$$2 == "T" {print $$3}' | sort > $@

hook-table-test: $(HOOK_SO) $(HOOK_BIN)/entry_table $(HOOK_BIN)/driver.exports
	$(HOOK_TABLE_RUN) > $(HOOK_BIN)/entry-table.md
	sed -n '/^<!-- entry-table -->$$/,/^<!-- end entry-table -->$$/p' docs/hook.md \
	  | sed '1d;$$d' | diff -u - $(HOOK_BIN)/entry-table.md \
	  || { echo "FAIL: docs/hook.md's entry-point table is stale: make hook-table" >&2; exit 1; }
	@echo "entry points: $$(grep -c '^| `' $(HOOK_BIN)/entry-table.md) rows match docs/hook.md"

hook-table: $(HOOK_SO) $(HOOK_BIN)/entry_table $(HOOK_BIN)/driver.exports
	$(HOOK_TABLE_RUN) > $(HOOK_BIN)/entry-table.md
	awk -v t=$(HOOK_BIN)/entry-table.md '/^<!-- end entry-table -->$$/ {skip=0} \
	  !skip {print} /^<!-- entry-table -->$$/ {while ((getline l < t) > 0) print l; skip=1}' \
	  docs/hook.md > docs/hook.md.new && mv docs/hook.md.new docs/hook.md
TEST_RUN_EXTRA += hook-table-test

# ---- NVIDIA's CUDA runtimes on the fake driver (issue 22): libcudart.so.12
# from the PyPI wheel nvidia-cuda-runtime-cu12 and libcudart.so.13 from
# nvidia-cuda-runtime (3.5 MB each), fetched once into build/cudart/ with pip.
# No skip: a failed fetch fails the test and says why.
CUDART12_VERSION := 12.9.79
CUDART13_VERSION := 13.5.37
CUDART12 := $(BUILD)/cudart/$(CUDART12_VERSION)/nvidia/cuda_runtime/lib/libcudart.so.12
CUDART13 := $(BUILD)/cudart/$(CUDART13_VERSION)/nvidia/cu13/lib/libcudart.so.13

# $(call fetch_wheel,PACKAGE,VERSION,WHEEL-NAME): into build/cudart/VERSION.
define fetch_wheel
@rm -rf $(BUILD)/cudart/$(2) && mkdir -p $(BUILD)/cudart/$(2)/wheel
python3 -m pip download --quiet --no-deps --only-binary=:all: $(1)==$(2) -d $(BUILD)/cudart/$(2)/wheel \
  || { echo "FAIL: cannot fetch $(1)==$(2) from PyPI with 'python3 -m pip download'" \
       "(network, or pip missing): the CUDA runtime test cannot run" >&2; \
       rm -rf $(BUILD)/cudart/$(2); exit 1; }
python3 -m zipfile -e $(BUILD)/cudart/$(2)/wheel/$(3)-$(2)-*.whl $(BUILD)/cudart/$(2)
@test -f $@ || { echo "FAIL: the $(1) wheel holds no $@" >&2; exit 1; }
endef

.PHONY: cudart cudart-test
cudart: $(CUDART12) $(CUDART13)
$(CUDART12):
	$(call fetch_wheel,nvidia-cuda-runtime-cu12,$(CUDART12_VERSION),nvidia_cuda_runtime_cu12)
$(CUDART13):
	$(call fetch_wheel,nvidia-cuda-runtime,$(CUDART13_VERSION),nvidia_cuda_runtime)

$(HOOK_BIN)/test_cudart: c-tests/hook/test_cudart.c c-tests/test_util.h
	@mkdir -p $(HOOK_BIN)
	$(CC) $(CFLAGS) -o $@ $< -ldl -lpthread

cudart-test: $(HOOK_TEST_DEPS) $(HOOK_BIN)/test_cudart $(CUDART12) $(CUDART13)
	ACCELERATOR_STATE_DIR=$(TEST_STATE) $(HOOK_TEST_ENV) $(HOOK_BIN)/test_cudart \
	  $(BUILD)/libaccelerator_nvidia.so $(abspath $(HOOK_SO)) $(LIMITER_SO) \
	  $(abspath $(CUDART12)) $(abspath $(CUDART13))
TEST_RUN_EXTRA += cudart-test

# liblimiter.so: included by the top-level Makefile.
#
#   make limiter   build/liblimiter.so (and include/limiter.h)
#   make bench     the hot-path benchmark table (docs/limiter.md)
#
# Its C tests join `make test` through TEST_RUN_EXTRA and VALGRIND_EXTRA.

LIMITER_SO    := $(BUILD)/liblimiter.so
LIMITER_TESTS := test_limiter test_limiter_kill test_limiter_ns test_state_faults test_lifetime \
                 test_host_signals test_host_descriptors test_host_log
LIMITER_BIN   := $(BUILD)/c-tests/limiter

.PHONY: limiter bench limiter-test limiter-valgrind lifetime-test bench-scale

limiter: $(LIMITER_SO)

# Its own target directory: building it never rebuilds libaccelerator.
$(LIMITER_SO): FORCE
	$(CARGO) build --release -p limiter --target-dir target/limiter
	@mkdir -p $(BUILD)
	$(call replace,target/limiter/release/liblimiter.so,$@)
	ln -sfn liblimiter.so $(BUILD)/liblimiter.so.1  # its soname: -llimiter from build/ starts

include/limiter.h: $(LIMITER_SO)

$(LIMITER_BIN)/%: c-tests/limiter/%.c c-tests/limiter/*.h c-tests/test_util.h c-tests/ns_util.h \
                  include/accelerator.h include/limiter.h
	@mkdir -p $(LIMITER_BIN)
	$(CC) $(CFLAGS) -o $@ $< -ldl -lpthread

headers: $(LIMITER_SO)

limiter-test: $(LIMITER_SO) $(BUILD)/libaccelerator.so $(addprefix $(LIMITER_BIN)/,$(LIMITER_TESTS))
	c-tests/check_exports.sh $(LIMITER_SO) c-tests/limiter.exports
	ACCELERATOR_STATE_DIR=$(TEST_STATE) $(LIMITER_BIN)/test_limiter $(LIMITER_SO) $(BUILD)/libaccelerator.so
	ACCELERATOR_STATE_DIR=$(TEST_STATE) $(LIMITER_BIN)/test_limiter_kill $(LIMITER_SO) $(BUILD)/libaccelerator.so
	ACCELERATOR_STATE_DIR=$(TEST_STATE) $(LIMITER_BIN)/test_limiter_ns $(LIMITER_SO) $(BUILD)/libaccelerator.so
	ACCELERATOR_STATE_DIR=$(TEST_STATE) $(LIMITER_BIN)/test_state_faults $(LIMITER_SO) $(BUILD)/libaccelerator.so
	ACCELERATOR_STATE_DIR=$(TEST_STATE) $(LIMITER_BIN)/test_host_signals $(LIMITER_SO) $(BUILD)/libaccelerator.so
	ACCELERATOR_STATE_DIR=$(TEST_STATE) $(LIMITER_BIN)/test_host_descriptors $(LIMITER_SO) $(BUILD)/libaccelerator.so
	ACCELERATOR_STATE_DIR=$(TEST_STATE) $(LIMITER_BIN)/test_host_log $(LIMITER_SO) $(BUILD)/libaccelerator.so
	$(MAKE) --no-print-directory lifetime-test

# Worker lifetime, the full limits table (3,000 workers through it, 1,024
# live ones: about 10 s) and the churn of 100,000 workers (docs/scale.md): on tmpfs
# where there is one, as /run/accelerator is (a disk file system makes each
# worker's files cost milliseconds). About 1 min of CPU, 3.5 min on a busy
# 2-core machine; ACCELERATOR_TEST_CHURN=N for another count.
lifetime-test: $(LIMITER_SO) $(BUILD)/libaccelerator.so $(LIMITER_BIN)/test_lifetime
	d=$$(mktemp -d /dev/shm/accelerator-test.XXXXXX 2>/dev/null || mktemp -d /tmp/accelerator-test.XXXXXX) && \
	  ACCELERATOR_STATE_DIR=$$d $(LIMITER_BIN)/test_lifetime $(LIMITER_SO) $(BUILD)/libaccelerator.so; \
	  rc=$$?; rm -rf "$$d"; exit $$rc

limiter-valgrind: $(LIMITER_SO) $(BUILD)/libaccelerator.so $(addprefix $(LIMITER_BIN)/,$(LIMITER_TESTS))
	ACCELERATOR_STATE_DIR=$(TEST_STATE) ACCELERATOR_TEST_QUICK=1 \
	  $(VALGRIND) $(LIMITER_BIN)/test_limiter $(LIMITER_SO) $(BUILD)/libaccelerator.so
	ACCELERATOR_STATE_DIR=$(TEST_STATE) ACCELERATOR_TEST_QUICK=1 \
	  $(VALGRIND) $(LIMITER_BIN)/test_limiter_kill $(LIMITER_SO) $(BUILD)/libaccelerator.so
	ACCELERATOR_STATE_DIR=$(TEST_STATE) ACCELERATOR_TEST_QUICK=1 \
	  $(VALGRIND) $(LIMITER_BIN)/test_limiter_ns $(LIMITER_SO) $(BUILD)/libaccelerator.so
	ACCELERATOR_STATE_DIR=$(TEST_STATE) ACCELERATOR_TEST_QUICK=1 ACCELERATOR_TEST_VALGRIND=1 \
	  $(VALGRIND) $(LIMITER_BIN)/test_state_faults $(LIMITER_SO) $(BUILD)/libaccelerator.so

# The host against random content in a tenant's books, under ASan and UBSan
# (issue 23; about 10-30 s: a round whose forged word keeps a call waiting
# costs that call's budget).
FUZZ_CFLAGS := $(CFLAGS) -O1 -fsanitize=address,undefined -fno-omit-frame-pointer
$(LIMITER_BIN)/test_host_trust_asan: c-tests/limiter/test_host_trust.c c-tests/limiter/*.h c-tests/test_util.h c-tests/ns_util.h \
                                     include/accelerator.h include/limiter.h
	@mkdir -p $(LIMITER_BIN)
	$(CC) $(FUZZ_CFLAGS) -o $@ $< -ldl -lpthread

.PHONY: test-host-trust
test-host-trust: $(LIMITER_SO) $(BUILD)/libaccelerator.so $(LIMITER_BIN)/test_host_trust_asan
	ACCELERATOR_STATE_DIR=$(TEST_STATE) ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 \
	  UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	  $(LIMITER_BIN)/test_host_trust_asan $(LIMITER_SO) $(BUILD)/libaccelerator.so 300

TEST_RUN_EXTRA += test-host-trust

# The host's calls cost what changed, not what exists (docs/scale.md): the
# system calls of each host call at 100 workers, counted under strace, and
# what the host's view must see at once. About 10 s.
.PHONY: host-calls-test
host-calls-test: $(LIMITER_SO) $(BUILD)/libaccelerator_nvidia.so $(LIMITER_BIN)/test_host_calls \
                 $(NVIDIA_FAKES)/libnvidia-ml.so.1 $(NVIDIA_FAKES)/libcuda.so.1
	d=$$(mktemp -d /dev/shm/accelerator-test.XXXXXX 2>/dev/null || mktemp -d /tmp/accelerator-test.XXXXXX) && \
	  ACCELERATOR_STATE_DIR=$$d ACCELERATOR_LOG=error ACCELERATOR_VENDOR=nvidia \
	  ACCELERATOR_NVML_PATH=$(NVIDIA_FAKES)/libnvidia-ml.so.1 ACCELERATOR_CUDA_PATH=$(NVIDIA_FAKES)/libcuda.so.1 \
	  c-tests/limiter/check_host_calls.sh $(LIMITER_BIN)/test_host_calls $(LIMITER_SO) \
	  $(BUILD)/libaccelerator_nvidia.so GPU-00000000-0000-0000-0000-0000000000h1; rc=$$?; rm -rf "$$d"; [ $$rc -eq 0 ] || exit $$rc; \
	echo "the same without inotify (the view lists and checks every worker's files on each call):"; \
	d=$$(mktemp -d /dev/shm/accelerator-test.XXXXXX 2>/dev/null || mktemp -d /tmp/accelerator-test.XXXXXX) && \
	  ACCELERATOR_STATE_DIR=$$d ACCELERATOR_LOG=error ACCELERATOR_VENDOR=nvidia ACCELERATOR_TEST_NO_INOTIFY=1 \
	  ACCELERATOR_NVML_PATH=$(NVIDIA_FAKES)/libnvidia-ml.so.1 ACCELERATOR_CUDA_PATH=$(NVIDIA_FAKES)/libcuda.so.1 \
	  $(LIMITER_BIN)/test_host_calls $(LIMITER_SO) $(BUILD)/libaccelerator_nvidia.so \
	  GPU-00000000-0000-0000-0000-0000000000h1; rc=$$?; rm -rf "$$d"; exit $$rc

TEST_RUN_EXTRA += host-calls-test

# The host's view under load (issue 38): 4,300 workers' books (past the
# 4,096 the view keeps mapped) with every live process in every report, and
# private workers registered from 4 threads while another's reports remove
# unused ones. On tmpfs. About 15 s on a busy 2-core machine.
.PHONY: host-load-test
host-load-test: $(LIMITER_SO) $(BUILD)/libaccelerator.so $(LIMITER_BIN)/test_host_load
	d=$$(mktemp -d /dev/shm/accelerator-test.XXXXXX 2>/dev/null || mktemp -d /tmp/accelerator-test.XXXXXX) && \
	  ACCELERATOR_STATE_DIR=$$d $(LIMITER_BIN)/test_host_load $(LIMITER_SO) $(BUILD)/libaccelerator.so; \
	  rc=$$?; rm -rf "$$d"; exit $$rc

TEST_RUN_EXTRA += host-load-test

bench: $(LIMITER_SO) $(BUILD)/libaccelerator.so $(LIMITER_BIN)/bench_limiter
	ACCELERATOR_STATE_DIR=$(TEST_STATE) $(LIMITER_BIN)/bench_limiter $(LIMITER_SO) $(BUILD)/libaccelerator.so

# The scale benchmark (docs/scale.md): host calls, the sampler, the state
# directory and the hook's view (cuMemGetInfo_v2 in a hooked process, timed
# by bench_hook --view) at N workers x P processes, on the nvidia build and
# its fakes, on the fake driver's device 0 (the fake NVML's A40); then the
# churn of 100,000 workers (lifetime-test, whole: the rest of it takes ~2 s).
# BENCH_SCALE_ROWS="1x1,500x1" picks rows (the first 1x1);
# ACCELERATOR_TEST_CHURN=N another churn. About 1 min + the churn (1-3.5 min).
bench-scale: $(LIMITER_SO) $(BUILD)/libaccelerator_nvidia.so $(LIMITER_BIN)/bench_scale \
             $(BUILD)/libcuda_limiter.so $(BUILD)/c-tests/hook/bench_hook \
             $(NVIDIA_FAKES)/libnvidia-ml.so.1 $(NVIDIA_FAKES)/libcuda.so.1
	d=$$(mktemp -d /dev/shm/accelerator-bench.XXXXXX 2>/dev/null || mktemp -d /tmp/accelerator-bench.XXXXXX) && \
	  ACCELERATOR_STATE_DIR=$$d ACCELERATOR_LOG=error ACCELERATOR_VENDOR=nvidia \
	  ACCELERATOR_NVML_PATH=$(NVIDIA_FAKES)/libnvidia-ml.so.1 ACCELERATOR_CUDA_PATH=$(NVIDIA_FAKES)/libcuda.so.1 \
	  LD_LIBRARY_PATH=$(abspath $(NVIDIA_FAKES)) \
	  $(LIMITER_BIN)/bench_scale $(LIMITER_SO) $(BUILD)/libaccelerator_nvidia.so \
	  GPU-11111111-1111-1111-1111-1111111111a4 $(abspath $(BUILD)/libcuda_limiter.so) \
	  $(BUILD)/c-tests/hook/bench_hook; rc=$$?; rm -rf "$$d"; exit $$rc
	@echo; echo "The churn (make lifetime-test: test_lifetime, whose last line is the churn):"
	@$(MAKE) --no-print-directory lifetime-test

bench: bench-scale

TEST_RUN_EXTRA += limiter-test
VALGRIND_EXTRA += limiter-valgrind

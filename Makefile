# libaccelerator.so and friends. `make help` lists the targets; the two that
# matter on a fresh machine are `make run` and `make test`.

CARGO    ?= cargo
CC       ?= cc
BUILD    := build
CFLAGS   := -std=c11 -Wall -Wextra -Werror -O2 -g -D_GNU_SOURCE -Iinclude
VALGRIND := valgrind --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite \
            --show-leak-kinds=definite --track-fds=no --quiet
# Every test run gets a private state directory.
TEST_STATE = $(shell mktemp -d /tmp/accelerator-test.XXXXXX)

VENDORS  := stub ascend nvidia amd habana universal

# Copy build outputs in by rename, never over the old file in place: a
# process that mapped the old one (a host that loaded
# build/libaccelerator_nvidia.so) keeps its pages. $(call replace,SOURCES,DEST):
# DEST is a file (one source) or a directory.
replace = for s in $(1); do d=$(2); if [ -d "$$d" ]; then d="$$d/$$(basename "$$s")"; fi; \
            cp "$$s" "$$d.tmp.$$$$" && mv -f "$$d.tmp.$$$$" "$$d" || exit 1; done
.PHONY: all help $(VENDORS) run test test-run test-valgrind check-headers headers lint cargo-test \
        install clean FORCE

all: $(BUILD)/libaccelerator.so

# One target directory per vendor: switching features never rebuilds the others.
$(BUILD)/libaccelerator_%.so: FORCE
	$(CARGO) build --release --no-default-features --features $* --target-dir target/$*
	@mkdir -p $(BUILD)
	$(call replace,target/$*/release/libaccelerator.so,$@)

$(BUILD)/libaccelerator.so: $(BUILD)/libaccelerator_stub.so
	$(call replace,$<,$@)

$(VENDORS): %: $(BUILD)/libaccelerator_%.so

$(BUILD)/probe: probe/probe.c include/accelerator.h
	@mkdir -p $(BUILD)
	$(CC) $(CFLAGS) -o $@ $< -ldl

run: $(BUILD)/libaccelerator.so $(BUILD)/probe
	$(BUILD)/probe $(BUILD)/libaccelerator.so

headers: $(BUILD)/libaccelerator.so

# The headers build.rs regenerated must be the ones committed.
check-headers: headers
	@git diff --exit-code --stat -- include/ || \
	  { echo "include/ is stale: commit the regenerated headers"; exit 1; }

lint:
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets --target-dir target/stub -- -D warnings
	$(CARGO) clippy --workspace --all-targets --no-default-features --features universal \
	  --target-dir target/all -- -D warnings

cargo-test:
	$(CARGO) test --workspace --target-dir target/stub

# C programs built against the header, linked at run time through dlopen
# or directly (-L build) as each test needs.
C_TESTS := test_accelerator layout
$(BUILD)/c-tests/%: c-tests/%.c c-tests/*.h include/accelerator.h
	@mkdir -p $(BUILD)/c-tests
	$(CC) $(CFLAGS) -o $@ $< -L$(BUILD) -ldl -lpthread

# Extra test steps added by component fragments (vendors, limiter, go).
TEST_RUN_EXTRA :=
VALGRIND_EXTRA :=
-include vendors/*/vendor.mk limiter/limiter.mk hook/hook.mk go/go.mk packaging/packaging.mk probe/probe.mk \
         c-tests/v2/v2.mk gpu-kit/gpu-kit.mk tests/readme.mk tests/frameworks/frameworks.mk

# The limiter's records reach every vendor's per-process functions: run
# against the stub and against each vendor's fake driver.
$(BUILD)/c-tests/test_usage_merge: c-tests/test_usage_merge.c c-tests/test_util.h \
                                   include/accelerator.h include/limiter.h
	@mkdir -p $(BUILD)/c-tests
	$(CC) $(CFLAGS) -o $@ $< -ldl

.PHONY: test-usage-merge
test-usage-merge: $(LIMITER_SO) $(BUILD)/c-tests/test_usage_merge $(BUILD)/libaccelerator.so \
                  $(NVIDIA_TEST_DEPS) $(ASCEND_TEST_DEPS) $(AMD_TEST_DEPS) $(HABANA_TEST_DEPS)
	ACCELERATOR_STATE_DIR=$(TEST_STATE) \
	  $(BUILD)/c-tests/test_usage_merge $(BUILD)/libaccelerator.so $(LIMITER_SO)
	ACCELERATOR_STATE_DIR=$(TEST_STATE) ACCELERATOR_VENDOR=nvidia \
	  ACCELERATOR_NVML_PATH=$(NVIDIA_FAKES)/libnvidia-ml.so.1 \
	  ACCELERATOR_CUDA_PATH=$(NVIDIA_FAKES)/libcuda.so.1 \
	  $(BUILD)/c-tests/test_usage_merge $(BUILD)/libaccelerator_nvidia.so $(LIMITER_SO)
	ACCELERATOR_STATE_DIR=$(TEST_STATE) ACCELERATOR_VENDOR=ascend \
	  ACCELERATOR_DCMI_PATH=$(ASCEND_FAKES)/libdcmi.so FAKE_DCMI_STATE=$(TEST_STATE) \
	  $(BUILD)/c-tests/test_usage_merge $(BUILD)/libaccelerator_ascend.so $(LIMITER_SO)
	ACCELERATOR_STATE_DIR=$(TEST_STATE) $(AMD_ENV) \
	  $(BUILD)/c-tests/test_usage_merge $(BUILD)/libaccelerator_amd.so $(LIMITER_SO)
	ACCELERATOR_STATE_DIR=$(TEST_STATE) $(HABANA_ENV) \
	  $(BUILD)/c-tests/test_usage_merge $(BUILD)/libaccelerator_habana.so $(LIMITER_SO)

TEST_RUN_EXTRA += test-usage-merge

# fork() from a threaded host while its threads are inside each vendor (the
# stub, the NVIDIA fakes, the Ascend fake, the AMD fake, the HLML fake): 500 forks each, 0 hangs (issue
# 23; about 5-40 s per vendor on a loaded 2-core machine).
.PHONY: test-fork-vendors
test-fork-vendors: $(BUILD)/c-tests/test_fork_vendors $(BUILD)/libaccelerator.so $(NVIDIA_TEST_DEPS) \
                   $(ASCEND_TEST_DEPS) $(AMD_TEST_DEPS) $(HABANA_TEST_DEPS)
	ACCELERATOR_STATE_DIR=$(TEST_STATE) ACCELERATOR_LOG=error \
	  $(BUILD)/c-tests/test_fork_vendors $(BUILD)/libaccelerator.so 500
	ACCELERATOR_STATE_DIR=$(TEST_STATE) ACCELERATOR_LOG=error $(HABANA_ENV) \
	  $(BUILD)/c-tests/test_fork_vendors $(BUILD)/libaccelerator_habana.so 500
	ACCELERATOR_STATE_DIR=$(TEST_STATE) ACCELERATOR_LOG=error $(AMD_ENV) \
	  $(BUILD)/c-tests/test_fork_vendors $(BUILD)/libaccelerator_amd.so 500
	ACCELERATOR_STATE_DIR=$(TEST_STATE) ACCELERATOR_LOG=error ACCELERATOR_VENDOR=nvidia \
	  ACCELERATOR_NVML_PATH=$(NVIDIA_FAKES)/libnvidia-ml.so.1 \
	  ACCELERATOR_CUDA_PATH=$(NVIDIA_FAKES)/libcuda.so.1 \
	  $(BUILD)/c-tests/test_fork_vendors $(BUILD)/libaccelerator_nvidia.so 500
	ACCELERATOR_STATE_DIR=$(TEST_STATE) ACCELERATOR_LOG=error ACCELERATOR_VENDOR=ascend \
	  ACCELERATOR_DCMI_PATH=$(ASCEND_FAKES)/libdcmi.so FAKE_DCMI_STATE=$(TEST_STATE) \
	  $(BUILD)/c-tests/test_fork_vendors $(BUILD)/libaccelerator_ascend.so 500

TEST_RUN_EXTRA += test-fork-vendors

test-run: $(BUILD)/libaccelerator.so $(addprefix $(BUILD)/c-tests/,$(C_TESTS)) $(TEST_RUN_EXTRA)
	$(CARGO) run -q --target-dir target/stub --example layout > $(BUILD)/layout.rust.txt
	$(BUILD)/c-tests/layout > $(BUILD)/layout.c.txt
	diff -u $(BUILD)/layout.rust.txt $(BUILD)/layout.c.txt
	c-tests/check_exports.sh $(BUILD)/libaccelerator.so c-tests/accelerator.exports
	ACCELERATOR_STATE_DIR=$(TEST_STATE) $(BUILD)/c-tests/test_accelerator $(BUILD)/libaccelerator.so

test-valgrind: $(BUILD)/libaccelerator.so $(BUILD)/c-tests/test_accelerator $(VALGRIND_EXTRA)
	ACCELERATOR_STATE_DIR=$(TEST_STATE) ACCELERATOR_TEST_QUICK=1 \
	  $(VALGRIND) $(BUILD)/c-tests/test_accelerator $(BUILD)/libaccelerator.so

test: lint cargo-test check-headers test-run test-valgrind

clean:
	rm -rf $(BUILD) target

FORCE:

# `make help`: every target, one line each. tests/readme.sh (make test-readme)
# fails when a .PHONY target has no line here.
define HELP
Build
  all (default)         build/libaccelerator.so (stub vendor) and build/libcuda_limiter.so
  stub, nvidia, ascend, amd, habana  build/libaccelerator_<vendor>.so, one Cargo feature each
  universal             build/libaccelerator_universal.so: nvidia, ascend, amd and habana, chosen by the PCI bus
  limiter               build/liblimiter.so (and include/limiter.h)
  hook                  build/libcuda_limiter.so, the CUDA preload hook
  headers               regenerate the cbindgen headers in include/
  gpu-kit               build/gpu-kit/, the GPU verification kit to copy to a GPU machine
  clean                 remove build/ and target/
Run
  run                   the probe against the stub build
  help                  this list
Test (all part of `make test` unless marked)
  test                  everything CI runs: lint, cargo-test, check-headers, test-run, test-valgrind
  lint                  cargo fmt --check and clippy -D warnings, for every feature
  cargo-test            the Rust unit and integration tests
  check-headers         the committed include/ headers are what cbindgen generates
  test-run              the C suites, Go, probe, install, GPU kit and README tests below
  test-valgrind         the C suites under valgrind memcheck
  test-usage-merge      the limiter's records in each vendor's process listings
  test-nvidia           the NVIDIA vendor against its fake NVML and CUDA driver
  test-cuda-events      the fake CUDA driver's events and stream queries on its simulated timeline
  test-ascend           the Ascend vendor against its fake DCMI
  test-amd              the AMD vendor against its fake AMD SMI 24.x/25.x/26.x (MI300X and MI210 nodes)
  test-amd-layout       the fake AMD SMI's layouts against each version's header figures
  test-amd-probe        the probe on the AMD fake (each AMD SMI version): XGMI topology, templates
  test-amd-valgrind     the AMD suite under valgrind, on each AMD SMI version
  test-go-amd           the cgo binding against the AMD build
  test-habana           the Habana vendor against its fake HLML 1.10/1.17/1.18/1.24 (Gaudi 2 and Gaudi 3 nodes)
  test-habana-layout    the fake HLML's layouts against each release's figures; the fake against a real node's answers
  test-habana-probe     the probe on the Habana fake (each HLML release)
  test-habana-valgrind  the Habana suite under valgrind, on each HLML release
  test-go-habana        the cgo binding against the Habana build
  test-pci              PCI discovery on fake sysfs trees: selection, errors, probe --pci, --json schema,
                        the universal build's choice on each
  test-fork-vendors     500 forks while threads call every vendor function (stub, NVIDIA, Ascend, AMD)
  test-host-trust       forged and fuzzed worker books, truncated limits.shm, host reports (ASan)
  host-calls-test       system calls per host call at 100 workers (strace); what the host view sees at once
  host-load-test        4,300 workers' books in every report; private workers registered while reports remove them
  test-nvidia-valgrind, test-ascend-valgrind  the same under valgrind
  test-link             each vendor build (universal too) linked by -l and by path from a copy of build/
  test-v2-layout        every size and offset of the v2 ABI
  test-v2               the v2 Accel* suite for stub, NVIDIA and Ascend builds
  test-v2-own-worker    v2 limits without ACCELERATOR_WORKER_ID bind the calling process
  test-v2-valgrind      the v2 suite under valgrind
  test-v2-go            go/purego, the hypervisor's loader, under -race for each vendor
  test-go               the Go binding (cgo): go vet and go test -race
  test-probe            the probe's text, --json and --watch output
  valgrind-probe        the probe under valgrind
  limiter-test          liblimiter: exports, limits, SIGKILLs, pid namespaces, state faults, host pressure, lifetime
  lifetime-test         LimiterRemoveWorker, reclamation, books sizes, churn of 100,000 workers
  limiter-valgrind      the limiter suites under valgrind
  hook-test             the CUDA hook: three apps on the fake driver, directly and in pid namespaces
  hook-paths-test       every path that takes device memory, five ways each, under a limit
  hook-valgrind         the hook suite under valgrind
  cudart-test           NVIDIA's CUDA runtimes 12.9 and 13.5 (PyPI wheels) under the hook
  cudart                fetch those runtimes into build/cudart/ (pip; once)
  test-cupy             CuPy's MemoryPool and MemoryAsyncPool under the hook (pinned PyPI wheels)
  test-torch            PyTorch's three allocators under the hook (not in make test: CI runs it after)
  test-frameworks       test-cupy and test-torch (not in make test)
  compute-test          compute limits: launch throttling on the fake driver's simulated device
  compute-cases-test    compute limits by kernel length, processes per worker, 0.1 s and 1 s sampling; priority-test
  priority-test         the inference worker (priority 90) beside a training worker (10): p99 latency, training share
  hook-table-test       docs/hook.md's entry-point table matches what the hook resolves
  sampler-fork-test     the host compute sampler across fork() from a threaded host
  install-test          install into a temporary DESTDIR, build C and Go against it via pkg-config
  dist-test             make dist, unpacked: builds, links, sonames, docs and their links, a pkg-config build
  test-gpu-kit          the GPU kit against the fake NVML and CUDA libraries
  test-readme           README's runnable commands, the docs' links, this list
  test-abi-reference    docs/{abi,abi-v2,limiter}-reference.md match the headers, document every export
  replace-test          build outputs are replaced by rename, never overwritten in place
Benchmarks (not part of `make test`)
  bench                 the limiter's hot path, the NVIDIA vendor, the CUDA hook, the universal build
  bench-universal       the universal build's size and load time beside each single-vendor build's
  bench-nvidia          the NVIDIA vendor against its fakes
  hook-bench            the CUDA hook's added cost per allocation, lookup, launch and memory view
  hami-bench            hook-bench with HAMi-core beside our hook (HAMI_CORE=<its checkout>, HAMI_RUNS=3)
  bench-scale           host calls, sampler, state, hook view at 1-500 workers x 1-500 processes; churn
Maintenance
  hook-table            regenerate docs/hook.md's entry-point table
  abi-reference         regenerate the headers' parts of docs/{abi,abi-v2,limiter}-reference.md
  hook-paths-table      regenerate docs/hook.md's table of memory paths
Packaging
  install               install (PREFIX, DESTDIR, LIBDIR, DOCDIR, INSTALL_VENDOR=universal|stub|nvidia|ascend|amd|habana)
  uninstall             remove what install put there
  dist                  build/accelerator-<version>.tar.gz: every build (universal the default), docs, CHANGELOG
endef
help:
	$(info $(HELP))@:

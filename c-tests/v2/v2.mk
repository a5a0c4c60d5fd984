# The v2 (Accel*) ABI's tests and the build-tree linking test:
#   test-link       c-tests/link: each vendor build linked by -l and by path
#   test-v2-layout  every size and offset of ABI-v2.md
#   test-v2         the v2 C suite for stub, NVIDIA fake, Ascend fake, AMD fake, Habana fake
#   test-v2-valgrind  the same under valgrind (part of test-valgrind)
#   test-v2-go      go/purego: the hypervisor's loader, for the same vendors
V2_CFLAGS := $(filter-out -Iinclude,$(CFLAGS)) -Iinclude/v2
V2_BIN    := $(BUILD)/c-tests/v2

$(V2_BIN)/%: c-tests/v2/%.c c-tests/test_util.h include/v2/accelerator.h
	@mkdir -p $(V2_BIN)
	$(CC) $(V2_CFLAGS) -o $@ $< -ldl -lpthread

# A capabilities directory as the NVIDIA driver publishes it, for GPU 0's
# MIG instances: GI g has minor 100+g, its CI 0 minor 200+g.
define V2_NVIDIA_CAPS
caps=$$(mktemp -d /tmp/accelerator-caps.XXXXXX); \
for g in $$(seq 0 14); do mkdir -p $$caps/gpu0/mig/gi$$g/ci0; \
  printf 'DeviceFileMinor: %d\nDeviceFileMode: 292\n' $$((100+g)) > $$caps/gpu0/mig/gi$$g/access; \
  printf 'DeviceFileMinor: %d\nDeviceFileMode: 292\n' $$((200+g)) > $$caps/gpu0/mig/gi$$g/ci0/access; \
done
endef

V2_NVIDIA_ENV = ACCELERATOR_VENDOR=nvidia ACCELERATOR_NVIDIA_CAPS_DIR=$$caps \
  ACCELERATOR_NVML_PATH=$(NVIDIA_FAKES)/libnvidia-ml.so.1 \
  ACCELERATOR_CUDA_PATH=$(NVIDIA_FAKES)/libcuda.so.1
V2_ASCEND_ENV = ACCELERATOR_VENDOR=ascend ACCELERATOR_DCMI_PATH=$(ASCEND_FAKES)/libdcmi.so

# $(1): what runs the program (valgrind with its variables, or nothing);
# it comes after `env` so that valgrind runs the test binary itself.
define V2_RUN
	st=$(TEST_STATE); env ACCELERATOR_STATE_DIR=$$st $(1) \
	  $(V2_BIN)/test_v2 $(BUILD)/libaccelerator_stub.so stub mig-1g.7gb
	$(V2_NVIDIA_CAPS); st=$(TEST_STATE); env ACCELERATOR_STATE_DIR=$$st $(V2_NVIDIA_ENV) $(1) \
	  $(V2_BIN)/test_v2 $(BUILD)/libaccelerator_nvidia.so nvidia 1g.10gb; rc=$$?; rm -rf $$caps; exit $$rc
	st=$(TEST_STATE); env ACCELERATOR_STATE_DIR=$$st FAKE_DCMI_STATE=$$st $(V2_ASCEND_ENV) $(1) \
	  $(V2_BIN)/test_v2 $(BUILD)/libaccelerator_ascend.so ascend vir02
	st=$(TEST_STATE); env ACCELERATOR_STATE_DIR=$$st $(AMD_ENV) $(1) \
	  $(V2_BIN)/test_v2 $(BUILD)/libaccelerator_amd.so amd CPX
	st=$(TEST_STATE); env ACCELERATOR_STATE_DIR=$$st $(HABANA_ENV) $(1) \
	  $(V2_BIN)/test_v2 $(BUILD)/libaccelerator_habana.so habana -
endef

V2_TEST_DEPS := $(V2_BIN)/test_v2 $(BUILD)/libaccelerator_stub.so \
  $(NVIDIA_TEST_DEPS) $(ASCEND_TEST_DEPS) $(AMD_TEST_DEPS) $(HABANA_TEST_DEPS)

.PHONY: test-link test-v2-layout test-v2 test-v2-valgrind
test-link: $(BUILD)/libaccelerator.so $(BUILD)/libaccelerator_stub.so $(BUILD)/libaccelerator_universal.so $(LIMITER_SO) \
           $(BUILD)/libaccelerator_nvidia.so $(BUILD)/libaccelerator_ascend.so \
           $(NVIDIA_FAKES)/libnvidia-ml.so.1 $(NVIDIA_FAKES)/libcuda.so.1 $(ASCEND_FAKES)/libdcmi.so \
           $(AMD_TEST_DEPS) $(HABANA_TEST_DEPS)
	CC="$(CC)" $(AMD_FAKE_ENV) $(HABANA_FAKE_ENV) c-tests/link/test_link.sh $(BUILD) $(NVIDIA_FAKES) $(ASCEND_FAKES)
	c-tests/check_exports.sh $(BUILD)/libaccelerator_universal.so c-tests/accelerator.exports

test-v2-layout: $(V2_BIN)/layout
	$(V2_BIN)/layout

test-v2: $(V2_TEST_DEPS)
	$(call V2_RUN,)

# Worker-less limits bind the calling process alone (needs liblimiter).
$(V2_BIN)/test_v2_own_worker: c-tests/v2/test_v2_own_worker.c c-tests/test_util.h \
                              include/v2/accelerator.h include/v2/limiter.h
	@mkdir -p $(V2_BIN)
	$(CC) $(V2_CFLAGS) -o $@ $< -ldl

.PHONY: test-v2-own-worker
test-v2-own-worker: $(V2_BIN)/test_v2_own_worker $(BUILD)/libaccelerator_stub.so $(LIMITER_SO)
	ACCELERATOR_STATE_DIR=$(TEST_STATE) \
	  $(V2_BIN)/test_v2_own_worker $(BUILD)/libaccelerator_stub.so $(LIMITER_SO)

test-v2-valgrind: $(V2_TEST_DEPS)
	$(call V2_RUN,ACCELERATOR_TEST_QUICK=1 $(VALGRIND))

TEST_RUN_EXTRA += test-link test-v2-layout test-v2 test-v2-own-worker
VALGRIND_EXTRA += test-v2-valgrind

# The hypervisor's loader (go/purego): purego with RTLD_NOW|RTLD_GLOBAL,
# under -race (which needs cgo), once per vendor build.
V2_GO_ENV = CGO_ENABLED=1 GOTOOLCHAIN=local
.PHONY: test-v2-go
test-v2-go: $(BUILD)/libaccelerator_stub.so $(NVIDIA_TEST_DEPS) $(ASCEND_TEST_DEPS) $(AMD_TEST_DEPS) \
            $(HABANA_TEST_DEPS)
	cd go && $(V2_GO_ENV) $(GO) vet ./purego/
	st=$(TEST_STATE); cd go && $(V2_GO_ENV) ACCELERATOR_STATE_DIR=$$st \
	  ACCEL_V2_LIB=$(CURDIR)/$(BUILD)/libaccelerator_stub.so ACCEL_V2_VENDOR=stub \
	  ACCEL_V2_TEMPLATE=mig-1g.7gb $(GO) test -race -count=1 -v ./purego/
	st=$(TEST_STATE); cd go && $(V2_GO_ENV) ACCELERATOR_STATE_DIR=$$st \
	  ACCEL_V2_LIB=$(CURDIR)/$(BUILD)/libaccelerator_nvidia.so ACCEL_V2_VENDOR=nvidia \
	  ACCEL_V2_TEMPLATE=1g.10gb ACCELERATOR_VENDOR=nvidia \
	  ACCELERATOR_NVML_PATH=$(CURDIR)/$(NVIDIA_FAKES)/libnvidia-ml.so.1 \
	  ACCELERATOR_CUDA_PATH=$(CURDIR)/$(NVIDIA_FAKES)/libcuda.so.1 \
	  $(GO) test -race -count=1 -v ./purego/
	st=$(TEST_STATE); cd go && $(V2_GO_ENV) ACCELERATOR_STATE_DIR=$$st FAKE_DCMI_STATE=$$st \
	  ACCEL_V2_LIB=$(CURDIR)/$(BUILD)/libaccelerator_ascend.so ACCEL_V2_VENDOR=ascend \
	  ACCEL_V2_TEMPLATE=vir02 ACCELERATOR_VENDOR=ascend \
	  ACCELERATOR_DCMI_PATH=$(CURDIR)/$(ASCEND_FAKES)/libdcmi.so \
	  $(GO) test -race -count=1 -v ./purego/
	st=$(TEST_STATE); cd go && $(V2_GO_ENV) ACCELERATOR_STATE_DIR=$$st $(AMD_ENV) \
	  ACCEL_V2_LIB=$(CURDIR)/$(BUILD)/libaccelerator_amd.so ACCEL_V2_VENDOR=amd ACCEL_V2_TEMPLATE=CPX \
	  $(GO) test -race -count=1 -v ./purego/
	st=$(TEST_STATE); cd go && $(V2_GO_ENV) ACCELERATOR_STATE_DIR=$$st $(HABANA_ENV) \
	  ACCEL_V2_LIB=$(CURDIR)/$(BUILD)/libaccelerator_habana.so ACCEL_V2_VENDOR=habana ACCEL_V2_TEMPLATE=- \
	  $(GO) test -race -count=1 -v ./purego/

TEST_RUN_EXTRA += test-v2-go

# The amd vendor's tests: a fake libamd_smi.so (c-tests/fakes/amdsmi.c, an
# 8x MI300X node, or 2x MI210 with FAKE_AMDSMI_NODE=mi210), built as each
# AMD SMI version the vendor reads (AMDSMI_VERSIONS: their layouts and enum
# values differ), a sysfs tree for what the kernel publishes beside each
# PCI device (render node, available_compute_partition), c-tests/test_amd.c
# driven through the C ABI of build/libaccelerator_amd.so, and
# c-tests/amd_layout.c (the AMD SMI structure layouts against the real
# headers' figures, per version). Every AMD suite runs on every version;
# the suites of other areas use $(AMD_FAKES)/libamd_smi.so, the 24.x one.
AMD_FAKES := $(BUILD)/fakes/amd
AMDSMI_VERSIONS := 24 25 26

$(AMD_FAKES)/v%/libamd_smi.so: c-tests/fakes/amdsmi.c c-tests/fakes/amdsmi.h
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -DFAKE_AMDSMI_MAJOR=$* -fPIC -shared -Wl,-Bsymbolic -Wl,-soname,libamd_smi.so -o $@ $<

$(AMD_FAKES)/libamd_smi.so: $(AMD_FAKES)/v24/libamd_smi.so
	cp $< $@

# What sysfs holds for the fake's GPUs: bus 0x0c + 0x10*i, renderD(128+i);
# the MI300X compute modes the kernel lists.
$(AMD_FAKES)/sys/.done: vendors/amd/vendor.mk
	rm -rf $(AMD_FAKES)/sys
	for i in 0 1 2 3 4 5 6 7; do \
	  d=$(AMD_FAKES)/sys/bus/pci/devices/$$(printf '0000:%02x:00.0' $$((0x0c + 0x10 * i))); \
	  mkdir -p $$d/drm/card$$i $$d/drm/renderD$$((128 + i)); \
	  echo 'SPX, DPX, QPX, CPX' > $$d/available_compute_partition; \
	done
	touch $@

$(BUILD)/c-tests/amd_layout_%: c-tests/amd_layout.c c-tests/fakes/amdsmi.h
	@mkdir -p $(BUILD)/c-tests
	$(CC) $(CFLAGS) -DFAKE_AMDSMI_MAJOR=$* -Ic-tests -o $@ $<

$(BUILD)/c-tests/test_amd: c-tests/test_amd.c c-tests/vendor_suite.h c-tests/test_util.h c-tests/vendor_api.h \
  include/accelerator.h
	@mkdir -p $(BUILD)/c-tests
	$(CC) $(CFLAGS) -o $@ $< -ldl -lpthread

AMD_TEST_DEPS := $(BUILD)/libaccelerator_amd.so $(BUILD)/c-tests/test_amd \
  $(foreach v,$(AMDSMI_VERSIONS),$(BUILD)/c-tests/amd_layout_$(v) $(AMD_FAKES)/v$(v)/libamd_smi.so) \
  $(AMD_FAKES)/libamd_smi.so $(AMD_FAKES)/sys/.done

# Where the AMD build finds the fake (absolute: some suites change
# directory), and the environment every AMD suite runs in; amd_env_v is
# that environment with the fake of AMD SMI version $(1).
AMD_FAKE_ENV = ACCELERATOR_AMDSMI_PATH=$(CURDIR)/$(AMD_FAKES)/libamd_smi.so \
  ACCELERATOR_AMD_SYSFS=$(CURDIR)/$(AMD_FAKES)/sys
AMD_ENV = ACCELERATOR_VENDOR=amd $(AMD_FAKE_ENV)
amd_env_v = ACCELERATOR_VENDOR=amd ACCELERATOR_AMDSMI_PATH=$(CURDIR)/$(AMD_FAKES)/v$(1)/libamd_smi.so \
  ACCELERATOR_AMD_SYSFS=$(CURDIR)/$(AMD_FAKES)/sys FAKE_AMDSMI_MAJOR=$(1)

# One command per AMD SMI version: $(call amd_each,COMMAND) runs COMMAND
# in amd_env_v of each version (the blank line ends each command).
define amd_each_one
	@echo "--- AMD SMI $(1).x"
	ACCELERATOR_STATE_DIR=$(TEST_STATE) $(call amd_env_v,$(1)) $(2)

endef
amd_each = $(foreach v,$(AMDSMI_VERSIONS),$(call amd_each_one,$(v),$(1)))

.PHONY: test-amd test-amd-valgrind test-amd-probe test-amd-layout
test-amd-layout: $(foreach v,$(AMDSMI_VERSIONS),$(BUILD)/c-tests/amd_layout_$(v))
	$(foreach v,$(AMDSMI_VERSIONS),$(BUILD)/c-tests/amd_layout_$(v) &&) true

test-amd-probe: $(AMD_TEST_DEPS) $(BUILD)/probe
	$(call amd_each,vendors/amd/test_probe_amd.sh $(BUILD)/probe $(BUILD)/libaccelerator_amd.so)

# The Rust unit tests of vendors/amd (the AMD SMI layouts against the
# headers' figures, the version detection, the status mapping) build only
# with the feature.
test-amd: $(AMD_TEST_DEPS) $(BUILD)/probe test-amd-layout test-amd-probe
	$(CARGO) test -q --release --lib --no-default-features --features amd --target-dir target/amd -- amd:: dynlib::
	$(call amd_each,$(BUILD)/c-tests/test_amd $(BUILD)/libaccelerator_amd.so)

test-amd-valgrind: $(AMD_TEST_DEPS) $(BUILD)/probe
	$(call amd_each,ACCELERATOR_TEST_QUICK=1 $(VALGRIND) $(BUILD)/c-tests/test_amd $(BUILD)/libaccelerator_amd.so)
	$(call amd_each,$(VALGRIND) $(BUILD)/probe $(BUILD)/libaccelerator_amd.so > /dev/null)

TEST_RUN_EXTRA += test-amd
VALGRIND_EXTRA += test-amd-valgrind

# The cgo binding (go/vendorcheck) against the AMD build: pkg-config finds
# a libaccelerator.so that is the amd build (its soname,
# libaccelerator_amd.so, beside it), as an installed AMD package would be.
AMD_CGO := $(BUILD)/amd-cgo
.PHONY: test-go-amd
test-go-amd: $(AMD_TEST_DEPS) packaging/accelerator.pc.in
	rm -rf $(AMD_CGO) && mkdir -p $(AMD_CGO)/pkgconfig
	cp $(BUILD)/libaccelerator_amd.so $(AMD_CGO)/
	ln -s libaccelerator_amd.so $(AMD_CGO)/libaccelerator.so
	sed -e 's|@PREFIX@|$(CURDIR)|' -e 's|@LIBDIR@|$(CURDIR)/$(AMD_CGO)|' \
	    -e 's|@INCLUDEDIR@|$(CURDIR)/include|' -e "s|@VERSION@|$$(packaging/version.sh)|" \
	    -e '/^Libs:/s|$$| -Wl,-rpath,$${libdir}|' packaging/accelerator.pc.in > $(AMD_CGO)/pkgconfig/accelerator.pc
	$(foreach v,$(AMDSMI_VERSIONS),st=$(TEST_STATE); cd go && CGO_ENABLED=1 GOTOOLCHAIN=local \
	  PKG_CONFIG_PATH=$(CURDIR)/$(AMD_CGO)/pkgconfig CGO_LDFLAGS="-Wl,-rpath,$(CURDIR)/$(AMD_CGO)" \
	  ACCELERATOR_STATE_DIR=$$st $(call amd_env_v,$(v)) ACCEL_CGO_VENDOR=amd ACCEL_CGO_TEMPLATE=CPX \
	  $(GO) test -race -count=1 -v ./vendorcheck/ && cd .. &&) true

TEST_RUN_EXTRA += test-go-amd

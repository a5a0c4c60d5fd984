# The amd vendor's tests: a fake libamd_smi.so (c-tests/fakes/amdsmi.c, an
# 8x MI300X node, or 2x MI210 with FAKE_AMDSMI_NODE=mi210), a sysfs tree
# for what the kernel publishes beside each PCI device (render node,
# available_compute_partition), c-tests/test_amd.c driven through the C ABI
# of build/libaccelerator_amd.so, and c-tests/amd_layout.c (the AMD SMI
# structure layouts against the real header's figures).
AMD_FAKES := $(BUILD)/fakes/amd

$(AMD_FAKES)/libamd_smi.so: c-tests/fakes/amdsmi.c c-tests/fakes/amdsmi.h
	@mkdir -p $(AMD_FAKES)
	$(CC) $(CFLAGS) -fPIC -shared -Wl,-Bsymbolic -Wl,-soname,libamd_smi.so -o $@ $<

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

$(BUILD)/c-tests/amd_layout: c-tests/amd_layout.c c-tests/fakes/amdsmi.h
	@mkdir -p $(BUILD)/c-tests
	$(CC) $(CFLAGS) -Ic-tests -o $@ $<

$(BUILD)/c-tests/test_amd: c-tests/test_amd.c c-tests/test_util.h c-tests/vendor_api.h include/accelerator.h
	@mkdir -p $(BUILD)/c-tests
	$(CC) $(CFLAGS) -o $@ $< -ldl -lpthread

AMD_TEST_DEPS := $(BUILD)/libaccelerator_amd.so $(BUILD)/c-tests/test_amd \
  $(BUILD)/c-tests/amd_layout $(AMD_FAKES)/libamd_smi.so $(AMD_FAKES)/sys/.done

# Where the AMD build finds the fake (absolute: some suites change
# directory), and the environment every AMD suite runs in.
AMD_FAKE_ENV = ACCELERATOR_AMDSMI_PATH=$(CURDIR)/$(AMD_FAKES)/libamd_smi.so \
  ACCELERATOR_AMD_SYSFS=$(CURDIR)/$(AMD_FAKES)/sys
AMD_ENV = ACCELERATOR_VENDOR=amd $(AMD_FAKE_ENV)

.PHONY: test-amd test-amd-valgrind test-amd-probe
# The Rust unit tests of vendors/amd (the AMD SMI layouts against the
# header's figures, the status mapping) build only with the feature.
test-amd: $(AMD_TEST_DEPS) $(BUILD)/probe
	$(BUILD)/c-tests/amd_layout
	$(CARGO) test -q --release --lib --no-default-features --features amd --target-dir target/amd amd::
	ACCELERATOR_STATE_DIR=$(TEST_STATE) $(AMD_ENV) \
	  $(BUILD)/c-tests/test_amd $(BUILD)/libaccelerator_amd.so
	ACCELERATOR_STATE_DIR=$(TEST_STATE) $(AMD_ENV) \
	  vendors/amd/test_probe_amd.sh $(BUILD)/probe $(BUILD)/libaccelerator_amd.so

test-amd-valgrind: $(AMD_TEST_DEPS) $(BUILD)/probe
	ACCELERATOR_STATE_DIR=$(TEST_STATE) ACCELERATOR_TEST_QUICK=1 $(AMD_ENV) \
	  $(VALGRIND) $(BUILD)/c-tests/test_amd $(BUILD)/libaccelerator_amd.so
	ACCELERATOR_STATE_DIR=$(TEST_STATE) $(AMD_ENV) \
	  $(VALGRIND) $(BUILD)/probe $(BUILD)/libaccelerator_amd.so > /dev/null

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
	st=$(TEST_STATE); cd go && CGO_ENABLED=1 GOTOOLCHAIN=local PKG_CONFIG_PATH=$(CURDIR)/$(AMD_CGO)/pkgconfig \
	  CGO_LDFLAGS="-Wl,-rpath,$(CURDIR)/$(AMD_CGO)" \
	  ACCELERATOR_STATE_DIR=$$st $(AMD_ENV) ACCEL_CGO_VENDOR=amd ACCEL_CGO_TEMPLATE=CPX \
	  $(GO) test -race -count=1 -v ./vendorcheck/

TEST_RUN_EXTRA += test-go-amd

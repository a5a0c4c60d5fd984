# The habana vendor's tests: a fake libhlml.so (c-tests/fakes/hlml.c, an
# 8x Gaudi 2 node, or 8x Gaudi 3 with FAKE_HLML_NODE=gaudi3), built as one
# HLML release of each layout the vendor reads (HLML_MINORS: 1.10, 1.17,
# 1.18, 1.24), a sysfs tree with the accel class the driver creates,
# c-tests/test_habana.c driven through the C ABI of
# build/libaccelerator_habana.so, c-tests/hlml_layout.c (the HLML layouts
# against the wheels' figures, per release) and c-tests/test_hlml_fake.c
# (the fake against what a real node answers). The suites of other areas
# use $(HABANA_FAKES)/libhlml.so, the 1.24 one.
HABANA_FAKES := $(BUILD)/fakes/habana
HLML_MINORS := 10 17 18 24
HLML_LAYOUT_MINORS := 10 11 17 18 19 24

$(HABANA_FAKES)/v%/libhlml.so: c-tests/fakes/hlml.c c-tests/fakes/hlml.h
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -DFAKE_HLML_MINOR=$* -fPIC -shared -Wl,-Bsymbolic -Wl,-soname,libhlml.so -o $@ $<

$(HABANA_FAKES)/libhlml.so: $(HABANA_FAKES)/v24/libhlml.so
	cp $< $@

# The accel class's entries of the fake's devices (accel minors 0-7).
$(HABANA_FAKES)/sys/.done: vendors/habana/vendor.mk
	rm -rf $(HABANA_FAKES)/sys
	for i in 0 1 2 3 4 5 6 7; do mkdir -p $(HABANA_FAKES)/sys/class/accel/accel$$i; done
	touch $@

$(BUILD)/c-tests/hlml_layout_%: c-tests/hlml_layout.c c-tests/fakes/hlml.h
	@mkdir -p $(BUILD)/c-tests
	$(CC) $(CFLAGS) -DFAKE_HLML_MINOR=$* -Ic-tests -o $@ $<

$(BUILD)/c-tests/test_hlml_fake: c-tests/test_hlml_fake.c c-tests/test_util.h $(HABANA_FAKES)/libhlml.so
	@mkdir -p $(BUILD)/c-tests
	$(CC) $(CFLAGS) -Ic-tests -o $@ $< -L$(HABANA_FAKES) -lhlml -Wl,-rpath,$(CURDIR)/$(HABANA_FAKES)

$(BUILD)/c-tests/test_habana: c-tests/test_habana.c c-tests/vendor_suite.h c-tests/test_util.h \
  c-tests/vendor_api.h include/accelerator.h
	@mkdir -p $(BUILD)/c-tests
	$(CC) $(CFLAGS) -o $@ $< -ldl -lpthread

HABANA_TEST_DEPS := $(BUILD)/libaccelerator_habana.so $(BUILD)/c-tests/test_habana \
  $(BUILD)/c-tests/test_hlml_fake $(foreach v,$(HLML_MINORS),$(HABANA_FAKES)/v$(v)/libhlml.so) \
  $(foreach v,$(HLML_LAYOUT_MINORS),$(BUILD)/c-tests/hlml_layout_$(v)) \
  $(HABANA_FAKES)/libhlml.so $(HABANA_FAKES)/sys/.done

# The environment every habana suite runs in (absolute paths: some suites
# change directory); habana_env_v is that environment with the fake of
# HLML release 1.$(1).
HABANA_FAKE_ENV = ACCELERATOR_HLML_PATH=$(CURDIR)/$(HABANA_FAKES)/libhlml.so \
  ACCELERATOR_HABANA_SYSFS=$(CURDIR)/$(HABANA_FAKES)/sys
HABANA_ENV = ACCELERATOR_VENDOR=habana $(HABANA_FAKE_ENV)
habana_env_v = ACCELERATOR_VENDOR=habana ACCELERATOR_HLML_PATH=$(CURDIR)/$(HABANA_FAKES)/v$(1)/libhlml.so \
  ACCELERATOR_HABANA_SYSFS=$(CURDIR)/$(HABANA_FAKES)/sys FAKE_HLML_MINOR=$(1)

# One command per HLML release: $(call habana_each,COMMAND).
define habana_each_one
	@echo "--- HLML 1.$(1)"
	ACCELERATOR_STATE_DIR=$(TEST_STATE) $(call habana_env_v,$(1)) $(2)

endef
habana_each = $(foreach v,$(HLML_MINORS),$(call habana_each_one,$(v),$(1)))

.PHONY: test-habana test-habana-valgrind test-habana-layout test-habana-probe
test-habana-layout: $(foreach v,$(HLML_LAYOUT_MINORS),$(BUILD)/c-tests/hlml_layout_$(v)) \
                    $(BUILD)/c-tests/test_hlml_fake
	$(foreach v,$(HLML_LAYOUT_MINORS),$(BUILD)/c-tests/hlml_layout_$(v) &&) true
	$(BUILD)/c-tests/test_hlml_fake
	FAKE_HLML_NODE=gaudi3 $(BUILD)/c-tests/test_hlml_fake

# On the PCI test trees' Gaudi 2 node (probe/probe.mk writes them), where
# each device's PCI address, read through its release's layout, must match.
test-habana-probe: $(HABANA_TEST_DEPS) $(BUILD)/probe $(BUILD)/pci-trees/.stamp
	$(call habana_each,vendors/habana/test_probe_habana.sh $(BUILD)/probe $(BUILD)/libaccelerator_habana.so \
	  $(BUILD)/pci-trees/gaudi2)

# The Rust unit tests of vendors/habana (layouts, version detection, the
# status mapping) build only with the feature.
test-habana: $(HABANA_TEST_DEPS) $(BUILD)/probe test-habana-layout test-habana-probe
	$(CARGO) test -q --release --lib --no-default-features --features habana --target-dir target/habana -- habana::
	$(call habana_each,$(BUILD)/c-tests/test_habana $(BUILD)/libaccelerator_habana.so)

test-habana-valgrind: $(HABANA_TEST_DEPS) $(BUILD)/probe
	$(VALGRIND) $(BUILD)/c-tests/test_hlml_fake
	$(call habana_each,ACCELERATOR_TEST_QUICK=1 $(VALGRIND) $(BUILD)/c-tests/test_habana $(BUILD)/libaccelerator_habana.so)
	$(call habana_each,$(VALGRIND) $(BUILD)/probe $(BUILD)/libaccelerator_habana.so > /dev/null)

TEST_RUN_EXTRA += test-habana
VALGRIND_EXTRA += test-habana-valgrind

# The cgo binding (go/vendorcheck) against the habana build: pkg-config
# finds a libaccelerator.so that is the habana build (its soname,
# libaccelerator_habana.so, beside it), as an installed Habana package
# would be; once per HLML release.
HABANA_CGO := $(BUILD)/habana-cgo
.PHONY: test-go-habana
test-go-habana: $(HABANA_TEST_DEPS) packaging/accelerator.pc.in
	rm -rf $(HABANA_CGO) && mkdir -p $(HABANA_CGO)/pkgconfig
	cp $(BUILD)/libaccelerator_habana.so $(HABANA_CGO)/
	ln -s libaccelerator_habana.so $(HABANA_CGO)/libaccelerator.so
	sed -e 's|@PREFIX@|$(CURDIR)|' -e 's|@LIBDIR@|$(CURDIR)/$(HABANA_CGO)|' \
	    -e 's|@INCLUDEDIR@|$(CURDIR)/include|' -e "s|@VERSION@|$$(packaging/version.sh)|" \
	    -e '/^Libs:/s|$$| -Wl,-rpath,$${libdir}|' packaging/accelerator.pc.in > $(HABANA_CGO)/pkgconfig/accelerator.pc
	$(foreach v,$(HLML_MINORS),st=$(TEST_STATE); cd go && CGO_ENABLED=1 GOTOOLCHAIN=local \
	  PKG_CONFIG_PATH=$(CURDIR)/$(HABANA_CGO)/pkgconfig CGO_LDFLAGS="-Wl,-rpath,$(CURDIR)/$(HABANA_CGO)" \
	  ACCELERATOR_STATE_DIR=$$st $(call habana_env_v,$(v)) ACCEL_CGO_VENDOR=habana \
	  $(GO) test -race -count=1 -v ./vendorcheck/ && cd .. &&) true

TEST_RUN_EXTRA += test-go-habana

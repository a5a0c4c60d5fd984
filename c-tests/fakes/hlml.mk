# The fake libhlml.so (c-tests/fakes/hlml.c: an 8x Gaudi 2 node, or 8x
# Gaudi 3 with FAKE_HLML_NODE=gaudi3), HLML's structure layouts against the
# headers' figures (c-tests/hlml_layout.c, both layouts) and the fake
# against what a real node answers (c-tests/test_hlml_fake.c, both nodes).
HLML_FAKES := $(BUILD)/fakes/habana
HLML_LAYOUTS := 1 2

$(HLML_FAKES)/libhlml.so: c-tests/fakes/hlml.c c-tests/fakes/hlml.h
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -fPIC -shared -Wl,-Bsymbolic -Wl,-soname,libhlml.so -o $@ $<

$(BUILD)/c-tests/hlml_layout_%: c-tests/hlml_layout.c c-tests/fakes/hlml.h
	@mkdir -p $(BUILD)/c-tests
	$(CC) $(CFLAGS) -DFAKE_HLML_LAYOUT=$* -Ic-tests -o $@ $<

$(BUILD)/c-tests/test_hlml_fake: c-tests/test_hlml_fake.c c-tests/test_util.h $(HLML_FAKES)/libhlml.so
	@mkdir -p $(BUILD)/c-tests
	$(CC) $(CFLAGS) -Ic-tests -o $@ $< -L$(HLML_FAKES) -lhlml -Wl,-rpath,$(CURDIR)/$(HLML_FAKES)

.PHONY: test-hlml-fake
test-hlml-fake: $(foreach l,$(HLML_LAYOUTS),$(BUILD)/c-tests/hlml_layout_$(l)) $(BUILD)/c-tests/test_hlml_fake
	$(foreach l,$(HLML_LAYOUTS),$(BUILD)/c-tests/hlml_layout_$(l) &&) true
	$(BUILD)/c-tests/test_hlml_fake
	FAKE_HLML_NODE=gaudi3 $(BUILD)/c-tests/test_hlml_fake
	$(VALGRIND) $(BUILD)/c-tests/test_hlml_fake

TEST_RUN_EXTRA += test-hlml-fake

# The Ascend vendor's tests: a fake libdcmi.so (and three variants, one
# lacking an optional symbol, one a required one, one an old driver with
# only the V1 card-list name) driven through the C ABI of
# build/libaccelerator_ascend.so.
ASCEND_FAKES := $(BUILD)/fakes/ascend
ASCEND_FAKE_SRC := c-tests/fakes/dcmi.c c-tests/fakes/dcmi.h

$(ASCEND_FAKES)/libdcmi.so: $(ASCEND_FAKE_SRC)
	@mkdir -p $(ASCEND_FAKES)
	$(CC) $(CFLAGS) -fPIC -shared -o $@ $< -lpthread

$(ASCEND_FAKES)/libdcmi_noopt.so: $(ASCEND_FAKE_SRC)
	@mkdir -p $(ASCEND_FAKES)
	$(CC) $(CFLAGS) -DOMIT_CREATE_VDEVICE -fPIC -shared -o $@ $< -lpthread

$(ASCEND_FAKES)/libdcmi_noreq.so: $(ASCEND_FAKE_SRC)
	@mkdir -p $(ASCEND_FAKES)
	$(CC) $(CFLAGS) -DOMIT_CHIP_INFO -fPIC -shared -o $@ $< -lpthread

$(ASCEND_FAKES)/libdcmi_v1.so: $(ASCEND_FAKE_SRC)
	@mkdir -p $(ASCEND_FAKES)
	$(CC) $(CFLAGS) -DOMIT_CARD_LIST -fPIC -shared -o $@ $< -lpthread

ASCEND_TEST_DEPS := $(BUILD)/libaccelerator_ascend.so $(BUILD)/c-tests/test_ascend \
  $(ASCEND_FAKES)/libdcmi.so $(ASCEND_FAKES)/libdcmi_noopt.so $(ASCEND_FAKES)/libdcmi_noreq.so \
  $(ASCEND_FAKES)/libdcmi_v1.so

.PHONY: test-ascend test-ascend-valgrind
test-ascend: $(ASCEND_TEST_DEPS)
	ACCELERATOR_STATE_DIR=$(TEST_STATE) \
	  $(BUILD)/c-tests/test_ascend $(BUILD)/libaccelerator_ascend.so $(ASCEND_FAKES)

test-ascend-valgrind: $(ASCEND_TEST_DEPS)
	ACCELERATOR_STATE_DIR=$(TEST_STATE) ACCELERATOR_TEST_QUICK=1 \
	  $(VALGRIND) $(BUILD)/c-tests/test_ascend $(BUILD)/libaccelerator_ascend.so $(ASCEND_FAKES)

TEST_RUN_EXTRA += test-ascend
VALGRIND_EXTRA += test-ascend-valgrind

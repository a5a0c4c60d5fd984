# PCI discovery on fake sysfs trees of real machines (c-tests/pci/mktrees.py):
# every vendor build's choice, errors and probe --pci output, and probe
# --json against docs/device.schema.json (Python jsonschema).
PCI_TREES := $(BUILD)/pci-trees
$(PCI_TREES)/.stamp: c-tests/pci/mktrees.py
	python3 $< $(PCI_TREES)
	touch $@

# The probe's own test: text, --json and --watch against the stub build.
.PHONY: test-probe
test-probe: $(BUILD)/libaccelerator.so $(BUILD)/probe
	probe/test_probe.sh $(BUILD)/probe $(BUILD)/libaccelerator.so

TEST_RUN_EXTRA += test-probe

# The probe frees everything it is given: check it under valgrind too.
.PHONY: valgrind-probe
valgrind-probe: $(BUILD)/libaccelerator.so $(BUILD)/probe $(PCI_TREES)/.stamp
	ACCELERATOR_STATE_DIR=$(TEST_STATE) $(VALGRIND) $(BUILD)/probe $(BUILD)/libaccelerator.so > /dev/null
	ACCELERATOR_STATE_DIR=$(TEST_STATE) ACCELERATOR_SYSFS_ROOT=$(PCI_TREES)/vfio ACCELERATOR_LOG=error \
	  $(VALGRIND) $(BUILD)/probe --pci $(BUILD)/libaccelerator.so > /dev/null
	ACCELERATOR_STATE_DIR=$(TEST_STATE) $(VALGRIND) $(BUILD)/probe --json --watch 0.1 --count 2 \
	  $(BUILD)/libaccelerator.so > /dev/null

VALGRIND_EXTRA += valgrind-probe

# The PCI tests (probe/test_pci.sh): every tree, every vendor build, and
# the universal build choosing the vendor each tree shows.
.PHONY: test-pci
test-pci: $(PCI_TREES)/.stamp $(BUILD)/probe $(BUILD)/libaccelerator.so $(BUILD)/libaccelerator_universal.so \
          $(NVIDIA_TEST_DEPS) $(ASCEND_TEST_DEPS) $(AMD_TEST_DEPS) $(HABANA_TEST_DEPS)
	probe/test_pci.sh $(BUILD)/probe $(PCI_TREES) $(BUILD)

TEST_RUN_EXTRA += test-pci

# The universal build's size and load time (dlopen + AccelInit) beside each
# single-vendor build's, on the trees with the fake drivers (docs/pci.md).
.PHONY: bench-universal
bench-universal: $(PCI_TREES)/.stamp $(BUILD)/c-tests/bench_load $(BUILD)/libaccelerator_stub.so \
                 $(BUILD)/libaccelerator_universal.so $(NVIDIA_TEST_DEPS) $(ASCEND_TEST_DEPS) $(AMD_TEST_DEPS) $(HABANA_TEST_DEPS)
	probe/bench_universal.sh $(BUILD)/c-tests/bench_load $(PCI_TREES) $(BUILD)

bench: bench-universal

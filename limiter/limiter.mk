# liblimiter.so: included by the top-level Makefile.
#
#   make limiter   build/liblimiter.so (and include/limiter.h)
#   make bench     the hot-path benchmark table (README, "Limiter")
#
# Its C tests join `make test` through TEST_RUN_EXTRA and VALGRIND_EXTRA.

LIMITER_SO    := $(BUILD)/liblimiter.so
LIMITER_TESTS := test_limiter test_limiter_kill test_limiter_ns test_state_faults
LIMITER_BIN   := $(BUILD)/c-tests/limiter

.PHONY: limiter bench limiter-test limiter-valgrind

limiter: $(LIMITER_SO)

# Its own target directory: building it never rebuilds libaccelerator.
$(LIMITER_SO): FORCE
	$(CARGO) build --release -p limiter --target-dir target/limiter
	@mkdir -p $(BUILD)
	cp target/limiter/release/liblimiter.so $@
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

bench: $(LIMITER_SO) $(BUILD)/libaccelerator.so $(LIMITER_BIN)/bench_limiter
	ACCELERATOR_STATE_DIR=$(TEST_STATE) $(LIMITER_BIN)/bench_limiter $(LIMITER_SO) $(BUILD)/libaccelerator.so

TEST_RUN_EXTRA += limiter-test
VALGRIND_EXTRA += limiter-valgrind

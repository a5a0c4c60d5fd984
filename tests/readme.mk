# README.md's runnable commands, the docs' links and `make help`
# (tests/readme.sh): part of `make test`.
.PHONY: test-readme
test-readme: $(BUILD)/libaccelerator.so
	MAKE="$(MAKE)" tests/readme.sh README.md

TEST_RUN_EXTRA += test-readme

# The ABI references (docs/abi-reference.md, docs/abi-v2-reference.md,
# docs/limiter-reference.md): their generated parts match the headers, and
# every exported function has a section (tests/abi_reference.py).
.PHONY: abi-reference test-abi-reference
abi-reference:
	python3 tests/abi_reference.py write

test-abi-reference:
	python3 tests/abi_reference.py check

TEST_RUN_EXTRA += test-abi-reference

# README.md's runnable commands, the docs' links and `make help`
# (tests/readme.sh): part of `make test`.
.PHONY: test-readme
test-readme: $(BUILD)/libaccelerator.so
	MAKE="$(MAKE)" tests/readme.sh README.md

TEST_RUN_EXTRA += test-readme

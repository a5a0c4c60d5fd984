# The Go binding (go/): go vet and go test -race against the stub build.
#
# cgo finds the library through pkg-config ("accelerator"); in the tree,
# $(BUILD)/pkgconfig/accelerator.pc points at include/ and $(BUILD)/ (with
# an rpath), generated from packaging/accelerator.pc.in.

GO ?= $(shell command -v go 2>/dev/null || echo /usr/local/go/bin/go)
# A CI shell without HOME has no default build cache.
ifeq ($(HOME),)
export GOCACHE ?= $(CURDIR)/target/go/cache
export GOPATH ?= $(CURDIR)/target/go/path
endif

GO_TEST_ENV = CGO_ENABLED=1 GOTOOLCHAIN=local GO="$(GO)" \
  PKG_CONFIG_PATH="$(CURDIR)/$(BUILD)/pkgconfig$(if $(PKG_CONFIG_PATH),:$(PKG_CONFIG_PATH))" \
  LD_LIBRARY_PATH="$(CURDIR)/$(BUILD)$(if $(LD_LIBRARY_PATH),:$(LD_LIBRARY_PATH))" \
  ACCELERATOR_LIB="$(CURDIR)/$(BUILD)/libaccelerator.so" \
  ACCELERATOR_PROBE="$(CURDIR)/$(BUILD)/probe"

$(BUILD)/pkgconfig/accelerator.pc: go/go.mk packaging/accelerator.pc.in Cargo.toml
	@mkdir -p $(@D)
	sed -e 's|@PREFIX@|$(CURDIR)|' -e 's|@LIBDIR@|$(CURDIR)/$(BUILD)|' \
	    -e 's|@INCLUDEDIR@|$(CURDIR)/include|' -e "s|@VERSION@|$$(packaging/version.sh)|" \
	    -e '/^Libs:/s|$$| -Wl,-rpath,$${libdir}|' packaging/accelerator.pc.in > $@

.PHONY: test-go
test-go: $(BUILD)/libaccelerator.so $(BUILD)/probe \
         $(BUILD)/pkgconfig/accelerator.pc
	cd go && $(GO_TEST_ENV) $(GO) vet ./...
	cd go && $(GO_TEST_ENV) $(GO) test -race -count=1 ./...

TEST_RUN_EXTRA += test-go

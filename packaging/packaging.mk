# Packaging: make install, make dist, make install-test.
#
#   make install [PREFIX=/usr/local] [DESTDIR=] [LIBDIR=$(PREFIX)/lib]
#                [INSTALL_VENDOR=universal]
# installs libaccelerator.so.$(VERSION) (built for INSTALL_VENDOR: by default
# the universal build, every real vendor, chosen by the PCI bus) with the
# links libaccelerator.so -> .so.$(SOVERSION) -> .so.$(VERSION), accelerator.h
# and accelerator.pc; and likewise liblimiter, limiter.h and limiter.pc when
# the limiter is part of the tree (limiter/limiter.mk, `make limiter`), and the
# CUDA preload hook libcuda_limiter.so (hook/hook.mk; unversioned, preloaded by path),
# and the documentation (README.md, CHANGELOG.md, docs/) under DOCDIR.
#
#   make dist
# writes $(BUILD)/accelerator-$(VERSION).tar.gz: the universal and each
# single-vendor build, liblimiter, libcuda_limiter, headers, relocatable
# pkg-config files, README.md, CHANGELOG.md and docs/ (packaging/dist-test.sh).
#
# The version is Cargo.toml's [workspace.package] version, nowhere else.

VERSION      := $(shell packaging/version.sh)
SOVERSION    := $(firstword $(subst ., ,$(VERSION)))
PREFIX       ?= /usr/local
LIBDIR       ?= $(PREFIX)/lib
INCLUDEDIR   ?= $(PREFIX)/include
PKGCONFIGDIR ?= $(LIBDIR)/pkgconfig
DESTDIR      ?=
INSTALL      ?= install
DOCDIR       ?= $(PREFIX)/share/doc/accelerator
INSTALL_VENDOR ?= universal
# The documentation shipped with the libraries: README's and the docs'
# relative links resolve inside it (packaging/dist-test.sh checks).
DOC_FILES    := README.md CHANGELOG.md probe/README.md \
                $(or $(shell git ls-files --cached --others --exclude-standard docs 2>/dev/null),$(shell find docs -type f))
# Build-tree libraries carry the soname libaccelerator_<vendor>.so (the
# file's own name, so -l and by-path links load that vendor); installed
# copies get the versioned soname.
PATCHELF     ?= patchelf
SET_SONAME    = $(PATCHELF) --set-soname libaccelerator.so.$(SOVERSION)

HAVE_LIMITER := $(wildcard limiter/limiter.mk)
# The CUDA preload hook (hook/hook.mk): preloaded by path, no header.
HAVE_HOOK    := $(wildcard hook/hook.mk)
HOOK_LIB     := $(if $(HAVE_HOOK),$(BUILD)/libcuda_limiter.so)
PKG_LIBS     := accelerator $(if $(HAVE_LIMITER),limiter)
# What each installed library is built from.
PKG_SRC_accelerator := $(BUILD)/libaccelerator_$(INSTALL_VENDOR).so
PKG_SRC_limiter     := $(BUILD)/liblimiter.so

.PHONY: install uninstall dist install-test
install: $(foreach l,$(PKG_LIBS),$(PKG_SRC_$(l))) $(HOOK_LIB)
	@test -n "$(VERSION)" || { echo "no version in Cargo.toml [workspace.package]"; exit 1; }
	$(INSTALL) -d $(DESTDIR)$(LIBDIR) $(DESTDIR)$(INCLUDEDIR) $(DESTDIR)$(PKGCONFIGDIR)
	$(INSTALL) -d $(DESTDIR)$(INCLUDEDIR)/accelerator/v2
	$(INSTALL) -m 0644 $(wildcard include/v2/*.h) $(DESTDIR)$(INCLUDEDIR)/accelerator/v2/
	set -e; $(foreach l,$(PKG_LIBS), \
	  $(INSTALL) -m 0755 $(PKG_SRC_$(l)) $(DESTDIR)$(LIBDIR)/lib$(l).so.$(VERSION); \
	  $(if $(filter accelerator,$(l)),$(SET_SONAME) $(DESTDIR)$(LIBDIR)/lib$(l).so.$(VERSION);) \
	  ln -sfn lib$(l).so.$(VERSION) $(DESTDIR)$(LIBDIR)/lib$(l).so.$(SOVERSION); \
	  ln -sfn lib$(l).so.$(SOVERSION) $(DESTDIR)$(LIBDIR)/lib$(l).so; \
	  $(INSTALL) -m 0644 include/$(l).h $(DESTDIR)$(INCLUDEDIR)/$(l).h; \
	  sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@LIBDIR@|$(LIBDIR)|' \
	      -e 's|@INCLUDEDIR@|$(INCLUDEDIR)|' -e 's|@VERSION@|$(VERSION)|' \
	      packaging/$(l).pc.in > $(DESTDIR)$(PKGCONFIGDIR)/$(l).pc; \
	  chmod 0644 $(DESTDIR)$(PKGCONFIGDIR)/$(l).pc;)
	$(if $(HOOK_LIB),$(INSTALL) -m 0755 $(HOOK_LIB) $(DESTDIR)$(LIBDIR)/libcuda_limiter.so)
	for f in $(DOC_FILES); do $(INSTALL) -D -m 0644 $$f $(DESTDIR)$(DOCDIR)/$$f || exit 1; done

uninstall:
	rm -rf $(DESTDIR)$(DOCDIR)
	rm -rf $(DESTDIR)$(INCLUDEDIR)/accelerator/v2
	$(foreach l,accelerator limiter, \
	  rm -f $(DESTDIR)$(LIBDIR)/lib$(l).so $(DESTDIR)$(LIBDIR)/lib$(l).so.$(SOVERSION) \
	        $(DESTDIR)$(LIBDIR)/lib$(l).so.$(VERSION) $(DESTDIR)$(INCLUDEDIR)/$(l).h \
	        $(DESTDIR)$(PKGCONFIGDIR)/$(l).pc;)
	rm -f $(DESTDIR)$(LIBDIR)/libcuda_limiter.so

# The tarball is a relocatable prefix: pkg-config files find their own
# directory (${pcfiledir}); each build sits in lib/<vendor>/ with its
# links, lib/libaccelerator.so* point into lib/universal/, and
# accelerator.pc picks one through its `vendor` variable (universal by
# default: pkg-config --define-variable=vendor=nvidia ...).
DIST_NAME    := accelerator-$(VERSION)
DIST_VENDORS := universal stub nvidia ascend amd habana
DIST_STAGE   := $(BUILD)/dist/$(DIST_NAME)
dist: $(foreach v,$(DIST_VENDORS),$(BUILD)/libaccelerator_$(v).so) \
      $(if $(HAVE_LIMITER),$(BUILD)/liblimiter.so) $(HOOK_LIB)
	rm -rf $(BUILD)/dist
	$(INSTALL) -d $(DIST_STAGE)/include/accelerator/v2 $(DIST_STAGE)/lib/pkgconfig
	$(INSTALL) -m 0644 $(wildcard include/v2/*.h) $(DIST_STAGE)/include/accelerator/v2/
	set -e; $(foreach v,$(DIST_VENDORS), \
	  $(INSTALL) -d $(DIST_STAGE)/lib/$(v); \
	  $(INSTALL) -m 0755 $(BUILD)/libaccelerator_$(v).so $(DIST_STAGE)/lib/$(v)/libaccelerator.so.$(VERSION); \
	  $(SET_SONAME) $(DIST_STAGE)/lib/$(v)/libaccelerator.so.$(VERSION); \
	  ln -sfn libaccelerator.so.$(VERSION) $(DIST_STAGE)/lib/$(v)/libaccelerator.so.$(SOVERSION); \
	  ln -sfn libaccelerator.so.$(SOVERSION) $(DIST_STAGE)/lib/$(v)/libaccelerator.so;)
	set -e; for l in libaccelerator.so.$(VERSION) libaccelerator.so.$(SOVERSION) libaccelerator.so; do \
	  ln -sfn universal/$$l $(DIST_STAGE)/lib/$$l; done
	set -e; $(foreach l,$(PKG_LIBS), \
	  $(INSTALL) -m 0644 include/$(l).h $(DIST_STAGE)/include/$(l).h; \
	  sed -e 's|@PREFIX@|$${pcfiledir}/../..|' -e 's|@INCLUDEDIR@|$${prefix}/include|' \
	      -e 's|@VERSION@|$(VERSION)|' \
	      -e '$(if $(filter accelerator,$(l)),s|^libdir=@LIBDIR@|vendor=universal\nlibdir=$${prefix}/lib/$${vendor}|,s|@LIBDIR@|$${prefix}/lib|)' \
	      packaging/$(l).pc.in > $(DIST_STAGE)/lib/pkgconfig/$(l).pc;)
	$(if $(HAVE_LIMITER), \
	  $(INSTALL) -m 0755 $(BUILD)/liblimiter.so $(DIST_STAGE)/lib/liblimiter.so.$(VERSION); \
	  ln -sfn liblimiter.so.$(VERSION) $(DIST_STAGE)/lib/liblimiter.so.$(SOVERSION); \
	  ln -sfn liblimiter.so.$(SOVERSION) $(DIST_STAGE)/lib/liblimiter.so)
	$(if $(HOOK_LIB),$(INSTALL) -m 0755 $(HOOK_LIB) $(DIST_STAGE)/lib/libcuda_limiter.so)
	for f in $(DOC_FILES); do $(INSTALL) -D -m 0644 $$f $(DIST_STAGE)/$$f || exit 1; done
	$(if $(wildcard LICENSE*),$(INSTALL) -m 0644 $(wildcard LICENSE*) $(DIST_STAGE)/)
	echo $(VERSION) > $(DIST_STAGE)/VERSION
	tar -C $(BUILD)/dist --owner=0 --group=0 --numeric-owner --sort=name \
	  -czf $(BUILD)/$(DIST_NAME).tar.gz $(DIST_NAME)
	@echo "wrote $(BUILD)/$(DIST_NAME).tar.gz"; tar -tzvf $(BUILD)/$(DIST_NAME).tar.gz

# Install into a temporary prefix (DESTDIR), then build and run a C program
# and the Go package against the installed copy through pkg-config alone:
# the default (universal) install on the fake NVIDIA driver, and a stub
# install for the Go package's tests.
install-test: $(foreach l,$(PKG_LIBS),$(PKG_SRC_$(l))) $(BUILD)/libaccelerator_stub.so \
              $(NVIDIA_FAKES)/libnvidia-ml.so.1 $(NVIDIA_FAKES)/libcuda.so.1
	MAKE="$(MAKE)" GO="$(GO)" CC="$(CC)" NVIDIA_FAKES="$(CURDIR)/$(NVIDIA_FAKES)" packaging/install-test.sh

TEST_RUN_EXTRA += install-test

# make dist, then the tarball unpacked: every build, the links, sonames,
# pkg-config's default vendor, the documentation and its links, and a C
# program built through the unpacked pkg-config files.
.PHONY: dist-test
dist-test: dist $(NVIDIA_FAKES)/libnvidia-ml.so.1 $(NVIDIA_FAKES)/libcuda.so.1
	CC="$(CC)" NVIDIA_FAKES="$(CURDIR)/$(NVIDIA_FAKES)" packaging/dist-test.sh $(BUILD)/$(DIST_NAME).tar.gz

TEST_RUN_EXTRA += dist-test

# Build outputs are replaced by rename (the top Makefile's `replace`).
.PHONY: replace-test
replace-test:
	MAKE="$(MAKE)" BUILD="$(BUILD)" packaging/replace-test.sh

TEST_RUN_EXTRA += replace-test

# Strata: one entry point for building and testing.
#   make            build the C library (static + shared) and the Rust workspace
#   make run        set up, build, and run Strata's main job on its built-in default:
#                   the topology, the NextTo locality benchmark, a small YCSB matrix
#   make test       set up, build, and run every test (what CI runs), formatting and lints first
#   make c-test     the C tests only (plain, AddressSanitizer, ThreadSanitizer)
#   make vm-test    end-to-end tests in a two-tier QEMU guest (strata vm run)
#   make emu        the emulated machine: libstrata_emu.so, its workloads, and the strata
#                   binary built for it (target/emu); make emu-test runs its tests
#   make install    after `make`: the CLI, libraries, headers, pkg-config file, man pages,
#                   completions, example configuration and systemd unit under PREFIX
#                   (/usr/local) and SYSCONFDIR (/etc), staged under DESTDIR if set
#   make deb        a Debian package of the same (build/strata_VERSION_ARCH.deb)

# rustup installs cargo here; CI's environment may not have it on PATH
export PATH := $(HOME)/.cargo/bin:$(PATH)

CC      ?= cc
CFLAGS  ?= -O2 -g
CFLAGS  += -std=gnu11 -D_GNU_SOURCE -Wall -Wextra -Wno-unused-parameter -fPIC -pthread -Iinclude -Ilibstrata
BUILD   := build
LIB_SRC := $(wildcard libstrata/*.c libstrata/alloc/*.c libstrata/agent/*.c libstrata/channel/*.c libstrata/machine/*.c libstrata/context/*.c libstrata/util/*.c)
SO_SRC  := $(LIB_SRC) $(wildcard libstrata/preload/*.c)   # interposition: the shared library only
HDRS    := include/strata.h include/strata_channel.h libstrata/internal.h libstrata/util/json.h libstrata/util/uapi.h
C_TESTS := test_api test_stress test_invariants test_migrate test_sample test_rules

.PHONY: install uninstall deb all lib rust run test lint c-test rust-test vm-bins vm-test vm-test-damon ycsb-binding-test bootstrap clean emu emu-unit emu-test FORCE

all: lib rust

lib: $(BUILD)/libstrata.a $(BUILD)/libstrata.so

# one object set per flavour: plain (the library), asan, tsan (tests)
define flavour
$(BUILD)/$(1)/%.o: %.c $(HDRS)
	@mkdir -p $$(dir $$@)
	$(CC) $(CFLAGS) -fvisibility=hidden $(2) -c $$< -o $$@
$(BUILD)/$(1)/lib.a: $(patsubst %.c,$(BUILD)/$(1)/%.o,$(LIB_SRC))
	@rm -f $$@
	ar rcs $$@ $$^
$(BUILD)/$(1)/%: libstrata/tests/%.c $(BUILD)/$(1)/lib.a libstrata/tests/check.h libstrata/tests/own_channel.h
	$(CC) $(CFLAGS) $(2) $$< $(BUILD)/$(1)/lib.a -o $$@
endef
$(eval $(call flavour,plain,-DSTRATA_DEBUG=1))
# (in a variable: a comma inside $(call ...) would split the argument, and UBSan with it)
ASAN_FLAGS := -DSTRATA_DEBUG=2 -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
$(eval $(call flavour,asan,$(ASAN_FLAGS)))
$(eval $(call flavour,tsan,-DSTRATA_DEBUG=1 -fsanitize=thread))
$(eval $(call flavour,rel,))

# the shared library (transparent mode) is built with link-time optimisation: malloc and free
# cross files (contexts, tags, the channel) on every call, and inlining across them takes
# about a third off what contexts cost a program (perl under callgrind: +3.4 % to +2.3 % over
# glibc). The static library stays plain, for the Rust crates' linker.
$(eval $(call flavour,so,-flto))
$(BUILD)/libstrata.a: $(BUILD)/rel/lib.a
	cp $< $@
$(BUILD)/so/libstrata/preload/%.o: CFLAGS += -fno-omit-frame-pointer -fexceptions
$(BUILD)/libstrata.so: $(patsubst %.c,$(BUILD)/so/%.o,$(SO_SRC))
	$(CC) -shared -pthread -flto=auto $(filter -O%,$(CFLAGS)) $^ -o $@ -lgcc_s

rust:
	cargo build --release --workspace

bootstrap:
	@scripts/bootstrap.sh

run: bootstrap all emu
	target/release/strata topo
	target/release/strata bench locality
	target/release/strata bench ycsb --records 100000 --ops 400000 --out build/results
	target/release/strata bench ycsb --emulate m2t --workloads c --out build/results

# the emulated machine (emu/): never instrumented itself, and compiled so that the compiler
# emits no calls to the memcpy/memmove/memset it interposes
EMU_CC     ?= clang-14
EMU_SRC    := $(wildcard emu/*.c)
EMU_CFLAGS := -O2 -g -std=gnu11 -D_GNU_SOURCE -Wall -Wextra -Wno-unused-parameter -fPIC -pthread \
              -fno-builtin -fno-tree-loop-distribute-patterns -fvisibility=hidden -Iinclude -Ilibstrata -Iemu
EMU_HOOKS  := -fsanitize-coverage=inline-8bit-counters,trace-loads,trace-stores
# the per-access path (core.c, and lru.c's inlines) compares a cache set's ways with AVX-512
# where the building machine has it (EMU_SIMD=1; 0 builds the plain loops, same results)
EMU_SIMD   ?= $(shell grep -qw avx512f /proc/cpuinfo 2>/dev/null && echo 1 || echo 0)
EMU_SIMD_OBJS := $(BUILD)/emu/core.o $(BUILD)/emu/lru.o
ifeq ($(EMU_SIMD),1)
$(EMU_SIMD_OBJS): EMU_CFLAGS += -mavx512f
endif
# the value those were built with, rewritten only when it changes, so a change rebuilds them
FORCE:
$(BUILD)/emu/simd: FORCE
	@mkdir -p $(dir $@)
	@echo $(EMU_SIMD) | cmp -s - $@ || echo $(EMU_SIMD) > $@
$(EMU_SIMD_OBJS): $(BUILD)/emu/simd
EMU_DEPS    = emu/emu.h emu/lru.h include/strata_emu.h libstrata/machine/machine.h libstrata/util/json.h
EMU_COMPILE = mkdir -p $(dir $@) && $(CC) $(EMU_CFLAGS) -c $< -o $@
$(BUILD)/emu/%.o: emu/%.c $(EMU_DEPS)
	$(EMU_COMPILE)
# the JSON writer is libstrata's, compiled again the emulator's way (hidden, no builtins)
$(BUILD)/emu/json.o: libstrata/util/json.c $(EMU_DEPS)
	$(EMU_COMPILE)
$(BUILD)/emu/scalar/%.o: emu/%.c $(EMU_DEPS)
	$(EMU_COMPILE)
EMU_OBJS = $(patsubst emu/%.c,$(BUILD)/emu/%.o,$(EMU_SRC)) $(BUILD)/emu/json.o
$(BUILD)/libstrata_emu.so: $(EMU_OBJS)
	$(CC) -shared -pthread $^ -o $@
# a program for the emulator: what `strata emu cc` does
EMU_LINK = -L$(CURDIR)/$(BUILD) -lstrata_emu -Wl,-rpath,$(CURDIR)/$(BUILD)
$(BUILD)/emu/access: emu/workloads/access.c
	$(EMU_CC) -O2 $< -o $@
$(BUILD)/emu/access-emu: emu/workloads/access.c $(BUILD)/libstrata_emu.so
	$(EMU_CC) -O2 $(EMU_HOOKS) $< $(EMU_LINK) -o $@
# the kernel's frame colours, the evidence for physical indexing (native, as root)
$(BUILD)/emu/frames: emu/workloads/frames.c
	$(EMU_CC) -O2 -Wall -Wextra $< -o $@
# the unit tests link the emulator's objects directly, so they can reach its internals too
$(BUILD)/emu/test_emu: emu/tests/test_emu.c libstrata/tests/check.h $(EMU_OBJS) $(BUILD)/libstrata.a
	$(EMU_CC) -O1 -g -Iinclude -Ilibstrata -Ilibstrata/tests $(EMU_HOOKS) $< $(EMU_OBJS) $(BUILD)/libstrata.a -pthread -o $@
# and again with the plain loops of core.c, so both ways are tested on a machine with AVX-512
EMU_SCALAR_OBJS = $(filter-out $(EMU_SIMD_OBJS),$(EMU_OBJS)) $(BUILD)/emu/scalar/core.o $(BUILD)/emu/scalar/lru.o
$(BUILD)/emu/test_emu_scalar: emu/tests/test_emu.c libstrata/tests/check.h $(EMU_SCALAR_OBJS) $(BUILD)/libstrata.a
	$(EMU_CC) -O1 -g -Iinclude -Ilibstrata -Ilibstrata/tests $(EMU_HOOKS) $< $(EMU_SCALAR_OBJS) $(BUILD)/libstrata.a -pthread -o $@
EMU_TEST_MACHINE := l1=32K l1_ways=8 l2=256K l2_ways=8 llc=1M llc_ways=16 dtlb=64 dtlb_ways=4 \
                    stlb=2048 stlb_ways=16 capacity=1G,1G

emu: lib $(BUILD)/libstrata_emu.so $(BUILD)/emu/access $(BUILD)/emu/access-emu $(BUILD)/emu/frames rust
	target/release/strata emu cargo build --release -p strata-cli

emu-unit: $(BUILD)/emu/test_emu $(BUILD)/emu/test_emu_scalar $(EMU_OBJS)
	scripts/check-layers.sh $(EMU_OBJS)
	STRATA_EMU="$(EMU_TEST_MACHINE)" $(BUILD)/emu/test_emu
	STRATA_EMU="$(EMU_TEST_MACHINE)" $(BUILD)/emu/test_emu_scalar

emu-test: emu emu-unit
	cargo test --release -p strata-cli --test emu --test emu_validate

# transparent mode: test programs that know nothing of Strata, run under LD_PRELOAD
PRELOAD_TESTS := $(BUILD)/preload/test_preload $(BUILD)/preload/test_preload_cxx \
                 $(BUILD)/preload/test_stress_libc $(BUILD)/preload/two_sites $(BUILD)/preload/hot_writer
$(BUILD)/preload/test_preload: libstrata/tests/test_preload.c libstrata/tests/check.h libstrata/tests/own_channel.h libstrata/util/uapi.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -mno-red-zone $< -o $@ -ldl
$(BUILD)/preload/test_preload_cxx: libstrata/tests/test_preload_cxx.cc
	@mkdir -p $(dir $@)
	$(CXX) -O2 -g -std=c++17 $< -o $@ -ldl
$(BUILD)/preload/test_stress_libc: libstrata/tests/test_stress.c libstrata/tests/check.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -DUSE_LIBC $< -o $@
$(BUILD)/preload/hot_writer: tests/preload/hot_writer.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -rdynamic $< -o $@
# (without frame pointers, as distributions build: the sites are seen through the unwind tables)
$(BUILD)/preload/two_sites: tests/preload/two_sites.c tests/vm/numa_maps.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -fomit-frame-pointer -rdynamic $< -o $@ -ldl

# an unprivileged user's attacks on the daemon (crates/strata-cli/tests/security.rs)
SECURITY_BINS := $(BUILD)/security/evilchan
$(BUILD)/security/evilchan: tests/security/evilchan.c include/strata_channel.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< -o $@

# (test_invariants, test_migrate and test_sample fork while the fork handler holds every central lock: more than the 64
# TSan's deadlock detector can track, hence detect_deadlocks=0 for them)
c-test: $(foreach f,plain asan tsan,$(addprefix $(BUILD)/$(f)/,$(C_TESTS))) $(BUILD)/libstrata.so $(PRELOAD_TESTS)
	@set -e; for f in plain asan tsan; do \
	  echo "== C tests ($$f)"; \
	  TSAN_OPTIONS=detect_deadlocks=0 $(BUILD)/$$f/test_api; \
	  TSAN_OPTIONS=detect_deadlocks=0 STRATA_COLOUR=1 $(BUILD)/$$f/test_api; \
	  TSAN_OPTIONS=detect_deadlocks=0 $(BUILD)/$$f/test_invariants; \
	  if [ $$f = plain ]; then $(BUILD)/$$f/test_stress 4 400000; else $(BUILD)/$$f/test_stress 3 60000; fi; \
	  if [ $$f = plain ]; then $(BUILD)/$$f/test_migrate 300; else TSAN_OPTIONS=detect_deadlocks=0 $(BUILD)/$$f/test_migrate 40; fi; \
	  if [ $$f = plain ]; then $(BUILD)/$$f/test_sample 300; else TSAN_OPTIONS=detect_deadlocks=0 $(BUILD)/$$f/test_sample 40; fi; \
	  STRATA_COLOUR=1 $(BUILD)/$$f/test_stress 3 60000; \
	  if [ $$f = tsan ]; then $(BUILD)/$$f/test_rules 2000; else $(BUILD)/$$f/test_rules; fi; \
	done
	@echo "== transparent mode (LD_PRELOAD=$(BUILD)/libstrata.so)"
	@set -e; so=$(CURDIR)/$(BUILD)/libstrata.so; \
	LD_PRELOAD=$$so $(BUILD)/preload/test_preload; \
	LD_PRELOAD=$$so STRATA_UNWIND=dwarf $(BUILD)/preload/test_preload; \
	LD_PRELOAD=$$so STRATA_TRACK_WRITES=0 $(BUILD)/preload/test_preload; \
	LD_PRELOAD=$$so STRATA_SMALL_BLOCKS=0 $(BUILD)/preload/test_preload; \
	LD_PRELOAD=$$so STRATA_SMALL_BLOCKS=1 $(BUILD)/preload/test_preload; \
	LD_PRELOAD=$$so $(BUILD)/preload/test_preload_cxx; \
	LD_PRELOAD=$$so $(BUILD)/preload/test_stress_libc 4 300000; \
	LD_PRELOAD=$$so STRATA_CONTEXTS=0 $(BUILD)/preload/test_stress_libc 2 100000; \
	LD_PRELOAD=$$so $(BUILD)/preload/two_sites; \
	LD_PRELOAD=$$so STRATA_RULES=tests/preload/two_sites.rules $(BUILD)/preload/two_sites --with-rules; \
	LD_PRELOAD=$$so STRATA_RULES=tests/preload/two_sites.rules STRATA_UNWIND=dwarf $(BUILD)/preload/two_sites --with-rules; \
	tests/preload/real_programs.sh $$so

# (the workspace's tests include the emulator's end-to-end ones, hence emu)
rust-test: $(BUILD)/libstrata.so $(PRELOAD_TESTS) $(SECURITY_BINS) emu
	cargo test --release --workspace

# guest test programs: static, so the guest needs no libraries for them
vm-bins: $(BUILD)/vm/place $(BUILD)/vm/tiering $(BUILD)/vm/test_migrate
$(BUILD)/vm/%: tests/vm/%.c tests/vm/numa_maps.h $(BUILD)/libstrata.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -static $< $(BUILD)/libstrata.a -o $@
$(BUILD)/vm/test_migrate: libstrata/tests/test_migrate.c libstrata/tests/check.h $(BUILD)/libstrata.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Ilibstrata/tests -static $< $(BUILD)/libstrata.a -o $@

vm-test: vm-bins rust $(BUILD)/libstrata.so $(BUILD)/preload/two_sites $(BUILD)/preload/hot_writer $(BUILD)/emu/access-emu
	@scripts/bootstrap.sh --vm
	cargo test --release -p strata-cli --test vm -- --ignored --test-threads=1

# DAMON seeing a hot set that is only read (6.12 guest): reliable alone, not in a full suite
vm-test-damon: vm-bins rust $(BUILD)/libstrata.so $(BUILD)/preload/hot_writer
	@scripts/bootstrap.sh --vm
	STRATA_VM_DAMON_READS=1 cargo test --release -p strata-cli --test vm -- --ignored --test-threads=1 guest612_daemon_with_damon

# the real YCSB client (Java, from Maven Central) through bench/ycsb-binding, against
# strata-kv and Redis: every operation must return OK
ycsb-binding-test: rust
	bench/ycsb-binding/run.sh strata a 5000 20000 2
	bench/ycsb-binding/run.sh redis a 5000 20000 2
	@# Debian's Redis on the emulated machine (built by the emu tests when Debian's sources can be fetched)
	if target/release/strata emu pkg list --json | grep -q '"redis"'; then \
	  bench/ycsb-binding/run.sh emu-redis c 2000 5000 1; \
	else echo "skipped: emu-redis (Redis is not built for the emulated machine: strata emu pkg build redis)"; fi

# formatting (rustfmt.toml) and every clippy warning, as errors
lint:
	cargo fmt --all --check
	cargo clippy --workspace --all-targets --release -- -D warnings
	scripts/check-module-cycles.sh crates/stratad/src crates/strata-daemon/src

test: bootstrap lint lib c-test emu-unit rust-test ycsb-binding-test vm-test
	@echo "all tests passed"

# --- install: paths a tool of its kind uses; the CLI finds its libraries in PREFIX/lib beside
# PREFIX/bin, its headers in PREFIX/include (docs/install.md)
PREFIX     ?= /usr/local
SYSCONFDIR ?= /etc
DESTDIR    ?=
STRIP_FLAG ?=
VERSION    := $(shell sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
DEB_ARCH   := $(shell dpkg --print-architecture 2>/dev/null || echo amd64)
INSTALLED_LIBS := $(BUILD)/libstrata.so $(BUILD)/libstrata_emu.so target/release/libstratad_emu.so
I := $(DESTDIR)$(PREFIX)

install: $(BUILD)/libstrata.a $(BUILD)/libstrata.so $(BUILD)/libstrata_emu.so
	@test -x target/release/strata -a -f target/release/libstratad_emu.so || { echo "run make first (target/release/strata)"; exit 1; }
	install -d $(I)/bin $(I)/lib/pkgconfig $(I)/include $(I)/share/man/man1 $(I)/share/strata/examples \
	  $(I)/share/doc/strata $(I)/share/bash-completion/completions $(I)/share/zsh/vendor-completions \
	  $(I)/share/fish/vendor_completions.d $(I)/lib/systemd/system $(DESTDIR)$(SYSCONFDIR)/strata
	install -m 755 $(STRIP_FLAG) target/release/strata $(I)/bin/strata
	install -m 755 $(STRIP_FLAG) $(INSTALLED_LIBS) $(I)/lib/
	install -m 644 $(BUILD)/libstrata.a $(I)/lib/
	install -m 644 include/strata.h include/strata_channel.h include/strata_emu.h $(I)/include/
	sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@VERSION@|$(VERSION)|g' packaging/strata.pc.in > $(I)/lib/pkgconfig/strata.pc
	target/release/strata manpages $(I)/share/man/man1
	target/release/strata completions bash > $(I)/share/bash-completion/completions/strata
	target/release/strata completions zsh > $(I)/share/zsh/vendor-completions/_strata
	target/release/strata completions fish > $(I)/share/fish/vendor_completions.d/strata.fish
	install -m 644 examples/strata.toml examples/rules.txt $(I)/share/strata/examples/
	install -d $(I)/share/strata/examples/systemd/redis-server.service.d $(I)/share/strata/examples/container
	install -m 644 examples/systemd/strata-fast.slice $(I)/share/strata/examples/systemd/
	install -m 644 examples/systemd/redis-server.service.d/strata.conf $(I)/share/strata/examples/systemd/redis-server.service.d/
	install -m 644 examples/container/Dockerfile $(I)/share/strata/examples/container/
	install -m 644 README.md LICENSE-MIT LICENSE-APACHE docs/*.md $(I)/share/doc/strata/
	sed -e 's|/usr/local/bin/strata|$(PREFIX)/bin/strata|' -e 's|/etc/strata/|$(SYSCONFDIR)/strata/|g' \
	  -e 's|/usr/share/doc/strata/|$(PREFIX)/share/doc/strata/|' \
	  -e 's|^# Install: cp examples/systemd/strata-daemon.service .*|# Installed by make install (or the package): systemctl daemon-reload|' \
	  examples/systemd/strata-daemon.service > $(I)/lib/systemd/system/strata-daemon.service
	# the daemon's configuration: the example, unless one is there already
	test -e $(DESTDIR)$(SYSCONFDIR)/strata/strata.toml || install -m 644 examples/strata.toml $(DESTDIR)$(SYSCONFDIR)/strata/strata.toml

uninstall:
	rm -f $(I)/bin/strata $(I)/lib/libstrata.so $(I)/lib/libstrata.a $(I)/lib/libstrata_emu.so $(I)/lib/libstratad_emu.so \
	  $(I)/include/strata.h $(I)/include/strata_channel.h $(I)/include/strata_emu.h $(I)/lib/pkgconfig/strata.pc \
	  $(I)/share/man/man1/strata.1 $(I)/share/man/man1/strata-*.1 $(I)/share/bash-completion/completions/strata \
	  $(I)/share/zsh/vendor-completions/_strata $(I)/share/fish/vendor_completions.d/strata.fish \
	  $(I)/lib/systemd/system/strata-daemon.service
	rm -rf $(I)/share/strata $(I)/share/doc/strata
	@echo "kept $(SYSCONFDIR)/strata/strata.toml (yours to remove)"

# a Debian package: `make deb`, then `apt install ./build/strata_VERSION_ARCH.deb`
deb: lib $(BUILD)/libstrata_emu.so rust
	rm -rf $(BUILD)/deb
	$(MAKE) install DESTDIR=$(CURDIR)/$(BUILD)/deb PREFIX=/usr SYSCONFDIR=/etc STRIP_FLAG=-s
	install -d $(BUILD)/deb/DEBIAN
	sed -e 's|@VERSION@|$(VERSION)|' -e 's|@ARCH@|$(DEB_ARCH)|' -e "s|@SIZE@|$$(du -sk $(BUILD)/deb | cut -f1)|" \
	  packaging/control.in > $(BUILD)/deb/DEBIAN/control
	echo /etc/strata/strata.toml > $(BUILD)/deb/DEBIAN/conffiles
	dpkg-deb --root-owner-group --build $(BUILD)/deb $(BUILD)/strata_$(VERSION)_$(DEB_ARCH).deb

clean:
	rm -rf $(BUILD) target

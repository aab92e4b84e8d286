# libingest, ingest-agent, ingest-receiver, ingestctl.
# GNU make; see README.md.  Everything is built under $(BUILD).

PREFIX      ?= /usr/local
EXEC_PREFIX ?= $(PREFIX)
BINDIR      ?= $(EXEC_PREFIX)/bin
LIBDIR      ?= $(EXEC_PREFIX)/lib
INCLUDEDIR  ?= $(PREFIX)/include
PKGCONFIGDIR ?= $(LIBDIR)/pkgconfig
MANDIR      ?= $(PREFIX)/share/man
SYSCONFDIR  ?= /etc
DESTDIR     ?=

CC      ?= cc
PKG_CONFIG ?= pkg-config
DEPS_PC := libzstd libsodium libcrypto yaml-0.1 rdkafka lmdb
TEST_PC := cmocka

ifeq ($(SANITIZE),1)
BUILD ?= build-asan
SAN_FLAGS := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
OPT ?= -O1
else ifeq ($(SANITIZE),thread)
BUILD ?= build-tsan
SAN_FLAGS := -fsanitize=thread -fno-omit-frame-pointer
OPT ?= -O1
else
BUILD ?= build
SAN_FLAGS :=
OPT ?= -O2
endif

WARN := -Wall -Wextra -Werror -Wshadow -Wpointer-arith -Wstrict-prototypes \
        -Wmissing-prototypes -Wformat=2 -Wno-format-nonliteral -Wundef -Wvla
PC_CFLAGS := $(shell $(PKG_CONFIG) --cflags $(DEPS_PC) 2>/dev/null)
PC_LIBS   := $(shell $(PKG_CONFIG) --libs $(DEPS_PC) 2>/dev/null)
TEST_CFLAGS := $(shell $(PKG_CONFIG) --cflags $(TEST_PC) 2>/dev/null)
TEST_LIBS   := $(shell $(PKG_CONFIG) --libs $(TEST_PC) 2>/dev/null)

ALL_CFLAGS := -std=c11 $(OPT) -g $(WARN) -D_GNU_SOURCE -fvisibility=hidden -fPIC \
              -Iinclude $(PC_CFLAGS) $(SAN_FLAGS) $(CPPFLAGS) $(CFLAGS)
ALL_LDFLAGS := $(SAN_FLAGS) $(LDFLAGS)
LIBS := $(PC_LIBS) -lpthread -lm

SOMAJOR := 0
SOVERSION := 0.1.0

LIB_SRC  := $(sort $(wildcard libingest/*.c libingest/*/*.c))
LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/obj/%.o)
PROG_COMMON_SRC := $(sort $(wildcard agent/common/*.c))
PROG_COMMON_OBJ := $(PROG_COMMON_SRC:%.c=$(BUILD)/obj/%.o)
PROGRAMS := $(notdir $(wildcard agent/ingestctl agent/ingest-agent agent/ingest-receiver))
PROG_BINS := $(PROGRAMS:%=$(BUILD)/%)
UNIT_SRC := $(sort $(wildcard tests/unit/test_*.c))
UNIT_BINS := $(UNIT_SRC:tests/unit/%.c=$(BUILD)/tests/%)
TESTLIB_SRC := $(sort $(wildcard tests/unit/support/*.c))
TESTLIB_OBJ := $(TESTLIB_SRC:%.c=$(BUILD)/obj/%.o)
TOOL_SRC := $(sort $(wildcard tests/tools/*.c))
TOOL_BINS := $(TOOL_SRC:tests/tools/%.c=$(BUILD)/tools/%)
POWERCUT_SO := $(BUILD)/tools/powercut.so
DIRSNATCH_SO := $(BUILD)/tools/dirsnatch.so
FSFAULT_SO := $(BUILD)/tools/fsfault.so
FUZZ_SRC := $(sort $(wildcard tests/fuzz/fuzz_*.c))
FUZZ_BINS := $(FUZZ_SRC:tests/fuzz/%.c=$(BUILD)/fuzz/%)

.PHONY: all lib programs man tests check asan tsan valgrind deps demo install uninstall \
        install-shared install-static install-includes install-pc install-programs install-man \
        clean fuzz soak bench bench-scan bench-deps bench-gateway bench-small bench-landing

all: lib programs man

lib: $(BUILD)/libingest.a $(BUILD)/libingest.so.$(SOVERSION) $(BUILD)/libingest.pc
programs: $(PROG_BINS)
tests: $(UNIT_BINS) $(FUZZ_BINS) $(TOOL_BINS) $(POWERCUT_SO) $(DIRSNATCH_SO) $(FSFAULT_SO)

# Man pages: docs/man/*.[158] as they are; ingest.yaml(5) from its template,
# its key entries written by docs/man/mankeys.c from the config tables.
MAN_STATIC := $(wildcard docs/man/*.1 docs/man/*.5 docs/man/*.8)
MAN_PAGES := $(MAN_STATIC:docs/man/%=$(BUILD)/man/%) $(BUILD)/man/ingest.yaml.5
man: $(MAN_PAGES)
$(BUILD)/man/%: docs/man/%
	@mkdir -p $(dir $@)
	cp $< $@
$(BUILD)/mankeys: $(BUILD)/obj/docs/man/mankeys.o $(BUILD)/libingest.a
	$(CC) $(ALL_LDFLAGS) -o $@ $< $(BUILD)/libingest.a $(LIBS)
$(BUILD)/man/ingest.yaml.5: docs/man/ingest.yaml.5.in $(BUILD)/mankeys
	@mkdir -p $(dir $@)
	$(BUILD)/mankeys < $< > $@.tmp && mv $@.tmp $@

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/libingest.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/libingest.so.$(SOVERSION): $(LIB_OBJ)
	$(CC) -shared -Wl,-soname,libingest.so.$(SOMAJOR) $(ALL_LDFLAGS) -o $@ $^ $(LIBS)
	ln -sf libingest.so.$(SOVERSION) $(BUILD)/libingest.so.$(SOMAJOR)
	ln -sf libingest.so.$(SOMAJOR) $(BUILD)/libingest.so

$(BUILD)/libingest.pc: libingest.pc.in Makefile
	@mkdir -p $(dir $@)
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@LIBDIR@|$(LIBDIR)|' -e 's|@INCLUDEDIR@|$(INCLUDEDIR)|' \
	    -e 's|@VERSION@|$(SOVERSION)|' $< > $@

# Each program is the folder agent/NAME; agent/common holds helpers they share.
.SECONDARY:
.SECONDEXPANSION:
prog_objs = $(addprefix $(BUILD)/obj/,$(subst .c,.o,$(wildcard agent/$(1)/*.c)))
$(PROG_BINS): $(BUILD)/%: $$(call prog_objs,$$*) $(PROG_COMMON_OBJ) $(BUILD)/libingest.a
	$(CC) $(ALL_LDFLAGS) -o $@ $(filter %.o,$^) $(BUILD)/libingest.a $(LIBS)

$(UNIT_BINS): $(BUILD)/tests/%: $(BUILD)/obj/tests/unit/%.o $(TESTLIB_OBJ) $(BUILD)/libingest.a
	@mkdir -p $(dir $@)
	$(CC) $(ALL_LDFLAGS) -o $@ $(filter %.o,$^) $(BUILD)/libingest.a $(TEST_LIBS) $(LIBS)

# test_prog, test_notify and test_fsmove test the programs' shared helpers.
$(BUILD)/tests/test_prog $(BUILD)/tests/test_notify $(BUILD)/tests/test_fsmove: $(PROG_COMMON_OBJ)

$(BUILD)/obj/tests/unit/%.o: tests/unit/%.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -Ilibingest -Itests/unit $(TEST_CFLAGS) -MMD -MP -c $< -o $@

# Test tools: helper programs the integration tests run (one .c each).
$(TOOL_BINS): $(BUILD)/tools/%: $(BUILD)/obj/tests/tools/%.o $(PROG_COMMON_OBJ) $(BUILD)/libingest.a
	@mkdir -p $(dir $@)
	$(CC) $(ALL_LDFLAGS) -o $@ $(filter %.o,$^) $(BUILD)/libingest.a $(LIBS)

# The power-cut layer (tests/tools/powercut/): a library preloaded into the
# program under test, built without sanitizers (the program's own run-time
# comes first either way).
$(POWERCUT_SO): tests/tools/powercut/powercut.c tests/tools/powercut/pclog.h
	@mkdir -p $(dir $@)
	$(CC) -std=c11 $(OPT) -g $(WARN) -D_GNU_SOURCE -fvisibility=hidden -fPIC -shared -o $@ $< -ldl -lpthread

# The directory snatcher (tests/tools/dirsnatch/): removes directories of
# bronze at the worst moment; preloaded into the receiver, built like the above.
$(DIRSNATCH_SO): tests/tools/dirsnatch/dirsnatch.c
	@mkdir -p $(dir $@)
	$(CC) -std=c11 $(OPT) -g $(WARN) -D_GNU_SOURCE -fvisibility=hidden -fPIC -shared -o $@ $< -ldl -lpthread

# The fault layer (tests/tools/fsfault/): a source file unreadable or a
# removal slowed at the worst moment; preloaded into the agent, built like the above.
$(FSFAULT_SO): tests/tools/fsfault/fsfault.c
	@mkdir -p $(dir $@)
	$(CC) -std=c11 $(OPT) -g $(WARN) -D_GNU_SOURCE -fvisibility=hidden -fPIC -shared -o $@ $< -ldl -lpthread

# Fuzz targets, built with gcc and a driver that replays the corpus.
$(FUZZ_BINS): $(BUILD)/fuzz/%: $(BUILD)/obj/tests/fuzz/%.o $(BUILD)/obj/tests/fuzz/driver.o $(BUILD)/libingest.a
	@mkdir -p $(dir $@)
	$(CC) $(ALL_LDFLAGS) -o $@ $(filter %.o,$^) $(BUILD)/libingest.a $(LIBS)

$(BUILD)/obj/tests/fuzz/%.o: tests/fuzz/%.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -Ilibingest -MMD -MP -c $< -o $@

# The same targets linked with libFuzzer's main; tests/fuzz/run-libfuzzer.sh
# builds them with clang and sanitizers in a build dir of their own.
LIBFUZZER_BINS := $(FUZZ_SRC:tests/fuzz/%.c=$(BUILD)/libfuzzer/%)
$(LIBFUZZER_BINS): $(BUILD)/libfuzzer/%: $(BUILD)/obj/tests/fuzz/%.o $(BUILD)/libingest.a
	@mkdir -p $(dir $@)
	$(CC) $(ALL_LDFLAGS) -fsanitize=fuzzer -o $@ $< $(BUILD)/libingest.a $(LIBS)

deps:
	@sh packaging/install-deps.sh

# Debian packages (dpkg-buildpackage, debhelper compat 13) into $(BUILD)/deb:
# ingest-agent, ingest-receiver, ingestctl, libingest0, libingest-dev; then
# lintian, which must find no error.  packaging/deb/build.sh builds in a
# staging copy of the tree with packaging/deb/debian as its debian/.
.PHONY: deb
deb:
	@sh packaging/install-deps.sh build deb
	@sh packaging/deb/build.sh $(BUILD)/deb
	lintian --fail-on error $(BUILD)/deb/ingest_*.changes

# RPM packages (rpmbuild; Debian's rpm package provides it) into
# $(BUILD)/rpm/RPMS from packaging/rpm/ingest.spec, their file lists checked
# against packaging/rpm/files.expected; then rpmlint, for information.
.PHONY: rpm
rpm:
	@sh packaging/install-deps.sh build rpm
	@sh packaging/rpm/build.sh $(BUILD)/rpm
	-rpmlint $(BUILD)/rpm/RPMS/*/*.rpm | tail -1

# JOBS: how many compilers and test suites run at once (default: twice the
# CPUs, at most 4; see tests/run-tests.sh).  A -j given to make wins for the build.
JOBS ?= $(shell n=$$(( $$(nproc 2>/dev/null || echo 1) * 2 )); [ $$n -gt 4 ] && n=4; echo $$n)

# KINDS: which suites (unit fuzz integration; default all).
check: deps
	@$(MAKE) --no-print-directory $(if $(filter -j%,$(MAKEFLAGS)),,-j$(JOBS)) all tests
	@JOBS=$(JOBS) sh tests/run-tests.sh $(BUILD) $(KINDS)

asan:
	@$(MAKE) --no-print-directory check SANITIZE=1

# ThreadSanitizer (into build-tsan): every suite, the Kafka ones skipped
# (tests/integration/lib.sh, skip_kafka_under_tsan); a race report fails
# the suite.  CI runs the unit suites: make check SANITIZE=thread KINDS=unit.
tsan:
	@$(MAKE) --no-print-directory check SANITIZE=thread

valgrind: deps
	@$(MAKE) --no-print-directory all tests
	@VALGRIND=1 sh tests/run-tests.sh $(BUILD) unit

demo: deps
	@$(MAKE) --no-print-directory all
	@sh tests/demo.sh $(BUILD)

# libFuzzer campaigns (clang): FUZZ_SECONDS per target; FUZZ_TARGETS,
# FUZZ_MERGE=1: see tests/fuzz/README.md.
FUZZ_SECONDS ?= 60
fuzz:
	@BUILD=$(BUILD) sh tests/fuzz/run-libfuzzer.sh $(FUZZ_SECONDS)

# The shipping benchmark (ours vs rsync, tar|zstd, restic, casync):
# bench/ship.sh writes bench/results.md and bench/results.svg, see
# bench/README.md.  SIZE=64MiB RUNS=1 for a smoke run.  bench-gateway and
# bench-small run it on the trees of `ingestctl bench gen --profile gateway`
# and `--profile small` (issue 16), into bench/results-gateway.md and
# bench/results-small.md; SIZE, FILES (small), RUNS, TOOLS as for bench.
.PHONY: bench-ship bench-gateway bench-small bench-perfile
bench bench-ship: all
	@bash bench/ship.sh $(BUILD)
bench-gateway: all
	@PROFILE=gateway bash bench/ship.sh $(BUILD)
# The Kafka transport through the mock cluster against TCP: bench/kafka.sh,
# into bench/results-kafka.md.  SIZE=64MiB RUNS=1 for a smoke run.
.PHONY: bench-kafka
bench-kafka: all tests
	@bash bench/kafka.sh $(BUILD)
bench-small: all
	@PROFILE=small bash bench/ship.sh $(BUILD)
# Where each small file's CPU microseconds go at the agent and the receiver
# (bench/perfile.sh, perf record of both; FILES=40000 RUNS=3 by default)
bench-perfile: all
	@bash bench/perfile.sh $(BUILD)
# The edge daemon's CPU while one log of a 20,000-file source is appended to
# (bench/daemon-cpu.sh, into bench/results-daemon-cpu.md); DURATION=10 for a
# smoke run.
.PHONY: bench-daemon
bench-daemon: all
	@bash bench/daemon-cpu.sh $(BUILD)
# The daemon catching up on a backlog: the 1 GiB default tree there when it
# starts, seconds until all acknowledged, CPU, peak RssAnon, beside --once
# (bench/daemon-catchup.sh, into bench/results-daemon-catchup.md); SIZE,
# PROFILE, RUNS (3), COLD=1 (page cache dropped before each run).
.PHONY: bench-daemon-catchup
bench-daemon-catchup: all
	@bash bench/daemon-catchup.sh $(BUILD)

# Fleet scale at the receiver (issue 14): IDLE (1000) authenticated idle
# sessions held while 1, 10 and 100 devices ship PHASE_MIB (64) MiB each
# phase: RssAnon per idle session, peak RssAnon, CPU s per GB: bench/fleet-idle.sh.
.PHONY: bench-fleet-idle
bench-fleet-idle: all tests
	@bash bench/fleet-idle.sh $(BUILD) $${IDLE:-1000} $${PHASE_MIB:-64}

# Issue 14's fleet figures (bench/fleet-scale.sh, results in
# bench/results-fleet-scale.md): 64 devices at the same moment sharing half
# of their incompressible trees (chunk bytes sent over unique content), and
# 8 devices against one shipping the same total, interleaved, medians of 3.
# How deep the receiver's thread stacks go: fleet-idle.sh under ulimit -s N
# (bench/stack-depth.sh; results in bench/results-fleet-idle.md).
.PHONY: bench-stack-depth
bench-stack-depth: all tests
	@bash bench/stack-depth.sh $(BUILD)
.PHONY: bench-fleet-shared bench-fleet-scale
bench-fleet-shared: all
	@bash bench/fleet-scale.sh $(BUILD) shared
bench-fleet-scale: all
	@bash bench/fleet-scale.sh $(BUILD) scale

# Landing work in proportion to the change (issue 16, item 5): a 1% append
# to a LOG (100MiB) log and 8 MiB changed in 8 places of a BIG (4GiB) file,
# each on a fresh loop XFS with reflinks and a loop ext4 (root only):
# bench/landing.sh, into bench/results-landing.md.  BIG=256MiB LOG=20MiB for
# a quick look.
bench-landing: all
	@bash bench/landing.sh $(BUILD)

# One dictionary for several kinds of small files: trained at once, in a
# part per kind, or one per kind (bench/dict-mix.sh; bytes, not time).
.PHONY: bench-dict-mix
bench-dict-mix: all
	@bash bench/dict-mix.sh $(BUILD)

# The discovery benchmark (walk of 1,000,000 empty files vs find, and the
# real agent's first walk): bench/scan.sh.  FILES=20000 RUNS=1 for a smoke run.
.PHONY: bench-scan
bench-scan: all
	@bash bench/scan.sh $(BUILD)

# The benchmark's comparison tools, from Debian (root only): restic and
# casync are optional to bench/ship.sh (reported "not installed"), linux-perf
# gives its profiled run, xfsprogs the loop XFS of bench/landing.sh and
# tests/integration/test_reflink.sh.  Keep in step with bench_pkgs in
# packaging/install-deps.sh, which `make check` runs for its 64 MiB smoke run.
BENCH_DEBS := rsync socat zstd time restic casync iproute2 xfsprogs linux-perf
bench-deps:
	@if [ "$$(id -u)" != 0 ]; then echo "bench-deps: needs root: apt-get install $(BENCH_DEBS)"; exit 1; fi
	@DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $(BENCH_DEBS) || \
	 { apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $(BENCH_DEBS); }

install: install-programs install-shared install-static install-includes install-pc install-man

install-programs: programs
	install -d $(DESTDIR)$(BINDIR)
	for p in $(PROGRAMS); do install -m 0755 $(BUILD)/$$p $(DESTDIR)$(BINDIR)/$$p; done

install-shared: $(BUILD)/libingest.so.$(SOVERSION)
	install -d $(DESTDIR)$(LIBDIR)
	install -m 0755 $< $(DESTDIR)$(LIBDIR)/libingest.so.$(SOVERSION)
	ln -sf libingest.so.$(SOVERSION) $(DESTDIR)$(LIBDIR)/libingest.so.$(SOMAJOR)
	ln -sf libingest.so.$(SOMAJOR) $(DESTDIR)$(LIBDIR)/libingest.so

install-static: $(BUILD)/libingest.a
	install -d $(DESTDIR)$(LIBDIR)
	install -m 0644 $< $(DESTDIR)$(LIBDIR)/libingest.a

install-includes:
	install -d $(DESTDIR)$(INCLUDEDIR)/ingest
	install -m 0644 include/ingest.h $(DESTDIR)$(INCLUDEDIR)/ingest.h
	install -m 0644 include/ingest/*.h $(DESTDIR)$(INCLUDEDIR)/ingest/

# Generated here, not from $(BUILD)/libingest.pc: PREFIX and LIBDIR are the install's.
install-pc: libingest.pc.in
	install -d $(DESTDIR)$(PKGCONFIGDIR)
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@LIBDIR@|$(LIBDIR)|' -e 's|@INCLUDEDIR@|$(INCLUDEDIR)|' \
	    -e 's|@VERSION@|$(SOVERSION)|' $< > $(DESTDIR)$(PKGCONFIGDIR)/libingest.pc
	chmod 0644 $(DESTDIR)$(PKGCONFIGDIR)/libingest.pc

install-man: man
	install -d $(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(MANDIR)/man5 $(DESTDIR)$(MANDIR)/man8
	for m in $(notdir $(MAN_PAGES)); do s=$${m##*.}; install -m 0644 $(BUILD)/man/$$m $(DESTDIR)$(MANDIR)/man$$s/$$m; done

uninstall:
	for p in $(PROGRAMS); do rm -f $(DESTDIR)$(BINDIR)/$$p; done
	for m in $(notdir $(MAN_PAGES)); do rm -f $(DESTDIR)$(MANDIR)/man$${m##*.}/$$m; done
	rm -f $(DESTDIR)$(LIBDIR)/libingest.so.$(SOVERSION) $(DESTDIR)$(LIBDIR)/libingest.so.$(SOMAJOR) \
	      $(DESTDIR)$(LIBDIR)/libingest.so $(DESTDIR)$(LIBDIR)/libingest.a \
	      $(DESTDIR)$(PKGCONFIGDIR)/libingest.pc $(DESTDIR)$(INCLUDEDIR)/ingest.h
	rm -rf $(DESTDIR)$(INCLUDEDIR)/ingest

clean:
	rm -rf build build-asan

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)

# The crash soak (issue 17): kill -9 of the agent daemon (SOAK_AGENT_KILLS,
# 1,000) and of the receiver (SOAK_RECEIVER_KILLS, 200), and simulated power
# cuts split between the two (SOAK_POWER_CUTS, 200), at random moments while
# a writer keeps adding files; make check runs it with 12, 3 and 6.
soak: programs tests
	BUILD=$(abspath $(BUILD)) SOAK_AGENT_KILLS=$${SOAK_AGENT_KILLS:-1000} \
		SOAK_RECEIVER_KILLS=$${SOAK_RECEIVER_KILLS:-200} SOAK_POWER_CUTS=$${SOAK_POWER_CUTS:-200} \
		sh tests/integration/test_soak.sh
.PHONY: soak

# The catalog benchmark (issue 13): FILES (1,000,000) synthesized landed
# files and manifests in DIR (default $(BUILD)/bench-catalog; best a fresh
# filesystem), then the catalog against find, RUNS (5) interleaved rounds,
# medians; one JSON line.  See bench/results-catalog.md.
.PHONY: bench-catalog
bench-catalog: all
	@mkdir -p $${DIR:-$(BUILD)/bench-catalog}
	@$(BUILD)/ingestctl bench catalog --files $${FILES:-1000000} --runs $${RUNS:-5} $${DIR:-$(BUILD)/bench-catalog}

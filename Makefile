# hakmem — build, test and benchmark entry points.
#   make                 build/libhakmem.so and build/libhakmem.a
#   make test            build and run the test suite (ends with "N passed, N failed, N skipped")
#   make test-sanitize   the suite's unit tests with hakmem built under ASan+UBSan and TSan
#   make debug           the unit tests with hakmem's assertions on (build/debug)
#   make bench           the benchmark comparison against glibc, mimalloc, jemalloc, tcmalloc

CC      ?= cc
BUILD   ?= build
# Functions start on cache lines: a change elsewhere in the library then does
# not shift the hot paths' code and move a benchmark by 5-10 % (docs/performance.md).
# No straight-line vectorizing: it packs the two words free() writes into a
# freed block through a vector register, three instructions more per free.
OPT     ?= -O2 -falign-functions=64 -fno-tree-slp-vectorize
CFLAGS_BASE = -std=gnu11 -Wall -Wextra -Wno-unused-parameter -D_GNU_SOURCE -Iinclude -Isrc \
              -fPIC -fvisibility=hidden -ftls-model=initial-exec -fno-semantic-interposition \
              -fno-builtin-malloc -fno-builtin-free -fno-builtin-calloc -fno-builtin-realloc \
              -fexceptions -pthread
CFLAGS  ?= $(OPT) -g
ALL_CFLAGS = $(CFLAGS_BASE) $(CFLAGS)

SRCS    = $(wildcard src/*.c)
HDRS    = $(wildcard src/*.h) include/hakmem.h
OBJS    = $(SRCS:src/%.c=$(BUILD)/obj/%.o)

.PHONY: all test test-sanitize debug debug-run fuzz bench deps deps-sanitize clean print-ext-cflags
all: $(BUILD)/libhakmem.so $(BUILD)/libhakmem.a

$(BUILD)/obj/%.o: src/%.c $(HDRS) | $(BUILD)/obj
	$(CC) $(ALL_CFLAGS) -c $< -o $@

$(BUILD)/libhakmem.so: $(OBJS)
	$(CC) -shared -pthread -Wl,-soname,libhakmem.so -Wl,-z,nodelete -Wl,-z,defs $(OBJS) -o $@

# The archive holds one object whose internal (hidden) symbols are made local,
# so a static link exposes only the API and cannot clash with the program's
# own names (heap_get, options_init, ...).
$(BUILD)/libhakmem.a: $(OBJS)
	$(LD) -r $(OBJS) -o $(BUILD)/hakmem.o
	objcopy --localize-hidden $(BUILD)/hakmem.o
	rm -f $@ && ar rcs $@ $(BUILD)/hakmem.o

$(BUILD)/obj $(BUILD)/tests $(BUILD)/ext:
	mkdir -p $@

# ---- tests ---------------------------------------------------------------
# Every tests/test_*.c is one program linked with hakmem's objects (unit tests
# reach internal symbols); every tests/test_*.sh is a script test.  tests/run.sh
# runs them all with time limits.
TEST_SRCS = $(wildcard tests/test_*.c)
TEST_BINS = $(TEST_SRCS:tests/%.c=$(BUILD)/tests/%)
TEST_CFLAGS = -std=gnu11 -O1 -g -Wall -D_GNU_SOURCE -Iinclude -Isrc -Itests -pthread

$(BUILD)/tests/%: tests/%.c tests/test.h tests/bad_free.h tests/companion.h $(OBJS) | $(BUILD)/tests
	$(CC) $(TEST_CFLAGS) $< -o $@ $(OBJS) -pthread

# The heap profiler's test program (test_profile.sh), run with hakmem
# preloaded: linked with the C library alone, its functions in the dynamic
# symbol table for the profiler to name.
$(BUILD)/tests/profile_sites: tests/profile/sites.c | $(BUILD)/tests
	$(CC) -std=gnu11 -O1 -g -Wall -D_GNU_SOURCE -pthread -rdynamic $< -o $@ -ldl

# tests/ext/*.c are linked with the C library alone: the tests/test_ext_*.sh
# scripts run each under glibc's malloc and under hakmem (preloaded, default
# and HAKMEM_SECURE=1) and compare (tests/ext/README.md).  They ask for too
# large blocks, and read blocks after a failed realloc, on purpose.
EXT_SRCS = $(wildcard tests/ext/*.c)
EXT_BINS = $(EXT_SRCS:tests/ext/%.c=$(BUILD)/ext/%) $(patsubst tests/ext/dso/%.c,$(BUILD)/ext/%.so,$(wildcard tests/ext/dso/*.c))
EXT_CFLAGS = -std=gnu11 -O1 -g -Wall -Wno-alloc-size-larger-than -Wno-use-after-free -D_GNU_SOURCE -fno-builtin -Itests -pthread

$(BUILD)/ext/%: tests/ext/%.c tests/ext/ext.h tests/test.h | $(BUILD)/ext
	$(CC) $(EXT_CFLAGS) $< -o $@ -ldl

# libraries the programs load with dlopen
$(BUILD)/ext/%.so: tests/ext/dso/%.c | $(BUILD)/ext
	$(CC) $(EXT_CFLAGS) -shared -fPIC $< -o $@

# for tests/test_ext_glibc.sh, which links some of them statically with hakmem
print-ext-cflags:
	@echo $(EXT_CFLAGS)

test: all $(TEST_BINS) $(EXT_BINS) $(BUILD)/tests/profile_sites
	@BUILD=$(BUILD) tests/run.sh

# Sanitizer builds: hakmem is compiled with the sanitizer and linked into the
# tests under its hakmem_* names only (HAKMEM_NO_OVERRIDE), so the sanitizer's
# own malloc stays in charge of the C library while it checks hakmem's code.
SAN_TESTS = $(filter test_api test_control test_heaps test_forgery test_decay test_sizeclass test_integrity test_mt test_lineage test_stats test_purge test_retired test_nopurger test_nodelay test_spares test_tcache test_secure test_sampling,$(TEST_SRCS:tests/%.c=%))
test-sanitize:
	$(MAKE) BUILD=build/asan CC=clang CFLAGS="-O1 -g -fsanitize=address,undefined -fno-sanitize-recover=all -DHAKMEM_NO_OVERRIDE" san-run
	$(MAKE) BUILD=build/tsan CC=clang CFLAGS="-O1 -g -fsanitize=thread -DHAKMEM_NO_OVERRIDE" san-run

san-run: $(BUILD)/libhakmem.a $(addprefix $(BUILD)/tests/,$(SAN_TESTS))
	@BUILD=$(BUILD) ONLY="$(SAN_TESTS)" SANITIZED=1 tests/run.sh

$(BUILD)/tests/%: TEST_CFLAGS += $(if $(findstring -fsanitize,$(CFLAGS)),$(filter -fsanitize=% -fno-sanitize%,$(CFLAGS)) -DHAKMEM_NO_OVERRIDE,)

# The debug build: hakmem with its assertions (hm_assert, src/internal.h) and
# the heap validation walk (src/debug.c) compiled in, and every unit test
# linked with it (the tests see the debug build's structures: -DHM_DEBUG).
DEBUG_TESTS = $(TEST_SRCS:tests/%.c=%)
debug:
	$(MAKE) BUILD=build/debug CFLAGS="-O1 -g -DHM_DEBUG" debug-run

debug-run: $(BUILD)/libhakmem.a $(addprefix $(BUILD)/tests/,$(DEBUG_TESTS))
	@BUILD=$(BUILD) ONLY="$(DEBUG_TESTS)" tests/run.sh

$(BUILD)/tests/%: TEST_CFLAGS += $(filter -DHM_DEBUG,$(CFLAGS))

# ---- install ---------------------------------------------------------------
# make install [PREFIX=/usr/local] [DESTDIR=staging dir]: the shared and static
# libraries, hakmem.h, hakmem.pc, the CMake package (find_package(hakmem)) and
# the hakmem launcher.  make uninstall removes exactly those files.
# The CMake package and the launcher find the rest of the installation
# relative to themselves, so an installed tree can be moved; hakmem.pc names
# PREFIX, as pkg-config files do (pkg-config --define-variable=prefix=... moves it).
HAKMEM_VERSION = 0.1.0
PREFIX       ?= /usr/local
BINDIR       ?= $(PREFIX)/bin
LIBDIR       ?= $(PREFIX)/lib
INCLUDEDIR   ?= $(PREFIX)/include
PKGCONFIGDIR ?= $(LIBDIR)/pkgconfig
CMAKEDIR     ?= $(LIBDIR)/cmake/hakmem
INSTALL      ?= install

# the path from directory $(1) to directory $(2)
relpath = $(shell realpath -m --relative-to=$(1) $(2))
SUBST = sed -e 's|@VERSION@|$(HAKMEM_VERSION)|g' \
            -e 's|@PREFIX@|$(PREFIX)|g' \
            -e 's|@PREFIX_TO_LIBDIR@|$(call relpath,$(PREFIX),$(LIBDIR))|g' \
            -e 's|@PREFIX_TO_INCLUDEDIR@|$(call relpath,$(PREFIX),$(INCLUDEDIR))|g' \
            -e 's|@CMAKE_TO_LIBDIR@|$(call relpath,$(CMAKEDIR),$(LIBDIR))|g' \
            -e 's|@CMAKE_TO_INCLUDEDIR@|$(call relpath,$(CMAKEDIR),$(INCLUDEDIR))|g' \
            -e 's|^libdir_rel=.*|libdir_rel=$(call relpath,$(BINDIR),$(LIBDIR))|'
INSTALLED = $(BINDIR)/hakmem $(LIBDIR)/libhakmem.so $(LIBDIR)/libhakmem.a $(INCLUDEDIR)/hakmem.h \
            $(PKGCONFIGDIR)/hakmem.pc $(CMAKEDIR)/hakmemConfig.cmake $(CMAKEDIR)/hakmemConfigVersion.cmake

.PHONY: install uninstall
install: all
	@mkdir -p $(BUILD)/pkg
	$(SUBST) packaging/hakmem.pc.in >$(BUILD)/pkg/hakmem.pc
	$(SUBST) packaging/hakmemConfig.cmake.in >$(BUILD)/pkg/hakmemConfig.cmake
	$(SUBST) packaging/hakmemConfigVersion.cmake.in >$(BUILD)/pkg/hakmemConfigVersion.cmake
	$(SUBST) tools/hakmem >$(BUILD)/pkg/hakmem
	$(INSTALL) -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(LIBDIR) $(DESTDIR)$(INCLUDEDIR) \
	              $(DESTDIR)$(PKGCONFIGDIR) $(DESTDIR)$(CMAKEDIR)
	$(INSTALL) -m 755 $(BUILD)/pkg/hakmem $(DESTDIR)$(BINDIR)/hakmem
	$(INSTALL) -m 755 $(BUILD)/libhakmem.so $(DESTDIR)$(LIBDIR)/libhakmem.so
	$(INSTALL) -m 644 $(BUILD)/libhakmem.a $(DESTDIR)$(LIBDIR)/libhakmem.a
	$(INSTALL) -m 644 include/hakmem.h $(DESTDIR)$(INCLUDEDIR)/hakmem.h
	$(INSTALL) -m 644 $(BUILD)/pkg/hakmem.pc $(DESTDIR)$(PKGCONFIGDIR)/hakmem.pc
	$(INSTALL) -m 644 $(BUILD)/pkg/hakmemConfig.cmake $(BUILD)/pkg/hakmemConfigVersion.cmake $(DESTDIR)$(CMAKEDIR)/

uninstall:
	rm -f $(addprefix $(DESTDIR),$(INSTALLED))
	rmdir $(DESTDIR)$(CMAKEDIR) 2>/dev/null || true

# Fuzzing: tests/fuzz_api.c under libFuzzer with ASan+UBSan, hakmem built
# with coverage instrumentation, FUZZ_SECONDS in the default mode and as long
# again in the hardened mode (HAKMEM_SECURE=1).
FUZZ_SECONDS ?= 30
fuzz:
	$(MAKE) BUILD=build/fuzz CC=clang CFLAGS="-O1 -g -fsanitize=address,undefined,fuzzer-no-link -fno-sanitize-recover=all -DHAKMEM_NO_OVERRIDE" build/fuzz/fuzz_api
	mkdir -p build/fuzz/corpus
	build/fuzz/fuzz_api -max_total_time=$(FUZZ_SECONDS) -max_len=4096 -rss_limit_mb=4096 -print_final_stats=1 -artifact_prefix=build/fuzz/ build/fuzz/corpus
	HAKMEM_SECURE=1 build/fuzz/fuzz_api -max_total_time=$(FUZZ_SECONDS) -max_len=4096 -rss_limit_mb=4096 -print_final_stats=1 -artifact_prefix=build/fuzz/ build/fuzz/corpus

$(BUILD)/fuzz_api: tests/fuzz_api.c $(OBJS)
	$(CC) -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all -Iinclude $< $(OBJS) -o $@ -pthread

# ---- benchmarks ----------------------------------------------------------
bench: all
	@bench/run.sh

# ---- packages: what make test (deps) and make test-sanitize and fuzz
# (deps-sanitize) need, with the names of this Debian or Ubuntu release --------
deps:
	@tools/deps.sh test
deps-sanitize:
	@tools/deps.sh sanitize

clean:
	rm -rf build

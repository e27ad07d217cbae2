# distrun - one Makefile for the launcher, the runtime, examples, tests,
# benchmarks and installation.  `make V=1` shows full command lines,
# `make ASAN=1` builds with address and undefined-behaviour sanitizers
# (into build-asan/), `make TSAN=1` with ThreadSanitizer (into build-tsan/;
# its `test` runs the threaded suites), `make fuzz` builds the libFuzzer
# harnesses with clang (into build-fuzz/) and runs each for FUZZ_SECONDS,
# `make WERROR=` drops -Werror.

PREFIX  ?= /usr/local
DESTDIR ?=
CC      ?= cc
NVCC    ?= $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)

VERSION := 0.1.0
SOMAJOR := 0

WERROR  ?= -Werror
OPT     ?= -O2
CFLAGS  ?= $(OPT) -g
ALL_CFLAGS = -std=c11 -Wall -Wextra $(WERROR) -D_GNU_SOURCE -MMD -MP \
	     -Iruntime $(CFLAGS)
ALL_LDFLAGS = $(LDFLAGS)
LIBS_RT = -lpthread -ldl -lm

# Undefined behaviour stops the program (by default UBSan prints and goes
# on, and a test that checks only the exit status would pass).  gcc's
# -fsanitize=undefined leaves out float-to-integer casts that overflow:
# asked for by name.
ifeq ($(ASAN),1)
B ?= build-asan
ALL_CFLAGS += -fsanitize=address,undefined,float-cast-overflow \
	      -fno-sanitize-recover=undefined,float-cast-overflow \
	      -fno-omit-frame-pointer
ALL_LDFLAGS += -fsanitize=address,undefined
else ifeq ($(TSAN),1)
# The program and the library must both be instrumented: every program
# links the static archive built here with the same flags.
B ?= build-tsan
ALL_CFLAGS += -fsanitize=thread -fno-omit-frame-pointer -Wno-tsan
ALL_LDFLAGS += -fsanitize=thread
else ifeq ($(FUZZ),1)
# Only `make fuzz` sets FUZZ=1: clang's libFuzzer, with ASan and UBSan
# (Debian's clang-14 and libclang-rt-14-dev).
B ?= build-fuzz
FUZZ_CC ?= $(shell command -v clang-14 || command -v clang)
CC = $(FUZZ_CC)
ALL_CFLAGS += -fsanitize=fuzzer-no-link,address,undefined \
	      -fno-sanitize-recover=undefined -fno-omit-frame-pointer
ALL_LDFLAGS += -fsanitize=address,undefined
else
B ?= build
endif

ifeq ($(V),1)
Q =
else
Q = @
endif

# --- object lists: one place for all of them ---------------------------
# The launcher in wings: cmd/ (main, options, launcher.h), job/ (the job on
# one host), diag/ (diagnosis), ci/ (the CI harness and reports), nodes/
# (several nodes); job/shim/ is not linked into it (LINEBUF_SO below).
CMD_DIRS := cmd cmd/job cmd/diag cmd/ci cmd/nodes
CMD_SRC  := $(wildcard $(addsuffix /*.c,$(CMD_DIRS)))
CMD_INC  := $(addprefix -I,$(CMD_DIRS))
RT_SRC   := $(wildcard runtime/*.c)
EX_SRC   := $(wildcard testdata/examples/*.c)
PROG_SRC := $(wildcard testdata/progs/*.c)
CTEST_SRC := $(wildcard tests/c/*.c)
UNIT_SRC := $(wildcard tests/unit/*.c)
BENCH_SRC := $(wildcard scripts/*.c)
FUZZ_SRC := $(filter-out tests/fuzz/replay.c,$(wildcard tests/fuzz/*.c))

CMD_OBJ  := $(CMD_SRC:%.c=$(B)/obj/%.o)
# The runtime's bottom layer that the launcher shares (one clock, one
# duration parser).
CMD_OBJ  += $(B)/obj/runtime/clock.o
RT_OBJ   := $(RT_SRC:%.c=$(B)/obj/%.o)
RT_PIC   := $(RT_SRC:%.c=$(B)/pic/%.o)

DISTRUN  := $(B)/bin/distrun
LIB_A    := $(B)/lib/libdistrun.a
LIB_SO   := $(B)/lib/libdistrun.so.$(VERSION)
EXAMPLES := $(EX_SRC:testdata/examples/%.c=$(B)/examples/%)
PROGS    := $(PROG_SRC:testdata/progs/%.c=$(B)/testdata/%)
CTESTS   := $(CTEST_SRC:tests/c/%.c=$(B)/tests/%)
UNITS    := $(UNIT_SRC:tests/unit/%.c=$(B)/unit/%)
BENCHES  := $(BENCH_SRC:scripts/%.c=$(B)/bench/%)
FAKE_CUDA := $(B)/fake/libcuda.so
# Preloaded into the ranks: their stdout line-buffered (cmd/job/shim/linebuf.c).
LINEBUF_SO := $(B)/lib/distrun/libdistrun-linebuf.so
CLOCKSHIFT := $(B)/fake/clockshift.so $(B)/fake/faildup2.so
FUZZ_NAMES := $(FUZZ_SRC:tests/fuzz/%.c=%)
# Every harness also links with replay.c into a plain program that feeds it
# each file of its corpus: `make test` replays the corpora everywhere.
REPLAYS  := $(FUZZ_NAMES:%=$(B)/fuzz/%-replay)
FUZZERS  := $(FUZZ_NAMES:%=$(B)/fuzz/%-fuzz)
# The launcher's parsers, without its main().
CMD_LIB  := $(filter-out $(B)/obj/cmd/main.o,$(CMD_OBJ))

.PHONY: all test test-unit test-bats test-gpu bench install clean fuzz \
	fuzz-build
all: $(DISTRUN) $(LIB_A) $(LIB_SO) $(EXAMPLES) $(PROGS) $(CTESTS) $(UNITS) \
     $(BENCHES) $(FAKE_CUDA) $(CLOCKSHIFT) $(REPLAYS) $(LINEBUF_SO)

# The launcher's wings include each other's headers.
$(B)/obj/cmd/%.o: ALL_CFLAGS += $(CMD_INC)
$(B)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $<")
	$(Q)$(CC) $(ALL_CFLAGS) -c -o $@ $<

$(B)/pic/%.o: %.c
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC PIC  $<")
	$(Q)$(CC) $(ALL_CFLAGS) -fPIC -fvisibility=hidden -c -o $@ $<

# The launcher takes what it shares with the runtime (the job's keys and
# handshake, errors, the names of calls, dtypes and ops for diag.c) from
# the archive: the linker pulls only those objects.  libcurl is not
# linked: cmd/nodes/etcd.c loads it (dlopen) for --rdzv-backend etcd alone, so
# that its thirty libraries do not slow every start.  jansson is linked
# from its archive where one is installed (Debian's libjansson-dev has
# it): one shared library fewer to map and relocate at every start (0.07-
# 0.1 ms of a 3.4 ms `distrun -n 4 true`, docs/benchmarks.md "Launch");
# `make JANSSON_STATIC=` links the shared one.  The symbols are bound at
# start (-z now: ld.so resolves them in one pass, and the GOT is read-only
# from then on) rather than at each function's first call.
ifeq ($(origin JANSSON_STATIC),undefined)
JANSSON_STATIC := $(filter /%,$(shell $(CC) -print-file-name=libjansson.a))
endif
LIBS_CMD = $(if $(JANSSON_STATIC),$(JANSSON_STATIC),-ljansson)
$(DISTRUN): $(CMD_OBJ) $(LIB_A)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LINK    $@")
	$(Q)$(CC) $(ALL_LDFLAGS) -Wl,-z,now -o $@ $(CMD_OBJ) $(LIB_A) \
		$(LIBS_CMD) $(LIBS_RT)

# --html's page template (html.c): the CSS and the script, kept as files
# of their own and made C strings here.
HTML_TMPL := $(B)/gen/html_tmpl.h
$(B)/obj/cmd/ci/html.o: $(HTML_TMPL)
$(B)/obj/cmd/ci/html.o: ALL_CFLAGS += -I$(B)/gen
$(HTML_TMPL): cmd/ci/html.css cmd/ci/html.js
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  GEN     $@")
	$(Q){ echo '/* made by the Makefile from cmd/ci/html.css, cmd/ci/html.js */'; \
	  for f in $^; do \
	    printf 'static const char html_%s[] =\n' "$${f##*.}"; \
	    sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/^/"/' -e 's/$$/\\n"/' $$f; \
	    echo ';'; \
	  done; } > $@.tmp && mv $@.tmp $@

# The Python stack helper that distrun puts on the ranks' PYTHONPATH
# (diag.c), found relative to the distrun binary.
PYHELPER := $(B)/share/distrun/python/sitecustomize.py
all: $(PYHELPER)
$(PYHELPER): cmd/diag/sitecustomize.py
	@mkdir -p $(dir $@)
	$(Q)cp $< $@
# The warm interpreter of --preload (preload.c), found the same way.
PYPRELOAD := $(B)/share/distrun/python/preload.py
all: $(PYPRELOAD)
$(PYPRELOAD): cmd/job/preload.py
	@mkdir -p $(dir $@)
	$(Q)cp $< $@

# The torch backend (runtime/torch/distrun_torch): beside the helper, so
# that ranks distrun starts import it with no install step; it finds
# $(B)/lib/libdistrun.so relative to itself.
TORCH_PY_SRC := $(wildcard runtime/torch/distrun_torch/*.py)
TORCH_PY := $(TORCH_PY_SRC:runtime/torch/%=$(B)/share/distrun/python/%)
all: $(TORCH_PY)
$(B)/share/distrun/python/distrun_torch/%.py: runtime/torch/distrun_torch/%.py
	@mkdir -p $(dir $@)
	$(Q)cp $< $@

$(LIB_A): $(RT_OBJ)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  AR      $@")
	$(Q)rm -f $@ && ar rcs $@ $^

$(LIB_SO): $(RT_PIC)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LINK    $@")
	$(Q)$(CC) $(ALL_LDFLAGS) -shared -Wl,-soname,libdistrun.so.$(SOMAJOR) -o $@ $^ $(LIBS_RT)
	$(Q)ln -sf libdistrun.so.$(VERSION) $(B)/lib/libdistrun.so.$(SOMAJOR)
	$(Q)ln -sf libdistrun.so.$(SOMAJOR) $(B)/lib/libdistrun.so

# Programs that link the runtime link the static archive: no rpath games.
# ($(LIB_A) in each rule's own prerequisites: a pattern rule without a
# recipe adds no prerequisite, and programs would neither wait for the
# archive in a parallel build nor relink when it changes.)
$(B)/examples/%: testdata/examples/%.c $(LIB_A)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $@")
	$(Q)$(CC) $(ALL_CFLAGS) $(ALL_LDFLAGS) -o $@ $< $(LIB_A) $(LIBS_RT)
$(B)/tests/%: tests/c/%.c $(LIB_A)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $@")
	$(Q)$(CC) $(ALL_CFLAGS) $(ALL_LDFLAGS) -o $@ $< $(LIB_A) $(LIBS_RT)
$(B)/unit/%: tests/unit/%.c $(LIB_A)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $@")
	$(Q)$(CC) $(ALL_CFLAGS) $(CMD_INC) $(ALL_LDFLAGS) -o $@ $< \
		$(UNIT_OBJ) $(LIB_A) $(UNIT_LIBS) $(LIBS_RT)
# A unit test of a launcher file includes that file and links the rest of
# the launcher.
UNIT_STACK_OBJ := $(filter-out %/diag_stacks.o,$(CMD_LIB))
$(B)/unit/test_diag_stack: $(UNIT_STACK_OBJ)
$(B)/unit/test_diag_stack: UNIT_OBJ = $(UNIT_STACK_OBJ)
$(B)/unit/test_diag_stack: UNIT_LIBS = $(LIBS_CMD)
$(B)/bench/%: scripts/%.c $(LIB_A)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $@")
	$(Q)$(CC) $(ALL_CFLAGS) $(ALL_LDFLAGS) -o $@ $< $(LIB_A) $(LIBS_RT)
# Launcher fixtures are plain programs.
$(B)/testdata/%: testdata/progs/%.c
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $@")
	$(Q)$(CC) $(ALL_CFLAGS) $(ALL_LDFLAGS) -o $@ $< -lpthread
# The strict fake CUDA driver (tests), under both names a process may load
# the driver by; never sanitized (it is loaded into any program).
$(FAKE_CUDA): testdata/fake_libcuda.c
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $@")
	$(Q)$(CC) -std=c11 -Wall -Wextra $(WERROR) -D_GNU_SOURCE -O1 -g -shared \
		-fPIC -Wl,-soname,libcuda.so.1 -o $@ $< -lpthread
	$(Q)ln -sf libcuda.so $(dir $@)libcuda.so.1
# The ranks' line-buffering shim: never sanitized (it is loaded into any
# program, before an ASan runtime would be).  Every rank maps it, so it is
# laid out in two segments, not four (its 1.3 KB of headers and symbols
# share the code's pages): two mmaps fewer a rank, 0.03-0.06 ms of a 3.4 ms
# `distrun -n 4 true`; its GOT is still read-only once bound (-z now).
$(LINEBUF_SO): cmd/job/shim/linebuf.c runtime/contract.h
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $@")
	$(Q)$(CC) -std=c11 -Wall -Wextra $(WERROR) -D_GNU_SOURCE -O2 -shared \
		-fPIC -Wl,-z,noseparate-code -Wl,-z,now -Iruntime -o $@ $<
# Faults for the tests: the wall clock set forward, a failing dup2.
$(B)/fake/%.so: testdata/%.c
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $@")
	$(Q)$(CC) -std=c11 -Wall -Wextra $(WERROR) -O1 -shared -fPIC -o $@ $< -ldl

# --- fuzz harnesses (tests/fuzz/NAME.c, corpus in testdata/fuzz/NAME/)
$(B)/fuzz/%-replay: tests/fuzz/%.c tests/fuzz/replay.c $(CMD_LIB) $(LIB_A)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $@")
	$(Q)$(CC) $(ALL_CFLAGS) $(CMD_INC) $(ALL_LDFLAGS) -o $@ $< tests/fuzz/replay.c \
		$(CMD_LIB) $(LIB_A) $(LIBS_CMD) $(LIBS_RT)
$(B)/fuzz/%-fuzz: tests/fuzz/%.c $(CMD_LIB) $(LIB_A)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $@")
	$(Q)$(CC) $(ALL_CFLAGS) $(CMD_INC) $(ALL_LDFLAGS) -fsanitize=fuzzer -o $@ $< \
		$(CMD_LIB) $(LIB_A) $(LIBS_CMD) $(LIBS_RT)

# `make fuzz FUZZ_SECONDS=N [FUZZ_TARGETS="wire ranks"]`: each harness for N
# seconds on its corpus in testdata/fuzz/NAME/ (new inputs land in
# build-fuzz/corpus/NAME/; crashes in build-fuzz/crash/NAME/ and fail the
# run).  Copy the inputs worth keeping into testdata/fuzz/NAME/.
FUZZ_SECONDS ?= 60
FUZZ_TARGETS ?= $(FUZZ_NAMES)
fuzz:
	$(Q)$(MAKE) --no-print-directory FUZZ=1 fuzz-build
	$(Q)scripts/run-fuzz $(FUZZ_SECONDS) $(FUZZ_TARGETS)
fuzz-build: $(FUZZERS)

# --- GPU tests: they need a kernel, so they are built only where nvcc is
# (never under ASAN or TSAN: nvcc links without the sanitizer runtime).
# Kernels for sm_90 plus PTX for newer devices; run by `make test-gpu`.
GPU_SRC   := $(wildcard tests/gpu/*.cu)
GPU_TESTS := $(GPU_SRC:tests/gpu/%.cu=$(B)/gpu/%)
NVCC_FLAGS ?= -O2 -gencode arch=compute_90,code=sm_90 \
	      -gencode arch=compute_90,code=compute_90
ifneq ($(NVCC),)
ifeq ($(filter 1,$(ASAN) $(TSAN)),)
all: $(GPU_TESTS)
endif
endif
$(B)/gpu/%: tests/gpu/%.cu $(LIB_A)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  NVCC    $@")
	$(Q)$(NVCC) $(NVCC_FLAGS) -Iruntime -o $@ $< $(LIB_A) $(LIBS_RT)

# --- tests ---------------------------------------------------------------
# Under TSAN only the suites with threads run (runtime, collectives,
# transport, cuda's staging on the fake driver, and the unit tests): the
# launcher is single-threaded and its suites under TSAN would only be slower.
ifeq ($(TSAN),1)
TEST_SUITES ?= tests/runtime.bats tests/collectives.bats tests/transport.bats \
	       tests/cuda.bats
else
TEST_SUITES ?= tests
endif
ifneq ($(filter 1,$(ASAN) $(TSAN)),)
SAN_LOGS ?= $(abspath $(B))/sanitizer-logs
endif
test: all
	$(Q)BATS_SUITES="$(TEST_SUITES)" SAN_LOGS="$(SAN_LOGS)" \
		scripts/run-tests $(abspath $(B)) $(UNITS)

test-unit: $(UNITS)
	$(Q)scripts/run-unit $(UNITS)

test-bats: all
	$(Q)DISTRUN_BUILD=$(abspath $(B)) bats tests/

test-gpu: all
	$(Q)DISTRUN_BUILD=$(abspath $(B)) scripts/test-gpu

bench: all
	$(Q)DISTRUN_BUILD=$(abspath $(B)) scripts/bench-all

# --- install -------------------------------------------------------------
# Under a prefix the dynamic linker searches (/usr, /usr/local) ldconfig
# makes the library found; under any other the .pc's Libs carry an rpath,
# so that `cc x.c $(pkg-config --cflags --libs distrun)` gives a program
# that runs without LD_LIBRARY_PATH.
SYSTEM_PREFIXES := /usr /usr/local
IS_SYSTEM_PREFIX = $(filter $(patsubst %/,%,$(PREFIX)),$(SYSTEM_PREFIXES))
comma := ,
PC_RPATH = $(if $(IS_SYSTEM_PREFIX),,-Wl$(comma)-rpath$(comma)$${libdir} )
# distrun_torch also goes where Debian's /usr/bin/python3 looks (so that
# it imports under torchrun, mpirun and srun): /usr/lib/python3/dist-packages
# for PREFIX=/usr, else PREFIX/lib/python3.X/dist-packages (on sys.path
# for /usr/local; other prefixes: PYTHONPATH, or PYSITE=DIR).
PYTHON ?= /usr/bin/python3
PYVER = $(shell $(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null || echo 3)
PYSITE ?= $(if $(filter /usr,$(patsubst %/,%,$(PREFIX))),/usr/lib/python3/dist-packages,$(PREFIX)/lib/python$(PYVER)/dist-packages)
install: $(DISTRUN) $(LIB_A) $(LIB_SO) $(LINEBUF_SO)
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib \
		$(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/lib/pkgconfig \
		$(DESTDIR)$(PREFIX)/share/man/man1 $(DESTDIR)$(PREFIX)/share/man/man3
	install -m 755 $(DISTRUN) $(DESTDIR)$(PREFIX)/bin/distrun
	install -m 644 $(LIB_A) $(DESTDIR)$(PREFIX)/lib/libdistrun.a
	install -m 755 $(LIB_SO) $(DESTDIR)$(PREFIX)/lib/libdistrun.so.$(VERSION)
	ln -sf libdistrun.so.$(VERSION) $(DESTDIR)$(PREFIX)/lib/libdistrun.so.$(SOMAJOR)
	ln -sf libdistrun.so.$(SOMAJOR) $(DESTDIR)$(PREFIX)/lib/libdistrun.so
	install -m 644 runtime/distrun.h $(DESTDIR)$(PREFIX)/include/distrun.h
	sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@VERSION@|$(VERSION)|g' \
		-e 's|@RPATH@|$(PC_RPATH)|g' \
		runtime/distrun.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/distrun.pc
	install -m 644 man/distrun.1 $(DESTDIR)$(PREFIX)/share/man/man1/distrun.1
	install -d $(DESTDIR)$(PREFIX)/share/distrun/python $(DESTDIR)$(PREFIX)/lib/distrun
	install -m 755 $(LINEBUF_SO) $(DESTDIR)$(PREFIX)/lib/distrun/libdistrun-linebuf.so
	install -m 644 cmd/diag/sitecustomize.py $(DESTDIR)$(PREFIX)/share/distrun/python/sitecustomize.py
	install -m 644 cmd/job/preload.py $(DESTDIR)$(PREFIX)/share/distrun/python/preload.py
	install -d $(DESTDIR)$(PREFIX)/share/distrun/python/distrun_torch \
		$(DESTDIR)$(PYSITE)/distrun_torch $(DESTDIR)$(PREFIX)/share/man/man7
	install -m 644 $(TORCH_PY_SRC) $(DESTDIR)$(PREFIX)/share/distrun/python/distrun_torch/
	install -m 644 $(TORCH_PY_SRC) $(DESTDIR)$(PYSITE)/distrun_torch/
	install -m 644 man/distrun_torch.7 $(DESTDIR)$(PREFIX)/share/man/man7/distrun_torch.7
	install -d $(DESTDIR)$(PREFIX)/share/bash-completion/completions
	install -m 644 scripts/distrun.bash-completion \
		$(DESTDIR)$(PREFIX)/share/bash-completion/completions/distrun
	[ ! -f man/distrun.3 ] || install -m 644 man/distrun.3 $(DESTDIR)$(PREFIX)/share/man/man3/distrun.3
	$(if $(and $(IS_SYSTEM_PREFIX),$(if $(DESTDIR),,y)),-ldconfig)

clean:
	rm -rf build build-asan build-tsan build-fuzz

-include $(shell find $(B) -name '*.d' 2>/dev/null)

# proven: plain GNU Makefile.
#   make            library, CLI (build/proven), tests and tools
#   make test       set-up (Debian packages), build, run every test (T=name runs the tests whose
#                   program or case names contain `name`; FETCH=0 never downloads; tests/README.md)
#   make run        the main job: a short chat with a real model (a fixture without network)
#   make asan       the whole test suite under AddressSanitizer + UBSan (build-asan/)
#   make format     clang-format (.clang-format) over the C files changed since the last commit
#                   (FILES=... names others; make format-all: every file)
#   make fuzz       libFuzzer targets of the hostile-input parsers (clang)
# No -ffast-math anywhere: results must be reproducible bit for bit.
.DEFAULT_GOAL := all

CC      ?= cc
BUILD   ?= build
OPT     ?= -O2
SAN     ?=
CFLAGS_BASE = -std=c11 -g $(OPT) -Wall -Wextra -Werror -Wshadow -Wno-unused-parameter \
              -D_GNU_SOURCE -pthread -Iinclude -Isrc $(SAN) -MMD -MP
CFLAGS  ?=
LDLIBS  = -ljansson -lpcre2-8 -lutf8proc -lm -pthread
EV_LIBS = -lsqlite3 -lz
LDFLAGS += $(SAN)

# The library's folders, lowest layer first: a folder uses only the folders before it
# (README "Layout"); src/*.c (api.c, buildinfo.c) sit on top and are the only files that name
# a backend.
LIB_DIRS := base quant format text model engine cpu spec convert
LIB_SRC  := $(foreach d,$(LIB_DIRS),$(wildcard src/$(d)/*.c)) $(wildcard src/*.c)
CLI_SRC  := $(wildcard cli/*.c)
# The server is its own program (it links libmicrohttpd, which the library and the `proven` tool
# never do); `proven serve` runs it. The client library of its shared-memory protocol is small
# and separate (libproven_client.a: sockets, no engine).
SERVER_SRC := $(wildcard server/*.c)
CLIENT_SRC := $(wildcard client/*.c)
# The evidence system (receipts, ledger, courts, report): build/libevidence.a, linked by the
# `proven` program and its tests only; the library never links SQLite (check-layers.py).
EV_SRC   := $(wildcard evidence/*.c)
TEST_SRC := $(wildcard tests/test_*.c)
TOOL_SRC := $(wildcard tools/bench/*.c)

LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/%.o)
CLI_OBJ  := $(CLI_SRC:%.c=$(BUILD)/%.o)
SERVER_OBJ := $(SERVER_SRC:%.c=$(BUILD)/%.o)
CLIENT_OBJ := $(CLIENT_SRC:%.c=$(BUILD)/%.o)
EV_OBJ   := $(EV_SRC:%.c=$(BUILD)/%.o)
TESTS    := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
TOOLS    := $(TOOL_SRC:tools/bench/%.c=$(BUILD)/tools/%)

# CUDA backend (src/cuda/*.cu, sm_90a): built when nvcc is on PATH (CUDA=auto) or with CUDA=1;
# CUDA=0 leaves it out (src/cuda/stub.c answers "no CUDA backend"). With CUDA the binaries link
# the CUDA runtime and jansson/pcre2/utf8proc statically, so they run on a GPU machine that has
# only glibc and the driver. Its GPU tests are build/cuda/test_cuda and build/cuda/test_cuda_api,
# run by `make test-cuda` on a GPU machine (never by `make test`).
CUDA    ?= auto
NVCC    ?= nvcc
ifeq ($(CUDA),auto)
CUDA_ON := $(if $(shell command -v $(NVCC) 2>/dev/null),1,0)
else
CUDA_ON := $(CUDA)
endif
NVCCFLAGS_BASE = -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -lineinfo -fmad=false -Werror all-warnings \
                 -Xcompiler -Wall,-Werror -D_GNU_SOURCE -Iinclude -Isrc
ifeq ($(CUDA_ON),1)
CUDA_HOME   ?= $(patsubst %/bin/nvcc,%,$(realpath $(shell command -v $(NVCC) 2>/dev/null)))
NVCCFLAGS    = $(NVCCFLAGS_BASE) -MMD -MP
CU_SRC      := $(wildcard src/cuda/*.cu)
LIB_OBJ     += $(CU_SRC:%.cu=$(BUILD)/%.o)
CFLAGS_BASE += -DPV_HAVE_CUDA
EV_LIBS      = -Wl,-Bstatic -lsqlite3 -lz -Wl,-Bdynamic -ldl
LDLIBS       = -Wl,-Bstatic -ljansson -lpcre2-8 -lutf8proc -lstdc++ -Wl,-Bdynamic \
               -L$(CUDA_HOME)/lib64 -lcudart_static -ldl -lrt -lm -pthread
CUDA_TEST   := $(BUILD)/cuda/test_cuda $(BUILD)/cuda/test_cuda_api
TESTS       += $(BUILD)/tests/test_cuda_host
BUILD_NVCC   = $(strip $(NVCCFLAGS_BASE))
else
LIB_OBJ     += $(BUILD)/src/cuda/stub.o
CUDA_TEST   :=
BUILD_NVCC   = none
endif

.PHONY: all test run asan clean deps bench FORCE test-cuda tools format format-all fuzz
all: $(BUILD)/proven $(BUILD)/proven-server $(TESTS) $(CUDA_TEST) $(TOOLS)
tools: $(TOOLS)

$(BUILD)/src/cuda/%.o: src/cuda/%.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -c $< -o $@

# the archive is rebuilt when the CUDA setting changes (its object list does)
$(BUILD)/.cuda-$(CUDA_ON):
	@mkdir -p $(BUILD)
	@rm -f $(BUILD)/.cuda-*
	@touch $@

# Files named *_avx2.c hold the AVX2/FMA kernels, *_avx512.c the AVX-512 ones (VNNI, BF16 and
# VBMI included); they are chosen at run time (src/cpu/kernels.c checks the CPU).
$(BUILD)/src/%_avx2.o: CFLAGS_EXTRA = -mavx2 -mfma -mf16c
$(BUILD)/src/%_avx512.o: CFLAGS_EXTRA = -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni -mavx512bf16 \
                                        -mavx512vbmi -mavx2 -mfma -mf16c

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) $(CFLAGS_EXTRA) $(CFLAGS) -c $< -o $@

# The build identity (pv_build_info), rebuilt every time so the commit is current.
$(BUILD)/src/buildinfo.o: FORCE
$(BUILD)/src/buildinfo.o: CFLAGS_EXTRA = \
	-DPV_GIT_COMMIT='"$(shell git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)$(shell git diff --quiet HEAD 2>/dev/null || echo -dirty)"' \
	-DPV_BUILD_FLAGS='"$(strip $(CFLAGS_BASE) $(CFLAGS))"' -DPV_BUILD_NVCC_FLAGS='"$(BUILD_NVCC)"' \
	-DPV_BUILD_NVCC='"$(if $(filter 1,$(CUDA_ON)),$(shell $(NVCC) --version 2>/dev/null | tail -1),none)"'
FORCE:

$(BUILD)/libproven.a: $(LIB_OBJ) $(BUILD)/.cuda-$(CUDA_ON)
	@rm -f $@
	ar rcs $@ $(LIB_OBJ)

$(BUILD)/libevidence.a: $(EV_OBJ)
	@rm -f $@
	ar rcs $@ $(EV_OBJ)

# cli/ and evidence/ reach the evidence headers as "evidence/..." (-I.)
$(CLI_OBJ) $(EV_OBJ): CFLAGS_EXTRA = -I.

$(BUILD)/proven: $(CLI_OBJ) $(BUILD)/libevidence.a $(BUILD)/libproven.a $(BUILD)/libproven_client.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS) $(EV_LIBS)

# the evidence tests link the evidence library too (and run build/proven for the commands)
$(BUILD)/tests/test_evidence: tests/test_evidence.c $(BUILD)/libevidence.a $(BUILD)/libproven.a $(BUILD)/proven
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) $(CFLAGS) -I. -Wno-format-truncation $(LDFLAGS) -Itests -o $@ $< $(BUILD)/libevidence.a $(BUILD)/libproven.a $(LDLIBS) $(EV_LIBS)

$(BUILD)/libproven_client.a: $(CLIENT_OBJ)
	@rm -f $@
	ar rcs $@ $^

# libmicrohttpd is linked dynamically even in CUDA builds (its static form needs gnutls's).
$(BUILD)/proven-server: $(SERVER_OBJ) $(BUILD)/libproven.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS) -lmicrohttpd
# the chat page is assembled into page.o (.incbin)
$(BUILD)/server/page.o: server/page.html

# Test programs: one per tests/test_*.c; -MMD writes build/tests/test_x.d (included below).
$(BUILD)/tests/%: tests/%.c $(BUILD)/libproven.a $(BUILD)/libproven_client.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) $(CFLAGS) -Wno-format-truncation $(LDFLAGS) -Itests -o $@ $< $(BUILD)/libproven.a $(BUILD)/libproven_client.a $(LDLIBS)

# every allocator entry point of the library's code goes through test_noalloc's counters
$(BUILD)/tests/test_noalloc: LDFLAGS += -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc,--wrap=aligned_alloc,--wrap=posix_memalign

$(BUILD)/cuda/test_cuda: tests/cuda/test_cuda.c $(BUILD)/libproven.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) $(CFLAGS) -Wno-format-truncation $(LDFLAGS) -Itests -o $@ $< $(BUILD)/libproven.a $(LDLIBS)

$(BUILD)/cuda/test_cuda_api: tests/cuda/test_cuda_api.c $(BUILD)/libproven.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) $(CFLAGS) -Wno-format-truncation $(LDFLAGS) -Itests -o $@ $< $(BUILD)/libproven.a $(LDLIBS)

# The CUDA decoders on the host (no GPU): part of `make test` when the backend is built.
$(BUILD)/tests/test_cuda_host.o: tests/cuda/test_cuda_host.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -Xcompiler -ffp-contract=off -Itests -c $< -o $@
$(BUILD)/tests/test_cuda_host: $(BUILD)/tests/test_cuda_host.o $(BUILD)/libproven.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# Benchmark tools (not tests): kernel throughput on this machine.
$(BUILD)/tools/%: tools/bench/%.c $(BUILD)/libproven.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) $(CFLAGS) $(LDFLAGS) -o $@ $< $(BUILD)/libproven.a $(LDLIBS)

# The GPU tests (on a machine with a CUDA device; without one they fail, never pass silently).
# T=name runs the cases whose names contain it (test_cuda --list).
test-cuda:
	@[ "$(CUDA_ON)" = 1 ] || { echo "make test-cuda: this build has no CUDA backend (no nvcc; CUDA=$(CUDA))"; exit 1; }
	$(MAKE) $(CUDA_TEST)
	PV_TEST_FILTER='$(T)' ./$(BUILD)/cuda/test_cuda; a=$$?; PV_TEST_FILTER='$(T)' ./$(BUILD)/cuda/test_cuda_api; b=$$?; [ $$a = 0 ] && [ $$b = 0 ]

# Debian packages the build needs; installed only when missing.
deps:
	@./tools/install-deps.sh

# The real model for test_real (tools/get-model.sh; optional: without network, or with FETCH=0,
# test_real says it skipped). JOBS: test programs run in parallel. tests/README.md has more.
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
FETCH ?= 1
test: deps
	@if [ "$(FETCH)" = 0 ]; then echo "skip fetching the real model (FETCH=0): test_real runs only if it is already here"; \
	elif ! tools/get-model.sh qwen2.5-coder-0.5b >/dev/null 2>&1; then \
		echo "skip fetching the real model: tools/get-model.sh failed (no network?): test_real will skip"; fi
	$(MAKE) all
	@./tools/check-layers.py
	JOBS=$(JOBS) ./tests/run.sh $(BUILD) $(T)

run: deps
	$(MAKE) $(BUILD)/proven
	./tools/run-main.sh $(BUILD)

asan: deps
	$(MAKE) BUILD=build-asan OPT=-O1 SAN="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all" CUDA=0 all
	ASAN_OPTIONS=detect_leaks=1 JOBS=$(JOBS) ./tests/run.sh build-asan $(T)

bench: deps
	$(MAKE) $(BUILD)/proven
	./$(BUILD)/proven bench --model tests/fixtures/qwen3_5_moe

# make format: the C files changed since the last commit (or FILES=...); make format-all: every one.
ALL_C_SRC   = $(wildcard include/*.h src/*.c src/*/*.[ch] cli/*.[ch] server/*.[ch] client/*.[ch] evidence/*.[ch] tests/*.[ch] tests/cuda/*.c fuzz/*.c tools/bench/*.c)
CHANGED_SRC = $(filter $(ALL_C_SRC),$(shell git diff --name-only HEAD 2>/dev/null))
format:
	@files="$(or $(FILES),$(CHANGED_SRC))"; [ -z "$$files" ] && echo "make format: no changed C files" || clang-format -i --style=file $$files
format-all:
	clang-format -i --style=file $(ALL_C_SRC)

clean:
	rm -rf build build-asan build-fuzz

-include $(LIB_OBJ:.o=.d) $(CLI_OBJ:.o=.d) $(SERVER_OBJ:.o=.d) $(CLIENT_OBJ:.o=.d) $(EV_OBJ:.o=.d) $(TESTS:=.d) $(TOOLS:=.d) $(CUDA_TEST:%=%.d) \
         $(if $(CUDA_TEST),$(BUILD)/tests/test_cuda_host.d)

# libFuzzer targets for the hostile inputs (clang only): the parsers, the tokenizer, the chat
# renderer and parser, the sampler, the server's requests (HTTP JSON, socket messages); see fuzz/*.c for how to run
# them. They link the parsing layers of the library (the folders up to model/) built with the
# fuzzer's instrumentation into build-fuzz/libparse.a; the linker takes only what each target uses.
FUZZ_CC     ?= clang
FUZZ_BUILD  ?= build-fuzz
FUZZ_FLAGS   = -std=c11 -g -O1 -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer \
               -Wall -Wextra -Werror -Wshadow -Wno-unused-parameter -D_GNU_SOURCE -pthread -Iinclude -Isrc -MMD -MP
FUZZ_DIRS   := base quant format text model
FUZZ_OBJ    := $(patsubst %.c,$(FUZZ_BUILD)/%.o,$(foreach d,$(FUZZ_DIRS),$(wildcard src/$(d)/*.c)))
FUZZ_BIN    := $(patsubst fuzz/%.c,$(FUZZ_BUILD)/%,$(wildcard fuzz/fuzz_*.c))
fuzz: $(FUZZ_BIN)
$(FUZZ_BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_FLAGS) -c $< -o $@
$(FUZZ_BUILD)/libparse.a: $(FUZZ_OBJ)
	@rm -f $@
	ar rcs $@ $^
$(FUZZ_BUILD)/fuzz_%: fuzz/fuzz_%.c $(FUZZ_BUILD)/libparse.a
	$(FUZZ_CC) $(subst fuzzer-no-link,fuzzer,$(FUZZ_FLAGS)) -o $@ $< $(FUZZ_BUILD)/libparse.a -ljansson -lpcre2-8 -lutf8proc -lm
# the server's request parser (a program's file, not the library's) is built into its target
$(FUZZ_BUILD)/fuzz_request: fuzz/fuzz_request.c server/request.c $(FUZZ_BUILD)/libparse.a
	$(FUZZ_CC) $(subst fuzzer-no-link,fuzzer,$(FUZZ_FLAGS)) -o $@ fuzz/fuzz_request.c server/request.c $(FUZZ_BUILD)/libparse.a -ljansson -lpcre2-8 -lutf8proc -lm
# the socket protocol's request checks (server/wire.c): pure, no socket
$(FUZZ_BUILD)/fuzz_wire: fuzz/fuzz_wire.c server/wire.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(subst fuzzer-no-link,fuzzer,$(FUZZ_FLAGS)) -o $@ fuzz/fuzz_wire.c server/wire.c -lm
-include $(FUZZ_OBJ:.o=.d) $(FUZZ_BIN:=.d)

# proven: plain GNU Makefile.
#   make            library, CLI (build/proven) and tests
#   make test       set-up (Debian packages), build, run every test
#   make run        the main job: a short generation on a committed fixture model
#   make asan       the whole test suite under AddressSanitizer + UBSan (build-asan/)
# No -ffast-math anywhere: results must be reproducible bit for bit.

CC      ?= cc
BUILD   ?= build
OPT     ?= -O2
SAN     ?=
CFLAGS_BASE = -std=c11 -g $(OPT) -Wall -Wextra -Werror -Wshadow -Wno-unused-parameter \
              -D_GNU_SOURCE -pthread -Iinclude -Isrc $(SAN) -MMD -MP
CFLAGS  ?=
LDLIBS  = -ljansson -lpcre2-8 -lutf8proc -lm -pthread
LDFLAGS += $(SAN)

LIB_SRC  := $(wildcard src/*.c)
CLI_SRC  := $(wildcard cli/*.c)
TEST_SRC := $(filter-out tests/test_cuda.c,$(wildcard tests/test_*.c))

LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/%.o)
CLI_OBJ  := $(CLI_SRC:%.c=$(BUILD)/%.o)
TESTS    := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)

# CUDA backend (src/cuda/*.cu, sm_90a): built when nvcc is on PATH (CUDA=auto) or with CUDA=1;
# CUDA=0 leaves it out (src/cuda/stub.c answers "no CUDA backend"). With CUDA the binaries link
# the CUDA runtime and jansson/pcre2/utf8proc statically, so they run on a GPU machine that has
# only glibc and the driver. Its tests are one program, build/cuda/test_cuda, run by
# `make test-cuda` on a GPU machine (never by `make test`).
CUDA    ?= auto
NVCC    ?= nvcc
ifeq ($(CUDA),auto)
CUDA_ON := $(if $(shell command -v $(NVCC) 2>/dev/null),1,0)
else
CUDA_ON := $(CUDA)
endif
ifeq ($(CUDA_ON),1)
CUDA_HOME   ?= $(patsubst %/bin/nvcc,%,$(realpath $(shell command -v $(NVCC) 2>/dev/null)))
NVCCFLAGS    = -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -lineinfo -fmad=false -Werror all-warnings \
               -Xcompiler -Wall,-Werror -D_GNU_SOURCE -Iinclude -Isrc -MMD -MP
CU_SRC      := $(wildcard src/cuda/*.cu)
LIB_OBJ     += $(CU_SRC:%.cu=$(BUILD)/%.o)
CFLAGS_BASE += -DPV_HAVE_CUDA
LDLIBS       = -Wl,-Bstatic -ljansson -lpcre2-8 -lutf8proc -lstdc++ -Wl,-Bdynamic \
               -L$(CUDA_HOME)/lib64 -lcudart_static -ldl -lrt -lm -pthread
CUDA_TEST   := $(BUILD)/cuda/test_cuda
TESTS       += $(BUILD)/tests/test_cuda_host
else
LIB_OBJ     += $(BUILD)/src/cuda/stub.o
CUDA_TEST   :=
endif

$(BUILD)/src/cuda/%.o: src/cuda/%.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -c $< -o $@

# the archive is rebuilt when the CUDA setting changes (its object list does)
$(BUILD)/.cuda-$(CUDA_ON):
	@mkdir -p $(BUILD)
	@rm -f $(BUILD)/.cuda-*
	@touch $@

# Files named *_avx2.c hold the AVX2/FMA kernels; they are chosen at run time.
$(BUILD)/src/%_avx2.o: CFLAGS_EXTRA = -mavx2 -mfma -mf16c

.PHONY: all test run asan clean deps check-deps bench FORCE test-cuda
all: $(BUILD)/proven $(TESTS) $(CUDA_TEST)

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) $(CFLAGS_EXTRA) $(CFLAGS) -c $< -o $@

# The build identity baked into the CLI (rebuilt every time so the commit is current).
$(BUILD)/cli/buildinfo.o: FORCE
$(BUILD)/cli/buildinfo.o: CFLAGS_EXTRA = -DPV_GIT_COMMIT='"$(shell git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)$(shell git diff --quiet HEAD 2>/dev/null || echo -dirty)"' \
	-DPV_BUILD_FLAGS='"$(strip $(CFLAGS_BASE) $(CFLAGS))"'
FORCE:

$(BUILD)/libproven.a: $(LIB_OBJ) $(BUILD)/.cuda-$(CUDA_ON)
	@rm -f $@
	ar rcs $@ $(LIB_OBJ)

$(BUILD)/proven: $(CLI_OBJ) $(BUILD)/libproven.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/tests/%: tests/%.c $(BUILD)/libproven.a tests/harness.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) $(CFLAGS) -Wno-format-truncation $(LDFLAGS) -Itests -o $@ $< $(BUILD)/libproven.a $(LDLIBS)

$(BUILD)/cuda/test_cuda: tests/test_cuda.c $(BUILD)/libproven.a tests/harness.h tests/fixture.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) $(CFLAGS) -Wno-format-truncation $(LDFLAGS) -Itests -o $@ $< $(BUILD)/libproven.a $(LDLIBS)

# The CUDA decoders on the host (no GPU): part of `make test` when the backend is built.
$(BUILD)/tests/test_cuda_host.o: tools/cuda/test_cuda_host.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -Xcompiler -ffp-contract=off -Itests -c $< -o $@
$(BUILD)/tests/test_cuda_host: $(BUILD)/tests/test_cuda_host.o $(BUILD)/libproven.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# The GPU tests (on a machine with a CUDA device; without one they fail, never pass silently).
test-cuda:
	@[ "$(CUDA_ON)" = 1 ] || { echo "make test-cuda: this build has no CUDA backend (no nvcc; CUDA=$(CUDA))"; exit 1; }
	$(MAKE) $(BUILD)/cuda/test_cuda
	./$(BUILD)/cuda/test_cuda

# Debian packages the build needs; installed only when missing.
deps:
	@./tools/install-deps.sh

test: deps
	@# the real model for test_real (a few seconds of use); without network the test says so
	-@tools/get-model.sh qwen2.5-coder-0.5b >/dev/null
	$(MAKE) all
	./tests/run.sh $(BUILD)

run: deps
	$(MAKE) $(BUILD)/proven
	./tools/run-main.sh $(BUILD)

asan: deps
	$(MAKE) BUILD=build-asan OPT=-O1 SAN="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all" CUDA=0 all
	ASAN_OPTIONS=detect_leaks=1 ./tests/run.sh build-asan

bench: deps
	$(MAKE) $(BUILD)/proven
	./$(BUILD)/proven bench --model tests/fixtures/qwen3_5_moe

clean:
	rm -rf build build-asan

-include $(LIB_OBJ:.o=.d) $(CLI_OBJ:.o=.d) $(CUDA_TEST:%=%.d) $(if $(CUDA_TEST),$(BUILD)/tests/test_cuda_host.d)

# libFuzzer targets for the hostile-input parsers (clang only); see fuzz/*.c for how to run them.
FUZZ_CC    ?= clang
FUZZ_FLAGS  = -std=c11 -g -O1 -fsanitize=fuzzer,address,undefined -fno-omit-frame-pointer \
              -Wall -Wextra -Werror -Wshadow -Wno-unused-parameter -D_GNU_SOURCE -Iinclude -Isrc
FUZZ_ST_SRC  = fuzz/fuzz_safetensors.c src/safetensors.c src/tensor.c src/util.c
FUZZ_CFG_SRC = fuzz/fuzz_config.c src/config.c src/safetensors.c src/tensor.c src/util.c
FUZZ_GGUF_SRC = fuzz/fuzz_gguf.c src/gguf.c src/tensor.c src/util.c
FUZZ_TOK_SRC = fuzz/fuzz_tokenizer.c src/tokenizer.c src/util.c
.PHONY: fuzz
fuzz: $(BUILD)/fuzz/fuzz_safetensors $(BUILD)/fuzz/fuzz_config $(BUILD)/fuzz/fuzz_gguf $(BUILD)/fuzz/fuzz_tokenizer
$(BUILD)/fuzz/fuzz_tokenizer: $(FUZZ_TOK_SRC) src/tokenizer.h src/util.h
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_FLAGS) -o $@ $(FUZZ_TOK_SRC) -ljansson -lpcre2-8 -lutf8proc -lm
$(BUILD)/fuzz/fuzz_safetensors: $(FUZZ_ST_SRC) src/safetensors.h src/tensor.h src/util.h
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_FLAGS) -o $@ $(FUZZ_ST_SRC) -ljansson -lm
$(BUILD)/fuzz/fuzz_config: $(FUZZ_CFG_SRC) src/config.h src/model.h src/safetensors.h src/util.h
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_FLAGS) -o $@ $(FUZZ_CFG_SRC) -ljansson -lm
$(BUILD)/fuzz/fuzz_gguf: $(FUZZ_GGUF_SRC) src/gguf.h src/quant.h src/tensor.h src/util.h
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_FLAGS) -o $@ $(FUZZ_GGUF_SRC) -lm

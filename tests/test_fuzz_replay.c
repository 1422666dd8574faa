/*
 * test_fuzz_replay.c: every input the fuzzers found (fuzz/seeds/<target>/, grown by each run that
 * found new coverage or a crash) replayed through the very same target code, built as a plain
 * program: what a fuzzer proved once stays proved on every `make test` (and under make asan),
 * without clang or libFuzzer. A target traps on a broken invariant; the handler names the input.
 */
#include <dirent.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

/* each target under its own name (their statics too) */
#define LLVMFuzzerTestOneInput fuzz_chat_one
#define sink sink_chat
#include "../fuzz/fuzz_chat.c"
#undef sink
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_sampler_one
#include "../fuzz/fuzz_sampler.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_tokenizer_one
#include "../fuzz/fuzz_tokenizer.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_config_one
#include "../fuzz/fuzz_config.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_gguf_one
#define sink sink_gguf
#include "../fuzz/fuzz_gguf.c"
#undef sink
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_safetensors_one
#include "../fuzz/fuzz_safetensors.c"
#undef LLVMFuzzerTestOneInput
/* the server's parsers of untrusted bytes are program files, not the library's: their sources
 * come in here with the targets (each under its own names) */
#define LLVMFuzzerTestOneInput fuzz_request_one
#define check check_request
#include "../fuzz/fuzz_request.c"
#undef check
#undef LLVMFuzzerTestOneInput
#define bad bad_request
#include "../server/request.c"
#undef bad
#define LLVMFuzzerTestOneInput fuzz_wire_one
#define check check_wire
#include "../fuzz/fuzz_wire.c"
#undef check
#undef LLVMFuzzerTestOneInput
#define bad bad_wire
#include "../server/wire.c"
#undef bad

static char current[1024]; /* the input being replayed, for the crash handler */

static void on_crash(int sig)
{
	static const char a[] = "test_fuzz_replay: crashed (signal) on ";
	if (write(2, a, sizeof a - 1) < 0 || write(2, current, strlen(current)) < 0 || write(2, "\n", 1) < 0) {}
	_exit(128 + sig);
}

/* Every file of fuzz/seeds/dir through one(); the count. */
static int replay(const char* dir, int (*one)(const uint8_t*, size_t))
{
	char path[512];
	snprintf(path, sizeof path, "fuzz/seeds/%s", dir);
	DIR* d = opendir(path);
	CHECK(d != NULL, "no corpus at %s", path);
	int n = 0;
	for (struct dirent* e; d && (e = readdir(d));) {
		if (e->d_name[0] == '.') continue;
		snprintf(current, sizeof current, "%s/%s", path, e->d_name);
		FILE* f = fopen(current, "rb");
		if (!f) continue;
		uint8_t* buf = malloc(1 << 20);
		size_t len = fread(buf, 1, 1 << 20, f);
		fclose(f);
		one(buf, len);
		free(buf);
		n++;
	}
	if (d) closedir(d);
	current[0] = 0;
	return n;
}

TEST_CASE(chat) { CHECK(replay("chat", fuzz_chat_one) > 50, "chat corpus"); }
TEST_CASE(sampler) { CHECK(replay("sampler", fuzz_sampler_one) > 5, "sampler corpus"); }
TEST_CASE(tokenizer) { CHECK(replay("tokenizer", fuzz_tokenizer_one) > 50, "tokenizer corpus"); }
TEST_CASE(config) { CHECK(replay("config", fuzz_config_one) > 20, "config corpus"); }
TEST_CASE(gguf) { CHECK(replay("gguf", fuzz_gguf_one) > 20, "gguf corpus"); }
TEST_CASE(safetensors) { CHECK(replay("safetensors", fuzz_safetensors_one) > 20, "safetensors corpus"); }
TEST_CASE(request) { CHECK(replay("request", fuzz_request_one) > 50, "server request corpus"); }
TEST_CASE(wire) { CHECK(replay("wire", fuzz_wire_one) > 20, "socket protocol corpus"); }

static int setup(void)
{
	signal(SIGILL, on_crash); /* __builtin_trap */
	signal(SIGSEGV, on_crash);
	signal(SIGABRT, on_crash);
	signal(SIGBUS, on_crash);
	signal(SIGFPE, on_crash);
	return 0;
}

int main(int argc, char** argv)
{
	return t_main(argc, argv, "test_fuzz_replay", setup, NULL);
}

/*
 * usage.c: each command's usage (`proven CMD --help`, exit 0) and the build identity
 * (`proven --version`). convert and synth keep theirs beside their options.
 */
#include "cli.h"
#include "proven_dev.h"

#include <stdio.h>
#include <string.h>

static const char sampling[] =
        "sampling and speculation:\n"
        "  --temp T --top-k K --top-p P --min-p P --seed S   sampling (greedy at --temp 0, the default of run and generate)\n"
        "  --draft ngram|mtp|cascade:PATH|PATH               speculate: n-gram lookup, the MTP head, a draft model\n"
        "  --draft-max K  --draft-fixed  --ngram-min N  --ngram-max N  --rollback auto|snapshot|replay\n"
        "  speculation never changes the tokens: they are those of plain decoding\n"
        "  --cache-type f32|f16|bf16|q8_0                    KV cache type (-ctk/-ctv alike; default f32)\n";

static const struct {
	const char* cmd;
	const char* text;
	int sampling;
} usages[] = {
	{ "info",
	  "usage: proven info --model PATH [--ctx N] [--check]\n"
	  "  what a model is: architecture, layers, parameters, weights, the memory of a session\n"
	  "  --model PATH  a GGUF file or a Hugging Face directory (config.json + safetensors)\n"
	  "  --ctx N       the context the session memory is given for (default min(max context, 4096))\n"
	  "  --check       read every weight: list the tensors holding NaN or infinity (exit 1 if any)\n"
	  "  --cache-type T  the KV cache type the session memory is given for (f32, f16, bf16, q8_0)\n",
	  0 },
	{ "generate",
	  "usage: proven generate --model PATH --prompt-ids 1,2,3 [--max-tokens N] [--stop-ids a,b] [--dump-logits FILE]\n"
	  "                       [--spec-stats FILE] [--threads N] [--ctx N] [--backend cpu|cuda] [sampling]\n"
	  "  decodes from token ids and prints the generated ids, comma-separated, on one line\n"
	  "  --max-tokens N      tokens to generate (default 16)\n"
	  "  --stop-ids a,b      stop after any of these ids\n"
	  "  --dump-logits FILE  the teacher-forced logits of prompt + generated tokens, a safetensors file\n"
	  "                      with one F32 tensor \"logits\" [T, vocab]\n"
	  "  --spec-stats FILE   speculation counters as JSON\n",
	  1 },
	{ "run",
	  "usage: proven run --model PATH -p TEXT [--max-tokens N] [--no-special] [--threads N] [--ctx N]\n"
	  "                  [--backend cpu|cuda] [sampling]\n"
	  "  raw completion of TEXT, streamed to stdout\n"
	  "  -p, --prompt TEXT     the prompt (special tokens such as <|im_start|> are parsed unless --no-special)\n"
	  "  -n, --max-tokens N    tokens to generate (default 256)\n"
	  "  -t, --threads N       CPU threads (default all cores)\n"
	  "  -c, --ctx N           context length (default min(max context, 4096))\n",
	  1 },
	{ "chat",
	  "usage: proven chat --model PATH [--system TEXT] [--no-thinking] [--hide-thinking] [--dialect D]\n"
	  "                   [--max-tokens N] [--threads N] [--ctx N] [--backend cpu|cuda] [sampling]\n"
	  "  an interactive chat in the model's own chat format: one user turn per line of stdin\n"
	  "  (text that is not UTF-8 is repaired with U+FFFD, as the tokenizer does)\n"
	  "  --system TEXT     the system message\n"
	  "  --no-thinking     enable_thinking=false (Qwen3, Qwen3.5)\n"
	  "  --hide-thinking   do not print the reasoning (it is shown dimmed otherwise)\n"
	  "  --dialect D       qwen3 | qwen3.5 | qwen2.5, when the template is not recognised\n"
	  "  --max-tokens N    per answer (default 2048); sampling defaults: --temp 0.7 --top-p 0.8 --top-k 20\n",
	  1 },
	{ "perplexity",
	  "usage: proven perplexity --model PATH --file TEXT [--ctx N] [--chunks N] [--threads N] [--backend cpu|cuda]\n"
	  "  perplexity of a text file (a regular file or a pipe, at most 1 GiB) as llama.cpp computes it: chunks of\n"
	  "  --ctx tokens (default 512), each from an empty context, the second half of each scored\n"
	  "  --chunks N   at most N chunks\n"
	  "  --cache-type f32|f16|bf16|q8_0   KV cache type (-ctk/-ctv alike; default f32)\n",
	  0 },
	{ "bench",
	  "usage: proven bench --model PATH [--pp N] [--tg N] [--depth N] [--reps N] [--threads N] [--ctx N]\n"
	  "                    [--backend cpu|cuda] [--profile] [--json-only] [-o md|json|jsonl|csv]\n"
	  "       proven bench --backend cuda --membw\n"
	  "       proven bench spec --model PATH --cases FILE.jsonl --draft D [--per-class N] [--max-tokens N]\n"
	  "                         [--reps N] [--class C] [--trace-out T.jsonl] [--greedy] [speculation options]\n"
	  "  prompt processing (--pp tokens, default 128) and decode (--tg tokens, default 32, timed from --depth)\n"
	  "  speed at a context depth, as a table and one JSON line with the build identity; -o json|jsonl|csv:\n"
	  "  llama-bench's records and field names only. bench spec: per prompt class, plain against speculative\n"
	  "  decoding in alternating order, decode-only and end-to-end speedups, acceptance; --trace-out records\n"
	  "  the acceptance per step, --draft replay:T.jsonl replays it on another model (a synth shape)\n"
	  "  --cache-type f32|f16|bf16|q8_0   KV cache type (-ctk/-ctv alike; default f32)\n"
	  "  --profile    where the time of a decode token and of a prompt goes, per op (CPU and CUDA)\n",
	  0 },
	{ "template",
	  "usage: proven template --tokenizer PATH --messages FILE.json [--tools FILE.json] [--dialect D]\n"
	  "                       [--generation-prompt] [--no-thinking]\n"
	  "  the chat prompt, exactly as the model's template renders it (no newline added)\n"
	  "  --tokenizer PATH   a model directory, a tokenizer_config.json, a .jinja file or a GGUF\n"
	  "  --messages FILE    a JSON array of messages, or a request body {\"messages\": [...], \"tools\": [...]}\n"
	  "  --dialect D        qwen3 | qwen3.5 | qwen2.5 (instead of recognising the template)\n",
	  0 },
	{ "tokenize",
	  "usage: proven tokenize --tokenizer PATH [--jsonl] [--no-special]\n"
	  "  text on stdin -> token ids, comma-separated, on stdout\n"
	  "  --tokenizer PATH  a tokenizer.json, a directory holding one, or a GGUF file\n"
	  "  --jsonl           each input line is a JSON string; one line of ids per line\n"
	  "  --no-special      tokenize the text of special tokens (<|im_start|>...) as ordinary text\n",
	  0 },
	{ "court",
	  "usage: proven court spec --model PATH --cases FILE.jsonl [--draft D] [--max-tokens N] [--class C]\n"
	  "                         [--limit N] [--threads N] [--backend cpu|cuda] [speculation options]\n"
	  "  every case runs plain and speculative; the tokens must be identical (exit 1 on a mismatch)\n"
	  "  a case: {\"id\", \"class\", \"text\" and/or \"ids\", \"max_tokens\", \"temperature\", \"top_k\", \"top_p\", \"seed\"}\n",
	  1 },
};

int cli_usage(const char* cmd, FILE* f)
{
	for (size_t i = 0; i < sizeof usages / sizeof usages[0]; i++) {
		if (strcmp(usages[i].cmd, cmd)) continue;
		fputs(usages[i].text, f);
		if (usages[i].sampling) fputs(sampling, f);
		return 0;
	}
	return -1;
}

int cli_is_help(const char* a) { return !strcmp(a, "-h") || !strcmp(a, "--help"); }

void cli_version(FILE* f)
{
	const struct pv_build_info* b = pv_build_info();
	fprintf(f,
	        "proven %s\n"
	        "compiler  %s\n"
	        "backends  %s\n"
	        "cpu       %s\n"
	        "cflags    %s\n"
	        "nvcc      %s\n"
	        "nvccflags %s\n",
	        b->commit, b->compiler, b->backends, b->cpu_isa, b->cflags, b->nvcc, b->nvcc_flags);
}

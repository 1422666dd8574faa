#!/bin/sh
# The main job for now (issue 2): a short greedy generation on a committed fixture model,
# with its model summary. A later issue replaces it with a real Qwen model.
set -e
BUILD=${1:-build}
MODEL=tests/fixtures/qwen3_5_moe
[ -d "$MODEL" ] || MODEL=$(dirname "$(ls tests/fixtures/*/config.json | head -1)")
echo "== proven info --model $MODEL" >&2
"$BUILD/proven" info --model "$MODEL"
PROMPT=$(python3 -c 'import json,sys; print(",".join(map(str, json.load(open(sys.argv[1]))["cases"][0]["prompt"][:48])))' "$MODEL/reference.json" 2>/dev/null || echo 1,2,3,4,5,6,7,8)
echo "== proven generate --model $MODEL --prompt-ids <48 ids> --max-tokens 24" >&2
"$BUILD/proven" generate --model "$MODEL" --prompt-ids "$PROMPT" --max-tokens 24

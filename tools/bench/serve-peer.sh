#!/bin/sh
# proven-server against llama-server on the same GGUF (tools/bench/serve_bench.py), under the
# machine's benchmark lock (/tmp/bench.lock, shared with every other benchmark on this machine)
# so that two benchmarks never overlap. llama.cpp is not part of this repository: build it
# yourself (the CPU peer) and pass its llama-server, or put it at the default path below.
#
#   tools/bench/serve-peer.sh MODEL.gguf [OUT.md] [extra serve_bench.py options]
#   LLAMA_SERVER=/path/to/llama-server tools/bench/serve-peer.sh ~/.cache/proven/qwen2.5-coder-0.5b.gguf
set -eu
MODEL=$1
shift
OUT=
if [ $# -gt 0 ] && [ "${1#--}" = "$1" ]; then OUT=$1; shift; fi
LS=${LLAMA_SERVER:-$HOME/.cache/proven-peer/build/bin/llama-server}
B=${BUILD:-build}
here=$(dirname "$0")
exec flock /tmp/bench.lock python3 "$here/serve_bench.py" --model "$MODEL" --proven-server "$B/proven-server" \
	--llama-server "$LS" ${OUT:+--out "$OUT"} "$@"

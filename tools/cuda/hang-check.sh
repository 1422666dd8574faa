#!/bin/bash
# hang-check.sh: one short device call after the 9B shape's 16-row step stopped answering
# (2026-12-02). Each run is its own process under a timeout, and the next one starts only when
# the GPU has no compute process left (a killed process whose kernel still spins would otherwise
# slow every later run and hide which switch matters). First the continuous-batching bench on a
# small dense shape, then the 9B shape cut to 4 layers at 8 and 16 rows per GEMV walk.
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/pv-hang-check}
mkdir -p "$OUT"
B=build
W=/dev/shm/pv-hang
mkdir -p "$W"
say() { printf '%s\n' "$*" | tee -a "$OUT/summary.txt"; }
gpu_free() { # waits up to 15 s for no compute process on the GPU; says what it saw
	for i in $(seq 15); do
		[ -z "$(nvidia-smi --query-compute-apps=pid --format=csv,noheader 2>/dev/null)" ] && return 0
		sleep 1
	done
	say "   GPU still busy after 15 s: $(nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader | tr '\n' ' ')"
}
run() { # label timeout env... -- proven args...
	local label=$1 to=$2
	shift 2
	gpu_free
	local t=$(date +%s)
	env "$@" >"$OUT/.o" 2>"$OUT/.e" &
	local pid=$!
	( sleep "$to"; kill -9 $pid 2>/dev/null ) &
	local killer=$!
	wait $pid
	local rc=$?
	kill $killer 2>/dev/null
	cat "$OUT/.o" >>"$OUT/runs.jsonl"
	say "$label: rc $rc ($(($(date +%s) - t)) s) $(grep -o '"pp_tok_s":[0-9.]*\|"agg_tok_s":[0-9.]*\|"seq_tok_s":[0-9.]*\|"alone_agg_tok_s":[0-9.]*\|"speedup":[0-9.]*\|"ids_equal":[a-z0-9]*\|"batched_share":[0-9.]*' "$OUT/.o" | tr '\n' ' ') $(tail -c 200 "$OUT/.e" | tr '\n' ' ')"
}
say "== $($B/proven --version | head -1)"
m=$W/q17.gguf
$B/proven synth --preset qwen3-1.7b --type bf16 --out "$m" --quiet >/dev/null 2>&1
for n in 1 4 16; do
	run "parallel $n Qwen3-1.7B BF16 gemv_shared=2" 30 PV_CUDA_GEMV_SHARED=2 $B/proven bench --backend cuda --model "$m" \
		--parallel $n --tg 32 --pp 16 --json-only
done
rm -f "$m"
m=$W/q9-4l.gguf
$B/proven synth --preset qwen3.5-9b --type bf16 --layers 4 --out "$m" --quiet >/dev/null 2>&1
for v in "8 1" "16 1" "16 0" "16 2"; do
	set -- $v
	run "9B 4 layers rows $1 gemv_shared=$2" 20 PV_CUDA_GEMV_SHARED=$2 $B/proven bench --backend cuda --model "$m" --pp $1 \
		--tg 4 --depth 512 --reps 1 --json-only
done
rm -f "$m"
say "== done"

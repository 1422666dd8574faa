#!/bin/bash
# batch-check.sh: continuous batching on the GPU (src/cuda/many.cu), one device call, from the
# repo root, with binaries built on the development machine (build/proven,
# build/cuda/test_cuda_api). Logs and JSON lines go to $OUT; a compact summary prints last.
#
#   tools/cuda/batch-check.sh        the API's `many` part (every fixture: batched rows bitwise
#                                    their own steps), then `proven bench --parallel N` (N = 1, 4,
#                                    16; tg 64 after pp 32; together, then alone) on a Qwen3-8B
#                                    BF16 synth file with the default GEMV walk, the in-place walk
#                                    (cuda.gemv_shared=2) and without the multi-session graphs
#   tools/cuda/batch-check.sh test   the API's `many` part only
#
# The synth file (random weights with the published shape) goes to /dev/shm when it has room and
# is deleted at the end. Each bench line is one JSON object in $OUT/parallel.jsonl (agg_tok_s,
# seq_tok_s, alone_agg_tok_s, speedup, ids_equal, batched_share, the knobs in effect).
set -u
cd "$(dirname "$0")/../.." || exit 2
OUT=${OUT:-/tmp/pv-batch-check}
mkdir -p "$OUT"
MODE=${1:-full}
B=${B:-build}
T0=$(date +%s)
BUDGET=${PV_BUDGET_S:-540}
JSON=$OUT/parallel.jsonl
LOG=$OUT/bench.log
: >"$JSON"
: >"$LOG"
: >"$OUT/summary.txt"
status=0
say() { printf '%s\n' "$*" | tee -a "$OUT/summary.txt"; }
elapsed() { echo $(($(date +%s) - T0)); }

for f in $B/proven $B/cuda/test_cuda_api; do
	[ -x "$f" ] || { echo "batch-check: $f missing: build with nvcc here (make), carry build/proven and build/cuda"; exit 2; }
done

# 1. the API: every fixture's batched rows against their own steps (memcmp), the fallbacks
t=$(date +%s)
PV_CUDA_API_ONLY=many $B/cuda/test_cuda_api >"$OUT/test_many.log" 2>&1
rc=$?
[ $rc = 0 ] || status=1
say "== test_cuda_api many: rc $rc, $(grep -E '^test_cuda_api: [0-9]+ passed' "$OUT/test_many.log" | tail -1) ($(($(date +%s) - t)) s)"
grep -E '^FAIL' "$OUT/test_many.log" | head -12 | tee -a "$OUT/summary.txt"
[ "$MODE" = test ] && exit "$status"

# 2. aggregate decode throughput on the 8B shape
W=/tmp/pv-models
if [ -d /dev/shm ] && [ "$(df -Pk /dev/shm | awk 'NR==2 {print $4}')" -gt 40000000 ]; then W=/dev/shm/pv-models; fi
mkdir -p "$W"
M=$W/qwen3-8b-bf16.gguf
trap 'rm -f "$M"' EXIT
if ! $B/proven synth --preset qwen3-8b --type bf16 --out "$M" >>"$LOG" 2>&1; then
	say "== synth qwen3-8b bf16 FAILED: $(tail -2 "$LOG" | tr '\n' ' ')"
	exit 1
fi
par() { # label env-assignments N
	local label=$1 envs=$2 n=$3
	if [ $(($(elapsed) + 60)) -gt "$BUDGET" ]; then
		say "== skipped $label N=$n: $(elapsed) s elapsed (budget $BUDGET s)"
		return
	fi
	local t=$(date +%s)
	if env $envs $B/proven bench --backend cuda --model "$M" --parallel "$n" --pp 32 --tg 64 --json-only >"$OUT/.b" 2>>"$LOG"; then
		sed "s/^{/{\"name\":\"$label\",/" "$OUT/.b" | grep '^{' >>"$JSON"
		say "== $label N=$n: $(grep -o '"agg_tok_s":[0-9.]*\|"alone_agg_tok_s":[0-9.]*\|"speedup":[0-9.]*\|"ids_equal":[a-z]*\|"batched_share":[0-9.]*' "$OUT/.b" | tr '\n' ' ')($(($(date +%s) - t)) s)"
		grep -q '"ids_equal":true' "$OUT/.b" || status=1
	else
		status=1
		say "== $label N=$n FAILED: $(tail -2 "$LOG" | tr '\n' ' ')"
	fi
	rm -f "$OUT/.b"
}
for n in 1 4 16; do par default "" $n; done
for n in 4 16; do par gemv_shared=2 "PV_CUDA_GEMV_SHARED=2" $n; done
par batch_graphs=0 "PV_CUDA_BATCH_GRAPHS=0" 16
par "gemv_shared=2 N=32" "PV_CUDA_GEMV_SHARED=2" 32
say "== done in $(elapsed) s, status $status; JSON lines: $JSON"
exit "$status"

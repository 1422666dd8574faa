#!/bin/bash
# device-check.sh: one device call's worth of CUDA checks, on the GPU machine, from the repo root,
# with binaries built on the development machine (make; carried as build/proven,
# build/cuda/test_cuda and build/cuda/test_cuda_api). Prints a compact table last; logs go to
# $OUT (at most 8 files).
#
#   tools/cuda/device-check.sh          everything that fits in PV_BUDGET_S (default 440 s)
#   tools/cuda/device-check.sh quick    tests, bandwidth, fixtures and the 8B bf16 model only
#
# Order (most needed first; each heavy step starts only while time is left):
#   nvidia-smi; build/cuda/test_cuda gemv | fixtures | quant (the CUDA tests, one process per
#   section), test_cuda_api (the seam: outputs, exact calls, snapshots, prefix copies, knobs, bytes),
#   fixtures again with PV_CUDA_PDL=0 and with PV_CUDA_GEMV_DIRECT=0; the device-to-device
#   copy bandwidth; `proven bench --backend cuda` on fixtures; random-weight GGUF models with the
#   published shapes written by `proven synth` (to /dev/shm when it has room, deleted after their
#   rows): Qwen3-8B bf16 (pp512/tg128 with the profile; pp4096 with the f32 and the f16 KV cache
#   and decode at depth 32k when the prefill is fast), then (full mode) Qwen3.5-35B-A3B q8_0, Qwen3.5-9B bf16, Qwen3-8B q8_0 /
#   q4_k_m, Qwen3.5-35B-A3B q4_k_m, Qwen3-30B-A3B q8_0, Qwen3-8B q4_0 / q6_k, Qwen3-1.7B,
#   Qwen3.5-0.8B; quick mode instead runs the 8B bf16 with each decode change turned off
#   (PV_CUDA_GEMV_TMA=1, PV_CUDA_SWIGLU_PAIR=0, PV_CUDA_ATTN_FUSE=0, both); last,
#   compute-sanitizer memcheck on `test_cuda quick`.
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/pv-device-check}
mkdir -p "$OUT"
MODE=${1:-full}
B=build
T0=$(date +%s)
BUDGET=${PV_BUDGET_S:-440}
JSON=$OUT/bench.jsonl
LOG=$OUT/bench.log
: >"$JSON"
: >"$LOG"
: >"$OUT/summary.txt"
status=0

say() { printf '%s\n' "$*" | tee -a "$OUT/summary.txt"; }
elapsed() { echo $(($(date +%s) - T0)); }
have_time() { # seconds the next step may need
	if [ $(($(elapsed) + ${1:-0})) -gt "$BUDGET" ]; then
		say "== skipped $2: $(elapsed) s elapsed (budget $BUDGET s)"
		return 1
	fi
	return 0
}

for f in $B/proven $B/cuda/test_cuda $B/cuda/test_cuda_api; do
	[ -x "$f" ] || { echo "device-check: $f missing: build with nvcc here (make), carry build/proven and build/cuda"; exit 2; }
done
W=/tmp/pv-models
if [ -d /dev/shm ] && [ "$(df -Pk /dev/shm | awk 'NR==2 {print $4}')" -gt 40000000 ]; then W=/dev/shm/pv-models; fi
mkdir -p "$W"

# 1. the card as found (never changed)
{
	nvidia-smi
	nvidia-smi --query-gpu=name,driver_version,pstate,clocks.sm,clocks.mem,clocks.max.sm,clocks.max.mem,power.draw,power.limit,temperature.gpu,memory.used,memory.total --format=csv
} >"$OUT/nvidia-smi.txt" 2>&1
say "== $(nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader 2>/dev/null)"

# 2. the CUDA tests, one process per section (test_cuda's cases, `test_cuda --list`; a fault in
# one cannot hide the others)
: >"$OUT/test_cuda.log"
run_tests() { # label env-assignment sections...
	local label=$1 envs=$2
	shift 2
	local t=$(date +%s)
	echo "### test_cuda $* $envs" >>"$OUT/test_cuda.log"
	env $envs $B/cuda/test_cuda "$@" >"$OUT/.t" 2>&1
	local rc=$?
	last_rc=$rc
	cat "$OUT/.t" >>"$OUT/test_cuda.log"
	[ $rc = 0 ] || status=1
	say "== test_cuda $label: rc $rc, $(grep -E '^test_cuda: [0-9]+ passed' "$OUT/.t" | tail -1) ($(($(date +%s) - t)) s)"
	grep -E '^FAIL|error' "$OUT/.t" | head -12 | tee -a "$OUT/summary.txt"
	grep -E 'worst|graph:' "$OUT/.t" | head -4 | tee -a "$OUT/summary.txt"
	rm -f "$OUT/.t"
}
run_tests gemv "" gemv
run_tests fixtures "" fixtures
fixtures_rc=$last_rc
run_tests quant "" quant
# the engine API on the CUDA backend (tests/cuda/test_cuda_api.c), its own program
t=$(date +%s)
echo "### test_cuda_api" >>"$OUT/test_cuda.log"
$B/cuda/test_cuda_api >"$OUT/.t" 2>&1
rc=$?
cat "$OUT/.t" >>"$OUT/test_cuda.log"
[ $rc = 0 ] || status=1
say "== test_cuda_api: rc $rc, $(grep -E '^test_cuda_api: [0-9]+ passed' "$OUT/.t" | tail -1) ($(($(date +%s) - t)) s)"
grep -E '^FAIL|error' "$OUT/.t" | head -12 | tee -a "$OUT/summary.txt"
rm -f "$OUT/.t"
run_tests "fixtures without PDL" "PV_CUDA_PDL=0" fixtures
run_tests "fixtures staged gemv" "PV_CUDA_GEMV_DIRECT=0" fixtures
run_tests "fixtures without prefill" "PV_CUDA_PREFILL=0" fixtures
run_tests "fixtures with 64-key attention splits" "PV_CUDA_ATT_SPLIT=64" fixtures
run_tests "fixtures with 16-key attention splits" "PV_CUDA_ATT_SPLIT=16" fixtures
for sec in prefill real; do # sections (test cases) that exist in this build
	$B/cuda/test_cuda --list | cut -f1 | grep -qx "$sec" && run_tests "$sec" "" "$sec"
done
# if the fixtures failed, once more without the decode graph (tells graph capture from kernels)
[ $fixtures_rc = 0 ] || run_tests "fixtures without graphs" "PV_CUDA_GRAPHS=0" fixtures

# 3. copy bandwidth alone
$B/proven bench --backend cuda --membw >>"$LOG" 2>&1 && grep '"d2d_copy"' "$LOG" | tail -1 >>"$JSON"

# 4. benches
bench() { # name model [args...]
	local name=$1 model=$2
	shift 2
	local t=$(date +%s)
	if $B/proven bench --backend cuda --model "$model" "$@" --json-only >"$OUT/.b" 2>>"$LOG"; then
		sed "s/^{/{\"name\":\"$name\",/" "$OUT/.b" | grep '^{' >>"$JSON"
		echo "bench $name ok ($(($(date +%s) - t)) s)" >>"$LOG"
	else
		status=1
		say "== bench $name FAILED: $(tail -2 "$LOG" | tr '\n' ' ')"
	fi
	rm -f "$OUT/.b"
}
synth() { # preset type out: a random-weight GGUF with the preset's published shapes
	local t=$(date +%s)
	if $B/proven synth --preset "$1" --type "$2" --out "$3" >>"$LOG" 2>&1; then
		echo "synth $1 $2 in $(($(date +%s) - t)) s ($(du -h "$3" | cut -f1))" >>"$LOG"
		return 0
	fi
	status=1
	say "== synth $1 $2 FAILED: $(tail -2 "$LOG" | tr '\n' ' ')"
	rm -f "$3"
	return 1
}
# prefill fast enough (tok/s of the last bench's pp) for the long-context rows
fast_prefill() { [ "$(tail -1 "$JSON" | python3 -c 'import json,sys; print(int(json.loads(sys.stdin.read()).get("pp_tok_s",0)))' 2>/dev/null || echo 0)" -gt 3000 ]; }
ARGS="--pp 512 --tg 128 --reps 3"

for fx in qwen2 qwen3 qwen3_odd qwen3_5 qwen3_moe qwen3_next; do
	bench "fixture-$fx" tests/fixtures/$fx --pp 64 --tg 128 --reps 3
done

# one model: the default row with the profile, then (rows) more rows; variants only in quick mode
model_rows() { # name preset type [long]
	local name=$1 preset=$2 dt=$3 long=${4:-}
	local m="$W/$name.gguf"
	have_time 40 "$name" || return 0
	synth "$preset" "$dt" "$m" || return 0
	bench "$name" "$m" $ARGS --profile
	case $name in *a3b-q8_0) PV_CUDA_MOE_SIDE=0 bench "$name-inline" "$m" $ARGS ;; esac
	if [ "$MODE" = quick ]; then
		for v in 1 2 3; do PV_CUDA_GEMV_TMA=$v bench "$name-tma$v" "$m" $ARGS; done
		PV_CUDA_NORM_FUSE=1 bench "$name-normfuse" "$m" $ARGS
		PV_CUDA_SWIGLU_PAIR=0 bench "$name-nopair" "$m" $ARGS
		PV_CUDA_ATTN_FUSE=0 bench "$name-nofuse" "$m" $ARGS
		PV_CUDA_SWIGLU_PAIR=0 PV_CUDA_ATTN_FUSE=0 bench "$name-v3path" "$m" $ARGS
		PV_CUDA_ATT_SPLIT=64 bench "$name-s64" "$m" $ARGS
		PV_CUDA_ATT_SPLIT=16 bench "$name-s16" "$m" $ARGS
	fi
	if [ -n "$long" ] && have_time 40 "$name prefill-bench"; then
		# the prefill at real shapes: pp512/pp4096 GPU time, and its last-row logits vs the exact path
		PV_PREFILL_MODEL="$m" $B/cuda/test_cuda prefill-bench >"$OUT/.p" 2>&1
		echo "### prefill-bench $name" >>"$OUT/test_cuda.log"
		cat "$OUT/.p" >>"$OUT/test_cuda.log"
		say "== prefill-bench $name: $(grep -E 'passed' "$OUT/.p" | tail -1)"
		grep -E 'pp[0-9]+|rel|FAIL' "$OUT/.p" | head -8 | tee -a "$OUT/summary.txt"
		rm -f "$OUT/.p"
	fi
	if [ -n "$long" ] && fast_prefill; then
		have_time 20 "$name ctx128" && bench "$name-ctx128" "$m" --pp 64 --tg 128 --reps 2
		have_time 30 "$name 4k" && bench "$name-pp4096" "$m" --pp 4096 --tg 128 --reps 2
		# the same with an f16 KV cache: half the KV bytes per decode token
		have_time 30 "$name 4k f16 KV" && bench "$name-pp4096-kvf16" "$m" --pp 4096 --tg 128 --reps 2 --cache-type f16
		[ "$MODE" != quick ] && have_time 90 "$name 32k" && bench "$name-d32k" "$m" --depth 32256 --pp 512 --tg 64 --reps 1 --ctx 32900
	fi
	rm -f "$m"
}
model_rows qwen3-8b-bf16 qwen3-8b bf16 long
[ "$MODE" = quick ] || {
	model_rows qwen3.5-35b-a3b-q8_0 qwen3.5-35b-a3b q8_0 long
	model_rows qwen3.5-9b-bf16 qwen3.5-9b bf16 long
	model_rows qwen3-8b-q8_0 qwen3-8b q8_0
	model_rows qwen3-8b-q4_k_m qwen3-8b q4_k_m
	model_rows qwen3.5-35b-a3b-q4_k_m qwen3.5-35b-a3b q4_k_m
	model_rows qwen3-30b-a3b-q8_0 qwen3-30b-a3b q8_0
	model_rows qwen3-8b-q4_0 qwen3-8b q4_0
	model_rows qwen3-8b-q6_k qwen3-8b q6_k
	model_rows qwen3-1.7b-bf16 qwen3-1.7b bf16
	model_rows qwen3.5-0.8b-bf16 qwen3.5-0.8b bf16
}
rm -rf "$W"

# 5. memory errors on a small subset (compute-sanitizer works on Firecracker machines)
left=$((BUDGET + 90 - $(elapsed)))
if command -v compute-sanitizer >/dev/null 2>&1 && [ $left -gt 30 ]; then
	t=$(date +%s)
	timeout $left compute-sanitizer --tool memcheck --error-exitcode 9 $B/cuda/test_cuda quick 2>&1 | head -c 4000000 >"$OUT/sanitizer.log"
	rc=${PIPESTATUS[0]}
	[ $rc = 0 ] || [ $rc = 124 ] || status=1
	say "== compute-sanitizer memcheck (test_cuda quick): rc $rc$([ $rc = 124 ] && echo ' (timed out)'), $(grep -E 'ERROR SUMMARY' "$OUT/sanitizer.log" | tail -1) ($(($(date +%s) - t)) s)"
	grep -E '^========= (Invalid|Program hit|  at )' "$OUT/sanitizer.log" | head -8 | tee -a "$OUT/summary.txt"
else
	say "== compute-sanitizer skipped (not found or no time left: $left s)"
fi

# 6. the table
python3 - "$JSON" <<'EOF' | tee -a "$OUT/summary.txt"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
bw = [r for r in rows if r.get("test") == "d2d_copy"]
if bw:
    r = bw[0]
    print(f"D2D copy: {r['d2d_gb_s']:.0f} GB/s ({r['gpu']}, SM clock {r['sm_clock_mhz']} MHz, mem {r['mem_clock_mhz']} MHz, "
          f"driver CUDA {r['driver_cuda']}, nvcc {r['nvcc']})")
for r in rows:  # where the time goes, per profiled model
    if r.get("profile"):
        tot = r["profile_total_us"]
        parts = ", ".join(f"{p['group']} {p['us']:.0f}" + (f" ({p['bytes'] / (p['us'] * 1e3):.0f} GB/s)" if p["bytes"] and p["us"] else "")
                          for p in sorted(r["profile"], key=lambda p: -p["us"])[:8])
        print(f"profile {r['name']}: {tot:.0f} us/token: {parts}")
print(f"{'model':<30}{'dtype':>7}{'d':>6}{'pp':>5}{'tg t/s':>9}{'pp t/s':>9}{'MB/tok':>8}{'GB/s':>7}{'%d2d':>6}{'kern':>6}{'graph':>6}{'sync':>5}{'GPU MiB':>9}")
for r in rows:
    if "tg_tok_s" not in r:
        continue
    mb = (r["weight_bytes_per_token"] + r["kv_bytes_per_token"]) / 1e6
    print(f"{r['name']:<30}{r['weight_dtype']:>7}{r.get('depth',0):>6}{r['pp']:>5}{r['tg_tok_s']:>9.1f}{r['pp_tok_s']:>9.1f}{mb:>8.1f}{r['tg_gb_s']:>7.0f}"
          f"{100 * r['tg_bw_share']:>6.1f}{r['kernels_per_token']:>6}{r['graph_launches_per_token']:>6.2f}"
          f"{r['syncs_per_token']:>5.2f}{r['gpu_used_mib']:>9.0f}")
EOF
say "== device-check: status $status, $(elapsed) s"
exit $status

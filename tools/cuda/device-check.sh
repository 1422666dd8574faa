#!/bin/bash
# device-check.sh: one device call's worth of CUDA checks, on the GPU machine, from the repo root,
# with binaries built on the development machine (make; carried as build/proven and
# build/cuda/test_cuda). Prints a compact table last; logs go to $OUT (at most 8 files).
#
#   tools/cuda/device-check.sh          everything that fits in PV_BUDGET_S (default 440 s)
#   tools/cuda/device-check.sh quick    tests, bandwidth, fixtures and the 8B bf16 model only
#
# Order (most needed first; each heavy step starts only while time is left):
#   nvidia-smi; build/cuda/test_cuda gemv | fixtures | quant (the CUDA tests, one process per
#   section), fixtures again with PV_CUDA_PDL=0 (PDL is on by default) and with
#   PV_CUDA_GEMV_DIRECT=0 (one-row GEMVs staging their activation); the device-to-device copy
#   bandwidth; `proven bench --backend cuda` on fixtures (dense, hybrid, MoE); Qwen3-8B-shaped
#   bf16 and q4_k (each also staged, -staged, and with the plain instead of the pipelined in-place
#   walk, -nopipe; bf16 also without PDL and with the L2 prefetch, which is off by default),
#   q8_0, q4_0, q6_k; Qwen3-1.7B bf16; Qwen3.5-0.8B-shaped bf16 (DeltaNet hybrid); last,
#   compute-sanitizer memcheck on `test_cuda quick`. Models have random weights
#   (tools/cuda/make_model.py, tools/bench/make_model.py), are written to /dev/shm when it has
#   room (else /tmp) and deleted after their benches.
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

for f in $B/proven $B/cuda/test_cuda; do
	[ -x "$f" ] || { echo "device-check: $f missing: build with nvcc here (make), carry build/proven and build/cuda/test_cuda"; exit 2; }
done
W=/tmp/pv-models
if [ -d /dev/shm ] && [ "$(df -Pk /dev/shm | awk 'NR==2 {print $4}')" -gt 25000000 ]; then W=/dev/shm/pv-models; fi
mkdir -p "$W"

# 1. the card as found (never changed)
{
	nvidia-smi
	nvidia-smi --query-gpu=name,driver_version,pstate,clocks.sm,clocks.mem,clocks.max.sm,clocks.max.mem,power.draw,power.limit,temperature.gpu,memory.used,memory.total --format=csv
} >"$OUT/nvidia-smi.txt" 2>&1
say "== $(nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader 2>/dev/null)"

# 2. the CUDA tests, one process per section (a fault in one cannot hide the others)
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
run_tests "fixtures without PDL" "PV_CUDA_PDL=0" fixtures
run_tests "fixtures staged gemv" "PV_CUDA_GEMV_DIRECT=0" fixtures
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
make_model() { # preset dtype out
	local t=$(date +%s)
	if python3 tools/cuda/make_model.py --preset "$1" --dtype "$2" --out "$3" >>"$LOG" 2>&1; then
		echo "made $1 $2 in $(($(date +%s) - t)) s" >>"$LOG"
		return 0
	fi
	status=1
	say "== make_model $1 $2 FAILED: $(tail -2 "$LOG" | tr '\n' ' ')"
	return 1
}
ARGS="--pp 128 --tg 128 --reps 3"

for fx in qwen2 qwen3 qwen3_odd qwen3_5 qwen3_moe qwen3_next; do
	bench "fixture-$fx" tests/fixtures/$fx --pp 64 --tg 128 --reps 3
done

for dt in bf16 q4_k q8_0 q4_0 q6_k; do
	[ "$MODE" = quick ] && [ $dt != bf16 ] && continue
	have_time 30 "qwen3-8b $dt" || continue
	m="$W/q8b-$dt"
	[ $dt = bf16 ] || m="$m.gguf"
	if make_model qwen3-8b $dt "$m"; then
		bench "qwen3-8b-$dt" "$m" $ARGS --profile
		case $dt in
		bf16 | q4_k)
			have_time 20 "qwen3-8b $dt variants" && {
				PV_CUDA_GEMV_DIRECT=0 bench "qwen3-8b-$dt-staged" "$m" $ARGS
				PV_CUDA_GEMV_PIPE=1 bench "qwen3-8b-$dt-pipe" "$m" $ARGS
				if [ $dt = bf16 ]; then
					PV_CUDA_PDL=0 bench "qwen3-8b-$dt-nopdl" "$m" $ARGS
					PV_CUDA_PREFETCH=1 bench "qwen3-8b-$dt-pf" "$m" $ARGS
				fi
			} ;;
		esac
		rm -rf "$m"
	fi
done
if [ "$MODE" != quick ] && have_time 30 "qwen3-1.7b" && make_model qwen3-1.7b bf16 "$W/q17"; then
	bench qwen3-1.7b-bf16 "$W/q17" $ARGS --profile
	rm -rf "$W/q17"
fi
if [ "$MODE" != quick ] && have_time 40 "qwen3.5-0.8b"; then
	# a Gated DeltaNet hybrid with real shapes (bf16, N(0, 0.02) weights; numpy, ~1.6 GB)
	t=$(date +%s)
	if python3 tools/bench/make_model.py --preset qwen3.5-0.8b --out "$W/q35" >>"$LOG" 2>&1; then
		echo "made qwen3.5-0.8b in $(($(date +%s) - t)) s" >>"$LOG"
		bench qwen3.5-0.8b-bf16 "$W/q35" $ARGS --profile
	else
		status=1
		say "== make_model qwen3.5-0.8b FAILED: $(tail -2 "$LOG" | tr '\n' ' ')"
	fi
	rm -rf "$W/q35"
fi
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
print(f"{'model':<26}{'dtype':>7}{'tg t/s':>9}{'pp t/s':>9}{'MB/tok':>8}{'GB/s':>7}{'%d2d':>6}{'kern':>6}{'graph':>6}{'sync':>5}{'GPU MiB':>9}")
for r in rows:
    if "tg_tok_s" not in r:
        continue
    mb = (r["weight_bytes_per_token"] + r["kv_bytes_per_token"]) / 1e6
    print(f"{r['name']:<26}{r['weight_dtype']:>7}{r['tg_tok_s']:>9.1f}{r['pp_tok_s']:>9.1f}{mb:>8.1f}{r['tg_gb_s']:>7.0f}"
          f"{100 * r['tg_bw_share']:>6.1f}{r['kernels_per_token']:>6}{r['graph_launches_per_token']:>6.2f}"
          f"{r['syncs_per_token']:>5.2f}{r['gpu_used_mib']:>9.0f}")
EOF
say "== device-check: status $status, $(elapsed) s"
exit $status

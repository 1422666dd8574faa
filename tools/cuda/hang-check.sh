#!/bin/bash
# hang-check.sh: one device call that says where the Qwen3.5-9B shape's 16-row step stops.
# Each run is its own process under a watchdog; on a timeout the watchdog records, before it
# kills the process, what the GPU is doing (utilization, compute processes) and where the host
# threads are (gdb backtrace, else the kernel wait channels), then waits until the GPU has no
# compute process left before the next run starts.
#   1. the reported command on the shape cut to 4 layers (3 DeltaNet + 1 attention: every kernel
#      kind of the full model): gemv_shared=2, window graphs, PDL
#   2. the same with direct launches and PV_CUDA_TRACE: a kernel still running after 10 s is
#      named on stderr with its grid (launches serialized, so no PDL overlap)
#   3. as 1 with PDL off, 4. as 1 with gemv_shared=1, 5. as 1 with gemv_rows_multi=2 (2 rows per
#      warp: 104 registers, 2 blocks per SM, against 226 and 1), 6. as 1 with eager module loading
#   7. compute-sanitizer synccheck and memcheck on the 16-row step (direct launches), if present
#   8. the full 32-layer shape as 1 (only if 1-6 all finished)
# Between the two: test_cuda_api's many part, whose hybrid checks (cuda.batch_hybrid) never ran.
# Before them, while the GPU is certainly clean: continuous batching's throughput
# (`proven bench --parallel 1|4|16`) on a small dense shape (Qwen3-1.7B BF16).
# Runs are skipped past BUDGET seconds (540) so the call ends inside its 600 s limit.
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/pv-hang-check}
mkdir -p "$OUT"
B=build
W=/dev/shm/pv-hang
mkdir -p "$W"
say() { printf '%s\n' "$*" | tee -a "$OUT/summary.txt"; }
gpu_free() {
	for i in $(seq 20); do
		[ -z "$(nvidia-smi --query-compute-apps=pid --format=csv,noheader 2>/dev/null)" ] && return 0
		sleep 1
	done
	say "   GPU still busy after 20 s: $(nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader | tr '\n' ' ')"
}
snapshot() { # pid label: what a stuck run is doing
	local pid=$1 f="$OUT/stuck-$2.txt" tk
	{
		echo "== nvidia-smi"
		nvidia-smi --query-gpu=utilization.gpu,clocks.sm,power.draw,memory.used --format=csv
		nvidia-smi --query-compute-apps=pid,used_memory --format=csv
		echo "== /proc/$pid/status"
		grep -E 'State|Threads|VmRSS' /proc/$pid/status
		echo "== cpu ticks (utime stime), 1 s apart"
		awk '{print $14, $15}' /proc/$pid/stat; sleep 1; awk '{print $14, $15}' /proc/$pid/stat
		echo "== wchan per thread"
		for tk in /proc/$pid/task/*; do echo "$(basename $tk) $(cat $tk/wchan 2>/dev/null) $(cat $tk/comm)"; done
		echo "== host memory"
		grep -E 'MemTotal|MemAvailable|Shmem:' /proc/meminfo
		if command -v gdb >/dev/null; then
			echo "== gdb"
			timeout 20 gdb -batch -p "$pid" -ex 'thread apply all bt 25' 2>&1 | grep -v '^\[New LWP'
		elif command -v cuda-gdb >/dev/null; then
			# the image has no gdb; cuda-gdb attaches and also names the kernels still resident
			echo "== cuda-gdb"
			timeout 40 cuda-gdb -batch -p "$pid" -ex 'info cuda kernels' -ex 'info cuda blocks' \
				-ex 'thread apply all bt 25' 2>&1 | grep -v '^\[New LWP' | head -150
		elif command -v eu-stack >/dev/null; then
			echo "== eu-stack"
			timeout 20 eu-stack -p "$pid" 2>&1
		fi
	} >"$f" 2>&1
	say "   stuck: $(head -3 "$f" | tail -1) ; main thread: $(grep -m3 -E 'pv_|cuda|cu[A-Z]' "$f" | tr -s ' ' | cut -c1-200 | tr '\n' '|')"
}
run() { # label timeout env... -- command
	local label=$1 to=$2
	shift 2
	gpu_free
	local t=$(date +%s)
	env "$@" >"$OUT/.o" 2>"$OUT/.e" &
	local pid=$!
	local rc=
	for i in $(seq "$to"); do
		sleep 1
		kill -0 $pid 2>/dev/null || { wait $pid; rc=$?; break; }
	done
	if [ -z "$rc" ]; then
		snapshot $pid "$label"
		kill -9 $pid 2>/dev/null
		wait $pid 2>/dev/null
		rc=timeout
	fi
	cat "$OUT/.o" >>"$OUT/runs.jsonl"
	cp "$OUT/.e" "$OUT/stderr-${label// /_}.txt"
	say "$label: rc $rc ($(($(date +%s) - t)) s) $(grep -o '"pp_tok_s":[0-9.]*' "$OUT/.o") $(grep -h 'PV_CUDA_TRACE' "$OUT/.e" | head -2 | tr '\n' ' ') $(tail -c 300 "$OUT/.e" | tr '\n' ' ')"
	[ "$rc" = 0 ]
}
T0=$(date +%s)
have_time() { [ $(($(date +%s) - T0 + $1)) -le ${BUDGET:-540} ] || { say "== skipped $2: $(($(date +%s) - T0)) s elapsed"; return 1; }; }
say "== $($B/proven --version | head -1); $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
say "== host: $(grep -E 'MemTotal|MemAvailable' /proc/meminfo | tr -s ' ' | tr '\n' ' ')"
gpu_free
m=$W/q17.gguf
$B/proven synth --preset qwen3-1.7b --type bf16 --out "$m" --quiet >/dev/null 2>&1 || say "synth failed"
for n in 1 4 16; do
	have_time 40 "parallel $n" && run "parallel $n 1.7B shared2" 30 PV_CUDA_GEMV_SHARED=2 $B/proven bench --backend cuda \
		--model "$m" --parallel $n --tg 32 --pp 16 --json-only
	grep -o '"agg_tok_s":[0-9.]*\|"seq_tok_s":[0-9.]*\|"alone_agg_tok_s":[0-9.]*\|"speedup":[0-9.]*\|"ids_equal":[a-z]*' "$OUT/.o" |
		tr '\n' ' ' | sed 's/^/   /' | tee -a "$OUT/summary.txt"
	echo | tee -a "$OUT/summary.txt"
done
rm -f "$m"
# the hybrids' multi-session kernels (cuda.batch_hybrid), first GPU run: the API's many part
have_time 150 "test many" && run "test_cuda_api many (hybrids on)" 150 PV_CUDA_API_ONLY=many $B/cuda/test_cuda_api
grep -E '^test_cuda_api: [0-9]+ passed|^FAIL' "$OUT/.o" "$OUT/.e" | head -8 | tee -a "$OUT/summary.txt"
cp "$OUT/.o" "$OUT/test-many.txt"
m=$W/q9-4l.gguf
$B/proven synth --preset qwen3.5-9b --type bf16 --layers 4 --out "$m" --quiet >/dev/null 2>&1 || say "synth failed"
bench() { echo $B/proven bench --backend cuda --model "$1" --pp 16 --tg 16 --depth 512 --reps 5 --json-only; }
ok=1
have_time 60 "4L wg1" && { run "4L rows16 shared2 wg1 pdl1" 60 PV_CUDA_GEMV_SHARED=2 $(bench "$m") || ok=0; }
have_time 120 "4L TRACE" && { run "4L rows16 shared2 wg0 TRACE" 120 PV_CUDA_GEMV_SHARED=2 PV_CUDA_WINDOW_GRAPHS=0 PV_CUDA_GRAPHS=0 \
	PV_CUDA_TRACE=10 $(bench "$m") || ok=0; }
have_time 60 "4L pdl0" && { run "4L rows16 shared2 wg1 pdl0" 60 PV_CUDA_GEMV_SHARED=2 PV_CUDA_PDL=0 $(bench "$m") || ok=0; }
have_time 60 "4L shared1" && { run "4L rows16 shared1 wg1 pdl1" 60 PV_CUDA_GEMV_SHARED=1 $(bench "$m") || ok=0; }
have_time 60 "4L rm2" && { run "4L rows16 shared2 rm2 wg1 pdl1" 60 PV_CUDA_GEMV_SHARED=2 PV_CUDA_GEMV_RM=2 $(bench "$m") || ok=0; }
have_time 60 "4L eager" && { run "4L rows16 shared2 wg1 eager" 60 PV_CUDA_GEMV_SHARED=2 CUDA_MODULE_LOADING=EAGER $(bench "$m") || ok=0; }
if command -v compute-sanitizer >/dev/null; then
	for tool in synccheck memcheck; do
		have_time 150 "sanitizer $tool" && run "4L rows16 shared2 wg0 $tool" 150 PV_CUDA_GEMV_SHARED=2 PV_CUDA_WINDOW_GRAPHS=0 \
			compute-sanitizer --tool $tool --error-exitcode 9 $B/proven bench --backend cuda --model "$m" --pp 16 --tg 1 \
			--depth 512 --reps 1 --json-only
	done
fi
rm -f "$m"
if [ $ok = 1 ] && have_time 150 "32L"; then
	m=$W/q9.gguf
	$B/proven synth --preset qwen3.5-9b --type bf16 --out "$m" --quiet >/dev/null 2>&1 || say "synth failed"
	run "32L rows16 shared2 wg1 pdl1" 120 PV_CUDA_GEMV_SHARED=2 $(bench "$m")
	rm -f "$m"
fi
say "== done"

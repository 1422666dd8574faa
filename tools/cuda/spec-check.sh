#!/bin/bash
# spec-check.sh: speculative decoding on the GPU machine, one device call per part, from the repo
# root, with binaries built on the development machine (build/proven, build/cuda/test_cuda,
# build/cuda/test_cuda_api). Logs and JSON lines go to $OUT; a compact summary prints last.
#
#   tools/cuda/spec-check.sh a   re-verify (test_cuda_api, test_cuda fixtures), the exactness
#                                court on CUDA (every fixture; n-grams, a draft model, cascade;
#                                snapshot and replay rollback), then on Qwen3-8B BF16 and
#                                Qwen3.5-9B BF16 shapes: the verify-window cost curve (1..16
#                                exact rows) and the recorded acceptance traces replayed
#   tools/cuda/spec-check.sh c   more courts (hybrid MoE, Qwen3-Next and sampling with a draft model),
#                                Nsight Compute on the 1- and 16-row GEMV kernels, the draft-model
#                                traces replayed on the 8B, 30B-A3B, 35B-A3B and 9B shapes
#   tools/cuda/spec-check.sh d   cuda.gemv_rows_multi (one weight row per warp for 2-16 rows): the
#                                tests with it on and off, the curve and the replays on the 8B and
#                                30B-A3B shapes
#   tools/cuda/spec-check.sh e   the shared walk (cuda.gemv_shared 2, 1, 0) and the window graphs
#                                (cuda.window_graphs): GEMV tests per variant, the API's knob and
#                                multi-row checks, courts with gemv_shared=2, the curve per variant
#                                and the replays (gemv_shared=2) on the 8B, 30B-A3B, 35B-A3B, 9B
#   tools/cuda/spec-check.sh f   the KV cache types (the API's cache section, tg at depth 4096 f32 /
#                                f16 / bf16), the 35B-A3B prefill disagreement by weight type,
#                                Nsight Compute on the shared walk
#   tools/cuda/spec-check.sh i   the 9B shape's 16-row step per switch, the batching and MTP
#                                API checks, the split-weight prefill tests, two MTP courts
#   tools/cuda/spec-check.sh h   the 9B shape's 16-row step per switch (under a timeout), the
#                                precise prefill's split weights (tests, the 35B-A3B shape's error)
#   tools/cuda/spec-check.sh j   the router's 16-row groups in one launch (tests, the 35B-A3B prompt), the
#                                hybrids' batching, every kernel's time over a MoE prompt (ncu), the
#                                9B 16-row step and batching throughput on the 9B shape
#   tools/cuda/spec-check.sh k   K_API=<test_cuda_api parts>, K_TESTS=<test_cuda parts>, the 35B-A3B
#                                prompt (8 layers; K_FULL35=1 also all 40), K_NCU=1 kernel times over
#                                a MoE prompt, batching throughput (K_9B=1 the 9B; K_SKIP_8B=1 not the 8B)
#   tools/cuda/spec-check.sh l   cuda.q8_act (qgemv.cu: the CPU's fast numerics, int8 activations):
#                                its GEMVs bitwise against the CPU, the quantized fixtures and MTP heads
#                                with it, courts with it (tiny MoE hybrid, the 8B Q4_K_M shape),
#                                decode A/B off/on on the 8B Q4_K_M / Q8_0 and 35B-A3B Q4_K_M shapes
#                                (L_SKIP35=1: not the 35B), the q8_0 KV cache at depth 4096 (L_KV=1)
#   tools/cuda/spec-check.sh m   the re-verify at the end of session 5: test_cuda_api whole, test_cuda fixtures,
#                                quant and prefill, then the recorded traces replayed on the 35B-A3B
#                                Q4_K_M shape with cuda.q8_act off and on
#   tools/cuda/spec-check.sh n   session 6: test_cuda qgemv and N_TESTS, test_cuda_api N_API, courts with the
#                                defaults (N_COURTS=1), then on the 8B Q4_K_M shape: the baseline build
#                                $B/proven-old alternating, N_AB=<variable> over N_AB_VALS alternating, the
#                                decode profile (--profile) per cuda.q8_act in N_PROF_Q8, every kernel's time
#                                over short decode runs (ncu, N_NCU=1) or 16 kernels' sections (N_DETAIL=1);
#                                the same on the 8B Q8_0 (N_Q8=1), 8B BF16 (N_BF16=1) and 35B-A3B Q4_K_M
#                                (N_35=1) shapes; compute-sanitizer memcheck and racecheck of test_cuda norm,
#                                memcheck of test_cuda quick (N_SAN=1)
#   tools/cuda/spec-check.sh o   session 7: test_cuda qgemv, O_TESTS, test_cuda_knobs, test_cuda_api O_API, courts
#                                (O_COURTS=1, environment O_COURT_ENV), then per model of O_MODELS
#                                ("preset:type:label[:VAR];..."), decode over the arms of O_ARMS or of the
#                                variable VAR ("base;old;ENV;...")
#                                alternating O_ROUNDS times, and on the first the profiles of O_PROF and the
#                                exact 4/8/16-row steps per arm of O_CURVE;
#                                O_SAN=1: compute-sanitizer memcheck of test_cuda quick and of a decode per
#                                fixture kind
#   tools/cuda/spec-check.sh p   session 8, the MoE / DeltaNet prompt path: test_cuda P_TESTS (default prefill),
#                                test_cuda_api P_API, then test_cuda prefill-bench on the 35B-A3B Q8_0 shape cut to
#                                8 layers over the arms of P_ARMS ("base;ENV ENV;old;...", old: the baseline build
#                                $B/cuda/test_cuda-old and $B/proven-old) alternating P_ROUNDS times,
#                                all 40 layers once per arm (P_FULL=1), every kernel's time over a 4-layer prompt
#                                per arm (P_NCU=1), the 9B BF16 prompt per arm (P_9B=1), the 30B-A3B Q8_0 prompt per
#                                arm (P_30B=1); P_DETAIL=1 Nsight Compute sections of the grouped GEMMs and the
#                                chunked DeltaNet kernels; P_RECEIPTS=1 a proven bench receipt (pp512, tg32) per
#                                full-size file; P_COURTS=1 the small courts; P_SAN=1 compute-sanitizer memcheck and
#                                racecheck of 200-token prompts on the hybrid fixtures (the prompt kernels)
#   tools/cuda/spec-check.sh g   the MTP head on the GPU: the API's mtp section (CUDA vs CPU, batch
#                                invariance, truncation, chained drafts, MoE and quantized heads),
#                                the exactness court with --draft mtp (snapshot and replay rollback,
#                                a bf16 cache, the adaptive policy, a tiny MoE head from synth)
#   tools/cuda/spec-check.sh b   the CUDA tests again, Nsight Compute on 1- and 16-row steps when
#                                ncu is there, the adaptive policy with real n-gram drafts on the
#                                8B shape, the curve and replays on Qwen3-30B-A3B and
#                                Qwen3.5-35B-A3B Q8_0 shapes, a Qwen3-0.6B BF16 draft's decode speed
#
# The traces (docs/results/spec-traces/*.jsonl) were recorded on the CPU with the real
# Qwen2.5-Coder-1.5B and its drafters (`proven bench spec --trace-out`); replayed here
# (`--draft replay:`) the verify calls have the real shapes and acceptance on the synth model, so
# the time is the GPU's real cost at a real acceptance (spec/replay.c). Synth files are random
# weights with the published shapes (`proven synth`), written to /dev/shm and deleted after use.
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/pv-spec-check}
mkdir -p "$OUT"
PART=${1:-a}
B=build
CASES=tests/data/spec/cases.jsonl
FX=tests/fixtures
TR=docs/results/spec-traces
T0=$(date +%s)
BUDGET=${PV_BUDGET_S:-540}
LOG=$OUT/spec-$PART.log
JSON=$OUT/spec-$PART.jsonl
SUM=$OUT/summary-$PART.txt
: >"$LOG"
: >"$JSON"
: >"$SUM"
status=0

say() { printf '%s\n' "$*" | tee -a "$SUM"; }
elapsed() { echo $(($(date +%s) - T0)); }
have_time() { # seconds-needed what
	if [ $(($(elapsed) + $1)) -gt "$BUDGET" ]; then
		say "== skipped $2: $(elapsed) s elapsed (budget $BUDGET s)"
		return 1
	fi
}

for f in $B/proven $B/cuda/test_cuda $B/cuda/test_cuda_api; do
	[ -x "$f" ] || { echo "spec-check: $f missing (build with nvcc here, carry build/)"; exit 2; }
done
W=/tmp/pv-models
if [ -d /dev/shm ] && [ "$(df -Pk /dev/shm | awk 'NR==2 {print $4}')" -gt 40000000 ]; then W=/dev/shm/pv-models; fi
mkdir -p "$W"
say "== $(nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu --format=csv,noheader 2>/dev/null) | $($B/proven --version 2>&1 | head -1)"

runtest() { # label command...: one test program; its log appended, its tally and first failures summed up
	local label=$1
	shift
	"$@" >"$OUT/.t" 2>&1
	local rc=$?
	cat "$OUT/.t" >>"$LOG"
	[ $rc = 0 ] || status=1
	say "== $label: rc $rc, $(grep -E '^test_[a-z_]+: [0-9]+ passed' "$OUT/.t" | tail -1)"
	grep -E '^FAIL' "$OUT/.t" | head -5 | tee -a "$SUM"
}

court() { # label model args...
	local label=$1 model=$2
	shift 2
	local t=$(date +%s)
	$B/proven court spec --backend cuda --model "$model" --cases $CASES --threads 4 "$@" >"$OUT/.c" 2>&1
	local rc=$?
	cat "$OUT/.c" >>"$LOG"
	grep '^{"court"' "$OUT/.c" >>"$JSON"
	[ $rc = 0 ] || status=1
	say "court $label: rc $rc $(grep -o '"cases":[0-9]*,"exact":[0-9]*' "$OUT/.c" | tail -1) $(grep -o '"verdict":"[a-z]*"' "$OUT/.c" | tail -1) $(grep -o '"drafted":[0-9]*,"accepted":[0-9]*' "$OUT/.c" | tail -1) ($(($(date +%s) - t)) s)"
	[ $rc = 0 ] || grep -iE 'mismatch|error|fail' "$OUT/.c" | head -5 | tee -a "$SUM"
}

synth() { # preset type out
	local t=$(date +%s)
	if $B/proven synth --preset "$1" --type "$2" --out "$3" --quiet >>"$LOG" 2>&1; then
		say "synth $1 $2: $(($(date +%s) - t)) s"
		return 0
	fi
	say "== synth $1 $2 FAILED: $(tail -2 "$LOG" | tr '\n' ' ')"
	status=1
	return 1
}

curve() { # label model [rows...]: the exact step's cost per number of rows (a verify window of r rows)
	local label=$1 m=$2
	shift 2
	for r in ${@:-1 2 4 8 16}; do
		$B/proven bench --backend cuda --model "$m" --pp $r --tg 16 --depth 512 --reps 5 --json-only >"$OUT/.b" 2>>"$LOG"
		local j=$(grep '^{' "$OUT/.b" | tail -1)
		echo "$j" >>"$JSON"
		local pp=$(echo "$j" | grep -o '"pp_tok_s":[0-9.]*' | cut -d: -f2)
		local tg=$(echo "$j" | grep -o '"tg_tok_s":[0-9.]*' | cut -d: -f2)
		say "curve $label rows $r: $(awk -v r=$r -v p="${pp:-0}" 'BEGIN { if (p > 0) printf "%.3f ms per step, %.3f ms per row", 1000 * r / p, 1000 / p; else print "no figure" }') (decode at depth $((512 + r)): ${tg:-?} tok/s)"
	done
}

replay() { # label model trace
	local label=$1 m=$2 tr=$3
	[ -f "$tr" ] || { say "replay $label: no trace $tr"; return; }
	local t=$(date +%s)
	$B/proven bench spec --backend cuda --model "$m" --draft "replay:$tr" --cases $CASES --per-class 3 --max-tokens 128 \
		--greedy >"$OUT/.r" 2>>"$LOG"
	local rc=$?
	[ $rc = 0 ] || status=1
	grep '^{' "$OUT/.r" >>"$JSON"
	say "replay $label $(basename "$tr" .jsonl): rc $rc ($(($(date +%s) - t)) s)"
	grep '^|' "$OUT/.r" | tee -a "$SUM" >/dev/null
	grep '^|' "$OUT/.r"
}

prof() { # label model env...: decode tg64 after pp512 with the per-group profile
	local label=$1 m=$2
	shift 2
	have_time 40 "profile $label" || return
	env PROVEN_LEDGER=off "$@" timeout 150 $B/proven bench --backend cuda --model "$m" --pp 64 --depth 512 --tg 64 \
		--reps 2 --profile >"$OUT/.b" 2>"$OUT/.e"
	[ $? = 0 ] || status=1
	cat "$OUT/.e" >>"$LOG"
	grep '^{' "$OUT/.b" | sed "s/^{/{\"name\":\"$label\",/" >>"$JSON"
	say "profile $label: $(grep -o '"tg_tok_s":[0-9.]*\|"tg_bw_share":[0-9.]*\|"kernels_per_token":[0-9]*' "$OUT/.b" | tr '\n' ' ') $(grep -i 'profile' "$OUT/.e" | head -2)"
	grep -E '^\| ' "$OUT/.b" | grep -v '^| ---' | tee -a "$SUM" >/dev/null
}
ncu_decode() { # label model env...: every kernel's time and DRAM bytes over a 1-token prompt and 3 tokens
	command -v ncu >/dev/null && have_time 90 "ncu $1" || return
	local label=$1 m=$2 t=$(date +%s) f=$OUT/ncu-$1.csv
	shift 2
	env PROVEN_LEDGER=off "$@" timeout 240 ncu --clock-control none --metrics gpu__time_duration.sum,dram__bytes_read.sum,sm__cycles_elapsed.avg.per_second \
		--csv --print-units base --kernel-name-base demangled -c 2500 $B/proven bench --backend cuda --model "$m" \
		--pp 1 --tg 3 --reps 1 >"$f" 2>&1
	say "ncu $label: rc $? ($(grep -c gpu__time_duration "$f") kernels, $(($(date +%s) - t)) s)"
}
ncu_detail() { # label model env...: the full sections of 16 decode kernels in the middle of a token
	command -v ncu >/dev/null && have_time 90 "ncu detail $1" || return
	local label=$1 m=$2 t=$(date +%s) f=$OUT/ncu-detail-$1.txt
	shift 2
	env PROVEN_LEDGER=off "$@" timeout 240 ncu --clock-control none --section SpeedOfLight --section Occupancy \
		--section LaunchStats --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis \
		--kernel-name-base demangled -k "regex:gemv|rmsnorm|attn|act_quant" --launch-skip ${N_SKIP:-1200} \
		--launch-count 16 $B/proven bench --backend cuda --model "$m" --pp 1 --tg 3 --reps 1 >"$f" 2>&1
	say "ncu detail $label: rc $? ($(grep -c 'Duration' "$f") kernels, $(($(date +%s) - t)) s)"
}
decode_run() { # name bin model [env...]: one decode tg128 after pp512 with $B/bin, its JSON named name
	local name=$1 bin=$2 m=$3
	shift 3
	env PROVEN_LEDGER=off "$@" timeout 150 $B/$bin bench --backend cuda --model "$m" --pp 512 --tg 128 --reps 3 \
		--json-only >"$OUT/.b" 2>>"$LOG"
	[ $? = 0 ] || status=1
	sed "s/^{/{\"name\":\"$name\",/" "$OUT/.b" | grep '^{' >>"$JSON"
	say "decode $name: $(grep -o '"tg_tok_s":[0-9.]*\|"tg_bw_share":[0-9.]*\|"kernels_per_token":[0-9]*' "$OUT/.b" | tr '\n' ' ')"
}
ab_old() { # label model env...: decode, $B/proven-old (the baseline build) and $B/proven alternating, twice
	[ -x $B/proven-old ] || return
	local label=$1 m=$2 r bin
	shift 2
	for r in 1 2; do
		for bin in proven-old proven; do
			have_time 25 "$label $bin" && decode_run "$label $bin" $bin "$m" "$@" || return
		done
	done
}
ab_env() { # label model var [env...]: decode, var over N_AB_VALS alternating, twice
	local label=$1 m=$2 var=$3 r v
	shift 3
	[ $# -gt 0 ] && label="$label $*" # the fixed environment in the name too (set before var: var wins)
	for r in 1 2; do
		for v in ${N_AB_VALS:-0 1}; do
			have_time 25 "$label $var=$v" && decode_run "$label $var=$v" proven "$m" "$@" $var=$v || return
		done
	done
}
arms() { # label model [arms]: decode over arms (default O_ARMS; ';'-separated: "base" the defaults,
	# "old" $B/proven-old, else an environment such as "PV_CUDA_Q8_EARLY=1 PV_CUDA_Q8_ROWS=3"),
	# alternating, O_ROUNDS times (2)
	local label=$1 m=$2 a r
	local -a A
	IFS=';' read -ra A <<<"${3:-${O_ARMS:-base}}"
	for r in $(seq "${O_ROUNDS:-2}"); do
		for a in "${A[@]}"; do
			case "$a" in
			old) [ -x $B/proven-old ] || continue
			     have_time 25 "$label [$a]" && decode_run "$label [$a]" proven-old "$m" || return ;;
			base) have_time 25 "$label [$a]" && decode_run "$label [$a]" proven "$m" || return ;;
			*) have_time 25 "$label [$a]" && decode_run "$label [$a]" proven "$m" $a || return ;;
			esac
		done
	done
}

small_courts() { # tag [replay]: courts on small files: a tiny Qwen3.5-MoE Q4_K_M file drafting for
	# itself (replay: also with replay rollback) and with n-grams, the qwen3 / qwen3_5 / qwen3_next
	# fixtures with n-grams
	local tag=$1 m=$W/tiny-q35moe-q4_k_m.gguf d
	if $B/proven synth --preset tiny --arch qwen35moe --type q4_k_m --out "$m" --quiet >>"$LOG" 2>&1; then
		[ "${2:-}" = replay ] &&
			court "tiny qwen35moe q4_k_m self-draft replay-rollback $tag" "$m" --draft "$m" --draft-fixed --rollback replay \
				--max-tokens 16 --limit 12
		court "tiny qwen35moe q4_k_m self-draft $tag" "$m" --draft "$m" --draft-fixed --max-tokens 16 --limit 16
		court "tiny qwen35moe q4_k_m ngram $tag" "$m" --draft ngram --draft-fixed --max-tokens 16 --limit 16
		rm -f "$m"
	fi
	for d in $FX/qwen3 $FX/qwen3_5 $FX/qwen3_next; do
		court "$(basename $d) ngram $tag" "$d" --draft ngram --draft-fixed --max-tokens 16 --limit 24
	done
}

model_rows() { # preset type label
	local m=$W/$1-$2.gguf
	have_time 150 "$1 $2" || return
	synth "$1" "$2" "$m" || return
	curve "$3" "$m"
	for tr in $TR/*.jsonl; do
		have_time 60 "replay $3 $(basename "$tr")" && replay "$3" "$m" "$tr"
	done
	rm -f "$m"
}

if [ "$PART" = a ]; then
	runtest test_cuda_api $B/cuda/test_cuda_api
	runtest "test_cuda fixtures" $B/cuda/test_cuda fixtures
	# the exactness court on CUDA: speculative == plain, bitwise, on every fixture
	for d in $FX/*/; do
		d=${d%/}
		n=$(basename "$d")
		[ -f "$d/config.json" ] || continue
		court "$n ngram" "$d" --draft ngram --draft-fixed --max-tokens 16 --limit 40
		if grep -qE '"model_type": *"qwen3_(5|next)' "$d/config.json"; then
			court "$n ngram replay-rollback" "$d" --draft ngram --draft-fixed --rollback replay --max-tokens 16 --limit 24
		fi
	done
	court "qwen3 draft qwen3_odd" $FX/qwen3 --draft $FX/qwen3_odd --draft-fixed --max-tokens 24 --limit 40
	court "qwen3_5 draft itself" $FX/qwen3_5 --draft $FX/qwen3_5 --draft-fixed --max-tokens 24 --limit 40
	court "qwen3_5 cascade replay-rollback" $FX/qwen3_5 --draft cascade:$FX/qwen3_5 --draft-fixed --rollback replay \
		--max-tokens 24 --limit 24
	court "qwen3_5 sampled ngram (temp 0.8)" $FX/qwen3_5 --draft ngram --draft-fixed --temp 0.8 --max-tokens 24 --limit 24
	model_rows qwen3-8b bf16 "Qwen3-8B BF16"
	model_rows qwen3.5-9b bf16 "Qwen3.5-9B BF16"
elif [ "$PART" = d ]; then
	# one weight row per warp in multi-row GEMVs (cuda.gemv_rows_multi): every GEMV type and row
	# count against the reference and bitwise across row counts, the API's bitwise check, then the
	# verify-window curve and the n-gram replay on the 8B and 30B-A3B shapes with it on and off
	for env in PV_CUDA_GEMV_RM=1 PV_CUDA_GEMV_RM=0; do
		for sec in gemv fixtures; do
			runtest "$env test_cuda $sec" env $env $B/cuda/test_cuda $sec
		done
	done
	runtest test_cuda_api $B/cuda/test_cuda_api
	for pr in "qwen3-8b bf16 Qwen3-8B_BF16" "qwen3-30b-a3b q8_0 Qwen3-30B-A3B_Q8_0"; do
		set -- $pr
		m=$W/$1-$2.gguf
		have_time 120 "rows_multi on $3" || continue
		synth "$1" "$2" "$m" || continue
		for rm in 1 0; do
			PV_CUDA_GEMV_RM=$rm curve "$3 rows_multi=$rm" "$m"
		done
		for tr in $TR/*.jsonl; do
			have_time 60 "replay $3" && PV_CUDA_GEMV_RM=1 replay "$3 rows_multi=1" "$m" "$tr"
		done
		rm -f "$m"
	done
elif [ "$PART" = e ]; then
	# the shared walk of multi-row GEMVs (cuda.gemv_shared) and the window graphs
	# (cuda.window_graphs): the host emulation, the GEMV tests per variant, the fixtures and the
	# API's bitwise checks, a few courts, then the verify-window curve per variant and the
	# replays on the 8B BF16 and 30B-A3B Q8_0 shapes
	[ -x $B/tests/test_cuda_host ] && runtest test_cuda_host $B/tests/test_cuda_host
	for env in PV_CUDA_GEMV_SHARED=2 PV_CUDA_GEMV_SHARED=1 PV_CUDA_GEMV_SHARED=0 PV_CUDA_GEMV_RM=2; do
		runtest "$env test_cuda gemv" env $env $B/cuda/test_cuda gemv
	done
	runtest "test_cuda fixtures" $B/cuda/test_cuda fixtures
	runtest "test_cuda_api (knobs and multi-row variants)" env PV_CUDA_API_ONLY=knobs $B/cuda/test_cuda_api
	# the courts with the in-place shared walk (the candidate default)
	export PV_CUDA_GEMV_SHARED=2
	court "qwen3 ngram" $FX/qwen3 --draft ngram --draft-fixed --max-tokens 16 --limit 40
	court "qwen3 draft qwen3_odd" $FX/qwen3 --draft $FX/qwen3_odd --draft-fixed --max-tokens 24 --limit 40
	court "qwen3_moe draft itself" $FX/qwen3_moe --draft $FX/qwen3_moe --draft-fixed --max-tokens 24 --limit 24
	court "qwen3_5 draft itself" $FX/qwen3_5 --draft $FX/qwen3_5 --draft-fixed --max-tokens 24 --limit 24
	court "qwen3_5_moe draft itself" $FX/qwen3_5_moe --draft $FX/qwen3_5_moe --draft-fixed --max-tokens 24 --limit 24
	unset PV_CUDA_GEMV_SHARED
	for pr in "qwen3-8b bf16 Qwen3-8B_BF16" "qwen3-30b-a3b q8_0 Qwen3-30B-A3B_Q8_0" "qwen3.5-35b-a3b q8_0 Qwen3.5-35B-A3B_Q8_0" \
		"qwen3.5-9b bf16 Qwen3.5-9B_BF16"; do
		set -- $pr
		m=$W/$1-$2.gguf
		have_time 150 "shared walk on $3" || continue
		synth "$1" "$2" "$m" || continue
		for v in "PV_CUDA_GEMV_SHARED=2" "PV_CUDA_GEMV_SHARED=1" "PV_CUDA_GEMV_SHARED=2 PV_CUDA_WINDOW_GRAPHS=0"; do
			have_time 40 "curve $3 $v" && (export $v; curve "$3 $v" "$m")
		done
		for tr in $TR/*.jsonl; do
			have_time 45 "replay $3" && (export PV_CUDA_GEMV_SHARED=2; replay "$3 gemv_shared=2" "$m" "$tr")
		done
		rm -f "$m"
	done
elif [ "$PART" = f ]; then
	# the KV cache types on CUDA (f16, bf16: the API's checks, the fixtures, tg at depth 4096 on
	# the 8B against the f32 cache, alternating), the multi-row GEMV variants' curves and Nsight
	# Compute on the shared walk, the 35B-A3B prefill disagreement by weight type, the replays
	runtest "test_cuda_api (cache types)" env PV_CUDA_API_ONLY=cache $B/cuda/test_cuda_api
	grep -E 'cache: CUDA vs CPU|prefill vs exact' "$OUT/.t" | head -40 | tee -a "$SUM" >/dev/null
	runtest "test_cuda fixtures" $B/cuda/test_cuda fixtures
	m=$W/qwen3-8b-bf16.gguf
	if synth qwen3-8b bf16 "$m"; then
		curve "Qwen3-8B_BF16 default" "$m" 1 16
		(export PV_CUDA_GEMV_SHARED=2; curve "Qwen3-8B_BF16 PV_CUDA_GEMV_SHARED=2" "$m" 2 4 8 16)
		(export PV_CUDA_GEMV_SHARED=2 PV_CUDA_GEMV_RM=2; curve "Qwen3-8B_BF16 SHARED=2 RM=2" "$m" 16)
		(export PV_CUDA_GEMV_RM=2; curve "Qwen3-8B_BF16 PV_CUDA_GEMV_RM=2" "$m" 8 16)
		(export PV_CUDA_GEMV_SHARED=0; curve "Qwen3-8B_BF16 PV_CUDA_GEMV_SHARED=0" "$m" 2 4 8)
		(export PV_CUDA_WINDOW_GRAPHS=0; curve "Qwen3-8B_BF16 PV_CUDA_WINDOW_GRAPHS=0" "$m" 2 4)
		for rep in 1 2; do
			for ct in f32 f16 bf16; do
				$B/proven bench --backend cuda --model "$m" --cache-type $ct --depth 4096 --pp 512 --tg 128 --reps 2 \
					--json-only >"$OUT/.b" 2>>"$LOG"
				j=$(grep '^{' "$OUT/.b" | tail -1)
				echo "$j" >>"$JSON"
				say "kv $ct rep $rep Qwen3-8B_BF16 depth 4096: tg $(echo "$j" | grep -o '"tg_tok_s":[0-9.]*' | cut -d: -f2) tok/s, pp512 $(echo "$j" | grep -o '"pp_tok_s":[0-9.]*' | cut -d: -f2) tok/s"
			done
		done
		for tr in $TR/*.jsonl; do
			have_time 45 "replay 8B" && replay "Qwen3-8B_BF16" "$m" "$tr"
		done
		rm -f "$m"
	fi
	for ty in q8_0 bf16 f16; do
		have_time 60 "prefill 35B-A3B $ty" || continue
		m=$W/q35moe-8l-$ty.gguf
		if $B/proven synth --preset qwen3.5-35b-a3b --type $ty --layers 8 --out "$m" --quiet >>"$LOG" 2>&1; then
			PV_PREFILL_MODEL=$m $B/cuda/test_cuda prefill-bench >"$OUT/.t" 2>&1
			cat "$OUT/.t" >>"$LOG"
			say "prefill 35B-A3B 8 layers $ty: $(grep -iE 'rel|error|pp512' "$OUT/.t" | tr '\n' ' ' | cut -c1-400)"
			rm -f "$m"
		else
			say "synth 35B-A3B 8 layers $ty failed"
		fi
	done
	if command -v ncu >/dev/null && have_time 100 "ncu"; then
		m=$W/qwen3-4b-bf16.gguf
		if synth qwen3-4b bf16 "$m"; then
			for v in "1 8" "1 16" "2 8"; do
				set -- $v
				r=$2
				f=$OUT/ncu-shared$1-rows$r.txt
				PV_CUDA_GEMV_SHARED=$1 timeout 60 ncu --kernel-name-base demangled -k "regex:gemv_kernel<0, $r, 4, $1>" \
					--launch-skip 4 --launch-count 3 \
					--section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats \
					--section WarpStateStats --section SchedulerStats $B/proven bench --backend cuda --model "$m" --pp $r \
					--tg 2 --reps 1 >"$f" 2>&1
				say "ncu shared=$1 rows $r: rc $? ($(grep -c 'Duration' "$f") kernels)"
			done
			rm -f "$m"
		fi
	fi
elif [ "$PART" = i ]; then
	# the first run of this session's new CUDA code, each test under a timeout so that one stuck
	# part cannot eat the call: the 9B shape's 16-row step per switch, continuous batching's and
	# the MTP head's API checks, the prefill's split weights; then the courts of both
	m=$W/qwen3.5-9b-bf16.gguf
	if synth qwen3.5-9b bf16 "$m"; then
		for v in "PV_CUDA_GEMV_SHARED=2 PV_CUDA_WINDOW_GRAPHS=1" "PV_CUDA_GEMV_SHARED=2 PV_CUDA_WINDOW_GRAPHS=0" \
			"PV_CUDA_GEMV_SHARED=1 PV_CUDA_WINDOW_GRAPHS=1" "PV_CUDA_GEMV_SHARED=2 PV_CUDA_PDL=0"; do
			t=$(date +%s)
			env $v timeout ${HANG_S:-15} $B/proven bench --backend cuda --model "$m" --pp 16 --tg 4 --depth 512 --reps 1 \
				--json-only >"$OUT/.b" 2>>"$LOG"
			rc=$?
			say "9B rows 16 $v: rc $rc ($(($(date +%s) - t)) s) $(grep -o '"pp_tok_s":[0-9.]*' "$OUT/.b" | tail -1)"
		done
		rm -f "$m"
	fi
	runtest "test_cuda_api many" timeout 120 env PV_CUDA_API_ONLY=many $B/cuda/test_cuda_api
	runtest "test_cuda_api mtp" timeout 90 env PV_CUDA_API_ONLY=mtp $B/cuda/test_cuda_api
	grep -E ' mtp ' "$OUT/.t" | head -20 | tee -a "$SUM" >/dev/null
	runtest "test_cuda prefill (split weights)" timeout 90 $B/cuda/test_cuda prefill
	grep -E 'prefill dequant|worst prefill' "$OUT/.t" | head -5 | tee -a "$SUM" >/dev/null
	court "qwen3_5 mtp" $FX/qwen3_5 --draft mtp --draft-fixed --max-tokens 24 --limit 24
	court "qwen3_5 mtp replay-rollback" $FX/qwen3_5 --draft mtp --draft-fixed --rollback replay --draft-max 3 \
		--max-tokens 24 --limit 16
elif [ "$PART" = h ]; then
	# first the 16-row step on the Qwen3.5-9B shape, which did not finish in a bench on
	# 2026-12-02 (gemv_shared=2, window graphs 1): each variant alone under a timeout (rc 124:
	# still running) to say which switch it follows; then the precise prefill with split weights
	# (the dequantization's low halves bitwise, the fixtures' prefill, the 35B-A3B Q8_0 shape's
	# last-row error against the exact path), then the 8B curve with the new default
	m=$W/qwen3.5-9b-bf16.gguf
	if synth qwen3.5-9b bf16 "$m"; then
		for v in "PV_CUDA_GEMV_SHARED=2 PV_CUDA_WINDOW_GRAPHS=1" "PV_CUDA_GEMV_SHARED=2 PV_CUDA_WINDOW_GRAPHS=0" \
			"PV_CUDA_GEMV_SHARED=1 PV_CUDA_WINDOW_GRAPHS=1" "PV_CUDA_GEMV_SHARED=0 PV_CUDA_WINDOW_GRAPHS=1" \
			"PV_CUDA_GEMV_SHARED=2 PV_CUDA_PDL=0"; do
			t=$(date +%s)
			env $v timeout ${HANG_S:-20} $B/proven bench --backend cuda --model "$m" --pp 16 --tg 4 --depth 512 --reps 1 \
				--json-only >"$OUT/.b" 2>>"$LOG"
			rc=$?
			say "9B rows 16 $v: rc $rc ($(($(date +%s) - t)) s) $(grep -o '"pp_tok_s":[0-9.]*' "$OUT/.b" | tail -1)"
		done
		for r in 12 15; do
			env PV_CUDA_GEMV_SHARED=2 timeout ${HANG_S:-20} $B/proven bench --backend cuda --model "$m" --pp $r --tg 4 \
				--depth 512 --reps 1 --json-only >"$OUT/.b" 2>>"$LOG"
			say "9B rows $r SHARED=2: rc $? $(grep -o '"pp_tok_s":[0-9.]*' "$OUT/.b" | tail -1)"
		done
		rm -f "$m"
	fi
	runtest "test_cuda prefill (split weights)" $B/cuda/test_cuda prefill
	grep -E 'prefill dequant|worst prefill' "$OUT/.t" | head -5 | tee -a "$SUM" >/dev/null
	for ty in q8_0 bf16; do
		have_time 60 "prefill 35B-A3B $ty" || continue
		m=$W/q35moe-8l-$ty.gguf
		if $B/proven synth --preset qwen3.5-35b-a3b --type $ty --layers 8 --out "$m" --quiet >>"$LOG" 2>&1; then
			PV_PREFILL_MODEL=$m $B/cuda/test_cuda prefill-bench >"$OUT/.t" 2>&1
			cat "$OUT/.t" >>"$LOG"
			say "prefill 35B-A3B 8 layers $ty: $(grep -E 'pp512|last row' "$OUT/.t" | tr -s ' ' | tr '\n' ' ' | cut -c1-600)"
			rm -f "$m"
		fi
	done
	# where the MoE prompt's time goes (0.52x llama.cpp on the 35B-A3B): Nsight Compute on the
	# grouped expert GEMM, the expert sort and the DeltaNet rule of a 4-layer file
	if command -v ncu >/dev/null && have_time 90 "ncu prefill"; then
		m=$W/q35moe-4l-q8_0.gguf
		if $B/proven synth --preset qwen3.5-35b-a3b --type q8_0 --layers 4 --out "$m" --quiet >>"$LOG" 2>&1; then
			f=$OUT/ncu-prefill-35b.txt
			timeout 120 ncu --kernel-name-base demangled -k "regex:ggemm|moe_sort|dquad" \
				--launch-skip 12 --launch-count 12 --section SpeedOfLight --section Occupancy --section LaunchStats \
				--section WarpStateStats --section MemoryWorkloadAnalysis $B/proven bench --backend cuda --model "$m" \
				--pp 512 --tg 1 --reps 1 >"$f" 2>&1
			say "ncu prefill 35B-A3B: rc $? ($(grep -c 'Duration' "$f") kernels)"
			rm -f "$m"
		fi
	fi
elif [ "$PART" = m ]; then
	runtest "test_cuda_api" timeout 200 $B/cuda/test_cuda_api
	for t in fixtures quant prefill; do have_time 60 "test_cuda $t" && runtest "test_cuda $t" timeout 150 $B/cuda/test_cuda $t; done
	m=$W/q35moe-q4_k_m.gguf
	if have_time 120 "35B-A3B replays" && synth qwen3.5-35b-a3b q4_k_m "$m"; then
		for q in 0 1; do
			for tr in $TR/*.jsonl; do
				have_time 60 "replay q8_act=$q $(basename "$tr")" && PV_CUDA_Q8_ACT=$q replay "35B-A3B Q4_K_M q8_act=$q" "$m" "$tr"
			done
		done
		rm -f "$m"
	fi
elif [ "$PART" = o ]; then
	# session 7 (2026-12-02): the integer GEMVs' first weights before the PDL wait (cuda.q8_early),
	# two Q4_K rows a pass (cuda.q8_rows=3); tests, then the arms of O_ARMS on each model of O_MODELS
	# (';'-separated "preset:type:label"), the profile per arm of O_PROF (';'-separated environments,
	# "base" the defaults) on the first model, courts with O_COURT_ENV (O_COURTS=1)
	runtest "test_cuda qgemv" timeout 150 $B/cuda/test_cuda qgemv
	for t in ${O_TESTS:-}; do runtest "test_cuda $t" timeout 150 $B/cuda/test_cuda $t; done
	[ -x $B/tests/test_cuda_knobs ] && runtest "test_cuda_knobs" timeout 60 $B/tests/test_cuda_knobs
	for part in ${O_API:-}; do
		if [ "$part" = all ]; then
			runtest "test_cuda_api" timeout 420 $B/cuda/test_cuda_api
		else
			runtest "test_cuda_api $part" timeout 200 env PV_CUDA_API_ONLY=$part $B/cuda/test_cuda_api
		fi
		grep -E 'q8_act=2 vs' "$OUT/.t" | head -4 | tee -a "$SUM" >/dev/null
	done
	set_env() { local kv; for kv in ${O_COURT_ENV:-}; do export "$kv"; done; }
	unset_env() { local kv; for kv in ${O_COURT_ENV:-}; do unset "${kv%%=*}"; done; }
	if [ -n "${O_COURTS:-}" ]; then
		set_env
		small_courts "[${O_COURT_ENV:-}]"
		unset_env
	fi
	if [ -n "${O_SAN:-}" ] && command -v compute-sanitizer >/dev/null; then # memcheck to completion
		have_time 60 "memcheck test_cuda quick" &&
			runtest "compute-sanitizer memcheck test_cuda quick" timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 \
				$B/cuda/test_cuda quick
		grep -E 'ERROR SUMMARY' "$OUT/.t" | head -2 | tee -a "$SUM" >/dev/null
		for d in $FX/qwen3 $FX/qwen3_5 $FX/qwen3_next; do # a decode graph of each kind, every kernel of it
			have_time 60 "memcheck decode $(basename $d)" || break
			runtest "compute-sanitizer memcheck decode $(basename $d)" timeout 150 compute-sanitizer --tool memcheck \
				--error-exitcode 9 env PROVEN_LEDGER=off $B/proven bench --backend cuda --model "$d" --pp 16 --tg 16 --reps 1
			grep -E 'ERROR SUMMARY' "$OUT/.t" | head -2 | tee -a "$SUM" >/dev/null
		done
	fi
	first=1
	IFS=';' read -ra MODELS <<<"${O_MODELS:-qwen3-8b:q4_k_m:8B Q4_K_M}"
	for spec in "${MODELS[@]}"; do
		[ "$spec" = none ] && continue
		IFS=':' read -r preset type label armvar <<<"$spec"
		m=$W/$preset-$type.gguf
		have_time 100 "$label" && synth "$preset" "$type" "$m" || continue
		arms "$label" "$m" "${armvar:+${!armvar}}"
		if [ $first = 1 ]; then
			IFS=';' read -ra P <<<"${O_PROF:-}"
			for a in "${P[@]}"; do
				[ "$a" = base ] && prof "$label [base]" "$m" || prof "$label [$a]" "$m" $a
			done
			IFS=';' read -ra P <<<"${O_CURVE:-}" # the exact step of 4, 8 and 16 rows per arm, alternating twice
			for r in 1 2; do
				for a in "${P[@]}"; do
					have_time 60 "curve $label [$a]" || break
					(for kv in ${a#base}; do export "$kv"; done; curve "$label [$a]" "$m" 4 8 16)
				done
			done
			if [ -n "${O_COURTS:-}" ] && have_time 90 "court $label"; then
				set_env
				court "$label self-draft [${O_COURT_ENV:-}]" "$m" --draft "$m" --draft-fixed --max-tokens 16 --limit 4
				unset_env
			fi
		fi
		first=0
		rm -f "$m"
	done
elif [ "$PART" = n ]; then
	# session 6 (2026-12-02): where a Q4_K_M decode token's time goes with cuda.q8_act
	runtest "test_cuda qgemv" timeout 150 $B/cuda/test_cuda qgemv
	for t in ${N_TESTS:-}; do runtest "test_cuda $t" timeout 150 $B/cuda/test_cuda $t; done
	for part in ${N_API:-}; do
		if [ "$part" = all ]; then
			runtest "test_cuda_api" timeout 420 $B/cuda/test_cuda_api
			grep -E 'q8_act' "$OUT/.t" | head -4 | tee -a "$SUM" >/dev/null
		else
			runtest "test_cuda_api $part" timeout 200 env PV_CUDA_API_ONLY=$part $B/cuda/test_cuda_api
		fi
	done
	[ -n "${N_COURTS:-}" ] && small_courts "(cluster norm)" replay # the defaults (cuda.q8_act=2, the cluster norm)
	m=$W/qwen3-8b-q4_k_m.gguf
	if have_time 120 "8B q4_k_m" && synth qwen3-8b q4_k_m "$m"; then
		ab_old "8B Q4_K_M q8_act=1" "$m" PV_CUDA_Q8_ACT=1
		[ -n "${N_AB:-}" ] && ab_env "8B Q4_K_M" "$m" $N_AB PV_CUDA_Q8_ACT=1
		for q in ${N_PROF_Q8:-1 0}; do prof "8B Q4_K_M q8_act=$q" "$m" PV_CUDA_Q8_ACT=$q; done
		if [ -n "${N_COURTS:-}" ] && have_time 90 "court 8B"; then
			court "8B Q4_K_M self-draft (defaults)" "$m" --draft "$m" --draft-fixed --max-tokens 16 --limit 4
		fi
		[ -n "${N_NCU:-}" ] && ncu_decode q4km-q8 "$m" PV_CUDA_Q8_ACT=1
		[ -n "${N_DETAIL:-}" ] && ncu_detail q4km-q8 "$m" PV_CUDA_Q8_ACT=1
		rm -f "$m"
	fi
	m=$W/qwen3-8b-q8_0.gguf
	if [ -n "${N_Q8:-}" ] && have_time 120 "8B q8_0" && synth qwen3-8b q8_0 "$m"; then
		ab_old "8B Q8_0" "$m" PV_CUDA_Q8_ACT=0
		[ -n "${N_AB:-}" ] && ab_env "8B Q8_0" "$m" $N_AB PV_CUDA_Q8_ACT=0
		prof "8B Q8_0" "$m" PV_CUDA_Q8_ACT=0
		[ -n "${N_NCU:-}" ] && ncu_decode q80 "$m" PV_CUDA_Q8_ACT=0
		[ -n "${N_DETAIL:-}" ] && ncu_detail q80 "$m" PV_CUDA_Q8_ACT=0
		rm -f "$m"
	fi
	m=$W/qwen3-8b-bf16.gguf
	if [ -n "${N_BF16:-}" ] && have_time 120 "8B bf16" && synth qwen3-8b bf16 "$m"; then
		[ -n "${N_AB:-}" ] && ab_env "8B BF16" "$m" $N_AB
		prof "8B BF16" "$m"
		rm -f "$m"
	fi
	m=$W/q35moe-q4_k_m.gguf
	if [ -n "${N_35:-}" ] && have_time 150 "35B-A3B q4_k_m" && synth qwen3.5-35b-a3b q4_k_m "$m"; then
		[ -n "${N_AB:-}" ] && ab_env "35B-A3B Q4_K_M" "$m" $N_AB PV_CUDA_Q8_ACT=1
		prof "35B-A3B Q4_K_M q8_act=1" "$m" PV_CUDA_Q8_ACT=1
		rm -f "$m"
	fi
	if [ -n "${N_SAN:-}" ] && command -v compute-sanitizer >/dev/null; then # memcheck / racecheck to completion
		for st in "memcheck norm" "memcheck quick" "racecheck norm"; do
			set -- $st
			have_time 60 "sanitizer $st" || break
			runtest "compute-sanitizer $1 test_cuda $2" timeout 150 compute-sanitizer --tool $1 --error-exitcode 9 $B/cuda/test_cuda $2
			grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|hazard' "$OUT/.t" | head -3 | tee -a "$SUM" >/dev/null
		done
		set --
	fi
elif [ "$PART" = l ]; then
	# session 5 (2026-12-02): cuda.q8_act. PROVEN_LEDGER=off where only the JSON line is kept.
	runtest "test_cuda qgemv (bitwise the CPU's fast numerics)" timeout 150 $B/cuda/test_cuda qgemv
	grep -E 'DIFFERS' "$OUT/.t" | head -5 | tee -a "$SUM" >/dev/null
	runtest "test_cuda gemv (the float GEMVs unchanged)" timeout 150 $B/cuda/test_cuda gemv
	runtest "test_cuda_api mtp" timeout 150 env PV_CUDA_API_ONLY=mtp $B/cuda/test_cuda_api
	ab() { # label model reps: decode tg128 after pp512, q8_act off / on alternating
		for r in $(seq ${3:-2}); do
			for q in 0 1; do
				have_time 25 "$1 q8_act=$q" || return
				env PROVEN_LEDGER=off PV_CUDA_Q8_ACT=$q timeout 150 $B/proven bench --backend cuda --model "$2" --pp 512 \
					--tg 128 --reps 3 --json-only >"$OUT/.b" 2>>"$LOG"
				[ $? = 0 ] || status=1
				sed "s/^{/{\"name\":\"$1 q8_act=$q\",/" "$OUT/.b" | grep '^{' >>"$JSON"
				say "decode $1 q8_act=$q: $(grep -o '"pp_tok_s":[0-9.]*\|"tg_tok_s":[0-9.]*\|"tg_bw_share":[0-9.]*\|"kernels_per_token":[0-9]*' "$OUT/.b" | tr '\n' ' ')"
			done
		done
	}
	export PV_CUDA_Q8_ACT=1
	m=$W/tiny-q35moe-q4_k_m.gguf
	if $B/proven synth --preset tiny --arch qwen35moe --type q4_k_m --out "$m" --quiet >>"$LOG" 2>&1; then
		court "tiny qwen35moe q4_k_m self-draft replay-rollback (q8_act)" "$m" --draft "$m" --draft-fixed --rollback replay --max-tokens 16 --limit 12
		court "tiny qwen35moe q4_k_m self-draft (q8_act)" "$m" --draft "$m" --draft-fixed --max-tokens 16 --limit 16
		rm -f "$m"
	fi
	m=$W/tiny-q3-q8_0.gguf
	if $B/proven synth --preset tiny --arch qwen3 --type q8_0 --out "$m" --quiet >>"$LOG" 2>&1; then
		court "tiny qwen3 q8_0 self-draft (q8_act)" "$m" --draft "$m" --draft-fixed --max-tokens 16 --limit 16
		rm -f "$m"
	fi
	unset PV_CUDA_Q8_ACT
	m=$W/qwen3-8b-q4_k_m.gguf
	if have_time 120 "8B q4_k_m" && synth qwen3-8b q4_k_m "$m"; then
		ab "8B Q4_K_M" "$m" 2
		for q in 0 1; do have_time 60 "curve q8_act=$q" && PV_CUDA_Q8_ACT=$q curve "8B Q4_K_M q8_act=$q" "$m" 1 4 16; done
		if have_time 90 "court 8B"; then
			export PV_CUDA_Q8_ACT=1
			court "8B Q4_K_M self-draft (q8_act)" "$m" --draft "$m" --draft-fixed --max-tokens 16 --limit 4
			unset PV_CUDA_Q8_ACT
		fi
		rm -f "$m"
	fi
	m=$W/qwen3-8b-q8_0.gguf
	if have_time 120 "8B q8_0" && synth qwen3-8b q8_0 "$m"; then
		ab "8B Q8_0" "$m" 2
		rm -f "$m"
	fi
	m=$W/q35moe-q4_k_m.gguf
	if [ -z "${L_SKIP35:-}" ] && have_time 150 "35B-A3B q4_k_m" && synth qwen3.5-35b-a3b q4_k_m "$m"; then
		ab "35B-A3B Q4_K_M" "$m" 1
		rm -f "$m"
	fi
	m=$W/qwen3-8b-bf16.gguf
	if [ -n "${L_KV:-}" ] && have_time 120 "kv depth" && synth qwen3-8b bf16 "$m"; then
		for ct in f32 q8_0 f32 q8_0; do
			have_time 30 "kv $ct" || break
			PROVEN_LEDGER=off timeout 120 $B/proven bench --backend cuda --model "$m" --cache-type $ct --depth 4096 --pp 512 \
				--tg 128 --reps 2 --json-only >"$OUT/.b" 2>>"$LOG"
			sed "s/^{/{\"name\":\"8B BF16 kv $ct depth 4096\",/" "$OUT/.b" | grep '^{' >>"$JSON"
			say "kv $ct 8B BF16 depth 4096: $(grep -o '"tg_tok_s":[0-9.]*\|"kv_bytes_per_token":[0-9.]*' "$OUT/.b" | tr '\n' ' ')"
		done
		rm -f "$m"
	fi
elif [ "$PART" = p ]; then
	for t in ${P_TESTS-prefill}; do
		runtest "test_cuda $t" timeout 200 $B/cuda/test_cuda $t
		grep -E 'worst prefill|sync expert' "$OUT/.t" | head -4 | tee -a "$SUM" >/dev/null
	done
	for part in ${P_API:-}; do
		if [ "$part" = all ]; then runtest "test_cuda_api" timeout 200 $B/cuda/test_cuda_api
		else runtest "test_cuda_api $part" timeout 150 env PV_CUDA_API_ONLY=$part $B/cuda/test_cuda_api; fi
	done
	[ -n "${P_KNOBS:-}" ] && runtest "test_cuda_knobs" timeout 60 $B/tests/test_cuda_knobs
	[ -n "${P_COURTS:-}" ] && small_courts s8
	IFS=';' read -r -a parms <<<"${P_ARMS:-base;PV_CUDA_PREFILL_MOE=sync}"
	receipt() { # label model: proven bench pp512 + tg32 with the defaults, its receipt line kept (P_RECEIPTS=1)
		[ -n "${P_RECEIPTS:-}" ] && have_time 60 "receipt $1" || return 0
		local t=$(date +%s)
		timeout 200 $B/proven bench --backend cuda --model "$2" --pp 512 --tg 32 --reps 3 --json-only >"$OUT/.b" 2>>"$LOG"
		local rc=$?
		[ $rc = 0 ] || status=1
		grep '^{' "$OUT/.b" >>"$JSON"
		say "receipt $1: rc $rc $(grep -o '"pp_tok_s":[0-9.]*\|"tg_tok_s":[0-9.]*' "$OUT/.b" | tr '\n' ' ')($(($(date +%s) - t)) s)"
	}
	pbench() { # label model arm [timeout]: test_cuda prefill-bench with the arm's environment ("base": none;
		# "old": $B/cuda/test_cuda-old, the baseline build, with none)
		local e=$3 t=$(date +%s) bin=$B/cuda/test_cuda
		[ "$e" = base ] && e=
		[ "$e" = old ] && e= && bin=$B/cuda/test_cuda-old
		env $e PV_PREFILL_MODEL=$2 timeout ${4:-150} $bin prefill-bench >"$OUT/.t" 2>&1
		local rc=$?
		cat "$OUT/.t" >>"$LOG"
		say "prefill $1 [$3]: rc $rc $(grep -E 'pp512|pp4096|last row' "$OUT/.t" | tr -s ' ' | tr '\n' ' ' | cut -c1-700) ($(($(date +%s) - t)) s)"
	}
	m=$W/q35moe-8l-q8_0.gguf
	if have_time 60 "prefill 35B-A3B 8 layers" && $B/proven synth --preset qwen3.5-35b-a3b --type q8_0 --layers 8 --out "$m" \
		--quiet >>"$LOG" 2>&1; then
		for r in $(seq 1 ${P_ROUNDS:-2}); do
			for arm in "${parms[@]}"; do have_time 30 "prefill arm" && pbench "35B-A3B 8 layers q8_0" "$m" "$arm"; done
		done
		rm -f "$m"
	fi
	if [ -n "${P_NCU:-}" ] && command -v ncu >/dev/null; then
		m=$W/q35moe-4l-q8_0.gguf
		$B/proven synth --preset qwen3.5-35b-a3b --type q8_0 --layers 4 --out "$m" --quiet >>"$LOG" 2>&1
		i=0
		for arm in "${parms[@]}"; do
			have_time 60 "ncu prefill" || break
			e=$arm bin=$B/proven
			[ "$e" = base ] && e=
			[ "$e" = old ] && e= && bin=$B/proven-old
			env $e PROVEN_LEDGER=off timeout 120 ncu --clock-control none --metrics gpu__time_duration.sum --csv \
				--print-units base --kernel-name-base function $bin bench --backend cuda --model "$m" --pp 512 \
				--tg 1 --reps 1 >"$OUT/ncu-prefill-35b-$i.csv" 2>&1
			say "ncu durations, 35B-A3B 4 layers [$arm]: rc $? ($(grep -c gpu__time_duration "$OUT/ncu-prefill-35b-$i.csv") kernels) -> ncu-prefill-35b-$i.csv"
			i=$((i + 1))
		done
		rm -f "$m"
	fi
	if [ -n "${P_DETAIL:-}" ] && command -v ncu >/dev/null && have_time 90 "ncu detail prefill"; then
		# the full sections of the prompt's grouped GEMMs (gate/up, down) and the chunked DeltaNet rule
		m=$W/q35moe-4l-q8_0.gguf
		$B/proven synth --preset qwen3.5-35b-a3b --type q8_0 --layers 4 --out "$m" --quiet >>"$LOG" 2>&1
		for k in ggemm_pipe wy_; do
			PROVEN_LEDGER=off timeout 120 ncu --kernel-name-base demangled -k "regex:$k" --launch-skip 6 --launch-count 2 \
				--section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy \
				--section LaunchStats --section SchedulerStats --section ComputeWorkloadAnalysis $B/proven bench --backend cuda \
				--model "$m" --pp 512 --tg 1 --reps 1 >"$OUT/ncu-detail-$k.txt" 2>&1
			say "ncu detail $k: rc $? ($(grep -c 'Duration' "$OUT/ncu-detail-$k.txt") kernels) -> ncu-detail-$k.txt"
		done
		rm -f "$m"
	fi
	m=$W/q35moe-q8_0.gguf
	if [ -n "${P_FULL:-}" ] && have_time 120 "prefill 35B-A3B full" && synth qwen3.5-35b-a3b q8_0 "$m"; then
		for arm in "${parms[@]}"; do have_time 60 "prefill 35B-A3B full arm" && pbench "35B-A3B 40 layers q8_0" "$m" "$arm" 200; done
		receipt "35B-A3B q8_0" "$m"
		rm -f "$m"
	fi
	m=$W/qwen3-30b-a3b-q8_0.gguf
	if [ -n "${P_30B:-}" ] && have_time 120 "prefill 30B-A3B" && synth qwen3-30b-a3b q8_0 "$m"; then
		for arm in "${parms[@]}"; do have_time 60 "prefill 30B-A3B arm" && pbench "30B-A3B q8_0" "$m" "$arm" 200; done
		receipt "30B-A3B q8_0" "$m"
		rm -f "$m"
	fi
	m=$W/qwen3.5-9b-bf16.gguf
	if [ -n "${P_9B:-}" ] && have_time 120 "prefill 9B" && synth qwen3.5-9b bf16 "$m"; then
		for arm in "${parms[@]}"; do have_time 60 "prefill 9B arm" && pbench "9B bf16" "$m" "$arm" 200; done
		receipt "9B bf16" "$m"
		rm -f "$m"
	fi
	if [ -n "${P_SAN:-}" ] && command -v compute-sanitizer >/dev/null; then # the prompt kernels, every launch checked
		for d in $FX/qwen3_5_moe $FX/qwen3_5_r3 $FX/qwen3_next; do
			for tool in memcheck racecheck; do
				have_time 60 "$tool prompt $(basename $d)" || break
				runtest "compute-sanitizer $tool prompt $(basename $d)" timeout 150 compute-sanitizer --tool $tool \
					--error-exitcode 9 env PROVEN_LEDGER=off $B/proven bench --backend cuda --model "$d" --pp 200 --tg 4 --reps 1
				grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/.t" | head -2 | tee -a "$SUM" >/dev/null
			done
		done
	fi
elif [ "$PART" = j ] || [ "$PART" = k ]; then
	# session 4 (2026-12-02), two calls. j: the 16-row-group router launch (gemv 37-row check,
	# prefill tests, the 35B-A3B prompt against call 2's 15479 tok/s and 422 kernels), the hybrids
	# batching by default, every kernel's time over a MoE prompt (ncu), the full 9B shape at 16
	# rows with the faster digest (the earlier timeouts were the receipt's sha256 of the 18 GB
	# file) and batching throughput on it. k: the q8_0 cache (Q8_TEST=<env of its test>), the
	# prompt again, batching throughput on the 8B.
	# PROVEN_LEDGER=off where only the JSON line is kept (no digest, no device-side receipt).
	par() { # label model N [env]: one continuous-batching bench, its JSON line kept
		local t=$(date +%s)
		env PROVEN_LEDGER=off ${4:-} timeout 150 $B/proven bench --backend cuda --model "$2" --parallel $3 --pp 32 --tg 64 \
			--json-only >"$OUT/.b" 2>>"$LOG"
		local rc=$?
		[ $rc = 0 ] || status=1
		sed "s/^{/{\"name\":\"$1\",/" "$OUT/.b" | grep '^{' >>"$JSON"
		say "parallel $1 N=$3: rc $rc $(grep -o '"agg_tok_s":[0-9.]*\|"seq_tok_s":[0-9.]*\|"alone_agg_tok_s":[0-9.]*\|"speedup":[0-9.]*\|"ids_equal":[a-z]*\|"batched_share":[0-9.]*' "$OUT/.b" | tr '\n' ' ')($(($(date +%s) - t)) s)"
	}
	prompt35() { # the 35B-A3B shape cut to 8 layers, Q8_0: the prompt path's speed and error
		local m=$W/q35moe-8l-q8_0.gguf
		have_time 60 "prefill 35B-A3B" || return
		$B/proven synth --preset qwen3.5-35b-a3b --type q8_0 --layers 8 --out "$m" --quiet >>"$LOG" 2>&1 || return
		PV_PREFILL_MODEL=$m timeout 120 $B/cuda/test_cuda prefill-bench >"$OUT/.t" 2>&1
		cat "$OUT/.t" >>"$LOG"
		say "prefill 35B-A3B 8 layers q8_0: $(grep -E 'pp512|last row' "$OUT/.t" | tr -s ' ' | tr '\n' ' ' | cut -c1-600)"
		rm -f "$m"
	}
	ncu_prompt() { # every kernel's duration over one bench on the 35B-A3B shape cut to 4 layers (3
		# DeltaNet, 1 attention): the warm-up steps, an untimed and a timed 512-token prompt, one
		# decode token; tools/cuda/ncu-durations.py sums them per kernel name afterwards
		command -v ncu >/dev/null && have_time 60 "ncu prefill" || return
		local m=$W/q35moe-4l-q8_0.gguf t=$(date +%s)
		$B/proven synth --preset qwen3.5-35b-a3b --type q8_0 --layers 4 --out "$m" --quiet >>"$LOG" 2>&1 || return
		PROVEN_LEDGER=off timeout 120 ncu --clock-control none --metrics gpu__time_duration.sum --csv \
			--print-units base --kernel-name-base function $B/proven bench --backend cuda --model "$m" --pp 512 \
			--tg 1 --reps 1 >"$OUT/ncu-prefill-35b.csv" 2>&1
		say "ncu durations, 35B-A3B 4 layers: rc $? ($(grep -c gpu__time_duration "$OUT/ncu-prefill-35b.csv") kernels, $(($(date +%s) - t)) s)"
		rm -f "$m"
	}
	if [ "$PART" = j ]; then
		runtest "test_cuda gemv (37-row launch)" timeout 150 $B/cuda/test_cuda gemv
		runtest "test_cuda prefill (router in one launch)" timeout 120 $B/cuda/test_cuda prefill
		grep -E 'worst prefill' "$OUT/.t" | head -3 | tee -a "$SUM" >/dev/null
		runtest "test_cuda_api many (hybrids by default)" timeout 120 env PV_CUDA_API_ONLY=many $B/cuda/test_cuda_api
		prompt35
		ncu_prompt
		m=$W/qwen3.5-9b-bf16.gguf
		if have_time 100 "9B" && synth qwen3.5-9b bf16 "$m"; then
			t=$(date +%s)
			timeout 200 $B/proven bench --backend cuda --model "$m" --pp 16 --tg 16 --depth 512 --reps 5 \
				--json-only >"$OUT/.b" 2>>"$LOG"
			rc=$?
			grep '^{' "$OUT/.b" >>"$JSON"
			say "9B rows 16 (defaults; a receipt with the digest): rc $rc ($(($(date +%s) - t)) s) $(grep -o '"pp_tok_s":[0-9.]*\|"tg_tok_s":[0-9.]*\|"upload_s":[0-9.]*' "$OUT/.b" | tr '\n' ' ')"
			for n in 1 4 16; do have_time 30 "9B parallel $n" && par qwen3.5-9b "$m" $n; done
			rm -f "$m"
		fi
	else
		for part in ${K_API:-}; do # test_cuda_api parts (the q8_0 cache: cache, many, mtp)
			runtest "test_cuda_api $part" timeout 150 env PV_CUDA_API_ONLY=$part $B/cuda/test_cuda_api
			grep -E 'q8_0' "$OUT/.t" | head -12 | tee -a "$SUM" >/dev/null
		done
		for t in ${K_TESTS:-}; do runtest "test_cuda $t" timeout 120 $B/cuda/test_cuda $t; done
		[ -z "${K_SKIP_PROMPT:-}" ] && prompt35
		[ -n "${K_NCU:-}" ] && ncu_prompt
		m=$W/q35moe-q8_0.gguf
		if [ -n "${K_FULL35:-}" ] && have_time 120 "prefill 35B-A3B full" && synth qwen3.5-35b-a3b q8_0 "$m"; then
			PV_PREFILL_MODEL=$m timeout 150 $B/cuda/test_cuda prefill-bench >"$OUT/.t" 2>&1
			cat "$OUT/.t" >>"$LOG"
			say "prefill 35B-A3B 40 layers q8_0: $(grep -E 'pp512|pp4096|last row' "$OUT/.t" | tr -s ' ' | tr '\n' ' ' | cut -c1-700)"
			rm -f "$m"
		fi
		m=$W/qwen3.5-9b-bf16.gguf
		if [ -n "${K_9B:-}" ] && have_time 80 "9B" && synth qwen3.5-9b bf16 "$m"; then
			for n in 1 4 16; do have_time 25 "9B parallel $n" && par qwen3.5-9b "$m" $n; done
			rm -f "$m"
		fi
		m=$W/qwen3-8b-bf16.gguf
		if [ -z "${K_SKIP_8B:-}" ] && have_time 80 "8B" && synth qwen3-8b bf16 "$m"; then
			for n in 1 4 16; do have_time 25 "8B parallel $n" && par qwen3-8b "$m" $n; done
			rm -f "$m"
		fi
	fi
elif [ "$PART" = g ]; then
	# the MTP head (src/cuda/mtp.cu): the API's checks, then speculative == plain with the MTP
	# drafter, bitwise, on the fixture with a head and on a tiny MoE hybrid written by synth
	runtest "test_cuda_api mtp" env PV_CUDA_API_ONLY=mtp $B/cuda/test_cuda_api
	grep -E ' mtp ' "$OUT/.t" | head -40 | tee -a "$SUM" >/dev/null
	court "qwen3_5 mtp" $FX/qwen3_5 --draft mtp --draft-fixed --max-tokens 24 --limit 40
	court "qwen3_5 mtp replay-rollback" $FX/qwen3_5 --draft mtp --draft-fixed --rollback replay --draft-max 3 \
		--max-tokens 24 --limit 24
	court "qwen3_5 mtp bf16 cache" $FX/qwen3_5 --draft mtp --draft-fixed --cache-type bf16 --max-tokens 16 --limit 24
	court "qwen3_5 mtp adaptive" $FX/qwen3_5 --draft mtp --max-tokens 24 --limit 24
	m=$W/tiny-qwen35moe-mtp.gguf
	if $B/proven synth --arch qwen35moe --preset tiny --mtp --type q8_0 --out "$m" --quiet >>"$LOG" 2>&1; then
		court "tiny qwen35moe mtp (MoE head, q8_0)" "$m" --draft mtp --draft-fixed --max-tokens 16 --limit 30
		rm -f "$m"
	else
		say "== synth tiny qwen35moe --mtp FAILED: $(tail -2 "$LOG" | tr '\n' ' ')"
		status=1
	fi
elif [ "$PART" = c ]; then
	# the hybrid MoE and Qwen3-Next through snapshot rollback (their n-gram courts drafted
	# little), a draft model under seeded sampling
	court "qwen3_5_moe draft itself" $FX/qwen3_5_moe --draft $FX/qwen3_5_moe --draft-fixed --max-tokens 24 --limit 40
	court "qwen3_next draft itself" $FX/qwen3_next --draft $FX/qwen3_next --draft-fixed --max-tokens 24 --limit 40
	court "qwen3_5 draft itself, sampled (temp 0.8)" $FX/qwen3_5 --draft $FX/qwen3_5 --draft-fixed --temp 0.8 --max-tokens 24 \
		--limit 40
	court "qwen3_5_moe draft itself, replay rollback" $FX/qwen3_5_moe --draft $FX/qwen3_5_moe --draft-fixed --rollback replay \
		--max-tokens 24 --limit 24
	if [ "${NCU:-1}" = 1 ] && command -v ncu >/dev/null && have_time 150 "ncu"; then
		m=$W/qwen3-4b-bf16.gguf
		if synth qwen3-4b bf16 "$m"; then
			# the exact step's GEMVs for 1 and for 16 activation rows (kernel templates <kind, rows, rows per warp>)
			for k in "gemv_kernel<0, 16" "gemv_kernel<0, 1,"; do
				f=$OUT/ncu-$(echo "$k" | tr -dc 'a-z0-9').txt
				timeout 100 ncu --kernel-name-base demangled -k "regex:$k" --launch-skip 4 --launch-count 4 --section SpeedOfLight \
					--section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats --section ComputeWorkloadAnalysis \
					--section WarpStateStats $B/proven bench --backend cuda --model "$m" --pp 16 --tg 4 --reps 1 >"$f" 2>&1
				say "ncu $k: rc $? ($(grep -c 'Duration' "$f") kernels)"
			done
			rm -f "$m"
		fi
	fi
	for pr in "qwen3-8b bf16 Qwen3-8B_BF16" "qwen3-30b-a3b q8_0 Qwen3-30B-A3B_Q8_0" "qwen3.5-35b-a3b q8_0 Qwen3.5-35B-A3B_Q8_0" \
		"qwen3.5-9b bf16 Qwen3.5-9B_BF16"; do
		set -- $pr
		m=$W/$1-$2.gguf
		ls $TR/*draft*.jsonl >/dev/null 2>&1 || { say "no draft-model traces in $TR"; break; }
		have_time 90 "draft trace on $3" || continue
		synth "$1" "$2" "$m" || continue
		for tr in $TR/*draft*.jsonl; do replay "$3" "$m" "$tr"; done
		rm -f "$m"
	done
else
	for sec in fixtures quant; do
		runtest "test_cuda $sec" $B/cuda/test_cuda $sec
	done
	runtest test_cuda_api $B/cuda/test_cuda_api
	if command -v ncu >/dev/null && have_time 200 "ncu"; then
		m=$W/qwen3-4b-bf16.gguf
		if synth qwen3-4b bf16 "$m"; then
			for r in 1 16; do
				timeout 90 ncu --launch-skip 20 --launch-count 12 --section SpeedOfLight --section MemoryWorkloadAnalysis \
					--section Occupancy --section LaunchStats $B/proven bench --backend cuda --model "$m" --pp $r --tg 2 \
					--reps 1 >"$OUT/ncu-rows$r.txt" 2>&1
				say "ncu rows $r: rc $? ($(grep -c 'Duration' "$OUT/ncu-rows$r.txt") kernels)"
			done
			rm -f "$m"
		fi
	fi
	m=$W/qwen3-8b-bf16.gguf
	if have_time 120 "adaptive ngram on 8B" && synth qwen3-8b bf16 "$m"; then
		$B/proven bench spec --backend cuda --model "$m" --draft ngram --cases $CASES --per-class 2 --max-tokens 96 \
			--greedy >"$OUT/.r" 2>>"$LOG"
		grep '^{' "$OUT/.r" >>"$JSON"
		say "adaptive ngram (the policy, real drafter, random weights) Qwen3-8B BF16: rc $?"
		grep '^|' "$OUT/.r" | tee -a "$SUM" >/dev/null
		rm -f "$m"
	fi
	model_rows qwen3-30b-a3b q8_0 "Qwen3-30B-A3B Q8_0"
	model_rows qwen3.5-35b-a3b q8_0 "Qwen3.5-35B-A3B Q8_0"
	if have_time 60 "draft decode"; then
		m=$W/qwen3-0.6b-bf16.gguf
		if synth qwen3-0.6b bf16 "$m"; then
			$B/proven bench --backend cuda --model "$m" --pp 16 --tg 128 --reps 3 --json-only >"$OUT/.b" 2>>"$LOG"
			grep '^{' "$OUT/.b" >>"$JSON"
			say "draft Qwen3-0.6B BF16 decode: $(grep -o '"tg_tok_s":[0-9.]*' "$OUT/.b" | tail -1)"
			rm -f "$m"
		fi
	fi
fi
say "== spec-check $PART: status $status, $(elapsed) s"
exit $status

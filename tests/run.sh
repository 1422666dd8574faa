#!/usr/bin/env bash
# Runs the test programs in BUILD/tests (default build), JOBS at a time (default 2), prints each
# program's result with its wall time, the FAIL and skip lines, and last
# "total: N passed, N failed"; exits nonzero when a check failed or a program crashed.
#
# FILTER (the second argument, `make test T=...`) is passed to every program as PV_TEST_FILTER:
# a program whose name contains it runs all its cases, any other only the cases whose names
# contain it (tests/harness.h). Programs that ran no case are left out of the list; a filter
# that selects nothing anywhere is an error (a typo should not pass). See tests/README.md.
# the tests own their ledgers: no test run writes receipts into the user's database
export PROVEN_LEDGER=off
BUILD=${1:-build}
FILTER=${2:-}
JOBS=${JOBS:-2}
[ -d "$BUILD/tests" ] || { echo "run.sh: no $BUILD/tests (build first: make)"; exit 2; }
# absolute: the programs change to the repository root before their cases
BUILD=$(cd "$BUILD" && pwd)
out_dir=$(mktemp -d)
trap 'rm -rf "$out_dir"' EXIT

progs=""
for t in "$BUILD"/tests/test_*; do
	[ -x "$t" ] && [ -f "$t" ] || continue
	case "$t" in *.d|*.o) continue;; esac
	progs="$progs $t"
done

now_ms() { # bash 5's $EPOCHREALTIME, else date
	if [ -n "${EPOCHREALTIME:-}" ]; then local t=${EPOCHREALTIME/[.,]/}; echo $((t / 1000)); else date +%s%3N; fi
}

# one program: its output, exit code and wall time (ms) into out_dir
run_one() {
	local n t0
	n=$(basename "$1")
	t0=$(now_ms)
	PV_BUILD="$BUILD" PV_TEST_FILTER="$FILTER" "$1" >"$out_dir/$n.out" 2>&1
	echo $? >"$out_dir/$n.rc"
	echo $(($(now_ms) - t0)) >"$out_dir/$n.ms"
}
t_start=$(now_ms)
running=0
for t in $progs; do
	run_one "$t" &
	running=$((running + 1))
	if [ "$running" -ge "$JOBS" ]; then wait -n 2>/dev/null || wait; running=$((running - 1)); fi
done
wait
t_all=$(($(now_ms) - t_start))

secs() { printf '%d.%d' $(($1 / 1000)) $(($1 % 1000 / 100)); }
pass=0; fail=0; bad=""; selected=0
for t in $progs; do
	n=$(basename "$t")
	out=$(cat "$out_dir/$n.out"); rc=$(cat "$out_dir/$n.rc"); ms=$(cat "$out_dir/$n.ms")
	line=$(printf '%s\n' "$out" | grep -E '^[^ ]+: [0-9]+ passed, [0-9]+ failed' | tail -1)
	p=$(printf '%s' "$line" | sed -E 's/^[^ ]+: ([0-9]+) passed.*/\1/')
	f=$(printf '%s' "$line" | sed -E 's/^[^ ]+: [0-9]+ passed, ([0-9]+) failed.*/\1/')
	# "  cases selected: N of M" (harness.h); a plain-main program ran unless the filter left it
	# out, when it says "0 passed, 0 failed"
	sel=$(printf '%s\n' "$out" | sed -nE 's/^  cases selected: ([0-9]+) of.*/\1/p' | tail -1)
	if [ -z "$sel" ]; then
		if [ -z "$FILTER" ] || [ "$p$f" != 00 ]; then sel=1; else sel=0; fi
	fi
	selected=$((selected + sel))
	if [ -z "$p" ]; then
		p=0; f=1
		printf '%s\n' "$out" | tail -20
		echo "$n: crashed or printed no result (rc=$rc, $(secs "$ms") s)"
	elif [ "$sel" != 0 ] || [ "$f" != 0 ]; then
		# the FAIL and skip lines and the sub-totals some programs print, then the result
		printf '%s\n' "$out" | grep -E '(FAIL|passed, [0-9]+ failed|^skip)' | grep -vxF "$line"
		echo "$line ($(secs "$ms") s)"
	fi
	[ "$rc" = 0 ] || [ "$f" != 0 ] || { f=1; echo "$n: exit code $rc"; }
	pass=$((pass + p)); fail=$((fail + f))
	[ "$f" = 0 ] || bad="$bad $n"
done
if [ -n "$FILTER" ] && [ "$selected" = 0 ]; then
	echo "run.sh: no test program or case matches \"$FILTER\" (a program's --list names its cases)"
	fail=$((fail + 1))
fi
[ -n "$bad" ] && echo "failing:$bad"
echo "wall: $(secs "$t_all") s for $(echo $progs | wc -w) programs, $JOBS at a time"
echo "total: $pass passed, $fail failed"
[ "$fail" = 0 ]

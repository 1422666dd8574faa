#!/usr/bin/env bash
# Runs the test programs in BUILD/tests, JOBS at a time (default 2), and prints the total as
# "total: N passed, N failed". FILTER (the second argument, `make test T=...`) keeps the programs
# whose name contains it, and is passed on to each program as PV_TEST_FILTER, which runs only the
# test cases whose names contain it (tests/harness.h); a program with no matching case passes 0.
BUILD=${1:-build}
FILTER=${2:-}
JOBS=${JOBS:-2}
out_dir=$(mktemp -d)
trap 'rm -rf "$out_dir"' EXIT

progs=""
for t in "$BUILD"/tests/test_*; do
	[ -x "$t" ] && [ -f "$t" ] || continue
	case "$t" in *.d|*.o) continue;; esac
	progs="$progs $t"
done

# one program: its output and exit code into out_dir
run_one() {
	n=$(basename "$1")
	PV_BUILD="$BUILD" PV_TEST_FILTER="$FILTER" "$1" >"$out_dir/$n.out" 2>&1
	echo $? >"$out_dir/$n.rc"
}
running=0
for t in $progs; do
	run_one "$t" &
	running=$((running + 1))
	if [ "$running" -ge "$JOBS" ]; then wait -n 2>/dev/null || wait; running=$((running - 1)); fi
done
wait

pass=0; fail=0; bad=""
for t in $progs; do
	n=$(basename "$t")
	out=$(cat "$out_dir/$n.out"); rc=$(cat "$out_dir/$n.rc")
	printf '%s\n' "$out" | grep -E '(FAIL|passed, [0-9]+ failed|^skip)'
	line=$(printf '%s\n' "$out" | grep -E '^[^ ]+: [0-9]+ passed, [0-9]+ failed' | tail -1)
	p=$(printf '%s' "$line" | sed -E 's/^[^ ]+: ([0-9]+) passed.*/\1/')
	f=$(printf '%s' "$line" | sed -E 's/^[^ ]+: [0-9]+ passed, ([0-9]+) failed.*/\1/')
	[ -n "$p" ] || { p=0; f=1; printf '%s\n' "$out" | tail -20; echo "$n: crashed or printed no result (rc=$rc)"; }
	[ "$rc" = 0 ] || [ "$f" != 0 ] || { f=1; echo "$n: exit code $rc"; }
	pass=$((pass + p)); fail=$((fail + f))
	[ "$f" = 0 ] || bad="$bad $n"
done
[ -n "$bad" ] && echo "failing:$bad"
echo "total: $pass passed, $fail failed"
[ "$fail" = 0 ]

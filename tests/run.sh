#!/bin/sh
# Runs every test program in BUILD/tests and prints the total as "total: N passed, N failed".
BUILD=${1:-build}
pass=0; fail=0; bad=""
for t in "$BUILD"/tests/test_*; do
	[ -x "$t" ] || continue
	case "$t" in *.d|*.o) continue;; esac
	out=$(PV_BUILD="$BUILD" "$t" 2>&1); rc=$?
	printf '%s\n' "$out" | grep -E '(FAIL|passed, [0-9]+ failed)' 
	line=$(printf '%s\n' "$out" | grep -E '^[^ ]+: [0-9]+ passed, [0-9]+ failed$' | tail -1)
	p=$(printf '%s' "$line" | sed -E 's/.*: ([0-9]+) passed.*/\1/')
	f=$(printf '%s' "$line" | sed -E 's/.* ([0-9]+) failed$/\1/')
	[ -n "$p" ] || { p=0; f=1; printf '%s\n' "$out" | tail -20; echo "$t: crashed or printed no result (rc=$rc)"; }
	[ "$rc" = 0 ] || [ "$f" != 0 ] || { f=1; echo "$t: exit code $rc"; }
	pass=$((pass + p)); fail=$((fail + f))
	[ "$f" = 0 ] || bad="$bad $(basename $t)"
done
[ -n "$bad" ] && echo "failing:$bad"
echo "total: $pass passed, $fail failed"
[ "$fail" = 0 ]

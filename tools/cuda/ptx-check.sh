#!/bin/bash
# ptx-check.sh: the PTX of every kernel of src/cuda/*.cu against a baseline, kernel by kernel.
# Kernels whose arithmetic a change does not mean to touch must compile to the same PTX; the
# ones that are new or changed on purpose are listed, with the reason, in tools/cuda/ptx-allow.txt.
# No GPU needed: nvcc -ptx only (no -lineinfo, so moved code does not change .loc lines).
#
#   tools/cuda/ptx-check.sh                   against the revision in tools/cuda/ptx-base.txt
#   tools/cuda/ptx-check.sh -r REV            against git revision REV (PTX built in a temporary
#                                             `git worktree add` of it, cached under the out dir)
#   tools/cuda/ptx-check.sh -b DIR            against ready .ptx files in DIR (one per .cu)
#   tools/cuda/ptx-check.sh -m REV DIR        only make REV's PTX into DIR (a baseline for -b)
# Options: -a ALLOW (allow-list; default tools/cuda/ptx-allow.txt), -o OUT (default
# /tmp/pv-ptx-check), -j JOBS (parallel nvcc, default nproc), -d N (N lines of diff per changed
# kernel), -l (list identical kernels too). Exit status: 0 when every difference is allowed.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
NVCC=${NVCC:-nvcc}
# the Makefile's kernel flags without -lineinfo, -Werror and dependency files: what decides the PTX
FLAGS="-std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -fmad=false -D_GNU_SOURCE -Iinclude -Isrc"
ALLOW=tools/cuda/ptx-allow.txt
OUT=/tmp/pv-ptx-check
JOBS=$(nproc 2>/dev/null || echo 2)
BASE_DIR=
REV=
MAKE_ONLY=
DIFF=0
LIST=
while getopts "a:b:r:m:o:j:d:lh" opt; do
	case $opt in
	a) ALLOW=$OPTARG ;;
	b) BASE_DIR=$OPTARG ;;
	r) REV=$OPTARG ;;
	m) REV=$OPTARG MAKE_ONLY=1 ;;
	o) OUT=$OPTARG ;;
	j) JOBS=$OPTARG ;;
	d) DIFF=$OPTARG ;;
	l) LIST=--list ;;
	*) sed -n '2,16p' "$0"; exit 2 ;;
	esac
done
shift $((OPTIND - 1))
if [ -n "$MAKE_ONLY" ]; then
	[ $# = 1 ] || { echo "ptx-check: -m REV DIR"; exit 2; }
	BASE_DIR=$1
fi
if [ -z "$BASE_DIR" ] && [ -z "$REV" ]; then
	REV=$(sed -n 's/^\([0-9a-f]\{7,40\}\).*/\1/p' tools/cuda/ptx-base.txt 2>/dev/null | head -1)
	[ -n "$REV" ] || { echo "ptx-check: no baseline (-r REV, -b DIR, or tools/cuda/ptx-base.txt)"; exit 2; }
fi
command -v "$NVCC" >/dev/null || { echo "ptx-check: $NVCC not found"; exit 2; }
mkdir -p "$OUT"

# ptx_tree ROOT DIR: DIR/<name>.ptx for every ROOT/src/cuda/<name>.cu, JOBS at a time
ptx_tree() {
	local root=$1 dir=$2
	mkdir -p "$dir"
	rm -f "$dir"/*.ptx
	(cd "$root" && ls src/cuda/*.cu) | xargs -P "$JOBS" -I{} sh -c \
		'cd "$1" && exec '"$NVCC $FLAGS"' -ptx "$2" -o "$3/$(basename "$2" .cu).ptx"' _ "$root" {} "$dir"
	local want have
	want=$(cd "$root" && ls src/cuda/*.cu | wc -l)
	have=$(ls "$dir"/*.ptx 2>/dev/null | wc -l)
	[ "$want" = "$have" ] || { echo "ptx-check: $have of $want PTX files built under $dir"; return 1; }
}

if [ -n "$REV" ]; then
	SHA=$(git rev-parse --verify "$REV^{commit}")
	if [ -z "$BASE_DIR" ]; then BASE_DIR=$OUT/base-${SHA:0:12}; fi
	if [ -n "$MAKE_ONLY" ] || [ ! -f "$BASE_DIR/.complete" ]; then
		TMP=$(mktemp -d /tmp/pv-ptx-base.XXXXXX)
		rmdir "$TMP"
		git worktree add --detach --quiet "$TMP" "$SHA"
		trap 'git -C "$ROOT" worktree remove --force "$TMP" 2>/dev/null || true' EXIT
		echo "ptx-check: baseline PTX of ${SHA:0:12} in $BASE_DIR"
		ptx_tree "$TMP" "$BASE_DIR"
		touch "$BASE_DIR/.complete"
		git -C "$ROOT" worktree remove --force "$TMP"
		trap - EXIT
	fi
	[ -z "$MAKE_ONLY" ] || exit 0
fi

echo "ptx-check: PTX of the working tree in $OUT/cur"
ptx_tree "$ROOT" "$OUT/cur"
ARGS=(--diff "$DIFF")
[ -f "$ALLOW" ] && ARGS+=(--allow "$ALLOW")
[ -n "$LIST" ] && ARGS+=("$LIST")
exec python3 tools/cuda/ptx_check.py "$BASE_DIR" "$OUT/cur" "${ARGS[@]}"

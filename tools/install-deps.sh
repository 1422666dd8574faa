#!/bin/sh
# Installs the Debian packages the build and tests need, only when missing. python3-pip is
# optional: it serves only tools/get-model.sh (the real model for test_real), so when it cannot
# be installed (no network) this says so and succeeds.
set -e
need=""
for p in libjansson-dev unzip libpcre2-dev libutf8proc-dev xz-utils libmicrohttpd-dev libsqlite3-dev zlib1g-dev; do
	dpkg -s "$p" >/dev/null 2>&1 || need="$need $p"
done
cc --version >/dev/null 2>&1 || need="$need build-essential"
want_pip=0
python3 -m pip --version >/dev/null 2>&1 || want_pip=1
[ -z "$need" ] && [ $want_pip = 0 ] && exit 0
SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
apt_install() {
	$SUDO apt-get update -qq && $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@"
}
if [ -n "$need" ]; then
	echo "installing:$need" >&2
	apt_install $need
fi
if [ $want_pip = 1 ]; then
	echo "installing: python3-pip (for tools/get-model.sh)" >&2
	apt_install python3-pip ||
		echo "skip installing python3-pip (apt-get failed: no network?): tools/get-model.sh cannot fetch the real model" >&2
fi
exit 0

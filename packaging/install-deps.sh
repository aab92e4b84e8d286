#!/bin/sh
# Install the Debian packages the build and the tests need, if any is missing.
# As root it runs apt-get; otherwise it prints the one command to run.
set -u
pkgs="build-essential pkg-config librdkafka-dev libzstd-dev libsodium-dev libyaml-dev liblmdb-dev libcmocka-dev"
missing=""
for p in $pkgs; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
if [ "$(id -u)" -eq 0 ]; then
    echo "deps: installing$missing"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >/dev/null || true
    apt-get install -y -q --no-install-recommends $missing >/dev/null || {
        echo "deps: apt-get install failed for:$missing" >&2; exit 1; }
else
    echo "deps: missing packages:$missing" >&2
    echo "deps: run: sudo apt-get install -y$missing" >&2
    exit 1
fi

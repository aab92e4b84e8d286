#!/bin/sh
# Install the Debian packages the build, the tests and the benchmark need, if
# any is missing.  As root it runs apt-get; otherwise it prints the one
# command to run and fails.
#
# Usage: install-deps.sh [--check] [build] [bench] [fuzz] [perf] [deb] [rpm]
#   build  compilers and the libraries libingest links (and cmocka)
#   fuzz   clang and its libFuzzer runtime, for `make fuzz`
#          (tests/fuzz/run-libfuzzer.sh)
#   bench  what bench/ship.sh runs: the comparison tools and the commands the
#          driver itself uses; `make check` needs them for its 64 MiB smoke
#          run (tests/integration/test_bench_smoke.sh)
#   perf   linux-perf, for the profiled run of `make bench` (optional)
#   deb    dpkg-buildpackage, debhelper and lintian, for `make deb` and
#          tests/integration/test_packages.sh
#   rpm    rpmbuild (Debian's rpm package) and rpmlint, for `make rpm`
# With no group: build and bench (what `make deps`, and so `make check`,
# installs).  --check only reports: it never installs, and exits 1 with the
# command to run when something is missing.
set -u

# groff-base and man-db: tests/integration/test_man.sh renders the man pages.
build_pkgs="build-essential pkg-config librdkafka-dev libzstd-dev libsodium-dev libssl-dev libyaml-dev liblmdb-dev libcmocka-dev groff-base man-db"
# Keep in step with BENCH_DEBS in the Makefile (make bench-deps).  iproute2
# gives ss(8), which the driver uses to find free ports; xfsprogs the loop XFS
# with reflinks of bench/landing.sh and tests/integration/test_reflink.sh
# (which skips without it).
bench_pkgs="rsync socat zstd time restic casync iproute2 xfsprogs"
fuzz_pkgs="clang libclang-rt-dev"
perf_pkgs="linux-perf"
deb_pkgs="dpkg-dev debhelper fakeroot lintian"
rpm_pkgs="rpm rpmlint"

check_only=0
groups=""
for a in "$@"; do
    case $a in
        --check) check_only=1 ;;
        build|bench|fuzz|perf|deb|rpm) groups="$groups $a" ;;
        *) echo "usage: install-deps.sh [--check] [build] [bench] [fuzz] [perf] [deb] [rpm]" >&2; exit 2 ;;
    esac
done
[ -n "$groups" ] || groups="build bench"

pkgs=""
for g in $groups; do
    case $g in
        build) pkgs="$pkgs $build_pkgs" ;;
        bench) pkgs="$pkgs $bench_pkgs" ;;
        fuzz) pkgs="$pkgs $fuzz_pkgs" ;;
        perf) pkgs="$pkgs $perf_pkgs" ;;
        deb) pkgs="$pkgs $deb_pkgs" ;;
        rpm) pkgs="$pkgs $rpm_pkgs" ;;
    esac
done

missing=""
for p in $pkgs; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
if [ "$(id -u)" -eq 0 ] && [ $check_only = 0 ]; then
    echo "deps: installing$missing"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >/dev/null || true
    apt-get install -y -q --no-install-recommends $missing >/dev/null || {
        echo "deps: apt-get install failed for:$missing" >&2; exit 1; }
else
    echo "deps: missing packages:$missing" >&2
    echo "deps: run: sudo apt-get install -y --no-install-recommends$missing" >&2
    exit 1
fi

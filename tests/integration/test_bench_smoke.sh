#!/bin/sh
# run-tests: alone: the benchmark syncs, drops caches and mounts loop devices
# make check's 64 MiB run of the shipping benchmark (bench/ship.sh, one run):
# every comparison tool ran and has a row with figures, the Targets and
# per-stage sections are there, ours moved bytes and the driver verified the
# tree it landed, the SVG was written beside the report, and nothing is left
# behind (mounts, processes, the work dir, changes to bench/results.md).
. "$(dirname "$0")/lib.sh"
TOP=$(cd "$(dirname "$0")/../.." && pwd)

# The comparison tools must be installed: `make check` installs them as root
# (packaging/install-deps.sh); a missing one fails here, with the command.
if ! msg=$(sh "$TOP/packaging/install-deps.sh" --check bench 2>&1); then
    fail "the benchmark's tools are missing (make check installs them when run as root): $msg"
fi
for c in rsync socat zstd tar restic casync ss sha256sum; do
    command -v "$c" > /dev/null || fail "$c not found: run sudo sh packaging/install-deps.sh bench"
done
/usr/bin/time -v true 2> /dev/null || fail "/usr/bin/time (GNU time) not found: run sudo apt-get install -y time"

# Loop mounts when root and a loop device can be had; plain directories otherwise.
if [ "${LOOP:-auto}" != 0 ] && [ "$(id -u)" = 0 ] && ! losetup -f > /dev/null 2>&1; then
    echo "note: no free loop device: landing into directories (LOOP=0)"
    LOOP=0
fi
export LOOP="${LOOP:-auto}"

repo_sum() { cat "$TOP/bench/results.md" "$TOP/bench/results.svg" 2> /dev/null | sha256sum; }
before=$(repo_sum)
t0=$(date +%s)
SIZE=64MiB RUNS=1 VERIFY=first BENCH_DIR="$T" RESULTS="$T/results.md" \
    bash "$TOP/bench/ship.sh" "$BUILD" > "$T/bench.out" 2> "$T/bench.err" &
bench_pid=$!
# killed (timeout, Ctrl-C): the driver cleans up after itself on TERM
trap 'kill "$bench_pid" 2> /dev/null; wait "$bench_pid" 2> /dev/null; exit 143' INT TERM
wait "$bench_pid" || { tail -30 "$T/bench.err"; fail "bench/ship.sh failed"; }
trap - INT TERM
secs=$(($(date +%s) - t0))
R=$T/results.md

# Nothing left behind.
[ "$(repo_sum)" = "$before" ] || fail "the smoke run changed bench/results.md or bench/results.svg"
! grep -F "$T/" /proc/mounts || fail "mounts left behind under $T"
left=$(pgrep -af -- "$T/" || true)
[ -z "$left" ] || fail "processes left behind: $left"
[ -z "$(find "$T" -maxdepth 1 -name 'ingest-bench.*')" ] || fail "the work dir was not removed"

# The report: a row with figures for every tool, the sections.
[ -s "$R" ] || fail "no $R"
# row_mbps LABEL: the initial MB/s cell of the table row that starts with
# LABEL (an escaped \| inside a cell is not a cell boundary)
row_mbps() { grep -F "| $1" "$R" | head -1 | sed 's/\\|/!/g' | awk -F'|' '{ gsub(/ /, "", $3); print $3 }'; }
for label in "ours (ingest-agent -> ingest-receiver)" "rsync -a (daemon)" "rsync -az (daemon)" \
    'tar \| zstd -1 \| socat' "restic backup" "casync make"; do
    v=$(row_mbps "$label")
    echo "$v" | grep -Eq '^[0-9]+(\.[0-9]+)?$' || fail "no figures in the row of $label (initial MB/s '$v')"
done
grep -q '^## Targets$' "$R" || fail "no Targets section"
grep -q '^## The ceiling$' "$R" || fail "no ceiling section"
grep -Eq '^\| verify \| core \| [0-9.]+ \| [0-9.]+ \|$' "$R" || fail "no verify stage in the ceiling table"
grep -Eq '^Ceiling on [0-9]+ cores: \*\*[0-9.]+ MB/s\*\*' "$R" || fail "no ceiling figure"
grep -Eq "^\| incremental wire bytes <= 0\.5x casync's .* \| (met|NOT met) \|$" "$R" ||
    fail "no verdict on the casync target"
grep -q '^## Where ours spends its time$' "$R" || fail "no per-stage section"
grep -Eq '^\| sending the wanted chunks.* \| [0-9.]+ \| [0-9.]+ \|$' "$R" || fail "no send_seconds medians"
if command -v perf > /dev/null; then
    grep -Eq '^\| libzstd \| [0-9.]+% \|' "$R" || grep -q 'perf): not measured: perf is installed but cannot record' "$R" ||
        fail "perf is installed but the report has no CPU share by shared object"
else
    grep -q 'perf): not measured: perf is not installed' "$R" || fail "the report does not say perf is missing"
fi

# Ours moved bytes both ways, and the driver checked the trees it landed.
raw() { grep "^tool=ours run=1 phase=$1 " "$R" | tr ' ' '\n' | sed -n "s/^$2=//p"; }
for phase in initial incremental; do
    w=$(raw $phase wire_bytes)
    [ -n "$w" ] && [ "$w" -gt 0 ] || fail "ours $phase wire_bytes '$w'"
    grep -q "^- verified .*ours run 1 $phase (" "$R" || fail "the driver did not verify ours' $phase tree"
done
[ "$(raw incremental wire_bytes)" -lt "$(raw initial wire_bytes)" ] || fail "the incremental ship sent as much as the initial one"

# The charts beside the report, linked from it.
S=$T/results.svg
[ -s "$S" ] || fail "no $S"
grep -q '(results.svg)' "$R" || fail "results.md does not link results.svg"
head -1 "$S" | grep -q '^<svg ' || fail "results.svg does not start with <svg"
for w in ours restic casync 'Initial ship: MB/s' 'Incremental ship: wire bytes' 'Peak sender memory'; do
    grep -qF "$w" "$S" || fail "results.svg lacks '$w'"
done
if command -v python3 > /dev/null; then
    python3 -c 'import sys, xml.etree.ElementTree as E; E.parse(sys.argv[1])' "$S" || fail "results.svg is not well-formed XML"
fi
pass "bench smoke (64 MiB, one run, every tool, verified): ${secs} s"

#!/bin/sh
# run-tests: alone: the benchmark syncs, drops caches and mounts loop devices
# The profiles of `ingestctl bench gen` and their benchmark runs (issue 16):
# the default tree is byte for byte what it was before profiles existed; the
# gateway and small trees are deterministic, shaped as documented, and their
# --evolve makes the documented changes (16-byte edits keep a frame's size);
# bench/ship.sh runs both profiles with ours, rsync -az and tar | zstd (one
# tiny run each) and reports their sections and targets, leaving
# bench/results-*.md alone.
. "$(dirname "$0")/lib.sh"
TOP=$(cd "$(dirname "$0")/../.." && pwd)

sums() { (cd "$1" && find . -type f -print0 | sort -z | xargs -0 sha256sum) | sha256sum | cut -d' ' -f1; }
count() { find "$1" -type f | wc -l; }

# default: the digest of generation 0 + 1 made by the generator before profiles
"$CTL" bench gen --size 1MiB --seed 3 "$T/d" > /dev/null
"$CTL" bench gen --evolve --size 1MiB --seed 3 "$T/d" > /dev/null
[ "$(sums "$T/d")" = 5b172a8e67fe6710af5a21c4d9df165f4dd1e1b3a4f6d5fe5956e77e1083f227 ] ||
    fail "the default profile's tree changed"
"$CTL" bench gen --profile sensors --size 1MiB --seed 3 "$T/d2" > /dev/null
"$CTL" bench gen --profile default --size 1MiB --seed 3 "$T/d3" > /dev/null
[ "$(sums "$T/d2")" = "$(sums "$T/d3")" ] || fail "--profile sensors and default differ"

# gateway at 8 MiB: deterministic, every kind of file, events 93% of them
"$CTL" bench gen --profile gateway --size 8MiB --seed 4 "$T/g1" > /dev/null
"$CTL" bench gen --profile gateway --size 8MiB --seed 4 "$T/g2" > /dev/null
[ "$(sums "$T/g1")" = "$(sums "$T/g2")" ] || fail "gateway: the same seed gave different trees"
"$CTL" bench gen --profile gateway --size 8MiB --seed 5 "$T/g3" > /dev/null
[ "$(sums "$T/g1")" != "$(sums "$T/g3")" ] || fail "gateway: another seed gave the same tree"
rm -rf "$T/g2" "$T/g3"
for d in events exports telemetry frames images logs; do
    [ "$(count "$T/g1/$d")" -gt 0 ] || fail "gateway: no $d"
done
ev=$(count "$T/g1/events"); all=$(count "$T/g1")
[ $((ev * 100 / all)) -ge 90 ] || fail "gateway: events are $ev of $all files"
[ "$(count "$T/g1/logs")" = 3 ] || fail "gateway: not 3 logs"
if command -v python3 > /dev/null; then
    python3 -c 'import json, sys; [json.load(open(p)) for p in sys.argv[1:]]' \
        $(find "$T/g1/events" -name '*.json' | sort | head -50) || fail "gateway: an event is not JSON"
fi
cp -a "$T/g1" "$T/g0"
out=$("$CTL" bench gen --profile gateway --size 8MiB --seed 4 --evolve "$T/g1")
echo "$out" | grep -q '"changes":' || fail "gateway --evolve printed $out"
# each log grew by about 1%, frames kept their sizes and 1 KiB of difference at most
for l in gateway modbus uplink; do
    a=$(stat -c %s "$T/g0/logs/$l.log"); b=$(stat -c %s "$T/g1/logs/$l.log")
    [ "$b" -gt "$a" ] && [ $((b - a)) -le $((a / 50)) ] || fail "gateway: $l.log went from $a to $b bytes"
    cmp -n "$a" "$T/g0/logs/$l.log" "$T/g1/logs/$l.log" > /dev/null || fail "gateway: $l.log changed before its end"
done
edited=0
for p in $(cd "$T/g0" && find frames -type f); do
    cmp -s "$T/g0/$p" "$T/g1/$p" && continue
    [ "$(stat -c %s "$T/g0/$p")" = "$(stat -c %s "$T/g1/$p")" ] || fail "gateway: $p changed size"
    n=$(cmp -l "$T/g0/$p" "$T/g1/$p" | wc -l)
    [ "$n" -le 16 ] || fail "gateway: $p: $n bytes differ"
    edited=$((edited + 1))
done
[ "$edited" -ge 1 ] || fail "gateway: no frame edited"
[ "$(find "$T/g1/events" -type d -name '*-reprocessed-g1' | wc -l)" = 1 ] || fail "gateway: no renamed folder"
# new events take the next indices; 5 events were deleted
[ -n "$(find "$T/g1/events" -name "evt-$(printf %07d "$ev").json")" ] || fail "gateway: no new events"
nnew=$((ev / 100)); [ "$nnew" -gt 0 ] || nnew=1
[ "$(count "$T/g1/events")" = $((ev + nnew - 5)) ] ||
    fail "gateway: $(count "$T/g1/events") events after --evolve, not $ev + $nnew - 5"
rm -rf "$T/g0" "$T/g1" "$T/d" "$T/d2" "$T/d3"

# small: the count, --files, --size, about 900 bytes a file
"$CTL" bench gen --profile small --files 2000 "$T/s" > /dev/null
[ "$(count "$T/s")" = 2000 ] || fail "small: --files 2000 made $(count "$T/s") files"
avg=$(find "$T/s" -type f -printf '%s\n' | awk '{ s += $1 } END { printf "%d", s / NR }')
[ "$avg" -ge 750 ] && [ "$avg" -le 1050 ] || fail "small: $avg bytes a file on average"
"$CTL" bench gen --profile small --files 2000 --evolve "$T/s" > /dev/null
[ "$(count "$T/s")" = 2020 ] || fail "small --evolve: $(count "$T/s") files, not 2020"
rm -rf "$T/s"
"$CTL" bench gen --profile small --size 90KiB "$T/s" > /dev/null
[ "$(count "$T/s")" = 102 ] || fail "small --size 90KiB: $(count "$T/s") files, not 102"
rm -rf "$T/s"

# bench/ship.sh on both profiles, one tiny run of three tools each
if [ "${LOOP:-auto}" != 0 ] && [ "$(id -u)" = 0 ] && ! losetup -f > /dev/null 2>&1; then LOOP=0; fi
export LOOP="${LOOP:-auto}"
for c in rsync socat zstd; do command -v "$c" > /dev/null || fail "$c not found: run sudo sh packaging/install-deps.sh bench"; done
repo_sum() { cat "$TOP"/bench/results-gateway.* "$TOP"/bench/results-small.* 2> /dev/null | sha256sum; }
before=$(repo_sum)
t0=$(date +%s)
env PROFILE=small FILES=300 RUNS=1 TOOLS="ours rsync-az tar-zstd" STAGES=0 PERF=0 VERIFY=first BENCH_DIR="$T" \
    RESULTS="$T/small.md" bash "$TOP/bench/ship.sh" "$BUILD" > "$T/small.out" 2> "$T/small.err" ||
    { tail -30 "$T/small.err"; fail "ship.sh PROFILE=small failed"; }
R=$T/small.md
grep -q '^# Shipping benchmark: the small profile$' "$R" || fail "small: no title"
grep -q '^- tree: PROFILE=small (`ingestctl bench gen --profile small --files 300`), generation 0 300 files' "$R" ||
    fail "small: the tree line"
grep -q '^## Per file$' "$R" || fail "small: no Per file section"
for label in "ours (ingest-agent -> ingest-receiver)" "rsync -az (daemon)" 'tar \| zstd -1 \| socat'; do
    # | tool | wall s | µs/file | MB/s | wire bytes | wire bytes / file | ...
    row=$(sed -n '/^## Per file$/,/^## /p' "$R" | grep -F "| $label" | sed 's/\\|/!/g')
    v=$(echo "$row" | awk -F'|' '{ gsub(/ /, "", $4); print $4 }')
    echo "$v" | grep -Eq '^[0-9]+(\.[0-9]+)?$' || fail "small: no µs/file for $label ('$v')"
    v=$(echo "$row" | awk -F'|' '{ gsub(/ /, "", $7); print $7 }')
    echo "$v" | grep -Eq '^[0-9]+(\.[0-9]+)?$' || fail "small: no wire bytes / file for $label ('$v')"
done
grep -Eq '^Ours on the wire beyond the compressed chunk data .* = [0-9]+ bytes per file' "$R" || fail "small: no overhead per file"
grep -Eq '^\| small files: wire bytes <= tar \\\| zstd -1.s \(initial\) \| .* \| (met|NOT met) \|$' "$R" || fail "small: no wire target"
grep -Eq '^\| small files: µs/file <= tar .* \| (met|NOT met) \|$' "$R" || fail "small: no µs/file target"
grep -q "^- verified .*ours run 1 incremental (303 files)" "$R" || fail "small: ours' incremental tree not verified"

env PROFILE=gateway SIZE=4MiB RUNS=1 TOOLS="ours rsync-az tar-zstd" STAGES=0 PERF=0 VERIFY=first BENCH_DIR="$T" \
    RESULTS="$T/gateway.md" bash "$TOP/bench/ship.sh" "$BUILD" > "$T/gateway.out" 2> "$T/gateway.err" ||
    { tail -30 "$T/gateway.err"; fail "ship.sh PROFILE=gateway failed"; }
R=$T/gateway.md
grep -q '^# Shipping benchmark: the gateway profile$' "$R" || fail "gateway: no title"
for t in '1.3x rsync -az MB/s' '1.0x tar \\| zstd MB/s' "incremental wire bytes <= 0.5x rsync -az's"; do
    grep -Eq "^\| gateway: .*$t.* \| (met|NOT met) \|\$" "$R" || fail "gateway: no target '$t'"
done
grep -q "^- verified .*tar-zstd run 1 incremental" "$R" || fail "gateway: tar's incremental tree not verified"
! grep -q '^## Per file$' "$R" || fail "gateway: a Per file section"
secs=$(($(date +%s) - t0))

[ "$(repo_sum)" = "$before" ] || fail "the runs changed bench/results-gateway.* or bench/results-small.*"
! grep -F "$T/" /proc/mounts || fail "mounts left behind under $T"
pass "bench gen profiles (default unchanged, gateway and small shaped and deterministic); ship.sh PROFILE=small and gateway: ${secs} s"

# arguments that do not parse are refused (exit 2), not read as 0 or wrapped; --evolve needs a tree
for a in "--size inf" "--size 18446744073709551615" "--size 1.5MiB" "--seed abc" "--seed -1" "--files 10x"; do
    rc=0
    # shellcheck disable=SC2086 # the option and its value, split on purpose
    "$CTL" bench gen $a "$T/bad" > "$T/bad.out" 2>&1 || rc=$?
    [ "$rc" = 2 ] || { cat "$T/bad.out"; fail "bench gen $a exited $rc, not 2"; }
done
[ ! -e "$T/bad" ] || fail "a refused bench gen made its directory"
rc=0
"$CTL" bench gen --evolve "$T/none" > "$T/none.out" 2>&1 || rc=$?
[ "$rc" = 1 ] && grep -q "no tree to evolve" "$T/none.out" || { cat "$T/none.out"; fail "--evolve of no tree exited $rc"; }
[ ! -e "$T/none" ] || fail "--evolve of no tree made one"
pass "bench gen refuses sizes, seeds and counts that do not parse, and --evolve without a tree"

# bench scan: a tree it walks, and a directory that is not there (said, exit 1; it reported a scan of 0 files)
"$CTL" bench gen --profile small --files 200 "$T/scan" > /dev/null || fail "bench gen for the scan failed"
"$CTL" bench scan "$T/scan" > "$T/scan.out" 2>&1 || { cat "$T/scan.out"; fail "bench scan of a tree failed"; }
grep -q '"files":200,' "$T/scan.out" || { cat "$T/scan.out"; fail "bench scan did not count 200 files"; }
rc=0
"$CTL" bench scan "$T/nowhere" > "$T/scan.out" 2>&1 || rc=$?
[ "$rc" = 1 ] && grep -q "nowhere: No such file or directory" "$T/scan.out" || { cat "$T/scan.out"; fail "bench scan of no directory (exit $rc)"; }
pass "bench scan walks a tree and refuses a directory that is not there"

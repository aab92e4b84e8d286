#!/bin/sh
# run-tests: alone: it syncs and drops the page cache before every ship
# bench/ship-ab.sh, a short run (2 rounds of a 1000-file small tree, the
# build against itself): every ship has its line with figures, in the
# order the rounds alternate (B first in odd rounds), the medians and the
# ratios are printed, and nothing is left behind (mounts, processes, the
# work dir).  A build that cannot ship fails the run with its output.
. "$(dirname "$0")/lib.sh"
TOP=$(cd "$(dirname "$0")/../.." && pwd)

if [ "${LOOP:-auto}" != 0 ] && [ "$(id -u)" = 0 ] && ! losetup -f > /dev/null 2>&1; then
    echo "note: no free loop device: landing into directories (LOOP=0)"
    LOOP=0
fi
export LOOP="${LOOP:-auto}"

PROFILE=small PAIRS=2 GEN_ARGS="--files 1000" BENCH_DIR="$T" IMG_SIZE=256M \
    bash "$TOP/bench/ship-ab.sh" "$BUILD" "$BUILD" > "$T/ab.out" 2> "$T/ab.err" ||
    { cat "$T/ab.out" "$T/ab.err"; fail "bench/ship-ab.sh failed"; }
cat "$T/ab.out"
grep -Eq '^# ship-ab: .* profile=small \(1000 files, [0-9]+ bytes\) pairs=2 ' "$T/ab.out" || fail "no header line"
# the ships: round, build, wall, agent CPU, receiver CPU; B first in round 1, A first in round 2
order=$(grep -E '^[12] +[AB] +[0-9]+\.[0-9]+ +[0-9]+\.[0-9]+ +[0-9]+\.[0-9]+$' "$T/ab.out" | awk '{ printf "%s%s ", $1, $2 }')
[ "$order" = "1B 1A 2A 2B " ] || fail "ships with figures, in order: '$order' (expected '1B 1A 2A 2B ')"
grep -Eq '^A +[0-9.]+ +[0-9.]+ +[0-9.]+$' "$T/ab.out" || fail "no medians of A"
grep -Eq '^B +[0-9.]+ +[0-9.]+ +[0-9.]+$' "$T/ab.out" || fail "no medians of B"
grep -A2 '^# medians of the per-round ratios B/A' "$T/ab.out" | tail -1 | grep -Eq '^ *[0-9]+\.[0-9]+ +[0-9]+\.[0-9]+ +[0-9]+\.[0-9]+$' ||
    fail "no ratios B/A"
grep -Eq "^# rounds where B's wall was the shorter: [0-2] of 2$" "$T/ab.out" || fail "no count of rounds"

# Nothing left behind.
! grep -F "$T/" /proc/mounts || fail "mounts left behind under $T"
left=$(pgrep -af -- "$T/" || true)
[ -z "$left" ] || fail "processes left behind: $left"
[ -z "$(find "$T" -maxdepth 1 -name 'ship-ab.*')" ] || fail "the work dir was not removed"

# A build that cannot ship (its agent missing) is refused before anything runs.
mkdir "$T/broken"
cp "$BUILD/ingestctl" "$BUILD/ingest-receiver" "$T/broken/"
if bash "$TOP/bench/ship-ab.sh" "$BUILD" "$T/broken" > "$T/ab2.out" 2>&1; then fail "a build without ingest-agent was accepted"; fi
grep -q "lacks ingestctl, ingest-receiver or ingest-agent" "$T/ab2.out" || fail "unexpected message: $(cat "$T/ab2.out")"
pass "ship-ab: 2 rounds, figures, order, medians, ratios; nothing left behind"

#!/usr/bin/env bash
# bench/dict-mix.sh [BUILD]: one dictionary for a mix of small files, or one
# per kind? (make bench-dict-mix; docs/compression.md, "One dictionary for
# several kinds of files").
#
# Generates the gateway profile at SIZE (ingestctl bench gen --profile
# gateway) and takes three kinds of small files from it: the JSON events
# (~2.9 KB), the CSV exports of at most 32 KiB (the largest file the agent
# groups as a small one), and the text logs cut into files of 2,900 bytes.
# Each kind's files, sorted by name, are split in two: the odd ones train,
# the even ones test, as the agent's held-out trial does. For each
# dictionary size in SIZES it trains one dictionary per kind, one from the
# training halves of all three at once ("mixed"), and one in three parts,
# one per kind (`ingestctl dict train --part`, what the agent's
# compression.dictionary: auto does with its kinds of files), then
# `ingestctl dict test` compresses every test file alone at level 1 with
# each dictionary and without one. Prints a markdown table of what each
# dictionary saves on each kind (100 x (1 - bytes with / bytes without)).
# No timing: the figures are bytes, the same on every run.
#
# Environment: SIZE (128MiB), SIZES ("65536 112640": the largest the agent
# trains with compression.dictionary: auto, and ingestctl's default),
# BENCH_DIR (/tmp), KEEP=1 keeps the work dir.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
TOP=$(cd "$HERE/.." && pwd)
BUILD=${1:-${BUILD:-build}}
case $BUILD in /*) ;; *) BUILD=$TOP/$BUILD ;; esac
CTL=$BUILD/ingestctl
SIZE=${SIZE:-128MiB}
SIZES=${SIZES:-65536 112640}
die() { echo "bench-dict-mix: $*" >&2; exit 1; }
[ -x "$CTL" ] || die "$CTL not built (make BUILD=$BUILD all)"
for z in $SIZES; do case $z in ''|*[!0-9]*) die "SIZES must be byte counts, not '$z'" ;; esac; done

W=$(mktemp -d "${BENCH_DIR:-/tmp}/ingest-dictmix.XXXXXX")
cleanup() { [ "${KEEP:-0}" = 1 ] && echo "bench-dict-mix: kept $W" >&2 || rm -rf "$W"; }
trap cleanup EXIT

"$CTL" bench gen --profile gateway --size "$SIZE" "$W/tree" > /dev/null
mkdir -p "$W/cut"
n=0
for f in "$W/tree/logs"/*; do
    split -b 2900 -a 5 "$f" "$W/cut/log$n."
    n=$((n + 1))
done

# lists KIND FILES...: the training (odd) and test (even) halves of a kind, one name per line
lists() {
    local kind=$1
    shift
    printf '%s\n' "$@" | LC_ALL=C sort | awk -v t="$W/$kind.train" -v e="$W/$kind.test" \
        'NR % 2 { print > t; next } { print > e }'
}
mapfile -t ev < <(find "$W/tree/events" -type f -name '*.json')
mapfile -t ex < <(find "$W/tree/exports" -type f -size -32769c)
mapfile -t lg < <(find "$W/cut" -type f)
[ "${#ev[@]}" -ge 64 ] && [ "${#ex[@]}" -ge 64 ] && [ "${#lg[@]}" -ge 64 ] ||
    die "too few files of a kind at SIZE=$SIZE (${#ev[@]} events, ${#ex[@]} exports, ${#lg[@]} log pieces)"
lists events "${ev[@]}"
lists exports "${ex[@]}"
lists logs "${lg[@]}"
KINDS="events exports logs"
cat "$W/events.train" "$W/exports.train" "$W/logs.train" > "$W/mixed.train"

# saves DICT KIND: the percentage `ingestctl dict test` reports
saves() { "$CTL" dict test --from "$W/$2.test" "$1" | sed -n 's/.*; saves \(-\{0,1\}[0-9.]*\)%$/\1/p'; }

echo "# dict-mix: SIZE=$SIZE; test files: events $(wc -l < "$W/events.test"), exports $(wc -l < "$W/exports.test"), logs $(wc -l < "$W/logs.test") (2,900-byte pieces); level 1"
for z in $SIZES; do
    for d in $KINDS mixed; do
        "$CTL" dict train --force --size "$z" --out "$W/$d.$z.dict" --from "$W/$d.train" > /dev/null 2>&1 ||
            die "training the $d dictionary of $z bytes failed"
    done
    "$CTL" dict train --force --size "$z" --out "$W/parts.$z.dict" --part "$W/events.train" \
        --part "$W/exports.train" --part "$W/logs.train" > /dev/null 2>&1 || die "training in parts failed"
    echo
    echo "dictionary of at most $z bytes, % saved on each kind's test files:"
    echo
    echo "| trained from | events | exports | logs |"
    echo "|---|---|---|---|"
    for d in $KINDS mixed parts; do
        row="| $d |"
        for k in $KINDS; do
            v=$(saves "$W/$d.$z.dict" "$k")
            [ -n "$v" ] || die "no figure for the $d dictionary on $k"
            row="$row $v |"
        done
        echo "$row"
    done
done

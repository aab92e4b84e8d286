#!/bin/sh
# ingestctl bench pipeline on a small tree prints one JSON object per phase
# whose byte and file counts match the tree.
. "$(dirname "$0")/lib.sh"
"$CTL" bench gen --size 4MiB "$T/tree" > /dev/null
bytes0=$(find "$T/tree" -type f -printf '%s\n' | awk '{ s += $1 } END { print s }')
files0=$(find "$T/tree" -type f | wc -l)
"$CTL" bench pipeline --evolve "$T/tree" > "$T/out.jsonl" 2> "$T/err" || { cat "$T/err"; fail "bench pipeline failed"; }
bytes1=$(find "$T/tree" -type f -printf '%s\n' | awk '{ s += $1 } END { print s }')
files1=$(find "$T/tree" -type f | wc -l)
[ "$(wc -l < "$T/out.jsonl")" -eq 2 ] || { cat "$T/out.jsonl"; fail "expected two JSON lines"; }
get() { sed -n "$1p" "$T/out.jsonl" | tr ',{}' '\n\n\n' | sed -n "s/^\"$2\"://p"; }
# Each line is one well-formed flat JSON object.
while IFS= read -r line; do
    echo "$line" | grep -Eq '^\{("[a-z_A-Zps]+":("[a-z]+"|-?[0-9]+(\.[0-9]+)?),)*"[a-z_A-Zps]+":("[a-z]+"|-?[0-9]+(\.[0-9]+)?)\}$' \
        || fail "not a flat JSON object: $line"
done < "$T/out.jsonl"
if command -v python3 > /dev/null; then
    python3 -c 'import json,sys; [json.loads(l) for l in open(sys.argv[1])]' "$T/out.jsonl" || fail "python3 rejects the JSON"
fi
[ "$(get 1 phase)" = '"initial"' ] || fail "first phase"
[ "$(get 1 source_bytes)" = "$bytes0" ] || fail "initial source_bytes $(get 1 source_bytes) != $bytes0"
[ "$(get 1 shipped_bytes)" = "$bytes0" ] || fail "initial shipped_bytes differs from the tree"
[ "$(get 1 source_files)" = "$files0" ] || fail "initial source_files differs"
[ "$(get 2 phase)" = '"incremental"' ] || fail "second phase"
[ "$(get 2 source_bytes)" = "$bytes1" ] || fail "incremental source_bytes $(get 2 source_bytes) != $bytes1"
[ "$(get 2 shipped_bytes)" = "$bytes1" ] || fail "incremental shipped_bytes differs from the evolved tree"
[ "$(get 2 source_files)" = "$files1" ] || fail "incremental source_files differs"
[ "$(get 2 chunks_new)" -lt "$(get 2 chunks)" ] || fail "the evolved tree sent every chunk again"
pass "bench pipeline: valid JSON per phase, byte and file counts match the tree"

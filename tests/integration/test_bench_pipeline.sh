#!/bin/sh
# ingestctl bench pipeline on a small tree prints one JSON object per phase
# whose byte and file counts match the tree, with the agent's latency
# percentiles and stage times.
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
    echo "$line" | grep -Eq '^\{("[a-z_A-Z0-9]+":("[a-z]+"|-?[0-9]+(\.[0-9]+)?),)*"[a-z_A-Z0-9]+":("[a-z]+"|-?[0-9]+(\.[0-9]+)?)\}$' \
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
# Latency and stage seconds: present, numbers >= 0, p99 >= p50; the stages
# of the shipping thread fit in the phase's wall time.
ge() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a + 0 >= b + 0) }'; }
for n in 1 2; do
    for k in latency_p50_s latency_p99_s agent_wait_build_s agent_wait_want_s agent_send_s agent_wait_ack_s; do
        v=$(get $n $k)
        echo "$v" | grep -Eq '^[0-9]+\.[0-9]{3}$' || fail "phase $n: $k is '$v', not a number >= 0"
    done
    ge "$(get $n latency_p99_s)" "$(get $n latency_p50_s)" || fail "phase $n: latency p99 < p50"
    ge "$(get $n seconds)" "$(get $n latency_p99_s)" || fail "phase $n: latency p99 exceeds the phase's seconds"
    stages=$(awk -v a="$(get $n agent_wait_build_s)" -v b="$(get $n agent_wait_want_s)" -v c="$(get $n agent_send_s)" \
        -v d="$(get $n agent_wait_ack_s)" 'BEGIN { print a + b + c + d }')
    ge "$(get $n seconds)" "$stages" || fail "phase $n: stage seconds $stages exceed the phase's $(get $n seconds) s"
done
ge "$(get 1 agent_send_s)" 0.001 || fail "initial phase: agent_send_s is 0 although chunks were sent"
pass "bench pipeline: valid JSON per phase, byte and file counts match the tree, latency and stage times sane"

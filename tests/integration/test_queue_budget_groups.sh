#!/bin/sh
# Chunk groups under the smallest queue budget (issue 14): a group's scratch
# (its decoded bytes and ids) is allocated for that group and counted in
# memory.queue_budget, with the decoded chunks queued ahead of the landing.
# Two devices ship trees of small files (sent as chunk groups) at the same
# time to a receiver with memory.queue_budget: 1MiB, so every group waits
# for the budget: both land byte-identical, and no session waits forever.
. "$(dirname "$0")/lib.sh"
setup_keys
write_receiver_config 'layout: "{device}/{path}"
memory:
  queue_budget: 1MiB'
start_receiver

for d in dev1 dev2; do
    mkdir -p "$T/src-$d/data"
    i=1
    while [ $i -le 300 ]; do
        head -c $((1000 + i * 37 % 12000)) /dev/urandom > "$T/src-$d/data/f$i.bin"
        i=$((i + 1))
    done
    head -c $((3 * 1024 * 1024)) /dev/urandom > "$T/src-$d/data/big.bin"
    write_agent_config "$d" "$T/src-$d/data"
done
"$AGENT" --config "$T/dev1.yaml" --once > "$T/dev1.out" 2> "$T/dev1.err" &
P1=$!
"$AGENT" --config "$T/dev2.yaml" --once > "$T/dev2.out" 2> "$T/dev2.err" &
P2=$!
wait $P1 || { cat "$T/dev1.err"; tail -20 "$T/receiver.log"; fail "agent dev1 failed"; }
wait $P2 || { cat "$T/dev2.err"; tail -20 "$T/receiver.log"; fail "agent dev2 failed"; }
for d in dev1 dev2; do
    [ "$(field $d chunk_groups)" -gt 0 ] || fail "$d sent no chunk group (chunk_groups=$(field $d chunk_groups))"
    same_tree "$T/src-$d/data" "$(landed_root $d)/data"
done
pass "two devices shipped $(field dev1 chunk_groups) and $(field dev2 chunk_groups) chunk groups under a 1 MiB queue budget; both trees landed identical"

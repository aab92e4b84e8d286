#!/bin/sh
# Deduplication across devices, and stale landed copies.
# 1. dev1 ships tree A; dev2 ships B = A + new files: dev2 sends exactly the
#    chunks of the new files (chunks_new = their distinct chunk count), and
#    both landed trees equal their sources.
# 2. Landed copies damaged downstream: one deleted, one overwritten in place
#    with its size and mtime kept (so only the bytes betray it).  dev1 then
#    ships copies of both files under new names: the receiver asks for the
#    deleted file's chunks up front and re-asks for the overwritten one's
#    when its copy fails verification; everything lands identical.
. "$(dirname "$0")/lib.sh"
setup_keys
write_receiver_config 'layout: "{device}/{path}"'
start_receiver

A="$T/srcA/data"
B="$T/srcB/data"
"$CTL" bench gen --size 6MiB "$A" > /dev/null
mkdir -p "$A/logs"
gen_log "$A/logs/x1.log" $((1024 * 1024)) 11
gen_log "$A/logs/x2.log" $((1024 * 1024)) 12
mkdir -p "$T/srcB"
cp -a "$A" "$B"
mkdir -p "$B/new"
gen_log "$B/new/n1.log" $((2 * 1024 * 1024)) 21
gen_log "$B/new/n2.log" $((300 * 1024)) 22
printf 'a small file only dev2 has\n' > "$B/new/small.txt"
new_chunks=$(distinct_chunks "$B/new/n1.log" "$B/new/n2.log" "$B/new/small.txt")
new_bytes=$(cat "$B"/new/* | wc -c)

# ids listed for every file (batch.push_max 0): dedup of small files is measured here, and pushed files
# travel whatever the core holds (tests/integration/test_push.sh)
write_agent_config dev1 "$A" 'batch: {push_max: 0}'
write_agent_config dev2 "$B" 'batch: {push_max: 0}'
ship dev1
same_tree "$A" "$(landed_root dev1)/data"
ship dev2
same_tree "$B" "$(landed_root dev2)/data"
[ "$(field dev2 chunks_new)" -eq "$new_chunks" ] ||
    fail "dev2 sent $(field dev2 chunks_new) chunks; its new files have $new_chunks"
[ "$(field dev2 chunks_dedup)" -eq $(($(field dev2 chunks) - new_chunks)) ] ||
    fail "dev2 chunks_dedup=$(field dev2 chunks_dedup), expected chunks - $new_chunks"
[ "$(field dev2 chunk_bytes)" -le $((new_bytes + 4096)) ] ||
    fail "dev2 chunk_bytes=$(field dev2 chunk_bytes) > new bytes $new_bytes"
[ "$(recv_sum "known")" -ge $(($(field dev2 chunks) - new_chunks)) ] || fail "receiver copied too few known chunks"
same_tree "$A" "$(landed_root dev1)/data"
pass "dev2 sent only its $new_chunks new chunks ($(field dev2 chunk_bytes) of $new_bytes new bytes); both trees identical"

# Damage dev2's landed copies (the index points at the newest copy of a chunk).
x1_chunks=$(distinct_chunks "$A/logs/x1.log")
x2_chunks=$(distinct_chunks "$A/logs/x2.log")
rm "$(landed_root dev2)/data/logs/x1.log"
L2="$(landed_root dev2)/data/logs/x2.log"
printf 'DAMAGED DOWNSTREAM' | dd of="$L2" bs=1 seek=200000 conv=notrunc 2>/dev/null
touch -r "$A/logs/x2.log" "$L2"
cmp -s "$A/logs/x2.log" "$L2" && fail "x2.log was not damaged"
reasked_before=$(recv_sum "re-asked")
mkdir -p "$A/copies"
cp "$A/logs/x1.log" "$A/copies/x1-copy.log"
cp "$A/logs/x2.log" "$A/copies/x2-copy.log"
ship dev1
same_tree "$A" "$(landed_root dev1)/data"
reasked=$(($(recv_sum "re-asked") - reasked_before))
[ "$reasked" -gt 0 ] || { tail -5 "$T/receiver.log"; fail "overwritten landed copy: the receiver re-asked no chunk"; }
[ "$reasked" -le "$x2_chunks" ] || fail "re-asked $reasked chunks, x2 has only $x2_chunks"
[ "$(field dev1 chunks_new)" -eq $((x1_chunks + reasked)) ] ||
    fail "dev1 sent $(field dev1 chunks_new) chunks; expected x1's $x1_chunks + $reasked re-asked"
grep -q "known chunks were stale; asking for them" "$T/receiver.log" || fail "no log line about re-asked stale chunks"
pass "deleted landed file re-sent ($(field dev1 chunks_new) chunks), overwritten copy detected ($reasked chunks re-asked)"

# The re-sent chunks now live in dev1's new files: dev2's next run of its
# whole tree (--all: its files are unchanged at the edge) lands without
# chunk data and its damaged tree is whole again.
ship_with dev2 --all
[ "$(field dev2 files)" -eq "$(find "$B" -type f | wc -l)" ] || fail "dev2 --all shipped $(field dev2 files) files"
[ "$(field dev2 chunks_new)" -eq 0 ] || fail "dev2 re-run sent $(field dev2 chunks_new) chunks"
same_tree "$B" "$(landed_root dev2)/data"
pass "dev2's damaged landed tree repaired by a re-ship without chunk data"

#!/bin/sh
# Delta chunks (docs/compression.md, "Delta chunks"; docs/protocol.md).
# 1. A 1 MiB random binary file is shipped, then 16 bytes in its middle are
#    edited in place and it is shipped again: the second ship sends at most
#    2 KiB of chunk data (one CHUNK_DELTA: the changed 1 KiB block), and the
#    landed file equals the source.
# 2. A stale predecessor: the source is edited again, and the landed copy
#    is changed downstream (size and mtime kept) in another block of the
#    same chunk after the receiver described it (DELTA_BASE) and before
#    the delta comes: the rebuilt chunk does not match its id, the receiver
#    says so, asks for the chunk whole and lands the file equal to the
#    source.
# 3. A landed copy changed downstream before the ship needs no re-ask: the
#    receiver hashes what is there, so the changed block is sent literal
#    (two literal blocks, at most 3 KiB of chunk data).
. "$(dirname "$0")/lib.sh"
S="$T/src/data"
mkdir -p "$S"
setup_keys
write_receiver_config 'layout: "{device}/{path}"'
start_receiver
# deterministic incompressible bytes
LC_ALL=C awk 'BEGIN { srand(16); for (i = 0; i < 1048576; i++) printf "%c", int(rand() * 256) }' > "$T/rand.bin" 2>/dev/null ||
    fail "cannot generate the random file"
head -c 1048576 "$T/rand.bin" > "$S/frame.bin"
[ "$(wc -c < "$S/frame.bin")" -eq 1048576 ] || fail "the random file is not 1 MiB"
write_agent_config dev1 "$S"
ship dev1 > /dev/null
L="$(landed_root dev1)/data/frame.bin"
cmp -s "$S/frame.bin" "$L" || fail "first ship: landed file differs"
[ "$(field dev1 chunk_bytes)" -ge 1000000 ] || fail "first ship sent only $(field dev1 chunk_bytes) bytes of chunk data"

# blk_at CHUNK_START CHUNK_LEN: an offset 100 bytes into a 1 KiB block in the middle of that chunk (the
# receiver's block hashes start at the chunk's start: a 16-byte edit there never straddles two blocks)
blk_at() { echo $(($1 + ($2 / 2 / 1024) * 1024 + 100)); }
# edit 16 bytes in place in the middle (a second later: a new mtime)
set -- $("$CTL" chunk "$S/frame.bin" | awk '!/^#/ && $1 <= 524300 && $1 + $2 > 524300 { print $1, $2 }')
[ $# -eq 2 ] || fail "cannot find the chunk at offset 524300 ($*)"
sleep 1
printf 'SIXTEEN BYTES!!!' | dd of="$S/frame.bin" bs=1 seek="$(blk_at "$1" "$2")" conv=notrunc 2>/dev/null
ship dev1 > /dev/null
cmp -s "$S/frame.bin" "$L" || fail "after the 16-byte edit: landed file differs"
cb=$(field dev1 chunk_bytes)
[ "$cb" -le 2048 ] || fail "a 16-byte edit sent $cb bytes of chunk data (at most 2048 expected)"
[ "$(field dev1 chunk_deltas)" -eq 1 ] || fail "expected one delta chunk, got $(field dev1 chunk_deltas)"
grep -q "1 delta chunks rebuilt, 0 asked again whole" "$T/receiver.log" || { tail -5 "$T/receiver.log"; fail "no delta line in the receiver log"; }
pass "16-byte edit in a 1 MiB binary file: $cb bytes of chunk data, landed identical"

# Stale predecessor: the landed copy changes downstream (size and mtime kept) after the receiver
# described it (DELTA_BASE) and before the delta comes.  The agent is held after the manifest
# (INGEST_TEST_SHIP_PAUSE) while the landed copy is changed at the start of the chunk that holds
# offset 200000; the source was edited in the middle of that chunk (another block).
set -- $("$CTL" chunk "$S/frame.bin" | awk '!/^#/ && $1 <= 200000 && $1 + $2 > 200000 { print $1, $2 }')
[ $# -eq 2 ] && [ "$2" -ge 8192 ] || fail "cannot find the chunk at offset 200000 ($*)"
sleep 1
printf 'SECOND EDIT 16 B' | dd of="$S/frame.bin" bs=1 seek="$(blk_at "$1" "$2")" conv=notrunc 2>/dev/null
: > "$T/pause"
INGEST_TEST_SHIP_PAUSE="$T/pause" "$AGENT" --config "$T/dev1.yaml" --once > "$T/dev1.out" 2> "$T/dev1.err" &
APID=$!
i=0
while [ ! -e "$T/pause.paused" ]; do
    i=$((i + 1)); [ $i -gt 400 ] && { cat "$T/dev1.err"; fail "the agent never paused after the manifest"; }
    sleep 0.05
done
# the receiver has described the predecessor (its second such line: the first was the first edit's)
i=0
while [ "$(grep -c "1 of 1 wanted chunks have a predecessor" "$T/receiver.log")" -lt 2 ]; do
    i=$((i + 1)); [ $i -gt 400 ] && { tail -5 "$T/receiver.log"; fail "no DELTA_BASE for the edited chunk"; }
    sleep 0.05
done
mtime_ref="$T/mtime.ref"
touch -r "$L" "$mtime_ref"
printf 'CHANGED DOWNSTREAM' | dd of="$L" bs=1 seek=$(($1 + 100)) conv=notrunc 2>/dev/null
touch -r "$mtime_ref" "$L"
rm -f "$T/pause"
wait "$APID" || { cat "$T/dev1.err"; tail -20 "$T/receiver.log"; fail "agent failed"; }
cmp -s "$S/frame.bin" "$L" || fail "stale predecessor: landed file differs"
grep -q "delta chunk [0-9]*: rebuilt from its predecessor, it does not match its id; asking for it whole" "$T/receiver.log" ||
    { tail -5 "$T/receiver.log"; fail "no log line about the stale predecessor"; }
grep -q "0 delta chunks rebuilt, 1 asked again whole" "$T/receiver.log" ||
    { tail -5 "$T/receiver.log"; fail "the stale delta was not counted"; }
[ "$(field dev1 chunk_deltas)" -eq 1 ] || fail "stale predecessor: expected one delta sent, got $(field dev1 chunk_deltas)"
[ "$(field dev1 chunks_new)" -eq 2 ] || fail "stale predecessor: expected the delta and the whole chunk, $(field dev1 chunks_new) sent"
[ "$(field dev1 chunk_bytes)" -gt 8192 ] || fail "stale predecessor: the whole chunk was not sent ($(field dev1 chunk_bytes) bytes)"
pass "stale predecessor detected, chunk asked for whole ($(field dev1 chunk_bytes) bytes of chunk data), landed identical"

# A landed copy changed downstream before the ship costs a literal block, not a re-ask: the receiver
# hashes what is there.  Change it (size and mtime kept) at the start of the chunk holding offset
# 600000, edit the source in the middle of that chunk, ship.
set -- $("$CTL" chunk "$S/frame.bin" | awk '!/^#/ && $1 <= 600000 && $1 + $2 > 600000 { print $1, $2 }')
[ $# -eq 2 ] && [ "$2" -ge 8192 ] || fail "cannot find the chunk at offset 600000 ($*)"
touch -r "$L" "$mtime_ref"
printf 'CHANGED DOWNSTREAM' | dd of="$L" bs=1 seek=$(($1 + 100)) conv=notrunc 2>/dev/null
touch -r "$mtime_ref" "$L"
sleep 1
printf 'THIRD EDIT 16 B!' | dd of="$S/frame.bin" bs=1 seek="$(blk_at "$1" "$2")" conv=notrunc 2>/dev/null
ship dev1 > /dev/null
cmp -s "$S/frame.bin" "$L" || fail "landed copy changed before the ship: landed file differs"
[ "$(grep -c "1 delta chunks rebuilt, 0 asked again whole" "$T/receiver.log")" -eq 2 ] ||
    { tail -5 "$T/receiver.log"; fail "landed copy changed before the ship: the delta did not land at once"; }
[ "$(field dev1 chunk_bytes)" -le 3072 ] ||
    fail "landed copy changed before the ship: $(field dev1 chunk_bytes) bytes of chunk data (at most 3072: two literal blocks)"
pass "landed copy changed before the ship: $(field dev1 chunk_bytes) bytes of chunk data (two literal blocks), landed identical"

# A layout shared by the devices (no {device}): no predecessor is described, since the file at the landed
# path may be another device's (its block hashes are not this device's to see); the edit goes whole.
stop_receiver
rm -rf "$T/bronze" "$T/rstate" "$T/astate-dev1"
write_receiver_config 'layout: "{path}"
layout_shared: true'
start_receiver
write_agent_config dev1 "$S"
ship dev1 > /dev/null
sleep 1
set -- $("$CTL" chunk "$S/frame.bin" | awk '!/^#/ && $1 <= 524300 && $1 + $2 > 524300 { print $1, $2 }')
printf 'FOURTH EDIT 16 B' | dd of="$S/frame.bin" bs=1 seek="$(blk_at "$1" "$2")" conv=notrunc 2>/dev/null
write_agent_config dev2 "$S"
ship dev2 > /dev/null
cmp -s "$S/frame.bin" "$T/bronze/data/frame.bin" || fail "shared layout: landed file differs"
[ "$(field dev2 chunk_deltas)" -eq 0 ] || fail "shared layout: dev2 was given the block hashes of dev1's file ($(field dev2 chunk_deltas) delta chunks)"
pass "a layout shared by the devices: no predecessor described, the changed chunk sent whole ($(field dev2 chunk_bytes) bytes)"

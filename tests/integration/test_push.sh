#!/bin/sh
# Pushed chunks (docs/protocol.md "Pushed chunks"): the files of at most
# batch.push_max bytes travel without their chunk ids in the wire manifest;
# the receiver takes each id from the bytes.  On 600 JSON events of 1,000
# bytes and a 3 MiB log, each into a fresh receiver:
#   - batch.push_max 0 (ids listed, as before) and the default (32 KiB)
#     send the same chunk bytes, and the pushed ship fewer wire bytes
#     (about the ids' share of the manifest); both land byte for byte, and
#     the landed manifests hold every chunk id and file hash either way;
#   - the same files touched (a new mtime, the same bytes) are not pushed
#     again: their paths are in the agent's file table, so their ids are
#     listed and nothing is sent (renamed, they are new paths: pushed;
#     test_roundtrip.sh);
#   - against a receiver that speaks only protocol version 1 (it refuses
#     the version-2 HELLO a device offering push and index runs sends), the
#     agent says so, connects again without them and ships the same chunk
#     bytes, with more wire bytes than version 2 with push_max 0 (whose
#     WANT and chunk groups still travel as index runs);
#   - a replay: the agent is killed after its batch landed but before the
#     ACK reached it (the receiver holds the ACK); run again, it replays the
#     journaled batch, which the receiver recognises by the manifest's
#     digest (the pushed files' hashes are not known before their bytes):
#     acknowledged as landed, nothing landed twice.
. "$(dirname "$0")/lib.sh"
setup_keys
S="$T/src/data"
gen_events "$S/events" 600
mkdir -p "$S/logs"
gen_log "$S/logs/big.log" $((3 * 1024 * 1024)) 7

# fresh_ship NAME [agent yaml]: a fresh receiver (bronze and state) and agent state, ship, keep the summary
fresh_ship() {
    stop_receiver
    rm -rf "$T/bronze" "$T/rstate" "$T/astate-dev1"
    write_receiver_config 'layout: "{device}/{path}"'
    start_receiver
    write_agent_config dev1 "$S" "${2:-}"
    ship dev1 > /dev/null
    cp "$T/dev1.out" "$T/$1.out"
    cp "$T/dev1.err" "$T/$1.err"
    same_tree "$S" "$(landed_root dev1)/data"
    # every landed record has its hash and ids (a pushed chunk is written as [length] on the wire only)
    ! grep -h -E '\[\[[0-9]|"type":"file"' "$T"/bronze/_manifests/dev1/*.jsonl | grep -v '"hash":"[0-9a-f]\{64\}"' |
        grep -q . || fail "$1: a landed manifest lacks a hash"
    ! grep -h -q -E '\[[0-9]+\]' "$T"/bronze/_manifests/dev1/*.jsonl || fail "$1: a landed manifest lacks a chunk id"
}
f() { tail -1 "$T/$1.out" | tr ' ' '\n' | sed -n "s/^$2=//p"; }

fresh_ship nopush 'batch:
  push_max: 0'
fresh_ship push
[ "$(f push chunks_new)" = "$(f nopush chunks_new)" ] || fail "chunks sent: $(f push chunks_new) pushed, $(f nopush chunks_new) not"
[ "$(f push chunk_bytes)" = "$(f nopush chunk_bytes)" ] ||
    fail "chunk bytes: $(f push chunk_bytes) pushed, $(f nopush chunk_bytes) not: the same chunks should travel"
# 600 ids of 64 hex digits are at least ~20 bytes each once compressed
[ "$(f push wire_bytes)" -le $(($(f nopush wire_bytes) - 600 * 20)) ] ||
    fail "wire bytes: $(f push wire_bytes) pushed against $(f nopush wire_bytes) with ids: the ids were not left out"
pass "600 small files pushed: $(f push wire_bytes) wire bytes against $(f nopush wire_bytes) with their ids listed (same $(f push chunk_bytes) chunk bytes); landed byte for byte with every id"

# Touched, the small files are shipped again with their ids: this device shipped those paths before.
touch -d '2024-06-01 12:00' "$S"/events/*.json
ship dev1 > /dev/null
[ "$(field dev1 files)" = 600 ] || fail "the 600 touched files were not shipped again ($(field dev1 files))"
[ "$(field dev1 chunks_new)" = 0 ] || fail "the touched small files sent $(field dev1 chunks_new) chunks again"
same_tree "$S" "$(landed_root dev1)/data"
pass "600 pushed files touched: shipped again with their ids, no chunk data"

# A receiver of protocol version 1.
stop_receiver
export INGEST_TEST_PROTOCOL_V1=1
fresh_ship fallback
unset INGEST_TEST_PROTOCOL_V1
grep -q "speaks protocol version 1: connecting again without pushed chunks" "$T/fallback.err" ||
    { cat "$T/fallback.err"; fail "the agent did not say it fell back to protocol version 1"; }
grep -q "device speaks protocol version 2" "$T/receiver.log" || fail "the receiver did not log the refused version"
[ "$(f fallback chunk_bytes)" = "$(f nopush chunk_bytes)" ] || fail "fallback: chunk bytes $(f fallback chunk_bytes), not $(f nopush chunk_bytes)"
# push_max 0 still has index runs (version 2): the 640 wanted indexes and the group's travel as runs, at least
# 600 * 4 bytes fewer than version 1's lists
[ "$(f fallback wire_bytes)" -ge $(($(f nopush wire_bytes) + 600 * 4)) ] ||
    fail "fallback: $(f fallback wire_bytes) wire bytes, against $(f nopush wire_bytes) with push_max 0 and index runs"
pass "a receiver of version 1: the agent connected again without push nor runs and shipped $(f fallback wire_bytes) wire bytes (version 2 with push_max 0: $(f nopush wire_bytes))"

# The replay of a batch of pushed files.
stop_receiver
rm -rf "$T/bronze" "$T/rstate" "$T/astate-dev1" "$T/receiver.log"
write_receiver_config 'layout: "{device}/{path}"'
export INGEST_TEST_ACK_DELAY_MS=5000
start_receiver
unset INGEST_TEST_ACK_DELAY_MS
write_agent_config dev1 "$S"
"$AGENT" --config "$T/dev1.yaml" --once > "$T/dev1.out" 2> "$T/dev1.err" &
AGENT_PID=$!
wait_log " landed: " 600
kill -KILL "$AGENT_PID"
wait "$AGENT_PID" 2>/dev/null || true
batch=$(sed -n 's/.*device dev1 batch \([^ ]*\) landed: .*/\1/p' "$T/receiver.log" | head -1)
[ -n "$batch" ] || fail "no batch landed before the agent was killed"
ship dev1 > /dev/null
[ "$(field dev1 batches_replayed)" -ge 1 ] || { cat "$T/dev1.err"; fail "the agent replayed no batch"; }
grep -q "device dev1 batch $batch was landed before; acknowledged again" "$T/receiver.log" ||
    { tail -20 "$T/receiver.log"; fail "the receiver did not take the replay of $batch for the landed batch"; }
same_tree "$S" "$(landed_root dev1)/data"
n=$(manifest_paths dev1 | wc -l)
u=$(manifest_paths dev1 | sort -u | wc -l)
[ "$n" = 601 ] && [ "$u" = 601 ] || fail "manifests record $n paths ($u distinct), expected each of the 601 once"
[ "$(count_tmp "$T/bronze")" = 0 ] || fail "temporary files left in bronze"
pass "agent killed before the ACK of $batch: the replay was recognised by its digest, each of the 601 files landed once"

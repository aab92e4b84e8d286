#!/bin/sh
# The daemon ships its journal pipelined (docs/protocol.md, "Pipelined
# batches"): the receiver holds each ACK 4 s after its batch is durable
# (INGEST_TEST_ACK_DELAY_MS), and a backlog of four batches is queued.
#   - the second batch is sent while the first one's ACK is held: when the
#     daemon has sent the chunks of two batches, it has acknowledged none
#     (a daemon that waits for each ACK before the next batch has one);
#   - the daemon is killed (-9) then, two batches or more unacknowledged, with
#     after_ship: delete: their files stay (no ACK, no delete); restarted
#     against a receiver that acks at once, it replays them under their ids
#     (acknowledged as duplicates), every file lands once, byte-identical,
#     and only then is deleted.
. "$(dirname "$0")/lib.sh"
setup_keys
write_receiver_config 'layout: "{device}/{path}"'
start_receiver
pin_receiver_port
stop_receiver
S="$T/src/data"
K="$T/keep"
mkdir -p "$S" "$K"
for i in $(seq 1 20); do gen_log "$S/p$i.log" 300 $i; done
cp -r "$S/." "$K/"
write_agent_config dev1 "$S" 'batch:
  max_files: 5
  max_wait: 100ms'
sed -i 's|^  - path: .*|&\n    settle: 100ms\n    after_ship: delete|' "$T/dev1.yaml"
export INGEST_TEST_ACK_DELAY_MS=4000
start_receiver
unset INGEST_TEST_ACK_DELAY_MS
"$AGENT" --config "$T/dev1.yaml" > "$T/dev1.out" 2> "$T/dev1.err" &
AGENT_PID=$!
wait_log ' landed: ' 600
# batch 1 is durable, its ACK held 4 s: the next batch's chunks go meanwhile (or, unpipelined, only after it)
i=0
while :; do
    status_json || fail "no status from the daemon"
    acked=$(jget totals.batches_acked); sent=$(jget totals.chunks_new)
    [ "$acked" != 0 ] || [ "$sent" -ge 10 ] && break
    i=$((i + 1)); [ $i -gt 600 ] && { tail -20 "$T/dev1.err"; fail "the daemon sent no more than one batch"; }
    sleep 0.02
done
[ "$acked" = 0 ] || fail "the second batch was sent only after the first one's ACK came (batches_acked $acked, chunks sent $sent)"
[ "$(find "$S" -name 'p*.log' | wc -l)" = 20 ] || fail "files were deleted before any ACK"
pass "pipelined: $sent chunks of more than one batch sent while the first ACK was held, none acknowledged yet"
kill -9 "$AGENT_PID"
wait "$AGENT_PID" 2>/dev/null || true
[ "$(find "$S" -name 'p*.log' | wc -l)" = 20 ] || fail "files of batches waiting for their ACKs were deleted"
stop_receiver
start_receiver
"$AGENT" --config "$T/dev1.yaml" > "$T/dev1.out" 2> "$T/dev1.err" &
AGENT_PID=$!
i=0
while [ "$(find "$S" -name 'p*.log' | wc -l)" != 0 ]; do
    i=$((i + 1)); [ $i -gt 600 ] && { tail -20 "$T/dev1.err"; fail "the files were not all shipped and deleted"; }
    sleep 0.05
done
status_json || fail "no status from the daemon"
replayed=$(jget totals.batches_replayed)
[ "$replayed" -ge 2 ] || fail "batches replayed after the kill: $replayed, expected at least the two pending"
kill -TERM "$AGENT_PID"
rc=0; wait "$AGENT_PID" || rc=$?
[ "$rc" = 0 ] || fail "agent exited $rc"
same_tree "$K" "$(landed_root dev1)/data"
dups=$(manifest_paths dev1 | sort | uniq -d | wc -l)
[ "$dups" = 0 ] || fail "$dups paths recorded more than once"
[ "$(manifest_paths dev1 | wc -l)" = 20 ] || fail "not 20 file records in the manifests"
pass "killed with batches pending: $replayed replayed under their ids, all 20 files landed once, then deleted"

#!/bin/sh
# kill -9 of the receiver inside the dangerous window of --once: a batch
# made durable whose ACK the agent never read (batches pipelined), then
# recovery, exactly once.
# A 64 MiB tree of ~960 files is shipped in batches of 40 files by a
# receiver that holds every ACK 5 s after its batch is durable
# (INGEST_TEST_ACK_DELAY_MS).  As soon as the first batch is logged landed
# (durable, its ACK held back), and once the next batch has temporary files
# in bronze, the receiver is frozen (SIGSTOP, so the moment is certain) and
# killed with SIGKILL.  Then:
#   - the agent exits non-zero saying not everything was acknowledged, and
#     that the batch received but not acknowledged stays journaled;
#   - every file visible under a final name equals its source (nothing
#     half-written is ever renamed into place);
#   - after a restart the receiver removes the temporary files the crash
#     left, and a re-run of the agent replays the journaled batches under
#     their ids first: the landed one is acknowledged as a duplicate (the
#     receiver says so, the agent counts batches_replayed), then the rest.
# Exactly once: the landed tree holds each source file once, under its
# final name, with the right bytes, no temporary file remains, and each
# path is recorded in exactly one batch manifest.
. "$(dirname "$0")/lib.sh"
setup_keys
write_receiver_config 'layout: "{device}/{path}"'
export INGEST_TEST_ACK_DELAY_MS=5000
start_receiver
unset INGEST_TEST_ACK_DELAY_MS
S="$T/src/data"
"$CTL" bench gen --size 64MiB "$S" > /dev/null
nfiles=$(find "$S" -type f | wc -l)
[ "$nfiles" -gt 200 ] || fail "generator made only $nfiles files"
write_agent_config dev1 "$S" 'batch:
  max_files: 40'

"$AGENT" --config "$T/dev1.yaml" --once > "$T/dev1.out" 2> "$T/dev1.err" &
AGENT_PID=$!
# Wait for a landed batch (its ACK held back), then freeze the receiver while the next batch has temporary files.
wait_log " landed: " 600
tries=0
while :; do
    kill -STOP "$RECV_PID"
    [ "$(count_tmp "$T/bronze")" -gt 0 ] && break
    kill -CONT "$RECV_PID"
    tries=$((tries + 1))
    [ $tries -gt 2000 ] && fail "never caught the receiver in the middle of a batch"
    kill -0 "$AGENT_PID" 2>/dev/null || { cat "$T/dev1.out" "$T/dev1.err"; fail "agent finished before the receiver was caught mid-batch"; }
    sleep 0.002
done
landed_before=$(grep -c ' landed: ' "$T/receiver.log")
window=$(sed -n 's/.*device dev1 batch \([^ ]*\) landed: .*/\1/p' "$T/receiver.log" | head -1)
[ "$landed_before" -eq 1 ] || fail "$landed_before batches landed before the kill; the ACK delay lets one land, then holds its ACK"
# --once pipelines batches (RECEIVED, then the ACK while the next batch ships): the crash hits that path.
grep -q 'device dev1 connected .*pipelined' "$T/receiver.log" || fail "the connection was not pipelined"
kill -KILL "$RECV_PID"
wait "$RECV_PID" 2>/dev/null || true
RECV_PID=""
rc=0
wait "$AGENT_PID" || rc=$?
[ $rc -ne 0 ] || fail "agent exited 0 although the receiver was killed"
grep -q "stopped before every batch was acknowledged" "$T/dev1.err" ||
    { cat "$T/dev1.err"; fail "agent gave no clear message after the receiver died"; }
grep -q "batch $window was received but not acknowledged" "$T/dev1.err" ||
    { cat "$T/dev1.err"; fail "batch $window landed but the agent did not say it was left unacknowledged"; }
[ "$landed_before" -lt $(( (nfiles + 39) / 40 )) ] || fail "all batches had landed before the kill"
pass "receiver killed mid-batch after $landed_before batches; agent exited $rc: $(grep -v '^shipped' "$T/dev1.err" | tail -1)"

# Before the restart: every file under a final name equals its source.
ntmp=$(count_tmp "$T/bronze")
[ "$ntmp" -gt 0 ] || fail "no temporary file found after the kill"
(cd "$(landed_root dev1)/data" && find . -type f ! -path '*.ingest-tmp-*' | sort) > "$T/final.list"
nfinal=$(wc -l < "$T/final.list")
[ "$nfinal" -gt 0 ] || fail "nothing landed before the kill"
[ "$nfinal" -lt "$nfiles" ] || fail "every file had landed before the kill"
(cd "$S" && xargs -r sha256sum < "$T/final.list") > "$T/final.sums"
(cd "$(landed_root dev1)/data" && sha256sum -c --quiet "$T/final.sums") || fail "a file under its final name differs from its source after the kill"
pass "after the kill: $nfinal files under final names all equal their sources; $ntmp temporary files left"

# A file of the batch whose ACK was lost changes before the replay (a log that grew): the agent replays the
# batch without it, the receiver still takes that for the landed batch (every file it holds is among the
# landed ones, with the same bytes), and the changed file lands as its next version in a batch of its own.
changed=$(sed -n 's/.*"type":"file","path":"data\/\([^"]*\)".*/\1/p' "$T/bronze/_manifests/dev1/$window.jsonl" | head -1)
[ -n "$changed" ] && [ -f "$S/$changed" ] || fail "no file of batch $window found to change"
printf 'appended after its batch landed\n' >> "$S/$changed"

start_receiver
grep -q "temporary files" "$T/receiver.log" || { tail -5 "$T/receiver.log"; fail "restarted receiver did not report the leftover temporary files"; }
[ "$(count_tmp "$T/bronze")" -eq 0 ] || fail "temporary files still present after the restart"
write_agent_config dev1 "$S" 'batch:
  max_files: 40'   # the restarted receiver listens on a new port
ship dev1
same_tree "$S" "$(landed_root dev1)/data"
[ "$(find "$(landed_root dev1)/data" -type f | wc -l)" -eq "$nfiles" ] || fail "landed tree has extra files"
[ "$(count_tmp "$T/bronze")" -eq 0 ] || fail "temporary files left after the re-run"
find "$T/bronze/_manifests" -name '*.tmp' | grep -q . && fail "temporary manifest left"

# Manifests: every source path recorded, each in exactly one manifest.
manifest_paths dev1 | sort > "$T/recorded"
[ "$(uniq "$T/recorded" | wc -l)" -eq "$nfiles" ] ||
    fail "manifests record $(uniq "$T/recorded" | wc -l) distinct paths, source has $nfiles"
twice=$(uniq -d "$T/recorded")
[ "$twice" = "data/$changed" ] || { echo "$twice" | head -3; fail "paths recorded in two manifests: '$(echo $twice)', expected only the changed data/$changed (two versions)"; }
[ "$(wc -l < "$T/recorded")" -eq $((nfiles + 1)) ] || fail "$(wc -l < "$T/recorded") FILE records for $nfiles files and one new version"
# ... because the batch that landed in the window was replayed under its id, and acknowledged as a duplicate.
grep -q "device dev1 batch $window was landed before; acknowledged again" "$T/receiver.log" ||
    { grep dev1 "$T/receiver.log" | tail -5; fail "batch $window was not replayed to the restarted receiver"; }
grep -q "batch $window: replaying it under its id" "$T/dev1.err" ||
    { tail -5 "$T/dev1.err"; fail "the agent did not say it replayed batch $window"; }
replayed=$(field dev1 batches_replayed)
[ "${replayed:-0}" -ge 1 ] || fail "the agent's summary counts batches_replayed=${replayed:-none}, expected at least 1"
pass "after recovery: $nfiles files landed once with the right bytes, each path in one manifest but the one changed since (its two versions); batch $window (durable, ack lost, one file changed since) replayed as a duplicate ($replayed batches replayed)"

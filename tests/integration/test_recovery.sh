#!/bin/sh
# kill -9 of the receiver in the middle of a batch (batches pipelined), then recovery.
# A 64 MiB tree of ~960 files is shipped in batches of 40 files.  Once a
# batch has landed and the next one has temporary files in bronze, the
# receiver is frozen (SIGSTOP, so the moment is certain) and killed with
# SIGKILL.  Then:
#   - the agent exits non-zero saying not everything was acknowledged;
#   - every file visible under a final name equals its source (nothing
#     half-written is ever renamed into place);
#   - after a restart the receiver removes the temporary files the crash
#     left, and a re-run of the agent lands the rest.
# "Exactly once" here: the landed tree holds each source file once, under
# its final name, with the right bytes, and no temporary file remains.  A
# path may be recorded in two batch manifests (a batch made durable whose
# ack was lost in the crash is shipped again as a new batch): allowed only
# when both records carry the same content hash.
. "$(dirname "$0")/lib.sh"
setup_keys
write_receiver_config 'layout: "{device}/{path}"'
start_receiver
S="$T/src/data"
"$CTL" bench gen --size 64MiB "$S" > /dev/null
nfiles=$(find "$S" -type f | wc -l)
[ "$nfiles" -gt 200 ] || fail "generator made only $nfiles files"
write_agent_config dev1 "$S" 'batch:
  max_files: 40'

"$AGENT" --config "$T/dev1.yaml" --once > "$T/dev1.out" 2> "$T/dev1.err" &
AGENT_PID=$!
# Wait for a landed batch, then freeze the receiver while a later batch has temporary files.
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
[ "$landed_before" -lt $(( (nfiles + 39) / 40 )) ] || fail "all batches had landed before the kill"
pass "receiver killed mid-batch after $landed_before batches; agent exited $rc: $(grep -v '^shipped' "$T/dev1.err" | tail -1)"

# Before the restart: every file under a final name equals its source.
ntmp=$(count_tmp "$T/bronze")
[ "$ntmp" -gt 0 ] || fail "no temporary file found after the kill"
(cd "$(landed_root dev1)/data" && find . -type f ! -name '*.ingest-tmp-*' | sort) > "$T/final.list"
nfinal=$(wc -l < "$T/final.list")
[ "$nfinal" -gt 0 ] || fail "nothing landed before the kill"
[ "$nfinal" -lt "$nfiles" ] || fail "every file had landed before the kill"
(cd "$S" && xargs -r sha256sum < "$T/final.list") > "$T/final.sums"
(cd "$(landed_root dev1)/data" && sha256sum -c --quiet "$T/final.sums") || fail "a file under its final name differs from its source after the kill"
pass "after the kill: $nfinal files under final names all equal their sources; $ntmp temporary files left"

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

# Manifests: every source path recorded; a path recorded twice only with the same hash.
for m in "$T/bronze/_manifests/dev1"/*.jsonl; do
    sed -n 's/.*"path":"\([^"]*\)".*"hash":"\([0-9a-f]*\)".*/\1 \2/p' "$m"
done | sort -u > "$T/recorded"
[ "$(cut -d' ' -f1 "$T/recorded" | sort -u | wc -l)" -eq "$nfiles" ] ||
    fail "manifests record $(cut -d' ' -f1 "$T/recorded" | sort -u | wc -l) distinct paths, source has $nfiles"
dup=$(cut -d' ' -f1 "$T/recorded" | uniq -d | head -1)
[ -z "$dup" ] || fail "path $dup recorded with two different contents"
twice=$(for m in "$T/bronze/_manifests/dev1"/*.jsonl; do grep -o '"path":"[^"]*"' "$m"; done | sort | uniq -d | wc -l)
pass "after recovery: $nfiles files landed once with the right bytes; manifests record each ($twice recorded twice, same content)"

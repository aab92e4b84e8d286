#!/bin/sh
# The Kafka transport against failures (docs/kafka.md): a receiver killed
# with SIGKILL while a device's batches stream in, then started again: every
# file lands, and exactly once (no path twice in the manifests); then the
# only broker down for 10 s while a device ships: the agent waits and
# everything lands after.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/kafka_lib.sh"
setup_keys
start_mock 1 4
# (a short session timeout, kafka_lib.sh: a killed member's partitions go to the new one within seconds)
write_kafka_receiver_config r1 ''
start_kafka_receiver r1
wait_file_log "$T/r1.log" "partitions of ingest assigned"

"$CTL" bench gen --size 24MiB "$T/src/data" > /dev/null
write_kafka_agent_config dev1 "$T/src" 'batch:
  max_bytes: 1MiB'
"$AGENT" --config "$T/dev1.yaml" --once > "$T/dev1.out" 2> "$T/dev1.err" &
APID=$!
EXTRA_PIDS="$EXTRA_PIDS $APID"
wait_file_log "$T/r1.log" " landed: " 600
kill -9 "$KPID_r1"
wait "$KPID_r1" 2>/dev/null || true
landed_before=$(grep -c ' landed: ' "$T/r1.log")
start_kafka_receiver r1
rc=0; wait "$APID" || rc=$?
[ "$rc" = 0 ] || { tail -20 "$T/dev1.err"; tail -30 "$T/r1.log"; fail "the agent failed (exit $rc) across the receiver's crash"; }
same_tree "$T/src" "$T/bronze/dev1/src"
dups=$(manifest_paths dev1 | sort | uniq -d | wc -l)
[ "$dups" = 0 ] || { manifest_paths dev1 | sort | uniq -d | head; fail "$dups paths landed twice"; }
files=$(find "$T/src" -type f | wc -l)
[ "$(manifest_paths dev1 | wc -l)" = "$files" ] || fail "the manifests name $(manifest_paths dev1 | wc -l) files, not $files"
pass "receiver killed after $landed_before batches landed and started again: all $files files landed, each once"

# The broker down for 10 s in the middle of a ship.
"$CTL" bench gen --size 8MiB --seed 7 "$T/src/more" > /dev/null
"$AGENT" --config "$T/dev1.yaml" --once > "$T/dev1.out" 2> "$T/dev1.err" &
APID=$!
EXTRA_PIDS="$EXTRA_PIDS $APID"
n0=$(grep -c ' landed: ' "$T/r1.log")
i=0
while [ "$(grep -c ' landed: ' "$T/r1.log")" -le "$n0" ]; do
    i=$((i + 1)); [ $i -gt 600 ] && fail "no batch landed"; sleep 0.05
done
mock_cmd "down 1"
sleep 10
mock_cmd "up 1"
rc=0; wait "$APID" || rc=$?
[ "$rc" = 0 ] || { tail -20 "$T/dev1.err"; tail -30 "$T/r1.log"; fail "the agent failed (exit $rc) across the broker's outage"; }
same_tree "$T/src" "$T/bronze/dev1/src"
grep -q "ok down 1" "$T/mock.out" || fail "the broker was not taken down"
pass "the broker down for 10 s while shipping: the agent waited, everything landed"

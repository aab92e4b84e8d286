#!/bin/sh
# The agent daemon over Kafka and a reload (SIGHUP).
# 1. A reload while a batch is being published drops the shipment and sends
#    the batch again under its id.  The receiver cuts the first copy off at
#    the new beginning; it used to answer that copy "cut off" (ESTALE) under
#    the same batch id, the agent took it for the answer to the new copy and
#    shipped the file once more in a new batch, while the new copy landed
#    too: one file in two batches.  It must land in one.
# 2. A reload that moves the agent to other brokers (another cluster, with
#    its own receiver) must publish there from then on: the producer was
#    kept, and records went on to the old cluster while the log said the
#    configuration was reloaded.  Settings read only at the start
#    (compression.level here) are said to wait for the restart.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/kafka_lib.sh"
setup_keys
start_mock 1 4
write_kafka_receiver_config r1 ''
start_kafka_receiver r1
wait_file_log "$T/r1.log" "partitions of ingest assigned"
mkdir -p "$T/src"
write_kafka_agent_config dev1 "$T/src" 'batch:
  max_wait: 200ms
rescan_interval: 500ms
throttle:
  rate: 3MiB'
sed -i 's|^  - path: .*|&\n    settle: 300ms|' "$T/dev1.yaml"
"$AGENT" --config "$T/dev1.yaml" > "$T/dev1.out" 2> "$T/dev1.err" &
APID=$!
EXTRA_PIDS="$EXTRA_PIDS $APID"
wait_file_log "$T/dev1.err" "running: "

# ---- 1. a reload mid-publish ----------------------------------------------
head -c 9000000 /dev/urandom > "$T/src/big.bin"
sleep 1.5 # the batch is being published (9 MB at 3 MiB/s)
kill -HUP "$APID"
wait_same "$T/src/big.bin" "$T/bronze/dev1/src/big.bin" 1200 "$T/dev1.err" "big.bin did not land after the reload"
sleep 3 # a second landing, if one came, would come now
grep -q "was cut off at record" "$T/r1.log" ||
    { tail -5 "$T/r1.log"; fail "the reload did not cut a batch off mid-way: the test did not test it"; }
n=$(grep -l '"path":"src/big.bin"' "$T"/bronze/_manifests/dev1/* | wc -l)
[ "$n" = 1 ] || { grep -E "replaying|not landed|acked" "$T/dev1.err"; fail "big.bin landed in $n batches, expected 1"; }
! grep -q "not landed: .*cut off" "$T/dev1.err" ||
    { grep "not landed" "$T/dev1.err"; fail "the agent took the answer about the copy cut off for the new copy's"; }
pass "a reload mid-publish: the batch goes again under its id and big.bin lands once"

# ---- 2. a reload to other brokers --------------------------------------------
# a second cluster, with its own receiver landing into bronze2
mkfifo "$T/mock2.in"
"$MOCK" --brokers 1 --topic "ingest:2" --topic "ingest-replies:2" --ready-file "$T/mock2.ready" \
    < "$T/mock2.in" > "$T/mock2.out" 2> "$T/mock2.err" &
EXTRA_PIDS="$EXTRA_PIDS $!"
exec 8> "$T/mock2.in"
i=0
while [ ! -s "$T/mock2.ready" ]; do
    i=$((i + 1)); [ $i -gt 200 ] && { cat "$T/mock2.err"; fail "the second kafka-mock did not start"; }
    sleep 0.05
done
BOOT2=$(cat "$T/mock2.ready")
write_kafka_receiver_config r2 ''
sed -i "s|^  brokers: .*|  brokers: $BOOT2|; s|^bronze: bronze|bronze: bronze2|" "$T/r2.yaml"
mkdir -p "$T/bronze2"
start_kafka_receiver r2
wait_file_log "$T/r2.log" "partitions of ingest assigned"
sed -i "s|^  brokers: .*|  brokers: $BOOT2|" "$T/dev1.yaml"
printf 'compression:\n  level: 3\n' >> "$T/dev1.yaml"
"$AGENT" --config "$T/dev1.yaml" --check-config > /dev/null || fail "the new configuration does not check"
kill -HUP "$APID"
wait_file_log "$T/dev1.err" "the transport or kafka settings changed"
grep -q "config reload: compression.level changed: read only at the start" "$T/dev1.err" ||
    { tail -5 "$T/dev1.err"; fail "the reload did not say compression.level waits for the restart"; }
echo two > "$T/src/two.txt"
wait_same "$T/src/two.txt" "$T/bronze2/dev1/src/two.txt" 600 "$T/dev1.err" "two.txt did not land through the new brokers"
[ ! -e "$T/bronze/dev1/src/two.txt" ] || fail "two.txt landed through the old brokers too"
pass "a reload to other brokers: the next batch goes there; compression.level waits for the restart (said)"

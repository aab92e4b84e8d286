#!/bin/sh
# The Kafka transport end to end (docs/kafka.md), against librdkafka's mock
# cluster on loopback: an agent with transport: kafka ships a tree, a
# receiver in the consumer group lands it byte-identical; a second ship of
# the unchanged tree sends no chunk data; forged records and records of an
# unknown device are counted and skipped, and the partition moves on.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/kafka_lib.sh"
setup_keys
start_mock 1 4
write_kafka_receiver_config r1 'metrics:
  listen: 127.0.0.1:0'
start_kafka_receiver r1
wait_file_log "$T/r1.log" "partitions of ingest assigned"

mkdir -p "$T/src/a/b"
gen_log "$T/src/a/log1.txt" 3000000 1
gen_log "$T/src/a/b/log2.txt" 200000 2
head -c 1500000 /dev/urandom > "$T/src/a/b/blob.bin"
for i in $(seq 1 40); do gen_log "$T/src/small$i.json" 900 "$((100 + i))"; done
write_kafka_agent_config dev1 "$T/src"
ship dev1
same_tree "$T/src" "$T/bronze/dev1/src"
[ "$(field dev1 files)" = 43 ] || fail "43 files acknowledged: $(field dev1 files)"
[ "$(field dev1 chunks_new)" -gt 0 ] || fail "no chunk travelled"
pass "a tree shipped through Kafka lands byte-identical (43 files)"

touch "$T/src"/*.json # a new version of each file's metadata, same bytes: shipped again, no chunk data
ship_with dev1 --all
[ "$(field dev1 chunk_bytes)" = 0 ] || fail "chunk data travelled for an unchanged tree: $(field dev1 chunk_bytes)"
[ "$(field dev1 chunks_dedup)" -gt 0 ] || fail "no chunk was known"
pass "the same tree again sends no chunk data (the have-cache, filled from landed replies)"

# Records no device sent: one claiming dev1 whose seal does not open (forged),
# one of a device not authorized, bytes that are no record at all.  Each is
# counted and skipped, and dev1's next batch lands: the partition moves on.
PUT="$BUILD/tools/kafka-put"
record() { # record DEVICE: a record header with DEVICE, then a nonce and a "sealed" payload of garbage
    printf 'IKR1\001\000\004%s\005b-bad\000\000\000\000' "$1"
    head -c 80 /dev/urandom
}
record dev1 | "$PUT" --bootstrap "$BOOT" --topic ingest --key dev1 || fail "kafka-put failed"
record dev9 | "$PUT" --bootstrap "$BOOT" --topic ingest --key dev9 || fail "kafka-put failed"
printf 'hello' | "$PUT" --bootstrap "$BOOT" --topic ingest --key dev1 || fail "kafka-put failed"
# a reply's record (LANDED) on the devices' topic: its own reason, not the record's before
{ printf 'IKR1\004\000\004dev1\005b-bad\000\000\000\000'; head -c 80 /dev/urandom; } |
    "$PUT" --bootstrap "$BOOT" --topic ingest --key dev1 || fail "kafka-put failed"
wait_file_log "$T/r1.log" "does not open under its key"
wait_file_log "$T/r1.log" "device dev9, which is not authorized"
wait_file_log "$T/r1.log" "not a device record"
wait_file_log "$T/r1.log" "not a device record (record of type 4, a reply, on the devices' topic)"
[ "$(grep -c "not a device record" "$T/r1.log")" = 2 ] || { grep "not a device record" "$T/r1.log"; fail "not two malformed records logged"; }
gen_log "$T/src/after.txt" 50000 77
ship dev1
[ "$(field dev1 files)" = 1 ] || fail "the file written after the bad records was not acknowledged"
cmp "$T/src/after.txt" "$T/bronze/dev1/src/after.txt" || fail "after.txt did not land"
maddr=$(sed -n 's|.*metrics on http://\([^/]*\)/metrics.*|\1|p' "$T/r1.log" | tail -1)
[ -n "$maddr" ] || fail "the receiver did not report its metrics address"
bash -c 'exec 3<>/dev/tcp/${0%:*}/${0##*:}; printf "GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n" >&3; cat <&3' "$maddr" |
    tr -d '\r' > "$T/metrics"
for o in forged:1 unknown_device:1 malformed:2; do
    grep -q "^ingest_receiver_kafka_records_total{outcome=\"${o%:*}\"} ${o#*:}\$" "$T/metrics" ||
        { grep kafka "$T/metrics"; fail "${o%:*} records are not counted ${o#*:} time(s)"; }
done
pass "a forged record, one of an unknown device, a malformed one and a reply's are skipped with a log line each; the next batch lands"

# A producer whose message.max.bytes is under the default (set to match a
# broker's smaller limit): records are cut to fit it, and the tree lands;
# one too small for any record is refused at start, naming the property.
mkdir -p "$T/msrc"
head -c 700000 /dev/urandom > "$T/msrc/big.bin"
write_kafka_agent_config dev1 "$T/msrc"
sed -i 's|^  brokers: .*|&\n  properties:\n    message.max.bytes: "60000"|' "$T/dev1.yaml"
ship dev1
cmp "$T/msrc/big.bin" "$T/bronze/dev1/msrc/big.bin" || fail "big.bin did not land under message.max.bytes 60000"
sed -i 's|message.max.bytes: "60000"|message.max.bytes: "20000"|' "$T/dev1.yaml"
head -c 1000 /dev/urandom > "$T/msrc/new.bin" # (something to ship: the link is opened)
if "$AGENT" --config "$T/dev1.yaml" --once > "$T/dev1.out" 2> "$T/dev1.err"; then
    fail "an agent whose message.max.bytes leaves no room for a record shipped"
fi
grep -q "message.max.bytes.*20000 is too small" "$T/dev1.err" || { cat "$T/dev1.err"; fail "the refusal does not say why"; }
rc=0
"$AGENT" --config "$T/dev1.yaml" --check-config > "$T/check.out" 2>&1 || rc=$?
[ "$rc" = 2 ] || { cat "$T/check.out"; fail "--check-config took a message.max.bytes too small (exit $rc)"; }
rm "$T/msrc/new.bin"
write_kafka_agent_config dev1 "$T/src"
pass "records fit a smaller message.max.bytes (a 700 KB file in 60 KB records lands); one too small is refused at load"

# The daemon through Kafka, with after_ship: delete: a file is deleted from
# the source only once the core's LANDED reply came, and it landed.
mkdir -p "$T/dsrc"
write_kafka_agent_config dev2 "$T/dsrc" 'batch:
  max_wait: 200ms
rescan_interval: 500ms'
sed -i 's|^  - path: .*|&\n    settle: 300ms\n    after_ship: delete|' "$T/dev2.yaml"
"$AGENT" --config "$T/dev2.yaml" > "$T/dev2.out" 2> "$T/dev2.err" &
DPID=$!
EXTRA_PIDS="$EXTRA_PIDS $DPID"
wait_file_log "$T/dev2.err" "running: "
# deleted_landed NAME TRIES: dsrc/NAME (its bytes kept in $T/NAME.expect) is deleted within TRIES x 50 ms
# (after_ship: delete, once acknowledged) and landed byte-identical
deleted_landed() {
    i=0
    while [ -e "$T/dsrc/$1" ]; do
        i=$((i + 1)); [ $i -gt "$2" ] && { grep -v CONFWARN "$T/dev2.err" | tail; fail "$1 was not deleted: it did not ship"; }
        sleep 0.05
    done
    cmp "$T/$1.expect" "$T/bronze/dev2/dsrc/$1" || fail "$1 was deleted but did not land"
}
gen_log "$T/dsrc/x.log" 300000 9
cp "$T/dsrc/x.log" "$T/x.log.expect"
deleted_landed x.log 400
grep -q "batch .* landed: 1 files" "$T/r1.log" || fail "the receiver did not land dev2's batch"
pass "the daemon ships through Kafka; after_ship: delete acts on the landed reply"

# The daemon's producer fails for good (the next Produce request, its own, answered with an out-of-order
# sequence, error 45: fatal for an idempotent producer): it starts a new one and the file still lands.
mock_cmd "produce-errors 45 1"
gen_log "$T/dsrc/y.log" 200000 10
cp "$T/dsrc/y.log" "$T/y.log.expect"
wait_file_log "$T/dev2.err" "kafka: the producer failed for good (.*); starting a new one" 600
deleted_landed y.log 1200
kill "$DPID"
wait "$DPID" 2>/dev/null || true
grep -q "kafka: [0-9]* records produced" "$T/dev2.err" || fail "the daemon did not say what it produced"
pass "a daemon whose Kafka producer failed for good starts a new one and ships on"

# Authorized devices re-read (SIGHUP) apply to devices the group has served
# already: dev1 given a new key ships under it (its records would not open
# under the key its session was made with), and dev2, revoked, is skipped.
hup_r1() {
    n=$(grep -c 'SIGHUP: authorized devices re-read' "$T/r1.log" || true)
    kill -HUP "$KPID_r1"
    i=0
    while [ "$(grep -c 'SIGHUP: authorized devices re-read' "$T/r1.log" || true)" -le "$n" ]; do
        i=$((i + 1)); [ $i -gt 200 ] && { tail -5 "$T/r1.log"; fail "no SIGHUP line in r1's log"; }
        sleep 0.05
    done
}
mkdir -p "$T/keys/new"
(cd "$T/keys/new" && "$CTL" keygen dev1 > /dev/null) || fail "keygen failed"
cp "$T/keys/new/dev1.key" "$T/keys/dev1.key"
printf 'dev1 %s\n' "$(cat "$T/keys/new/dev1.pub")" > "$T/keys/authorized"
hup_r1
# dev2, revoked by it, had shipped: its session ends at the SIGHUP, before any record of it comes
wait_file_log "$T/r1.log" "kafka: device dev2 is no longer authorized"
wait_file_log "$T/r1.log" "kafka: device dev1 has a new key"
gen_log "$T/src/rotated.txt" 40000 78
ship dev1
[ "$(field dev1 files)" = 1 ] || fail "the file shipped under dev1's new key was not acknowledged"
cmp "$T/src/rotated.txt" "$T/bronze/dev1/src/rotated.txt" || fail "rotated.txt did not land"
grep -q "kafka: device dev1 has a new key" "$T/r1.log" || fail "the new key of dev1 was not logged"
pass "a device given a new key (SIGHUP) ships through Kafka under it"

gen_log "$T/dsrc/revoked.log" 30000 79
# (the warning of a silent core after 1.5 s rather than a minute)
INGEST_TEST_QUIET_WARN_MS=1500 "$AGENT" --config "$T/dev2.yaml" --once > "$T/dev2.out" 2> "$T/dev2.err" &
APID=$!
EXTRA_PIDS="$EXTRA_PIDS $APID"
wait_file_log "$T/r1.log" "kafka: device dev2 is no longer authorized"
wait_file_log "$T/r1.log" "a record of device dev2, which is not authorized"
# the device is not left to its 10-minute reply timeout without a word: it says what the silence may mean
wait_file_log "$T/dev2.err" "warn.*no answer from the core for [0-9]* s: the receivers skip.*is device dev2 in their authorized_devices.*; still waiting, 600 s at most in all"
[ "$(grep -c "no answer from the core" "$T/dev2.err")" = 1 ] || { cat "$T/dev2.err"; fail "the silence was not warned of once"; }
kill "$APID" 2>/dev/null || true
i=0
while kill -0 "$APID" 2>/dev/null; do
    i=$((i + 1)); [ $i -gt 200 ] && { tail -n 5 "$T/dev2.err"; fail "the agent did not stop on SIGTERM within 10 s"; }
    sleep 0.05
done
wait "$APID" 2>/dev/null || true
[ ! -e "$T/bronze/dev2/dsrc/revoked.log" ] || fail "a device revoked by SIGHUP still landed a file"
pass "a device revoked (SIGHUP) after it shipped through Kafka is skipped, and warns of the silence early"

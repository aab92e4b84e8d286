#!/bin/sh
# Kafka: a receiver does not commit past a batch whose reply it could not
# deliver (docs/kafka.md, "Offsets are committed by hand").  Two brokers:
# broker 1 leads the device topic and coordinates the receivers' group,
# broker 2 leads the reply topic and is down.  The batch lands, its reply
# waits in the receiver's producer; the receiver is killed (the reply is
# lost with it) and started again with broker 2 up: it reads the batch again
# from the uncommitted offset and answers "already landed", and the agent
# ends within a minute.  Committing as the old code did (after a 10 s wait
# for the replies, whatever came of it), nothing is read again and the agent
# waits out its 10-minute reply timeout.  Then the same outage outlasts the
# receiver's message.timeout.ms (4 s here): the reply that timed out is
# published again, and the agent is answered once broker 2 is up, with no
# restart (a reply dropped after its timeout left the agent waiting).  And
# stopped cleanly during such an outage, the receiver commits nothing past
# the reply: started again, it answers the batch.  A reply the broker
# refuses (not authorized, as an ACL not yet granted) is published again
# until it is taken; one refused for good (too large) is given up, and the
# commits pass its batch: a restarted receiver does not read it again.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/kafka_lib.sh"
setup_keys
start_mock 2 1
mock_cmd "leader ingest 0 1"
mock_cmd "leader ingest-replies 0 2"
mock_cmd "coordinator group ingest-receivers 1"
i=0
until [ "$(grep -c '^ok ' "$T/mock.out")" -ge 3 ]; do
    i=$((i + 1)); [ $i -gt 100 ] && { cat "$T/mock.out"; fail "the mock did not take the leader and coordinator commands"; }
    sleep 0.05
done
! grep -q '^error' "$T/mock.out" || { cat "$T/mock.out"; fail "a mock command failed"; }

# metrics_ok: r1's count of records read (0 when none yet)
metrics_ok() {
    maddr=$(sed -n 's|.*metrics on http://\([^/]*\)/metrics.*|\1|p' "$T/r1.log" | tail -1)
    [ -n "$maddr" ] || { echo 0; return; }
    bash -c 'exec 3<>/dev/tcp/${0%:*}/${0##*:}; printf "GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n" >&3; cat <&3' \
        "$maddr" | tr -d '\r' | awk '$1 == "ingest_receiver_kafka_records_total{outcome=\"ok\"}" { v = $2 } END { print v + 0 }'
}
# held_ship NAME BYTES SEED [MOCK-COMMAND]: r1 (its config written) started with dev1's serve held (tests
# only), the agent shipping src/NAME in the background ($A); once r1 read its records (the agent reads the
# reply topic's end before it ships), broker 2 goes down (or the mock is given MOCK-COMMAND) and the serve
# is released: the batch lands, its reply cannot go out
held_ship() {
    : > "$T/r1.log"
    touch "$T/pause"
    export INGEST_TEST_KAFKA_SERVE_PAUSE="dev1:$T/pause"
    start_kafka_receiver r1
    unset INGEST_TEST_KAFKA_SERVE_PAUSE
    wait_file_log "$T/r1.log" "1 partitions of ingest assigned" 1200
    gen_log "$T/src/$1" "$2" "$3"
    "$AGENT" --config "$T/dev1.yaml" --once > "$T/dev1.out" 2> "$T/dev1.err" &
    A=$!
    EXTRA_PIDS="$EXTRA_PIDS $A"
    i=0
    until [ "$(metrics_ok)" -ge 1 ]; do
        i=$((i + 1)); [ $i -gt 1200 ] && { tail -n 20 "$T/r1.log" "$T/dev1.err"; fail "r1 read no record of $1"; }
        sleep 0.05
    done
    sleep 1
    mock_cmd "${4:-down 2}"
    sleep 0.5
    rm "$T/pause"
    wait_file_log "$T/r1.log" "batch .* landed: " 1200
    cmp "$T/src/$1" "$T/bronze/dev1/src/$1" || fail "$1 did not land byte-identical"
}
# answered WHEN: the agent ends, 0, within 60 s
answered() {
    i=0
    while kill -0 "$A" 2>/dev/null; do
        i=$((i + 1))
        [ $i -gt 1200 ] && { tail -n 20 "$T/dev1.err" "$T/r1.log"; fail "the agent still waits for its reply 60 s $1"; }
        sleep 0.05
    done
    wait "$A" || { cat "$T/dev1.err"; fail "the agent failed"; }
}
# stop_r1 SIGNAL: r1 ended (within 40 s)
stop_r1() {
    kill "-$1" "$KPID_r1"
    i=0
    while kill -0 "$KPID_r1" 2>/dev/null; do
        i=$((i + 1)); [ $i -gt 800 ] && fail "r1 did not stop within 40 s of SIG$1"
        sleep 0.05
    done
    wait "$KPID_r1" 2>/dev/null || true
}
mkdir -p "$T/src"
write_kafka_agent_config dev1 "$T/src"

# 1. killed while the reply waits
write_kafka_receiver_config r1 'metrics:
  listen: 127.0.0.1:0'
held_ship log.txt 200000 7
# the receiver's wait for its reply (10 s), then what it does about it
i=0
until grep -q "replies not delivered" "$T/r1.log"; do
    i=$((i + 1)); [ $i -gt 300 ] && break # 15 s: the code before this check committed by then
    sleep 0.05
done
sleep 1
stop_r1 KILL
grep -q "replies not delivered to ingest-replies after 10 s: offsets are not committed" "$T/r1.log" ||
    { tail -n 20 "$T/r1.log"; fail "the receiver did not say its replies were behind"; }
mock_cmd "up 2"
: > "$T/r1.log"
start_kafka_receiver r1
answered "after the restart"
grep -q "was landed before; acknowledged again" "$T/r1.log" || { tail -n 20 "$T/r1.log" "$T/dev1.err"; fail "the batch was not answered already landed"; }
[ "$(manifest_paths dev1 | wc -l)" = 1 ] || fail "the file landed $(manifest_paths dev1 | wc -l) times"
pass "a reply not delivered holds the commits: killed and restarted, the receiver read the batch again and answered it already landed"

# 2. the outage outlasts message.timeout.ms
stop_r1 TERM
KAFKA_PROPS='    message.timeout.ms: "4000"' write_kafka_receiver_config r1 'metrics:
  listen: 127.0.0.1:0'
held_ship log2.txt 150000 8
wait_file_log "$T/r1.log" "a reply to device dev1 was not delivered to ingest-replies (.*timed out); it is published again" 400
sleep 1
mock_cmd "up 2"
answered "after broker 2 came back"
! grep -q "cannot be kept" "$T/r1.log" || fail "a reply was dropped"
pass "a reply that timed out while its broker was down was published again: the agent was answered once the broker came back"

# 3. stopped (SIGTERM) while the reply waits: the stop's commit does not pass it, and started again with the
# broker up, the receiver answers the batch
stop_r1 TERM
held_ship log3.txt 120000 9
sleep 1
stop_r1 TERM
mock_cmd "up 2"
: > "$T/r1.log"
start_kafka_receiver r1
answered "after the restart"
pass "stopped while a reply waited for its broker: the offsets stayed before the batch, and the restarted receiver answered it"

# 4. refused (not authorized) three times: published again until the broker takes it
stop_r1 TERM
mock_cmd "up 2"
held_ship log4.txt 90000 10 "produce-errors 29 3"
answered "after three refusals"
grep -q "a reply to device dev1 was not delivered to ingest-replies (.*[Aa]uthorization.*); it is published again" \
    "$T/r1.log" || { tail -n 20 "$T/r1.log"; fail "the refused reply was not published again"; }
pass "a reply refused as not authorized was published again until the broker took it"

# 5. refused for good (too large): given up, and the commits pass its batch
stop_r1 TERM
held_ship log5.txt 80000 11 "produce-errors 10 1"
wait_file_log "$T/r1.log" "a reply to device dev1 was refused by ingest-replies (.*): given up" 400
kill "$A"
wait "$A" 2>/dev/null || true
sleep 2 # (commits at most every 0.2 s)
stop_r1 KILL
: > "$T/r1.log"
start_kafka_receiver r1
wait_file_log "$T/r1.log" "1 partitions of ingest assigned" 1200
sleep 4
[ "$(metrics_ok)" = 0 ] || { tail -n 20 "$T/r1.log"; fail "the batch whose reply was given up was read again: its offsets were not committed"; }
pass "a reply refused as too large was given up, and the commits passed its batch"
# (the agent killed above ships that batch again at its next start: answered "landed before")
"$AGENT" --config "$T/dev1.yaml" --once > "$T/dev1.out" 2> "$T/dev1.err" || { cat "$T/dev1.err"; fail "the agent's replay failed"; }

# 6. the reply producer fails for good (an idempotent producer's out-of-order sequence, error 45): the
# receiver says so and exits 1 (its supervisor starts it again), committing nothing past the reply; started
# again, it answers the batch
stop_r1 TERM
held_ship log6.txt 70000 12 "produce-errors 45 1"
wait_file_log "$T/r1.log" "the reply producer failed for good" 400
i=0
while kill -0 "$KPID_r1" 2>/dev/null; do
    i=$((i + 1)); [ $i -gt 800 ] && { tail -n 20 "$T/r1.log"; fail "r1 did not stop within 40 s of its producer's fatal error"; }
    sleep 0.05
done
rc=0
wait "$KPID_r1" || rc=$?
[ "$rc" = 1 ] || { tail -n 20 "$T/r1.log"; fail "r1 exited $rc after its producer's fatal error, expected 1"; }
[ "$(grep -c "published again" "$T/r1.log")" -lt 50 ] || fail "r1 published its replies again in a loop"
: > "$T/r1.log"
start_kafka_receiver r1
answered "after the restart that followed the fatal error"
pass "a reply producer failed for good: the receiver exited 1 without committing past the reply, and started again it answered the batch"

#!/bin/sh
# tests/tools/kafka-mock, the Kafka cluster the Kafka tests run against:
# 3 brokers and a topic of 4 partitions on loopback; a real Kafka client
# (tests/tools/kafka-probe: idempotent producer with acks=all, then a
# consumer group) gets back over TCP every message it produced, before and
# after a broker was taken down and up again; the commands on its stdin are
# answered one line each, bad ones with an error that does not stop it; it
# exits 0 when its stdin closes and on SIGTERM; usage errors exit 2.
. "$(dirname "$0")/lib.sh"
skip_kafka_under_tsan
MOCK="$BUILD/tools/kafka-mock"
PROBE="$BUILD/tools/kafka-probe"
[ -x "$MOCK" ] && [ -x "$PROBE" ] || fail "kafka-mock or kafka-probe not built (make tests)"
MOCK_PID=""
trap '[ -n "$MOCK_PID" ] && kill "$MOCK_PID" 2>/dev/null; cleanup' EXIT

# Usage errors name the bad argument.
usage_error() { # usage_error NEEDLE ARGS...
    needle=$1; shift
    rc=0; "$MOCK" "$@" < /dev/null > /dev/null 2> "$T/usage.err" || rc=$?
    [ "$rc" = 2 ] || fail "kafka-mock $*: exit $rc, not 2"
    grep -q -- "$needle" "$T/usage.err" || { cat "$T/usage.err"; fail "kafka-mock $*: the message does not name $needle"; }
}
usage_error '--brokers' --topic a:1
usage_error '"0"' --brokers 0
usage_error 'a:x' --brokers 3 --topic a:x
usage_error 'b/d:2' --brokers 3 --topic b/d:2
usage_error '--nope' --brokers 3 --nope 1
pass "usage errors exit 2 and name the bad argument"

# wait_until_exit PID: wait for PID to end, killing it after 10 s; its exit
# status in $rc (a zombie still answers kill -0, so wait, with a watchdog)
wait_until_exit() {
    (sleep 10; kill -9 "$1") > /dev/null 2>&1 &
    _dog=$!
    rc=0; wait "$1" || rc=$?
    kill "$_dog" 2>/dev/null || true
    [ "$rc" -lt 128 ] || fail "kafka-mock did not exit by itself (status $rc)"
}

mkfifo "$T/mock.in"
"$MOCK" --brokers 3 --topic ingest:4 --ready-file "$T/mock.ready" < "$T/mock.in" > "$T/mock.out" 2> "$T/mock.err" &
MOCK_PID=$!
exec 3> "$T/mock.in"
i=0
while [ ! -s "$T/mock.ready" ]; do
    i=$((i + 1))
    [ $i -gt 200 ] && { cat "$T/mock.err"; fail "kafka-mock did not start"; }
    kill -0 "$MOCK_PID" 2>/dev/null || { cat "$T/mock.err"; fail "kafka-mock exited"; }
    sleep 0.05
done
boot=$(cat "$T/mock.ready")
echo "bootstrap: $boot"
echo "$boot" | grep -Eq '^127\.0\.0\.1:[0-9]+,127\.0\.0\.1:[0-9]+,127\.0\.0\.1:[0-9]+$' ||
    fail "not three loopback brokers: $boot"
[ "$(head -1 "$T/mock.out")" = "$boot" ] || fail "stdout's first line is not the ready file's: $(head -1 "$T/mock.out")"
pass "3 brokers on loopback; the bootstrap line on stdout and in the ready file"

probe() { # probe K: kafka-probe's line in $T/probe.out
    "$PROBE" --bootstrap "$boot" --topic ingest --count "$1" --timeout 15 > "$T/probe.out" 2> "$T/probe.err" ||
        { cat "$T/probe.out" "$T/probe.err"; fail "kafka-probe failed"; }
    cat "$T/probe.out"
    grep -q "^produced=$1 failed=0 consumed=$1 duplicates=[0-9]* bad=0 partitions=4$" "$T/probe.out" ||
        fail "not every message came back from all 4 partitions"
}
probe 500
pass "a real client produced 500 messages (acks=all, idempotent) and consumed all 500 back over TCP"

# cmd LINE PATTERN: send LINE on kafka-mock's stdin; its next answer must match PATTERN
cmd() {
    n=$(wc -l < "$T/mock.out")
    printf '%s\n' "$1" >&3
    i=0
    while [ "$(wc -l < "$T/mock.out")" -le "$n" ]; do
        i=$((i + 1))
        [ $i -gt 200 ] && { cat "$T/mock.err"; fail "no answer to '$1'"; }
        sleep 0.05
    done
    got=$(sed -n "$((n + 1))p" "$T/mock.out")
    echo "$got" | grep -Eq -- "$2" || fail "'$1' answered '$got', expected /$2/"
}
cmd "down 1" '^ok down 1$'
cmd "up 1" '^ok up 1$'
cmd "rtt 2 5" '^ok rtt 2 5$'
cmd "rtt 2 0" '^ok rtt 2 0$'
pass "down, up and rtt answered ok"
cmd "down 4" '^error: line 5: bad broker id "4"'
cmd "reboot 1" '^error: line 6: unknown command "reboot"'
cmd "rtt 1" '^error: line 7: usage: rtt ID MS$'
cmd "$(printf 'up%0298d' 1)" '^error: line 8: longer than 255 bytes$'
cmd "up all" '^ok up all$'
cmd "leader ingest 1 x" '^error: line 10: bad broker id "x" \(1\.\.3\)$'
cmd "coordinator txn a 1" '^error: line 11: coordinator: "txn" is not "group"$'
cmd "leader ingest 1" '^error: line 12: usage: leader TOPIC PARTITION ID$'
cmd "produce-errors 29" '^error: line 13: usage: produce-errors CODE COUNT$'
cmd "produce-errors 29 0" '^error: line 14: bad count "0" \(1\.\.1000\)$'
cmd "produce-errors x 1" '^error: line 15: bad error code "x" \(1\.\.32767\)$'
pass "bad commands answered 'error: line N: ...' and it went on"
cmd "leader ingest 0 3" '^ok leader ingest 0 3$'
cmd "leader ingest 1 3" '^ok leader ingest 1 3$'
cmd "coordinator group g 2" '^ok coordinator group g 2$'
pass "leader and coordinator answered ok"

probe 200
pass "after a broker went down and up and leaders moved, every message still comes back"
cmd "produce-errors 29 2" '^ok produce-errors 29 2$'

exec 3>&-
wait_until_exit "$MOCK_PID"
MOCK_PID=""
[ "$rc" = 0 ] || { cat "$T/mock.err"; fail "kafka-mock exited $rc when its stdin closed"; }
pass "kafka-mock exits 0 when its stdin closes"

mkfifo "$T/mock2.in"
"$MOCK" --brokers 1 --topic x:1 < "$T/mock2.in" > "$T/mock2.out" 2> "$T/mock2.err" &
MOCK_PID=$!
exec 4> "$T/mock2.in"
i=0
while [ ! -s "$T/mock2.out" ]; do
    i=$((i + 1))
    [ $i -gt 200 ] && { cat "$T/mock2.err"; fail "the second kafka-mock did not start"; }
    sleep 0.05
done
kill -TERM "$MOCK_PID"
wait_until_exit "$MOCK_PID"
MOCK_PID=""
exec 4>&-
[ "$rc" = 0 ] || { cat "$T/mock2.err"; fail "kafka-mock exited $rc on SIGTERM"; }
pass "kafka-mock exits 0 on SIGTERM"

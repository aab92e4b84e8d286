#!/bin/sh
# A batch that landed with a file refused (x/in0: a file x is in bronze where
# its directory would go), its ACK lost (the receiver killed -9 after the
# batch was durable), then replayed with one of its files left out (a.log
# changed meanwhile): the landed refusal is told by the index of its path
# in the replay, not in the landed manifest.  Before, the agent took zz for
# the refused file and x/in0 for landed (with after_ship: delete the daemon
# then deleted x/in0, which was never landed anywhere), and with the refused
# file last the replay failed for good ("has no file 1"), every run again.
. "$(dirname "$0")/lib.sh"
setup_keys
write_receiver_config 'layout: "{device}/{path}"'
start_receiver
pin_receiver_port
S="$T/src"
mkdir -p "$S"
# lost_ack DEVICE: ship with the receiver holding ACKs 5 s after the batch is durable, kill -9 it in that
# window, restart it
lost_ack() {
    stop_receiver
    INGEST_TEST_ACK_DELAY_MS=5000
    export INGEST_TEST_ACK_DELAY_MS
    start_receiver
    unset INGEST_TEST_ACK_DELAY_MS
    n=$(grep -c " landed: " "$T/receiver.log" || true)
    "$AGENT" --config "$T/$1.yaml" --once > "$T/$1.out" 2> "$T/$1.err" &
    apid=$!
    i=0
    while [ "$(grep -c " landed: " "$T/receiver.log" || true)" -le "$n" ]; do
        i=$((i + 1)); [ $i -gt 400 ] && { tail -20 "$T/receiver.log"; fail "the batch did not land"; }
        sleep 0.05
    done
    kill -9 "$RECV_PID"
    wait "$RECV_PID" 2>/dev/null || true
    RECV_PID=""
    wait "$apid" 2>/dev/null || true
    start_receiver
}

write_agent_config dev1 "$S"
printf 'first\n' > "$S/x"
ship dev1 > /dev/null
rm "$S/x"
mkdir "$S/x"
printf 'never landed\n' > "$S/x/in0"
printf 'log 1\n' > "$S/a.log"
printf 'zz data\n' > "$S/zz"
lost_ack dev1
printf 'log 2\n' >> "$S/a.log" # a file of the unacknowledged batch changes: the replay leaves it out
cp "$S/a.log" "$T/a.log.expect"
cp "$S/zz" "$T/zz.expect"
# the daemon, with after_ship: delete, replays the batch first: it acts on what landed only, so zz and a.log
# (shipped again in a batch of its own) go, and x/in0 (refused, never landed anywhere) stays
sed -i "s|^  - path: .*|&\n    settle: 0ms\n    after_ship: delete|" "$T/dev1.yaml"
"$AGENT" --config "$T/dev1.yaml" > "$T/dev1d.out" 2> "$T/dev1d.err" &
dpid=$!
i=0
while [ -e "$S/zz" ] || [ -e "$S/a.log" ]; do
    i=$((i + 1)); [ $i -gt 400 ] && { cat "$T/dev1d.err"; fail "zz and a.log, landed, were not deleted"; }
    sleep 0.05
done
grep -q "file src/x/in0 refused" "$T/dev1d.err" || { cat "$T/dev1d.err"; fail "x/in0 was not told refused"; }
kill "$dpid"
wait "$dpid" 2>/dev/null || true
grep -q "file src/zz refused" "$T/dev1d.err" && { cat "$T/dev1d.err"; fail "zz, which landed, was told refused"; }
[ -e "$S/x/in0" ] || { cat "$T/dev1d.err"; fail "x/in0, refused and never landed, was deleted at the edge"; }
cmp "$T/zz.expect" "$T/bronze/dev1/src/zz" || fail "zz did not land"
cmp "$T/a.log.expect" "$T/bronze/dev1/src/a.log" || fail "a.log (changed) did not land"
pass "a replay without its changed file is told the landed refusal by its own index: zz landed, x/in0 refused and kept"

# the refused file last, and the replay holding only it: told by its index there (it failed for good before)
write_agent_config dev2 "$S/../src2"
mkdir -p "$T/src2"
printf 'first\n' > "$T/src2/x"
ship dev2 > /dev/null
rm "$T/src2/x"
mkdir "$T/src2/x"
printf 'never landed\n' > "$T/src2/x/in0"
printf 'log 1\n' > "$T/src2/a.log"
lost_ack dev2
printf 'log 2\n' >> "$T/src2/a.log"
for k in 1 2; do
    rc=0
    "$AGENT" --config "$T/dev2.yaml" --once > "$T/dev2.out" 2> "$T/dev2.err" || rc=$?
    grep -q "has no file" "$T/dev2.err" && { cat "$T/dev2.err"; fail "run $k: the refusal named a file the replay does not hold"; }
    [ "$rc" = 0 ] || [ "$rc" = 3 ] || { cat "$T/dev2.err"; fail "run $k exited $rc"; }
done
cmp "$T/src2/a.log" "$T/bronze/dev2/src2/a.log" || fail "dev2's a.log did not land"
pass "a replay of only the refused file is told by its index there, and the device ships on"

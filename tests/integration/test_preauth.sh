#!/bin/sh
# Connections that never authenticate cannot lock devices out (hardening
# finding 1): 300 silent connections held open plus a flood of 120 more per
# second, against a receiver with max_connections 2 (which counts
# authenticated sessions only); two devices ship through it, their files land
# byte-identical, and the receiver's refusal lines are rate-limited.  Then a
# lone silent connection is closed after handshake.first_byte_timeout.
. "$(dirname "$0")/lib.sh"
FLOOD="$BUILD/tools/conn-flood"
[ -x "$FLOOD" ] || fail "$FLOOD not built (make tests)"
FLOOD_PID=""
trap '[ -n "$FLOOD_PID" ] && kill "$FLOOD_PID" 2>/dev/null; cleanup' EXIT

setup_keys
write_receiver_config 'layout: "{device}/{path}"
max_connections: 2
handshake:
  first_byte_timeout: 1s
  timeout: 5s'
start_receiver
"$CTL" bench gen --size 2MiB --seed 3 "$T/src1" > /dev/null
"$CTL" bench gen --size 1MiB --seed 4 "$T/src2" > /dev/null
addr=$(cat "$T/receiver.addr")

"$FLOOD" --address "$addr" --idle 300 --rate 120 --seconds 15 --status "$T/flood.status" > "$T/flood.out" 2>&1 &
FLOOD_PID=$!
# wait until the flood has opened its 300 connections
i=0
until [ -s "$T/flood.status" ] && [ "$(sed -n 's/.*opened=\([0-9]*\).*/\1/p' "$T/flood.status")" -ge 300 ]; do
    i=$((i + 1)); [ $i -gt 100 ] && { cat "$T/flood.status" "$T/flood.out"; fail "the flood did not open 300 connections"; }
    sleep 0.05
done
lines_before=$(wc -l < "$T/receiver.log")
write_agent_config dev1 "$T/src1"
write_agent_config dev2 "$T/src2"
ship dev1
ship dev2
cat "$T/flood.status"
kill -0 "$FLOOD_PID" 2>/dev/null || fail "the flood ended before the devices shipped: the test proves nothing"
same_tree "$T/src1" "$(landed_root dev1)/src1"
same_tree "$T/src2" "$(landed_root dev2)/src2"
pass "two devices shipped while 300 silent connections and 120 more per second were held open"
wait "$FLOOD_PID"; FLOOD_PID=""
cat "$T/flood.out"
dropped=$(sed -n 's/.*closed_by_peer=\([0-9]*\).*/\1/p' "$T/flood.out")
[ "$dropped" -gt 0 ] || fail "the receiver closed none of the flood's connections"
kill -0 "$RECV_PID" || fail "the receiver died"
warns=$(tail -n +"$((lines_before + 1))" "$T/receiver.log" | grep -c '\[warn\]' || true)
[ "$warns" -le 30 ] || { tail -n +"$((lines_before + 1))" "$T/receiver.log" | grep '\[warn\]' | head -20; fail "$warns warning lines during the flood (not rate-limited)"; }
grep -q 'more like it not logged' "$T/receiver.log" || fail "no line says how many refusals were not logged"
pass "the receiver closed $dropped of the flood's connections and logged $warns warning lines"

# A lone silent connection is closed after handshake.first_byte_timeout (1s).
# On a fresh receiver: the flood's refusals share its log rate limit, and on
# a slow machine the last of them can fall inside the lone close's window.
stop_receiver
start_receiver
addr=$(cat "$T/receiver.addr")
"$FLOOD" --address "$addr" --idle 1 --rate 0 --seconds 3 > "$T/lone.out"
grep -q 'closed_by_peer=[1-9]' "$T/lone.out" || { cat "$T/lone.out"; fail "a silent connection was kept for 3 s"; }
grep -q 'no byte within handshake.first_byte_timeout' "$T/receiver.log" || fail "the silent connection's close was not logged"
pass "a silent connection is closed after handshake.first_byte_timeout"

# Sessions, not connections, count against max_connections: still serving.
ship dev1

#!/bin/sh
# Appending in place (docs/landing.md, "Appending in place"; receiver
# append_in_place: true), on the tests' own filesystem (no reflinks needed):
#   - a 1% append to a 100 MiB log lands in the landed file itself (same
#     inode) while the receiver writes (/proc/PID/io write_bytes over the
#     ship) at most 3% of the log's size; the landed file is byte-identical;
#   - kill -9 of the receiver in the middle of an append (the landed file
#     grown past its landed length, the batch not landed): at the next start
#     the receiver cuts the torn tail off (the file is its last landed
#     version again, byte for byte, and says so in its log), and the next
#     ship lands the whole file, byte-identical.
. "$(dirname "$0")/lib.sh"
setup_keys
write_receiver_config 'layout: "{device}/{path}"
append_in_place: true'
start_receiver
S="$T/src/logs"
mkdir -p "$S"
size=$((100 * 1024 * 1024))
gen_log "$S/app.log" $size 1
write_agent_config dev1 "$S"
L="$(landed_root dev1)/logs/app.log"
wbytes() { awk '/^write_bytes/ { print $2 }' "/proc/$RECV_PID/io"; }

ship dev1
cmp "$S/app.log" "$L" || fail "the 100 MiB log landed different bytes"
ino=$(stat -c %i "$L")
gen_log "$S/app.log" $((size / 100)) 2
total=$(stat -c %s "$S/app.log")
w0=$(wbytes)
ship dev1
w=$(($(wbytes) - w0))
cmp "$S/app.log" "$L" || fail "the appended log landed different bytes"
echo "append of $((size / 100)) bytes to $size: receiver write_bytes=$w (limit $((total * 3 / 100)))"
[ "$(stat -c %i "$L")" = "$ino" ] || fail "the log was not appended in place (a new inode)"
[ "$w" -le $((total * 3 / 100)) ] || fail "the receiver wrote $w bytes for a 1% append to $total bytes"
[ -z "$(ls -A "$T/bronze/_manifests/.append" 2>/dev/null)" ] || fail "an append intent was left behind"
pass "a 1% append to a 100 MiB log lands in place, byte-identical, the receiver writing $w bytes"

# kill -9 in the middle of an append
old=$total
cp "$L" "$T/landed.before"
gen_log "$S/app.log" $((20 * 1024 * 1024)) 3
new=$(stat -c %s "$S/app.log")
write_agent_config dev1 "$S" 'throttle:
  rate: 1MiB'
"$AGENT" --config "$T/dev1.yaml" --once > "$T/dev1.out" 2> "$T/dev1.err" &
APID=$!
i=0
while [ "$(stat -c %s "$L")" -le "$old" ]; do
    i=$((i + 1))
    [ $i -gt 1200 ] && { kill "$APID" 2>/dev/null; fail "the landed log never grew in place"; }
    sleep 0.05
done
kill -STOP "$RECV_PID"
grown=$(stat -c %s "$L")
[ "$grown" -lt "$new" ] || { kill -KILL "$RECV_PID"; kill "$APID" 2>/dev/null; fail "the append was complete before the kill"; }
kill -KILL "$RECV_PID"
wait "$RECV_PID" 2>/dev/null || true
RECV_PID=""
wait "$APID" 2>/dev/null && fail "the agent says everything was acknowledged"
echo "killed with the landed log at $grown bytes (landed $old, new $new)"
[ -n "$(ls -A "$T/bronze/_manifests/.append" 2>/dev/null)" ] || fail "no append intent while the append was under way"

start_receiver
[ "$(stat -c %s "$L")" -eq "$old" ] || fail "after the restart the log has $(stat -c %s "$L") bytes, not its landed $old"
cmp "$T/landed.before" "$L" || fail "after the restart the log is not its last landed version"
grep -q "cut back to its landed $old bytes" "$T/receiver.log" || fail "the receiver did not say it cut the torn tail"
[ -z "$(ls -A "$T/bronze/_manifests/.append" 2>/dev/null)" ] || fail "the sweep left an append intent"
pass "kill -9 mid-append: the torn tail ($((grown - old)) bytes) is cut off at the next start"

write_agent_config dev1 "$S"
ship dev1
cmp "$S/app.log" "$L" || fail "after the crash the appended log landed different bytes"
pass "after the crash the next ship lands the grown log byte-identical"

#!/bin/sh
# A receiver stopped (SIGTERM) while an edge daemon is connected and idle
# stops cleanly: it closes the session itself at once (it does not wait
# for the device: a file written as the stop begins is not landed by the
# stopping receiver, it stays queued), flushes its index, removes its crash
# marker and says so; the next start is not taken for a crash recovery,
# and the daemon ships to it again, the queued file too.
. "$(dirname "$0")/lib.sh"
setup_keys
write_receiver_config 'layout: "{device}/{path}"'
start_receiver
S="$T/src/data"
mkdir -p "$S"
gen_log "$S/a.log" 5000 1
write_agent_config dev1 "$S" 'batch:
  max_wait: 200ms
rescan_interval: 500ms'
sed -i 's|^  - path: .*|&\n    settle: 1s|' "$T/dev1.yaml" # c.log ships 1 s after it is written at the earliest
"$AGENT" --config "$T/dev1.yaml" > "$T/dev1.out" 2> "$T/dev1.err" &
AGENT_PID=$!
agent_log() { i=0; while ! grep -q -- "$1" "$T/dev1.err" 2>/dev/null; do i=$((i + 1)); [ $i -gt "${2:-300}" ] && { cat "$T/dev1.err"; fail "no '$1' in the agent log"; }; sleep 0.05; done; }
agent_log "batch .* acked: 1 files"
# the daemon stays connected (idle) to the receiver
[ -e "$T/rstate/receiver.running" ] || fail "no crash marker while running"
kill -TERM "$RECV_PID"
# a file written as the stop begins: the stopping receiver takes no new batch (its sessions are closed at
# once); the daemon keeps it queued and ships it to the next start
gen_log "$S/c.log" 6000 3
rc=0; wait "$RECV_PID" || rc=$?
RECV_PID=""
[ "$rc" = 0 ] || { cat "$T/receiver.log"; fail "receiver exited $rc"; }
if sed -n '/stopping: /,$p' "$T/receiver.log" | grep -q " landed: "; then
    cat "$T/receiver.log"; fail "a batch was landed after the stop began"
fi
[ ! -e "$(landed_root dev1)/data/c.log" ] || fail "c.log landed while the receiver was stopping"
[ ! -e "$T/rstate/receiver.running" ] || { cat "$T/receiver.log"; fail "the crash marker was left by a SIGTERM stop"; }
# the stop closed the daemon's session itself (it did not wait for the device), then flushed and removed the marker
grep -q "stopped cleanly: device connections closed: 1; chunk index flushed, crash marker removed" "$T/receiver.log" ||
    { cat "$T/receiver.log"; fail "the stop did not say it closed the session, flushed and removed the marker"; }
sed -n '/stopping: /,$p' "$T/receiver.log" | grep -q "device dev1 disconnected" ||
    { cat "$T/receiver.log"; fail "the session did not end after the stop"; }
pass "SIGTERM with a daemon connected: its session closed, index flushed, crash marker removed"
start_receiver
grep -q "did not stop cleanly" "$T/receiver.log" && { cat "$T/receiver.log"; fail "the next start recovered as after a crash"; }
# the receiver listens on a new port: point the daemon at it (c.log, queued, and b.log ship)
sed -i "s|^  address: .*|  address: $(cat "$T/receiver.addr")|" "$T/dev1.yaml"
kill -HUP "$AGENT_PID"
agent_log "configuration reloaded"
gen_log "$S/b.log" 7000 2
i=0
while ! cmp -s "$S/b.log" "$(landed_root dev1)/data/b.log"; do
    i=$((i + 1)); [ $i -gt 300 ] && { cat "$T/dev1.err"; fail "b.log did not land after the restart"; }
    sleep 0.05
done
cmp -s "$S/c.log" "$(landed_root dev1)/data/c.log" || fail "c.log, written as the receiver stopped, did not land after its restart"
kill -TERM "$AGENT_PID"
rc=0; wait "$AGENT_PID" || rc=$?
[ "$rc" = 0 ] || fail "agent exited $rc"
same_tree "$S" "$(landed_root dev1)/data"
pass "the next start is not a crash recovery; the daemon ships to it again"

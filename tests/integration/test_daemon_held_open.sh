#!/bin/sh
# after_ship: delete never deletes a file some process still holds open:
#   - a writer opens its file once, writes 10 lines, pauses 4 s (longer
#     than settle: the 10-line version settles, ships and is acked during
#     the pause), writes 10 more and closes it.  The deletion of the 10-line
#     version is deferred while the writer has the file open (said once in
#     the log); the 20-line version ships, and only then is the file
#     deleted: every line landed.
. "$(dirname "$0")/lib.sh"
setup_keys
write_receiver_config 'layout: "{device}/{path}"'
start_receiver
S="$T/src/data"
mkdir -p "$S"
write_agent_config dev1 "$S" 'batch:
  max_wait: 200ms
rescan_interval: 500ms'
sed -i 's|^  - path: .*|&\n    settle: 300ms\n    after_ship: delete|' "$T/dev1.yaml"
"$AGENT" --config "$T/dev1.yaml" > "$T/dev1.out" 2> "$T/dev1.err" &
AGENT_PID=$!
agent_log() { i=0; while ! grep -q -- "$1" "$T/dev1.err" 2>/dev/null; do i=$((i + 1)); [ $i -gt "${2:-300}" ] && { cat "$T/dev1.err"; fail "no '$1' in the agent log"; }; sleep 0.05; done; }
agent_log "running: "

F="$S/held.log"
(
    exec 3>> "$F"
    for k in 1 2 3 4 5 6 7 8 9 10; do echo "2024-05-01T00:00:$k line $k of 20" >&3; done
    sleep 4
    for k in 11 12 13 14 15 16 17 18 19 20; do echo "2024-05-01T00:00:$k line $k of 20" >&3; done
) &
WPID=$!
# the 10-line version is acked during the pause
agent_log "batch .* acked: 1 files"
wait $WPID
i=0
while [ -e "$F" ]; do
    i=$((i + 1)); [ $i -gt 300 ] && { cat "$T/dev1.err"; fail "held.log was not deleted after its last version shipped"; }
    sleep 0.05
done
L="$(landed_root dev1)/data/held.log"
n=$(wc -l < "$L")
[ "$n" = 20 ] || { cat "$T/dev1.err"; fail "$n of 20 lines landed"; }
for k in $(seq 1 20); do grep -q "line $k of 20\$" "$L" || fail "line $k did not land"; done
pass "the writer's 20 lines all landed; the file was deleted after the last version shipped"
d=$(grep -c "deferred" "$T/dev1.err" || true)
[ "$d" = 1 ] || { cat "$T/dev1.err"; fail "the deferred deletion was logged $d times, expected once"; }
pass "the deferred deletion was said once"
kill -TERM $AGENT_PID
rc=0; wait $AGENT_PID || rc=$?
[ "$rc" = 0 ] || { cat "$T/dev1.err"; fail "agent exited $rc"; }
grep -q "deleted=1 " "$T/dev1.out" || { cat "$T/dev1.out"; fail "the shutdown line does not count 1 deletion"; }
pass "SIGTERM: exit 0, one deletion counted"

#!/bin/sh
# The daemon's status shows its real queue while the core is unreachable:
#   - 4 settled files in batches of one file, the core down: queue.batches
#     is 4 and queue.files 4 (it said 0 batches: the count was only
#     refreshed when a batch went);
#   - 2 files of a source with a 1 h settle: settling.files is 2, in JSON
#     and in the text form.
. "$(dirname "$0")/lib.sh"
setup_keys
write_receiver_config 'layout: "{device}/{path}"'
start_receiver
stop_receiver # its address, now closed: the core is unreachable
S="$T/src/data"
L="$T/src/slow"
mkdir -p "$S" "$L"
for i in 1 2 3 4; do gen_log "$S/f$i.log" $((i * 1000)) $i; done
gen_log "$L/s1.log" 2000 11
gen_log "$L/s2.log" 3000 12
write_agent_config dev1 "$S" 'batch:
  max_files: 1
  max_wait: 100ms
rescan_interval: 500ms'
sed -i "s|^  - path: .*|&\n    settle: 100ms\n  - path: $L\n    settle: 1h|" "$T/dev1.yaml"
SOCK="$T/astate-dev1/agent.sock"
"$AGENT" --config "$T/dev1.yaml" > "$T/dev1.out" 2> "$T/dev1.err" &
AGENT_PID=$!
command -v python3 >/dev/null 2>&1 || { pass "skipped: python3 is needed to read the JSON"; exit 0; }
i=0
while :; do
    "$CTL" status --json --socket "$SOCK" > "$T/status.json" 2>/dev/null || true
    [ -s "$T/status.json" ] && [ "$(jget queue.files)" = 4 ] && break
    i=$((i + 1)); [ $i -gt 300 ] && { cat "$T/status.json" "$T/dev1.err"; fail "status never showed 4 files queued"; }
    sleep 0.05
done
# one more walk, so the batches are all closed and the slow files seen twice
w=$(jget walks.count)
i=0
while "$CTL" status --json --socket "$SOCK" > "$T/status.json" && [ "$(jget walks.count)" -le $((w + 1)) ]; do
    i=$((i + 1)); [ $i -gt 300 ] && fail "no further walk"
    sleep 0.05
done
[ "$(jget core.connected)" = false ] || fail "connected to a closed port"
[ "$(jget queue.files)" = 4 ] || { cat "$T/status.json"; fail "queue.files is not 4"; }
[ "$(jget queue.batches)" = 4 ] || { cat "$T/status.json"; fail "queue.batches is not 4 (4 files in batches of one)"; }
b=$(cat "$S"/*.log | wc -c)
[ "$(jget queue.bytes)" = "$b" ] || { cat "$T/status.json"; fail "queue.bytes is not $b"; }
[ "$(jget settling.files)" = 2 ] || { cat "$T/status.json"; fail "settling.files is not 2"; }
"$CTL" status --socket "$SOCK" > "$T/status.txt" || fail "ingestctl status failed"
grep -q "^queued  *4 batches, 4 files, $b bytes" "$T/status.txt" || { cat "$T/status.txt"; fail "text: no queued line with 4 batches"; }
grep -q "^settling  *2 files" "$T/status.txt" || { cat "$T/status.txt"; fail "text: no settling line with 2 files"; }
kill -TERM "$AGENT_PID"
rc=0; wait "$AGENT_PID" || rc=$?
[ "$rc" = 0 ] || fail "agent exited $rc"
pass "core down: status shows 4 batches, 4 files, $b bytes queued and 2 files settling"

#!/bin/sh
# One receiver per state_dir.  A second receiver started with the same
# configuration while the first one lands a batch (by hand beside the
# service, a second unit) stops at once with a clear error, and touches
# nothing: before, it took the first one's running marker for a crash's,
# swept the temporary files of the batch being landed out of bronze, and
# the batch was acknowledged with a file missing from bronze.
. "$(dirname "$0")/lib.sh"
setup_keys
write_receiver_config 'layout: "{device}/{path}"'
start_receiver
S="$T/src"
mkdir -p "$S"
head -c 24000000 /dev/urandom > "$S/big"
for i in $(seq 1 20); do echo "small $i" > "$S/s$i"; done
write_agent_config dev1 "$S" 'throttle:
  rate: 8MiB'
"$AGENT" --config "$T/dev1.yaml" --once > "$T/dev1.out" 2> "$T/dev1.err" &
APID=$!
wait_log 'device dev1 connected'
sleep 1 # the batch is landing: its temporary files are in bronze
rc=0
timeout 20 "$RECEIVER" --config "$T/receiver.yaml" > "$T/second.log" 2>&1 || rc=$?
[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || { cat "$T/second.log"; fail "a second receiver on the same state_dir did not stop (rc $rc)"; }
grep -q "state_dir .* is in use by another ingest-receiver: one receiver per state_dir" "$T/second.log" ||
    { cat "$T/second.log"; fail "the second receiver did not say why it stopped"; }
! grep -q "did not stop cleanly" "$T/second.log" || { cat "$T/second.log"; fail "the second receiver swept bronze"; }
[ -f "$T/rstate/receiver.running" ] || fail "the first receiver's running marker went"
wait "$APID" || { cat "$T/dev1.err"; fail "the ship failed"; }
same_tree "$S" "$(landed_root dev1)/src"
kill -0 "$RECV_PID" 2>/dev/null || fail "the first receiver died"
pass "a second receiver on the same state_dir stops at once and touches nothing; the batch landing meanwhile lands whole"
stop_receiver
grep -q "stopped cleanly" "$T/receiver.log" || { tail -5 "$T/receiver.log"; fail "the first receiver did not stop cleanly"; }
# and once the first one is gone, a receiver starts on that state_dir as usual
start_receiver
stop_receiver
pass "once the first receiver stopped, the next one starts on its state_dir"

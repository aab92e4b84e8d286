#!/bin/sh
# The daemon while the core is away:
#   - the receiver is down at start: the agent keeps discovering, queues
#     batches up to queue.max_files, says "backpressure" once, retries with
#     backoff; when the receiver comes up everything lands, once;
#   - after_ship: delete removes only files whose batch was acknowledged:
#     with the receiver stopped mid-way, the files written since still exist;
#     and when it is back with its ACKs held 6 s, while a batch has landed
#     but is not acknowledged; a file passed over by a filter is never deleted.
. "$(dirname "$0")/lib.sh"
setup_keys
write_receiver_config 'layout: "{device}/{path}"'
start_receiver
ADDR=$(cat "$T/receiver.addr")
# later restarts listen on the same address
sed -i "s|^listen: .*|listen: $ADDR|" "$T/receiver.yaml"
stop_receiver
S="$T/src/data"
K="$T/keep"   # a copy of everything written, to compare with what landed
mkdir -p "$S" "$K"
for i in $(seq 1 60); do gen_log "$S/q$i.log" 500 $i; done
cp -r "$S/." "$K/"
write_agent_config dev1 "$S" 'batch:
  max_files: 10
  max_wait: 200ms
queue:
  max_files: 25'
sed -i 's|^  - path: .*|&\n    settle: 200ms\n    after_ship: delete\n    exclude: ["*.skip"]|' "$T/dev1.yaml"
gen_log "$S/never.skip" 300 5
"$AGENT" --config "$T/dev1.yaml" > "$T/dev1.out" 2> "$T/dev1.err" &
AGENT_PID=$!
agent_log() { i=0; while ! grep -q -- "$1" "$T/dev1.err"; do i=$((i + 1)); [ $i -gt "${2:-300}" ] && { cat "$T/dev1.err"; fail "no '$1' in the agent log"; }; sleep 0.05; done; }
agent_log "backpressure: the queue is full"
agent_log "next attempt in"
sleep 1.5
[ "$(grep -c 'backpressure: the queue is full' "$T/dev1.err")" = 1 ] || fail "backpressure not said exactly once"
[ "$(find "$S" -name 'q*.log' | wc -l)" = 60 ] || fail "files were deleted before any ack"
pass "core down: backpressure said once, backoff logged, nothing deleted"

start_receiver
i=0
while [ "$(find "$S" -name 'q*.log' | wc -l)" != 0 ]; do
    i=$((i + 1)); [ $i -gt 400 ] && { tail -20 "$T/dev1.err"; fail "not every file was shipped and deleted"; }
    sleep 0.05
done
agent_log "backpressure off"
same_tree "$K" "$(landed_root dev1)/data"
[ -f "$S/never.skip" ] || fail "a filtered file was deleted"
[ ! -e "$(landed_root dev1)/data/never.skip" ] || fail "a filtered file landed"
pass "core up: all 60 files landed and were deleted after their ack; the filtered file stays"
# one agent per state_dir: a --once with the daemon's config is refused, and says why
rc=0
"$AGENT" --config "$T/dev1.yaml" --once > "$T/once.out" 2> "$T/once.err" || rc=$?
[ "$rc" -ne 0 ] || fail "a --once ran beside the daemon on the same state_dir"
grep -q "is in use by another ingest-agent" "$T/once.err" || { cat "$T/once.err"; fail "the second agent did not say the state_dir is in use"; }
kill -0 "$AGENT_PID" 2>/dev/null || fail "the daemon died when a second agent tried its state_dir"
pass "a second agent on the daemon's state_dir is refused: $(grep -o 'state_dir .* one agent per state_dir' "$T/once.err" | sed "s|$T/||")"

# stop the receiver mid-way: files written afterwards are not acked, so not deleted
for i in $(seq 1 15); do gen_log "$S/r$i.log" 400 $((i + 100)); done
cp "$S"/r*.log "$K/"
i=0
while [ "$(find "$S" -name 'r*.log' | wc -l)" != 0 ]; do
    i=$((i + 1)); [ $i -gt 400 ] && fail "r files were not shipped"; sleep 0.05
done
stop_receiver
for i in $(seq 1 12); do gen_log "$S/u$i.log" 400 $((i + 200)); done
cp "$S"/u*.log "$K/"
sleep 2
[ "$(find "$S" -name 'u*.log' | wc -l)" = 12 ] || fail "unacknowledged files were deleted"
pass "receiver stopped mid-way: the 12 unacknowledged files still exist"
# back with each ACK held 6 s after its batch is durable: in that window the batch has landed but is not
# acknowledged, and none of its files may be deleted yet (looked at 1 s into the window, so that an agent
# that deleted on anything but the ACK would have done it)
landed0=$(grep -c ' landed: ' "$T/receiver.log" || true)
export INGEST_TEST_ACK_DELAY_MS=6000
start_receiver
unset INGEST_TEST_ACK_DELAY_MS
i=0
while [ "$(grep -c ' landed: ' "$T/receiver.log" || true)" -le "$landed0" ]; do
    i=$((i + 1)); [ $i -gt 600 ] && { tail -20 "$T/dev1.err"; fail "no batch landed after the receiver came back"; }
    sleep 0.02
done
sleep 1
[ "$(find "$S" -name 'u*.log' | wc -l)" = 12 ] || fail "files were deleted while their batch was landed but not yet acknowledged"
pass "a batch landed, its ack held back: its files still exist"
i=0
while [ "$(find "$S" -name 'u*.log' | wc -l)" != 0 ]; do
    i=$((i + 1)); [ $i -gt 600 ] && { tail -20 "$T/dev1.err"; fail "u files were not shipped after the receiver came back"; }
    sleep 0.05
done
kill -TERM $AGENT_PID
rc=0; wait $AGENT_PID || rc=$?
[ "$rc" = 0 ] || fail "agent exited $rc"
same_tree "$K" "$(landed_root dev1)/data"
dups=$(manifest_paths dev1 | sort | uniq -d | wc -l)
[ "$dups" = 0 ] || fail "$dups paths recorded more than once"
grep -q "deleted=87 " "$T/dev1.out" || { cat "$T/dev1.out"; fail "the shutdown line does not count 87 deletions"; }
grep -q "skipped_exclude=1 " "$T/dev1.out" || { cat "$T/dev1.out"; fail "the excluded file is not counted once"; }
pass "receiver back: everything landed once; 87 deleted, 1 excluded"

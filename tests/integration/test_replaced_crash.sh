#!/bin/sh
# kill -9 of the receiver after a batch put a new version of a landed file
# in place and before the batch's manifest was written (the commit is held
# there by INGEST_TEST_PLACED_PAUSE_MS), then the file removed at the edge,
# so the device's replay never names it again (docs/landing.md, "Replaced
# versions").  Before, bronze kept the new, unrecorded bytes where the
# acknowledged version was, and verify called that version corrupt.  Now:
#   - while the commit is held, the new version is in place and the landed
#     one is kept under a backup name, with an intent under _manifests;
#   - the restarted receiver puts the landed version back (and says so),
#     and leaves no backup nor intent;
#   - the agent's next run lands the rest, and verify finds bronze whole:
#     every file as its manifests record it.
. "$(dirname "$0")/lib.sh"
setup_keys
write_receiver_config 'layout: "{device}/{path}"'
start_receiver
pin_receiver_port
S="$T/src/data"
mkdir -p "$S"
head -c 300000 /dev/urandom > "$S/a.bin"
printf 'stays\n' > "$S/b.txt"
cp "$S/a.bin" "$T/a.v1"
write_agent_config dev1 "$S"
ship dev1 > /dev/null
L="$(landed_root dev1)/data"
cmp -s "$L/a.bin" "$T/a.v1" || fail "the first version did not land"

# a new version, whose commit is held after its rename; the receiver is killed there
head -c 200000 /dev/urandom > "$S/a.bin"
cp "$S/a.bin" "$T/a.v2"
stop_receiver
INGEST_TEST_PLACED_PAUSE_MS=30000 start_receiver
"$AGENT" --config "$T/dev1.yaml" --once > "$T/dev1.out" 2> "$T/dev1.err" &
AGENT_PID=$!
wait_log "commit paused after its renames" 400
cmp -s "$L/a.bin" "$T/a.v2" || fail "the held commit had not put the new version in place"
nbak=$(find "$L" -name '.ingest-old-*' | wc -l)
[ "$nbak" -eq 1 ] || fail "$nbak backups of the landed version while the commit is held, expected 1"
cmp -s "$(find "$L" -name '.ingest-old-*')" "$T/a.v1" || fail "the backup does not hold the landed version"
[ "$(ls "$T/bronze/_manifests/.replace" | wc -l)" -eq 1 ] || fail "no replace intent while the commit is held"
kill -KILL "$RECV_PID"
wait "$RECV_PID" 2>/dev/null || true
RECV_PID=""
wait "$AGENT_PID" 2>/dev/null || true
pass "receiver killed with the new version in place, the landed one kept aside"

# the file goes at the edge: no replay of the batch will name it
rm "$S/a.bin"
start_receiver
grep -q "data/a.bin: its landed version is back" "$T/receiver.log" ||
    { tail -5 "$T/receiver.log"; fail "the restarted receiver did not say it put the landed version back"; }
cmp -s "$L/a.bin" "$T/a.v1" || fail "after the restart bronze does not hold the acknowledged version of a.bin"
[ "$(find "$L" -name '.ingest-old-*' | wc -l)" -eq 0 ] || fail "a backup is left after the restart"
[ "$(ls "$T/bronze/_manifests/.replace" | wc -l)" -eq 0 ] || fail "a replace intent is left after the restart"
pass "the restarted receiver put the acknowledged version back"

ship dev1 > /dev/null
cmp -s "$L/b.txt" "$S/b.txt" || fail "b.txt changed"
cmp -s "$L/a.bin" "$T/a.v1" || fail "the next run changed a.bin"
"$CTL" verify --bronze "$T/bronze" --dedup-key "$T/keys/fleet.dedup" > "$T/verify.out" 2> "$T/verify.err" || {
    cat "$T/verify.out" "$T/verify.err"; fail "verify found bronze damaged"; }
grep -q '"missing":0,"changed":0,"corrupt":0' "$T/verify.out" || fail "verify: $(cat "$T/verify.out")"
pass "after the next run bronze matches its manifests (verify: $(sed 's/.*"files":\([0-9]*\).*/\1/' "$T/verify.out") files)"

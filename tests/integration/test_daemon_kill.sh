#!/bin/sh
# kill -9 of the daemon at random moments while it ships 2,000 small files
# (SOAK_KILLS kills, default 5; test_soak.sh is the long soak).  After the final
# restart every file has landed exactly once and byte-identical: each path
# has one FILE record across all manifests (a batch whose ack was lost is
# replayed under the same batch id, which the core acknowledges as a
# duplicate without writing a second manifest).  Every kill must find the
# agent alive (exit status 137: it died of our SIGKILL, nothing else).
#
# Then the dangerous window itself, three times: the receiver holds each
# ACK 1.5 s after its batch is durable (INGEST_TEST_ACK_DELAY_MS), and an
# agent with after_ship: delete is killed as soon as the receiver logs a
# batch landed, so that batch's ACK is never read.  Its files must stay
# (no ack, no delete); after the restart the batch is replayed and
# acknowledged as a duplicate (counted: at least one per kill), only then
# are its files deleted, and no path is recorded twice.
. "$(dirname "$0")/lib.sh"
KILLS=${SOAK_KILLS:-5}
setup_keys
write_receiver_config 'layout: "{device}/{path}"'
start_receiver
S="$T/src/data"
mkdir -p "$S"
# 2,000 files of about 200 bytes in 8 directories ("waves" of 250), made
# one wave per restart so kills hit discovery and shipping alike
wave() {
    mkdir -p "$T/stage/w$1"
    gen_log "$T/blob.$1" 50000 "$1"
    (cd "$T/stage/w$1" && split -a 3 -n 250 "$T/blob.$1" f.)
    rm "$T/blob.$1"
    mv "$T/stage/w$1" "$S/w$1"
}
W=0
next_wave() { [ $W -lt 8 ] && { wave $W; W=$((W + 1)); }; return 0; }
next_wave
write_agent_config dev1 "$S" 'batch:
  max_files: 20
  max_wait: 200ms'
sed -i 's|^  - path: .*|&\n    settle: 300ms|' "$T/dev1.yaml"
rnd_ms() { od -An -N2 -tu2 /dev/urandom | awk -v lo="$1" -v hi="$2" '{ print lo + $1 % (hi - lo) }'; }
start_agent() { "$AGENT" --config "$T/dev1.yaml" >> "$T/dev1.out" 2>> "$T/dev1.err" & AGENT_PID=$!; }
landed_count() { find "$(landed_root dev1)/data" -type f 2>/dev/null | wc -l; }

k=0
start_agent
while [ $k -lt "$KILLS" ]; do
    ms=$(rnd_ms 40 400)
    sleep "$(echo "$ms" | awk '{ printf "%.3f", $1 / 1000 }')"
    kill -9 $AGENT_PID 2>/dev/null || true
    rc=0
    wait $AGENT_PID 2>/dev/null || rc=$?
    [ "$rc" = 137 ] || { tail -20 "$T/dev1.err"; fail "kill $((k + 1)): the agent had already exited with status $rc"; }
    k=$((k + 1))
    echo "kill $k after ${ms} ms: $(landed_count) files landed" >> "$T/kills.log"
    start_agent
    next_wave
done
while [ $W -lt 8 ]; do next_wave; done
nfiles=$(find "$S" -type f | wc -l)
[ "$nfiles" = 2000 ] || fail "made $nfiles files, not 2000"
i=0
while [ "$(landed_count)" -lt 2000 ]; do
    i=$((i + 1))
    [ $i -gt 600 ] && { cat "$T/kills.log"; tail -30 "$T/dev1.err"; fail "only $(landed_count) of 2000 files landed"; }
    sleep 0.05
done
sleep 0.5
kill -TERM $AGENT_PID
rc=0; wait $AGENT_PID || rc=$?
[ "$rc" = 0 ] || { tail -20 "$T/dev1.err"; fail "agent exited $rc on SIGTERM"; }
cat "$T/kills.log"
same_tree "$S" "$(landed_root dev1)/data"
recs=$(manifest_paths dev1 | wc -l)
dups=$(manifest_paths dev1 | sort | uniq -d | wc -l)
[ "$dups" = 0 ] || { manifest_paths dev1 | sort | uniq -d | head; fail "$dups paths recorded in more than one manifest"; }
[ "$recs" = 2000 ] || fail "$recs FILE records for 2000 files"
replays=$(grep -c "acknowledged again" "$T/receiver.log" || true)
pass "$KILLS kills: 2000 files landed exactly once, byte-identical ($replays batch replays acknowledged as duplicates)"

# ---- the window between durable and acknowledged --------------------------
stop_receiver
export INGEST_TEST_ACK_DELAY_MS=1500
start_receiver
unset INGEST_TEST_ACK_DELAY_MS
D="$T/src/win"
mkdir -p "$D"
write_agent_config dev2 "$D" 'batch:
  max_files: 50
  max_wait: 200ms'
sed -i 's|^  - path: .*|&\n    settle: 300ms\n    after_ship: delete|' "$T/dev2.yaml"
landed_lines() { grep -c "device dev2 batch .* landed:" "$T/receiver.log" || true; }
replayed_lines() { grep -c "device dev2 batch .* was landed before; acknowledged again" "$T/receiver.log" || true; }
for round in 1 2 3; do
    mkdir -p "$D/r$round"
    for f in 1 2 3 4 5; do printf 'round %d file %d\n' "$round" "$f" > "$D/r$round/f$f"; done
    before=$(landed_lines)
    "$AGENT" --config "$T/dev2.yaml" >> "$T/dev2.out" 2>> "$T/dev2.err" &
    APID=$!
    i=0
    while [ "$(landed_lines)" -le "$before" ]; do
        i=$((i + 1)); [ $i -gt 600 ] && { tail -20 "$T/dev2.err"; fail "round $round: no batch landed"; }
        sleep 0.01
    done
    kill -9 $APID
    rc=0; wait $APID 2>/dev/null || rc=$?
    [ "$rc" = 137 ] || { tail -20 "$T/dev2.err"; fail "round $round: the agent exited with status $rc before the kill"; }
    # this round's files are the batch that landed: its ack was never read, so they stay
    [ "$(find "$D/r$round" -type f | wc -l)" -eq 5 ] || fail "round $round: files were deleted although their ack was never read"
done
"$AGENT" --config "$T/dev2.yaml" >> "$T/dev2.out" 2>> "$T/dev2.err" &
APID=$!
i=0
while [ "$(find "$D" -type f | wc -l)" -gt 0 ]; do
    i=$((i + 1)); [ $i -gt 1200 ] && { tail -20 "$T/dev2.err"; fail "$(find "$D" -type f | wc -l) files were never deleted after their ack"; }
    sleep 0.05
done
kill -TERM $APID
rc=0; wait $APID || rc=$?
[ "$rc" = 0 ] || { tail -20 "$T/dev2.err"; fail "agent dev2 exited $rc on SIGTERM"; }
r=$(replayed_lines)
[ "$r" -ge 3 ] || { grep "dev2" "$T/receiver.log" | tail -20; fail "$r batches replayed after 3 kills inside the window, expected at least 3"; }
recs=$(manifest_paths dev2 | wc -l)
dups=$(manifest_paths dev2 | sort | uniq -d | wc -l)
[ "$dups" = 0 ] || fail "$dups paths of dev2 recorded in more than one manifest"
[ "$recs" = 15 ] || fail "$recs FILE records for dev2's 15 files"
pass "3 kills between durable and acknowledged: $r batches replayed as duplicates, files deleted only after their ack, each path recorded once"

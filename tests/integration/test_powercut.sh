#!/bin/sh
# Simulated power cuts (issue 17): the power-cut layer itself, then one cut
# at a known moment on each side.  (The soak, test_soak.sh, cuts at random
# moments while work is in flight.)
#
# 1. The layer (tests/tools/powercut/): a shell under it makes files, syncs
#    some, renames and removes; after kill and restore, exactly the changes
#    no fsync, directory fsync or syncfs covered are gone.
# 2. The core: a receiver under the layer lands a batch of 1 file in new
#    directories (an fsync per file and directory) and one of 40 files (one
#    syncfs); once the agent has both acks, the power is cut.  Every acked
#    file is still there with its bytes, both stores open, the index agrees
#    with the manifests, `ingestctl verify` passes, and the agent sends
#    nothing again.
# 3. The edge: an agent daemon under the layer, after_ship: delete, ships
#    files and deletes them; the power is cut.  The deleted files stay
#    deleted (a deleted file that came back would be shipped twice), and the
#    next files, shipped after the cut, land under batch ids of their own
#    (a batch number the cut took back would be acked as a duplicate and
#    its files never landed).
. "$(dirname "$0")/lib.sh"
RESTORE="$BUILD/tools/powercut-restore"
RT=$(realpath "$T")

# ---- 1. the layer ----
R="$RT/layer"
mkdir -p "$R"
echo old > "$R/keep"
echo old2 > "$R/over"
sync "$R/keep" "$R/over" "$R"
SH=$(powercut_wrapper /bin/sh "$RT/pc-layer" "$R")
( "$SH" -c "
cd '$R'
echo b > b; sync b; sync .            # both synced
echo c > c; sync .                    # the name synced, not the bytes
echo x > tmp; mv tmp over; sync .     # renamed over, the new bytes not synced
echo g > g; sync g; mv g g2; sync .   # synced, then renamed and the rename synced
echo h > h; sync h; sync .; rm h      # removed, the removal not synced
echo new > keep                       # an old file rewritten, not synced
echo a > a                            # name and bytes never synced
mkdir d; echo e > d/e; sync d/e; sync d   # in a directory whose own name was never synced
echo f > f; sync f                    # the bytes synced, not the name
kill -9 \$\$
" ) 2>/dev/null || true
"$RESTORE" "$RT/pc-layer" > "$T/layer.out" 2>&1 || { cat "$T/layer.out"; fail "powercut-restore failed"; }
got=$(cd "$R" && for f in $(ls | sort); do if [ -d "$f" ]; then printf '%s/ ' "$f"; else printf '%s=%s ' "$f" "$(cat "$f")"; fi; done)
want="b=b c= g2=g h=h keep=old over= "
[ "$got" = "$want" ] || fail "after the cut: '$got', expected '$want' ($(cat "$T/layer.out"))"
[ ! -e "$RT/pc-layer/log" ] || fail "powercut-restore left its log"
pass "the layer: unsynced names and bytes undone, synced ones kept: $got"

# ---- 2. the core ----
setup_keys
write_receiver_config 'layout: "{device}/{path}"'
REAL_RECEIVER=$RECEIVER
RECEIVER=$(powercut_wrapper "$REAL_RECEIVER" "$RT/pc-recv" "$RT/bronze:$RT/rstate")
start_receiver
S="$T/src/data"
mkdir -p "$S/one/deep/er"
head -c 30000 /dev/urandom > "$S/one/deep/er/alone.bin"
write_agent_config dev1 "$S" 'batch:
  max_files: 40'
ship dev1 > /dev/null
mkdir -p "$S/many"
i=0
while [ $i -lt 40 ]; do head -c $((1000 + i * 517)) /dev/urandom > "$S/many/m$i"; i=$((i + 1)); done
ship dev1 > /dev/null
[ "$(grep -c ' landed: ' "$T/receiver.log")" -eq 2 ] || fail "expected 2 batches landed: $(grep ' landed: ' "$T/receiver.log")"
grep -q ' landed: 40 files' "$T/receiver.log" || fail "the 40 files were not one batch"
kill -9 "$RECV_PID"
wait "$RECV_PID" 2>/dev/null || true
RECV_PID=""
"$RESTORE" "$RT/pc-recv" > "$T/cut-recv.out" 2>&1 || { cat "$T/cut-recv.out"; fail "powercut-restore failed (core)"; }
same_tree "$S" "$(landed_root dev1)/data"
[ "$(find "$(landed_root dev1)/data" -type f | wc -l)" -eq 41 ] || fail "landed tree after the cut: $(find "$(landed_root dev1)/data" -type f | wc -l) files, 41 expected"
"$CTL" index check "$T/rstate" --bronze "$T/bronze" > "$T/index.out" 2>&1 || { cat "$T/index.out"; fail "index check after the cut"; }
start_receiver
write_agent_config dev1 "$S" 'batch:
  max_files: 40'
ship dev1 > /dev/null
[ "$(field dev1 files)" = 0 ] && [ "$(field dev1 unchanged)" = 41 ] || fail "the agent sent $(field dev1 files) files again after the core's cut: $(tail -1 "$T/dev1.out")"
"$CTL" verify --config "$T/receiver.yaml" > "$T/verify.out" 2>&1 || { tail -5 "$T/verify.out"; fail "verify after the cut"; }
[ "$(manifest_paths dev1 | sort | uniq -d | wc -l)" = 0 ] || fail "a path was recorded twice"
pass "the core: 41 acked files (1 alone, 40 in one batch) survive a power cut: $(cat "$T/cut-recv.out")"
stop_receiver
RECEIVER=$REAL_RECEIVER

# ---- 3. the edge ----
start_receiver
E="$T/src/edge"
mkdir -p "$E/a" "$E/b" "$T/keep"
for n in 1 2 3 4 5 6; do
    head -c $((3000 + n * 101)) /dev/urandom > "$T/keep/e$n"
    cp "$T/keep/e$n" "$E/$( [ $((n % 2)) = 0 ] && echo a || echo b )/e$n"
done
write_agent_config dev2 "$E" 'batch:
  max_files: 2
  max_wait: 50ms'
sed -i 's|^  - path: .*|&\n    settle: 50ms\n    after_ship: delete|' "$T/dev2.yaml"
AGENT_PC=$(powercut_wrapper "$AGENT" "$RT/pc-agent" "$RT/astate-dev2:$E")
"$AGENT_PC" --config "$T/dev2.yaml" > "$T/dev2.out" 2> "$T/dev2.err" &
APID=$!
i=0
while [ -n "$(find "$E" -type f)" ]; do
    i=$((i + 1)); [ $i -gt 400 ] && { cat "$T/dev2.err"; fail "the agent did not ship and delete the 6 files"; }
    sleep 0.05
done
kill -9 "$APID"
wait "$APID" 2>/dev/null || true
"$RESTORE" "$RT/pc-agent" > "$T/cut-agent.out" 2>&1 || { cat "$T/cut-agent.out"; fail "powercut-restore failed (edge)"; }
back=$(find "$E" -type f | wc -l)
[ "$back" = 0 ] || fail "$back deleted source files came back after the edge's power cut (the deletions were not durable): $(cat "$T/cut-agent.out")"
for n in 7 8 9; do
    head -c $((3000 + n * 101)) /dev/urandom > "$T/keep/e$n"
    cp "$T/keep/e$n" "$E/a/e$n"
done
"$AGENT_PC" --config "$T/dev2.yaml" >> "$T/dev2.out" 2>> "$T/dev2.err" &
APID=$!
i=0
while [ -n "$(find "$E" -type f)" ]; do
    i=$((i + 1)); [ $i -gt 400 ] && { cat "$T/dev2.err"; fail "the agent did not ship the 3 files written after the cut"; }
    sleep 0.05
done
kill -TERM "$APID"
wait "$APID" || fail "the agent exited non-zero on SIGTERM"
landed=$(find "$(landed_root dev2)/edge" -type f | wc -l)
[ "$landed" = 9 ] || fail "$landed of 9 files landed for dev2 ($(grep -c 'landed before' "$T/receiver.log") batches acked as duplicates)"
for n in 1 2 3 4 5 6 7 8 9; do
    cmp -s "$T/keep/e$n" "$(find "$(landed_root dev2)/edge" -name "e$n")" || fail "e$n landed with other bytes"
done
[ "$(manifest_paths dev2 | sort | uniq -d | wc -l)" = 0 ] || fail "a path of dev2 was recorded twice"
pass "the edge: 6 shipped and deleted files stay deleted after a power cut, and 3 more land after it ($(cat "$T/cut-agent.out"))"

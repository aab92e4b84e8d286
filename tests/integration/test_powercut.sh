#!/bin/sh
# Simulated power cuts (issue 17): the power-cut layer itself, then one cut
# at a known moment on each side.  (The soak, test_soak.sh, cuts at random
# moments while work is in flight.)
#
# 1. The layer (tests/tools/powercut/): a shell under it makes files, syncs
#    some, renames and removes; after kill and restore, exactly the changes
#    no fsync, directory fsync or syncfs covered are gone.
# 2. The core: a receiver under the layer lands a batch of 1 file in new
#    directories (an fsync per file and directory), and the power is cut
#    once the agent has its ack; then a batch of 40 files (one syncfs), and
#    a cut again.  Every acked file is still there with its bytes, both
#    stores open, the index agrees with the manifests, `ingestctl verify`
#    passes, and the agent sends nothing again.  Then directories that a
#    receiver made under the layer and never synced (as one killed before
#    its batch committed leaves them), a batch of 1 file into them, a cut:
#    the file is there (its batch synced the directories above it).
# 3. The edge: an agent daemon under the layer, after_ship: delete, ships
#    files and deletes them; once its journal is empty the power is cut.
#    The deleted files stay deleted (a deleted file that came back would be
#    shipped twice).  Then two more files, a clean stop, a cut at rest, and
#    a ninth file: it lands under a batch id of its own, and no batch is
#    acknowledged as landed before (a batch number the cut took back would
#    be, and its files would never land; next_batch_seq is written durably,
#    and the state directory is also fsynced by other writes there).
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
# Directories made and removed without a sync (an abandoned batch's), then made again and synced down to a
# file: what was done in the removed ones is gone with them, and must not be undone by path in the new ones
# (the soak's lost batches).  The old directories are held open while removed, so that the new ones get
# other inode numbers (as a batch's cached descriptor, or another program taking the freed numbers, does).
R2="$RT/layer2"
mkdir -p "$R2"
sync "$R2"
SH2=$(powercut_wrapper /bin/sh "$RT/pc-layer2" "$R2")
( "$SH2" -c "
cd '$R2'
mkdir -p a/b; echo t > a/b/.t; exec 3<a 4<a/b; rm a/b/.t; rmdir a/b a   # never synced
mkdir -p a/b; echo f > a/b/f; sync a/b/f; sync a/b; sync a; sync .      # made again, all synced
kill -9 \$\$
" ) 2>/dev/null || true
"$RESTORE" "$RT/pc-layer2" > "$T/layer2.out" 2>&1 || { cat "$T/layer2.out"; fail "powercut-restore failed (layer 2)"; }
got=$(cd "$R2" && find . | sort | tr '\n' ' ')
[ "$got" = ". ./a ./a/b ./a/b/f " ] && [ "$(cat "$R2/a/b/f")" = f ] ||
    fail "a synced file in directories made again after an unsynced removal: '$got' after the cut ($(cat "$T/layer2.out"))"
pass "the layer: changes in directories removed since are not undone in the ones made again: $(cat "$T/layer2.out")"

# ---- 2. the core ----
# cut_receiver: power cut of the receiver (the layer must have been active: something logged, some of it durable)
cut_receiver() {
    kill -9 "$RECV_PID"
    wait "$RECV_PID" 2>/dev/null || true
    RECV_PID=""
    "$RESTORE" "$RT/pc-recv" > "$T/cut-recv.out" 2>&1 || { cat "$T/cut-recv.out"; fail "powercut-restore failed (core)"; }
    grep -q ' [1-9][0-9]* changes were durable' "$T/cut-recv.out" || fail "the layer logged nothing durable: $(cat "$T/cut-recv.out")"
}
setup_keys
write_receiver_config 'layout: "{device}/{path}"'
REAL_RECEIVER=$RECEIVER
RECEIVER=$(powercut_wrapper "$REAL_RECEIVER" "$RT/pc-recv" "$RT/bronze:$RT/rstate")
start_receiver
pin_receiver_port
S="$T/src/data"
mkdir -p "$S/one/deep/er"
head -c 30000 /dev/urandom > "$S/one/deep/er/alone.bin"
write_agent_config dev1 "$S" 'batch:
  max_files: 40'
ship dev1 > /dev/null
grep -q ' landed: 1 files' "$T/receiver.log" || fail "the first batch did not land 1 file"
cut_receiver # right after a batch of one file (an fsync per file and directory), acked
same_tree "$S" "$(landed_root dev1)/data"
pass "the core: an acked batch of 1 file in new directories survives a power cut: $(cat "$T/cut-recv.out")"
start_receiver
mkdir -p "$S/many"
i=0
while [ $i -lt 40 ]; do head -c $((1000 + i * 517)) /dev/urandom > "$S/many/m$i"; i=$((i + 1)); done
ship dev1 > /dev/null
grep -q ' landed: 40 files' "$T/receiver.log" || fail "the 40 files were not one batch"
cut_receiver # right after a batch of 40 files (one syncfs), acked
same_tree "$S" "$(landed_root dev1)/data"
[ "$(find "$(landed_root dev1)/data" -type f | wc -l)" -eq 41 ] || fail "landed tree after the cut: $(find "$(landed_root dev1)/data" -type f | wc -l) files, 41 expected"
"$CTL" index check "$T/rstate" --bronze "$T/bronze" > "$T/index.out" 2>&1 || { cat "$T/index.out"; fail "index check after the cut"; }
start_receiver
ship dev1 > /dev/null
[ "$(field dev1 files)" = 0 ] && [ "$(field dev1 unchanged)" = 41 ] || fail "the agent sent $(field dev1 files) files again after the core's cut: $(tail -1 "$T/dev1.out")"
"$CTL" verify --config "$T/receiver.yaml" > "$T/verify.out" 2>&1 || { tail -5 "$T/verify.out"; fail "verify after the cut"; }
[ "$(manifest_paths dev1 | sort | uniq -d | wc -l)" = 0 ] || fail "a path was recorded twice"
pass "the core: 40 more acked files in one batch survive a power cut; index, verify and the agent agree: $(cat "$T/cut-recv.out")"
# Directories a receiver made and never synced (it was killed before its batch committed): the next one
# lands a batch of 1 file into them, which does not make them, and is acked; after a cut the file is there.
stop_receiver
MKDIR_PC=$(powercut_wrapper "$(command -v mkdir)" "$RT/pc-recv" "$RT/bronze:$RT/rstate")
"$MKDIR_PC" -p "$(landed_root dev1)/data/left/over" || fail "mkdir under the layer"
start_receiver
mkdir -p "$S/left/over"
head -c 5000 /dev/urandom > "$S/left/over/late.bin"
ship dev1 > /dev/null
[ "$(field dev1 files)" = 1 ] || fail "expected a batch of the 1 new file: $(tail -1 "$T/dev1.out")"
cut_receiver
[ -f "$(landed_root dev1)/data/left/over/late.bin" ] ||
    fail "an acked file in directories an earlier receiver made was lost in the cut: $(cat "$T/cut-recv.out")"
same_tree "$S" "$(landed_root dev1)/data"
pass "the core: an acked file in directories left unsynced by an earlier receiver survives a power cut"
start_receiver
stop_receiver
RECEIVER=$REAL_RECEIVER

# ---- 3. the edge ----
start_receiver
E="$T/src/edge"
mkdir -p "$E/a" "$E/b" "$T/keep"
keep_put() { head -c $((3000 + $1 * 101)) /dev/urandom > "$T/keep/e$1"; cp "$T/keep/e$1" "$E/$2/e$1"; }
for n in 1 2 3 4 5 6; do keep_put $n "$( [ $((n % 2)) = 0 ] && echo a || echo b )"; done
write_agent_config dev2 "$E" 'batch:
  max_files: 2
  max_wait: 50ms'
sed -i 's|^  - path: .*|&\n    settle: 50ms\n    after_ship: delete|' "$T/dev2.yaml"
AGENT_PC=$(powercut_wrapper "$AGENT" "$RT/pc-agent" "$RT/astate-dev2:$E")
SOCK="$T/astate-dev2/agent.sock"
start_pc_agent() { "$AGENT_PC" --config "$T/dev2.yaml" >> "$T/dev2.out" 2>> "$T/dev2.err" & APID=$!; }
# until_drained: the source empty and the journal empty (every batch acked, its deletions durable, its record gone)
until_drained() {
    i=0
    while [ -n "$(find "$E" -type f)" ] || ! status_json || [ "$(jget queue.batches)" != 0 ]; do
        i=$((i + 1)); [ $i -gt 600 ] && { cat "$T/dev2.err"; fail "the agent did not ship and delete every file ($1)"; }
        sleep 0.05
    done
}
cut_agent() {
    kill -9 "$APID" 2>/dev/null || true # (after a clean stop the agent is gone already: a cut at rest)
    wait "$APID" 2>/dev/null || true
    "$RESTORE" "$RT/pc-agent" > "$T/cut-agent.out" 2>&1 || { cat "$T/cut-agent.out"; fail "powercut-restore failed (edge)"; }
    grep -q ' [1-9][0-9]* changes were durable' "$T/cut-agent.out" || fail "the layer logged nothing durable: $(cat "$T/cut-agent.out")"
}
start_pc_agent
until_drained "6 files"
cut_agent
back=$(find "$E" -type f | wc -l)
[ "$back" = 0 ] || fail "$back deleted source files came back after the edge's power cut (the deletions were not durable): $(cat "$T/cut-agent.out")"
pass "the edge: 6 shipped and deleted files stay deleted after a power cut ($(cat "$T/cut-agent.out"))"
# a cut at rest after a run that numbered batches and stopped cleanly: those numbers must stay used
for n in 7 8; do keep_put $n a; done
start_pc_agent
until_drained "2 files written after the first cut"
kill -TERM "$APID"
wait "$APID" || fail "the agent exited non-zero on SIGTERM"
cut_agent
keep_put 9 b
start_pc_agent
until_drained "a file written after the second cut"
kill -TERM "$APID"
wait "$APID" || fail "the agent exited non-zero on SIGTERM"
dupacks=$(grep -c 'device dev2 batch .* was landed before' "$T/receiver.log" || true)
[ "$dupacks" = 0 ] || fail "$dupacks batches of dev2 were acknowledged as landed before (a batch number reused after a cut?)"
landed=$(find "$(landed_root dev2)/edge" -type f | wc -l)
[ "$landed" = 9 ] || fail "$landed of 9 files landed for dev2"
for n in 1 2 3 4 5 6 7 8 9; do
    cmp -s "$T/keep/e$n" "$(find "$(landed_root dev2)/edge" -name "e$n")" || fail "e$n landed with other bytes"
done
[ "$(manifest_paths dev2 | sort | uniq -d | wc -l)" = 0 ] || fail "a path of dev2 was recorded twice"
pass "the edge: 2 more files, a cut at rest after a clean stop, and a ninth lands under a new batch id; 9 files, each recorded once ($(cat "$T/cut-agent.out"))"
# after_ship: move into directories an earlier run made and never synced (it died between its mkdir and
# the sync), move_dir and the one above it included: once the files are moved and their batch's record is gone, a cut keeps them there. The
# directory is on another filesystem than the agent's state_dir when there is one (tmpfs /dev/shm): the
# syncfs of that filesystem the agent makes at every start then does not cover it, and only the move's own
# syncs keep it (on one filesystem that syncfs would, and the case could not fail).
MV=""
if [ -d /dev/shm ] && [ -w /dev/shm ] && MV=$(mktemp -d /dev/shm/ingest-pc-mv.XXXXXX 2>/dev/null) &&
    [ "$(stat -c %d "$MV")" != "$(stat -c %d "$RT")" ]; then
    EXTRA_DIRS="$MV"; mvfs="on another filesystem"
else
    [ -n "$MV" ] && rmdir "$MV"; MV="$RT/moved"; mvfs="on the state_dir's filesystem (no other here)"
fi
MKDIR_APC=$(powercut_wrapper "$(command -v mkdir)" "$RT/pc-agent" "$RT/astate-dev2:$E:$MV")
# move_dir itself and the directory above it made under the layer too, as an agent that made a missing
# move_dir and died before its syncs leaves them
"$MKDIR_APC" -p "$MV/run/done/a" || fail "mkdir under the layer"
for n in 10 11; do keep_put $n a; done
sed -i "s|    after_ship: delete|    after_ship: move:$MV/run/done|" "$T/dev2.yaml"
grep -q "after_ship: move:$MV/run/done" "$T/dev2.yaml" || fail "could not set after_ship: move"
AGENT_PC=$(powercut_wrapper "$AGENT" "$RT/pc-agent" "$RT/astate-dev2:$E:$MV")
start_pc_agent
until_drained "2 files to move"
cut_agent
for n in 10 11; do
    cmp -s "$T/keep/e$n" "$MV/run/done/a/e$n" || fail "e$n moved into a directory left unsynced was lost in the cut: $(cat "$T/cut-agent.out")"
done
pass "the edge: files moved into directories an earlier run left unsynced, move_dir among them ($mvfs), stay there after a cut"

# ---- 4. a cut at every point where the receiver waits for durability ----
# Run k starts a receiver under the layer that is killed just before its
# k-th sync call (POWERCUT_CUT_AT_SYNC=k: at start-up, in the batch of new
# files it is landing, in its commit), the power is cut there, and the
# receiver is started again; the agent (--once, it journals its batches)
# ships again until it exits 0.  After each run every file shipped so far
# is in bronze once (one FILE record), byte-identical.  Runs go on until a
# receiver lands its batch before its k-th sync.  Twice: batches of 6 files
# (a sync per file and directory), then batches of 20 files in a new
# directory each (one syncfs before the renames and one after; the
# directory is staged and renamed into place whole: docs/landing.md, "New
# directories").
cut_every_sync() { # NAME FILES_PER_BATCH
    R4="$T/$1"
    mkdir -p "$R4"
    k=0
    cuts=0
    while :; do
        k=$((k + 1))
        [ $k -le 80 ] || fail "the receiver still had not landed a batch of $2 files before its 80th sync"
        mkdir -p "$R4/k$k"
        n=1
        while [ $n -le "$2" ]; do head -c $((2000 + n * 333 + k)) /dev/urandom > "$R4/k$k/f$n"; n=$((n + 1)); done
        stop_receiver
        RECEIVER=$(powercut_wrapper "$REAL_RECEIVER" "$RT/pc-recv4" "$RT/bronze:$RT/rstate")
        export POWERCUT_CUT_AT_SYNC=$k
        rm -f "$T/receiver.addr"
        "$RECEIVER" --config "$T/receiver.yaml" --ready-file "$T/receiver.addr" >> "$T/receiver.log" 2>&1 &
        RECV_PID=$!
        unset POWERCUT_CUT_AT_SYNC
        while [ ! -s "$T/receiver.addr" ] && kill -0 "$RECV_PID" 2>/dev/null; do sleep 0.02; done
        survived=0
        if [ -s "$T/receiver.addr" ]; then
            write_agent_config dev1 "$R4" "batch:
  max_files: $2"
            "$AGENT" --config "$T/dev1.yaml" --once > "$T/dev1.out" 2> "$T/dev1.err" || true
            kill -0 "$RECV_PID" 2>/dev/null && survived=1
        fi
        kill -9 "$RECV_PID" 2>/dev/null || true
        wait "$RECV_PID" 2>/dev/null || true
        RECV_PID=""
        "$RESTORE" "$RT/pc-recv4" > "$T/cut4.out" 2>&1 || { cat "$T/cut4.out"; fail "$1 run $k: powercut-restore failed"; }
        [ $survived = 1 ] || cuts=$((cuts + 1))
        RECEIVER=$REAL_RECEIVER
        start_receiver
        write_agent_config dev1 "$R4" "batch:
  max_files: $2"
        ship dev1 > /dev/null
        same_tree "$R4" "$(landed_root dev1)/$1"
        dups=$(manifest_paths dev1 | sort | uniq -d | wc -l)
        [ "$dups" = 0 ] || fail "$1 run $k (power cut before the receiver's sync $k): $dups paths recorded twice"
        [ "$(count_tmp "$RT/bronze")" -eq 0 ] || fail "$1 run $k: temporary files or staged directories left"
        [ $survived = 1 ] && break
    done
    total=$(find "$R4" -type f | wc -l)
    pass "a cut before each of the receiver's first $((k - 1)) sync calls ($cuts cuts, landing $total files in batches of $2): every file landed once, byte-identical"
}
cut_every_sync src4 6
cut_every_sync src5 20

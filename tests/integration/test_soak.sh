#!/bin/sh
# The crash soak (issue 17): kill -9 of the agent daemon and of the receiver
# at random moments while a writer keeps adding files the whole time, so
# that kills find work in flight.  SOAK_AGENT_KILLS (default 12) and
# SOAK_RECEIVER_KILLS (default 3) kills; `make soak` runs 1,000 and 200.
#
# The writer puts each file (random bytes, 64 B..24 KiB) into a kept copy
# first, then into the source by rename from outside it, a few every 20-60 ms, in 16
# directories of a group, a new group every 48 files (so that kills also fall
# between the landing that makes a directory and its commit).  The daemon ships with after_ship: delete (so a file deleted
# before its ack was read would be lost), batches of 20 files at most.
# Every kill must find the killed program alive (exit status 137 or, for
# the receiver, death by SIGKILL): nothing else may have ended it.  A kill
# "found work in flight" when fewer files had landed than had been written.
#
# SOAK_POWER_CUTS (default 6; `make soak` 200) of the kills are simulated
# power cuts instead, split between the two sides: both programs run with
# the power-cut layer (tests/tools/powercut/, LD_PRELOAD), and a cut is
# kill -9 followed by powercut-restore, which undoes every write, truncate
# and name change of the killed side that no fsync, directory fsync or
# syncfs had made durable (the receiver: bronze and its state directory;
# the agent: its state directory; its deletions in the source are cut at a
# known moment in test_powercut.sh instead).  After a cut of the receiver, the files it had
# acknowledged must still be there: checked at the end like the others.
#
# At the end, with the writer stopped and everything shipped: every file
# written landed exactly once (one FILE record across all manifests) and
# byte-identical, the source is empty (each file deleted after its ack),
# and no temporary file is left in bronze.  The last line reports the kills,
# how many found work in flight, and the files lost, duplicated and corrupt
# (each must be 0).
. "$(dirname "$0")/lib.sh"
AKILLS=${SOAK_AGENT_KILLS:-12}
RKILLS=${SOAK_RECEIVER_KILLS:-3}
PCUTS=${SOAK_POWER_CUTS:-6}
setup_keys
write_receiver_config 'layout: "{device}/{path}"'
PCRESTORE="$BUILD/tools/powercut-restore"
RT=$(realpath "$T")
mkdir -p "$T/src/data" "$T/astate-dev1"
RECEIVER=$(powercut_wrapper "$RECEIVER" "$RT/pc-recv" "$RT/bronze:$RT/rstate")
# the agent's cuts cover its state directory only: a deletion in the source that a cut undoes comes back
# with a new ctime (the layer links the name back), which the agent rightly takes for a possible change, so
# the soak could not tell it from a real one; test_powercut.sh cuts at a known moment after the deletions
AGENT=$(powercut_wrapper "$AGENT" "$RT/pc-agent" "$RT/astate-dev1")
start_receiver
pin_receiver_port
S="$T/src/data"
K="$T/keep"
mkdir -p "$S" "$K"
write_agent_config dev1 "$S" 'batch:
  max_files: 20
  max_wait: 100ms
rescan_interval: 2s'
sed -i 's|^  - path: .*|&\n    settle: 100ms\n    after_ship: delete|' "$T/dev1.yaml"

# the writer: until $T/stop exists; the count of files written in $T/written
(
    n=0
    while [ ! -e "$T/stop" ]; do
        for j in 1 2 3; do
            n=$((n + 1))
            d=g$((n / 48))/d$((n % 16)) # new directories all along: kills fall between a mkdir and its commit
            mkdir -p "$K/$d" "$S/$d" "$T/stage"
            size=$(od -An -N2 -tu2 /dev/urandom | awk '{ print 64 + $1 % 24512 }')
            head -c "$size" /dev/urandom > "$K/$d/f$n"
            # written outside the source, then renamed in (same filesystem): a temporary name
            # inside the source would be shipped, and deleted, when the writer is slow to rename
            cp "$K/$d/f$n" "$T/stage/f$n"
            mv "$T/stage/f$n" "$S/$d/f$n"
        done
        echo "$n" > "$T/written.tmp" && mv "$T/written.tmp" "$T/written"
        sleep "$(od -An -N1 -tu1 /dev/urandom | awk '{ printf "0.0%02d", 20 + $1 % 40 }')"
    done
) &
WRITER=$!
AGENT_PID=""
trap 'touch "$T/stop"; kill "$WRITER" 2>/dev/null || true; [ -z "$AGENT_PID" ] || kill -9 "$AGENT_PID" 2>/dev/null || true; cleanup' EXIT

rnd_ms() { od -An -N2 -tu2 /dev/urandom | awk -v lo="$1" -v hi="$2" '{ print lo + $1 % (hi - lo) }'; }
start_agent() { "$AGENT" --config "$T/dev1.yaml" >> "$T/dev1.out" 2>> "$T/dev1.err" & AGENT_PID=$!; }
landed_count() { find "$(landed_root dev1)/data" -type f ! -path '*.ingest-tmp-*' 2>/dev/null | wc -l; }
written() { cat "$T/written" 2>/dev/null || echo 0; }

start_agent
# power_cut DIR LOG: undo what the killed side had not made durable; count the cuts that lost something
pc_lossy=0
power_cut() {
    "$PCRESTORE" "$1" >> "$2" 2>&1 || { tail -5 "$2"; fail "power cut $((pk + 1)): the undo log could not be applied"; }
    tail -1 "$2" | grep -q '^powercut: undid' || fail "power cut $((pk + 1)): the layer logged nothing ($(tail -1 "$2"))"
    tail -1 "$2" | grep -q '^powercut: undid 0 writes (0 bytes) and 0 name' || pc_lossy=$((pc_lossy + 1))
}
kill_receiver() {
    kill -9 "$RECV_PID" 2>/dev/null || true
    rc=0
    wait "$RECV_PID" 2>/dev/null || rc=$?
    [ "$rc" = 137 ] || { tail -20 "$T/receiver.log"; fail "receiver kill $((rk + pk + 1)): it had already exited with status $rc"; }
    RECV_PID=""
}
kill_agent() {
    kill -9 "$AGENT_PID" 2>/dev/null || true
    rc=0
    wait "$AGENT_PID" 2>/dev/null || rc=$?
    [ "$rc" = 137 ] || { tail -20 "$T/dev1.err"; fail "agent kill $((ak + pk + 1)): it had already exited with status $rc"; }
}
ak=0
rk=0
pk=0
pkr=0
inflight=0
while [ $ak -lt "$AKILLS" ] || [ $rk -lt "$RKILLS" ] || [ $pk -lt "$PCUTS" ]; do
    ms=$(rnd_ms 30 350)
    sleep "$(echo "$ms" | awk '{ printf "%.3f", $1 / 1000 }')"
    [ "$(landed_count)" -lt "$(written)" ] && inflight=$((inflight + 1))
    # what comes next, drawn in proportion to what remains of each kind
    rem_p=$((PCUTS - pk))
    rem_r=$((RKILLS - rk))
    rem_a=$((AKILLS - ak))
    x=$(rnd_ms 0 $((rem_p + rem_r + rem_a)))
    if [ "$x" -lt "$rem_p" ]; then
        if [ $((pk % 2)) = 0 ]; then # the power cuts alternate: the core, then the edge
            kill_receiver
            power_cut "$T/pc-recv" "$T/powercut-recv.log"
            pkr=$((pkr + 1))
            start_receiver
        else
            kill_agent
            power_cut "$T/pc-agent" "$T/powercut-agent.log"
            start_agent
        fi
        pk=$((pk + 1))
    elif [ "$x" -lt $((rem_p + rem_r)) ]; then
        kill_receiver
        rk=$((rk + 1))
        start_receiver
    else
        kill_agent
        ak=$((ak + 1))
        start_agent
    fi
done
touch "$T/stop"
wait "$WRITER" || true
n=$(written)
[ "$n" -gt 0 ] || fail "the writer wrote nothing"
# missing: what became of each written file that did not land (run when the soak fails, so that a rare
# failure says where the files went): its manifests, any name of it in bronze, the agent's and the
# receiver's lines naming it or the batches that held it, and the receiver's warnings
missing() {
    (cd "$K" && find . -type f | sed 's|^\./||' | sort) > "$T/written.list"
    (cd "$(landed_root dev1)/data" 2>/dev/null && find . -type f ! -path '*.ingest-tmp-*' | sed 's|^\./||' | sort) > "$T/landed.list" || true
    comm -23 "$T/written.list" "$T/landed.list" > "$T/missing.list"
    echo "missing ($(wc -l < "$T/missing.list")): $(tr '\n' ' ' < "$T/missing.list")"
    for f in $(head -5 "$T/missing.list"); do
        echo "-- data/$f: in manifests: $(grep -l "\"path\":\"data/$f\"" "$T/bronze/_manifests/dev1/"* 2>/dev/null | xargs -r -n1 basename | tr '\n' ' ')"
        echo "   in bronze: $(find "$T/bronze" -name "$(basename "$f")" -o -name "*$(basename "$f").ingest-tmp-*" | tr '\n' ' ')"
        grep -h -- "$f\b" "$T/dev1.err" "$T/receiver.log" | tail -5
    done
    echo "-- staged or temporary names left in bronze: $(find "$T/bronze" -name '*.ingest-tmp-*' | head -10 | tr '\n' ' ')"
    echo "-- receiver warnings and errors:"; grep -E '\[(warn|error)\]' "$T/receiver.log" | tail -15
    echo "-- agent warnings and errors:"; grep -E '\[(warn|error)\]' "$T/dev1.err" | tail -15
}
i=0
while [ "$(landed_count)" -lt "$n" ] || [ -n "$(find "$S" -type f)" ]; do
    i=$((i + 1))
    [ $i -gt 2400 ] && { tail -30 "$T/dev1.err"; missing; fail "only $(landed_count) of $n files landed; $(find "$S" -type f | wc -l) still in the source"; }
    sleep 0.05
done
kill -TERM "$AGENT_PID"
rc=0; wait "$AGENT_PID" || rc=$?
[ "$rc" = 0 ] || { tail -20 "$T/dev1.err"; fail "the agent exited $rc on SIGTERM"; }
landed=$(landed_count)
lost=$((n - landed))
[ "$lost" -ge 0 ] || lost=0
(cd "$K" && find . -type f | sort | xargs -r sha256sum) > "$T/keep.sums"
corrupt=$(cd "$(landed_root dev1)/data" && sha256sum -c --quiet "$T/keep.sums" 2>/dev/null | wc -l)
dups=$(manifest_paths dev1 | sort | uniq -d | wc -l)
recs=$(manifest_paths dev1 | wc -l)
tmp=$(count_tmp "$T/bronze")
echo "soak: $ak agent kills, $rk receiver kills and $pk power cuts ($pkr of the receiver, $((pk - pkr)) of the agent; $pc_lossy lost unsynced changes), $inflight of them with work in flight; $n files written, $landed landed: lost=$lost duplicated=$dups corrupt=$corrupt (FILE records: $recs; temporary files left: $tmp)"
[ "$lost" = 0 ] && [ "$dups" = 0 ] && [ "$corrupt" = 0 ] && [ "$recs" = "$n" ] && [ "$tmp" = 0 ] ||
    { missing; fail "files lost, duplicated or corrupt"; }
[ "$inflight" -gt 0 ] || fail "no kill found work in flight"
# the stores after the cuts: the index agrees with the manifests; every landed file with its manifest
"$CTL" index check "$T/rstate" --bronze "$T/bronze" > "$T/index-check.out" 2>&1 ||
    { cat "$T/index-check.out"; fail "the receiver's index disagrees with the manifests"; }
"$CTL" verify --config "$T/receiver.yaml" > "$T/verify.out" 2>&1 ||
    { tail -20 "$T/verify.out"; fail "ingestctl verify found landed files that differ from their manifests"; }
pass "$ak agent kills, $rk receiver kills and $pk power cuts ($inflight with work in flight): $n files landed exactly once, byte-identical, none lost"

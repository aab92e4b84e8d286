#!/bin/sh
# A deep directory tree (800 levels, a 1.6 KB path) under a source:
#   - the daemon starts and survives it (watches are set up without
#     recursion); files within the depth limit (64 levels below the source)
#     land, deeper ones do not, and the one too-deep directory is said once
#     in the log however many walks pass;
#   - a second such tree moved into the running source: the daemon stays
#     up, its files within the limit land, a file written later lands, and
#     the new too-deep directory is said once too;
#   - a restart with both trees in place starts and stops cleanly.
. "$(dirname "$0")/lib.sh"
setup_keys
write_receiver_config 'layout: "{device}/{path}"'
start_receiver
S="$T/src/data"
mkdir -p "$S"
# deep_tree DIR: DIR/d/d/.../d, 800 levels below DIR (DIR itself is level 1 below
# the source), with a file fL.txt in the directories at levels L = 2, 64, 65 and 801
deep_tree() {
    p=$1; k=0; mkdir -p "$p"
    while [ $k -lt 800 ]; do
        p=$p/d; k=$((k + 1))
        mkdir "$p"
        case $((k + 1)) in 2 | 64 | 65 | 801) echo "level $((k + 1))" > "$p/f$((k + 1)).txt" ;; esac
    done
}
deep_tree "$S/t1"
D64=$(printf 'd/%.0s' $(seq 1 62))d   # t1/$D64 is 64 levels below the source: the deepest directory walked
echo top > "$S/top.txt"
write_agent_config dev1 "$S" 'batch:
  max_wait: 200ms
rescan_interval: 300ms'
sed -i 's|^  - path: .*|&\n    settle: 100ms|' "$T/dev1.yaml"
"$AGENT" --config "$T/dev1.yaml" > "$T/dev1.out" 2> "$T/dev1.err" &
AGENT_PID=$!
R="$(landed_root dev1)/data"
wait_landed() {
    i=0
    while [ ! -f "$R/$1" ] || ! cmp -s "$S/$1" "$R/$1"; do
        i=$((i + 1))
        kill -0 $AGENT_PID 2>/dev/null || { tail -20 "$T/dev1.err"; fail "the agent died (waiting for $1)"; }
        [ $i -gt 400 ] && { tail -20 "$T/dev1.err"; fail "$(echo "$1" | cut -c1-60)... did not land"; }
        sleep 0.05
    done
}
wait_landed top.txt
wait_landed t1/d/f2.txt
wait_landed "t1/$D64/f64.txt"
sleep 1.5   # several rescans
kill -0 $AGENT_PID 2>/dev/null || { tail -20 "$T/dev1.err"; fail "the agent died"; }
[ ! -e "$R/t1/$D64/d/f65.txt" ] || fail "a file in a directory 65 levels deep landed"
n=$(find "$R" -name 'f*.txt' | wc -l)
[ "$n" = 2 ] || fail "$n level files landed, expected 2"
m=$(grep -c "levels below its source" "$T/dev1.err" || true)
[ "$m" = 1 ] || { grep "levels below" "$T/dev1.err" | cut -c1-200; fail "the too-deep directory was said $m times, expected once"; }
grep "levels below its source" "$T/dev1.err" | grep -q "data/t1/$D64/d:" ||
    { grep "levels below" "$T/dev1.err" | cut -c1-300; fail "the message does not name the directory at level 65"; }
pass "an 800-level tree: the agent is up, files down to level 64 land, the level-65 directory is said once"

deep_tree "$T/src/t2"
mv "$T/src/t2" "$S/t2"
wait_landed t2/d/f2.txt
wait_landed "t2/$D64/f64.txt"
# a directory made inside the moved tree is watched: its file lands at once
mkdir "$S/t2/d/d/new"
echo new > "$S/t2/d/d/new/n.txt"
wait_landed t2/d/d/new/n.txt
echo later > "$S/later.txt"
wait_landed later.txt
sleep 1
kill -0 $AGENT_PID 2>/dev/null || { tail -20 "$T/dev1.err"; fail "the agent died"; }
m=$(grep -c "levels below its source" "$T/dev1.err" || true)
[ "$m" = 2 ] || { grep "levels below" "$T/dev1.err" | cut -c1-200; fail "too-deep directories said $m times, expected 2"; }
pass "an 800-level tree moved into the running source: the agent stays up, its files within the limit land"

kill -TERM $AGENT_PID
rc=0; wait $AGENT_PID || rc=$?
[ "$rc" = 0 ] || { tail -20 "$T/dev1.err"; fail "agent exited $rc"; }
"$AGENT" --config "$T/dev1.yaml" > "$T/dev1.out" 2> "$T/dev1.err" &
AGENT_PID=$!
echo again > "$S/again.txt"
wait_landed again.txt
kill -TERM $AGENT_PID
rc=0; wait $AGENT_PID || rc=$?
[ "$rc" = 0 ] || { tail -20 "$T/dev1.err"; fail "agent exited $rc after a restart"; }
[ "$(find "$R" -name 'f*.txt' | wc -l)" = 4 ] || fail "files deeper than the limit landed"
pass "a restart with both trees: up, ships, exit 0"

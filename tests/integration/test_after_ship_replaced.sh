#!/bin/sh
# after_ship acts on the inode it checked, not on whatever is at the path
# by then.  A writer that replaces a file by rename (writes a new file and
# renames it over the old one, as status files are written) in the moment
# between the agent's checks and its deletion or move keeps its new file,
# which ships in its turn:
#   1. after_ship: delete, and 2. after_ship: move:DIR: the layer
#      tests/tools/fsfault holds the agent's first removal of v.txt for 3 s,
#      and the test renames version 2 over it meanwhile; version 2 must stay,
#      land, and only then go;
#   3. an agent killed (-9) after it took an acked file under its claim name
#      (.ingest-after.INODE beside it) and before it deleted it: the restarted
#      agent finds the file under that name and deletes it; nothing lands
#      under the claim name;
#   4. a move that fails after the claim waits under the claim name and is
#      done on a later try, the file shipped once;
#   5. and when the source is set to keep its files meanwhile, the file goes
#      back to its name.
. "$(dirname "$0")/lib.sh"
FSFAULT="$BUILD/tools/fsfault.so"
[ -f "$FSFAULT" ] || fail "$FSFAULT is not built (make tests)"
# a sanitizer build's run-time need not come first: the layer only wraps a few calls
ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0"
export ASAN_OPTIONS
AGENT_PID=""
trap 'if [ -n "${AGENT_PID:-}" ]; then kill "$AGENT_PID" 2>/dev/null || true; fi; cleanup' EXIT # (a failed check leaves no daemon behind)
setup_keys
write_receiver_config 'layout: "{device}/{path}"'
start_receiver
S="$T/src/data"
mkdir -p "$S" "$T/moved"
write_agent_config dev1 "$S" 'batch:
  max_files: 10
  max_wait: 200ms
rescan_interval: 1s'
cp "$T/dev1.yaml" "$T/dev1.base.yaml"
L="$(landed_root dev1)/data"

start_agent() { # [env assignments for the layer]
    env "$@" "$AGENT" --config "$T/dev1.yaml" > "$T/dev1.out" 2> "$T/dev1.err" &
    AGENT_PID=$!
}
stop_agent() {
    kill "${1:-TERM}" "$AGENT_PID" 2>/dev/null || kill "$AGENT_PID" 2>/dev/null || true
    wait "$AGENT_PID" 2>/dev/null || true
    AGENT_PID=""
}
wait_for() { # FILE: until it exists
    i=0
    while [ ! -e "$1" ]; do
        i=$((i + 1)); [ $i -gt 400 ] && { cat "$T/dev1.err"; fail "$1 never came"; }
        sleep 0.05
    done
}
wait_gone() { # FILE: until it is gone
    i=0
    while [ -e "$1" ]; do
        i=$((i + 1)); [ $i -gt 400 ] && { cat "$T/dev1.err"; fail "$1 was not shipped and acted on"; }
        sleep 0.05
    done
}
agent_says() { # PATTERN WHAT: until the agent's log has PATTERN
    i=0
    until grep -q "$1" "$T/dev1.err"; do
        i=$((i + 1)); [ $i -gt 400 ] && { cat "$T/dev1.err"; fail "$2"; }
        sleep 0.05
    done
}
no_claims() { # DIR: no file of the agent's claim names is left there
    [ -z "$(find "$1" -name '.ingest-after.*' | head -1)" ] || { ls -la "$1"; fail "a claimed file was left in $1"; }
}

# replace_during ACTION WHERE: version 1 ships; while the agent is held in its removal of v.txt, version 2 is
# renamed over it; at the end version 2 is landed and at WHERE (gone for delete, the move directory for move)
replace_during() {
    rm -f "$T/mark" "$T/fault.log"
    printf 'version 1 of %s\n' "$1" > "$S/v.txt"
    start_agent LD_PRELOAD="$FSFAULT" FSFAULT_SLOW_NAME=v.txt FSFAULT_SLOW_MS=3000 FSFAULT_SLOW_MARK="$T/mark" FSFAULT_LOG="$T/fault.log"
    wait_for "$T/mark"
    printf 'version 2 of %s, never shipped yet\n' "$1" > "$T/src/v.new"
    mv "$T/src/v.new" "$S/v.txt" # the writer's atomic replace, in the agent's moment
    printf 'version 2 of %s, never shipped yet\n' "$1" > "$T/v2.expect"
    # version 2 settles, ships, and then goes in its turn
    i=0
    until cmp -s "$T/v2.expect" "$L/v.txt" && [ ! -e "$S/v.txt" ]; do
        i=$((i + 1)); [ $i -gt 400 ] && { cat "$T/dev1.err"; ls -la "$S" "$L"; fail "$1: version 2 did not land and go"; }
        sleep 0.05
    done
    no_claims "$S"
    stop_agent
    grep -q "renameat2 .*v.txt" "$T/fault.log" || fail "$1: the layer did not hold the agent's claim of v.txt"
}

# 1. delete
sed -i 's|^  - path: .*|&\n    settle: 100ms\n    after_ship: delete|' "$T/dev1.yaml"
replace_during delete
[ "$(grep -c '"path":"data/v.txt"' "$T"/bronze/_manifests/dev1/*.jsonl | awk -F: '{ s += $2 } END { print s }')" = 2 ] ||
    fail "delete: v.txt did not land twice (version 1, then version 2)"
pass "after_ship: delete of a file replaced by rename in the agent's moment: the new version stays, lands, then goes"

# 2. move
cp "$T/dev1.base.yaml" "$T/dev1.yaml"
sed -i "s|^  - path: .*|&\n    settle: 100ms\n    after_ship: move:$T/moved|" "$T/dev1.yaml"
replace_during move
cmp -s "$T/v2.expect" "$T/moved/v.txt" || { ls -la "$T/moved"; fail "move: the move directory does not hold version 2"; }
pass "after_ship: move of a file replaced by rename in the agent's moment: the new version stays, lands, then moves"

# 3. killed between the claim and the deletion
cp "$T/dev1.base.yaml" "$T/dev1.yaml"
sed -i 's|^  - path: .*|&\n    settle: 100ms\n    after_ship: delete|' "$T/dev1.yaml"
rm -f "$T/mark"
gen_log "$S/w.log" 30000 3
cp "$S/w.log" "$T/w.expect"
start_agent LD_PRELOAD="$FSFAULT" FSFAULT_SLOW_NAME='.ingest-after.*' FSFAULT_SLOW_MS=20000 FSFAULT_SLOW_MARK="$T/mark"
wait_for "$T/mark"
stop_agent -KILL
[ ! -e "$S/w.log" ] || fail "w.log is still at its name while the agent deleted it under its claim name"
[ -n "$(find "$S" -name '.ingest-after.*')" ] || fail "the killed agent left no claimed file"
start_agent
i=0
while [ -n "$(find "$S" -name '.ingest-after.*')" ]; do
    i=$((i + 1)); [ $i -gt 400 ] && { cat "$T/dev1.err"; fail "the restarted agent did not finish the deletion"; }
    sleep 0.05
done
sleep 1.5 # a walk (every 1 s) that took the claimed file for a new one would ship it now
stop_agent
cmp -s "$T/w.expect" "$L/w.log" || fail "w.log did not land"
[ -z "$(find "$T/bronze" -name ".ingest-after.*")" ] || { cat "$T/dev1.err"; fail "a claimed file landed under its claim name"; }
no_claims "$S"
pass "an agent killed between the claim and the deletion: the restarted one deletes the claimed file, nothing else lands"

# 4. a move that fails once the file was taken aside (a directory stands at its destination name): the file
#    waits under its claim name, is not shipped again, and moves once the obstacle is gone
cp "$T/dev1.base.yaml" "$T/dev1.yaml"
sed -i "s|^  - path: .*|&\n    settle: 100ms\n    after_ship: move:$T/moved|" "$T/dev1.yaml"
gen_log "$S/m.log" 20000 4
cp "$S/m.log" "$T/m.expect"
mkdir -p "$T/moved/m.log/in-the-way"
start_agent
agent_says "after_ship move .*m.log -> .*: Is a directory; tried again later" "the move of m.log did not fail"
[ -n "$(find "$S" -name '.ingest-after.*')" ] || { ls -la "$S"; fail "m.log is not under its claim name after its move failed"; }
sleep 1.5 # retries fail meanwhile; a walk must not take the claimed file for a new one
rm -r "$T/moved/m.log"
i=0
until cmp -s "$T/m.expect" "$T/moved/m.log"; do
    i=$((i + 1)); [ $i -gt 600 ] && { cat "$T/dev1.err"; fail "m.log was not moved once it could be"; }
    sleep 0.05
done
stop_agent
no_claims "$S"
[ -z "$(find "$T/bronze" -name '.ingest-after.*')" ] || fail "a claimed file landed under its claim name"
[ "$(grep -c '"path":"data/m.log"' "$T"/bronze/_manifests/dev1/*.jsonl | awk -F: '{ s += $2 } END { print s }')" = 1 ] ||
    fail "m.log was shipped more than once"
pass "a move that failed after the claim: the file waited under its claim name and moved once it could, shipped once"

# 5. the same failed move, then the source set to keep its files (the agent restarted with after_ship:
#    keep): the file goes back to its name, where the operator expects it (nothing else would bring it back)
cp "$T/dev1.base.yaml" "$T/dev1.yaml"
sed -i "s|^  - path: .*|&\n    settle: 100ms\n    after_ship: move:$T/moved|" "$T/dev1.yaml"
gen_log "$S/k.log" 20000 5
cp "$S/k.log" "$T/k.expect"
mkdir -p "$T/moved/k.log/in-the-way"
: > "$T/dev1.err"
start_agent
agent_says "after_ship move .*k.log -> .*: Is a directory; tried again later" "the move of k.log did not fail"
stop_agent
[ ! -e "$S/k.log" ] && [ -n "$(find "$S" -name '.ingest-after.*')" ] || { ls -la "$S"; fail "k.log is not under its claim name"; }
cp "$T/dev1.base.yaml" "$T/dev1.yaml"
sed -i 's|^  - path: .*|&\n    settle: 100ms\n    after_ship: keep|' "$T/dev1.yaml"
start_agent
i=0
until cmp -s "$T/k.expect" "$S/k.log"; do
    i=$((i + 1)); [ $i -gt 400 ] && { cat "$T/dev1.err"; ls -la "$S"; fail "k.log was not put back once its source keeps its files"; }
    sleep 0.05
done
sleep 1.5 # (its record went while it was away: a walk may ship it once more, its chunks known)
stop_agent
no_claims "$S"
grep -q "k.log put back from" "$T/dev1.err" || fail "the agent did not say it put k.log back"
cmp -s "$T/k.expect" "$L/k.log" || fail "k.log is not landed byte-identical"
rm -r "$T/moved/k.log"
pass "a move that failed after the claim, then after_ship: keep: the file is put back under its name"

#!/bin/sh
# A directory of a source swapped for a symlink to a tree outside it, after
# an event named a file in it and before that file was taken: the daemon
# looks the path up from the source without following a symlink on the way
# (docs/sending.md), so the file of the same name outside is neither
# shipped nor acted on by after_ship: delete.  Before, the path was
# resolved whole: the outside file landed in bronze under src/d/notes.txt
# and was deleted from outside the source.
. "$(dirname "$0")/lib.sh"
setup_keys
write_receiver_config 'layout: "{device}/{path}"'
start_receiver
S="$T/src/data"
mkdir -p "$S" "$T/secret"
printf 'SECRET outside the source\n' > "$T/secret/notes.txt"
write_agent_config dev1 "$S" 'batch:
  max_wait: 200ms
rescan_interval: 1h'
sed -i "s|^  - path: .*|&\n    settle: 1s\n    after_ship: delete|" "$T/dev1.yaml"
start_daemon dev1
mkdir "$S/d"
sleep 0.3 # (its watch is made)
printf 'ordinary\n' > "$S/d/notes.txt" # an event names data/d/notes.txt; it settles for 1 s
rm -r "$S/d" # (no event the daemon watches: the path named is looked at when it settled)
ln -s "$T/secret" "$S/d"
# a file written after, beside it: its batch shows the daemon went past the swapped path
printf 'after\n' > "$S/after.txt"
i=0
while [ ! -f "$T/bronze/dev1/data/after.txt" ]; do
    i=$((i + 1)); [ $i -gt 400 ] && { cat "$T/dev1.err"; fail "after.txt did not land"; }
    sleep 0.05
done
sleep 1.5 # (the swapped path's settle has passed: it was looked at)
grep -q "data/d/notes.txt" "$T/dev1.err" || { cat "$T/dev1.err"; fail "the swapped path was not said"; }
[ ! -e "$T/bronze/dev1/data/d/notes.txt" ] || fail "a file reached through a symlink landed: $(cat "$T/bronze/dev1/data/d/notes.txt")"
[ -f "$T/secret/notes.txt" ] || fail "the file outside the source was deleted by after_ship"
kill "$DAEMON_PID"
wait "$DAEMON_PID" 2>/dev/null || true
pass "a directory swapped for a symlink out of the source: the file beyond it neither ships nor is deleted"

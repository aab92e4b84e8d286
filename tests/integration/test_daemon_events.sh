#!/bin/sh
# An event looks at the file it names, not at every source (issue 18 item
# 4): with 2,000 files watched, a log appended every 100 ms for 4 s (open,
# write, close, as `echo >> log` does) costs no walk of the sources at all
# (before, each close_write scheduled a walk of everything: about one every
# 200 ms), the appends are looked at alone, and the log lands, whole, once
# it has settled.  A file a later event names in a new directory lands too.
. "$(dirname "$0")/lib.sh"
command -v python3 >/dev/null 2>&1 || { pass "skipped: python3 is needed to read the JSON"; exit 0; }
setup_keys
write_receiver_config 'layout: "{device}/{path}"'
start_receiver
S="$T/src/data"
mkdir -p "$S/d0" "$S/d1" "$S/d2" "$S/d3"
gen_log "$T/blob" 100000 7
for k in 0 1 2 3; do (cd "$S/d$k" && split -a 3 -n 500 "$T/blob" "f$k."); done
rm "$T/blob"
write_agent_config dev1 "$S" 'batch:
  max_wait: 200ms
rescan_interval: 1h'
sed -i 's|^  - path: .*|&\n    settle: 500ms|' "$T/dev1.yaml"
SOCK="$T/astate-dev1/agent.sock"
"$AGENT" --config "$T/dev1.yaml" > "$T/dev1.out" 2> "$T/dev1.err" &
AGENT_PID=$!
landed() { find "$(landed_root dev1)/data" -type f 2>/dev/null | wc -l; }
i=0
while [ "$(landed)" -lt 2000 ]; do
    i=$((i + 1)); [ $i -gt 1200 ] && { tail -20 "$T/dev1.err"; fail "only $(landed) of 2000 files landed"; }
    sleep 0.05
done
sleep 1 # the last files settle and the walks they asked for are over
status_json || fail "no status"
w0=$(jget walks.count)
p0=$(jget walks.of_changed_files)
n=0
while [ $n -lt 40 ]; do
    printf 'line %d\n' $n >> "$S/d0/app.log"
    n=$((n + 1))
    sleep 0.1
done
i=0
while [ ! -f "$(landed_root dev1)/data/d0/app.log" ] || [ "$(wc -l < "$(landed_root dev1)/data/d0/app.log")" -lt 40 ]; do
    i=$((i + 1)); [ $i -gt 200 ] && { tail -20 "$T/dev1.err"; fail "the appended log did not land whole"; }
    sleep 0.05
done
status_json || fail "no status"
w1=$(jget walks.count)
p1=$(jget walks.of_changed_files)
[ "$w1" -eq "$w0" ] || fail "40 appends caused $((w1 - w0)) walks of every source (expected none)"
[ "$p1" -gt "$p0" ] || fail "the appends were not looked at alone ($p0 -> $p1)"
cmp "$S/d0/app.log" "$(landed_root dev1)/data/d0/app.log" || fail "the landed log differs"
pass "40 appends in 4 s to one of 2,000 files: no walk of the sources, $((p1 - p0)) looks at the file alone, it landed whole"

# a new directory (a walk of everything: its watch and its files) and a file named by an event in it
mkdir "$S/d9"
printf 'new\n' > "$S/d9/new.txt"
sleep 0.3
printf 'later\n' > "$S/d9/later.txt"
i=0
while [ ! -f "$(landed_root dev1)/data/d9/later.txt" ] || [ ! -f "$(landed_root dev1)/data/d9/new.txt" ]; do
    i=$((i + 1)); [ $i -gt 200 ] && { tail -20 "$T/dev1.err"; fail "the files of a new directory did not land"; }
    sleep 0.05
done
pass "a new directory's files land (its watch from the walk, a later file from its own event)"

# a watched directory renamed (its watches, and its subdirectory's, stay: inotify follows the inode): a file
# written there after the walk the rename asked for lands from its own event, under the new name (the
# events named the old one, the file was dropped as vanished, and it waited for the rescan an hour later)
mkdir "$S/d9/sub"
printf 'one\n' > "$S/d9/sub/a.txt"
i=0
while [ ! -f "$(landed_root dev1)/data/d9/sub/a.txt" ]; do
    i=$((i + 1)); [ $i -gt 200 ] && { tail -20 "$T/dev1.err"; fail "d9/sub/a.txt did not land"; }
    sleep 0.05
done
mv "$S/d9" "$S/d8"
sleep 1.5 # the walk the rename asked for is over
printf 'two\n' > "$S/d8/sub/b.txt"
printf 'three\n' > "$S/d8/c.txt"
i=0
while [ ! -f "$(landed_root dev1)/data/d8/sub/b.txt" ] || [ ! -f "$(landed_root dev1)/data/d8/c.txt" ]; do
    i=$((i + 1)); [ $i -gt 200 ] && { tail -20 "$T/dev1.err"; fail "files written in a renamed directory did not land from their events"; }
    sleep 0.05
done
kill -TERM $AGENT_PID
rc=0; wait $AGENT_PID || rc=$?
[ "$rc" = 0 ] || fail "agent exited $rc on SIGTERM"
pass "files written in a renamed directory (and its subdirectory) land from their own events"

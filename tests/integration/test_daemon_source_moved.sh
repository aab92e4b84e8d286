#!/bin/sh
# Watching a source whose path is not a plain directory that stays put
# (rescans every hour here: only inotify can tell within the test):
#   - a source path that is a symlink to a directory (walks follow it) is
#     watched too: a file written there ships at once (it was not watched,
#     without a word: "0 directories watched");
#   - a source directory renamed away and a new one made in its place: the
#     new one is watched, its files ship at once, and a file written in the
#     renamed one does not ship (the watches stayed on the old directory);
#   - a source symlink pointed at another directory (ln -sfn): that one is
#     watched within a second or so (a stat per source a second).
. "$(dirname "$0")/lib.sh"
setup_keys
write_receiver_config 'layout: "{device}/{path}"'
start_receiver
mkdir -p "$T/real/sub" "$T/src/plain"
ln -s "$T/real" "$T/src/data"
S="$T/src/data"
P="$T/src/plain"
write_agent_config dev1 "$S" 'batch:
  max_wait: 100ms
rescan_interval: 1h'
sed -i "s|^  - path: .*|&\n    settle: 100ms\n  - path: $P\n    settle: 100ms|" "$T/dev1.yaml"
"$AGENT" --config "$T/dev1.yaml" > "$T/dev1.out" 2> "$T/dev1.err" &
AGENT_PID=$!
trap 'kill "$AGENT_PID" 2>/dev/null || true; wait "$AGENT_PID" 2>/dev/null || true; cleanup' EXIT
i=0
until grep -q "running: 2 sources" "$T/dev1.err"; do
    i=$((i + 1)); [ $i -gt 200 ] && { cat "$T/dev1.err"; fail "the daemon did not start"; }
    sleep 0.05
done
grep -q "running: 2 sources, 3 directories watched" "$T/dev1.err" ||
    { cat "$T/dev1.err"; fail "the source behind a symlink and its subdirectory are not both watched"; }
# lands DIR FILE WHY: DIR/FILE (DIR a source) lands within 10 s
lands() {
    i=0
    until cmp -s "$1/$2" "$(landed_root dev1)/$(basename "$1")/$2"; do
        i=$((i + 1)); [ $i -gt 200 ] && { cat "$T/dev1.err"; fail "$2 did not land ($3)"; }
        sleep 0.05
    done
}
gen_log "$S/sub/a.log" 3000 1
lands "$S" sub/a.log "a source behind a symlink"
pass "a source whose path is a symlink to a directory is watched: a file written there ships at once"

mv "$P" "$T/plain.old"
mkdir -p "$P"
sleep 0.5 # the move is seen and the new directory watched
gen_log "$P/b.log" 3000 2
lands "$P" b.log "the directory made in place of the one renamed away"
gen_log "$T/plain.old/stale.log" 3000 3
sleep 1.5
[ ! -e "$(landed_root dev1)/plain/stale.log" ] || fail "a file of the directory renamed away shipped as the source's"
gen_log "$P/c.log" 2000 4
lands "$P" c.log "a second file in the new directory"
# the same behind the symlink: the directory it points to renamed away, another made
mv "$T/real" "$T/real.old"
mkdir -p "$T/real"
sleep 0.5
gen_log "$S/d.log" 2000 5
lands "$S" d.log "the directory made where the symlink points, in place of the one renamed away"
pass "a source directory renamed away and made again (plain, or behind a symlink): the new one is watched, the old one no longer"

# the symlink pointed elsewhere: no event tells of it, the once-a-second look does
mkdir -p "$T/other"
ln -sfn "$T/other" "$T/src/data"
sleep 1.5
gen_log "$S/e.log" 2000 6
lands "$S" e.log "the directory the source symlink points to now"
pass "a source symlink pointed at another directory: that one is watched"

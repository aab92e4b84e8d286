#!/bin/sh
# after_ship: move:DIR with DIR on another filesystem than the source (a
# tmpfs under /dev/shm; the sources are under /tmp): rename(2) fails with
# EXDEV there, so the agent copies each acknowledged file durably and then
# unlinks it.  Every file ends up in DIR byte-identical with its mode and
# mtime, the source is emptied, no temporary file is left, and the log has
# no warning.  Then the directory files were moved into is removed by hand
# between two moves: the next file into it is moved all the same (the
# directory made again), not left in the source with a warning.
. "$(dirname "$0")/lib.sh"
SHM=$(mktemp -d /dev/shm/ingest-it.XXXXXX 2>/dev/null) || { echo "skip: cannot make a directory under /dev/shm"; exit 0; }
trap 'rm -rf "$SHM"; cleanup' EXIT
[ "$(stat -c %d "$SHM")" != "$(stat -c %d "$T")" ] || { echo "skip: /dev/shm is on the same filesystem as $T"; exit 0; }
setup_keys
write_receiver_config 'layout: "{device}/{path}"'
start_receiver
S="$T/src/data"
K="$T/keep"
mkdir -p "$S/sub" "$K"
for i in $(seq 1 12); do gen_log "$S/f$i.log" $((i * 3000)) "$i"; done
head -c 600000 /dev/urandom > "$S/sub/big.bin"
chmod 0600 "$S/f3.log"
touch -d '2020-02-02 02:02:02' "$S/f5.log"
cp -a "$S/." "$K/"
write_agent_config dev1 "$S" 'batch:
  max_wait: 200ms'
sed -i "s|^  - path: .*|&\n    settle: 200ms\n    after_ship: move:$SHM/moved|" "$T/dev1.yaml"
"$AGENT" --config "$T/dev1.yaml" > "$T/dev1.out" 2> "$T/dev1.err" &
APID=$!
i=0
while [ "$(find "$S" -type f | wc -l)" != 0 ]; do
    i=$((i + 1)); [ $i -gt 400 ] && { kill "$APID"; cat "$T/dev1.err"; fail "not every file was moved"; }
    sleep 0.05
done
kill "$APID"; wait "$APID" || fail "the agent did not stop cleanly"
same_tree "$K" "$(landed_root dev1)/data"
same_tree "$K" "$SHM/moved"
[ "$(stat -c %a "$SHM/moved/f3.log")" = 600 ] || fail "mode not kept: $(stat -c %a "$SHM/moved/f3.log")"
[ "$(stat -c %Y "$SHM/moved/f5.log")" = "$(stat -c %Y "$K/f5.log")" ] || fail "mtime not kept"
[ -z "$(find "$SHM" -name '*.ingest-move.*')" ] || fail "temporary files left: $(find "$SHM" -name '*.ingest-move.*')"
grep -q 'moved=13 ' "$T/dev1.out" || { cat "$T/dev1.out"; fail "the summary does not count 13 moves"; }
grep -E '\[(warn|error)\]' "$T/dev1.err" && fail "warnings in the agent's log"
pass "13 files moved across filesystems (EXDEV): byte-identical, mode and mtime kept, nothing left behind"

# the directory moved into, removed by hand between two moves into it (the agent knew it as made)
"$AGENT" --config "$T/dev1.yaml" >> "$T/dev1.out" 2> "$T/dev1b.err" &
APID=$!
# moved_all N: until the source is empty and N files are under $SHM/moved/again
moved_all() {
    i=0
    while [ "$(find "$S" -type f | wc -l)" != 0 ] || [ "$(find "$SHM/moved/again" -type f 2>/dev/null | wc -l)" != "$1" ]; do
        i=$((i + 1)); [ $i -gt 400 ] && { kill "$APID"; cat "$T/dev1b.err"; fail "$1 files were not moved into again/"; }
        sleep 0.05
    done
}
mkdir -p "$S/again"
gen_log "$S/again/a1.log" 4000 41
moved_all 1
rm -rf "$SHM/moved/again"
gen_log "$S/again/a2.log" 4000 42
moved_all 1
kill "$APID"; wait "$APID" || fail "the agent did not stop cleanly"
[ -f "$SHM/moved/again/a2.log" ] || fail "a2.log is not in the directory made again"
grep -E '\[(warn|error)\]' "$T/dev1b.err" && fail "warnings in the agent's log"
pass "a directory moved into, removed by hand, is made again for the next file"

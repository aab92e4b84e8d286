#!/bin/sh
# What real gateway trees hold lands like anything else:
#   - a file under a ~3,000-byte path (15 directories of 200 bytes) lands
#     with the 100 ordinary files of its batch, byte-identical, and counts
#     up versions like any other (its landed path is past LMDB's key bound);
#   - the index rebuilt from those manifests finds every file, and a re-ship
#     of the unchanged tree sends no chunk data.
. "$(dirname "$0")/lib.sh"
setup_keys
write_receiver_config 'layout: "{device}/{path}"'
start_receiver
S="$T/src/odd"
mkdir -p "$S"
i=0
while [ $i -lt 100 ]; do printf 'ordinary file %d\n' $i > "$S/f$i.txt"; i=$((i + 1)); done
seg=$(printf '%0200d' 0 | tr 0 d)
long="$S"
i=0
while [ $i -lt 15 ]; do long="$long/$seg$i"; i=$((i + 1)); done
mkdir -p "$long"
printf 'deep data\n' > "$long/x.txt"
rel=${long#"$S"/}
[ ${#rel} -gt 3000 ] || fail "the long path is only ${#rel} bytes"
write_agent_config dev1 "$S"
ship dev1
[ "$(field dev1 files)" -eq 101 ] || fail "shipped $(field dev1 files) files, expected 101"
same_tree "$S" "$(landed_root dev1)/odd"
[ "$(cat "$(landed_root dev1)/odd/$rel/x.txt")" = "deep data" ] || fail "the deep file differs"
pass "a file under a ${#rel}-byte path landed with the 100 ordinary files of its batch"

printf 'deep data, second version\n' > "$long/x.txt"
ship dev1
[ "$(field dev1 files)" -eq 1 ] || fail "the changed deep file was not the only one shipped"
grep -h "odd/$seg" "$T/bronze/_manifests/dev1/"*.jsonl | grep -o '"version":[0-9]*' | sort | tr '\n' ' ' > "$T/vers"
[ "$(cat "$T/vers")" = '"version":1 "version":2 ' ] || fail "versions of the deep file: $(cat "$T/vers")"
pass "its second version lands as version 2"

stop_receiver
: > "$T/receiver.log"
RECV_ARGS=--rebuild-index start_receiver
grep -q 'index rebuilt from the manifests.*: 101 files' "$T/receiver.log" || { cat "$T/receiver.log"; fail "the rebuild did not find 101 files"; }
write_agent_config dev1 "$S"
ship_with_all() { "$AGENT" --config "$T/dev1.yaml" --once --all > "$T/dev1.out" 2> "$T/dev1.err" || { cat "$T/dev1.err"; fail "re-ship failed"; }; }
ship_with_all
[ "$(field dev1 chunks_new)" -eq 0 ] || fail "the re-ship after the rebuild sent $(field dev1 chunks_new) chunks"
pass "the rebuilt index knows every file: a re-ship sends no chunk data"

# A directory in the way of one file refuses that file alone (before, it
# failed the whole batch on every retry): the other 8 land, the agent names
# it with the reason, and once the way is clear and the file changes, it
# lands.  (A batch that fails during its renames leaves none of its files
# under a final name: test_lander's test_rename_blocked.)
B="$T/src/batch"
mkdir -p "$B"
for n in 1 2 3 4 5 6 7 8 9; do printf 'file %d\n' $n > "$B/f$n.txt"; done
mkdir -p "$(landed_root dev1)/batch/f5.txt/in-the-way"
write_agent_config dev1 "$B"
rc=0
"$AGENT" --config "$T/dev1.yaml" --once > "$T/dev1.out" 2> "$T/dev1.err" || rc=$?
[ "$rc" -eq 3 ] || { cat "$T/dev1.err"; fail "the agent exited $rc with a directory in the way of one file (expected 3)"; }
grep -q 'batch/f5.txt refused by the receiver.*cannot land at dev1/batch/f5.txt: a directory is there' "$T/dev1.err" || { cat "$T/dev1.err"; fail "the refusal does not say why"; }
[ "$(find "$(landed_root dev1)/batch" -type f | wc -l)" -eq 8 ] || fail "the 8 other files of the batch did not land"
rm -r "$(landed_root dev1)/batch/f5.txt"
printf 'file 5, again\n' > "$B/f5.txt"
ship dev1
same_tree "$B" "$(landed_root dev1)/batch"
pass "a directory in the way of one file refuses that file alone; it lands once the way is clear and it changes"

# Every name POSIX allows travels and lands under the same bytes: a newline,
# a tab, a carriage return, an invalid UTF-8 byte, a leading dash.
N="$T/src/names"
mkdir -p "$N"
printf 'newline\n' > "$N/$(printf 'a\nb.txt')"
printf 'tab\n' > "$N/$(printf 'c\td.txt')"
printf 'cr\n' > "$N/$(printf 'g\rh')"
printf 'ff\n' > "$N/$(printf 'e\377f.txt')"
printf 'dash\n' > "$N/-rf"
write_agent_config dev1 "$N"
ship dev1
[ "$(field dev1 files)" -eq 5 ] || fail "shipped $(field dev1 files) of the 5 oddly named files"
diff -r "$N" "$(landed_root dev1)/names" || fail "the oddly named files did not land under the same names and bytes"
grep -qF '"path":"names/e\udcfff.txt"' "$T/bronze/_manifests/dev1/"*.jsonl || fail "the 0xff byte is not escaped as \\udcff in the manifest"
grep -qF '"path":"names/a\nb.txt"' "$T/bronze/_manifests/dev1/"*.jsonl || fail "the newline is not escaped in the manifest"
pass "names with a newline, a tab, a CR, a 0xff byte and a leading dash land byte-identical under the same names"

# A file dated past what an int64 of ns since 1970 holds (a device whose clock is far off: 2300; ext4
# takes dates up to 2446) ships byte-identical, its mtime wrapped around modulo 2^64 (ingest_time_ns):
# 10,413,792,000 s is -8,032,952,073,709,551,616 ns.  Before, the conversion overflowed (undefined
# behaviour; a sanitizer build stops there).
F="$T/src/future"
mkdir -p "$F"
printf 'from the future\n' > "$F/late.txt"
touch -d '2300-01-01 UTC' "$F/late.txt"
[ "$(stat -c %Y "$F/late.txt")" = 10413792000 ] || { echo "skip: this filesystem cannot date a file 2300"; exit 0; }
write_agent_config dev1 "$F"
ship dev1
cmp "$F/late.txt" "$(landed_root dev1)/future/late.txt" || fail "the file dated 2300 did not land byte-identical"
grep -h '"path":"future/late.txt"' "$T/bronze/_manifests/dev1/"*.jsonl | grep -qF '"mtime_ns":-8032952073709551616' ||
    { grep -h '"path":"future/late.txt"' "$T/bronze/_manifests/dev1/"*.jsonl; fail "its mtime is not the wrapped one"; }
printf 'from the future, changed\n' > "$F/late.txt"
touch -d '2300-01-01 00:00:01 UTC' "$F/late.txt"
ship dev1
[ "$(field dev1 files)" = 1 ] || fail "a change of the file dated 2300 was not shipped"
cmp "$F/late.txt" "$(landed_root dev1)/future/late.txt" || fail "the changed file dated 2300 did not land"
pass "a file dated 2300 lands byte-identical, its mtime wrapped (no overflow), and its change ships"

#!/bin/sh
# One file the receiver cannot land never blocks its batch (issue 15):
#   - a file whose landed path would pass the bronze tree's 4,095 bytes once
#     the layout prefix is added is refused alone: the 100 ordinary files of
#     its batch land, the agent names it with the receiver's reason, counts
#     it (summary line, exit status 3), the receiver counts it
#     (ingest_receiver_files_refused_total) and the batch manifest records
#     it; its chunk is asked for only because it was pushed (a small new
#     file); the next ship does not send it again;
#   - a symlink planted on the way in bronze refuses the files under it and
#     nothing is written through it; once the file changes and the way is
#     clear it lands;
#   - the agent keeps the landing rules the receiver sent (LANDING) and
#     refuses the next such file at the edge, before reading it, with the
#     same message; the core never hears of it; a changed version is tried
#     again.
. "$(dirname "$0")/lib.sh"
setup_keys
write_receiver_config 'metrics:
  listen: 127.0.0.1:0'
start_receiver
maddr=$(sed -n 's|.*metrics on http://\([^/]*\)/metrics.*|\1|p' "$T/receiver.log" | tail -1)
[ -n "$maddr" ] || { cat "$T/receiver.log"; fail "the receiver did not report its metrics address"; }
scrape() {
    bash -c 'exec 3<>/dev/tcp/${0%:*}/${0##*:}; printf "GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n" >&3; cat <&3' "$maddr" |
        tr -d '\r' | sed -n "s/^$1{device=\"dev1\"} //p"
}

S="$T/src/big"
mkdir -p "$S"
i=0
while [ $i -lt 100 ]; do printf 'ordinary file %d\n' $i > "$S/f$i.txt"; i=$((i + 1)); done
# 19 directories of 200 bytes and a 240-byte name: a 4,059-byte path under
# the source, which the agent takes (its manifest path is 4,063 bytes), but
# "dev1/yyyy/mm/dd/" makes it 4,079 at the core... so one more directory of
# 20 bytes: 4,080 under the source, 4,100 landed.
seg=$(printf '%0200d' 0 | tr 0 d)
name=$(printf '%0240d' 0 | tr 0 n)
(
    cd "$S" || exit 1
    i=0
    while [ $i -lt 19 ]; do mkdir "$seg" && cd "$seg" || exit 1; i=$((i + 1)); done
    mkdir twenty-bytes-of-name && cd twenty-bytes-of-name || exit 1
    printf 'too deep to land\n' > "$name"
) || fail "could not make the long path"
write_agent_config dev1 "$S"
rc=0
"$AGENT" --config "$T/dev1.yaml" --once > "$T/dev1.out" 2> "$T/dev1.err" || rc=$?
[ "$rc" -eq 3 ] || { cat "$T/dev1.err"; fail "the agent exited $rc, expected 3 (files refused)"; }
[ "$(field dev1 files)" -eq 101 ] || fail "acknowledged $(field dev1 files) files, expected 101"
[ "$(field dev1 files_refused)" -eq 1 ] || fail "files_refused=$(field dev1 files_refused), expected 1"
# the refused file's one chunk was asked for only because it was pushed (a small new file: the receiver
# takes a refused pushed file's bytes so that its hash, and so any replay of the batch, is known;
# docs/protocol.md "Pushed chunks"); with ids listed it is not (no file that lands repeats it)
[ "$(field dev1 chunks_new)" -eq 101 ] || fail "chunks_new=$(field dev1 chunks_new), expected the 100 ordinary files' chunks and the pushed refused one"
grep -q "refused by the receiver (the rest of batch .* landed): .*its landed path would be 4100 bytes (the path is 4084, the layout adds 16); the bronze tree takes at most 4095" "$T/dev1.err" ||
    { cat "$T/dev1.err"; fail "the agent does not name the refused file with the receiver's reason"; }
grep -q "1 file(s) were refused one by one, 0 of them at the edge" "$T/dev1.err" || fail "the agent's closing line does not count the refusal"
i=0
while [ $i -lt 100 ]; do
    [ "$(cat "$(landed_root dev1)"/*/*/*/big/f$i.txt)" = "ordinary file $i" ] || fail "f$i.txt did not land"
    i=$((i + 1))
done
[ "$(find "$(landed_root dev1)" -type f | wc -l)" -eq 100 ] || fail "not exactly the 100 ordinary files landed"
m=$(grep -h '"refused":' "$T/bronze/_manifests/dev1/"*.jsonl)
echo "$m" | grep -q '"landed":"",.*"version":0,.*"refused":"file big/d.*landed path would be 4100 bytes' ||
    { echo "$m" | cut -c1-300; fail "the batch manifest does not record the refusal"; }
[ "$(scrape ingest_receiver_files_refused_total)" = 1 ] || fail "ingest_receiver_files_refused_total is not 1"
[ "$(find "$T/bronze/_manifests/.refused" -type f 2>/dev/null | wc -l)" -eq 0 ] || fail "the refused file's scratch copy was left"
"$CTL" catalog --bronze "$T/bronze" --format paths > "$T/cat" || fail "ingestctl catalog failed"
[ "$(wc -l < "$T/cat")" -eq 100 ] || fail "the catalog lists $(wc -l < "$T/cat") files, expected the 100 landed"
pass "a 4,100-byte landed path is refused alone with its reason; its 100 neighbours land"

ship dev1
[ "$(field dev1 files)" -eq 0 ] || fail "the next ship sent $(field dev1 files) files (the refused one again?)"
pass "the refused file is not sent again while it is unchanged"

# The receiver told its landing rules (LANDING) on connecting, and the agent
# kept them: a new file that breaks them is refused at the edge, before it is
# read, with the message the core gives; the core never hears of it.
[ -f "$T/astate-dev1/landing" ] || fail "the agent did not keep the receiver's landing rules"
head -1 "$T/astate-dev1/landing" | grep -q '^ingest-landing 1 4095 255 [0-9]*$' || fail "the landing file's header: $(head -1 "$T/astate-dev1/landing")"
name2=$(printf '%0240d' 0 | tr 0 m)
# into the deep directory step by step (its absolute path is past PATH_MAX), then write
deep_write() { # deep_write TEXT [NAME]
    (
        cd "$S" || exit 1
        i=0
        while [ $i -lt 19 ]; do cd "$seg" || exit 1; i=$((i + 1)); done
        cd twenty-bytes-of-name && printf "$1" >> "${2:-$name2}"
    ) || fail "could not write in the deep directory"
}
deep_write 'also too deep to land\n'
printf 'a new ordinary file\n' > "$S/new.txt"
rc=0
"$AGENT" --config "$T/dev1.yaml" --once > "$T/dev1.out" 2> "$T/dev1.err" || rc=$?
[ "$rc" -eq 3 ] || { cat "$T/dev1.err"; fail "the agent exited $rc, expected 3 (a file refused at the edge)"; }
[ "$(field dev1 files)" -eq 1 ] || fail "acknowledged $(field dev1 files) files, expected new.txt alone"
[ "$(field dev1 files_refused_edge)" -eq 1 ] || fail "files_refused_edge=$(field dev1 files_refused_edge), expected 1"
[ "$(field dev1 files_refused)" -eq 1 ] || fail "files_refused=$(field dev1 files_refused), expected 1"
[ "$(field dev1 bytes)" -eq "$(wc -c < "$S/new.txt")" ] || fail "bytes=$(field dev1 bytes): more than new.txt went"
grep -q "refused at the edge by the receiver's landing rules (not sent until it changes): file big/d.*its landed path would be 4100 bytes (the path is 4084, the layout adds 16); the bronze tree takes at most 4095" "$T/dev1.err" ||
    { cat "$T/dev1.err"; fail "the agent does not name the file refused at the edge with the core's reason"; }
grep -q "1 file(s) were refused one by one, 1 of them at the edge" "$T/dev1.err" || fail "the closing line does not count the edge refusal"
! grep -h mmmm "$T/bronze/_manifests/dev1/"*.jsonl > /dev/null || fail "the file refused at the edge reached a batch manifest"
[ "$(scrape ingest_receiver_files_refused_total)" = 1 ] || fail "the receiver counted a refusal for the file refused at the edge"
[ "$(cat "$(landed_root dev1)"/*/*/*/big/new.txt)" = "a new ordinary file" ] || fail "new.txt did not land"
ship dev1
[ "$(field dev1 files)" -eq 0 ] && [ "$(field dev1 files_refused_edge)" -eq 0 ] ||
    fail "the next ship tried the refused file again (files=$(field dev1 files) files_refused_edge=$(field dev1 files_refused_edge))"
deep_write 'changed\n'
rc=0
"$AGENT" --config "$T/dev1.yaml" --once > "$T/dev1.out" 2> "$T/dev1.err" || rc=$?
[ "$rc" -eq 3 ] && [ "$(field dev1 files_refused_edge)" -eq 1 ] || fail "a changed refused file was not tried (and refused) again"
pass "a file that breaks the receiver's landing rules is refused at the edge with the core's message, once per version"


# A symlink on the way in bronze: the files under it are refused, nothing is written through it.
L="$T/src/links"
mkdir -p "$L/sub" "$T/elsewhere"
printf 'one\n' > "$L/sub/a.txt"
printf 'two\n' > "$L/sub/b.txt"
printf 'three\n' > "$L/c.txt"
day=$(date -u -r "$L/sub/a.txt" +%Y/%m/%d)
mkdir -p "$(landed_root dev1)/$day/links"
ln -s "$T/elsewhere" "$(landed_root dev1)/$day/links/sub"
write_agent_config dev1 "$L"
rc=0
"$AGENT" --config "$T/dev1.yaml" --once > "$T/dev1.out" 2> "$T/dev1.err" || rc=$?
[ "$rc" -eq 3 ] || { cat "$T/dev1.err"; fail "the agent exited $rc, expected 3"; }
[ "$(field dev1 files_refused)" -eq 2 ] || fail "files_refused=$(field dev1 files_refused), expected 2"
grep -q 'links/sub/a.txt refused by the receiver.*"sub" on its way in the bronze tree is a symlink or not a directory' "$T/dev1.err" ||
    { cat "$T/dev1.err"; fail "the symlink refusal does not say why"; }
[ "$(cat "$(landed_root dev1)/$day/links/c.txt")" = three ] || fail "c.txt did not land"
[ -z "$(ls -A "$T/elsewhere")" ] || fail "something was written through the symlink"
[ "$(scrape ingest_receiver_files_refused_total)" = 3 ] || fail "ingest_receiver_files_refused_total is not 3"
rm "$(landed_root dev1)/$day/links/sub"
printf 'one, changed\n' > "$L/sub/a.txt"
ship dev1
[ "$(field dev1 files)" -eq 1 ] || fail "after the change $(field dev1 files) files were sent, expected a.txt alone"
[ "$(cat "$(landed_root dev1)/$day/links/sub/a.txt")" = "one, changed" ] || fail "a.txt did not land once changed"
pass "a symlink on the way refuses the files under it, nothing goes through it, and a changed file lands once the way is clear"

# The daemon with after_ship: delete never deletes a refused file, however the
# after-ship pass runs: at the ack, again while another file of the batch is
# still held open by a writer (the deferred pass retries about once a second,
# from the journal), and after a restart.
D="$T/src/dmn"
mkdir -p "$D"
printf 'ok\n' > "$D/ok.txt"
printf 'refused\n' > "$D/r.txt"
printf 'held\n' > "$D/held.log"
dday=$(date -u -r "$D/ok.txt" +%Y/%m/%d)
mkdir -p "$(landed_root dev1)/$dday/dmn/r.txt/in-the-way"
write_agent_config dev1 "$D" 'batch:
  max_wait: 300ms
rescan_interval: 1h'
sed -i 's|^  - path: .*|&\n    settle: 300ms\n    after_ship: delete|' "$T/dev1.yaml"
(exec 3>> "$D/held.log"; sleep 4) &
HPID=$!
"$AGENT" --config "$T/dev1.yaml" > "$T/dmn.out" 2> "$T/dmn.err" &
APID=$!
i=0
while [ -e "$D/ok.txt" ]; do
    i=$((i + 1)); [ $i -gt 200 ] && { cat "$T/dmn.err"; fail "ok.txt was not deleted after its ack"; }
    sleep 0.05
done
grep -q "dmn/r.txt refused by the receiver" "$T/dmn.err" || { cat "$T/dmn.err"; fail "the daemon did not report the refusal"; }
sleep 2.5 # the deferred pass (held.log is open) runs about once a second meanwhile
[ -e "$D/r.txt" ] || fail "the deferred after-ship pass deleted the refused file"
wait $HPID
i=0
while [ -e "$D/held.log" ]; do
    i=$((i + 1)); [ $i -gt 200 ] && { cat "$T/dmn.err"; fail "held.log was not deleted once its writer closed it"; }
    sleep 0.05
done
kill -TERM $APID
rc=0; wait $APID || rc=$?
[ "$rc" = 0 ] || fail "the daemon exited $rc"
"$AGENT" --config "$T/dev1.yaml" >> "$T/dmn.out" 2>> "$T/dmn.err" &
APID=$!
sleep 1.5
kill -TERM $APID
wait $APID || true
[ -e "$D/r.txt" ] || fail "a restart deleted the refused file"
[ "$(cat "$D/r.txt")" = refused ] || fail "the refused file changed"
pass "after_ship: delete leaves the refused file (at the ack, in the deferred pass, after a restart) and deletes the others"

# The daemon learns the rules on connecting too, and refuses at the edge.
# (A path deep enough for the layout above is past PATH_MAX as an absolute
# path at the edge, so here the receiver's layout appends to the name: a
# 252-byte name lands as a 257-byte component.)
stop_receiver
write_receiver_config 'layout: "{device}/{path}~{device}"
metrics:
  listen: 127.0.0.1:0'
start_receiver
maddr=$(sed -n 's|.*metrics on http://\([^/]*\)/metrics.*|\1|p' "$T/receiver.log" | tail -1)
E="$T/src/edge"
mkdir -p "$E"
printf 'first\n' > "$E/first.txt"
write_agent_config dev1 "$E" 'batch:
  max_wait: 200ms
rescan_interval: 1s'
sed -i 's|^  - path: .*|&\n    settle: 200ms\n    spool: copy|' "$T/dev1.yaml"
"$AGENT" --config "$T/dev1.yaml" > "$T/edge.out" 2> "$T/edge.err" &
APID=$!
until_landed() {
    i=0
    while [ ! -f "$(landed_root dev1)/edge/$1~dev1" ]; do
        i=$((i + 1)); [ $i -gt 300 ] && { cat "$T/edge.err"; fail "$1 did not land"; }
        sleep 0.05
    done
}
until_landed first.txt
grep -q '~{device}' "$T/astate-dev1/landing" || fail "the daemon did not keep the new receiver's rules"
long=$(printf '%0252d' 0 | tr 0 L)
printf 'a long name\n' > "$E/$long"
printf 'second\n' > "$E/second.txt"
until_landed second.txt
sleep 2.5 # rescans: the refused version (read from a spool copy) is not taken, copied or refused again
kill -TERM $APID
rc=0; wait $APID || rc=$?
[ "$rc" = 0 ] || { cat "$T/edge.err"; fail "the daemon exited $rc"; }
grep -q "refused at the edge by the receiver's landing rules (not sent until it changes): file edge/LLL.*: landed path \"dev1/edge/LLL.*\": a component of 257 bytes; the bronze filesystem allows 255" "$T/edge.err" ||
    { cat "$T/edge.err"; fail "the daemon did not refuse the long name at the edge"; }
grep -q "files_refused=1 .*files_refused_edge=1" "$T/edge.out" || { cat "$T/edge.out"; fail "the daemon's stopped line does not count the edge refusal"; }
r=$(scrape ingest_receiver_files_refused_total)
[ "${r:-0}" = 0 ] || fail "the receiver heard of the file the daemon refused at the edge ($r)"
[ -e "$E/$long" ] || fail "the refused file is gone"
pass "the daemon refuses at the edge too (a landed name past 255 bytes), and ships the rest"

# Rules kept from an earlier run are used only once the receiver confirmed
# them: the receiver's layout changed so that the long name fits now, and
# the file (touched) ships, although the kept rules would refuse it.
stop_receiver
write_receiver_config 'layout: "{device}/{path}"'
start_receiver
write_agent_config dev1 "$E"
grep -q '~{device}' "$T/astate-dev1/landing" || fail "the kept rules are not the old ones"
touch "$E/$long"
ship dev1 > /dev/null
[ "$(field dev1 files)" -eq 1 ] && [ "$(field dev1 files_refused_edge)" -eq 0 ] ||
    { cat "$T/dev1.err"; fail "the long name was refused with stale rules (files=$(field dev1 files) files_refused_edge=$(field dev1 files_refused_edge))"; }
[ "$(cat "$(landed_root dev1)/edge/$long")" = "a long name" ] || fail "the long name did not land under the new layout"
grep -q '^{device}/{path}$' "$T/astate-dev1/landing" || fail "the new rules were not kept"
pass "rules kept from an earlier run are confirmed on connecting first: a file they would refuse ships under the new ones"

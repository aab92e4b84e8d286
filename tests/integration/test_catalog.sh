#!/bin/sh
# The catalog of landed files (issue 13), with the real receiver and agents:
# 1. after ships that add, replace and rename files, `ingestctl catalog`
#    lists exactly the files under bronze (find), with their sizes, and the
#    hashes the manifests give; the replaced version is listed, marked, only
#    with --all-versions;
# 2. a deleted catalog is made again from the manifests, with the same listing;
# 3. the feed (--cursor-file) passes every landed file exactly once across a
#    receiver restart and while two devices land at the same time as it is read;
# 4. verify: nothing on an intact tree (exit 0); a flipped byte, a truncated
#    file and a deleted file each named (exit 1), and nothing else.
. "$(dirname "$0")/lib.sh"
setup_keys
write_receiver_config 'layout: "{device}/{path}"'
start_receiver
B="$T/bronze"

# find's view of the landed files: "landed-path size", sorted
landed_by_find() {
    (cd "$B" && find . -path ./_manifests -prune -o -type f -printf '%P %s\n') | LC_ALL=C sort
}
# the catalog's view, same form
landed_by_catalog() {
    "$CTL" catalog --bronze "$B" --format paths "$@" | sed "s|^$B/||" | LC_ALL=C sort
}
same_as_find() {
    landed_by_find > "$T/find.txt"
    landed_by_catalog > "$T/cat.txt"
    cmp -s "$T/find.txt" "$T/cat.txt" || { diff "$T/find.txt" "$T/cat.txt" | head -20; fail "$1: catalog differs from the tree"; }
    [ -s "$T/cat.txt" ] || fail "$1: nothing listed"
}

S="$T/src"
mkdir -p "$S/logs" "$S/conf"
gen_log "$S/logs/a.log" 300000 1
gen_log "$S/logs/b.log" 5000 2
printf 'k=v\n' > "$S/conf/c.conf"
: > "$S/empty"
write_agent_config dev1 "$S"
ship dev1
same_as_find "first ship"
pass "catalog lists the landed files after a first ship ($(wc -l < "$T/cat.txt") files)"

# the hashes are the manifests' (every FILE record of dev1's manifests, landed path and hash)
python3 - "$B" "$CTL" <<'EOF' || fail "catalog hashes differ from the manifests"
import json, os, subprocess, sys
b, ctl = sys.argv[1], sys.argv[2]
want = {}
for dev in os.listdir(b + "/_manifests"):
    if dev.startswith("."): continue
    for m in os.listdir(b + "/_manifests/" + dev):
        for line in open(b + "/_manifests/" + dev + "/" + m):
            r = json.loads(line)
            if r["type"] == "file":
                want[(r["landed"], r["version"])] = (r["hash"], r["size"], r["path"])
out = subprocess.run([ctl, "catalog", "--bronze", b, "--format", "jsonl", "--all-versions"],
                     check=True, capture_output=True, text=True).stdout
got = {}
for line in out.splitlines():
    r = json.loads(line)
    got[(r["landed"], r["version"])] = (r["hash"], r["size"], r["path"])
if got != want:
    print("want", sorted(want.items())[:5], "got", sorted(got.items())[:5])
    sys.exit(1)
EOF
pass "catalog hashes and sizes equal the manifests'"

# replace a.log, rename b.log -> b2.log, add d
sleep 1.1
gen_log "$S/logs/a.log" 1000 9
mv "$S/logs/b.log" "$S/logs/b2.log"
printf 'new\n' > "$S/d.txt"
ship dev1
same_as_find "after replace and rename"
grep -q '^dev1/src/logs/b.log ' "$T/cat.txt" || fail "the renamed file's old landed copy is not listed"
grep -q '^dev1/src/logs/b2.log ' "$T/cat.txt" || fail "the renamed file is not listed"
"$CTL" catalog --bronze "$B" --format jsonl --all-versions --prefix dev1/src/logs/a.log > "$T/a.jsonl"
[ "$(wc -l < "$T/a.jsonl")" = 2 ] || { cat "$T/a.jsonl"; fail "expected both versions of a.log with --all-versions"; }
grep -q '"version":1,.*"replaced":true' "$T/a.jsonl" || fail "version 1 of a.log not marked replaced"
grep -q '"version":2,.*"replaced":false' "$T/a.jsonl" || fail "version 2 of a.log not current"
[ "$("$CTL" catalog --bronze "$B" --format jsonl --prefix dev1/src/logs/a.log | wc -l)" = 1 ] || fail "replaced version listed without --all-versions"
pass "after replace and rename: catalog equals the tree; a.log v1 marked replaced"

# 2. deleted: made again from the manifests
rm -rf "$B/_manifests/.catalog"
same_as_find "after deleting the catalog"
[ -s "$B/_manifests/.catalog/data.mdb" ] || fail "catalog not made again"
pass "a deleted catalog is made again from the manifests"

# 3. the feed, across a restart and concurrent landings
"$CTL" catalog --bronze "$B" --cursor-file "$T/cursor" --format jsonl > "$T/feed.1"
tail -1 "$T/feed.1" | grep -q '"cursor":"c1-' || fail "feed: no cursor line"
stop_receiver
start_receiver
write_agent_config dev1 "$S"
mkdir -p "$T/src2"
for i in $(seq 1 40); do printf 'file %s\n' "$i" > "$T/src2/f$i.txt"; done
write_agent_config dev2 "$T/src2" 'batch:
  max_files: 3'
mkdir -p "$S/more"
for i in $(seq 1 40); do printf 'more %s\n' "$i" > "$S/more/m$i.txt"; done
write_agent_config dev1 "$S" 'batch:
  max_files: 4'
# two devices land while the feed is read again and again
ship dev1 > /dev/null &
p1=$!
ship dev2 > /dev/null &
p2=$!
n=2
while kill -0 $p1 2>/dev/null || kill -0 $p2 2>/dev/null; do
    "$CTL" catalog --bronze "$B" --cursor-file "$T/cursor" --format jsonl > "$T/feed.$n"
    n=$((n + 1))
done
wait $p1 || fail "dev1 ship failed"
wait $p2 || fail "dev2 ship failed"
"$CTL" catalog --bronze "$B" --cursor-file "$T/cursor" --format jsonl > "$T/feed.$n"
python3 - "$B" "$T" "$n" <<'EOF' || fail "feed: not every landed file exactly once"
import json, os, sys
b, t, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
want = set()
for dev in os.listdir(b + "/_manifests"):
    if dev.startswith("."): continue
    for m in os.listdir(b + "/_manifests/" + dev):
        for line in open(b + "/_manifests/" + dev + "/" + m):
            r = json.loads(line)
            if r["type"] == "file":
                want.add((dev, r["landed"], r["version"]))
seen = []
for i in range(1, n + 1):
    lines = open("%s/feed.%d" % (t, i)).read().splitlines()
    assert lines and "cursor" in json.loads(lines[-1]), "feed.%d: no cursor last" % i
    for line in lines[:-1]:
        r = json.loads(line)
        seen.append((r["device"], r["landed"], r["version"]))
dups = len(seen) - len(set(seen))
if dups or set(seen) != want:
    print("feeds: %d records, %d duplicates, %d missing, %d extra" % (len(seen), dups, len(want - set(seen)), len(set(seen) - want)))
    sys.exit(1)
print("feed: %d files in %d reads, each once" % (len(seen), n))
EOF
[ "$(ls "$B/_manifests/dev2" | wc -l)" -ge 5 ] || fail "dev2 should have landed several batches"
pass "the feed passed every landed file exactly once across a restart and concurrent landings ($n reads)"
same_as_find "after concurrent landings"

# 4. verify
"$CTL" verify --bronze "$B" --dedup-key "$T/keys/fleet.dedup" > "$T/verify.ok" 2> "$T/verify.ok.err" || {
    cat "$T/verify.ok" "$T/verify.ok.err"; fail "verify of an intact tree failed"; }
grep -q '"missing":0,"changed":0,"corrupt":0,"skipped":0' "$T/verify.ok" || fail "verify: $(cat "$T/verify.ok")"
grep -q '"problems":\[\]' "$T/verify.ok" || fail "verify named problems on an intact tree"
files=$(sed 's/.*"files":\([0-9]*\).*/\1/' "$T/verify.ok")
[ "$files" = "$(landed_by_find | wc -l)" ] || fail "verify checked $files files, the tree has $(landed_by_find | wc -l)"
# another fleet key: every file looks corrupt (file hashes are keyed), and verify says what that likely means
(cd "$T/keys" && "$CTL" keygen --dedup other.dedup > /dev/null) || fail "keygen failed"
rc=0
"$CTL" verify --bronze "$B" --dedup-key "$T/keys/other.dedup" > "$T/verify.key" 2> "$T/verify.key.err" || rc=$?
[ "$rc" = 1 ] && grep -q "is the dedup key the receiver's" "$T/verify.key.err" ||
    { cat "$T/verify.key.err"; fail "verify with another dedup key (exit $rc) gave no hint"; }
pass "verify: intact tree clean ($files files); with another fleet key it says the key may be wrong"
# flip one byte of a.log (same size), truncate b2.log, delete c.conf
printf 'X' | dd of="$B/dev1/src/logs/a.log" bs=1 seek=500 conv=notrunc 2> /dev/null
truncate -s 100 "$B/dev1/src/logs/b2.log"
rm "$B/dev1/src/conf/c.conf"
if "$CTL" verify --bronze "$B" --dedup-key "$T/keys/fleet.dedup" --threads 2 > "$T/verify.bad" 2> "$T/verify.bad.err"; then
    fail "verify passed a damaged tree"
fi
grep -q '"missing":1,"changed":1,"corrupt":1' "$T/verify.bad" || fail "verify counts: $(cat "$T/verify.bad")"
for f in "corrupt dev1/src/logs/a.log" "changed dev1/src/logs/b2.log" "missing dev1/src/conf/c.conf"; do
    grep -q "verify: $f " "$T/verify.bad.err" || { cat "$T/verify.bad.err"; fail "verify did not name: $f"; }
    name=${f#* }
    grep -q "\"landed\":\"$name\"" "$T/verify.bad" || fail "the JSON summary does not name $name"
done
[ "$(grep -c '^verify: ' "$T/verify.bad.err")" = 3 ] || { cat "$T/verify.bad.err"; fail "verify named more than the 3 damaged files"; }
"$CTL" verify --bronze "$B" --dedup-key "$T/keys/fleet.dedup" --device dev2 > "$T/verify.dev2" ||
    fail "verify --device dev2 (intact) failed: $(cat "$T/verify.dev2")"
pass "verify names a flipped byte, a truncated and a deleted file, and nothing else"

# malformed arguments are refused, naming what and where
"$CTL" catalog --bronze "$B" --after c1-12 > /dev/null 2> "$T/arg.err" && fail "a bad cursor was taken"
grep -q "byte 6" "$T/arg.err" || fail "bad cursor message: $(cat "$T/arg.err")"
"$CTL" catalog --bronze "$B" --since 2026-13-01 > /dev/null 2> "$T/arg.err" && fail "a bad time was taken"
grep -q "no such date" "$T/arg.err" || fail "bad time message: $(cat "$T/arg.err")"
rc=0
"$CTL" catalog --bronze "$B" --limit 1 > /dev/null 2> "$T/arg.err" || rc=$?
[ "$rc" = 2 ] && grep -q "\-\-limit bounds the batches of a feed" "$T/arg.err" ||
    fail "--limit without a feed was not refused (exit $rc): $(cat "$T/arg.err")"
pass "bad cursor and time arguments refused with their position; --limit without a feed refused"

# 5. what an operator's tools meet in a bronze tree they did not expect
# a cursor past the catalog's last batch (bronze put back from an older copy): refused, not read as "nothing new"
cur=$(tail -1 "$T/cursor" 2>/dev/null || cat "$T/cursor")
past="${cur%-*}-999999"
"$CTL" catalog --bronze "$B" --after "$past" > /dev/null 2> "$T/arg.err" && fail "a cursor past the last batch was taken"
grep -q "is past this catalog's last batch" "$T/arg.err" || fail "cursor past the end: $(cat "$T/arg.err")"
# --until the epoch: nothing landed before it (0 was taken for no bound: every file)
[ -z "$("$CTL" catalog --bronze "$B" --format paths --until @0)" ] || fail "--until @0 listed files"
[ -z "$("$CTL" catalog --bronze "$B" --format paths --until 1970-01-01)" ] || fail "--until 1970-01-01 listed files"
pass "a cursor past the last batch is refused; --until the epoch lists nothing"
# a directory that is no bronze tree (a typo, an unmounted filesystem): an error, and nothing made there
mkdir -p "$T/notbronze"
"$CTL" catalog --bronze "$T/notbronze" > /dev/null 2> "$T/nb.err" && fail "catalog of a directory without _manifests succeeded"
"$CTL" verify --bronze "$B/dev1" --dedup-key "$T/keys/fleet.dedup" > /dev/null 2>> "$T/nb.err" &&
    fail "verify of a device's landed tree succeeded"
[ "$(grep -c "holds no _manifests directory" "$T/nb.err")" = 2 ] || fail "not a bronze tree: $(cat "$T/nb.err")"
[ ! -e "$T/notbronze/_manifests" ] && [ ! -e "$B/dev1/_manifests" ] || fail "a catalog was made in a directory that is no bronze tree"
pass "catalog and verify on a directory that is no bronze tree: an error, nothing written there"
# a FIFO and a symlink named like manifests: skipped with a warning, never waited on or followed
mkfifo "$B/_manifests/dev1/stray.jsonl"
ln -s /etc/passwd "$B/_manifests/dev1/link.jsonl"
timeout 20 "$CTL" catalog --bronze "$B" --format paths > /dev/null 2> "$T/odd.err" || fail "catalog with a FIFO manifest: exit $?"
grep -q "stray.jsonl: not a regular file" "$T/odd.err" || fail "the FIFO was not named: $(cat "$T/odd.err")"
grep -q "link.jsonl: a symbolic link" "$T/odd.err" || fail "the symlink was not named: $(cat "$T/odd.err")"
stop_receiver
start_receiver # its catalog catch-up at start must not wait on the FIFO either
rm -f "$B/_manifests/dev1/stray.jsonl" "$B/_manifests/dev1/link.jsonl"
pass "a FIFO and a symlink named *.jsonl in _manifests are skipped and named, not waited on or followed"
# a file record edited in its manifest since it landed: the catalog's file is not met there, and verify says so
m=$(grep -l '"type":"file"' "$B"/_manifests/dev1/*.jsonl | head -1)
sed -i '0,/"type":"file"/s/"version":\([0-9]*\)/"version":9\1/' "$m"
rc=0
"$CTL" verify --bronze "$B" --dedup-key "$T/keys/fleet.dedup" --no-catch-up > "$T/verify.ed" 2> "$T/verify.ed.err" || rc=$?
[ "$rc" = 1 ] || { cat "$T/verify.ed" "$T/verify.ed.err"; fail "verify with an edited manifest record exited $rc, expected 1"; }
grep -q "files in the catalog are not in its manifest" "$T/verify.ed.err" || fail "verify did not say: $(cat "$T/verify.ed.err")"
grep -q '"skipped":1' "$T/verify.ed" || fail "the file not checked is not counted skipped: $(cat "$T/verify.ed")"
pass "verify counts and names a file of the catalog its manifest no longer holds"

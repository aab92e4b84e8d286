#!/bin/sh
# The core's chunk index is a cache of the manifests.
# 1. Deleted (data.mdb removed while the receiver is stopped): the restart
#    rebuilds it from the manifests, and a re-ship of known content sends
#    no chunk data.
# 2. Corrupted (data.mdb overwritten with garbage): detected at start-up,
#    wiped and rebuilt; again no chunk data on a re-ship.
# 3. ingest-receiver --rebuild-index rebuilds on request; `ingestctl index
#    check` reports clean (exit 0) after a ship and a problem (exit 1, the
#    file named) once a landed file is modified downstream.
# 4. Killed (kill -9) before the index entries of its last batches were
#    written (index.flush_interval 1h): the restart catches up exactly the
#    batches whose manifests the index does not mark, a re-ship of their
#    content sends no chunk data, and the paths' version counters go on
#    from the manifests (a re-landed file gets the next version).
# 5. A device file named like the lander's temporary files is refused (it
#    could be truncated by, or swept as, a temporary file).
. "$(dirname "$0")/lib.sh"
setup_keys
write_receiver_config 'layout: "{device}/{path}"'
start_receiver
S="$T/src/data"
"$CTL" bench gen --size 4MiB "$S" > /dev/null
nfiles=$(find "$S" -type f | wc -l)
write_agent_config dev1 "$S" 'batch:
  max_files: 30'
ship dev1
same_tree "$S" "$(landed_root dev1)/data"
nchunks=$(field dev1 chunks)
nbatches=$(ls "$T/bronze/_manifests/dev1" | wc -l)
[ "$nbatches" -ge 2 ] || fail "expected several batches, got $nbatches"
"$CTL" index check "$T/rstate" --bronze "$T/bronze" > "$T/check.out" || { cat "$T/check.out"; fail "index check not clean after a ship"; }
grep -q "bad 0, stale 0" "$T/check.out" || fail "index check output: $(cat "$T/check.out")"
pass "index check clean after a ship: $(tail -1 "$T/check.out")"
# a --bronze that is not a bronze tree (a typo) is said as such, not reported as every entry stale
rc=0
"$CTL" index check "$T/rstate" --bronze "$T/bronzee" > "$T/check.out" 2>&1 || rc=$?
[ "$rc" = 1 ] && grep -q "holds no _manifests directory: not a bronze tree" "$T/check.out" ||
    { cat "$T/check.out"; fail "index check with a --bronze that is no bronze tree (exit $rc)"; }
grep -q "stale" "$T/check.out" && fail "index check reported stale entries against no bronze tree"
pass "index check refuses a --bronze that is no bronze tree"

# restart_and_reship WHAT: restart the receiver, re-ship everything (--all), expect no chunk data
restart_and_reship() {
    start_receiver
    write_agent_config dev1 "$S" 'batch:
  max_files: 30'
    ship_with dev1 --all
    [ "$(field dev1 files)" -eq "$nfiles" ] || fail "$1: re-ship covered $(field dev1 files) of $nfiles files"
    [ "$(field dev1 chunks_new)" -eq 0 ] || fail "$1: re-ship of known content sent $(field dev1 chunks_new) chunks"
    [ "$(field dev1 chunk_bytes)" -eq 0 ] || fail "$1: re-ship sent chunk bytes"
    same_tree "$S" "$(landed_root dev1)/data"
}

stop_receiver
[ -f "$T/rstate/data.mdb" ] || fail "no data.mdb in the receiver's state_dir"
rm -f "$T/rstate/data.mdb" "$T/rstate/lock.mdb"
: > "$T/receiver.log"
restart_and_reship "deleted index"
grep -q "is new or was not completed; building it" "$T/receiver.log" || fail "no log line about a missing index"
grep -q "did not stop cleanly" "$T/receiver.log" && fail "a clean stop was taken for a crash"
grep "index rebuilt from the manifests" "$T/receiver.log" | grep -q "$nbatches batches" ||
    { grep rebuilt "$T/receiver.log"; fail "rebuild did not find the $nbatches batches"; }
pass "deleted index rebuilt from $nbatches manifests; re-ship of $nfiles files sent no chunk data"

stop_receiver
awk 'BEGIN { for (i = 0; i < 4096; i++) printf "garbage-%08d-not-an-lmdb-page\n", i }' > "$T/rstate/data.mdb"
: > "$T/receiver.log"
restart_and_reship "corrupt index"
grep -q "unusable" "$T/receiver.log" || { head "$T/receiver.log"; fail "corrupt index not reported"; }
grep -q "index rebuilt from the manifests" "$T/receiver.log" || fail "corrupt index not rebuilt"
pass "corrupt index detected and rebuilt; re-ship sent no chunk data"

# a catalog cut short (a full disk, a bad copy): LMDB maps it whole, and the first page read past its end
# raised SIGBUS, which killed the receiver without a word at every start.  Now it says so, exits 70 and
# leaves state_dir/sigbus; the next start makes the index and the catalog again from the manifests.
stop_receiver
truncate -s 12288 "$T/bronze/_manifests/.catalog/data.mdb"
rm -f "$T/receiver.addr"
rc=0
timeout 30 "$RECEIVER" --config "$T/receiver.yaml" --ready-file "$T/receiver.addr" >> "$T/receiver.log" 2>&1 || rc=$?
[ "$rc" = 70 ] || { tail -3 "$T/receiver.log"; fail "a receiver with its catalog cut short exited $rc, expected 70"; }
grep -q "SIGBUS: a state file mapped in memory is shorter than its pages" "$T/receiver.log" ||
    { tail -3 "$T/receiver.log"; fail "the SIGBUS was not said"; }
[ -e "$T/rstate/sigbus" ] || fail "no state_dir/sigbus mark"
: > "$T/receiver.log"
restart_and_reship "after a SIGBUS"
grep -q "the last run died of SIGBUS reading a state file" "$T/receiver.log" || fail "the start after the SIGBUS did not say so"
grep -q "index rebuilt from the manifests" "$T/receiver.log" || fail "the index was not made again after the SIGBUS"
[ ! -e "$T/rstate/sigbus" ] || fail "the sigbus mark was left"
"$CTL" catalog --bronze "$T/bronze" --format paths > "$T/cat.after" || fail "ingestctl catalog after the SIGBUS: exit $?"
[ "$(wc -l < "$T/cat.after")" -eq "$nfiles" ] || fail "the catalog made again lists $(wc -l < "$T/cat.after") of $nfiles files"
pass "a catalog cut short: SIGBUS said (exit 70), then index and catalog made again; re-ship sent no chunk data"

stop_receiver
: > "$T/receiver.log"
"$RECEIVER" --config "$T/receiver.yaml" --rebuild-index --ready-file "$T/receiver.addr" >> "$T/receiver.log" 2>&1 &
RECV_PID=$!
wait_log "listening on"
grep -q "index rebuilt from the manifests" "$T/receiver.log" || fail "--rebuild-index did not rebuild"
"$CTL" index check "$T/rstate" --bronze "$T/bronze" > "$T/check.out" || { cat "$T/check.out"; fail "index check not clean after --rebuild-index"; }
grep -q "chunks [1-9]" "$T/check.out" || fail "rebuilt index is empty: $(cat "$T/check.out")"
pass "--rebuild-index: $(tail -1 "$T/check.out")"

victim=$(cd "$(landed_root dev1)" && find data -type f -name '*.csv' | sort | head -1)
[ -n "$victim" ] || fail "no csv landed"
printf 'edited downstream\n' >> "$(landed_root dev1)/$victim"
rc=0
"$CTL" index check "$T/rstate" --bronze "$T/bronze" > "$T/check.out" || rc=$?
[ $rc -eq 1 ] || { cat "$T/check.out"; fail "index check exited $rc after a landed file was modified"; }
grep -q "$victim" "$T/check.out" || { cat "$T/check.out"; fail "index check did not name $victim"; }
grep -q "stale [1-9]" "$T/check.out" || fail "index check counted no stale entry: $(tail -1 "$T/check.out")"
pass "index check exits 1 and names $victim after it was modified downstream"

stop_receiver
write_receiver_config 'layout: "{device}/{path}"
index:
  flush_interval: 1h'
: > "$T/receiver.log"
start_receiver
S3="$T/src3/fresh"
"$CTL" bench gen --size 2MiB --seed 7 "$S3" > /dev/null
n3=$(find "$S3" -type f | wc -l)
write_agent_config dev1 "$S3" 'batch:
  max_files: 30'
before=$(ls "$T/bronze/_manifests/dev1" | wc -l)
ship dev1
[ "$(field dev1 chunks_new)" -gt 0 ] || fail "the new tree sent no chunk data"
nb3=$(($(ls "$T/bronze/_manifests/dev1" | wc -l) - before))
[ "$nb3" -ge 2 ] || fail "expected several new batches, got $nb3"
kill -9 "$RECV_PID"; wait "$RECV_PID" 2>/dev/null || true; RECV_PID=""
: > "$T/receiver.log"
start_receiver
grep -q "did not stop cleanly" "$T/receiver.log" || fail "the crash was not noticed"
grep "index caught up from the manifests" "$T/receiver.log" | grep -q ": $nb3 batches, $n3 files" ||
    { grep "caught up" "$T/receiver.log"; fail "catch-up did not add the $nb3 batches of $n3 files"; }
write_agent_config dev1 "$S3" 'batch:
  max_files: 30'
ship_with dev1 --all
[ "$(field dev1 chunks_new)" -eq 0 ] || fail "re-ship after the catch-up sent $(field dev1 chunks_new) chunks"
same_tree "$S3" "$(landed_root dev1)/fresh"
one=$(cd "$S3" && find . -type f | sort | head -1 | sed 's|^\./|fresh/|')
vers=$(cat "$T/bronze/_manifests/dev1/"*.jsonl | grep -F "\"landed\":\"dev1/$one\"" | grep -o '"version":[0-9]*' | sort | uniq | tr '\n' ' ')
[ "$vers" = '"version":1 "version":2 ' ] || fail "versions of dev1/$one in the manifests: $vers (want 1 then 2)"
pass "kill -9 before the index was written: caught up $nb3 batches of $n3 files; re-ship sent no chunk data; versions went on at 2"

# Names a device may legitimately send, even when they look like our
# temporary files, land; and the sweep after a crash removes only what an
# unfinished batch left (the tree's tagged temporaries and the exact
# temporary-manifest location), never a landed file.
mkdir -p "$T/src2/d/logs/_manifests"
printf 'x\n' > "$T/src2/d/ok.txt"
printf 'y\n' > "$T/src2/d/.a.ingest-tmp.b"
printf '{"event":1}\n' > "$T/src2/d/logs/_manifests/.2024.jsonl.tmp"
write_agent_config dev2 "$T/src2/d"
"$AGENT" --config "$T/dev2.yaml" --once > "$T/dev2.out" 2> "$T/dev2.err" || { cat "$T/dev2.err"; fail "dev2's odd names were refused"; }
same_tree "$T/src2/d" "$(landed_root dev2)/d"
tag=$(cat "$T/bronze/_manifests/.tmp-tag")
echo "$tag" | grep -Eq '^[0-9a-f]{16}$' || fail "no temporary-file tag in bronze/_manifests/.tmp-tag: '$tag'"
# what a crash mid-batch leaves: a tagged temporary file and a temporary manifest
: > "$(landed_root dev2)/d/.ok.txt.ingest-tmp-$tag.b99"
: > "$T/bronze/_manifests/dev2/.b99.jsonl.tmp"
kill -9 "$RECV_PID"; wait "$RECV_PID" 2>/dev/null || true; RECV_PID=""
: > "$T/receiver.log"
start_receiver
grep -q "did not stop cleanly: removed 2 temporary files" "$T/receiver.log" || { cat "$T/receiver.log"; fail "the sweep did not remove exactly the 2 leftovers"; }
[ ! -e "$(landed_root dev2)/d/.ok.txt.ingest-tmp-$tag.b99" ] || fail "the tagged temporary file survived the sweep"
[ ! -e "$T/bronze/_manifests/dev2/.b99.jsonl.tmp" ] || fail "the temporary manifest survived the sweep"
same_tree "$T/src2/d" "$(landed_root dev2)/d"
pass "files named .a.ingest-tmp.b and logs/_manifests/.2024.jsonl.tmp land and survive the crash sweep; its leftovers are removed"

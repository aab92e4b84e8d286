#!/bin/sh
# after_ship: move:DIR where the move fails for a while (a regular file
# stands where DIR's parent should be: mkdir fails with ENOTDIR).  The files
# ship and land, the moves fail with one warning for the batch, the files
# stay in the source, and the batch's record stays in the journal.  Once the
# obstacle is gone, the agent moves every file on a later try (1 s, then
# less often), without being restarted and without shipping them again.
. "$(dirname "$0")/lib.sh"
setup_keys
write_receiver_config 'layout: "{device}/{path}"'
start_receiver
S="$T/src/data"
K="$T/keep"
mkdir -p "$S/sub" "$K"
for i in 1 2 3 4 5; do gen_log "$S/f$i.log" $((i * 2000)) "$i"; done
gen_log "$S/sub/g.log" 7000 9
cp -a "$S/." "$K/"
echo "not a directory" > "$T/blocked"
write_agent_config dev1 "$S" 'batch:
  max_wait: 200ms'
sed -i "s|^  - path: .*|&\n    settle: 200ms\n    after_ship: move:$T/blocked/moved|" "$T/dev1.yaml"
"$AGENT" --config "$T/dev1.yaml" > "$T/dev1.out" 2> "$T/dev1.err" &
APID=$!
# wait for the batch to land and its moves to fail
i=0
until grep -q 'after_ship move .*tried again later' "$T/dev1.err"; do
    i=$((i + 1)); [ $i -gt 400 ] && { kill "$APID"; cat "$T/dev1.err"; fail "no failed move was logged"; }
    sleep 0.05
done
same_tree "$K" "$(landed_root dev1)/data"
sleep 1.5 # a retry or two fail meanwhile (quietly)
[ "$(find "$S" -type f | wc -l)" = 6 ] || fail "files left the source although their moves failed"
n=$(grep -c 'after_ship move ' "$T/dev1.err")
[ "$n" = 1 ] || { cat "$T/dev1.err"; fail "$n warnings for one batch's failed moves (want 1: the rest counted)"; }
grep -q 'more files of this batch failed the same way (6 in all)' "$T/dev1.err" ||
    { cat "$T/dev1.err"; fail "the failed moves are not counted"; }
rm "$T/blocked"
i=0
while [ "$(find "$S" -type f | wc -l)" != 0 ]; do
    i=$((i + 1)); [ $i -gt 600 ] && { kill "$APID"; cat "$T/dev1.err"; fail "the moves were not tried again once they could succeed"; }
    sleep 0.05
done
kill "$APID"; wait "$APID" || fail "the agent did not stop cleanly"
same_tree "$K" "$T/blocked/moved"
grep -q 'moved=6 ' "$T/dev1.out" || { cat "$T/dev1.out"; fail "the summary does not count 6 moves"; }
grep -q 'files=6 ' "$T/dev1.out" || { cat "$T/dev1.out"; fail "the files were shipped more than once"; }
pass "moves that failed (ENOTDIR) were retried and done once they could be, the files shipped once"

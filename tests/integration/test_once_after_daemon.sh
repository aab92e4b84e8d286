#!/bin/sh
# Batches the daemon queued (the core down), replayed by a --once run: they
# land once, and the files of a source with after_ship: delete are deleted
# by the daemon when it runs again (--once runs no after-ship action: it
# leaves those batches ACKED in the journal for the daemon, instead of
# forgetting them and leaving the files in the source for good).
. "$(dirname "$0")/lib.sh"
setup_keys
write_receiver_config 'layout: "{device}/{path}"'
start_receiver
pin_receiver_port
stop_receiver
S="$T/src/data"
mkdir -p "$S"
for i in $(seq 1 20); do gen_log "$S/q$i.log" 200 "$i"; done
write_agent_config dev1 "$S" 'batch:
  max_files: 10
  max_wait: 200ms'
sed -i 's|^  - path: .*|&\n    settle: 200ms\n    after_ship: delete|' "$T/dev1.yaml"
"$AGENT" --config "$T/dev1.yaml" > "$T/d.out" 2> "$T/d.err" &
P=$!
until_status queue.batches 2
kill -TERM "$P"
wait "$P" || fail "the daemon exited non-zero on SIGTERM"
start_receiver
rc=0
"$AGENT" --config "$T/dev1.yaml" --once > "$T/dev1.out" 2> "$T/dev1.err" || rc=$?
[ "$rc" = 0 ] || { cat "$T/dev1.err"; fail "--once exited $rc replaying the daemon's batches"; }
grep -q "2 batches (20 files) journaled and not acknowledged: shipping them first" "$T/dev1.err" ||
    { cat "$T/dev1.err"; fail "--once did not ship the daemon's 2 queued batches first"; }
[ "$(field dev1 batches)" = 2 ] || fail "--once shipped $(field dev1 batches) batches, expected the daemon's 2"
[ "$(find "$S" -type f | wc -l)" = 20 ] || fail "--once deleted files (it runs no after-ship action)"
same_tree "$S" "$(landed_root dev1)/data"
"$AGENT" --config "$T/dev1.yaml" > "$T/d2.out" 2> "$T/d2.err" &
P=$!
i=0
while [ -n "$(find "$S" -type f)" ]; do
    i=$((i + 1)); [ $i -gt 400 ] && { cat "$T/d2.err"; fail "the daemon did not delete the files --once had replayed ($(find "$S" -type f | wc -l) left)"; }
    sleep 0.05
done
kill -TERM "$P"
wait "$P" || fail "the daemon exited non-zero on SIGTERM"
[ "$(manifest_paths dev1 | sort | uniq -d | wc -l)" = 0 ] || fail "a path was recorded twice"
[ "$(manifest_paths dev1 | wc -l)" = 20 ] || fail "$(manifest_paths dev1 | wc -l) FILE records for 20 files"
pass "the daemon's 2 queued batches replayed by --once, landed once; the daemon then deleted all 20 files"

#!/bin/sh
# The daemon builds the next journaled batch (reads, chunks and hashes its
# files) on its builder thread while it ships one.  The test hook
# INGEST_TEST_SHIP_PAUSE holds the agent after each batch's manifest is
# sent; while the first batch is held there, the second one must be built
# ("built ahead" in the debug log: a daemon that builds each batch only
# when its turn comes never builds during the pause).  Then everything
# lands once, byte-identical, and the status counts each file read once.
. "$(dirname "$0")/lib.sh"
command -v python3 >/dev/null 2>&1 || { pass "skipped: python3 is needed to read the JSON"; exit 0; }
setup_keys
write_receiver_config 'layout: "{device}/{path}"'
start_receiver
S="$T/src/data"
mkdir -p "$S" "$T/keep"
for i in 1 2 3 4 5 6; do head -c 100000 /dev/urandom > "$S/f$i.bin"; done
cp "$S"/*.bin "$T/keep/"
write_agent_config dev1 "$S" 'batch:
  max_files: 3
  max_wait: 100ms
log:
  level: debug'
sed -i 's|^  - path: .*|&\n    settle: 100ms|' "$T/dev1.yaml"
: > "$T/pause"
INGEST_TEST_SHIP_PAUSE="$T/pause" "$AGENT" --config "$T/dev1.yaml" > "$T/dev1.out" 2> "$T/dev1.err" &
AGENT_PID=$!
trap '[ -n "$AGENT_PID" ] && kill "$AGENT_PID" 2> /dev/null && wait "$AGENT_PID" 2> /dev/null; cleanup' EXIT
i=0
while [ ! -e "$T/pause.paused" ]; do
    i=$((i + 1)); [ $i -gt 400 ] && { cat "$T/dev1.err"; fail "the agent never paused after a manifest"; }
    sleep 0.05
done
i=0
while ! grep -q 'built ahead: 3 of its 3 files' "$T/dev1.err"; do
    i=$((i + 1)); [ $i -gt 400 ] && { cat "$T/dev1.err"; fail "the second batch was not built while the first was held"; }
    sleep 0.05
done
[ -e "$T/pause.paused" ] || fail "the first batch was not held any more when the second was built"
pass "the second batch was built while the first one was held after its manifest"
rm "$T/pause"
SOCK="$T/astate-dev1/agent.sock"
until_status totals.files_shipped 6
status_json
[ "$(jget totals.bytes_read)" = 600000 ] || { cat "$T/status.json"; fail "bytes_read $(jget totals.bytes_read), expected each file read once (600000)"; }
[ "$(jget totals.batches_acked)" = 2 ] || fail "batches_acked $(jget totals.batches_acked), expected 2"
kill -TERM "$AGENT_PID"
rc=0; wait "$AGENT_PID" || rc=$?
AGENT_PID=""
[ "$rc" = 0 ] || fail "agent exited $rc"
same_tree "$T/keep" "$(landed_root dev1)/data"
dups=$(manifest_paths dev1 | sort | uniq -d | wc -l)
[ "$dups" = 0 ] || fail "$dups paths recorded more than once"
pass "both batches landed once, byte-identical; each file read once"

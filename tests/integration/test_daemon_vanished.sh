#!/bin/sh
# Files that vanish between batches (issue 18, item 9): taken into a
# journaled batch while the receiver is down, four of six files are deleted
# before the batch ships.  The rest lands once, byte-identical; the four are
# dropped and counted (status totals.files_vanished, the summary line at
# exit, the files_skipped metric's "vanished" reason), and the log says so
# in one grouped line with a few names, never a warning per file.
. "$(dirname "$0")/lib.sh"
command -v python3 >/dev/null 2>&1 || { pass "skipped: python3 is needed to read the JSON"; exit 0; }
setup_keys
write_receiver_config 'layout: "{device}/{path}"'
start_receiver
ADDR=$(cat "$T/receiver.addr")
sed -i "s|^listen: .*|listen: $ADDR|" "$T/receiver.yaml"
stop_receiver
S="$T/src/data"
mkdir -p "$S" "$T/keep"
for i in 1 2 3 4 5 6; do head -c 20000 /dev/urandom > "$S/v$i.bin"; done
write_agent_config dev1 "$S" 'batch:
  max_files: 10
  max_wait: 200ms
rescan_interval: 300ms
metrics:
  listen: 127.0.0.1:0'
sed -i 's|^  - path: .*|&\n    settle: 100ms|' "$T/dev1.yaml"
SOCK="$T/astate-dev1/agent.sock"
"$AGENT" --config "$T/dev1.yaml" > "$T/dev1.out" 2> "$T/dev1.err" &
AGENT_PID=$!
trap '[ -n "$AGENT_PID" ] && kill "$AGENT_PID" 2> /dev/null && wait "$AGENT_PID" 2> /dev/null; cleanup' EXIT
until_status queue.files 6
until_status queue.batches 1
rm "$S/v1.bin" "$S/v2.bin" "$S/v4.bin" "$S/v6.bin"
cp "$S/v3.bin" "$S/v5.bin" "$T/keep/"
start_receiver
until_status totals.files_shipped 2
until_status queue.files 0
status_json; w0=$(jget walks.count)
i=0 # a few walks more: nothing else is said about the four
while status_json && [ "$(jget walks.count)" -lt $((w0 + 3)) ]; do i=$((i + 1)); [ $i -gt 300 ] && fail "no walks"; sleep 0.05; done
[ "$(jget totals.files_vanished)" = 4 ] || { cat "$T/status.json"; fail "status totals.files_vanished is not 4"; }
same_tree "$T/keep" "$(landed_root dev1)/data"
[ "$(find "$(landed_root dev1)/data" -type f | wc -l)" = 2 ] || fail "not exactly the two files left landed"
grep -q 'skipped .*: vanished' "$T/dev1.err" && { cat "$T/dev1.err"; fail "a line per vanished file"; }
[ "$(grep -c 'vanished' "$T/dev1.err")" = 1 ] || { cat "$T/dev1.err"; fail "not one grouped line about the vanished files"; }
grep 'vanished' "$T/dev1.err" | grep -q '4 files vanished.*v1.bin' || { cat "$T/dev1.err"; fail "the grouped line has no count or names"; }
amaddr=$(sed -n 's|.*metrics on http://\([^/]*\)/metrics.*|\1|p' "$T/dev1.err" | tail -1)
bash -c 'exec 3<>/dev/tcp/${0%:*}/${0##*:}; printf "GET /metrics HTTP/1.0\r\n\r\n" >&3; cat <&3' "$amaddr" |
    sed '1,/^\r*$/d' | tr -d '\r' > "$T/a1"
[ "$(awk '$1 == "ingest_agent_files_skipped_total{reason=\"vanished\"}" { print $2 }' "$T/a1")" = 4 ] ||
    { grep skipped "$T/a1"; fail "/metrics: files_skipped_total{reason=vanished} is not 4"; }
"$CTL" status --socket "$SOCK" > "$T/st.txt" || fail "ingestctl status failed"
grep -q '^vanished  *4 ' "$T/st.txt" || { cat "$T/st.txt"; fail "ingestctl status (text) does not show 4 vanished"; }
pass "4 of 6 files deleted before their batch shipped: 2 landed once, 4 counted, one grouped line"
kill -TERM $AGENT_PID
rc=0; wait $AGENT_PID || rc=$?
AGENT_PID=""
[ "$rc" = 0 ] || fail "agent exited $rc"
grep -q ' files_vanished=4' "$T/dev1.out" || { cat "$T/dev1.out"; fail "the summary line has no files_vanished=4"; }
pass "the summary line at exit counts them (files_vanished=4)"

#!/bin/sh
# The daemon's per-file records do not outlive their files:
#   - 20 short-lived .part files, seen while settling, then renamed to
#     .log (which ship at once), and 10 .tmp files passed over by a filter,
#     then deleted: once a rescan ran, no settle or filter record is left
#     (there were 30 for good);
#   - 5 shipped files deleted: their shipped records go, the 15 others stay
#     (and are not shipped again).
. "$(dirname "$0")/lib.sh"
command -v python3 >/dev/null 2>&1 || { pass "skipped: python3 is needed to read the JSON"; exit 0; }
setup_keys
write_receiver_config 'layout: "{device}/{path}"'
start_receiver
S="$T/src/data"
mkdir -p "$S"
write_agent_config dev1 "$S" 'batch:
  max_wait: 100ms
rescan_interval: 400ms'
sed -i 's|^  - path: .*|&\n    settle: 1h\n    exclude: ["*.tmp"]|' "$T/dev1.yaml"
SOCK="$T/astate-dev1/agent.sock"
"$AGENT" --config "$T/dev1.yaml" > "$T/dev1.out" 2> "$T/dev1.err" &
AGENT_PID=$!
i=0; while ! status_json; do i=$((i + 1)); [ $i -gt 200 ] && fail "no status"; sleep 0.05; done
for i in $(seq 1 20); do gen_log "$S/x$i.part" $((i * 100 + 500)) $i; done
# each .tmp appears whole (made beside, renamed in): a walk that saw one half-written would count
# two versions of it (the filter counts once per version)
mkdir -p "$T/stage"
for i in $(seq 1 10); do gen_log "$T/stage/t$i.tmp" 300 $((i + 50)); mv "$T/stage/t$i.tmp" "$S/t$i.tmp"; done
until_status settling.files 20
until_status skipped.exclude 10
for i in $(seq 1 20); do mv "$S/x$i.part" "$S/x$i.log"; done
rm "$S"/*.tmp
until_status totals.files_shipped 20
w=$(jget walks.count)
until_status walks.count $((w + 3))
[ "$(jget records.settle_filter)" = 0 ] || { cat "$T/status.json"; fail "settle/filter records of files gone are left"; }
[ "$(jget records.shipped)" = 20 ] || { cat "$T/status.json"; fail "shipped records are not 20"; }
pass "20 renamed .part files and 10 filtered .tmp files gone: no record of them left"
for i in 1 2 3 4 5; do rm "$S/x$i.log"; done
w=$(jget walks.count)
until_status walks.count $((w + 3))
[ "$(jget records.shipped)" = 15 ] || { cat "$T/status.json"; fail "shipped records of 5 deleted files are left"; }
[ "$(jget totals.files_shipped)" = 20 ] || fail "files shipped again"
kill -TERM "$AGENT_PID"
rc=0; wait "$AGENT_PID" || rc=$?
[ "$rc" = 0 ] || fail "agent exited $rc"
same_tree "$S" "$(landed_root dev1)/data"
pass "5 shipped files deleted: their records went, the 15 others stay, nothing shipped twice"

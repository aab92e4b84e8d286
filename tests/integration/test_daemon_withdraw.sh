#!/bin/sh
# A file deleted while its batch is being shipped (issue 18, item 9): the
# agent withdraws it from the batch in flight (FILE_WITHDRAWN, feature
# "withdraw", docs/protocol.md) and the rest of the batch lands, once; no
# replay of the batch.  The test hook INGEST_TEST_SHIP_PAUSE holds the agent
# after the batch's manifest is sent, so the file goes deterministically
# between the manifest and the reading of its chunks.  Asserted: the other
# four files land once, byte-identical; the batch manifest records the
# vanished file as refused with "vanished at the edge ..."; the directory
# made for it alone at the core is gone; status batches_replayed 0 and
# files_vanished 1, each file taken and read once, the metric
# files_skipped{vanished} 1; one log line.
. "$(dirname "$0")/lib.sh"
command -v python3 >/dev/null 2>&1 || { pass "skipped: python3 is needed to read the JSON"; exit 0; }
setup_keys
write_receiver_config 'layout: "{device}/{path}"'
start_receiver
S="$T/src/data"
mkdir -p "$S/a0" "$T/keep"
# data/a0/w3.bin sorts first: the core's cursor is in its temporary file when it is withdrawn
head -c 150000 /dev/urandom > "$S/a0/w3.bin"
for f in a1 a2 z4 z5; do head -c 150000 /dev/urandom > "$S/$f.bin"; cp "$S/$f.bin" "$T/keep/"; done
write_agent_config dev1 "$S" 'batch:
  max_files: 10
  max_wait: 300ms
rescan_interval: 300ms
metrics:
  listen: 127.0.0.1:0'
sed -i 's|^  - path: .*|&\n    settle: 100ms|' "$T/dev1.yaml"
SOCK="$T/astate-dev1/agent.sock"
: > "$T/pause"
INGEST_TEST_SHIP_PAUSE="$T/pause" "$AGENT" --config "$T/dev1.yaml" > "$T/dev1.out" 2> "$T/dev1.err" &
AGENT_PID=$!
trap '[ -n "$AGENT_PID" ] && kill "$AGENT_PID" 2> /dev/null && wait "$AGENT_PID" 2> /dev/null; cleanup' EXIT
i=0
while [ ! -e "$T/pause.paused" ]; do
    i=$((i + 1)); [ $i -gt 400 ] && { cat "$T/dev1.err"; fail "the agent never paused after a manifest"; }
    sleep 0.05
done
cp -p "$S/a0/w3.bin" "$T/w3.keep"
mv "$S/a0/w3.bin" "$T/hold" # it goes (and comes back below, the same bytes and mtime)
rm "$T/pause"
until_status totals.batches_acked 1
until_status queue.files 0
status_json
[ "$(jget totals.batches_replayed)" = 0 ] || { cat "$T/status.json" "$T/dev1.err"; fail "the batch was replayed"; }
# thrown away and its files taken again (the old way) shows as files taken twice and bytes read twice
[ "$(jget totals.files_taken)" = 5 ] && [ "$(jget totals.bytes_read)" = 750000 ] ||
    { cat "$T/status.json" "$T/dev1.err"; fail "the batch was thrown away and its files taken again"; }
[ "$(jget totals.files_shipped)" = 4 ] || { cat "$T/status.json"; fail "files_shipped is not 4"; }
[ "$(jget totals.files_vanished)" = 1 ] || { cat "$T/status.json"; fail "files_vanished is not 1"; }
[ "$(jget totals.files_refused)" = 0 ] || { cat "$T/status.json"; fail "the vanished file counted as refused"; }
same_tree "$T/keep" "$(landed_root dev1)/data"
[ "$(find "$(landed_root dev1)/data" -type f | wc -l)" = 4 ] || { find "$(landed_root dev1)"; fail "not exactly four files landed"; }
[ -e "$(landed_root dev1)/data/a0" ] && { find "$(landed_root dev1)"; fail "the directory made for the withdrawn file is left in bronze"; }
[ "$(count_tmp "$T/bronze")" = 0 ] || fail "temporary files left in bronze"
python3 - "$T/bronze/_manifests/dev1" <<'PY' || fail "the batch manifest does not record the withdrawn file"
import json, os, sys
d = sys.argv[1]
ms = sorted(os.listdir(d))
assert len(ms) == 1, ms
recs = [json.loads(l) for l in open(os.path.join(d, ms[0]))]
files = [r for r in recs if r.get("type") == "file"]
assert len(files) == 5, files
w = [r for r in files if r["path"] == "data/a0/w3.bin"]
assert len(w) == 1 and "vanished at the edge" in w[0].get("refused", ""), w
assert w[0]["landed"] == "", w
assert all("refused" not in r for r in files if r["path"] != "data/a0/w3.bin")
PY
pass "a file deleted while its batch was shipped: withdrawn, the other 4 landed once, byte-identical; manifest records it; no replay"
n=$(grep -c 'vanished' "$T/dev1.err")
[ "$n" = 1 ] || { cat "$T/dev1.err"; fail "$n log lines about the vanished file, expected 1"; }
grep -q 'withdrawn by the device' "$T/receiver.log" || { tail "$T/receiver.log"; fail "the receiver log does not say so"; }
amaddr=$(sed -n 's|.*metrics on http://\([^/]*\)/metrics.*|\1|p' "$T/dev1.err" | tail -1)
bash -c 'exec 3<>/dev/tcp/${0%:*}/${0##*:}; printf "GET /metrics HTTP/1.0\r\n\r\n" >&3; cat <&3' "$amaddr" |
    sed '1,/^\r*$/d' | tr -d '\r' > "$T/a1"
[ "$(awk '$1 == "ingest_agent_files_skipped_total{reason=\"vanished\"}" { print $2 }' "$T/a1")" = 1 ] ||
    { grep skipped "$T/a1"; fail "/metrics: files_skipped_total{reason=vanished} is not 1"; }
# The withdrawn file never landed: when it comes back unchanged (moved away and back, or copied
# with its mtime) it is found and shipped like a new file, not taken for one already shipped.
mv "$T/hold" "$S/a0/w3.bin"
i=0
until [ -f "$(landed_root dev1)/data/a0/w3.bin" ]; do
    i=$((i + 1)); [ $i -gt 400 ] && { cat "$T/dev1.err"; fail "the withdrawn file came back unchanged and was never shipped"; }
    sleep 0.05
done
cmp -s "$(landed_root dev1)/data/a0/w3.bin" "$T/w3.keep" || fail "the withdrawn file landed with other bytes when it came back"
pass "the withdrawn file, back with the same bytes and mtime, ships"
kill -TERM $AGENT_PID
rc=0; wait $AGENT_PID || rc=$?
AGENT_PID=""
[ "$rc" = 0 ] || fail "agent exited $rc"
grep -q ' replayed=0 .* files_vanished=1' "$T/dev1.out" || { cat "$T/dev1.out"; fail "the summary line: replayed=0, files_vanished=1"; }
pass "one log line, counted in status, metrics and the summary (replayed=0 files_vanished=1)"

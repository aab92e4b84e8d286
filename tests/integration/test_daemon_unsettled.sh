#!/bin/sh
# The daemon never ships a version of a file that did not settle:
#   - a CSV written row by row (a header and rows, a pause longer than
#     settle, more rows 0.1 s apart, another pause, then its trailer), with
#     settle short and batch.max_wait long, so that each batch holding it is
#     built after the file changed again: every version of it recorded in
#     the manifests (every version that landed) is the complete file, with
#     its trailer; the versions taken too early left their batch and settled
#     again (said in the log).
. "$(dirname "$0")/lib.sh"
setup_keys
write_receiver_config 'layout: "{device}/{path}"'
start_receiver
S="$T/src/data"
mkdir -p "$S"
write_agent_config dev1 "$S" 'batch:
  max_wait: 3s
rescan_interval: 500ms'
sed -i 's|^  - path: .*|&\n    settle: 500ms|' "$T/dev1.yaml"
"$AGENT" --config "$T/dev1.yaml" > "$T/dev1.out" 2> "$T/dev1.err" &
AGENT_PID=$!
agent_log() { i=0; while ! grep -q -- "$1" "$T/dev1.err" 2>/dev/null; do i=$((i + 1)); [ $i -gt "${2:-300}" ] && { cat "$T/dev1.err"; fail "no '$1' in the agent log"; }; sleep 0.05; done; }
agent_log "running: "

C="$S/run.csv"
row() { printf '%d,2024-05-01T00:00:%02d.000Z,%d.%03d,ok\n' "$1" $(($1 % 60)) $(($1 * 7 % 100)) $(($1 * 37 % 1000)) >> "$C"; }
(
    echo "seq,time,value,status" >> "$C"
    for k in 0 1 2 3 4; do row $k; done
    sleep 1.5                                  # settles (500 ms) and is taken: its batch is built 3 s later
    k=5; while [ $k -lt 45 ]; do row $k; k=$((k + 1)); sleep 0.1; done   # ... while rows still arrive
    sleep 1.5                                  # settles again, is taken again
    echo "# end: 45 rows" >> "$C"              # the trailer, before that batch is built
) &
WPID=$!
wait $WPID
size=$(stat -c %s "$C")
L="$(landed_root dev1)/data/run.csv"
i=0
while [ ! -f "$L" ] || ! cmp -s "$C" "$L"; do
    i=$((i + 1)); [ $i -gt 600 ] && { cat "$T/dev1.err"; fail "run.csv did not land complete"; }
    sleep 0.05
done
sleep 1
kill -TERM $AGENT_PID
rc=0; wait $AGENT_PID || rc=$?
[ "$rc" = 0 ] || { cat "$T/dev1.err"; fail "agent exited $rc"; }
recs=$(grep -h '"path":"data/run.csv"' "$T/bronze/_manifests/dev1/"*.jsonl)
n=$(echo "$recs" | grep -c . || true)
bad=$(echo "$recs" | grep -v "\"size\":$size[,}]" | grep -o '"size":[0-9]*' | tr '\n' ' ' || true)
[ -z "$bad" ] || { cat "$T/dev1.err"; fail "versions of run.csv without its trailer landed ($bad; complete: $size bytes)"; }
pass "run.csv landed $n time(s), always complete with its trailer ($size bytes)"
grep -q "changed since it was taken" "$T/dev1.err" || { cat "$T/dev1.err"; fail "no log line for a file leaving its batch"; }
pass "the versions taken too early left their batch and settled again"

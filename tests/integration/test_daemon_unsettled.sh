#!/bin/sh
# The daemon never ships a version of a file that did not settle:
#   - a CSV written row by row (a header and rows, a pause longer than
#     settle, more rows 0.1 s apart, another pause, then its trailer), with
#     settle short and batch.max_wait long, so that each batch holding it is
#     built after the file changed again: every version of it recorded in
#     the manifests (every version that landed) is the complete file, with
#     its trailer; the versions taken too early left their batch and settled
#     again (said in the log);
#   - the same for a replayed batch: a file taken and sent (the receiver
#     stopped before it answered, then killed) and written again before the
#     batch is replayed is not replayed as it is then: it leaves the batch,
#     settles again, and only its complete version lands.
. "$(dirname "$0")/lib.sh"
setup_keys
write_receiver_config 'layout: "{device}/{path}"'
start_receiver
ADDR=$(cat "$T/receiver.addr")
sed -i "s|^listen: .*|listen: $ADDR|" "$T/receiver.yaml"   # a restart listens on the same address
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
# every_version_complete NAME SIZE: each FILE record of data/NAME in the manifests has SIZE bytes
every_version_complete() {
    recs=$(grep -h "\"path\":\"data/$1\"" "$T/bronze/_manifests/dev1/"*.jsonl)
    n=$(echo "$recs" | grep -c . || true)
    bad=$(echo "$recs" | grep -v "\"size\":$2[,}]" | grep -o '"size":[0-9]*' | tr '\n' ' ' || true)
    [ -z "$bad" ] || { cat "$T/dev1.err"; fail "versions of $1 without its trailer landed ($bad; complete: $2 bytes)"; }
    pass "$1 landed $n time(s), always complete with its trailer ($2 bytes)"
}
every_version_complete run.csv "$size"
grep -q "run.csv changed since it was taken" "$T/dev1.err" || { cat "$T/dev1.err"; fail "no log line for a file leaving its batch"; }
pass "the versions taken too early left their batch and settled again"

# A replay: the receiver stops answering, the file is taken and its batch sent (in flight), the
# receiver is killed; the file is written again before the batch is replayed.
SOCK="$T/astate-dev1/agent.sock"
in_flight() { "$CTL" status --json --socket "$SOCK" 2>/dev/null | grep -q '"in_flight":"'; }
kill -STOP "$RECV_PID"
C="$S/replay.csv"
echo "seq,time,value,status" >> "$C"
for k in 0 1 2 3 4; do row $k; done
i=0
until in_flight; do
    i=$((i + 1)); [ $i -gt 300 ] && { kill -9 "$RECV_PID"; cat "$T/dev1.err"; fail "the batch of replay.csv was not sent"; }
    sleep 0.05
done
(
    k=5; while [ $k -lt 35 ]; do row $k; k=$((k + 1)); sleep 0.1; done   # the batch is replayed meanwhile
    sleep 1.5
    echo "# end: 35 rows" >> "$C"
) &
WPID=$!
kill -9 "$RECV_PID"
wait "$RECV_PID" 2>/dev/null || true
RECV_PID=""
start_receiver
wait $WPID
size=$(stat -c %s "$C")
L="$(landed_root dev1)/data/replay.csv"
i=0
while [ ! -f "$L" ] || ! cmp -s "$C" "$L"; do
    i=$((i + 1)); [ $i -gt 600 ] && { cat "$T/dev1.err"; fail "replay.csv did not land complete"; }
    sleep 0.05
done
sleep 1
kill -TERM $AGENT_PID
rc=0; wait $AGENT_PID || rc=$?
[ "$rc" = 0 ] || { cat "$T/dev1.err"; fail "agent exited $rc"; }
every_version_complete replay.csv "$size"
grep -q "replay.csv changed since it was taken" "$T/dev1.err" || { cat "$T/dev1.err"; fail "the replayed batch did not drop replay.csv"; }
pass "a replayed batch: the file written since it was sent left it and settled again"

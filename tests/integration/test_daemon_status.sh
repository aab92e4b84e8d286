#!/bin/sh
# The daemon's status socket and throttle window:
#   - `ingestctl status --json` is one valid JSON object whose counts match
#     what landed (files, bytes, skipped by reason, queue empty, last ack);
#     the text form shows the tables; the socket is mode 0600;
#   - with a throttle.window that excludes now nothing is sent for 3 s and
#     the status says the window is closed; SIGHUP with the window removed
#     and everything lands.
. "$(dirname "$0")/lib.sh"
setup_keys
write_receiver_config 'layout: "{device}/{path}"'
start_receiver
S="$T/src/data"
mkdir -p "$S/sub"
for i in 1 2 3 4 5 6; do gen_log "$S/sub/f$i.log" $((i * 1000)) $i; done
gen_log "$S/never.skip" 300 9
write_agent_config dev1 "$S" 'batch:
  max_wait: 200ms'
sed -i 's|^  - path: .*|&\n    settle: 100ms\n    exclude: ["*.skip"]|' "$T/dev1.yaml"
SOCK="$T/astate-dev1/agent.sock"
"$AGENT" --config "$T/dev1.yaml" > "$T/dev1.out" 2> "$T/dev1.err" &
AGENT_PID=$!
agent_log() { i=0; while ! grep -q -- "$1" "$T/dev1.err"; do i=$((i + 1)); [ $i -gt "${2:-300}" ] && { cat "$T/dev1.err"; fail "no '$1' in the agent log"; }; sleep 0.05; done; }
status_json() { "$CTL" status --json --socket "$SOCK" > "$T/status.json" || fail "ingestctl status --json failed"; }
# jget KEY.PATH: a value of $T/status.json (python3 when present, else a grep of the flat key)
jget() {
    if command -v python3 >/dev/null 2>&1; then
        python3 -c 'import json,sys
v = json.load(open(sys.argv[1]))
for k in sys.argv[2].split("."):
    v = v[int(k)] if isinstance(v, list) else v[k]
print(json.dumps(v) if isinstance(v, (dict, list, bool)) or v is None else v)' "$T/status.json" "$1"
    else
        grep -o "\"${1##*.}\":[^,}]*" "$T/status.json" | head -1 | sed 's/^[^:]*://; s/"//g'
    fi
}
i=0
while :; do
    "$CTL" status --json --socket "$SOCK" > "$T/status.json" 2>/dev/null || true
    [ -s "$T/status.json" ] && [ "$(jget totals.files_shipped)" = 6 ] && [ "$(jget queue.files)" = 0 ] && break
    i=$((i + 1)); [ $i -gt 300 ] && { cat "$T/status.json" "$T/dev1.err"; fail "status never showed 6 files shipped"; }
    sleep 0.05
done
same_tree "$S/sub" "$(landed_root dev1)/data/sub"
if command -v python3 >/dev/null 2>&1; then
    python3 -c 'import json,sys; d = json.load(open(sys.argv[1])); assert isinstance(d, dict)' "$T/status.json" ||
        fail "status --json is not a JSON object"
fi
bytes=$(cat "$S"/sub/*.log | wc -c)
[ "$(jget totals.bytes_shipped)" = "$bytes" ] || { cat "$T/status.json"; fail "bytes_shipped is not $bytes"; }
[ "$(jget totals.files_taken)" = 6 ] || fail "files_taken is not 6"
[ "$(jget skipped.exclude)" = 1 ] || { cat "$T/status.json"; fail "skipped.exclude is not 1"; }
[ "$(jget sources.0.name)" = data ] || fail "source name"
[ "$(jget sources.0.state)" = watching ] || fail "source state is not watching"
[ "$(jget backpressure.on)" = false ] || fail "backpressure shown on"
[ "$(jget in_flight)" = null ] || fail "a batch shown in flight with an empty queue"
[ "$(jget last_ack)" != null ] || fail "no last ack"
# what settled and shipped since the walk counts as shipped, not settling (they stayed so until the next walk)
[ "$(jget settling.files)" = 0 ] || { cat "$T/status.json"; fail "settling.files is $(jget settling.files) with everything shipped"; }
[ "$(jget records.shipped)" = 6 ] || { cat "$T/status.json"; fail "records.shipped is $(jget records.shipped), not 6"; }
wire=$(jget totals.wire_bytes_out)
[ "$wire" -gt 0 ] || fail "wire bytes out is 0"
[ "$(stat -c %a "$SOCK")" = 600 ] || fail "socket mode is $(stat -c %a "$SOCK"), not 600"
"$CTL" status --socket "$SOCK" > "$T/status.txt" || fail "ingestctl status failed"
grep -q '^SOURCE  *STATE  *SPOOL  *PATH' "$T/status.txt" || { cat "$T/status.txt"; fail "no source table"; }
grep -q "^data  *watching  *none  *$S\$" "$T/status.txt" || { cat "$T/status.txt"; fail "no source row"; }
grep -q "^shipped (acked)  *6  *$bytes\$" "$T/status.txt" || { cat "$T/status.txt"; fail "no shipped row"; }
grep -q '^backpressure  *off' "$T/status.txt" || fail "no backpressure line"
pass "status: JSON counts match what landed (6 files, $bytes bytes, 1 excluded); text table; socket 0600"

# 40 at once, 12 silent clients holding places meanwhile: each gets its answer (an agent answering as many
# as it can says busy, and ingestctl asks again), never an empty one with exit 0 or a SIGPIPE
python3 -c 'import socket, sys, time
held = [socket.socket(socket.AF_UNIX) for _ in range(12)]
for h in held: h.connect(sys.argv[1])
time.sleep(3)' "$SOCK" &
HOLD=$!
sleep 0.2
for i in $(seq 1 40); do
    ( rc=0; "$CTL" status --json --socket "$SOCK" > "$T/many.$i" 2> "$T/many.$i.err" || rc=$?; echo "$rc" > "$T/many.$i.rc" ) &
done
wait_all=0
for i in $(seq 1 40); do
    while [ ! -s "$T/many.$i.rc" ]; do wait_all=$((wait_all + 1)); [ $wait_all -gt 600 ] && fail "status clients did not end"; sleep 0.05; done
    [ "$(cat "$T/many.$i.rc")" = 0 ] || fail "status client $i exited $(cat "$T/many.$i.rc"): $(cat "$T/many.$i.err")"
    python3 -c 'import json,sys; json.load(open(sys.argv[1]))' "$T/many.$i" || fail "status client $i got no JSON: $(head -c 80 "$T/many.$i")"
done
kill "$HOLD" 2> /dev/null || true
wait "$HOLD" 2> /dev/null || true
pass "40 status clients at once beside 12 silent ones: each got its JSON"
rc=0
"$CTL" status --socket "$SOCK" --config "$T/dev1.yaml" > "$T/both.out" 2>&1 || rc=$?
[ "$rc" = 2 ] && grep -q "give one" "$T/both.out" || { cat "$T/both.out"; fail "status with --socket and --config (exit $rc)"; }

# a window that excludes now: +2 h .. +3 h
W="$(date -d '+2 hours' +%H:%M)-$(date -d '+3 hours' +%H:%M)"
cp "$T/dev1.yaml" "$T/dev1.yaml.open"
printf 'throttle:\n  window: "%s"\n' "$W" >> "$T/dev1.yaml"
kill -HUP $AGENT_PID
agent_log "configuration reloaded"
# with nothing to ship yet, the status says the window is closed (it said open until a batch met it)
i=0
while status_json && [ "$(jget throttle.window_open)" != false ]; do
    i=$((i + 1)); [ $i -gt 60 ] && { cat "$T/status.json"; fail "with nothing queued, status says the window is open"; }
    sleep 0.05
done
for i in 1 2 3; do gen_log "$S/w$i.log" 4000 $((i + 20)); done
agent_log "throttle.window $W is closed"
sleep 3
[ ! -e "$(landed_root dev1)/data/w1.log" ] || fail "a file landed while the window was closed"
status_json
[ "$(jget throttle.window_open)" = false ] || { cat "$T/status.json"; fail "status does not say the window is closed"; }
[ "$(jget queue.files)" = 3 ] || { cat "$T/status.json"; fail "queue does not hold the 3 files"; }
"$CTL" status --socket "$SOCK" | grep -q "window $W (CLOSED)" || fail "text status does not say CLOSED"
pass "window closed: nothing sent for 3 s, status says so (3 files queued)"
cp "$T/dev1.yaml.open" "$T/dev1.yaml"
kill -HUP $AGENT_PID
i=0
while [ ! -f "$(landed_root dev1)/data/w3.log" ] || ! cmp -s "$S/w3.log" "$(landed_root dev1)/data/w3.log"; do
    i=$((i + 1)); [ $i -gt 300 ] && { cat "$T/dev1.err"; fail "w3.log did not land after the window was removed"; }
    sleep 0.05
done
kill -TERM $AGENT_PID
rc=0; wait $AGENT_PID || rc=$?
[ "$rc" = 0 ] || fail "agent exited $rc"
rm "$S/never.skip"
same_tree "$S" "$(landed_root dev1)/data"
[ ! -e "$SOCK" ] || fail "the socket was left behind"
pass "SIGHUP without the window: everything landed; socket removed at exit"

#!/bin/sh
# The receiver's Prometheus endpoint during a real ship: counters match what
# the agent shipped, and the exposition parses (every sample has a # TYPE,
# each histogram's +Inf bucket equals its _count).
. "$(dirname "$0")/lib.sh"
setup_keys
write_receiver_config 'layout: "{device}/{path}"
metrics:
  listen: 127.0.0.1:0'
RECV_ARGS="--stats-interval 0.3" start_receiver
maddr=$(sed -n 's|.*metrics on http://\([^/]*\)/metrics.*|\1|p' "$T/receiver.log" | tail -1)
[ -n "$maddr" ] || { cat "$T/receiver.log"; fail "the receiver did not report its metrics address"; }

# scrape PATH: the HTTP response body (bash's /dev/tcp; no curl needed)
scrape() {
    bash -c 'exec 3<>/dev/tcp/${0%:*}/${0##*:}; printf "GET %s HTTP/1.0\r\nHost: x\r\n\r\n" "$1" >&3; cat <&3' "$maddr" "$1"
}

"$CTL" bench gen --size 6MiB "$T/src/data" > /dev/null
write_agent_config dev1 "$T/src/data"
ship dev1
scrape /metrics > "$T/m1.txt"
head -1 "$T/m1.txt" | grep -q '^HTTP/1.0 200' || { head -5 "$T/m1.txt"; fail "GET /metrics did not answer 200"; }
sed '1,/^\r*$/d' "$T/m1.txt" | tr -d '\r' > "$T/m1"

# Clients are answered concurrently: with 4 connections open that send
# nothing (each held by the responder up to its 2 s request deadline), a
# scrape is still answered at once, not after them (hardening finding 7).
FLOOD="$BUILD/tools/conn-flood"
"$FLOOD" --address "$maddr" --idle 4 --rate 0 --seconds 6 --status "$T/mflood.status" > "$T/mflood.out" 2>&1 &
MFLOOD=$!
i=0
until [ -s "$T/mflood.status" ] && [ "$(sed -n 's/.*opened=\([0-9]*\).*/\1/p' "$T/mflood.status")" -ge 4 ] 2>/dev/null; do
    i=$((i + 1)); [ $i -gt 100 ] && { cat "$T/mflood.out"; fail "the silent clients did not connect"; }
    sleep 0.05
done
timeout 1.5 bash -c 'exec 3<>/dev/tcp/${0%:*}/${0##*:}; printf "GET /metrics HTTP/1.0\r\n\r\n" >&3; cat <&3' "$maddr" \
    > "$T/m-busy.txt" || fail "a scrape waited behind 4 silent clients"
head -1 "$T/m-busy.txt" | grep -q '^HTTP/1.0 200' || fail "a scrape beside 4 silent clients did not answer 200"
wait "$MFLOOD"
pass "a scrape is answered at once beside 4 silent clients"
# 12 silent clients (the responder answered 8 at once, and closed a ninth without a word, so 8 idle
# connections failed every scrape): answered; past what it takes at once (32), a 503 that says to retry,
# not a silent close; a request ended by bare newlines is answered at once, not after the 2 s deadline
silent_then_scrape() { # N: N connections that say nothing (held by a bash), then one scrape into $T/m-flood.txt
    bash -c 'for i in $(seq 10 $((9 + $1))); do eval "exec $i<>/dev/tcp/${0%:*}/${0##*:}"; done; echo up; sleep 3' \
        "$maddr" "$1" > "$T/silent.out" 2>&1 &
    SPID=$!
    i=0
    until grep -q up "$T/silent.out"; do
        i=$((i + 1)); [ $i -gt 100 ] && { cat "$T/silent.out"; fail "the $1 silent clients did not connect"; }
        sleep 0.05
    done
    sleep 0.2 # (each taken by the responder)
    # (a busy answer is followed by a reset, the request unread: what came before it counts)
    timeout 1.5 bash -c 'exec 3<>/dev/tcp/${0%:*}/${0##*:}; printf "GET /metrics HTTP/1.0\r\n\r\n" >&3; cat <&3' "$maddr" \
        > "$T/m-flood.txt" 2> /dev/null || true
    [ -s "$T/m-flood.txt" ] || fail "a scrape beside $1 silent clients got no answer within 1.5 s"
    wait "$SPID"
}
silent_then_scrape 12
head -1 "$T/m-flood.txt" | grep -q '^HTTP/1.0 200' || fail "a scrape beside 12 silent clients: $(head -1 "$T/m-flood.txt")"
silent_then_scrape 40
head -1 "$T/m-flood.txt" | grep -q '^HTTP/1.0 503' || fail "a scrape beside 40 silent clients: $(head -1 "$T/m-flood.txt")"
grep -q '^Retry-After: 1' "$T/m-flood.txt" || fail "the 503 does not say when to retry"
timeout 1 bash -c 'exec 3<>/dev/tcp/${0%:*}/${0##*:}; printf "GET /metrics HTTP/1.0\n\n" >&3; cat <&3' "$maddr" \
    > "$T/m-lf.txt" || fail "a request ended by bare newlines waited for the deadline"
head -1 "$T/m-lf.txt" | grep -q '^HTTP/1.0 200' || fail "a request ended by bare newlines: $(head -1 "$T/m-lf.txt")"
pass "12 silent clients: a scrape is answered; past 32, a 503 with Retry-After; bare newlines end a request"
val() { awk -v k="$1" '$1 == k { print $2 }' "$T/m1"; }
[ "$(val 'ingest_receiver_files_landed_total{device="dev1"}')" = "$(field dev1 files)" ] || fail "files_landed_total differs from what was shipped"
[ "$(val 'ingest_receiver_bytes_landed_total{device="dev1"}')" = "$(field dev1 bytes)" ] || fail "bytes_landed_total differs"
[ "$(val 'ingest_receiver_chunks_received_total{device="dev1"}')" = "$(field dev1 chunks_new)" ] || fail "chunks_received_total differs"
[ "$(val 'ingest_receiver_batches_landed_total{device="dev1"}')" = "$(field dev1 batches)" ] || fail "batches_landed_total differs"
[ "$(val 'ingest_receiver_chunk_bytes_received_total{device="dev1"}')" = "$(field dev1 chunk_bytes)" ] || fail "chunk bytes differ"
pass "counters match what was shipped"

# check_exposition FILE: every sample has a # TYPE; each histogram's +Inf bucket equals its _count
check_exposition() {
    awk '
        /^# TYPE / { type[$3] = $4; next }
        /^#/ || NF == 0 { next }
        {
            name = $1; sub(/\{.*/, "", name); base = name
            sub(/_(bucket|sum|count)$/, "", base)
            if (!(name in type) && !(base in type && type[base] == "histogram")) { print "no TYPE for " name; bad = 1 }
            if (name ~ /_bucket$/ && $1 ~ /le="\+Inf"/) { key = $1; sub(/,?le="\+Inf"/, "", key); sub(/_bucket/, "_count", key); sub(/\{\}/, "", key); inf[key] = $2 }
            if (name ~ /_count$/) cnt[$1] = $2
        }
        END {
            n = 0
            for (k in inf) { n++; if (!(k in cnt) || cnt[k] != inf[k]) { print "histogram " k ": +Inf " inf[k] " != count " cnt[k]; bad = 1 } }
            if (n == 0) { print "no histogram series"; bad = 1 }
            exit bad
        }' "$1"
}

# Every sample belongs to a metric with a # TYPE line; histograms are consistent.
check_exposition "$T/m1" || fail "the exposition does not parse"
pass "exposition parses: TYPE for every sample, +Inf bucket equals _count"

scrape /other | head -1 | grep -q '^HTTP/1.0 404' || fail "an unknown path is not 404"
pass "unknown paths get 404"

# A trained dictionary: the first ship sends it (received), the second finds it stored (held), and once
# that session ended it holds none: a lookup not released would keep it held for good, never to be
# removed to make room.
dev1_files=$(field dev1 files) # (dev1 ships 9 more files below)
mkdir -p "$T/dsamples" "$T/src/dd"
i=0
while [ $i -lt 200 ]; do
    printf '{"ts":%d,"sensor":"pump-%d","value":%d.%d,"status":"ok"}\n' $((1700000000 + i * 7)) $((i % 13)) \
        $((i * 31 % 1000)) $((i % 10)) > "$T/dsamples/s$i.json"
    i=$((i + 1))
done
"$CTL" dict train --out "$T/m.dict" "$T/dsamples"/* > /dev/null 2>&1 || fail "dict train failed"
for i in 1 2 3 4 5 6; do cp "$T/dsamples/s$i.json" "$T/src/dd/"; done
write_agent_config dev1 "$T/src/dd" "compression:
  dictionary: $T/m.dict"
ship dev1
for i in 7 8 9; do cp "$T/dsamples/s$i.json" "$T/src/dd/"; done
ship dev1
scrape /metrics | tr -d '\r' > "$T/m3"
val3() { awk -v k="$1" '$1 == k { print $2 }' "$T/m3"; }
[ "$(val3 'ingest_receiver_dictionaries_total{result="received"}')" = 1 ] || fail "the dictionary was not received once: $(grep dictionaries "$T/m3")"
[ "$(val3 'ingest_receiver_dictionaries_total{result="held"}')" = 1 ] || fail "the second ship did not find it stored: $(grep dictionaries "$T/m3")"
[ "$(val3 ingest_receiver_dictionaries_held)" = 0 ] || fail "a session that ended still holds a dictionary: $(grep dictionaries "$T/m3")"
pass "a dictionary received, then found stored; none held once the sessions ended"
dev1_files=$((dev1_files + 9))


# The agent's endpoint (daemon mode): counters match what it shipped.
"$CTL" bench gen --size 3MiB --seed 7 "$T/src/d2" > /dev/null
write_agent_config dev2 "$T/src/d2" 'metrics:
  listen: 127.0.0.1:0
batch:
  max_wait: 200ms'
sed -i 's|^  - path: .*|&\n    settle: 100ms|' "$T/dev2.yaml"
"$AGENT" --config "$T/dev2.yaml" --stats-interval 0.2 > "$T/dev2.out" 2> "$T/dev2.err" &
AGENT_PID=$!
trap 'kill "$AGENT_PID" 2>/dev/null || true; cleanup' EXIT
i=0
while ! grep -q 'metrics on http://' "$T/dev2.err"; do
    i=$((i + 1)); [ $i -gt 200 ] && { cat "$T/dev2.err"; fail "the agent did not report its metrics address"; }
    sleep 0.05
done
amaddr=$(sed -n 's|.*metrics on http://\([^/]*\)/metrics.*|\1|p' "$T/dev2.err" | tail -1)
nfiles=$(find "$T/src/d2" -type f | wc -l)
nbytes=$(find "$T/src/d2" -type f -printf '%s\n' | awk '{ s += $1 } END { print s }')
ascrape() {
    bash -c 'exec 3<>/dev/tcp/${0%:*}/${0##*:}; printf "GET /metrics HTTP/1.0\r\n\r\n" >&3; cat <&3' "$amaddr" |
        sed '1,/^\r*$/d' | tr -d '\r' > "$T/a1"
}
aval() { awk -v k="$1" '$1 == k { print $2 }' "$T/a1"; }
i=0
while :; do
    ascrape
    # (the latency of a batch is observed just after its files are counted)
    [ "$(aval ingest_agent_files_shipped_total)" = "$nfiles" ] &&
        [ "$(aval ingest_agent_file_latency_seconds_count)" = "$nfiles" ] && break
    i=$((i + 1)); [ $i -gt 300 ] && { cat "$T/a1" "$T/dev2.err"; fail "the agent's metrics never showed $nfiles files shipped"; }
    sleep 0.1
done
[ "$(aval ingest_agent_bytes_shipped_total)" = "$nbytes" ] || fail "ingest_agent_bytes_shipped_total is not $nbytes"
[ "$(aval ingest_agent_bytes_read_total)" = "$nbytes" ] || fail "ingest_agent_bytes_read_total is not $nbytes"
[ "$(aval 'ingest_agent_files_seen_total{source="d2"}')" -ge "$nfiles" ] || fail "files_seen_total{source=d2} < $nfiles"
[ "$(aval 'ingest_agent_info{device="dev2"}')" = 1 ] || fail "ingest_agent_info has no device label"
chunks=$(aval ingest_agent_chunks_total)
sent=$(aval ingest_agent_chunks_sent_total)
dedup=$(aval ingest_agent_chunks_deduplicated_total)
[ "$chunks" -gt 0 ] && [ $((sent + dedup)) = "$chunks" ] || fail "chunks sent $sent + deduplicated $dedup != chunks $chunks"
[ "$(aval 'ingest_agent_batches_total{outcome="acked"}')" -ge 1 ] || fail "no acked batch counted"
[ "$(aval ingest_agent_file_latency_seconds_count)" = "$nfiles" ] || fail "latency histogram count is not $nfiles"
scrape /metrics | sed '1,/^\r*$/d' | tr -d '\r' > "$T/m2"
[ "$(awk '$1 == "ingest_receiver_chunks_received_total{device=\"dev2\"}" { print $2 }' "$T/m2")" = "$sent" ] ||
    fail "the receiver's chunks received for dev2 differ from the agent's chunks sent ($sent)"
check_exposition "$T/a1" || fail "the agent's exposition does not parse"
pass "agent /metrics: files, bytes, chunks and latency count match what was shipped; the exposition parses"

# The same figures in ingestctl status --json, and as JSON log lines (--stats-interval).
# A stats line is written every interval: wait for one written after the files shipped and their
# latency was observed (just after they are counted).
i=0
until grep ']: stats {' "$T/dev2.err" | tail -1 | grep '"ingest_agent_files_shipped_total":'"$nfiles"'[,}]' |
    grep -q '"ingest_agent_file_latency_seconds":{.*"count":'"$nfiles"'[,}]'; do
    i=$((i + 1)); [ $i -gt 200 ] && { grep ']: stats {' "$T/dev2.err" | tail -2; fail "no stats line shows $nfiles files shipped"; }
    sleep 0.05
done
"$CTL" status --json --socket "$T/astate-dev2/agent.sock" > "$T/st.json" || fail "ingestctl status --json failed"
if command -v python3 >/dev/null 2>&1; then
    python3 - "$T/st.json" "$T/dev2.err" "$nfiles" <<'PY' || fail "status --json metrics or the stats log lines are wrong"
import json, sys
st = json.load(open(sys.argv[1]))
n = int(sys.argv[3])
assert st["metrics"]["ingest_agent_files_shipped_total"] == n, st["metrics"]
lines = [l.split("stats ", 1)[1] for l in open(sys.argv[2]) if "]: stats {" in l]
assert len(lines) >= 2, "fewer than 2 stats lines"
last = json.loads(lines[-1])
assert last["ingest_agent_files_shipped_total"] == n, last
assert last["ingest_agent_file_latency_seconds"]["count"] == n
PY
else
    grep -q '"ingest_agent_files_shipped_total":'"$nfiles" "$T/st.json" || fail "status --json has no metrics"
    [ "$(grep -c ']: stats {' "$T/dev2.err")" -ge 2 ] || fail "fewer than 2 stats lines"
fi
kill "$AGENT_PID"; wait "$AGENT_PID" 2>/dev/null
pass "status --json carries the metrics; --stats-interval logs them as JSON lines"

# The receiver's --stats-interval lines, the last one written as it stops.
kill "$RECV_PID"; wait "$RECV_PID" 2>/dev/null || true
RECV_PID=""
if command -v python3 >/dev/null 2>&1; then
    python3 - "$T/receiver.log" "$dev1_files" "$nfiles" <<'PY' || fail "the receiver's stats lines are wrong"
import json, sys
lines = [l.split("stats ", 1)[1] for l in open(sys.argv[1]) if "]: stats {" in l]
assert len(lines) >= 2, "fewer than 2 stats lines"
last = json.loads(lines[-1])
landed = last["ingest_receiver_files_landed_total"]
assert landed["dev1"] == int(sys.argv[2]) and landed["dev2"] == int(sys.argv[3]), landed
assert "verify" in last["ingest_receiver_stage_seconds_total"], last["ingest_receiver_stage_seconds_total"]
PY
else
    [ "$(grep -c ']: stats {' "$T/receiver.log")" -ge 2 ] || fail "fewer than 2 receiver stats lines"
fi
"$RECEIVER" --config "$T/receiver.yaml" --stats-interval 0 > /dev/null 2>&1 && fail "--stats-interval 0 accepted"
pass "receiver --stats-interval logs its metrics as JSON lines, the last at exit; 0 is refused"

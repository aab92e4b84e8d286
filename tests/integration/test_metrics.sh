#!/bin/sh
# The receiver's Prometheus endpoint during a real ship: counters match what
# the agent shipped, and the exposition parses (every sample has a # TYPE,
# each histogram's +Inf bucket equals its _count).
. "$(dirname "$0")/lib.sh"
setup_keys
write_receiver_config 'layout: "{device}/{path}"
metrics:
  listen: 127.0.0.1:0'
start_receiver
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
val() { awk -v k="$1" '$1 == k { print $2 }' "$T/m1"; }
[ "$(val 'ingest_receiver_files_landed_total{device="dev1"}')" = "$(field dev1 files)" ] || fail "files_landed_total differs from what was shipped"
[ "$(val 'ingest_receiver_bytes_landed_total{device="dev1"}')" = "$(field dev1 bytes)" ] || fail "bytes_landed_total differs"
[ "$(val 'ingest_receiver_chunks_received_total{device="dev1"}')" = "$(field dev1 chunks_new)" ] || fail "chunks_received_total differs"
[ "$(val 'ingest_receiver_batches_landed_total{device="dev1"}')" = "$(field dev1 batches)" ] || fail "batches_landed_total differs"
[ "$(val 'ingest_receiver_chunk_bytes_received_total{device="dev1"}')" = "$(field dev1 chunk_bytes)" ] || fail "chunk bytes differ"
pass "counters match what was shipped"

# Every sample belongs to a metric with a # TYPE line; histograms are consistent.
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
    }' "$T/m1" || fail "the exposition does not parse"
pass "exposition parses: TYPE for every sample, +Inf bucket equals _count"

scrape /other | head -1 | grep -q '^HTTP/1.0 404' || fail "an unknown path is not 404"
pass "unknown paths get 404"

#!/bin/sh
# ingestctl bench stages on a small tree: one JSON object whose byte, file
# and chunk counts match the tree (and `ingestctl chunk`), with the CPU
# seconds of every stage, the ceiling they set, and nothing left under the
# landing directory; usage errors exit 2, a missing tree 1.
. "$(dirname "$0")/lib.sh"
"$CTL" bench gen --size 4MiB "$T/tree" > /dev/null
bytes=$(find "$T/tree" -type f -printf '%s\n' | awk '{ s += $1 } END { print s }')
files=$(find "$T/tree" -type f -size +0 | wc -l)
chunks=$(find "$T/tree" -type f -print0 | xargs -0 "$CTL" chunk | grep -vc '^#')
mkdir -p "$T/land"
"$CTL" bench stages --runs 3 --land "$T/land" "$T/tree" > "$T/out.json" 2> "$T/err" || { cat "$T/err"; fail "bench stages failed"; }
cat "$T/out.json"
[ "$(wc -l < "$T/out.json")" -eq 1 ] || fail "expected one JSON line"
if command -v python3 > /dev/null; then
    python3 -c 'import json,sys; json.load(open(sys.argv[1]))' "$T/out.json" || fail "python3 rejects the JSON"
fi
get() { tr ',{}' '\n\n\n' < "$T/out.json" | sed -n "s/^\"$1\"://p" | head -1; }
[ "$(get bytes)" = "$bytes" ] || fail "bytes $(get bytes) != $bytes"
[ "$(get files)" = "$files" ] || fail "files $(get files) != $files"
[ "$(get chunks)" = "$chunks" ] || fail "chunks $(get chunks) != $chunks (ingestctl chunk)"
enc=$(get encoded_bytes)
[ "$enc" -gt 0 ] && [ "$enc" -lt "$bytes" ] || fail "encoded_bytes $enc not below $bytes (the tree compresses)"
sec=$(sed -n 's/.*"seconds":{\([^}]*\)}.*/\1/p' "$T/out.json")
for k in read chunk hash compress seal loopback open decompress verify land; do
    echo "$sec" | tr ',' '\n' | grep -Eq "^\"$k\":[0-9]+\.[0-9]{3}$" || fail "no seconds for stage $k in: $sec"
done
# total_seconds is printed to the ms: 5% leeway on a tree this small
awk -v t="$(get total_seconds)" -v c="$(get ceiling_mbps_2cores)" -v b="$bytes" 'BEGIN {
    r = (t > 0 && c > 0) ? 2 * b / t / 1e6 / c : 0; exit !(r > 0.95 && r < 1.05) }' ||
    fail "ceiling_mbps_2cores $(get ceiling_mbps_2cores) is not 2 x bytes / total_seconds $(get total_seconds)"
# With --land where /proc/stat is readable: what the run up to its syncfs cost the machine beyond the process, and a
# ceiling counting it that is not above the other
dur=$(get durable_cpu_seconds)
echo "$dur" | grep -Eq '^[0-9]+\.[0-9]{3}$' || fail "durable_cpu_seconds is not a number of seconds: $dur"
awk -v t="$(get total_seconds)" -v d="$dur" -v c="$(get ceiling_durable_mbps_2cores)" -v c0="$(get ceiling_mbps_2cores)" -v b="$bytes" 'BEGIN {
    r = (t + d > 0 && c > 0) ? 2 * b / (t + d) / 1e6 / c : 0; exit !(r > 0.95 && r < 1.05 && c <= c0) }' ||
    fail "ceiling_durable_mbps_2cores $(get ceiling_durable_mbps_2cores) is not 2 x bytes / (total_seconds + durable_cpu_seconds $dur), or is above ceiling_mbps_2cores"
[ -z "$(ls -A "$T/land")" ] || fail "bench stages left files under --land: $(ls -A "$T/land")"
pass "bench stages: $bytes bytes, $files files, $chunks chunks, ceiling $(get ceiling_mbps_2cores) MB/s on 2 cores"

"$CTL" bench stages "$T/tree" > "$T/out2.json" || fail "bench stages without --land failed"
grep -q '"land":null' "$T/out2.json" || fail "without --land the land stage is not null: $(cat "$T/out2.json")"
grep -q '"durable_cpu_seconds":null,"ceiling_durable_mbps_2cores":null' "$T/out2.json" ||
    fail "without --land durable_cpu_seconds and its ceiling are not null: $(cat "$T/out2.json")"
rc=0; "$CTL" bench stages --runs 0 "$T/tree" 2> "$T/err" || rc=$?
[ $rc -eq 2 ] && grep -q -- '--runs must be' "$T/err" || fail "--runs 0: exit $rc, $(cat "$T/err")"
rc=0; "$CTL" bench stages "$T/nope" 2> "$T/err" || rc=$?
[ $rc -eq 1 ] && grep -q "nope" "$T/err" || fail "missing tree: exit $rc, $(cat "$T/err")"
pass "bench stages: no --land gives land null; bad --runs exits 2; a missing tree exits 1 naming it"

# The agent encodes as bench stages does (adaptive, shuffle2 agreed with the
# receiver): the chunk bytes of a real ship of the tree are the same.
setup_keys
write_receiver_config 'layout: "{device}/{path}"'
start_receiver
write_agent_config dev1 "$T/tree"
ship dev1
[ "$(field dev1 chunk_bytes)" = "$enc" ] || fail "the agent sent $(field dev1 chunk_bytes) bytes of chunks, bench stages encoded $enc"
same_tree "$T/tree" "$(landed_root dev1)/tree"
pass "a ship of the tree sends the $enc chunk bytes bench stages encoded, and lands it byte for byte"

# Batches end where the agent's do, by files or by bytes (batch.max_bytes), and so do the groups of
# small chunks: 1,500 small files in batches of at most 300 KiB.
gen_events "$T/ev/events" 1500
"$CTL" bench stages --batch-bytes 300KiB "$T/ev" > "$T/ev.json" 2> "$T/err" || { cat "$T/err"; fail "bench stages --batch-bytes failed"; }
evenc=$(tr ',{}' '\n\n\n' < "$T/ev.json" | sed -n 's/^"encoded_bytes"://p' | head -1)
rm -rf "$T/astate-dev1"
write_agent_config dev1 "$T/ev" "batch:
  max_bytes: 300KiB"
ship dev1
[ "$(field dev1 batches)" -ge 5 ] || fail "the small files went in $(field dev1 batches) batches of at most 300 KiB"
[ "$(field dev1 chunk_bytes)" = "$evenc" ] ||
    fail "batches of 300 KiB: the agent sent $(field dev1 chunk_bytes) bytes of chunks, bench stages --batch-bytes 300KiB encoded $evenc"
rc=0; "$CTL" bench stages --batch-bytes x "$T/ev" 2> "$T/err" || rc=$?
[ $rc -eq 2 ] && grep -q -- "--batch-bytes" "$T/err" || fail "--batch-bytes x: exit $rc, $(cat "$T/err")"
pass "batches of at most 300 KiB: $(field dev1 batches) of them, the $evenc chunk bytes bench stages --batch-bytes 300KiB encoded; a bad --batch-bytes exits 2"

#!/bin/sh
# Append 1% to a 100 MiB log: the second ship sends only the new tail.
# A deterministic 100 MiB text log is shipped, 1 MiB is appended, and the
# second run's chunk_bytes and wire_bytes (from the agent's summary) must be
# at most 2% of the file size; the landed file equals the source both times.
. "$(dirname "$0")/lib.sh"
setup_keys
write_receiver_config 'layout: "{device}/{path}"'
start_receiver
mkdir -p "$T/src/logs"
size=$((100 * 1024 * 1024))
gen_log "$T/src/logs/app.log" $size 1
[ "$(stat -c %s "$T/src/logs/app.log")" -eq $size ] || fail "generator wrote $(stat -c %s "$T/src/logs/app.log") bytes"
write_agent_config dev1 "$T/src/logs"

ship dev1
[ "$(field dev1 files)" -eq 1 ] || fail "first run shipped $(field dev1 files) files"
[ "$(field dev1 bytes)" -eq $size ] || fail "first run shipped $(field dev1 bytes) bytes"
[ "$(field dev1 chunks_new)" -gt 0 ] || fail "first run sent no chunk"
cmp "$T/src/logs/app.log" "$(landed_root dev1)/logs/app.log" || fail "landed log differs after the first ship"
pass "100 MiB log lands byte-identical"

gen_log "$T/src/logs/app.log" $((1024 * 1024)) 2
total=$((size + 1024 * 1024))
ship dev1
cb=$(field dev1 chunk_bytes)
wb=$(field dev1 wire_bytes)
[ "$(field dev1 bytes)" -eq $total ] || fail "second run shipped $(field dev1 bytes) bytes"
[ "$cb" -gt 0 ] || fail "the appended tail sent no chunk data"
[ $((cb * 50)) -le $total ] || fail "append of 1% sent chunk_bytes=$cb (> 2% of $total)"
[ $((wb * 50)) -le $total ] || fail "append of 1% sent wire_bytes=$wb (> 2% of $total)"
[ "$(field dev1 chunks_dedup)" -gt 0 ] || fail "no chunk deduplicated on the second run"
cmp "$T/src/logs/app.log" "$(landed_root dev1)/logs/app.log" || fail "landed log differs after the append"
pass "append of 1 MiB to 100 MiB sent chunk_bytes=$cb wire_bytes=$wb (limit $((total / 50)))"
grep -q "chunks new" "$T/receiver.log" || fail "receiver logged no landed batch"

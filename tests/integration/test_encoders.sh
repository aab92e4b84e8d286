#!/bin/sh
# compression.encoders: the agent's encoder threads (1, 2, 3) send the same
# chunk frames as one thread does, and as `ingestctl bench stages`
# encodes: the chunk bytes, the chunk groups and the landed tree are the same
# for every count.  The tree has many small files (chunk groups), files of
# a few chunks, a log of many compressible chunks (zstd kept after the first
# probe) and random data of over 64 chunks (stored raw, probed again every
# 64 chunks; files whose first chunk is random and the rest text), so
# the per-file hints carried between encoders matter, and 1.5 MB of small
# files.
. "$(dirname "$0")/lib.sh"
"$CTL" bench gen --size 6MiB "$T/tree" > /dev/null
gen_log "$T/tree/big.log" 6000000 7
head -c 9000000 /dev/urandom > "$T/tree/random.bin"
# Files whose first chunk is random bytes (cut where `ingestctl chunk`
# cuts them) and the rest text: after the first chunk's probe the next 64
# are stored raw, text included.  A chunk encoded while its file's probe is
# still running, with a fresh hint instead of the probe's, would be probed
# and compressed, and the chunk bytes would differ.
for i in 1 2 3 4 5 6 7 8; do
    rm -f "$T/text"
    gen_log "$T/text" 1500000 $((10 + i))
    head -c 300000 /dev/urandom > "$T/r"
    first=$("$CTL" chunk "$T/r" | head -1 | cut -d' ' -f2)
    { head -c "$first" "$T/r"; cat "$T/text"; } > "$T/tree/mixed-$i.bin"
done
rm "$T/text" "$T/r"
# 1.5 MB of small JSON files (groups of up to 1 MiB, beyond chunking.max), planned alike by every count;
# bench stages ends its groups where the agent's default batches end (4000 files: it used to end them every 1000)
gen_events "$T/tree/events" 1500
"$CTL" bench stages "$T/tree" > "$T/stages.json" 2> "$T/err" || { cat "$T/err"; fail "bench stages failed"; }
enc=$(tr ',{}' '\n\n\n' < "$T/stages.json" | sed -n 's/^"encoded_bytes"://p' | head -1)
[ -n "$enc" ] && [ "$enc" -gt 0 ] || fail "no encoded_bytes from bench stages: $(cat "$T/stages.json")"
setup_keys
groups1=""
for n in 1 2 3; do
    rm -rf "$T/bronze" "$T/rstate" "$T/astate-dev1"
    write_receiver_config 'layout: "{device}/{path}"'
    start_receiver
    write_agent_config dev1 "$T/tree" "compression:
  encoders: $n"
    ship dev1
    stop_receiver
    [ "$(field dev1 chunks_new)" = "$(field dev1 chunks)" ] || fail "encoders $n: not every chunk was sent"
    [ "$(field dev1 chunk_bytes)" = "$enc" ] ||
        fail "encoders $n: the agent sent $(field dev1 chunk_bytes) bytes of chunks, bench stages encoded $enc"
    # (the wire bytes may differ by a digit of the batch header: its time)
    g=$(field dev1 chunk_groups)
    [ -z "$groups1" ] && groups1=$g
    [ "$g" = "$groups1" ] || fail "encoders $n: $g chunk groups, one encoder sent $groups1"
    same_tree "$T/tree" "$(landed_root dev1)/tree"
    pass "encoders $n: $enc chunk bytes as bench stages encoded, in $g groups and single chunks as one encoder, the tree landed byte for byte"
done

# The key is checked: 5 is past its bound.
rm -rf "$T/astate-dev1"
write_agent_config dev1 "$T/tree" "compression:
  encoders: 5"
rc=0; "$AGENT" --config "$T/dev1.yaml" --once > "$T/bad.out" 2> "$T/bad.err" || rc=$?
[ $rc -ne 0 ] && grep -q "compression.encoders" "$T/bad.err" || fail "encoders 5: exit $rc, $(cat "$T/bad.err")"
pass "compression.encoders 5 is refused, naming the key"

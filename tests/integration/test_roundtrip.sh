#!/bin/sh
# The real receiver and agent on loopback: a generated sensor tree lands
# byte for byte; a second run of the unchanged tree sends no chunk data;
# a renamed directory of 100 small files lands for few bytes: new paths to
# the agent, they are pushed (docs/protocol.md, "Pushed chunks"): their bytes
# travel again, compressed together, instead of their ids.  With ids listed
# (batch.push_max 0) the same rename sends no chunk data.
. "$(dirname "$0")/lib.sh"
setup_keys
write_receiver_config 'layout: "{device}/{path}"'
start_receiver
"$CTL" bench gen --size 8MiB "$T/src/data" > /dev/null
mkdir -p "$T/src/data/many"
i=0; while [ $i -lt 100 ]; do printf 'file %d of a folder that will be renamed\n%0500d\n' $i $i > "$T/src/data/many/f$i.txt"; i=$((i+1)); done
write_agent_config dev1 "$T/src/data"

ship dev1
[ "$(field dev1 chunks_new)" -gt 0 ] || fail "first run sent no chunk"
same_tree "$T/src/data" "$(landed_root dev1)/data"
pass "initial ship lands byte-identical"
[ "$(ls "$T/bronze/_manifests/dev1" | wc -l)" -ge 1 ] || fail "no manifest written"

ship dev1
[ "$(field dev1 chunks_new)" -eq 0 ] || fail "unchanged tree sent $(field dev1 chunks_new) chunks"
[ "$(field dev1 chunk_bytes)" -eq 0 ] || fail "unchanged tree sent chunk bytes"
pass "second run of an unchanged tree sends no chunk data"

mv "$T/src/data/many" "$T/src/data/many-renamed"
ship dev1
[ "$(field dev1 files)" -eq 100 ] || fail "the renamed directory shipped $(field dev1 files) files, not 100"
# 100 files of ~550 alike bytes: a few KB as one chunk group
[ "$(field dev1 chunk_bytes)" -le 8000 ] || fail "renamed directory sent $(field dev1 chunk_bytes) chunk bytes"
same_tree "$T/src/data/many-renamed" "$(landed_root dev1)/data/many-renamed"
pushed_wire=$(field dev1 wire_bytes)
write_agent_config dev1 "$T/src/data" 'batch: {push_max: 0}'
mv "$T/src/data/many-renamed" "$T/src/data/many-again"
ship dev1
[ "$(field dev1 chunks_new)" -eq 0 ] || fail "renamed directory, ids listed, sent $(field dev1 chunks_new) chunks"
# (on these alike files the pushed bytes cost less than 100 ids)
[ "$pushed_wire" -lt "$(field dev1 wire_bytes)" ] || fail "pushed: $pushed_wire wire bytes, ids listed: $(field dev1 wire_bytes)"
same_tree "$T/src/data/many-again" "$(landed_root dev1)/data/many-again"
pass "renamed directory of 100 small files: $pushed_wire wire bytes pushed; with ids listed no chunk data, $(field dev1 wire_bytes) wire bytes"

# Two devices at once: both sessions are served concurrently and both trees land.
"$CTL" bench gen --size 6MiB --seed 7 "$T/src2/data" > /dev/null
"$CTL" bench gen --size 6MiB --seed 8 "$T/src3/data" > /dev/null
write_agent_config dev2 "$T/src2/data"
sed "s/id: dev2/id: dev1/; s/keys\/dev2.key/keys\/dev1.key/; s/astate-dev2/astate-dev1b/" "$T/dev2.yaml" > "$T/dev1b.yaml"
sed -i "s|$T/src2/data|$T/src3/data|" "$T/dev1b.yaml"
"$AGENT" --config "$T/dev2.yaml" --once > "$T/dev2.out" 2> "$T/dev2.err" & p1=$!
"$AGENT" --config "$T/dev1b.yaml" --once > "$T/dev1b.out" 2> "$T/dev1b.err" & p2=$!
wait $p1 || { cat "$T/dev2.err"; fail "concurrent agent dev2 failed"; }
wait $p2 || { cat "$T/dev1b.err"; fail "concurrent agent dev1 (second source) failed"; }
same_tree "$T/src2/data" "$(landed_root dev2)/data"
same_tree "$T/src3/data" "$(landed_root dev1)/data"
pass "two devices shipping at the same time both land byte-identical"

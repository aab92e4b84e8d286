#!/bin/sh
# The real receiver and agent on loopback: a generated sensor tree lands
# byte for byte; a second run of the unchanged tree sends no chunk data;
# a renamed directory of 100 files sends no chunk data.
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
[ "$(field dev1 chunks_new)" -eq 0 ] || fail "renamed directory sent $(field dev1 chunks_new) chunks"
same_tree "$T/src/data/many-renamed" "$(landed_root dev1)/data/many-renamed"
pass "renamed directory of 100 files sends no chunk data"

#!/bin/sh
# Chunk groups take up to 1 MiB of small chunks, whatever chunking.max is
# (docs/compression.md, "Chunk groups"): 1,200 JSON files of 1,000 bytes
# (1.2 MB) travel as 2 CHUNK_GROUP frames of the same bytes with 1 or 3
# encoder threads, and with chunking.max 64 KiB (which also bounded a
# group before: 256 KiB groups by default, 5 of them here); every file is
# wanted, sent and landed byte for byte.
. "$(dirname "$0")/lib.sh"
gen_events "$T/tree/events" 1200
[ "$(cat "$T"/tree/events/*.json | wc -c)" -eq 1200000 ] || fail "the generated files are not 1,000 bytes each"
setup_keys
bytes1=""
for chunking in "compression: {encoders: 1}" "compression: {encoders: 3}" "chunking:
  min: 4KiB
  avg: 16KiB
  max: 64KiB"; do
    rm -rf "$T/bronze" "$T/rstate" "$T/astate-dev1"
    write_receiver_config 'layout: "{device}/{path}"'
    start_receiver
    write_agent_config dev1 "$T/tree" "$chunking"
    ship dev1 > /dev/null
    stop_receiver
    case $chunking in
    compression*) what="default chunking, ${chunking#compression: }" ;;
    *) what="chunking.max 64KiB" ;;
    esac
    [ "$(field dev1 chunks_new)" = 1200 ] || fail "$what: $(field dev1 chunks_new) chunks sent, not 1200"
    [ "$(field dev1 chunk_groups)" = 2 ] || fail "$what: $(field dev1 chunk_groups) chunk groups, not 2 (1 MiB each at most)"
    # the same frames for any number of encoders (and chunking.max does not matter: the files are one chunk each)
    [ -z "$bytes1" ] && bytes1=$(field dev1 chunk_bytes)
    [ "$(field dev1 chunk_bytes)" = "$bytes1" ] || fail "$what: $(field dev1 chunk_bytes) bytes of chunks, not $bytes1"
    same_tree "$T/tree" "$(landed_root dev1)/tree"
    pass "$what: 1,200 small files went in 2 chunk groups and landed byte for byte"
done

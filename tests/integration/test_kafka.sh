#!/bin/sh
# The Kafka transport end to end (docs/kafka.md), against librdkafka's mock
# cluster on loopback: an agent with transport: kafka ships a tree, a
# receiver in the consumer group lands it byte-identical; a second ship of
# the unchanged tree sends no chunk data; forged records and records of an
# unknown device are counted and skipped, and the partition moves on.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/kafka_lib.sh"
setup_keys
start_mock 1 4
write_kafka_receiver_config r1
start_kafka_receiver r1
wait_file_log "$T/r1.log" "partitions of ingest assigned"

mkdir -p "$T/src/a/b"
gen_log "$T/src/a/log1.txt" 3000000 1
gen_log "$T/src/a/b/log2.txt" 200000 2
head -c 1500000 /dev/urandom > "$T/src/a/b/blob.bin"
for i in $(seq 1 40); do gen_log "$T/src/small$i.json" 900 "$((100 + i))"; done
write_kafka_agent_config dev1 "$T/src"
ship dev1
same_tree "$T/src" "$T/bronze/dev1/src"
[ "$(field dev1 files)" = 43 ] || fail "43 files acknowledged: $(field dev1 files)"
[ "$(field dev1 chunks_new)" -gt 0 ] || fail "no chunk travelled"
pass "a tree shipped through Kafka lands byte-identical (43 files)"

touch "$T/src"/*.json # a new version of each file's metadata, same bytes: shipped again, no chunk data
ship_with dev1 --all
[ "$(field dev1 chunk_bytes)" = 0 ] || fail "chunk data travelled for an unchanged tree: $(field dev1 chunk_bytes)"
[ "$(field dev1 chunks_dedup)" -gt 0 ] || fail "no chunk was known"
pass "the same tree again sends no chunk data (the have-cache, filled from landed replies)"

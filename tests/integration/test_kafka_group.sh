#!/bin/sh
# Receivers as one consumer group sharing one bronze tree (docs/kafka.md):
# two receivers, 4 partitions, 3 agents shipping at once; every file of
# every device lands once, and each receiver landed part of it.  Then
# chunks deleted downstream: the core's index still names them, the
# agents' have-caches too; a new file made of those bytes gets a NEEDED
# reply, the agent ships it again with the chunks, and it lands.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/kafka_lib.sh"
setup_keys
# Three devices whose records fall on both halves of the 4 partitions (the range assignor gives
# each receiver two consecutive ones): partition = CRC-32 of the device id mod 4, as librdkafka's
# consistent partitioner, computed here from gzip's trailer.
part() { printf '%s' "$1" | gzip -c | tail -c8 | od -An -tu4 -N4 | awk '{ print $1 % 4 }'; }
devs="" lo=0 hi=0
for d in d1 d2 d3 d4 d5 d6 d7 d8 d9 da db dc; do
    p=$(part "$d")
    if [ "$p" -lt 2 ] && [ $lo -lt 2 ]; then devs="$devs $d"; lo=$((lo + 1)); fi
    if [ "$p" -ge 2 ] && [ $hi -lt 1 ]; then devs="$devs $d"; hi=$((hi + 1)); fi
    [ $((lo + hi)) = 3 ] && break
done
[ $((lo + hi)) = 3 ] || fail "no three device ids over both halves of the partitions"
for d in $devs; do
    (cd "$T/keys" && "$CTL" keygen "$d" > /dev/null)
    printf '%s %s\n' "$d" "$(cat "$T/keys/$d.pub")" >> "$T/keys/authorized"
done
start_mock 1 4
for r in r1 r2; do
    write_kafka_receiver_config "$r"
    start_kafka_receiver "$r"
done
# both in the group: the last assignment gives each two partitions (a member joining late waits out a
# rebalance: up to the session timeout, and longer under the sanitizers)
i=0
until grep -q "2 partitions of ingest assigned" "$T/r1.log" && grep -q "2 partitions of ingest assigned" "$T/r2.log"; do
    i=$((i + 1)); [ $i -gt 1800 ] && { tail "$T/r1.log" "$T/r2.log"; fail "the group did not settle on 2+2 partitions"; }
    sleep 0.05
done
sleep 1 # and their fetchers run (the mock keeps ~5 MiB a partition)

pids=""
n=0
for d in $devs; do
    n=$((n + 1))
    "$CTL" bench gen --size 3MiB --seed "$n" "$T/src-$d/data" > /dev/null
    write_kafka_agent_config "$d" "$T/src-$d" 'batch:
  max_bytes: 512KiB'
    "$AGENT" --config "$T/$d.yaml" --once > "$T/$d.out" 2> "$T/$d.err" &
    pids="$pids $!"
done
for p in $pids; do
    wait "$p" || { cat "$T"/*.err | grep -v CONFWARN | tail -20; fail "an agent failed"; }
done
for d in $devs; do
    same_tree "$T/src-$d" "$T/bronze/$d/src-$d"
    dups=$(manifest_paths "$d" | sort | uniq -d | wc -l)
    [ "$dups" = 0 ] || fail "$d: $dups paths landed twice"
    [ "$(manifest_paths "$d" | wc -l)" = "$(find "$T/src-$d" -type f | wc -l)" ] || fail "$d: files missing in the manifests"
done
l1=$(grep -c ' landed: ' "$T/r1.log" || true)
l2=$(grep -c ' landed: ' "$T/r2.log" || true)
[ "$l1" -gt 0 ] && [ "$l2" -gt 0 ] || fail "one receiver landed nothing (r1 $l1 batches, r2 $l2)"
pass "2 receivers in one group, 3 agents ($devs): every file landed once; r1 landed $l1 batches, r2 $l2"

# Chunks deleted downstream: the landed files of one device go; a copy of one under a new name
# is all known chunks to the agent's have-cache, but the core no longer holds them.
d=$(echo $devs | cut -d' ' -f1)
f=$(cd "$T/src-$d" && find . -type f -size +100k | head -1)
rm -rf "$T/bronze/$d/src-$d"
cp "$T/src-$d/$f" "$T/src-$d/copy.bin"
ship "$d"
cmp "$T/src-$d/copy.bin" "$T/bronze/$d/src-$d/copy.bin" || fail "the copy did not land"
grep -q "not landed: the core needs" "$T/$d.err" || { cat "$T/$d.err"; fail "the agent was not told chunks were needed"; }
[ "$(field "$d" chunks_new)" -gt 0 ] || fail "no chunk was sent again"
pass "chunks deleted downstream: a NEEDED reply, the batch shipped again with its chunks, and it landed"

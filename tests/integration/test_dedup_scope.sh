#!/bin/sh
# dedup.scope: whose landed chunks count as known to a device's batch.
# 1. device: dev2 ships the very content dev1 landed and is asked for every
#    chunk (chunks_dedup=0, all bytes sent): the want list says nothing about
#    dev1's data.  dev1 re-shipping renamed copies of its own files still
#    sends no chunk.
# 2. Switched to fleet: the index is rebuilt in the new scope (log line), and
#    dev2 shipping content dev1 landed sends no chunk (cross-device dedup).
# 3. Switched back to device: the rebuild keys each manifest's chunks by its
#    device: dev2 is asked for all of what only dev1 landed, dev1 for none.
# 4. The same after kill -9 of the receiver (index catch-up from the manifests).
. "$(dirname "$0")/lib.sh"
setup_keys
write_receiver_config "$(printf 'layout: "{device}/{path}"\ndedup:\n  scope: device')"
start_receiver

A="$T/srcA/data"
B="$T/srcB/data"
mkdir -p "$A/logs" "$B"
gen_log "$A/logs/a1.log" $((1024 * 1024)) 41
gen_log "$A/logs/a2.log" $((700 * 1024)) 42
printf 'a small file\n' > "$A/small.txt"
cp -a "$A/." "$B/"
bytes=$(cat "$A/logs/a1.log" "$A/logs/a2.log" "$A/small.txt" | wc -c)
chunks=$(distinct_chunks "$A/logs/a1.log" "$A/logs/a2.log" "$A/small.txt")

# expect_all_sent DEVICE: every chunk of its last ship was wanted and sent
expect_all_sent() {
    [ "$(field "$1" chunks_dedup)" -eq 0 ] || fail "$1: chunks_dedup=$(field "$1" chunks_dedup), expected 0"
    [ "$(field "$1" chunks_new)" -eq "$(field "$1" chunks)" ] ||
        fail "$1: chunks_new=$(field "$1" chunks_new) of chunks=$(field "$1" chunks)"
    [ "$(field "$1" chunk_raw_bytes)" -eq "$(field "$1" bytes)" ] ||
        fail "$1: chunk_raw_bytes=$(field "$1" chunk_raw_bytes), bytes=$(field "$1" bytes)"
}
# expect_none_sent DEVICE: no chunk of its last ship was wanted
expect_none_sent() {
    [ "$(field "$1" files)" -gt 0 ] || fail "$1 shipped no file"
    [ "$(field "$1" chunks_new)" -eq 0 ] || fail "$1: chunks_new=$(field "$1" chunks_new), expected 0"
    [ "$(field "$1" chunks_dedup)" -eq "$(field "$1" chunks)" ] ||
        fail "$1: chunks_dedup=$(field "$1" chunks_dedup) of chunks=$(field "$1" chunks)"
}
# restart_scope SCOPE: restart the receiver with dedup.scope SCOPE (new port: agent configs follow)
restart_scope() {
    stop_receiver
    sed -i "s/^  scope: .*/  scope: $1/" "$T/receiver.yaml"
    start_receiver
    write_agent_config dev1 "$A"
    write_agent_config dev2 "$B"
}

# ---- 1. device scope
write_agent_config dev1 "$A"
write_agent_config dev2 "$B"
ship dev1
expect_all_sent dev1
[ "$(field dev1 chunks)" -eq "$chunks" ] || fail "dev1: $(field dev1 chunks) chunks, the files have $chunks distinct ones"
[ "$(field dev1 bytes)" -eq "$bytes" ] || fail "dev1 shipped $(field dev1 bytes) bytes of $bytes"
ship dev2
expect_all_sent dev2
same_tree "$B" "$(landed_root dev2)/data"
pass "device scope: dev2 sent all $chunks chunks ($(field dev2 chunk_raw_bytes) bytes) of content dev1 had landed"

mkdir -p "$A/copies"
cp "$A/logs/a1.log" "$A/copies/a1-renamed.log"
cp "$A/logs/a2.log" "$A/copies/a2-renamed.log"
ship dev1
expect_none_sent dev1
[ "$(field dev1 files)" -eq 2 ] || fail "dev1 shipped $(field dev1 files) files, expected its 2 copies"
same_tree "$A" "$(landed_root dev1)/data"
pass "device scope: dev1's renamed copies of its own files sent no chunk ($(field dev1 chunks_dedup) known)"

# ---- 2. fleet scope
restart_scope fleet
grep -q "was built for dedup.scope device, the config says fleet: rebuilding" "$T/receiver.log" ||
    { tail -5 "$T/receiver.log"; fail "no rebuild logged for the scope change"; }
grep -q "index rebuilt from the manifests.*(dedup.scope fleet)" "$T/receiver.log" || fail "no fleet-scope rebuild"
gen_log "$A/logs/f1.log" $((600 * 1024)) 51
ship dev1
mkdir -p "$B/from-dev1"
cp "$A/logs/f1.log" "$B/from-dev1/f1.log"
ship dev2
expect_none_sent dev2
same_tree "$B" "$(landed_root dev2)/data"
pass "fleet scope: dev2 sent no chunk of content dev1 had landed ($(field dev2 chunks_dedup) known)"

# ---- 3. device scope again, from a rebuild
gen_log "$A/logs/m1.log" $((500 * 1024)) 61
ship dev1
[ "$(field dev1 chunks_new)" -gt 0 ] || fail "dev1: new content m1.log sent no chunk"
restart_scope device
grep -q "was built for dedup.scope fleet, the config says device: rebuilding" "$T/receiver.log" ||
    fail "no rebuild logged for the change back to device"
mkdir -p "$B/m"
cp "$A/logs/m1.log" "$B/m/m1.log"
ship dev2
expect_all_sent dev2
cp "$A/logs/m1.log" "$A/copies/m1-renamed.log"
ship dev1
expect_none_sent dev1
same_tree "$A" "$(landed_root dev1)/data"
same_tree "$B" "$(landed_root dev2)/data"
pass "device scope after a rebuild: dev2 sent all of dev1's content, dev1's copy sent none"

# ---- 4. device scope, kill -9 before the index was written: the catch-up keys by device too
gen_log "$A/logs/k1.log" $((400 * 1024)) 71
ship dev1
kill -9 "$RECV_PID"
wait "$RECV_PID" 2>/dev/null || true
RECV_PID=""
start_receiver
write_agent_config dev1 "$A"
write_agent_config dev2 "$B"
wait_log "index caught up from the manifests"
cp "$A/logs/k1.log" "$B/k1.log"
ship dev2
expect_all_sent dev2
cp "$A/logs/k1.log" "$A/copies/k1-renamed.log"
ship dev1
expect_none_sent dev1
stop_receiver # a clean stop writes the index entries waiting in memory
"$CTL" index check "$T/rstate" --bronze "$T/bronze" > "$T/check.out" || { cat "$T/check.out"; fail "index check not clean"; }
grep -q "^dedup scope device: chunks [1-9]" "$T/check.out" || fail "index check: $(cat "$T/check.out")"
pass "device scope after a crash: the catch-up kept dev1's chunks from dev2; index check clean"

#!/bin/sh
# sources[].spool: copy, bounded by spool.quota:
#   - the receiver down, a 1 MiB quota and eight 300 KiB files: three are
#     copied into the spool, then the agent says the spool is full (log,
#     once, and status), never holding more than the quota;
#   - a source file deleted after it was spooled still lands (from the copy);
#   - the receiver up: every file lands once, byte-identical, the spool is
#     emptied after the acks, and a file already shipped is not shipped again.
. "$(dirname "$0")/lib.sh"
setup_keys
write_receiver_config 'layout: "{device}/{path}"'
start_receiver
ADDR=$(cat "$T/receiver.addr")
sed -i "s|^listen: .*|listen: $ADDR|" "$T/receiver.yaml"
stop_receiver
S="$T/src/data"
K="$T/keep"
mkdir -p "$S" "$K"
for i in 1 2 3 4 5 6 7 8; do head -c 307200 /dev/urandom > "$S/s$i.bin"; done
cp "$S"/* "$K/"
write_agent_config dev1 "$S" 'batch:
  max_files: 2
  max_wait: 200ms
rescan_interval: 1s
spool:
  quota: 1MiB'
sed -i 's|^  - path: .*|&\n    settle: 100ms\n    spool: copy|' "$T/dev1.yaml"
SOCK="$T/astate-dev1/agent.sock"
SP="$T/astate-dev1/spool"
"$AGENT" --config "$T/dev1.yaml" > "$T/dev1.out" 2> "$T/dev1.err" &
AGENT_PID=$!
agent_log() { i=0; while ! grep -q -- "$1" "$T/dev1.err"; do i=$((i + 1)); [ $i -gt "${2:-300}" ] && { cat "$T/dev1.err"; fail "no '$1' in the agent log"; }; sleep 0.05; done; }
jfield() { grep -o "\"$1\":{[^}]*}" "$T/status.json" | grep -o "\"$2\":[^,}]*" | sed 's/^[^:]*://'; }
agent_log "backpressure: the spool is full"
agent_log "next attempt in"
sleep 1.5
[ "$(grep -c 'backpressure: the spool is full' "$T/dev1.err")" = 1 ] || fail "spool backpressure not said exactly once"
n=$(find "$SP" -type f | wc -l)
b=$(find "$SP" -type f -printf '%s\n' | awk '{ s += $1 } END { print s + 0 }')
[ "$n" = 3 ] || { find "$SP" -type f; fail "$n files in the spool, expected 3"; }
[ "$b" -le 1048576 ] || fail "the spool holds $b bytes, more than the quota"
"$CTL" status --json --socket "$SOCK" > "$T/status.json" || fail "status failed"
[ "$(jfield backpressure spool)" = true ] || { cat "$T/status.json"; fail "status does not show spool backpressure"; }
[ "$(jfield spool files)" = 3 ] && [ "$(jfield spool bytes)" = "$b" ] || { cat "$T/status.json"; fail "status spool figures"; }
"$CTL" status --socket "$SOCK" | grep -q '^backpressure  *ON (queue ok, spool full, state store ok)' || fail "text status"
for f in $(find "$SP" -type f); do cmp -s "$f" "$K/$(basename "$f")" || fail "spool copy $f differs"; done
# delete the original of one spooled file
victim=$(basename "$(find "$SP" -type f | sort | head -1)")
rm "$S/$victim"
pass "receiver down: 3 files ($b bytes) spooled, spool full said once and shown in status"

start_receiver
i=0
while [ "$(find "$(landed_root dev1)/data" -type f 2>/dev/null | wc -l)" -lt 8 ]; do
    i=$((i + 1)); [ $i -gt 400 ] && { tail -20 "$T/dev1.err"; fail "not every file landed"; }
    sleep 0.05
done
same_tree "$K" "$(landed_root dev1)/data"
pass "receiver up: all 8 files landed, including $victim deleted from the source after it was spooled"
agent_log "spool backpressure off"
sleep 1.5 # a rescan: nothing shipped again
kill -TERM $AGENT_PID
rc=0; wait $AGENT_PID || rc=$?
[ "$rc" = 0 ] || fail "agent exited $rc"
[ "$(find "$SP" -type f | wc -l)" = 0 ] || { find "$SP"; fail "spool not emptied after the acks"; }
[ "$(manifest_paths dev1 | wc -l)" = 8 ] && [ "$(manifest_paths dev1 | sort -u | wc -l)" = 8 ] ||
    { manifest_paths dev1 | sort | uniq -c; fail "not exactly one FILE record per file"; }
pass "spool emptied after the acks; each file recorded once"

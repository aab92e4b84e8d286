#!/bin/sh
# A full state filesystem is backpressure (docs/operations.md, "Spool"):
#   - spool: the state directory on a 2 MiB tmpfs, spool.quota 64 MiB, the
#     receiver down and eight 300 KiB files: the spool is sized to the free
#     space (less the reserve), so the copies stop before the filesystem is
#     full: no per-file ENOSPC warning, one backpressure line over several
#     walks, status backpressure.spool true and spool.room under the quota;
#     the receiver up, every file lands once, byte-identical;
#   - state store: the tmpfs filled up by another file while new files of
#     a second source (read in place) settle: the store's commits fail; one backpressure line, status
#     backpressure.state_store true, nothing taken; the filler removed, the
#     backpressure goes off and every file lands once.
# Runs as root in a mount namespace of its own (the tmpfs goes with it).
if [ -z "${INGEST_NS:-}" ]; then
    if [ "$(id -u)" != 0 ]; then echo "ok: skipped: not root (a tmpfs is mounted for the state directory)"; exit 0; fi
    if ! command -v unshare > /dev/null 2>&1 || ! unshare -m --propagation private true 2> /dev/null; then
        echo "ok: skipped: no mount namespace (unshare -m)"; exit 0
    fi
    INGEST_NS=1 exec unshare -m --propagation private sh "$0" "$@"
fi
. "$(dirname "$0")/lib.sh"
command -v python3 >/dev/null 2>&1 || { pass "skipped: python3 is needed to read the JSON"; exit 0; }
setup_keys
write_receiver_config 'layout: "{device}/{path}"'
start_receiver
ADDR=$(cat "$T/receiver.addr")
sed -i "s|^listen: .*|listen: $ADDR|" "$T/receiver.yaml"
stop_receiver
S="$T/src/data"
K="$T/keep"
mkdir -p "$S" "$K" "$T/astate-dev1"
mount -t tmpfs -o size=2m tmpfs "$T/astate-dev1" || { pass "skipped: cannot mount a tmpfs"; exit 0; }
AGENT_PID=""
trap '[ -n "$AGENT_PID" ] && kill "$AGENT_PID" 2> /dev/null && wait "$AGENT_PID" 2> /dev/null; umount -l "$T/astate-dev1" 2> /dev/null; cleanup' EXIT
for i in 1 2 3 4 5 6 7 8; do head -c 307200 /dev/urandom > "$S/s$i.bin"; done
cp "$S"/* "$K/"
write_agent_config dev1 "$S" 'batch:
  max_files: 2
  max_wait: 200ms
rescan_interval: 300ms
spool:
  quota: 64MiB'
sed -i 's|^  - path: .*|&\n    settle: 100ms\n    spool: copy|' "$T/dev1.yaml"
# a second source, read in place, for the state store's part (the spool would compete for the room)
M="$T/src/more"
mkdir -p "$M"
sed -i "s|^    spool: copy|&\n  - path: $M\n    settle: 100ms|" "$T/dev1.yaml"
SOCK="$T/astate-dev1/agent.sock"
SP="$T/astate-dev1/spool"
"$AGENT" --config "$T/dev1.yaml" > "$T/dev1.out" 2> "$T/dev1.err" &
AGENT_PID=$!
agent_log() { i=0; while ! grep -q -- "$1" "$T/dev1.err"; do i=$((i + 1)); [ $i -gt "${2:-300}" ] && { cat "$T/dev1.err"; fail "no '$1' in the agent log"; }; sleep 0.05; done; }
agent_log "backpressure: "
i=0; while status_json && [ "$(jget walks.count)" -lt 5 ]; do i=$((i + 1)); [ $i -gt 300 ] && fail "no five walks"; sleep 0.05; done
n=$(find "$SP" -type f | wc -l)
[ "$(grep -c 'backpressure: ' "$T/dev1.err")" = 1 ] || { cat "$T/dev1.err"; fail "spool backpressure not said exactly once"; }
grep -q -i 'no space\|spool: copying' "$T/dev1.err" && { cat "$T/dev1.err"; fail "a per-file warning about the full filesystem"; }
[ "$(jget backpressure.spool)" = true ] || { cat "$T/status.json"; fail "status does not show spool backpressure"; }
[ "$(jget backpressure.on)" = true ] || fail "status backpressure.on"
[ "$(jget spool.room)" -lt 2097152 ] && [ "$(jget spool.quota)" = 67108864 ] || { cat "$T/status.json"; fail "spool.room not sized to the free space"; }
[ "$n" -ge 1 ] && [ "$n" -lt 8 ] || fail "$n files spooled"
pass "2 MiB state filesystem: $n files spooled, room $(jget spool.room) of a 64 MiB quota, backpressure said once over $(jget walks.count) walks, no per-file warning"

start_receiver
i=0
while [ "$(find "$(landed_root dev1)/data" -type f 2>/dev/null | wc -l)" -lt 8 ]; do
    i=$((i + 1)); [ $i -gt 600 ] && { tail -20 "$T/dev1.err"; fail "not every file landed"; }
    sleep 0.05
done
same_tree "$K" "$(landed_root dev1)/data"
agent_log "spool backpressure off"
until_status queue.files 0
[ "$(manifest_paths dev1 | wc -l)" = 8 ] && [ "$(manifest_paths dev1 | sort -u | wc -l)" = 8 ] ||
    { manifest_paths dev1 | sort | uniq -c; fail "not exactly one FILE record per file"; }
pass "receiver up: all 8 files landed once, byte-identical; spool backpressure off"

# ---- the state store: fill the filesystem, then new files settle ----
dd if=/dev/zero of="$T/astate-dev1/filler" bs=64k 2> /dev/null || true
sync
# long names: their settle records need new pages of the store (the few free ones do not hold them)
long=$(printf 'a-file-with-a-long-name-%.0s' 1 2 3 4 5 6)
for i in $(seq 1 600); do echo "$i" > "$M/$long$i.txt"; done
agent_log "backpressure: the state store cannot be written"
status_json; t0=$(jget walks.count)
i=0; while status_json && [ "$(jget walks.count)" -lt $((t0 + 4)) ]; do i=$((i + 1)); [ $i -gt 300 ] && fail "no walks"; sleep 0.05; done
[ "$(grep -c 'backpressure: the state store' "$T/dev1.err")" = 1 ] || { cat "$T/dev1.err"; fail "store backpressure not said exactly once"; }
[ "$(jget backpressure.state_store)" = true ] && [ "$(jget backpressure.on)" = true ] ||
    { cat "$T/status.json"; fail "status does not show the state store's backpressure"; }
pass "state filesystem full: the store's commits fail; backpressure said once over 4 walks, in status"
rm -f "$T/astate-dev1/filler"
agent_log "state store backpressure off"
i=0
while [ "$(find "$(landed_root dev1)/more" -type f 2>/dev/null | wc -l)" -lt 600 ]; do
    i=$((i + 1)); [ $i -gt 1200 ] && { tail -20 "$T/dev1.err"; fail "not every new file landed"; }
    sleep 0.05
done
same_tree "$M" "$(landed_root dev1)/more"
kill -TERM $AGENT_PID
rc=0; wait $AGENT_PID || rc=$?
AGENT_PID=""
[ "$rc" = 0 ] || { tail "$T/dev1.err"; fail "agent exited $rc"; }
[ "$(manifest_paths dev1 | wc -l)" = 608 ] && [ "$(manifest_paths dev1 | sort -u | wc -l)" = 608 ] ||
    { manifest_paths dev1 | sort | uniq -c | sort -rn | head; fail "not exactly one FILE record per file"; }
pass "room again: state store backpressure off; all 600 new files landed once"

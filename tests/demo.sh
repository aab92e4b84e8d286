#!/bin/sh
# The main job (make demo): a receiver on 127.0.0.1, an agent shipping a
# generated sensor tree to it, the tree changing as on a gateway, a second
# ship that sends only the new bytes, and a check of what landed.
set -eu
BUILD=$(cd "${1:-build}" && pwd)
CTL="$BUILD/ingestctl"
W=${DEMO_DIR:-$(mktemp -d /tmp/ingest-demo.XXXXXX)}
SIZE=${DEMO_SIZE:-48MiB}
RECV_PID=""
cleanup() {
    [ -n "$RECV_PID" ] && kill "$RECV_PID" 2>/dev/null && wait "$RECV_PID" 2>/dev/null
    [ "${KEEP:-0}" = 1 ] && echo "(kept $W)" || rm -rf "$W"
}
trap cleanup EXIT INT TERM

say() { printf '\n== %s\n' "$*"; }

say "1. a sensor tree on the gateway ($SIZE: telemetry CSV/JSON, int16 frames, JPEG-like blobs, a log)"
"$CTL" bench gen --size "$SIZE" "$W/gateway/sensors" > /dev/null
find "$W/gateway/sensors" -type f | wc -l | xargs printf '   %s files, '
du -sh "$W/gateway/sensors" | cut -f1

say "2. keys: receiver, device gw01, fleet dedup key"
mkdir -p "$W/keys"
(cd "$W/keys" && "$CTL" keygen receiver > /dev/null && "$CTL" keygen gw01 > /dev/null && "$CTL" keygen --dedup fleet.dedup > /dev/null)
printf 'gw01 %s\n' "$(cat "$W/keys/gw01.pub")" > "$W/keys/authorized_devices"
ls "$W/keys" | sed 's/^/   /'

say "3. ingest-receiver on 127.0.0.1 (bronze tree in $W/core/bronze)"
mkdir -p "$W/core/bronze"
cat > "$W/core/receiver.yaml" <<EOT
listen: 127.0.0.1:0
key: ../keys/receiver.key
authorized_devices: ../keys/authorized_devices
dedup_key: ../keys/fleet.dedup
state_dir: state
bronze: bronze
EOT
"$BUILD/ingest-receiver" --config "$W/core/receiver.yaml" --ready-file "$W/core/addr" 2> "$W/core/receiver.log" &
RECV_PID=$!
i=0
while [ ! -s "$W/core/addr" ]; do
    i=$((i + 1)); [ $i -lt 200 ] || { cat "$W/core/receiver.log"; exit 1; }
    sleep 0.05
done
echo "   listening on $(cat "$W/core/addr")"

cat > "$W/gateway/agent.yaml" <<EOT
device:
  id: gw01
  key: ../keys/gw01.key
core:
  address: $(cat "$W/core/addr")
  receiver_key: ../keys/receiver.pub
dedup_key: ../keys/fleet.dedup
sources:
  - path: sensors
state_dir: state
EOT

say "4. first ship"
"$BUILD/ingest-agent" --config "$W/gateway/agent.yaml" --once | tee "$W/run1"

say "5. the gateway goes on: the log grows, a folder is renamed, files are added and duplicated, frames edited"
"$CTL" bench gen --evolve --size "$SIZE" "$W/gateway/sensors" > /dev/null
echo "   $(find "$W/gateway/sensors" -type f | wc -l) files now"

say "6. second ship"
"$BUILD/ingest-agent" --config "$W/gateway/agent.yaml" --once | tee "$W/run2"

say "7. side by side"
get() { tail -1 "$1" | tr ' ' '\n' | sed -n "s|^$2=||p"; }
printf '   %-22s %16s %16s\n' "" "first ship" "second ship"
for f in files bytes chunks chunks_new chunks_dedup chunk_bytes wire_bytes seconds MB/s; do
    printf '   %-22s %16s %16s\n' "$f" "$(get "$W/run1" "$f")" "$(get "$W/run2" "$f")"
done
b2=$(get "$W/run2" bytes); w2=$(get "$W/run2" wire_bytes); f2=$(get "$W/run2" files)
tree=$(du -sb "$W/gateway/sensors" | cut -f1)
awk -v t="$tree" -v b="$b2" -v w="$w2" -v f="$f2" 'BEGIN { printf "   the tree is %.1f MB; the second ship read only the %d new or changed files (%.1f MB)\n   and sent %.2f MB over the wire (%.1f%% of the tree)\n", t/1e6, f, b/1e6, w/1e6, 100*w/t }'

say "8. verify: every file on the gateway is byte-identical in bronze"
landed="$W/core/bronze/gw01"
cd "$W/gateway"
bad=0
for f in $(find sensors -type f); do
    set -- "$landed"/*/*/*/"$f"
    cmp -s "$f" "$(ls -t "$@" 2>/dev/null | head -1)" || { echo "   differs: $f"; bad=$((bad + 1)); }
done
[ "$bad" -eq 0 ] && echo "   all $(find sensors -type f | wc -l) files identical ($(ls "$W/core/bronze/_manifests/gw01" | wc -l) batch manifests under bronze/_manifests/gw01)"
grep -c 'landed:' "$W/core/receiver.log" | xargs printf '   receiver log: %s batches landed\n'
say "9. stop the receiver"
kill "$RECV_PID"; wait "$RECV_PID" 2>/dev/null || true; RECV_PID=""
echo "   done"
[ "$bad" -eq 0 ]

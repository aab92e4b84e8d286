#!/bin/sh
# A file the daemon cannot read (no permission: the agent runs as nobody,
# the file is mode 000) is dropped from its batch and taken again by the
# next periodic walk or by an event of its own, not by a walk at once: that
# took it, failed and walked the whole tree again without end (dozens of
# walks a minute, two warnings each).  Made readable (chmod), the next
# periodic walk takes it and it ships.  Needs root (to run the agent as nobody) and python3.
. "$(dirname "$0")/lib.sh"
[ "$(id -u)" = 0 ] || { pass "skipped: running the agent as another user needs root"; exit 0; }
command -v setpriv > /dev/null 2>&1 || { pass "skipped: setpriv is needed"; exit 0; }
command -v python3 > /dev/null 2>&1 || { pass "skipped: python3 is needed to read the JSON"; exit 0; }
setpriv --reuid=nobody --regid=nogroup --clear-groups "$AGENT" --version > /dev/null 2>&1 ||
    { pass "skipped: nobody cannot run $AGENT here"; exit 0; }
setup_keys
write_receiver_config 'layout: "{device}/{path}"'
start_receiver
chmod 711 "$T"
W="$T/nb"
mkdir -p "$W/src" "$W/astate"
cp "$T/keys/dev1.key" "$T/keys/receiver.pub" "$T/keys/fleet.dedup" "$W/"
printf 'readable\n' > "$W/src/good.txt"
printf 'kept from the agent\n' > "$W/src/bad.bin"
cat > "$W/dev1.yaml" <<EOT
device:
  id: dev1
  key: $W/dev1.key
core:
  address: $(cat "$T/receiver.addr")
  receiver_key: $W/receiver.pub
dedup_key: $W/fleet.dedup
sources:
  - path: $W/src
    settle: 200ms
state_dir: $W/astate
batch:
  max_wait: 100ms
rescan_interval: 2s
EOT
chown -R nobody "$W"
chmod 000 "$W/src/bad.bin"
setpriv --reuid=nobody --regid=nogroup --clear-groups "$AGENT" --config "$W/dev1.yaml" > "$T/dev1.out" 2> "$T/dev1.err" &
AGENT_PID=$!
trap 'kill $AGENT_PID 2>/dev/null || true; cleanup' EXIT
i=0
while [ ! -f "$T/bronze/dev1/src/good.txt" ]; do
    i=$((i + 1)); [ $i -gt 400 ] && { cat "$T/dev1.err"; fail "good.txt did not land"; }
    sleep 0.05
done
sleep 3 # (before, a walk at once after each failed take: dozens of walks in 3 s)
"$CTL" status --json --socket "$W/astate/agent.sock" > "$T/status.json" || fail "ingestctl status failed"
walks=$(jget walks.count)
[ "$walks" -le 4 ] || { tail "$T/dev1.err"; fail "$walks walks in 3 s (rescan_interval 2s) for one unreadable file"; }
n=$(grep -c "bad.bin" "$T/dev1.err" || true)
[ "$n" -ge 1 ] && [ "$n" -le $((2 * walks)) ] || { cat "$T/dev1.err"; fail "the unreadable file was said $n times in $walks walks"; }
[ ! -e "$T/bronze/dev1/src/bad.bin" ] || fail "an unreadable file landed"
pass "an unreadable file is said, not taken again at once: $walks walks in 3 s with rescan_interval 2s"
chmod 644 "$W/src/bad.bin"
i=0
while [ ! -f "$T/bronze/dev1/src/bad.bin" ]; do
    i=$((i + 1)); [ $i -gt 400 ] && { cat "$T/dev1.err"; fail "bad.bin, made readable, did not land"; }
    sleep 0.05
done
cmp "$W/src/bad.bin" "$T/bronze/dev1/src/bad.bin" || fail "bad.bin landed different"
kill "$AGENT_PID"
wait "$AGENT_PID" 2>/dev/null || true
pass "made readable, the next periodic walk ships it"

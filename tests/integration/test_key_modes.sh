#!/bin/sh
# Secret and dedup key files that group or others can read are refused, as
# ssh refuses a private key that is too open: the receiver does not start and
# the agent does not ship, each naming the file, its mode and the fix
# ("chmod 600 FILE"); after the chmod both work.
. "$(dirname "$0")/lib.sh"
setup_keys
write_receiver_config 'layout: "{device}/{path}"'

# refused WHAT FILE MODE LOG: LOG names FILE, MODE and the fix
refused() {
    grep -q "permissions $3 are too open" "$4" && grep -q "chmod 600 $2" "$4" || {
        cat "$4"; fail "$1: no refusal naming $2, mode $3 and chmod 600"; }
}

for f in receiver.key fleet.dedup; do
    chmod 0644 "$T/keys/$f"
    # A receiver that accepts the key runs until the timeout stops it.
    rc=0
    timeout 20 "$RECEIVER" --config "$T/receiver.yaml" --ready-file "$T/receiver.addr" > "$T/refused.log" 2>&1 \
        || rc=$?
    [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || { cat "$T/refused.log"; fail "receiver started with $f mode 0644"; }
    refused "receiver, $f" "$T/keys/$f" 0644 "$T/refused.log"
    [ ! -e "$T/receiver.addr" ] || fail "receiver with a 0644 $f wrote its ready file"
    chmod 0600 "$T/keys/$f"
done
pass "the receiver refuses a group- or world-readable secret or dedup key"

start_receiver
mkdir -p "$T/src"
printf 'one\n' > "$T/src/a.txt"
write_agent_config dev1 "$T/src"
for f in dev1.key fleet.dedup; do
    chmod 0640 "$T/keys/$f"
    if "$AGENT" --config "$T/dev1.yaml" --once > "$T/dev1.out" 2> "$T/dev1.err"; then
        fail "agent shipped with $f mode 0640"
    fi
    refused "agent, $f" "$T/keys/$f" 0640 "$T/dev1.err"
    chmod 0600 "$T/keys/$f"
done
[ ! -e "$T/bronze/dev1/src/a.txt" ] || fail "a file landed from an agent with a readable key"
pass "the agent refuses a group-readable secret or dedup key"

ship dev1 > /dev/null
cmp "$T/src/a.txt" "$T/bronze/dev1/src/a.txt" || fail "a.txt did not land after chmod 600"
pass "with chmod 600 the receiver starts and the agent ships"

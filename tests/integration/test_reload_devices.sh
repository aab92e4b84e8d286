#!/bin/sh
# SIGHUP makes the receiver re-read authorized_devices, without a restart:
#   1. a device added to the file ships after the SIGHUP (refused before);
#   2. a device removed from it is refused after the SIGHUP;
#   3. a session already authenticated is cut when its device is removed:
#      a daemon agent connected at the SIGHUP ships nothing more (its next
#      connection is refused); one whose device gets a new key is cut too,
#      and ships again once it uses the new key;
#   4. a file that does not load keeps the devices authorized before, and
#      the log says why;
# each SIGHUP is logged with what changed, and the receiver never dies of it.
. "$(dirname "$0")/lib.sh"
setup_keys
(cd "$T/keys" && "$CTL" keygen dev3 > /dev/null)
line() { printf '%s %s\n' "$1" "$(cat "$T/keys/$1.pub")"; }
write_receiver_config 'layout: "{device}/{path}"'
start_receiver
for d in dev1 dev2 dev3; do
    mkdir -p "$T/src-$d/data"
    printf 'from %s\n' "$d" > "$T/src-$d/data/a.txt"
    write_agent_config "$d" "$T/src-$d/data"
done
# refused DEVICE: its ship fails and the receiver logs it as not authorized
refused() {
    if "$AGENT" --config "$T/$1.yaml" --once > "$T/$1.out" 2> "$T/$1.err"; then
        fail "$1 shipped, expected a refusal"
    fi
    [ ! -e "$T/bronze/$1/data/a.txt" ] || fail "$1's file landed"
}
# logged PATTERN DAEMON WHAT: PATTERN in the receiver's log within 15 s, else fail with what DAEMON's log says
logged() {
    i=0
    until grep -q -- "$1" "$T/receiver.log"; do
        i=$((i + 1)); [ $i -gt 300 ] && { cat "$T/$2.err"; tail "$T/receiver.log"; fail "$3"; }
        sleep 0.05
    done
}
# hup PATTERN: SIGHUP the receiver, wait for PATTERN in its log, check it lives
hup() {
    n=$(grep -c 'SIGHUP: authorized devices' "$T/receiver.log" || true)
    kill -HUP "$RECV_PID"
    i=0
    while [ "$(grep -c 'SIGHUP: authorized devices' "$T/receiver.log" || true)" -le "$n" ]; do
        i=$((i + 1))
        [ $i -gt 200 ] && { tail -5 "$T/receiver.log"; fail "no SIGHUP line in the receiver log"; }
        kill -0 "$RECV_PID" 2>/dev/null || { tail -5 "$T/receiver.log"; fail "the receiver died of SIGHUP"; }
        sleep 0.05
    done
    grep 'SIGHUP: authorized devices' "$T/receiver.log" | tail -1 | grep -qF -- "$1" \
        || { grep 'SIGHUP' "$T/receiver.log" >&2; fail "the SIGHUP line lacks '$1'"; }
    kill -0 "$RECV_PID" 2>/dev/null || fail "the receiver died of SIGHUP"
}

refused dev3
pass "dev3, not in the file, is refused"

{ line dev1; line dev2; line dev3; } > "$T/keys/authorized"
hup "3 devices, 1 added (dev3), 0 removed, 0 with a new key"
ship dev3 > /dev/null
cmp "$T/src-dev3/data/a.txt" "$T/bronze/dev3/data/a.txt" || fail "dev3's file did not land"
pass "dev3 added to the file, SIGHUP: it ships"

# a daemon for dev1, connected before dev1 is removed
write_agent_config dev1 "$T/src-dev1/data" 'batch:
  max_wait: 200ms'
"$AGENT" --config "$T/dev1.yaml" > "$T/dev1d.out" 2> "$T/dev1d.err" &
AGENT_PID=$!
trap 'kill "$AGENT_PID" 2>/dev/null || true; cleanup' EXIT
i=0
while [ ! -f "$T/bronze/dev1/data/a.txt" ]; do
    i=$((i + 1)); [ $i -gt 300 ] && { cat "$T/dev1d.err"; fail "the dev1 daemon did not ship"; }; sleep 0.05
done
conns=$(grep -c 'device dev1 connected' "$T/receiver.log")

{ line dev3; } > "$T/keys/authorized"
hup "1 device, 0 added, 2 removed (dev1, dev2), 0 with a new key"
refused dev2
grep -q "device 'dev2' is not authorized\|dev2.*not authorized" "$T/receiver.log" \
    || { tail -5 "$T/receiver.log"; fail "no refusal of dev2 in the receiver log"; }
pass "dev2 removed from the file, SIGHUP: it is refused"

grep -q "SIGHUP: the session of device dev1 from .* is cut: it is no longer authorized" "$T/receiver.log" \
    || { tail -5 "$T/receiver.log"; fail "dev1's open session was not cut"; }
grep 'SIGHUP: authorized devices' "$T/receiver.log" | tail -1 | grep -q "; 1 session of those cut" \
    || fail "the SIGHUP line does not count the session cut"
printf 'later\n' > "$T/src-dev1/data/b.txt"
logged "dev1.*not authorized" dev1d "dev1 did not try again after the cut"
sleep 1
[ ! -e "$T/bronze/dev1/data/b.txt" ] || fail "dev1 landed a file after it was removed"
kill "$AGENT_PID"
wait "$AGENT_PID" 2>/dev/null || true
pass "dev1 removed while connected: its open session is cut, and it lands nothing more"

# a daemon for dev3, connected when dev3 is given a new key: cut; with the new key it ships again
"$AGENT" --config "$T/dev3.yaml" > "$T/dev3d.out" 2> "$T/dev3d.err" &
AGENT_PID=$!
printf 'before the new key\n' > "$T/src-dev3/data/d.txt"
i=0
while ! cmp -s "$T/src-dev3/data/d.txt" "$T/bronze/dev3/data/d.txt"; do
    i=$((i + 1)); [ $i -gt 300 ] && { cat "$T/dev3d.err"; fail "the dev3 daemon did not ship"; }; sleep 0.05
done
mkdir -p "$T/keys/new"
(cd "$T/keys/new" && "$CTL" keygen dev3 > /dev/null) || fail "keygen failed"
printf 'dev3 %s\n' "$(cat "$T/keys/new/dev3.pub")" > "$T/keys/authorized"
hup "1 device, 0 added, 0 removed, 1 with a new key; 1 session of those cut"
grep -q "SIGHUP: the session of device dev3 from .* is cut: it has a new key" "$T/receiver.log" \
    || { tail -5 "$T/receiver.log"; fail "dev3's open session was not cut at its new key"; }
printf 'after the new key\n' > "$T/src-dev3/data/e.txt"
logged "handshake from .* device dev3 refused" dev3d "dev3 did not try again with its old key"
kill "$AGENT_PID"
wait "$AGENT_PID" 2>/dev/null || true
[ ! -e "$T/bronze/dev3/data/e.txt" ] || fail "dev3 landed a file under its old key"
cp "$T/keys/new/dev3.key" "$T/keys/dev3.key"
cp "$T/keys/new/dev3.pub" "$T/keys/dev3.pub"
ship dev3 > /dev/null
cmp "$T/src-dev3/data/e.txt" "$T/bronze/dev3/data/e.txt" || fail "dev3 did not ship under its new key"
pass "dev3 given a new key while connected: its session is cut, and it ships again under the new key"

{ line dev3; echo 'dev2 not-a-key'; } > "$T/keys/authorized"
hup "not re-read: $T/keys/authorized:2: public key is not base64"
grep 'SIGHUP' "$T/receiver.log" | tail -1 | grep -q "the devices authorized before (1) stay authorized" \
    || fail "the SIGHUP line does not say the old set stays"
printf 'after the bad file\n' > "$T/src-dev3/data/c.txt"
ship dev3 > /dev/null
cmp "$T/src-dev3/data/c.txt" "$T/bronze/dev3/data/c.txt" || fail "dev3 was not served after a bad file"
refused dev2
pass "a file that does not load: the old set stays, and the log says why"
stop_receiver

#!/bin/sh
# The daemon and a batch the core keeps failing (bronze full: a 4 MiB
# tmpfs, a 6 MB file).  The connection works; the batch fails each time.
# The daemon sends it again with a growing back-off (0.5 s doubling, each
# step 50..100%: at most 6 tries in 6 s), not about twice a second for
# ever (it reset its back-off on every successful connect, and re-sent the
# whole batch each time), and its log gives the core's reason, not "core
# unreachable".  With room back, the batch lands.  A bronze the core
# cannot write (read-only) refuses each batch whole: those go again after
# the same back-off too (they went about ten times a second).
# Needs root (mount); skipped with the reason otherwise.
. "$(dirname "$0")/lib.sh"
[ "$(id -u)" = 0 ] || { echo "skip: mounting a tmpfs for bronze needs root"; exit 0; }
mkdir -p "$T/bronze"
mount -t tmpfs -o size=4m ingest-test "$T/bronze" 2>/dev/null || { echo "skip: cannot mount a tmpfs here"; exit 0; }
trap 'if [ -n "${APID:-}" ]; then kill "$APID" 2>/dev/null; wait "$APID" 2>/dev/null; fi; stop_receiver; umount "$T/bronze" 2>/dev/null || umount -l "$T/bronze"; cleanup' EXIT
setup_keys
write_receiver_config 'layout: "{device}/{path}"'
start_receiver
pin_receiver_port
S="$T/src/data"
mkdir -p "$S"
head -c 6000000 /dev/urandom > "$S/big.bin"
write_agent_config dev1 "$S" 'batch:
  max_wait: 100ms'
sed -i 's|^  - path: .*|&\n    settle: 100ms|' "$T/dev1.yaml"
"$AGENT" --config "$T/dev1.yaml" > "$T/dev1.out" 2> "$T/dev1.err" &
APID=$!
wait_log 'failed: .*out of space'
sleep 6
tries=$(grep -c 'failed: .*out of space' "$T/receiver.log")
[ "$tries" -le 7 ] || { tail -5 "$T/dev1.err"; fail "$tries tries of the failing batch in about 6 s (a growing back-off makes at most 7)"; }
[ "$tries" -ge 2 ] || { tail -5 "$T/dev1.err"; fail "the failing batch was not tried again"; }
! grep -q 'core unreachable' "$T/dev1.err" || { grep 'core unreachable' "$T/dev1.err" | head -3; fail "the agent called a reachable core unreachable"; }
grep -q 'out of space' "$T/dev1.err" || { tail -5 "$T/dev1.err"; fail "the agent's log does not give the core's reason"; }
pass "a batch the core fails: $tries tries in about 6 s, with the core's reason in the log"
mount -o remount,size=64m "$T/bronze" || fail "cannot grow the tmpfs"
wait_same "$S/big.bin" "$(landed_root dev1)/data/big.bin" 800 "$T/dev1.err" "the batch did not land once there was room"
pass "with room back the batch lands (within the back-off's step)"

stop_receiver # (it holds files of bronze open for writing)
mount -o remount,ro "$T/bronze" || fail "cannot remount the tmpfs read-only"
start_receiver
head -c 30000 /dev/urandom > "$S/after.bin"
wait_log 'refused: .*Read-only file system'
sleep 6
tries=$(grep -c 'refused: .*Read-only file system' "$T/receiver.log")
[ "$tries" -le 7 ] || { tail -5 "$T/dev1.err"; fail "$tries refusals of the batch in about 6 s (a growing back-off makes at most 7)"; }
grep -q 'batch refused by the core' "$T/dev1.err" || { tail -5 "$T/dev1.err"; fail "the agent did not say the batch was refused"; }
pass "a bronze the core cannot write: $tries refusals in about 6 s, not ten a second"

# A spooled source (its files may vanish: the spool copy is then the only one) and a bronze the core cannot
# write: the refused batch is kept with its spool copies and goes again; the original removed meanwhile,
# the file lands from its copy once bronze is writable (the batch was forgotten with its copies: lost).
kill "$APID"
wait "$APID" 2>/dev/null || true
APID=
S2="$T/src/rot"
mkdir -p "$S2"
head -c 30000 /dev/urandom > "$S2/frame.bin"
cp "$S2/frame.bin" "$T/frame.orig"
write_agent_config dev2 "$S2" 'batch:
  max_wait: 100ms'
sed -i 's|^  - path: .*|&\n    settle: 100ms\n    spool: copy|' "$T/dev2.yaml"
: > "$T/receiver.log"
"$AGENT" --config "$T/dev2.yaml" > "$T/dev2.out" 2> "$T/dev2.err" &
APID=$!
wait_log 'refused: .*Read-only file system'
i=0
until grep -q 'kept with its spool copies' "$T/dev2.err"; do
    i=$((i + 1)); [ $i -gt 200 ] && { tail -5 "$T/dev2.err"; fail "the refused spooled batch was not kept"; }
    sleep 0.05
done
rm "$S2/frame.bin" # rotated away: the spool copy is the only one left
stop_receiver
mount -o remount,rw "$T/bronze" || fail "cannot remount the tmpfs read-write"
start_receiver
wait_same "$T/frame.orig" "$(landed_root dev2)/rot/frame.bin" 400 "$T/dev2.err" "the spooled file did not land from its copy"
pass "a refused batch of a spooled source is kept with its copies: the file lands once bronze is writable, its original gone"

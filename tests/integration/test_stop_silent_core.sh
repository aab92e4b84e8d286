#!/bin/sh
# SIGTERM while the core is silent: an agent waiting for the core's answer
# to a batch (the receiver stopped with SIGSTOP: its socket stays open, it
# never answers) stops within seconds, not after its reply timeout (10
# minutes), so a service manager's stop does not end in SIGKILL.  The
# batch stays journaled and lands on the next run once the core answers.
# The daemon waiting for an answer to its batch and --once in an unanswered
# handshake are checked.
. "$(dirname "$0")/lib.sh"
setup_keys
write_receiver_config 'layout: "{device}/{path}"'
start_receiver
ADDR=$(cat "$T/receiver.addr")
S="$T/src"
mkdir -p "$S"
gen_log "$S/first.log" 20000 1
write_agent_config dev1 "$S" 'batch:
  max_wait: 200ms'
sed -i "s|^  - path: .*|&\n    settle: 200ms|" "$T/dev1.yaml"

# until_core_has_unread: wait (bounded) until bytes wait unread on the stopped receiver's side of a
# connection: the agent sent its batch and now waits for the core's answer
until_core_has_unread() {
    port=$(printf '%04X' "${ADDR##*:}")
    i=0
    until awk -v p=":$port" '$2 ~ (p "$") && $4 == "01" && substr($5, 10, 8) != "00000000" { f = 1 } END { exit !f }' \
        /proc/net/tcp; do
        i=$((i + 1)); [ $i -gt 400 ] && { kill -CONT "$RECV_PID"; fail "the agent sent nothing to the stopped core"; }
        sleep 0.05
    done
}

# until_gone PID WHAT: PID exits within 10 s of now, or the test fails
until_gone() {
    i=0
    while kill -0 "$1" 2>/dev/null; do
        i=$((i + 1))
        [ $i -gt 200 ] && { kill -CONT "$RECV_PID"; kill -KILL "$1"; tail -n 5 "$T/dev1.err"; fail "$2"; }
        sleep 0.05
    done
    wait "$1" 2>/dev/null || true
}

# ---- the daemon ----
"$AGENT" --config "$T/dev1.yaml" > "$T/dev1.out" 2> "$T/dev1.err" &
APID=$!
EXTRA_PIDS="${EXTRA_PIDS:-} $APID"
i=0
until cmp -s "$S/first.log" "$(landed_root dev1)/src/first.log"; do
    i=$((i + 1)); [ $i -gt 400 ] && { kill "$APID"; cat "$T/dev1.err"; fail "first.log did not land"; }
    sleep 0.05
done
sleep 0.3 # (its acknowledgement reaches the agent)
kill -STOP "$RECV_PID"
gen_log "$S/second.log" 30000 2
until_core_has_unread # (the batch is built and sent, then the agent waits for the silent core)
sleep 0.3
kill "$APID"
until_gone "$APID" "the daemon did not stop within 10 s of SIGTERM while the core was silent"
grep -q "^stopped: " "$T/dev1.out" || { cat "$T/dev1.out" "$T/dev1.err"; fail "the daemon did not stop cleanly"; }
grep -q "stopping: no longer waiting for the core's answer" "$T/dev1.err" ||
    { cat "$T/dev1.err"; fail "the daemon does not say it gave the wait up"; }
if grep -q '\[error\]' "$T/dev1.err"; then cat "$T/dev1.err"; fail "the stop is logged as an error"; fi
pass "the daemon stops on SIGTERM while waiting for a silent core's answer"

# ---- --once, the handshake unanswered (the kernel accepts for the stopped receiver) ----
gen_log "$S/third.log" 30000 3
"$AGENT" --config "$T/dev1.yaml" --once > "$T/dev1.out" 2> "$T/dev1.err" &
APID=$!
until_core_has_unread
kill "$APID"
until_gone "$APID" "agent --once did not stop within 10 s of SIGTERM in an unanswered handshake"
grep -q "stopping: the handshake with .* was cut" "$T/dev1.err" || { cat "$T/dev1.err"; fail "the cut handshake is not said"; }
if grep -q "handshake with .* failed" "$T/dev1.err"; then cat "$T/dev1.err"; fail "the stop is logged as a failed handshake"; fi
pass "agent --once stops on SIGTERM in a handshake the core does not answer"

# nothing was lost: the core answers again, and the next run lands both files
kill -CONT "$RECV_PID"
ship dev1
for f in second third; do
    cmp "$S/$f.log" "$(landed_root dev1)/src/$f.log" || fail "$f.log did not land after the stops"
done
pass "the batches given up at the stops land on the next run"

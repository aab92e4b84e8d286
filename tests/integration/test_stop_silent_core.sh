#!/bin/sh
# SIGTERM while the core is silent: an agent waiting for the core's answer
# to a batch (the receiver stopped with SIGSTOP: its socket stays open, it
# never answers) stops within seconds, not after its reply timeout (10
# minutes), so a service manager's stop does not end in SIGKILL.  The
# batch stays journaled and lands on the next run once the core answers.
# Both the daemon and --once are checked.
. "$(dirname "$0")/lib.sh"
setup_keys
write_receiver_config 'layout: "{device}/{path}"'
start_receiver
S="$T/src"
mkdir -p "$S"
gen_log "$S/first.log" 20000 1
write_agent_config dev1 "$S" 'batch:
  max_wait: 200ms'
sed -i "s|^  - path: .*|&\n    settle: 200ms|" "$T/dev1.yaml"

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
# the batch is built and sent (settle 200 ms, max_wait 200 ms), then the agent waits for the silent core
sleep 1.5
kill "$APID"
until_gone "$APID" "the daemon did not stop within 10 s of SIGTERM while the core was silent"
grep -q "no longer waiting for the core's answer" "$T/dev1.err" ||
    { cat "$T/dev1.err"; fail "the daemon did not say it stopped waiting for the core"; }
pass "the daemon stops on SIGTERM while waiting for a silent core"

# ---- --once ----
gen_log "$S/third.log" 30000 3
"$AGENT" --config "$T/dev1.yaml" --once > "$T/dev1.out" 2> "$T/dev1.err" &
APID=$!
sleep 1.5
kill "$APID"
until_gone "$APID" "agent --once did not stop within 10 s of SIGTERM while the core was silent"
pass "agent --once stops on SIGTERM while waiting for a silent core"

# nothing was lost: the core answers again, and the next run lands both files
kill -CONT "$RECV_PID"
ship dev1
for f in second third; do
    cmp "$S/$f.log" "$(landed_root dev1)/src/$f.log" || fail "$f.log did not land after the stops"
done
pass "the batches given up at the stops land on the next run"

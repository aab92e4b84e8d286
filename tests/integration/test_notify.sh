#!/bin/sh
# Type=notify readiness without systemd: with NOTIFY_SOCKET set, the
# receiver sends READY=1 once it listens (its ready file is there by then)
# and the edge daemon once its state is open; socat stands in for the
# service manager.
. "$(dirname "$0")/lib.sh"
command -v socat >/dev/null 2>&1 || { echo "skip: socat is not installed (make deps installs it)"; exit 0; }
setup_keys
write_receiver_config
SOCAT_PID=""
listen_notify() { # listen_notify FILE: collect datagrams sent to $T/notify into FILE
    rm -f "$T/notify"
    socat -u UNIX-RECV:"$T/notify" OPEN:"$1",creat,append &
    SOCAT_PID=$!
    i=0
    while [ ! -S "$T/notify" ]; do
        i=$((i + 1)); [ $i -gt 100 ] && fail "socat did not bind $T/notify"; sleep 0.05
    done
}
wait_ready() { # wait_ready FILE WHAT
    i=0
    while ! grep -q 'READY=1' "$1" 2>/dev/null; do
        i=$((i + 1)); [ $i -gt 200 ] && { cat "$T/receiver.log"; fail "$2 sent no READY=1"; }; sleep 0.05
    done
}
listen_notify "$T/recv.notify"
NOTIFY_SOCKET="$T/notify" "$RECEIVER" --config "$T/receiver.yaml" --ready-file "$T/receiver.addr" >> "$T/receiver.log" 2>&1 &
RECV_PID=$!
wait_ready "$T/recv.notify" "the receiver"
[ -s "$T/receiver.addr" ] || fail "READY=1 came before the receiver listened"
kill "$SOCAT_PID" 2>/dev/null; wait "$SOCAT_PID" 2>/dev/null || true
pass "receiver: READY=1 once listening on $(cat "$T/receiver.addr")"

S="$T/src"
mkdir -p "$S"
gen_log "$S/a.log" 20000 1
write_agent_config dev1 "$S"
listen_notify "$T/agent.notify"
NOTIFY_SOCKET="$T/notify" "$AGENT" --config "$T/dev1.yaml" > "$T/dev1.out" 2> "$T/dev1.err" &
APID=$!
wait_ready "$T/agent.notify" "the agent"
[ -f "$T/astate-dev1/instance" ] || fail "READY=1 came before the agent's state was open"
kill "$APID"; wait "$APID" || fail "the agent did not stop cleanly"
kill "$SOCAT_PID" 2>/dev/null; wait "$SOCAT_PID" 2>/dev/null || true
pass "agent: READY=1 once its state is open"

stop_receiver
grep -q NOTIFY_SOCKET "$T/receiver.log" "$T/dev1.err" && fail "a warning about NOTIFY_SOCKET, which worked"
pass "neither program warned"

#!/bin/sh
# Hardening findings 4 and 5 (regression tests):
# 4. SIGPIPE is ignored before anything else runs: a receiver sent SIGPIPE
#    again and again from the moment its program runs (its crash recovery
#    and metrics thread included) keeps running and serves a device.
# 5. max_connections and handshake.max_pending are checked against the
#    open-file limit at start: a receiver whose limit cannot hold them
#    refuses to start and says what to change, instead of failing accept()
#    with EMFILE under load.
. "$(dirname "$0")/lib.sh"
setup_keys
write_receiver_config 'layout: "{device}/{path}"
metrics:
  listen: 127.0.0.1:0'
# A crash marker, so the start runs the crash sweep and index catch-up.
mkdir -p "$T/rstate"
: > "$T/rstate/receiver.running"

# ---- 4. SIGPIPE from the first instant ----
"$RECEIVER" --config "$T/receiver.yaml" --ready-file "$T/receiver.addr" >> "$T/receiver.log" 2>&1 &
RECV_PID=$!
# From the moment the receiver's image runs (a signal to the forked shell
# before its exec would kill that shell, not the receiver), plus the loader.
i=0
until readlink "/proc/$RECV_PID/exe" 2>/dev/null | grep -q 'ingest-receiver$'; do
    i=$((i + 1)); [ $i -gt 500 ] && fail "the receiver did not start"
    sleep 0.002
done
sleep 0.02
# ThreadSanitizer's runtime sets itself up before main, for longer than that (seconds with other suites
# running): a SIGPIPE then would kill it before any of our code ran.  There, the signals start once the
# receiver ignores SIGPIPE (SigIgn bit 13), still before its crash recovery and metrics thread.
if tsan_build; then
    i=0
    until [ $(( 0x$(awk '/^SigIgn:/ { print $2 }' "/proc/$RECV_PID/status" 2>/dev/null || echo 0) & 0x1000 )) -ne 0 ]; do
        i=$((i + 1)); [ $i -gt 2500 ] && fail "the receiver never ignored SIGPIPE"
        sleep 0.002
    done
fi
sent=0
i=0
while [ $i -lt 60 ]; do
    kill -PIPE "$RECV_PID" 2>/dev/null || break
    sent=$((sent + 1))
    [ -s "$T/receiver.addr" ] && i=$((i + 1))
    sleep 0.01
done
kill -0 "$RECV_PID" 2>/dev/null || { cat "$T/receiver.log"; fail "the receiver died of SIGPIPE (after $sent signals)"; }
[ -s "$T/receiver.addr" ] || fail "the receiver never listened"
"$CTL" bench gen --size 512KiB --seed 9 "$T/src" > /dev/null
write_agent_config dev1 "$T/src"
"$AGENT" --config "$T/dev1.yaml" --once > "$T/dev1.out" 2> "$T/dev1.err" || { cat "$T/dev1.err"; fail "ship after SIGPIPEs failed"; }
same_tree "$T/src" "$(landed_root dev1)/src"
pass "SIGPIPE sent $sent times from the receiver's start (crash recovery included): it lives and lands a ship"
stop_receiver

# ---- 5. an open-file limit that cannot hold the configured connections ----
write_receiver_config 'max_connections: 50
handshake:
  max_pending: 200'
rc=0
(ulimit -n 256 && exec "$RECEIVER" --config "$T/receiver.yaml") > "$T/limit.out" 2>&1 || rc=$?
[ "$rc" -ne 0 ] || fail "a receiver needing 764 open files started with a limit of 256"
grep -q "need up to 764 open files; the limit is 256" "$T/limit.out" || { cat "$T/limit.out"; fail "the refusal does not say what is needed"; }
grep -q "LimitNOFILE" "$T/limit.out" || fail "the refusal does not say how to raise the limit"
# The same limit holds a configuration that fits: it starts and listens.
write_receiver_config 'max_connections: 4
handshake:
  max_pending: 64'
rm -f "$T/receiver.addr"
(ulimit -n 256 && exec "$RECEIVER" --config "$T/receiver.yaml" --ready-file "$T/receiver.addr") > "$T/fits.out" 2>&1 &
RECV_PID=$!
i=0
while [ ! -s "$T/receiver.addr" ]; do
    i=$((i + 1))
    kill -0 "$RECV_PID" 2>/dev/null && [ $i -le 200 ] || { cat "$T/fits.out"; fail "a configuration that fits the limit did not start"; }
    sleep 0.05
done
stop_receiver
pass "a receiver whose open-file limit cannot hold max_connections and handshake.max_pending refuses to start, naming both"

#!/bin/sh
# Network faults between the agent and the receiver (issue 17, fault
# classes), through a userspace proxy that breaks the connection on purpose
# (tests/tools/fault-proxy.c; netem is not available here).  For each fault
# the first connection is broken, then the agent is run again through the
# same proxy, which now forwards as it is:
#   - reset both ways early (inside the first batch's manifest) and late
#     (inside the chunk data of a later batch);
#   - a stall longer than the receiver's idle timeout (1 s): the receiver
#     closes the silent session and says so;
#   - an agent that stops reading the receiver's answers;
#   - a slow drip that splits every frame into 1..16-byte pieces: the ship
#     succeeds as it is.
# After each broken run: the agent exits non-zero saying not everything was
# acknowledged, the receiver is alive, every file under a final name equals
# its source, and no temporary file stays.  After the run again: the whole
# tree has landed, each file once, byte-identical.
. "$(dirname "$0")/lib.sh"
setup_keys
for d in f1 f2 f3 f4 drip; do
    (cd "$T/keys" && "$CTL" keygen "$d" > /dev/null) || fail "keygen $d"
    printf '%s %s\n' "$d" "$(cat "$T/keys/$d.pub")" >> "$T/keys/authorized"
done
write_receiver_config 'layout: "{device}/{path}"
idle_timeout: 1s'
start_receiver
PROXY="$BUILD/tools/fault-proxy"
PPID_=""
trap 'if [ -n "$PPID_" ]; then kill "$PPID_" 2>/dev/null || true; fi; cleanup' EXIT

# proxy MODE ARGS...: (re)start the proxy in front of the receiver
proxy() {
    if [ -n "$PPID_" ]; then kill "$PPID_" 2>/dev/null || true; wait "$PPID_" 2>/dev/null || true; fi
    rm -f "$T/proxy.addr"
    "$PROXY" --to "$(cat "$T/receiver.addr")" --addr-file "$T/proxy.addr" --mode "$@" >> "$T/proxy.out" 2>&1 &
    PPID_=$!
    i=0
    while [ ! -s "$T/proxy.addr" ]; do
        i=$((i + 1)); [ $i -gt 100 ] && fail "the fault proxy did not start"
        sleep 0.05
    done
}

# Each fault gets its own device and tree (so each starts from nothing).
n=0
fault() { # fault NAME MODE ARGS...
    name=$1; shift
    n=$((n + 1))
    dev=f$n
    S="$T/src/$name"
    mkdir -p "$S"
    i=1
    while [ $i -le 12 ]; do gen_log "$S/log$i.txt" 20000 "$n$i"; i=$((i + 1)); done
    head -c 600000 /dev/urandom > "$S/blob.bin"
    proxy "$@"
    write_agent_config "$dev" "$S" 'batch:
  max_files: 4'
    sed -i "s|^  address: .*|  address: $(cat "$T/proxy.addr")|" "$T/$dev.yaml"
    rc=0
    "$AGENT" --config "$T/$dev.yaml" --once > "$T/$dev.out" 2> "$T/$dev.err" || rc=$?
    [ "$rc" -ne 0 ] || { cat "$T/$dev.err" "$T/proxy.out"; fail "$name: the agent exited 0 through a broken connection"; }
    grep -q "stopped before every batch was acknowledged\|cannot reach the core\|handshake" "$T/$dev.err" ||
        { cat "$T/$dev.err"; fail "$name: the agent does not say what happened"; }
    kill -0 "$RECV_PID" 2>/dev/null || fail "$name: the receiver died"
    if [ -d "$(landed_root "$dev")/$name" ]; then
        for f in $(cd "$(landed_root "$dev")/$name" && find . -type f ! -name '*.ingest-tmp-*'); do
            cmp -s "$(landed_root "$dev")/$name/$f" "$S/$f" || fail "$name: $f under its final name differs from its source"
        done
    fi
    i=0
    while [ "$(count_tmp "$T/bronze")" -ne 0 ]; do # the receiver notices the broken session
        i=$((i + 1)); [ $i -gt 200 ] && fail "$name: temporary files stay after the broken session"
        sleep 0.05
    done
    said=$(grep -v '^shipped' "$T/$dev.err" | grep -v '\[info\]' | tail -2 | cut -c1-160 | tr '\n' ' ')
    ship "$dev" > /dev/null # the proxy's second connection forwards as it is
    same_tree "$S" "$(landed_root "$dev")/$name"
    [ "$(find "$(landed_root "$dev")" -type f | wc -l)" -eq 13 ] || fail "$name: not exactly the 13 files landed"
    pass "$name: $(sed -n 's/^conn 1: //p' "$T/proxy.out" | tail -1); the agent says: $said; the run again lands all 13 once"
    : > "$T/proxy.out"
}

fault reset-early reset --after 3000
fault reset-late reset --after 400000
fault stall stall --after 3000 --seconds 3
grep -q "idle for 1000 ms; closing" "$T/receiver.log" || { tail -20 "$T/receiver.log"; fail "the receiver did not close the stalled session"; }
fault noread noread --after 3000 --seconds 3

# The slow drip: one small tree, the ship succeeds through it.
D="$T/src/drip"
mkdir -p "$D"
gen_log "$D/a.txt" 8000 1
gen_log "$D/b.txt" 8000 2
proxy drip
write_agent_config drip "$D"
sed -i "s|^  address: .*|  address: $(cat "$T/proxy.addr")|" "$T/drip.yaml"
ship drip > /dev/null
same_tree "$D" "$(landed_root drip)/drip"
grep -q "conn 1: drip: .* ended" "$T/proxy.out" || true
pass "a slow drip (frames split into 1..16-byte pieces) ships everything"

# Shared helpers of the integration tests: source it from a test_*.sh.
# BUILD is the absolute build directory (set by tests/run-tests.sh).
set -eu
: "${BUILD:=$(cd "$(dirname "$0")/../../build" && pwd)}"
CTL="$BUILD/ingestctl"
AGENT="$BUILD/ingest-agent"
RECEIVER="$BUILD/ingest-receiver"
T=$(mktemp -d /tmp/ingest-it.XXXXXX)
RECV_PID=""

cleanup() {
    [ -n "$RECV_PID" ] && kill "$RECV_PID" 2>/dev/null && wait "$RECV_PID" 2>/dev/null
    [ "${KEEP:-0}" = 1 ] || rm -rf "$T"
}
trap cleanup EXIT

fail() { echo "FAIL: $*" >&2; exit 1; }
pass() { echo "ok: $*"; }

# setup_keys: receiver key, device keys dev1 and dev2, fleet dedup key.
setup_keys() {
    mkdir -p "$T/keys"
    (cd "$T/keys" && "$CTL" keygen receiver >/dev/null && "$CTL" keygen dev1 >/dev/null \
        && "$CTL" keygen dev2 >/dev/null && "$CTL" keygen --dedup fleet.dedup >/dev/null)
    printf 'dev1 %s\ndev2 %s\n' "$(cat "$T/keys/dev1.pub")" "$(cat "$T/keys/dev2.pub")" > "$T/keys/authorized"
}

# write_receiver_config [extra yaml lines]
write_receiver_config() {
    mkdir -p "$T/bronze" "$T/rstate"
    cat > "$T/receiver.yaml" <<EOT
listen: 127.0.0.1:0
key: keys/receiver.key
authorized_devices: keys/authorized
dedup_key: keys/fleet.dedup
state_dir: rstate
bronze: bronze
log:
  level: info
${1:-}
EOT
}

# write_agent_config DEVICE SRC [extra yaml lines]: config in $T/DEVICE.yaml
write_agent_config() {
    mkdir -p "$T/astate-$1"
    cat > "$T/$1.yaml" <<EOT
device:
  id: $1
  key: keys/$1.key
core:
  address: $(cat "$T/receiver.addr")
  receiver_key: keys/receiver.pub
dedup_key: keys/fleet.dedup
sources:
  - path: $2
state_dir: astate-$1
${3:-}
EOT
}

# start_receiver: start it in the background and wait until it listens.
start_receiver() {
    rm -f "$T/receiver.addr"
    "$RECEIVER" --config "$T/receiver.yaml" --ready-file "$T/receiver.addr" >> "$T/receiver.log" 2>&1 &
    RECV_PID=$!
    i=0
    while [ ! -s "$T/receiver.addr" ]; do
        i=$((i + 1))
        [ $i -gt 200 ] && { cat "$T/receiver.log"; fail "receiver did not start"; }
        kill -0 "$RECV_PID" 2>/dev/null || { cat "$T/receiver.log"; fail "receiver exited"; }
        sleep 0.05
    done
}

stop_receiver() {
    [ -n "$RECV_PID" ] || return 0
    kill "$RECV_PID" 2>/dev/null || true
    wait "$RECV_PID" 2>/dev/null || true
    RECV_PID=""
}

# ship DEVICE: run the agent once; its summary line is left in $T/DEVICE.out
ship() {
    "$AGENT" --config "$T/$1.yaml" --once > "$T/$1.out" 2> "$T/$1.err" || {
        cat "$T/$1.err"; tail -20 "$T/receiver.log"; fail "agent $1 failed"; }
    cat "$T/$1.out"
}

# field DEVICE NAME: a numeric field of the last summary line (name=value)
field() { tail -1 "$T/$1.out" | tr ' ' '\n' | sed -n "s/^$2=//p"; }

# same_tree SRC LANDED: every file of SRC equals the file of the same relative path under LANDED
same_tree() {
    (cd "$1" && find . -type f | sort | xargs -r sha256sum) > "$T/src.sums"
    (cd "$2" && sha256sum -c --quiet "$T/src.sums") || fail "landed tree differs from $1"
}

# landed_root DEVICE: the directory the device's files landed under
# (layout {device}/{path} in these tests)
landed_root() { echo "$T/bronze/$1"; }

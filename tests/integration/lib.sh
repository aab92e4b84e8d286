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
    # Under SANITIZE=1 or SANITIZE=thread a program's sanitizer report (a leak
    # at exit, a data race, an error in a receiver the test only stops) fails
    # the test, whatever it asserted.
    _sanre='ERROR: (Address|Leak|Thread)Sanitizer|WARNING: ThreadSanitizer|runtime error:'
    _san=$(find "$T" -maxdepth 2 -type f \( -name '*.log' -o -name '*.err' -o -name '*.out' \) \
        -exec grep -l -E "$_sanre" {} + 2>/dev/null | head -3)
    if [ -n "$_san" ]; then
        echo "FAIL: sanitizer report in: $_san" >&2
        for _f in $_san; do grep -m1 -A20 -E "$_sanre" "$_f" >&2; done
        [ "${KEEP:-0}" = 1 ] || rm -rf "$T" ${EXTRA_DIRS:-}
        exit 1
    fi
    [ "${KEEP:-0}" = 1 ] || rm -rf "$T" ${EXTRA_DIRS:-}
}
trap cleanup EXIT

fail() { echo "FAIL: $*" >&2; exit 1; }

# tsan_build: true when the programs under test were built with ThreadSanitizer (SANITIZE=thread)
tsan_build() { nm "$RECEIVER" 2>/dev/null | grep -q __tsan_init; }

# skip_kafka_under_tsan: ends a Kafka test, passed and saying why, in a ThreadSanitizer build (SANITIZE=thread):
# GCC 12's TSan does not intercept C11 thrd_create, with which librdkafka starts its threads, and the first
# allocation on such a thread crashes inside TSan (SEGV at address 0xc38, seen in kafka-mock's "rdk:mock").
skip_kafka_under_tsan() {
    if tsan_build; then
        echo "ok: skipped: ThreadSanitizer build (librdkafka's threads are not TSan's); make check and SANITIZE=1 run it"
        exit 0
    fi
}
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
    # shellcheck disable=SC2086 # RECV_ARGS: extra options, split on purpose
    "$RECEIVER" --config "$T/receiver.yaml" --ready-file "$T/receiver.addr" ${RECV_ARGS:-} >> "$T/receiver.log" 2>&1 &
    RECV_PID=$!
    i=0
    while [ ! -s "$T/receiver.addr" ]; do
        i=$((i + 1))
        [ $i -gt 200 ] && { cat "$T/receiver.log"; fail "receiver did not start"; }
        kill -0 "$RECV_PID" 2>/dev/null || { cat "$T/receiver.log"; fail "receiver exited"; }
        sleep 0.05
    done
}

# pin_receiver_port: the running receiver's address goes into its config, so that restarts listen on the
# same port (agents' configs written before a restart stay right)
pin_receiver_port() {
    ADDR=$(cat "$T/receiver.addr")
    sed -i "s|^listen: .*|listen: $ADDR|" "$T/receiver.yaml"
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

# gen_log FILE BYTES SEED: a deterministic text log of exactly BYTES bytes
# (timestamped lines with pseudo-random fields; seed selects the content).
gen_log() {
    awk -v seed="$3" -v n=$(($2 / 100 + 1000)) 'BEGIN {
        s = seed
        for (i = 0; i < n; i++) {
            s = (s * 1103515245 + 12345) % 2147483648
            printf "2024-05-01T%02d:%02d:%02d.%03dZ host-%d svc=ingest level=%s req=%08x latency_ms=%d msg=\"request %d seed %d\"\n",
                int(i / 3600000) % 24, int(i / 60000) % 60, int(i / 1000) % 60, i % 1000,
                s % 7, (s % 13 == 0 ? "WARN" : "INFO"), s, s % 997, i, seed
        }
    }' | head -c "$2" >> "$1"
}

# gen_events DIR N: N small JSON events DIR/e0.json .. of exactly 1,000 bytes each, alike but for their
# numbers (they compress well together, as a gateway's events do)
gen_events() {
    mkdir -p "$1"
    _i=0
    while [ $_i -lt "$2" ]; do
        printf '{"seq":%06d,"sensor":"s-%03d","pad":"%0959d"}\n' $_i $((_i % 97)) $((_i * 7919)) > "$1/e$_i.json"
        _i=$((_i + 1))
    done
}

# count_tmp DIR: number of lander temporary files under the bronze root DIR
# (their names hold the tree's tag: .*.ingest-tmp-TAG.*)
count_tmp() {
    _tag=$(cat "$1/_manifests/.tmp-tag" 2>/dev/null || true)
    if [ -z "$_tag" ]; then echo 0; else find "$1" -name "*.ingest-tmp-$_tag.*" | wc -l; fi
}

# manifest_paths DEVICE: the source paths recorded in the device's batch
# manifests (one line per FILE record, in batch name order)
manifest_paths() {
    for m in $(ls "$T/bronze/_manifests/$1/" | sort); do
        grep -o '"path":"[^"]*"' "$T/bronze/_manifests/$1/$m" | sed 's/^"path":"//; s/"$//'
    done
}

# wait_log PATTERN [TRIES]: wait (50 ms steps, default 10 s) for PATTERN in the receiver log
wait_log() {
    i=0
    while ! grep -q -- "$1" "$T/receiver.log" 2>/dev/null; do
        i=$((i + 1))
        [ $i -gt "${2:-200}" ] && { tail -20 "$T/receiver.log"; fail "no '$1' in the receiver log"; }
        sleep 0.05
    done
}

# start_daemon DEVICE: the agent as a daemon with $T/DEVICE.yaml, logging to $T/DEVICE.err, in the background
# (its pid in DAEMON_PID, killed at exit); returns once it runs
start_daemon() {
    "$AGENT" --config "$T/$1.yaml" > "$T/$1.out" 2> "$T/$1.err" &
    DAEMON_PID=$!
    trap 'kill $DAEMON_PID 2>/dev/null || true; cleanup' EXIT
    i=0
    while ! grep -q "running: " "$T/$1.err"; do
        i=$((i + 1))
        [ $i -gt 200 ] && { cat "$T/$1.err"; fail "the daemon did not start"; }
        sleep 0.05
    done
}

# wait_same EXPECTED FILE TRIES LOG WHAT: wait (50 ms steps) until FILE holds EXPECTED's bytes; after TRIES,
# LOG's tail and fail with WHAT
wait_same() {
    i=0
    until cmp -s "$1" "$2"; do
        i=$((i + 1))
        [ $i -gt "$3" ] && { tail -5 "$4"; fail "$5"; }
        sleep 0.05
    done
}

# distinct_chunks FILE...: number of distinct chunk ids of the files
# (default chunking parameters, as the agents in these tests use)
distinct_chunks() { "$CTL" chunk "$@" | grep -v '^#' | awk '{ print $3 }' | sort -u | wc -l; }

# recv_sum NAME: sum of "<n> NAME" over every "landed:" line of the receiver log
# (NAME: "chunks new", "known", "re-asked")
recv_sum() { grep ' landed: ' "$T/receiver.log" | grep -o "[0-9]* $1" | awk '{ s += $1 } END { print s + 0 }'; }

# ship_with DEVICE ARGS...: like ship, with extra agent arguments (e.g. --all)
ship_with() {
    d=$1; shift
    "$AGENT" --config "$T/$d.yaml" --once "$@" > "$T/$d.out" 2> "$T/$d.err" || {
        cat "$T/$d.err"; tail -20 "$T/receiver.log"; fail "agent $d failed"; }
    cat "$T/$d.out"
}

# status_json: the daemon's status (socket $SOCK, default dev1's) as JSON into $T/status.json
status_json() { "$CTL" status --json --socket "${SOCK:-$T/astate-dev1/agent.sock}" > "$T/status.json" 2>/dev/null; }
# until_status KEY VALUE: wait (bounded) until the status shows KEY = VALUE
until_status() {
    i=0
    while ! status_json || [ "$(jget "$1")" != "$2" ]; do
        i=$((i + 1)); [ $i -gt 300 ] && { cat "$T/status.json" "$T/dev1.err"; fail "status never showed $1 = $2"; }
        sleep 0.05
    done
}

# jget KEY: a value of the status JSON in $T/status.json ("a.b.0.c"; objects,
# lists and booleans printed as JSON).  Needs python3 (tests skip without it).
jget() {
    python3 -c 'import json,sys
v = json.load(open(sys.argv[1]))
for k in sys.argv[2].split("."):
    v = v[int(k)] if isinstance(v, list) else v[k]
print(json.dumps(v) if isinstance(v, (dict, list, bool)) or v is None else v)' "$T/status.json" "$1"
}

# powercut_wrapper PROGRAM DIR ROOTS: make $T/NAME-pc (NAME: PROGRAM's name), a
# wrapper that runs PROGRAM (same pid: exec) under the power-cut layer
# (tests/tools/powercut/) with its undo log in DIR, logging changes under
# ROOTS (absolute, ':'-separated); prints the wrapper's path.  A power cut
# is then kill -9 of the program and "$BUILD/tools/powercut-restore" DIR.
powercut_wrapper() {
    [ -f "$BUILD/tools/powercut.so" ] && [ -x "$BUILD/tools/powercut-restore" ] ||
        fail "the power-cut layer is not built ($BUILD/tools/powercut.so)"
    mkdir -p "$2"
    _w="$T/$(basename "$1")-pc"
    cat > "$_w" <<EOT
#!/bin/sh
POWERCUT_DIR='$2' POWERCUT_ROOTS='$3' LD_PRELOAD='$BUILD/tools/powercut.so' \\
ASAN_OPTIONS="\${ASAN_OPTIONS:+\$ASAN_OPTIONS:}verify_asan_link_order=0" exec '$1' "\$@"
EOT
    chmod +x "$_w"
    echo "$_w"
}

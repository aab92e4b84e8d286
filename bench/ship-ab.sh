#!/usr/bin/env bash
# bench/ship-ab.sh BUILD_A BUILD_B: one initial ship of a bench tree by two
# builds, interleaved, in one run: the measure of one change (this 2-core
# machine is shared and noisy: compare the two as ratios of medians and
# pair by pair, never across runs).
#
# The tree is made once with BUILD_B's `ingestctl bench gen --profile
# PROFILE`; before every ship the machine is synced, its page cache dropped
# when root, and the tree read back into it, so that every ship starts alike.  For each of
# PAIRS rounds, BUILD_A and BUILD_B each ship it once with `ingest-agent
# --once` into a receiver of the same build whose bronze and state_dir are
# on a fresh loop-mounted ext4 (with journal) when root, else in a fresh
# directory under BENCH_DIR; B goes first in odd rounds, so neither build
# always does.  Prints one line per ship: wall seconds (the agent's start to
# its exit, when every batch is durable and acknowledged), the agent's CPU
# seconds (its summary line) and the receiver's (utime + stime from
# /proc/PID/stat just before it is stopped), then per build the medians,
# the medians of the per-round ratios B/A, and in how many rounds B was
# faster.
#
# Unlike bench/ship.sh there is no other tool, no copy of the source and no
# incremental phase between the ships: less of the machine's drift between
# the two builds of a round, and nothing else measured.
#
# Environment: PROFILE (small; any of `bench gen --profile`), PAIRS (9),
# GEN_ARGS (more options of bench gen, e.g. "--size 256MiB"), BENCH_DIR
# (/var/tmp), LOOP (auto|0), IMG_SIZE (4G), AGENT_YAML and RECEIVER_YAML
# (lines appended to both builds' configurations).
set -euo pipefail
# shellcheck source=bench/lib.sh
. "$(dirname "$0")/lib.sh"

A=${1:?usage: bench/ship-ab.sh BUILD_A BUILD_B}
B=${2:?usage: bench/ship-ab.sh BUILD_A BUILD_B}
PROFILE=${PROFILE:-small}
PAIRS=${PAIRS:-9}
GEN_ARGS=${GEN_ARGS:-}
BENCH_DIR=${BENCH_DIR:-/var/tmp}
LOOP=${LOOP:-auto}
IMG_SIZE=${IMG_SIZE:-4G}
for b in "$A" "$B"; do
    [ -x "$b/ingestctl" ] && [ -x "$b/ingest-receiver" ] && [ -x "$b/ingest-agent" ] && continue
    echo "ship-ab: $b lacks ingestctl, ingest-receiver or ingest-agent" >&2
    exit 2
done
A=$(cd "$A" && pwd)
B=$(cd "$B" && pwd)
W=$(mktemp -d "$BENCH_DIR/ship-ab.XXXXXX")
MP=$W/mnt
RPID=
cleanup() {
    [ -z "$RPID" ] || kill "$RPID" 2>/dev/null || true
    umount "$MP" 2>/dev/null || true
    rm -rf "$W"
}
trap cleanup EXIT
trap "exit 1" INT TERM HUP
use_loop=0
if loop_ok; then use_loop=1; fi

now_us() { local t=${EPOCHREALTIME}; echo "${t/./}"; }

# ship BIN: one initial ship by the build in BIN; writes "wall agent_cpu receiver_cpu" to $W/one
ship() {
    local bin=$1 t0 t1 rcpu acpu
    fresh_dir bronze rstate
    rm -rf "$W/astate" "$W/addr"
    mkdir -p "$W/astate"
    cat >"$W/receiver.yaml" <<EOT
listen: 127.0.0.1:0
key: $W/keys/receiver.key
authorized_devices: $W/keys/authorized
dedup_key: $W/keys/fleet.dedup
state_dir: $MP/rstate
bronze: $MP/bronze
layout: "{device}/{path}"
log:
  level: warn
${RECEIVER_YAML:-}
EOT
    "$bin/ingest-receiver" --config "$W/receiver.yaml" --ready-file "$W/addr" >>"$W/receiver.log" 2>&1 &
    RPID=$!
    while [ ! -s "$W/addr" ]; do
        kill -0 "$RPID" 2>/dev/null || { echo "ship-ab: the receiver of $bin did not start:" >&2; cat "$W/receiver.log" >&2; exit 1; }
        sleep 0.02
    done
    cat >"$W/agent.yaml" <<EOT
device:
  id: dev1
  key: $W/keys/dev1.key
core:
  address: $(cat "$W/addr")
  receiver_key: $W/keys/receiver.pub
dedup_key: $W/keys/fleet.dedup
sources:
  - path: $W/src
state_dir: $W/astate
log:
  level: warn
${AGENT_YAML:-}
EOT
    # The same start for every ship: nothing dirty (the last ship's image is gone, the tree written at the
    # start is on disk), and as root the page cache dropped, then the source read back into it.
    sync
    [ "$(id -u)" != 0 ] || echo 3 >/proc/sys/vm/drop_caches 2>/dev/null || true
    find "$W/src" -type f -print0 | xargs -0 cat >/dev/null
    t0=$(now_us)
    "$bin/ingest-agent" --config "$W/agent.yaml" --once >"$W/agent.out" 2>&1 || {
        echo "ship-ab: the agent of $bin failed:" >&2
        cat "$W/agent.out" >&2
        exit 1
    }
    t1=$(now_us)
    rcpu=$(awk -v hz="$(getconf CLK_TCK)" '{ printf "%.2f", ($14 + $15) / hz }' "/proc/$RPID/stat")
    kill "$RPID"
    wait "$RPID" || true
    RPID=
    acpu=$(tr ' ' '\n' <"$W/agent.out" | sed -n 's/^cpu_seconds=//p' | tail -1)
    awk -v a="$t0" -v b="$t1" -v c="$acpu" -v r="$rcpu" 'BEGIN { printf "%.3f %s %s\n", (b - a) / 1e6, c, r }' >"$W/one"
}

mkdir -p "$W/keys"
(cd "$W/keys" && "$B/ingestctl" keygen receiver >/dev/null && "$B/ingestctl" keygen dev1 >/dev/null &&
    "$B/ingestctl" keygen --dedup fleet.dedup >/dev/null)
printf 'dev1 %s\n' "$(cat "$W/keys/dev1.pub")" >"$W/keys/authorized"
# shellcheck disable=SC2086 # GEN_ARGS: options, split on purpose
"$B/ingestctl" bench gen --profile "$PROFILE" $GEN_ARGS "$W/src" >/dev/null
files=$(find "$W/src" -type f | wc -l)
bytes=$(du -sb "$W/src" | cut -f1)

RES=$W/results
: >"$RES"
echo "# ship-ab: A=$A B=$B profile=$PROFILE ($files files, $bytes bytes) pairs=$PAIRS loop=$use_loop"
printf '%-4s %-5s %8s %9s %12s\n' pair build wall_s agent_cpu receiver_cpu
for r in $(seq 1 "$PAIRS"); do
    order="A B"
    [ $((r % 2)) = 1 ] && order="B A"
    for which in $order; do
        if [ "$which" = A ]; then bin=$A; else bin=$B; fi
        ship "$bin"
        read -r wall acpu rcpu <"$W/one"
        printf '%-4s %-5s %8s %9s %12s\n' "$r" "$which" "$wall" "$acpu" "$rcpu"
        echo "$which $r $wall $acpu $rcpu" >>"$RES"
    done
done
col() { awk -v w="$1" -v k="$2" '$1 == w { print $k }' "$RES"; }
# ratios COLUMN: B/A per round (none for a round where A's figure is 0, a CPU time under 10 ms)
ratios() { awk -v k="$1" '{ v[$1 " " $2] = $k } END { for (r = 1; (("A " r) in v); r++) if (("B " r) in v && v["A " r] > 0) printf "%.4f\n", v["B " r] / v["A " r] }' "$RES"; }
echo "# medians of $PAIRS ships per build"
printf '%-5s %8s %9s %12s\n' build wall_s agent_cpu receiver_cpu
for which in A B; do
    printf '%-5s %8s %9s %12s\n' "$which" "$(col "$which" 3 | median)" "$(col "$which" 4 | median)" "$(col "$which" 5 | median)"
done
echo "# medians of the per-round ratios B/A"
printf '%8s %9s %12s\n' wall_s agent_cpu receiver_cpu
printf '%8s %9s %12s\n' "$(ratios 3 | median)" "$(ratios 4 | median)" "$(ratios 5 | median)"
echo "# rounds where B's wall was the shorter: $(ratios 3 | awk '$1 < 1' | wc -l) of $PAIRS"

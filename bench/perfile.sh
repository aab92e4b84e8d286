#!/bin/bash
# Where each file's microseconds go, at the agent and at the receiver
# (issue 16 item 3): ships a tree of many small files once with
# `ingest-agent --once` into a receiver whose bronze and state are on a fresh
# loop-mounted ext4 (a fresh directory when not root), both under
# `perf record -g`, and prints CPU microseconds per file for each side, split
# by the system calls a file costs and by shared object for the rest.
#
#   bash bench/perfile.sh BUILD            # FILES=40000 (`bench gen --profile small`), RUNS=3
#   FILES=5000 RUNS=1 bash bench/perfile.sh build
#
# The split of each side is the median run's (by that side's CPU seconds);
# the CPU seconds are utime+stime of the process from /proc (the agent's
# includes its start-up and walk). perf's shares are of that process's samples.
# A system call's row counts the time spent in the libc entry and below it
# (--children), so it covers the kernel work the call does.
set -euo pipefail
BUILD=${1:-${BUILD:-build}}
FILES=${FILES:-40000}
RUNS=${RUNS:-3}
CTL=$BUILD/ingestctl AGENT=$BUILD/ingest-agent RECEIVER=$BUILD/ingest-receiver
die() { echo "perfile: $*" >&2; exit 1; }
for p in "$CTL" "$AGENT" "$RECEIVER"; do [ -x "$p" ] || die "$p not built (make BUILD=$BUILD all)"; done
command -v perf >/dev/null || die "perf not found (make bench-deps)"
perf record -q -N -o /dev/null -- true > /dev/null 2>&1 || die "perf record does not work here"

W=$(mktemp -d "${BENCH_DIR:-/tmp}/ingest-perfile.XXXXXX")
[ "${KEEP:-0}" = 1 ] && echo "perfile: work dir $W (kept)" >&2
RP=
cleanup() {
    [ -n "$RP" ] && kill "$RP" 2>/dev/null && wait "$RP" 2>/dev/null || true
    mountpoint -q "$W/fs" 2>/dev/null && umount "$W/fs"
    [ "${KEEP:-0}" = 1 ] || rm -rf "$W"
}
trap cleanup EXIT

"$CTL" bench gen --profile small --files "$FILES" "$W/gen" > /dev/null
CTLA=$(realpath "$CTL")
mkdir "$W/keys"
(cd "$W/keys" && "$CTLA" keygen receiver > /dev/null && "$CTLA" keygen dev1 > /dev/null &&
    "$CTLA" keygen --dedup fleet.dedup > /dev/null)
printf 'dev1 %s\n' "$(cat "$W/keys/dev1.pub")" > "$W/keys/authorized"

# categories: the libc entries of the calls a file costs; the rest by shared object
CALLS='__libc_openat64 __GI___libc_open read fsync __libc_pwrite __GI___mkdir __GI___renameat __GI___renameat2 __GI___libc_write __GI___libc_read __GI___fstatat64 __GI___fstat64 __GI___fchmod __GI___utimensat64_helper __close syncfs sync_file_range fdatasync __GI___fdatasync __GI___getdents64 __GI___libc_pwrite __libc_pwrite64 __GI___writev'
split() { # split PERFDATA CPU_S : "name share us_per_file" lines
    local d=$1 cpu=$2
    {
        perf report -i "$d" --children --sort sym --stdio -g none 2>/dev/null | grep '%' | grep '\[\.\]' |
            awk -v calls=" $CALLS " '{ s = $NF; if (index(calls, " " s " ")) { gsub("%", "", $1); print "call", s, $1 } }'
        perf report -i "$d" --no-children --sort dso --stdio -g none 2>/dev/null | grep '%' |
            awk '{ gsub("%", "", $1); print "dso", $2, $1 }'
    } | awk -v cpu="$cpu" -v n="$FILES" '
        $1 == "call" { c[$2] = $3; tot += $3 }
        $1 == "dso" { d[$2] = $3 }
        END {
            for (k in c) printf "%-34s %6.2f%% %7.2f\n", k, c[k], c[k] / 100 * cpu / n * 1e6
            printf "%-34s %6.2f%% %7.2f\n", "(all other work, by object:)", 100 - tot, (100 - tot) / 100 * cpu / n * 1e6
            for (k in d) printf "  %-32s %6.2f%% (of all samples, calls included)\n", k, d[k]
        }' | sort -t% -k1,1 -s
}

declare -a AG_CPU RC_CPU
for r in $(seq 1 "$RUNS"); do
    R=$W/run$r
    mkdir -p "$R/fs"
    if [ "$(id -u)" = 0 ]; then
        truncate -s $((FILES / 10 + 512))M "$R/img"
        mkfs.ext4 -q -F -N $((FILES * 3 + 10000)) -E lazy_itable_init=0,lazy_journal_init=0 "$R/img"
        mount -o loop "$R/img" "$R/fs"
    fi
    mkdir -p "$R/fs/bronze" "$R/fs/rstate"
    cp -a "$W/gen" "$R/src"
    sync
    cat > "$R/r.yaml" <<EOF
listen: 127.0.0.1:0
key: $W/keys/receiver.key
authorized_devices: $W/keys/authorized
dedup_key: $W/keys/fleet.dedup
state_dir: $R/fs/rstate
bronze: $R/fs/bronze
layout: "{device}/{path}"
log:
  level: warn
EOF
    "$RECEIVER" --config "$R/r.yaml" --ready-file "$R/addr" > "$R/recv.log" 2>&1 &
    RP=$!
    for _ in $(seq 1 100); do
        [ -s "$R/addr" ] && break
        sleep 0.1
    done
    [ -s "$R/addr" ] || { cat "$R/recv.log"; die "the receiver did not start"; }
    addr=$(cat "$R/addr")
    cat > "$R/a.yaml" <<EOF
device:
  id: dev1
  key: $W/keys/dev1.key
core:
  address: $addr
  receiver_key: $W/keys/receiver.pub
dedup_key: $W/keys/fleet.dedup
sources:
  - path: $R/src
state_dir: $R/astate
log:
  level: warn
EOF
    perf record -q -N -g -o "$R/recv.data" -p "$RP" > "$R/perf-recv.log" 2>&1 &
    PP=$!
    sleep 1
    perf record -q -N -g -o "$R/agent.data" -- "$AGENT" --config "$R/a.yaml" --once > "$R/agent.out" 2>&1 ||
        { cat "$R/agent.out"; die "the agent failed"; }
    rs=$(cut -d' ' -f14-15 "/proc/$RP/stat")
    kill -INT "$PP"; wait "$PP" || true
    kill "$RP"; wait "$RP" || true
    RP=
    tck=$(getconf CLK_TCK)
    RC_CPU[$r]=$(echo "$rs" | awk -v t="$tck" '{ printf "%.3f", ($1 + $2) / t }')
    AG_CPU[$r]=$(sed -n 's/.*cpu_seconds=\([0-9.]*\).*/\1/p' "$R/agent.out")
    echo "run $r: agent CPU ${AG_CPU[$r]} s, receiver CPU ${RC_CPU[$r]} s, $(grep -o 'seconds=[0-9.]* MB/s=[0-9.]*' "$R/agent.out" | head -1)"
    mountpoint -q "$R/fs" && umount "$R/fs"
    rm -rf "$R/img" "$R/src" "$R/astate"
done

median_run() { # median_run v1 v2 ... : the run number of the median value
    local i=0
    for v in "$@"; do i=$((i + 1)); echo "$v $i"; done | sort -n | awk -v n=$# 'NR == int((n + 1) / 2) { print $2 }'
}
ra=$(median_run "${AG_CPU[@]:1}")
rr=$(median_run "${RC_CPU[@]:1}")
echo
echo "files: $FILES (ingestctl bench gen --profile small --files $FILES); runs: $RUNS; µs per file of CPU"
echo
echo "agent (run $ra, ${AG_CPU[$ra]} s CPU, $(awk -v c="${AG_CPU[$ra]}" -v n="$FILES" 'BEGIN { printf "%.1f", c / n * 1e6 }') µs per file):"
split "$W/run$ra/agent.data" "${AG_CPU[$ra]}"
echo
echo "receiver (run $rr, ${RC_CPU[$rr]} s CPU, $(awk -v c="${RC_CPU[$rr]}" -v n="$FILES" 'BEGIN { printf "%.1f", c / n * 1e6 }') µs per file):"
split "$W/run$rr/recv.data" "${RC_CPU[$rr]}"

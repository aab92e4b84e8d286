#!/usr/bin/env bash
# bench/daemon-catchup.sh BUILD [BUILD...]: how fast the edge daemon (not
# --once) catches up on a backlog, for each build given, in one run.
#
# A tree of `ingestctl bench gen --profile PROFILE --size SIZE` (default:
# the 1 GiB default tree) is there when the daemon starts (settle 0s,
# batch.max_wait 10ms): it walks it, journals its batches and ships them to
# a receiver on loopback.  Measured per run: the wall seconds from the
# daemon's start until its status says every file shipped (acknowledged),
# the daemon's CPU seconds (--once's: as last sampled before it exits),
# and its largest private memory (RssAnon, sampled with the status every
# 50 ms).  ONCE=1 (default) adds a run of the
# first build's `ingest-agent --once` on the same tree (its own wall time)
# for comparison.  RUNS rounds (default 3), the builds interleaved, each run
# landing into a fresh loop-mounted ext4 when run as root (else a fresh
# directory); COLD=1 drops the page cache before each run (the sources are
# read from disk, as after a long outage).  Medians go to RESULTS (default
# bench/results-daemon-catchup.md).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
TOP=$(cd "$HERE/.." && pwd)
[ $# -ge 1 ] || { echo "usage: bench/daemon-catchup.sh BUILD [BUILD...]" >&2; exit 2; }
PROFILE=${PROFILE:-default}
SIZE=${SIZE:-1GiB}
RUNS=${RUNS:-3}
ONCE=${ONCE:-1}
COLD=${COLD:-0}
RESULTS=${RESULTS:-$HERE/results-daemon-catchup.md}
builds=()
for b in "$@"; do case $b in /*) builds+=("$b") ;; *) builds+=("$TOP/$b") ;; esac; done
CTL=${builds[0]}/ingestctl
W=$(mktemp -d "${TMPDIR:-/tmp}/ingest-catchup.XXXXXX")
cleanup() {
    mountpoint -q "$W/fs" 2>/dev/null && umount "$W/fs"
    rm -rf "$W"
}
trap cleanup EXIT
"$CTL" bench gen --profile "$PROFILE" --size "$SIZE" "$W/src" >/dev/null
NFILES=$(find "$W/src" -type f | wc -l)
NBYTES=$(du -sb --apparent-size "$W/src" | cut -f1)
mkdir -p "$W/keys"
(cd "$W/keys" && "$CTL" keygen receiver >/dev/null && "$CTL" keygen dev1 >/dev/null &&
    "$CTL" keygen --dedup fleet.dedup >/dev/null)
printf 'dev1 %s\n' "$(cat "$W/keys/dev1.pub")" > "$W/keys/authorized"

fresh_fs() { # a fresh landing filesystem at $W/fs
    mountpoint -q "$W/fs" 2>/dev/null && umount "$W/fs"
    rm -rf "$W/fs" "$W/img"
    mkdir -p "$W/fs"
    if [ "$(id -u)" = 0 ] && command -v mkfs.ext4 >/dev/null; then
        truncate -s $((NBYTES * 2 / 1048576 + 1024))M "$W/img"
        mkfs.ext4 -q -F -N $((NFILES * 2 + 10000)) -E lazy_itable_init=0,lazy_journal_init=0 "$W/img"
        mount -o loop "$W/img" "$W/fs"
    fi
    mkdir -p "$W/fs/bronze" "$W/fs/rstate"
}

receiver_config() { # a port of the kernel's choosing: the receiver writes its address to --ready-file
    cat > "$W/r.yaml" <<EOT
listen: 127.0.0.1:0
key: $W/keys/receiver.key
authorized_devices: $W/keys/authorized
dedup_key: $W/keys/fleet.dedup
state_dir: $W/fs/rstate
bronze: $W/fs/bronze
layout: "{device}/{path}"
log:
  level: warn
EOT
}

agent_config() { # agent_config ADDRESS
    cat > "$W/a.yaml" <<EOT
device:
  id: dev1
  key: $W/keys/dev1.key
core:
  address: $1
  receiver_key: $W/keys/receiver.pub
dedup_key: $W/keys/fleet.dedup
sources:
  - path: $W/src
    settle: 0s
state_dir: $W/astate
batch:
  max_wait: 10ms
log:
  level: warn
EOT
}

one() { # one BUILD MODE(daemon|once): prints "wall cpu maxrssanon_kib"
    local b=$1 mode=$2
    fresh_fs
    rm -rf "$W/astate" "$W/addr"
    receiver_config
    [ "$COLD" = 1 ] && { sync; echo 3 > /proc/sys/vm/drop_caches; }
    "$b/ingest-receiver" --config "$W/r.yaml" --ready-file "$W/addr" > "$W/recv.log" 2>&1 &
    local rp=$! i=0
    while [ ! -s "$W/addr" ]; do
        i=$((i + 1)); [ $i -gt 200 ] && { cat "$W/recv.log"; echo "receiver did not start" >&2; exit 1; }
        sleep 0.05
    done
    agent_config "$(cat "$W/addr")"
    local t0 t1 maxra=0 ra
    t0=$EPOCHREALTIME
    if [ "$mode" = once ]; then
        "$b/ingest-agent" --config "$W/a.yaml" --once > "$W/agent.out" 2>&1 &
        local ap=$!
        while kill -0 $ap 2>/dev/null; do
            ra=$(awk '/RssAnon/ { print $2 }' /proc/$ap/status 2>/dev/null || true)
            [ -n "$ra" ] && [ "$ra" -gt "$maxra" ] && maxra=$ra
            cpu=$(awk '{ print ($14 + $15) }' /proc/$ap/stat 2>/dev/null || echo "${cpu:-0}")
            sleep 0.05
        done
        wait $ap || { cat "$W/agent.out"; echo "the --once agent failed" >&2; exit 1; }
        t1=$EPOCHREALTIME
    else
        "$b/ingest-agent" --config "$W/a.yaml" > "$W/agent.out" 2>&1 &
        local ap=$! f=""
        i=0
        while :; do
            f=$("$b/ingestctl" status --json --socket "$W/astate/agent.sock" 2>/dev/null |
                grep -o '"files_shipped":[0-9]*' | cut -d: -f2 || true)
            [ "$f" = "$NFILES" ] && break
            ra=$(awk '/RssAnon/ { print $2 }' /proc/$ap/status 2>/dev/null || true)
            [ -n "$ra" ] && [ "$ra" -gt "$maxra" ] && maxra=$ra
            i=$((i + 1)); [ $i -gt 12000 ] && { tail "$W/agent.out"; echo "the daemon did not catch up" >&2; exit 1; }
            sleep 0.05
        done
        t1=$EPOCHREALTIME
        cpu=$(awk '{ print ($14 + $15) }' /proc/$ap/stat)
        kill -TERM $ap; wait $ap || true
    fi
    kill -TERM $rp; wait $rp || true
    awk -v a="$t0" -v b="$t1" -v c="$cpu" -v hz="$(getconf CLK_TCK)" -v m="$maxra" \
        'BEGIN { printf "%.3f %.2f %d\n", b - a, c / hz, m }'
}

median() { sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

declare -A res
for r in $(seq 1 "$RUNS"); do
    for i in "${!builds[@]}"; do
        out=$(one "${builds[$i]}" daemon)
        echo "run $r daemon $(basename "${builds[$i]}"): wall cpu maxRssAnon(KiB) = $out" >&2
        res[$i]+="$out"$'\n'
    done
    if [ "$ONCE" = 1 ]; then
        out=$(one "${builds[0]}" once)
        echo "run $r --once $(basename "${builds[0]}"): wall cpu maxRssAnon(KiB) = $out" >&2
        res[once]+="$out"$'\n'
    fi
done

row() { # row LABEL KEY
    local w c m
    w=$(printf '%s' "${res[$2]}" | awk 'NF { print $1 }' | median)
    c=$(printf '%s' "${res[$2]}" | awk 'NF { print $2 }' | median)
    m=$(printf '%s' "${res[$2]}" | awk 'NF { print $3 }' | median)
    local all
    all=$(printf '%s' "${res[$2]}" | awk 'NF { printf "%s%s", (n++ ? " / " : ""), $1 }')
    awk -v l="$1" -v w="$w" -v c="$c" -v m="$m" -v by="$NBYTES" -v all="$all" \
        'BEGIN { printf "| %s | %.2f | %.1f | %.2f | %.1f MiB | %s |\n", l, w, by / w / 1e6, c, m / 1024, all }'
}
{
    echo "# The edge daemon catching up on a backlog"
    echo
    echo "Written by \`bench/daemon-catchup.sh\` (see its header for what is measured)."
    echo
    echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC'); machine: $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg) at the end"
    echo "- tree: \`ingestctl bench gen --profile $PROFILE --size $SIZE\`, $NFILES files, $NBYTES bytes; RUNS=$RUNS, builds interleaved; COLD=$COLD"
    echo "- landing: $( [ "$(id -u)" = 0 ] && echo 'a fresh loop-mounted ext4 per run' || echo 'a fresh directory per run')"
    echo
    echo "| agent | catch-up s (median) | MB/s | agent CPU s | agent peak RssAnon (sampled) | runs, s |"
    echo "|---|---|---|---|---|---|"
    for i in "${!builds[@]}"; do row "daemon, $(basename "${builds[$i]}")" "$i"; done
    [ "$ONCE" = 1 ] && row "--once, $(basename "${builds[0]}") (for comparison)" once
} > "$RESULTS"
cat "$RESULTS"

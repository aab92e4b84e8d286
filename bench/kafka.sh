#!/usr/bin/env bash
# bench/kafka.sh [BUILD]: the Kafka transport's benchmark (make bench-kafka).
#
# Ships one generated tree (`ingestctl bench gen --size SIZE`) with
# ingest-agent --once, in the same run and in turn:
#   tcp       straight to one receiver (default batches)
#   tcp-small straight to one receiver, with Kafka's batch size
#   kafka1    through librdkafka's mock cluster (tests/tools/kafka-mock: 1
#             broker, 4 partitions) to one receiver of the group
#   kafka2    the same with two receivers in the group
# each into a fresh bronze tree and state, RUNS times; reports medians of
# MB/s (the agent's summary line), records/s (records the agent produced /
# its seconds), the ratio to tcp, and the agent's peak RssAnon (sampled from
# /proc) and peak RSS (/usr/bin/time -v), into bench/results-kafka.md.
#
# The mock keeps only the newest ~5 MiB of each partition, so a device must
# not run further ahead of the landing than that: Kafka batches are BATCH
# (default 8MiB: the agent has at most two in flight, and the receiver holds up to ~24 MiB fetched ahead of its landing).  A real cluster has
# no such bound; there larger batches cut the per-batch round trips.
#
# Environment: SIZE (1GiB), RUNS (3), BATCH (8MiB), MODES ("tcp tcp-small
# kafka1 kafka2"), BENCH_DIR (/tmp), RESULTS (bench/results-kafka.md), KEEP=1.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
TOP=$(cd "$HERE/.." && pwd)
BUILD=${1:-${BUILD:-build}}
case $BUILD in /*) ;; *) BUILD=$TOP/$BUILD ;; esac
SIZE=${SIZE:-1GiB}
RUNS=${RUNS:-3}
BATCH=${BATCH:-8MiB}
MODES=${MODES:-tcp tcp-small kafka1 kafka2}
RESULTS=${RESULTS:-$HERE/results-kafka.md}
CTL=$BUILD/ingestctl
AGENT=$BUILD/ingest-agent
RECEIVER=$BUILD/ingest-receiver
MOCK=$BUILD/tools/kafka-mock

die() { echo "bench-kafka: $*" >&2; exit 1; }
for b in "$CTL" "$AGENT" "$RECEIVER" "$MOCK"; do [ -x "$b" ] || die "$b not built (make all tests)"; done
/usr/bin/time -v true 2>/dev/null || die "/usr/bin/time (GNU time) not found (make bench-deps)"

W=$(mktemp -d "${BENCH_DIR:-/tmp}/bench-kafka.XXXXXX")
PIDS=""
cleanup() {
    for p in $PIDS; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    [ "${KEEP:-0}" = 1 ] || rm -rf "$W"
}
trap cleanup EXIT

mkdir -p "$W/keys"
(cd "$W/keys" && "$CTL" keygen receiver > /dev/null && "$CTL" keygen dev1 > /dev/null &&
    "$CTL" keygen --dedup fleet.dedup > /dev/null)
printf 'dev1 %s\n' "$(cat "$W/keys/dev1.pub")" > "$W/keys/authorized"
echo "bench-kafka: generating $SIZE"
"$CTL" bench gen --size "$SIZE" "$W/src/tree" > /dev/null
BYTES=$(du -sb "$W/src" | awk '{ print $1 }')
(cd "$W/src" && find . -type f | sort | xargs sha256sum) > "$W/sums"

# wait_for FILE PATTERN [TRIES]: up to TRIES x 50 ms (default 30 s)
wait_for() {
    local i=0
    until grep -q -- "$2" "$1" 2>/dev/null; do
        i=$((i + 1)); [ $i -gt "${3:-600}" ] && die "no '$2' in $1"; sleep 0.05
    done
}

# receiver NAME DIR [BOOT [nowait]]: start one (its pid appended to PIDS)
receiver() {
    local n=$1 d=$2 boot=${3:-} nowait=${4:-}
    mkdir -p "$d/state-$n" "$d/bronze"
    {
        echo "listen: 127.0.0.1:0"
        echo "key: $W/keys/receiver.key"
        echo "authorized_devices: $W/keys/authorized"
        echo "dedup_key: $W/keys/fleet.dedup"
        echo "state_dir: $d/state-$n"
        echo "bronze: $d/bronze"
        echo 'layout: "{device}/{path}"'
        if [ -n "$boot" ]; then
            printf 'kafka:\n  brokers: %s\n  properties:\n    fetch.wait.max.ms: "5"\n' "$boot"
            printf '    session.timeout.ms: "6000"\n    heartbeat.interval.ms: "500"\n'
        fi
    } > "$d/$n.yaml"
    "$RECEIVER" --config "$d/$n.yaml" --ready-file "$d/$n.addr" > "$d/$n.log" 2>&1 &
    PIDS="$PIDS $!"
    wait_for "$d/$n.addr" ":"
    [ -z "$boot" ] || [ -n "$nowait" ] || wait_for "$d/$n.log" "partitions of ingest assigned"
}

# one MODE RUN: ship the tree; prints "mbps records rssanon_kb rss_kb"
one() {
    local mode=$1 d=$W/run-$2-$1 boot="" batch="" n
    mkdir -p "$d"
    PIDS=""
    case $mode in
        tcp) receiver r1 "$d" ;;
        tcp-small) receiver r1 "$d"; batch=$BATCH ;;
        kafka1|kafka2)
            mkfifo "$d/mock.in"
            "$MOCK" --brokers 1 --topic ingest:4 --topic ingest-replies:4 --ready-file "$d/mock.ready" \
                < "$d/mock.in" > "$d/mock.out" 2> "$d/mock.err" &
            PIDS="$PIDS $!"
            exec 8> "$d/mock.in"
            wait_for "$d/mock.ready" ":"
            boot=$(cat "$d/mock.ready")
            batch=$BATCH
            if [ "$mode" = kafka1 ]; then
                receiver r1 "$d" "$boot"
            else
                # both join at once (a member joining later waits out a rebalance, ~45 s with the mock)
                receiver r1 "$d" "$boot" nowait
                receiver r2 "$d" "$boot" nowait
                # the group settles when both hold two partitions
                wait_for "$d/r1.log" "2 partitions of ingest assigned" 2400
                wait_for "$d/r2.log" "2 partitions of ingest assigned" 2400
                # and their fetchers run: the mock keeps ~5 MiB a partition, and records produced before
                # anyone fetches are dropped (the receivers then answer ESTALE and the agent ships again)
                sleep 2
            fi ;;
    esac
    mkdir -p "$d/astate"
    {
        printf 'device:\n  id: dev1\n  key: %s\n' "$W/keys/dev1.key"
        printf 'core:\n  receiver_key: %s\n' "$W/keys/receiver.pub"
        if [ -n "$boot" ]; then
            printf 'transport: kafka\nkafka:\n  brokers: %s\n  properties:\n    fetch.wait.max.ms: "5"\n' "$boot"
        else
            printf '  address: %s\n' "$(cat "$d/r1.addr")"
        fi
        printf 'dedup_key: %s\nsources:\n  - path: %s\nstate_dir: %s\n' "$W/keys/fleet.dedup" "$W/src" "$d/astate"
        [ -z "$batch" ] || printf 'batch:\n  max_bytes: %s\n' "$batch"
        [ -z "${AGENT_LOG:-}" ] || printf 'log:\n  level: %s\n' "$AGENT_LOG"
    } > "$d/agent.yaml"
    /usr/bin/time -v -o "$d/time" "$AGENT" --config "$d/agent.yaml" --once > "$d/agent.out" 2> "$d/agent.err" &
    local tpid=$! apid="" peak=0 a
    while kill -0 "$tpid" 2>/dev/null; do
        [ -n "$apid" ] || apid=$(pgrep -P "$tpid" -x ingest-agent || true)
        if [ -n "$apid" ]; then
            a=$(awk '/^RssAnon:/ { print $2 }' "/proc/$apid/status" 2>/dev/null || echo 0)
            [ "${a:-0}" -gt "$peak" ] && peak=$a
        fi
        sleep 0.05
    done
    wait "$tpid" || die "$mode: the agent failed: $(tail -3 "$d/agent.err")"
    n=$(sed -n 's/.*kafka: \([0-9]*\) records produced.*/\1/p' "$d/agent.err" | tail -1)
    local secs mbps rss
    secs=$(tail -1 "$d/agent.out" | tr ' ' '\n' | sed -n 's/^seconds=//p')
    mbps=$(tail -1 "$d/agent.out" | tr ' ' '\n' | sed -n 's|^MB/s=||p')
    rss=$(awk -F': ' '/Maximum resident set size/ { print $2 }' "$d/time")
    # the landed tree equals the source (first run), or at least holds as many files
    if [ "$2" = 1 ]; then
        (cd "$d/bronze/dev1/src" && sha256sum -c --quiet "$W/sums") || die "$mode: the landed tree differs"
    fi
    local landed
    landed=$(find "$d/bronze/dev1/src" -type f | wc -l)
    [ "$landed" = "$(find "$W/src" -type f | wc -l)" ] || die "$mode: $landed files landed"
    [ "$2" != 1 ] || grep -h ' landed: ' "$d"/r*.log | tail -3 >&2
    local per=0
    [ -z "$n" ] || per=$(awk -v n="$n" -v s="$secs" 'BEGIN { printf "%.0f", (s > 0 ? n / s : 0) }')
    local l1 l2
    l1=$(grep -c ' landed: ' "$d/r1.log" || true)
    l2=-
    [ ! -f "$d/r2.log" ] || l2=$(grep -c ' landed: ' "$d/r2.log" || true)
    for p in $PIDS; do kill "$p" 2>/dev/null || true; done
    exec 8>&- 2>/dev/null || true
    wait 2>/dev/null || true
    PIDS=""
    # batches the agent shipped again (a record the mock dropped before a receiver fetched it: ESTALE)
    local again
    again=$(grep -c "not landed" "$d/agent.err" || true)
    echo "$mbps $per $peak $rss $l1 $l2 $again"
}

median() { sort -n | awk '{ v[NR] = $1 } END { if (NR == 0) print 0; else if (NR % 2) print v[(NR + 1) / 2]; else printf "%.1f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

for r in $(seq 1 "$RUNS"); do
    for m in $MODES; do
        res=$(one "$m" "$r")
        echo "run $r $m: MB/s records/s rssanon_kB rss_kB batches_r1 batches_r2 reshipped = $res"
        echo "$m $res" >> "$W/all"
    done
done

tcp=$(awk '$1 == "tcp" { print $2 }' "$W/all" | median)
{
    echo "# Kafka transport benchmark"
    echo
    echo "\`SIZE=$SIZE RUNS=$RUNS BATCH=$BATCH bash bench/kafka.sh\` ($(date -u +%Y-%m-%d)): a tree of $BYTES bytes"
    echo "(\`ingestctl bench gen --size $SIZE\`) shipped by \`ingest-agent --once\`, modes in turn in each run,"
    echo "medians of $RUNS runs. Kafka goes through librdkafka's mock cluster (1 broker, 4 partitions) on"
    echo "loopback; the mock keeps ~5 MiB per partition, so Kafka batches are $BATCH (see the script)."
    echo
    echo "| mode | MB/s | vs tcp | vs tcp, median of per-run ratios | records/s | agent peak RssAnon (median, max) | agent peak RSS |"
    echo "|---|---|---|---|---|---|---|"
    for m in $MODES; do
        mb=$(awk -v m="$m" '$1 == m { print $2 }' "$W/all" | median)
        rec=$(awk -v m="$m" '$1 == m { print $3 }' "$W/all" | median)
        anon=$(awk -v m="$m" '$1 == m { print $4 }' "$W/all" | median)
        rss=$(awk -v m="$m" '$1 == m { print $5 }' "$W/all" | median)
        ratio=$(awk -v a="$mb" -v b="$tcp" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }')
        # each run's mode against that run's tcp (the machine's load changes between runs, less within one)
        rr=$(awk -v m="$m" '$1 == "tcp" { t[++nt] = $2 } $1 == m { v[++nv] = $2 } END { for (i = 1; i <= nv; i++) if (t[i] > 0) printf "%.3f\n", v[i] / t[i] }' "$W/all" | median)
        amax=$(awk -v m="$m" '$1 == m && $4 > x { x = $4 } END { print x + 0 }' "$W/all")
        [ "$rec" = 0 ] && rec=-
        echo "| $m | $mb | ${ratio}x | ${rr}x | $rec | $(awk -v k="$anon" -v x="$amax" 'BEGIN { printf "%.1f MiB, %.1f MiB", k / 1024, x / 1024 }') | $(awk -v k="$rss" 'BEGIN { printf "%.1f MiB", k / 1024 }') |"
    done
    echo
    echo "Batches landed by each receiver of kafka2, per run: $(awk '$1 == "kafka2" { printf "%s+%s ", $6, $7 }' "$W/all")"
    echo "(one device's records are one partition's, so one receiver of the two lands them all)."
    echo "Batches shipped again (answered ESTALE: records the mock dropped before a receiver fetched them), per run:"
    echo "$(awk '$1 ~ /^kafka/ { printf "%s %s; ", $1, $8 }' "$W/all")"
} > "$RESULTS"
cat "$RESULTS"

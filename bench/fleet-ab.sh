#!/usr/bin/env bash
# bench/fleet-ab.sh BUILD_A BUILD_B: `ingestctl bench fleet` of two builds,
# interleaved, in one run (this 2-core machine is shared and noisy: compare
# the two as ratios of medians, never across runs).
#
# For each of RUNS rounds, for each device count in DEVICES, runs
# BUILD_A/ingestctl then BUILD_B/ingestctl (B first in odd rounds, so
# neither build always goes first) with `bench fleet --devices N --size SIZE
# --shared SHARED`, each in a fresh loop-mounted ext4 (with journal) when
# root, else in a fresh directory under BENCH_DIR.  Prints one line per run
# and then, per build and device count, the medians of the aggregate MB/s
# (source bytes / wall seconds), the receiver's CPU seconds and its CPU
# seconds per GB of source (10^9 bytes), the wire bytes of all devices and
# the cross-device dedup (chunks a device did not send because the core
# held them or, with chunks in flight shared, another device was sending
# them), as `bench fleet` reports them.
#
# Then the medians of the per-round ratios B/A (each round runs A and B back
# to back, so a ratio is less exposed to the machine's load than either
# figure).
#
# Environment: DEVICES ("4 8"), RUNS (5), SIZE (64MiB per device), SHARED
# (20, percent), FLEET_ARGS (more options of bench fleet, e.g. "--stagger
# 200ms"), BENCH_DIR (/var/tmp), LOOP (auto|0), IMG_SIZE (4G).
set -euo pipefail
# shellcheck source=bench/lib.sh
. "$(dirname "$0")/lib.sh"

A=${1:?usage: bench/fleet-ab.sh BUILD_A BUILD_B}
B=${2:?usage: bench/fleet-ab.sh BUILD_A BUILD_B}
DEVICES=${DEVICES:-4 8}
RUNS=${RUNS:-5}
SIZE=${SIZE:-64MiB}
SHARED=${SHARED:-20}
BENCH_DIR=${BENCH_DIR:-/var/tmp}
LOOP=${LOOP:-auto}
IMG_SIZE=${IMG_SIZE:-4G}
FLEET_ARGS=${FLEET_ARGS:-}
for b in "$A" "$B"; do
    [ -x "$b/ingestctl" ] && [ -x "$b/ingest-receiver" ] && [ -x "$b/ingest-agent" ] && continue
    echo "fleet-ab: $b lacks ingestctl, ingest-receiver or ingest-agent" >&2
    exit 2
done
W=$(mktemp -d "$BENCH_DIR/fleet-ab.XXXXXX")
MP=$W/mnt
mkdir -p "$MP"
cleanup() { umount "$MP" 2>/dev/null || true; rm -rf "$W"; }
trap cleanup EXIT
trap "exit 1" INT TERM HUP
use_loop=0
if loop_ok; then use_loop=1; fi


RES=$W/results
: >"$RES"
echo "# fleet-ab: A=$A B=$B devices=[$DEVICES] runs=$RUNS size=$SIZE shared=$SHARED% args=[$FLEET_ARGS] loop=$use_loop"
printf '%-3s %-7s %-4s %8s %8s %8s %10s %12s %8s\n' run build devs MBps rcv_cpu seconds cpu_s/GB wire_bytes xdedup
for r in $(seq 1 "$RUNS"); do
    for n in $DEVICES; do
        order="A B"
        [ $((r % 2)) = 1 ] && order="B A"
        for which in $order; do
            if [ "$which" = A ]; then bin=$A; else bin=$B; fi
            fresh_dir
            # shellcheck disable=SC2086 # FLEET_ARGS: options, split on purpose
            out=$("$bin/ingestctl" bench fleet --devices "$n" --size "$SIZE" --shared "$SHARED" $FLEET_ARGS "$MP" 2>"$W/err") || {
                echo "fleet-ab: run $r $which $n devices failed:" >&2
                cat "$W/err" >&2
                exit 1
            }
            mbps=$(fleet_field MBps "$out")
            cpu=$(fleet_field receiver_cpu_s "$out")
            secs=$(fleet_field seconds "$out")
            bytes=$(fleet_field source_bytes "$out")
            cpugb=$(awk -v c="$cpu" -v b="$bytes" 'BEGIN { printf "%.3f", c / (b / 1e9) }')
            wire=$(fleet_field wire_bytes "$out")
            xd=$(fleet_field cross_device_dedup "$out")
            printf '%-3s %-7s %-4s %8s %8s %8s %10s %12s %8s\n' "$r" "$which" "$n" "$mbps" "$cpu" "$secs" "$cpugb" "$wire" "$xd"
            echo "$which $n $mbps $cpu $cpugb $r $wire $xd" >>"$RES"
        done
    done
done
echo "# medians of $RUNS runs"
printf '%-7s %-4s %8s %8s %10s %12s %8s\n' build devs MBps rcv_cpu cpu_s/GB wire_bytes xdedup
for n in $DEVICES; do
    for which in A B; do
        m=$(awk -v w="$which" -v n="$n" '$1 == w && $2 == n { print $3 }' "$RES" | median)
        c=$(awk -v w="$which" -v n="$n" '$1 == w && $2 == n { print $4 }' "$RES" | median)
        g=$(awk -v w="$which" -v n="$n" '$1 == w && $2 == n { print $5 }' "$RES" | median)
        wb=$(awk -v w="$which" -v n="$n" '$1 == w && $2 == n { print $7 }' "$RES" | median)
        xd=$(awk -v w="$which" -v n="$n" '$1 == w && $2 == n { print $8 }' "$RES" | median)
        printf '%-7s %-4s %8s %8s %10s %12s %8s\n' "$which" "$n" "$m" "$c" "$g" "$wb" "$xd"
    done
done
echo "# medians of the per-round ratios B/A"
printf '%-4s %10s %10s %10s\n' devs MBps cpu_s/GB wire_bytes
for n in $DEVICES; do
    ratios() { # ratios COLUMN: B/A per round
        awk -v n="$n" -v k="$1" '$2 == n { v[$1 " " $6] = $k } END { for (r = 1; (("A " r) in v); r++) if (("B " r) in v) printf "%.4f\n", v["B " r] / v["A " r] }' "$RES"
    }
    printf '%-4s %10s %10s %10s\n' "$n" "$(ratios 3 | median)" "$(ratios 5 | median)" "$(ratios 7 | median)"
done

#!/usr/bin/env bash
# bench/fleet-scale.sh BUILD shared|scale: the fleet figures of issue 14,
# with `BUILD/ingestctl bench fleet --random` (incompressible trees), each
# run in a fresh loop-mounted ext4 when root (else a fresh directory under
# BENCH_DIR).  Prints Markdown with the exact commands.
#
#   shared: DEVICES (64) devices started at the same moment, each shipping
#           SIZE (8MiB) of which SHARED (50) percent is the same bytes on
#           every device; RUNS (3) runs.  Per run: the raw bytes of the
#           chunks sent by all devices over the unique content (the shared
#           part once plus each device's own part); the issue asks for at
#           most 1.2.
#   scale:  one device shipping TOTAL (512MiB) and DEVICES (8) devices each
#           shipping TOTAL/DEVICES (nothing shared), interleaved (the two
#           swap order every round), RUNS (3) rounds.  Medians of the
#           aggregate MB/s and of the receiver's CPU seconds per GB, and the
#           median of the per-round ratios N-device / one-device MB/s (the
#           issue asks for at least 0.9).
#
# Environment: DEVICES, SIZE, SHARED, TOTAL, RUNS, BENCH_DIR (/var/tmp),
# LOOP (auto|0), IMG_SIZE (4G).
set -euo pipefail
# shellcheck source=bench/lib.sh
. "$(dirname "$0")/lib.sh"
BUILD=$(cd "${1:?usage: bench/fleet-scale.sh BUILD shared|scale}" && pwd)
MODE=${2:?usage: bench/fleet-scale.sh BUILD shared|scale}
RUNS=${RUNS:-3}
BENCH_DIR=${BENCH_DIR:-/var/tmp}
LOOP=${LOOP:-auto}
IMG_SIZE=${IMG_SIZE:-4G}
CTL=$BUILD/ingestctl
for p in ingestctl ingest-receiver ingest-agent; do
    [ -x "$BUILD/$p" ] || { echo "fleet-scale: $BUILD/$p missing (make all)" >&2; exit 2; }
done
W=$(mktemp -d "$BENCH_DIR/fleet-scale.XXXXXX")
MP=$W/mnt
mkdir -p "$MP"
cleanup() { umount "$MP" 2>/dev/null || true; rm -rf "$W"; }
trap cleanup EXIT
trap "exit 1" INT TERM HUP
use_loop=0
if loop_ok; then use_loop=1; fi
fleet() { # fleet ARGS...: one run in a fresh filesystem; its JSON
    fresh_dir
    "$CTL" bench fleet --random "$@" "$MP" 2>"$W/err" || { echo "fleet-scale: bench fleet $* failed:" >&2; cat "$W/err" >&2; exit 1; }
}
cpugb() { awk -v c="$(fleet_field receiver_cpu_s "$1")" -v b="$(fleet_field source_bytes "$1")" 'BEGIN { printf "%.3f", c / (b / 1e9) }'; }

case $MODE in
shared)
    DEVICES=${DEVICES:-64}
    SIZE=${SIZE:-8MiB}
    SHARED=${SHARED:-50}
    echo "## $DEVICES devices at the same moment, $SIZE each, $SHARED% of it the same on every device (incompressible)"
    echo
    echo "Command: \`RUNS=$RUNS DEVICES=$DEVICES SIZE=$SIZE SHARED=$SHARED bash bench/fleet-scale.sh BUILD shared\`"
    echo "(each run: \`ingestctl bench fleet --random --devices $DEVICES --size $SIZE --shared $SHARED\`; loop-mounted ext4: $use_loop;"
    echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg))."
    echo
    echo "| run | seconds | MB/s | unique MiB | chunk MiB sent (raw) | sent / unique | cross-device dedup | receiver CPU s per GB | receiver peak RssAnon MiB |"
    echo "|---|---|---|---|---|---|---|---|---|"
    : >"$W/ratios"
    for r in $(seq 1 "$RUNS"); do
        out=$(fleet --devices "$DEVICES" --size "$SIZE" --shared "$SHARED")
        awk -v r="$r" -v s="$(fleet_field seconds "$out")" -v m="$(fleet_field MBps "$out")" -v u="$(fleet_field unique_bytes "$out")" \
            -v c="$(fleet_field chunk_raw_bytes_sent "$out")" -v q="$(fleet_field sent_over_unique "$out")" \
            -v x="$(fleet_field cross_device_dedup "$out")" -v g="$(cpugb "$out")" -v a="$(fleet_field receiver_rss_anon_kib "$out")" \
            'BEGIN { printf "| %d | %s | %s | %.1f | %.1f | %s | %s | %s | %.1f |\n", r, s, m, u / 1048576, c / 1048576, q, x, g, a / 1024 }'
        fleet_field sent_over_unique "$out" >>"$W/ratios"
    done
    echo
    echo "Median sent / unique: $(median 4 <"$W/ratios") (issue 14: at most 1.2)."
    ;;
scale)
    DEVICES=${DEVICES:-8}
    TOTAL=${TOTAL:-512MiB}
    tb=$(numfmt --from=iec-i --suffix=B "$TOTAL" 2>/dev/null || numfmt --from=iec "${TOTAL%B}")
    tb=${tb%B}
    per=$((tb / DEVICES))
    echo "## One device shipping $TOTAL against $DEVICES devices shipping $((per / 1048576)) MiB each, interleaved"
    echo
    echo "Command: \`RUNS=$RUNS DEVICES=$DEVICES TOTAL=$TOTAL bash bench/fleet-scale.sh BUILD scale\`"
    echo "(runs: \`ingestctl bench fleet --random --devices 1 --size $tb --shared 0\` and"
    echo "\`ingestctl bench fleet --random --devices $DEVICES --size $per --shared 0\`, swapping order each round; loop-mounted ext4: $use_loop;"
    echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg))."
    echo
    echo "| round | devices | seconds | MB/s | receiver CPU s | receiver CPU s per GB | receiver peak RssAnon MiB |"
    echo "|---|---|---|---|---|---|---|"
    : >"$W/res"
    for r in $(seq 1 "$RUNS"); do
        order="1 $DEVICES"
        [ $((r % 2)) = 0 ] && order="$DEVICES 1"
        for n in $order; do
            if [ "$n" = 1 ]; then out=$(fleet --devices 1 --size "$tb" --shared 0); else out=$(fleet --devices "$n" --size "$per" --shared 0); fi
            m=$(fleet_field MBps "$out"); g=$(cpugb "$out")
            awk -v r="$r" -v n="$n" -v s="$(fleet_field seconds "$out")" -v m="$m" -v c="$(fleet_field receiver_cpu_s "$out")" -v g="$g" \
                -v a="$(fleet_field receiver_rss_anon_kib "$out")" \
                'BEGIN { printf "| %d | %d | %s | %s | %s | %s | %.1f |\n", r, n, s, m, c, g, a / 1024 }'
            echo "$r $n $m $g" >>"$W/res"
        done
    done
    m1=$(awk '$2 == 1 { print $3 }' "$W/res" | median 4); mn=$(awk -v n="$DEVICES" '$2 == n { print $3 }' "$W/res" | median 4)
    g1=$(awk '$2 == 1 { print $4 }' "$W/res" | median 4); gn=$(awk -v n="$DEVICES" '$2 == n { print $4 }' "$W/res" | median 4)
    ratio=$(awk -v n="$DEVICES" '$2 == 1 { one[$1] = $3 } $2 == n { many[$1] = $3 } END { for (r in one) if (r in many) printf "%.4f\n", many[r] / one[r] }' "$W/res" | median 4)
    echo
    echo "Medians of $RUNS: 1 device $m1 MB/s ($g1 receiver CPU s per GB); $DEVICES devices $mn MB/s ($gn CPU s per GB)."
    echo "Median of the per-round ratios $DEVICES devices / 1 device MB/s: $ratio (issue 14: at least 0.9)."
    ;;
*)
    echo "usage: bench/fleet-scale.sh BUILD shared|scale" >&2
    exit 2
    ;;
esac

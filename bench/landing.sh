#!/usr/bin/env bash
# bench/landing.sh [BUILD]: landing work in proportion to the change (make bench-landing).
#
# On a fresh loop-mounted XFS with reflinks and a fresh loop-mounted ext4
# (root only), each holding the receiver's bronze tree, it ships:
#   - log: a LOG-byte text log, then the same with 1% appended, with the
#     receiver's append_in_place false and true;
#   - big: a BIG-byte random file, then the same with 8 MiB changed in 8
#     places of 1 MiB (unaligned offsets);
# and prints, for each second ship, the receiver's write_bytes over it
# (/proc/PID/io), the ship's wall time against the first ship's, the bytes
# the receiver cloned (its log line) and whether the landed file is
# byte-identical (cmp).  Output: a markdown table on stdout, and into
# LANDING_RESULTS (bench/results-landing.md; empty: stdout only).
#
# Environment: BIG (4GiB), LOG (100MiB), BENCH_DIR (/tmp), FS ("xfs ext4"),
# LANDING_RESULTS, KEEP=1 keeps the work dir.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
TOP=$(cd "$HERE/.." && pwd)
BUILD=${1:-${BUILD:-build}}
case $BUILD in /*) ;; *) BUILD=$TOP/$BUILD ;; esac
CTL=$BUILD/ingestctl
AGENT=$BUILD/ingest-agent
RECEIVER=$BUILD/ingest-receiver
LANDING_RESULTS=${LANDING_RESULTS-$HERE/results-landing.md}
FSLIST=${FS:-xfs ext4}

die() { echo "bench-landing: $*" >&2; exit 1; }
say() { echo "bench-landing: $*" >&2; }
bytes() { # 4GiB, 100MiB, 123 -> bytes
    local v=$1 n u
    n=${v%%[!0-9]*}; u=${v#"$n"}
    case $u in '') echo "$n" ;; KiB) echo $((n << 10)) ;; MiB) echo $((n << 20)) ;; GiB) echo $((n << 30)) ;;
        *) die "size $v: use a number with KiB, MiB or GiB" ;; esac
}
BIG_B=$(bytes "${BIG:-4GiB}")
LOG_B=$(bytes "${LOG:-100MiB}")
for p in "$CTL" "$AGENT" "$RECEIVER"; do [ -x "$p" ] || die "$p not built (make BUILD=$BUILD all)"; done
[ "$(id -u)" -eq 0 ] || die "needs root (loop mounts)"
command -v mkfs.xfs >/dev/null || die "needs mkfs.xfs: packaging/install-deps.sh bench"

W=$(mktemp -d "${BENCH_DIR:-/tmp}/ingest-landing.XXXXXX")
MNT=
RPID=
cleanup() {
    [ -n "$RPID" ] && kill "$RPID" 2>/dev/null && wait "$RPID" 2>/dev/null
    [ -n "$MNT" ] && umount "$MNT" 2>/dev/null
    [ "${KEEP:-0}" = 1 ] || rm -rf "$W"
}
trap cleanup EXIT

(cd "$W" && "$CTL" keygen receiver >/dev/null && "$CTL" keygen dev1 >/dev/null && "$CTL" keygen --dedup fleet.dedup >/dev/null)
printf 'dev1 %s\n' "$(cat "$W/dev1.pub")" > "$W/authorized"

now() { date +%s.%N; }
gen_text() { # N: N bytes of text lines (base64 of random bytes, 100-byte lines)
    head -c $(($1 * 3 / 4 + 100)) /dev/urandom | base64 -w 99 > "$W/text"
    head -c "$1" "$W/text"
}
wbytes() { awk '/^write_bytes/ { print $2 }' "/proc/$RPID/io"; }
ship() { "$AGENT" --config "$W/agent.yaml" --once > "$W/agent.out" 2>> "$W/agent.err" || die "agent failed: $(tail -3 "$W/agent.err")"; }
cloned() { grep " landed: " "$W/receiver.log" | sed -n 's/.* \([0-9]*\) cloned.*/\1/p' | awk '{ s += $1 } END { printf "%.0f\n", s }'; }

# one FS KIND APPEND: a fresh filesystem, receiver (append_in_place: APPEND) and agent; KIND log or big
one() {
    local fs=$1 kind=$2 app=$3 img=$W/$1.img src=$W/src
    rm -rf "$src" "$W/rstate" "$W/astate" "$W/bronze" "$W/receiver.log" "$W/receiver.addr"
    mkdir -p "$src" "$W/rstate" "$W/astate" "$W/bronze"
    truncate -s $((BIG_B * 2 + (2 << 30))) "$img"
    case $fs in
        xfs) mkfs.xfs -q -f -m reflink=1 "$img" ;;
        ext4) mkfs.ext4 -q -F "$img" ;;
    esac
    mount -o loop "$img" "$W/bronze"
    MNT=$W/bronze
    cat > "$W/receiver.yaml" <<EOT
listen: 127.0.0.1:0
key: receiver.key
authorized_devices: authorized
dedup_key: fleet.dedup
state_dir: rstate
bronze: bronze
layout: "{device}/{path}"
append_in_place: $app
EOT
    "$RECEIVER" --config "$W/receiver.yaml" --ready-file "$W/receiver.addr" > "$W/receiver.log" 2>&1 &
    RPID=$!
    for _ in $(seq 200); do [ -s "$W/receiver.addr" ] && break; sleep 0.05; done
    [ -s "$W/receiver.addr" ] || die "receiver did not start: $(tail -3 "$W/receiver.log")"
    cat > "$W/agent.yaml" <<EOT
device:
  id: dev1
  key: dev1.key
core:
  address: $(cat "$W/receiver.addr")
  receiver_key: receiver.pub
dedup_key: fleet.dedup
sources:
  - path: $src
state_dir: astate
EOT
    local f size
    if [ "$kind" = log ]; then
        f=$src/app.log; size=$LOG_B
        gen_text "$LOG_B" > "$f"
    else
        f=$src/model.ckpt; size=$BIG_B
        head -c "$BIG_B" /dev/urandom > "$f"
    fi
    sync
    local t0 t1 t2 w0 w1 c0
    t0=$(now); ship; t1=$(now)
    cmp "$f" "$W/bronze/dev1/src/$(basename "$f")" || die "$fs $kind: first version landed different bytes"
    if [ "$kind" = log ]; then
        gen_text $((LOG_B / 100)) >> "$f"
    else
        for k in 1 2 3 4 5 6 7 8; do
            head -c 1048576 /dev/urandom | dd of="$f" bs=1M oflag=seek_bytes conv=notrunc status=none \
                seek=$((k * (BIG_B / 9) + k * 4099))
        done
    fi
    sync
    c0=$(cloned); w0=$(wbytes)
    t1=$(now); ship; t2=$(now)
    w1=$(wbytes)
    local same=yes
    cmp -s "$f" "$W/bronze/dev1/src/$(basename "$f")" || same=NO
    local first second
    first=$(echo "$t0 $t1" | awk '{ printf "%.2f", $2 - $1 }')
    second=$(echo "$t1 $t2" | awk '{ printf "%.2f", $2 - $1 }')
    printf '| %s | %s | %s | %s | %d | %.2f%% | %d | %s s | %s s | %.3f | %s |\n' "$fs" "$kind" "$app" "$(stat -c %s "$f")" \
        $((w1 - w0)) "$(echo "$((w1 - w0)) $size" | awk '{ print 100 * $1 / $2 }')" $(($(cloned) - c0)) \
        "$first" "$second" "$(echo "$first $second" | awk '{ print $2 / $1 }')" "$same"
    say "$fs $kind (append_in_place: $app): done"
    kill "$RPID"; wait "$RPID" 2>/dev/null || true; RPID=
    umount "$W/bronze"; MNT=
    rm -f "$img"
}

{
    echo "# Landing work in proportion to the change (bench/landing.sh)"
    echo
    echo "BIG=$BIG_B LOG=$LOG_B, on $(uname -r), $(nproc) cores; each row a fresh loop filesystem holding bronze."
    echo "write_bytes: the receiver's /proc/PID/io over the second ship (data, manifest, catalog, index)."
    echo
    echo "| fs | file | append_in_place | size | receiver write_bytes | of size | cloned | first ship | second ship | second/first | identical |"
    echo "|---|---|---|---|---|---|---|---|---|---|---|"
    for fs in $FSLIST; do
        one "$fs" log false
        one "$fs" log true
        one "$fs" big false
    done
} > "$W/results.md"
cat "$W/results.md"
[ -z "$LANDING_RESULTS" ] || cp "$W/results.md" "$LANDING_RESULTS"

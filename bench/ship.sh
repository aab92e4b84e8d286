#!/usr/bin/env bash
# bench/ship.sh [BUILD]: the shipping benchmark (make bench-ship / make bench).
#
# Ships one generated sensor tree with ingest-agent -> ingest-receiver, with
# rsync -a and rsync -az to an rsync daemon, and with tar | zstd -1 | socat,
# all over loopback, each into a fresh filesystem; then ships the evolved
# generation of the tree (incremental).  Medians of RUNS runs go to
# bench/results.md and stdout.  See bench/README.md.
#
# Environment: SIZE (1GiB), RUNS (3), BENCH_DIR (parent of the work dir, /tmp),
# TOOLS ("ours rsync-a rsync-az tar-zstd"), VERIFY (first|all|none: checksum
# the landed trees in the first run, every run, or never), LOOP (auto|0:
# loop-mounted ext4 per run when root), RESULTS (output file,
# bench/results.md), KEEP=1 keeps the work dir.
# record() takes key=value words; $(dev_fields ...) is split into them on purpose.
# shellcheck disable=SC2046
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
TOP=$(cd "$HERE/.." && pwd)
BUILD=${1:-${BUILD:-build}}
case $BUILD in /*) ;; *) BUILD=$TOP/$BUILD ;; esac
SIZE=${SIZE:-1GiB}
RUNS=${RUNS:-3}
TOOLS=${TOOLS:-ours rsync-a rsync-az tar-zstd}
VERIFY=${VERIFY:-first}
LOOP=${LOOP:-auto}
RESULTS=${RESULTS:-$HERE/results.md}
CTL=$BUILD/ingestctl
AGENT=$BUILD/ingest-agent
RECEIVER=$BUILD/ingest-receiver

die() { echo "bench: $*" >&2; exit 1; }
say() { echo "bench: $*" >&2; }

for p in "$CTL" "$AGENT" "$RECEIVER"; do
    [ -x "$p" ] || die "$p not built (make BUILD=$BUILD all)"
done
for t in rsync socat zstd tar sha256sum mkfs.ext4; do
    command -v "$t" >/dev/null || die "$t not found (make bench-deps installs rsync socat zstd time)"
done
/usr/bin/time -v true 2>/dev/null || die "/usr/bin/time (GNU time) not found (make bench-deps)"
case $RUNS in ''|*[!0-9]*|0) die "RUNS must be a positive integer" ;; esac

W=$(mktemp -d "${BENCH_DIR:-/tmp}/ingest-bench.XXXXXX")
PIDS=()
MOUNTS=()
# kill_tree PID: PID and every descendant (the receiver, the agent under
# /usr/bin/time, the rsync daemon's children, the tar/zstd/socat pipelines)
kill_tree() {
    local c
    for c in $(children_of "$1"); do kill_tree "$c"; done
    kill "$1" 2>/dev/null || true
}
cleanup() {
    local p m
    trap - INT TERM
    for p in "${PIDS[@]}"; do kill_tree "$p"; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
    for m in "${MOUNTS[@]}"; do umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true; done
    if [ "${KEEP:-0}" = 1 ]; then say "work dir kept: $W"; else rm -rf "$W"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [ "$LOOP" != 0 ] && [ "$(id -u)" = 0 ]; then
    USE_LOOP=1
    FS_KIND="a fresh loop-mounted ext4 (with journal) per tool and run, image on $(df --output=target "$W" | tail -1)"
else
    USE_LOOP=0
    FS_KIND="a fresh directory under $W per tool and run (not root: no loop mount; the filesystem is shared and aged)"
fi

CLK_TCK=$(getconf CLK_TCK)
mkfifo "$W/tick"
exec 9<>"$W/tick"          # read -t on it is a sleep without a fork

# ---- small helpers -------------------------------------------------------

now_us() { local t=${EPOCHREALTIME}; echo "${t/./}"; }
# cpu_ticks PID: utime+stime+cutime+cstime of PID (clock ticks)
cpu_ticks() {
    local s
    s=$(cat "/proc/$1/stat" 2>/dev/null) || { echo 0; return; }
    s=${s##*) }
    set -- $s
    echo $(( ${12} + ${13} + ${14} + ${15} ))
}
io_write_bytes() { sed -n 's/^write_bytes: //p' "/proc/$1/io"; }
io_cancelled_bytes() { sed -n 's/^cancelled_write_bytes: //p' "/proc/$1/io"; }
status_kb() { sed -n "s/^$2:[[:space:]]*\\([0-9]*\\) kB/\\1/p" "/proc/$1/status"; }
children_of() { { cat /proc/"$1"/task/*/children 2>/dev/null || true; } | tr ' ' '\n' | sed '/^$/d' || true; }
# tv FILE FIELD: a figure of /usr/bin/time -v output
tv() { sed -n "s/^[[:space:]]*$2: //p" "$1" | tail -1; }
tv_cpu() { awk -F': ' '/User time \(seconds\)|System time \(seconds\)/ { s += $2 } END { printf "%.2f", s }' "$1"; }
fdiv() { awk -v a="$1" -v b="$2" 'BEGIN { if (b == 0) print "n/a"; else printf "%.3f", a / b }'; }
us2s() { awk -v a="$1" 'BEGIN { printf "%.3f", a / 1e6 }'; }
mbps() { awk -v b="$1" -v us="$2" 'BEGIN { if (us <= 0) print "n/a"; else printf "%.1f", b / us }'; }
tree_bytes() { find "$1" -type f -printf '%s\n' | awk '{ s += $1 } END { printf "%.0f", s }'; }
tree_files() { find "$1" -type f | wc -l; }
free_port() {
    local p
    while :; do
        p=$(( 20000 + RANDOM % 30000 ))
        ss -Htln "sport = :$p" 2>/dev/null | grep -q . || { echo "$p"; return; }
    done
}
wait_port() {  # wait_port PORT PID
    local i=0
    until ss -Htln "sport = :$1" | grep -q .; do
        i=$((i + 1))
        [ $i -gt 400 ] && die "nothing listens on port $1"
        kill -0 "$2" 2>/dev/null || die "listener on port $1 exited"
        read -r -t 0.02 -u 9 || true
    done
}
untrack() {
    local p keep=()
    for p in "${PIDS[@]}"; do [ "$p" = "$1" ] || keep+=("$p"); done
    PIDS=("${keep[@]}")
}

# fresh_fs NAME: FS = a fresh empty directory to land into
fresh_fs() {
    local mp=$W/fs-$1
    FS=$mp
    mkdir -p "$mp"
    if [ $USE_LOOP = 1 ]; then
        truncate -s "${FS_BYTES}" "$W/img-$1"
        mkfs.ext4 -q -F -E lazy_itable_init=0,lazy_journal_init=0 "$W/img-$1" >/dev/null
        mount -o loop "$W/img-$1" "$mp"
        MOUNTS+=("$mp")
    fi
}
drop_fs() {
    local mp=$W/fs-$1 keep=() m
    if [ $USE_LOOP = 1 ]; then
        umount "$mp"
        for m in "${MOUNTS[@]}"; do [ "$m" = "$mp" ] || keep+=("$m"); done
        MOUNTS=("${keep[@]}")
        rm -f "$W/img-$1"
    fi
    rm -rf "$mp"
}
# sync_fs DIR: seconds to make DIR's filesystem durable (what the tool left dirty)
sync_fs() {
    local t0 t1
    t0=$(now_us); sync -f "$1"; t1=$(now_us)
    us2s $((t1 - t0))
}

# dev_written DIR: bytes written so far to the block device of DIR's
# filesystem (the loop device; it holds only the tool's landing), or n/a
dev_written() {
    local src n
    [ $USE_LOOP = 1 ] || { echo n/a; return; }
    src=$(findmnt -no SOURCE --target "$1") || { echo n/a; return; }
    n=${src##*/}
    [ -r "/sys/block/$n/stat" ] || { echo n/a; return; }
    awk '{ printf "%.0f", $7 * 512 }' "/sys/block/$n/stat"
}
# dev_fields DIR BEFORE PHASE BYTES: raw fields of the device writes of a phase
dev_fields() {
    local now
    now=$(dev_written "$1")
    [ "$now" = n/a ] || [ "$2" = n/a ] && return 0
    printf 'dev_write_bytes=%s' $((now - $2))
    [ "$3" = initial ] && printf ' wamp_dev=%s' "$(fdiv $((now - $2)) "$4")"
    echo
}

# verify SUMS DIR: every file of the generation equals the landed one
should_verify() { [ "$VERIFY" = all ] || { [ "$VERIFY" = first ] && [ "$1" = 1 ]; }; }
verify() {
    (cd "$2" && sha256sum -c --quiet "$1") >"$W/verify.log" 2>&1 ||
        { head -5 "$W/verify.log" >&2; die "landed tree $2 differs from the source ($1)"; }
}

# The source a tool ships: a fresh copy of generation 0 at $W/src, evolved in
# place to generation 1 between the two phases (unchanged files keep their
# inode and mtime, as on a real device).
fresh_source() {
    rm -rf "$W/src"
    cp -a "$W/gen0" "$W/src"
    sync
}
evolve_source() {
    "$CTL" bench gen --evolve --size "$SIZE" "$W/src" >/dev/null
    sync
}

RAW=$W/raw.txt
: > "$RAW"
# record TOOL RUN PHASE key=value...
record() { echo "tool=$1 run=$2 phase=$3 ${*:4}" | tee -a "$RAW" >&2; }

# ---- ours: ingest-agent --once -> ingest-receiver ------------------------

KEYS=$W/keys
setup_keys() {
    mkdir -p "$KEYS"
    (cd "$KEYS" && "$CTL" keygen receiver >/dev/null && "$CTL" keygen dev1 >/dev/null &&
        "$CTL" keygen --dedup fleet.dedup >/dev/null)
    printf 'dev1 %s\n' "$(cat "$KEYS/dev1.pub")" > "$KEYS/authorized"
}

# sample_rssanon TIMEPID OUT: peak RssAnon (kB) of the agent (child of
# /usr/bin/time), sampled every ~50 ms
sample_rssanon() {
    local tpid=$1 out=$2 apid="" peak=0 v k rest n=0
    local i=0
    while [ -z "$apid" ] && kill -0 "$tpid" 2>/dev/null && [ $i -lt 500 ]; do
        apid=$(children_of "$tpid" | head -1)
        [ -n "$apid" ] || read -r -t 0.005 -u 9 || true
        i=$((i + 1))
    done
    while [ -n "$apid" ] && [ -r "/proc/$apid/status" ]; do
        v=""
        while read -r k v rest; do
            [ "$k" = RssAnon: ] && break
            v=""
        done < "/proc/$apid/status" 2>/dev/null || true
        [ -z "$v" ] && break              # exited (zombie) or gone
        n=$((n + 1))
        [ "$v" -gt "$peak" ] && peak=$v
        read -r -t 0.05 -u 9 || true
    done
    [ $n -gt 0 ] || peak=n/a
    echo "$peak $n" > "$out"
}

run_ours() {
    local run=$1 d=$W/ours-$1 fs rpid addr phase sums v0 t0 t1 w0 w1 x0 x1 c0 c1 tp sp
    fresh_fs "ours-$run"; fs=$FS
    mkdir -p "$d/astate" "$fs/bronze" "$fs/rstate"
    cat > "$d/receiver.yaml" <<EOT
listen: 127.0.0.1:0
key: $KEYS/receiver.key
authorized_devices: $KEYS/authorized
dedup_key: $KEYS/fleet.dedup
state_dir: $fs/rstate
bronze: $fs/bronze
layout: "{device}/{path}"
log:
  level: warn
EOT
    "$RECEIVER" --config "$d/receiver.yaml" --ready-file "$d/addr" >> "$d/receiver.log" 2>&1 &
    rpid=$!; PIDS+=("$rpid")
    local i=0
    while [ ! -s "$d/addr" ]; do
        i=$((i + 1))
        [ $i -gt 400 ] && { cat "$d/receiver.log" >&2; die "receiver did not start"; }
        kill -0 "$rpid" 2>/dev/null || { cat "$d/receiver.log" >&2; die "receiver exited"; }
        read -r -t 0.02 -u 9 || true
    done
    addr=$(cat "$d/addr")
    cat > "$d/agent.yaml" <<EOT
device:
  id: dev1
  key: $KEYS/dev1.key
core:
  address: $addr
  receiver_key: $KEYS/receiver.pub
dedup_key: $KEYS/fleet.dedup
sources:
  - path: $W/src
state_dir: $d/astate
log:
  level: warn
EOT
    fresh_source
    for phase in initial incremental; do
        if [ $phase = incremental ]; then evolve_source; sums=$W/sums1; else sums=$W/sums0; fi
        w0=$(io_write_bytes "$rpid"); x0=$(io_cancelled_bytes "$rpid"); c0=$(cpu_ticks "$rpid")
        v0=$(dev_written "$fs")
        t0=$(now_us)
        /usr/bin/time -v -o "$d/time-$phase" "$AGENT" --config "$d/agent.yaml" --once \
            > "$d/out-$phase" 2> "$d/err-$phase" &
        tp=$!; PIDS+=("$tp")
        sample_rssanon "$tp" "$d/rssanon-$phase" &
        sp=$!; PIDS+=("$sp")
        if ! wait "$tp"; then
            cat "$d/err-$phase" >&2; tail -20 "$d/receiver.log" >&2; die "agent failed ($phase, run $run)"
        fi
        t1=$(now_us)
        wait "$sp" || true
        untrack "$tp"; untrack "$sp"
        local syncs; syncs=$(sync_fs "$fs")
        w1=$(io_write_bytes "$rpid"); x1=$(io_cancelled_bytes "$rpid"); c1=$(cpu_ticks "$rpid")
        local line wire bytes acpu rcpu du_b
        line=$(grep '^shipped:' "$d/out-$phase" | tail -1)
        wire=$(echo "$line" | tr ' ' '\n' | sed -n 's/^wire_bytes=//p')
        [ -n "$wire" ] || { cat "$d/out-$phase" >&2; die "no summary line from the agent"; }
        if [ $phase = initial ]; then bytes=$GEN0_BYTES; else bytes=$GEN1_BYTES; fi
        acpu=$(tv_cpu "$d/time-$phase")
        rcpu=$(awk -v t=$((c1 - c0)) -v h="$CLK_TCK" 'BEGIN { printf "%.2f", t / h }')
        du_b=$(du -sb "$fs/bronze" "$fs/rstate" | awk '{ s += $1 } END { printf "%.0f", s }')
        record ours "$run" $phase $(dev_fields "$fs" "$v0" $phase "$bytes") wall_s="$(us2s $((t1 - t0)))" mbps="$(mbps "$bytes" $((t1 - t0)))" \
            wire_bytes="$wire" cpu_s="$(awk -v a="$acpu" -v b="$rcpu" 'BEGIN { printf "%.2f", a + b }')" \
            agent_cpu_s="$acpu" receiver_cpu_s="$rcpu" \
            peak_rss_kb="$(tv "$d/time-$phase" 'Maximum resident set size (kbytes)')" \
            rssanon_kb="$(cut -d' ' -f1 "$d/rssanon-$phase")" rssanon_samples="$(cut -d' ' -f2 "$d/rssanon-$phase")" \
            recv_write_bytes=$((w1 - w0)) recv_cancelled_write_bytes=$((x1 - x0)) \
            wamp_io="$(fdiv $((w1 - w0)) "$bytes")" \
            du_bytes="$du_b" wamp_du="$(fdiv "$du_b" "$bytes")" sync_after_s="$syncs" \
            $(echo "${line#shipped: }" | sed 's/\([^ ]*\)=/agent_\1=/g')
        if should_verify "$run"; then verify "$sums" "$fs/bronze/dev1/src"; fi
    done
    local hwm; hwm=$(status_kb "$rpid" VmHWM)
    record ours "$run" receiver receiver_peak_rss_kb="$hwm" receiver_rssanon_now_kb="$(status_kb "$rpid" RssAnon)"
    kill "$rpid"; wait "$rpid" 2>/dev/null || true; untrack "$rpid"
    rm -rf "$W/src"
    drop_fs "ours-$run"
}

# ---- rsync -a / -az to an rsync daemon ------------------------------------

run_rsync() {
    local tool=$1 run=$2 opt d fs port tp dpid phase sums v0 t0 t1 c0 c1 i
    case $tool in rsync-a) opt=-a ;; rsync-az) opt=-az ;; esac
    d=$W/$tool-$run
    mkdir -p "$d"
    fresh_fs "$tool-$run"; fs=$FS
    mkdir -p "$fs/mod"
    port=$(free_port)
    cat > "$d/rsyncd.conf" <<EOT
use chroot = no
uid = $(id -u)
gid = $(id -g)
pid file = $d/rsyncd.pid
log file = $d/rsyncd.log
[mod]
    path = $fs/mod
    read only = no
EOT
    /usr/bin/time -v -o "$d/time-daemon" rsync --daemon --no-detach --config="$d/rsyncd.conf" \
        --address=127.0.0.1 --port="$port" &
    tp=$!; PIDS+=("$tp")
    wait_port "$port" "$tp"
    dpid=$(children_of "$tp" | head -1)
    fresh_source
    for phase in initial incremental; do
        if [ $phase = incremental ]; then evolve_source; sums=$W/sums1; else sums=$W/sums0; fi
        c0=$(cpu_ticks "$dpid")
        v0=$(dev_written "$fs")
        t0=$(now_us)
        /usr/bin/time -v -o "$d/time-$phase" rsync $opt --stats "$W/src/" "rsync://127.0.0.1:$port/mod/" \
            > "$d/stats-$phase" 2>&1 || { cat "$d/stats-$phase" >&2; die "$tool failed"; }
        t1=$(now_us)
        # the daemon's child must be reaped for its CPU to show in cutime
        i=0
        while [ -n "$(children_of "$dpid")" ] && [ $i -lt 500 ]; do
            read -r -t 0.01 -u 9 || true; i=$((i + 1))
        done
        c1=$(cpu_ticks "$dpid")
        local syncs; syncs=$(sync_fs "$fs")
        local sent recv bytes ccpu dcpu
        sent=$(sed -n 's/^Total bytes sent: //p' "$d/stats-$phase" | tr -d ,)
        recv=$(sed -n 's/^Total bytes received: //p' "$d/stats-$phase" | tr -d ,)
        if [ $phase = initial ]; then bytes=$GEN0_BYTES; else bytes=$GEN1_BYTES; fi
        ccpu=$(tv_cpu "$d/time-$phase")
        dcpu=$(awk -v t=$((c1 - c0)) -v h="$CLK_TCK" 'BEGIN { printf "%.2f", t / h }')
        record "$tool" "$run" $phase $(dev_fields "$fs" "$v0" $phase "$bytes") wall_s="$(us2s $((t1 - t0)))" mbps="$(mbps "$bytes" $((t1 - t0)))" \
            wire_bytes=$((sent + recv)) cpu_s="$(awk -v a="$ccpu" -v b="$dcpu" 'BEGIN { printf "%.2f", a + b }')" \
            client_cpu_s="$ccpu" daemon_cpu_s="$dcpu" \
            peak_rss_kb="$(tv "$d/time-$phase" 'Maximum resident set size (kbytes)')" \
            sync_after_s="$syncs"
        if should_verify "$run"; then verify "$sums" "$fs/mod"; fi
    done
    kill "$dpid" 2>/dev/null || true
    wait "$tp" 2>/dev/null || true
    untrack "$tp"
    record "$tool" "$run" daemon daemon_peak_rss_kb="$(tv "$d/time-daemon" 'Maximum resident set size (kbytes)')"
    rm -rf "$W/src"
    drop_fs "$tool-$run"
}

# ---- tar | zstd -1 | socat  ->  socat | zstd -d | tar x ---------------------
# Incremental = the whole evolved tree again, extracted over the first one.

run_tar() {
    local run=$1 d=$W/tar-zstd-$1 fs port phase sums v0 t0 t1 tp
    mkdir -p "$d"
    fresh_fs "tar-zstd-$run"; fs=$FS
    mkdir -p "$fs/land"
    fresh_source
    for phase in initial incremental; do
        if [ $phase = incremental ]; then evolve_source; sums=$W/sums1; else sums=$W/sums0; fi
        port=$(free_port)
        v0=$(dev_written "$fs")
        t0=$(now_us)
        /usr/bin/time -v -o "$d/time-$phase" bash -c '
            set -o pipefail
            socat -u TCP-LISTEN:$1,bind=127.0.0.1,reuseaddr STDOUT | zstd -d -q | tar -C "$2" -xf - &
            tar -C "$3" -cf - . | zstd -1 -vv -c 2> "$4" |
                socat -u STDIN TCP:127.0.0.1:$1,retry=200,interval=0.01 || exit 1
            wait $! || exit 1' tar-zstd "$port" "$fs/land" "$W/src" "$d/zstd-$phase" \
            > "$d/log-$phase" 2>&1 &
        tp=$!; PIDS+=("$tp")
        wait "$tp" || { cat "$d/log-$phase" "$d/zstd-$phase" >&2; die "tar | zstd failed ($phase)"; }
        t1=$(now_us)
        untrack "$tp"
        local syncs; syncs=$(sync_fs "$fs")
        local wire bytes
        wire=$(tr '\r' '\n' < "$d/zstd-$phase" | sed -n 's/.*B => \([0-9]*\) B,.*/\1/p' | tail -1)
        if [ $phase = initial ]; then bytes=$GEN0_BYTES; else bytes=$GEN1_BYTES; fi
        record tar-zstd "$run" $phase $(dev_fields "$fs" "$v0" $phase "$bytes") wall_s="$(us2s $((t1 - t0)))" mbps="$(mbps "$bytes" $((t1 - t0)))" \
            wire_bytes="$wire" cpu_s="$(tv_cpu "$d/time-$phase")" \
            peak_rss_kb="$(tv "$d/time-$phase" 'Maximum resident set size (kbytes)')" \
            sync_after_s="$syncs"
        if should_verify "$run"; then verify "$sums" "$fs/land"; fi
    done
    rm -rf "$W/src"
    drop_fs "tar-zstd-$run"
}

# ---- main -----------------------------------------------------------------

START_DATE=$(date -u '+%Y-%m-%d %H:%M UTC')
# read-only git queries (no index refresh): the commit the binaries come from
CODE_REV="commit $(git -C "$TOP" rev-parse --short HEAD 2>/dev/null || echo unknown)"
git -C "$TOP" --no-optional-locks diff --quiet HEAD -- libingest agent include 2>/dev/null ||
    CODE_REV="$CODE_REV with uncommitted changes in libingest/agent/include"
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
T_START=$(now_us)
say "work dir $W, SIZE=$SIZE RUNS=$RUNS, landing into $FS_KIND"
setup_keys
"$CTL" bench gen --size "$SIZE" "$W/gen0" >/dev/null
cp -a "$W/gen0" "$W/gen1"
"$CTL" bench gen --evolve --size "$SIZE" "$W/gen1" >/dev/null
GEN0_BYTES=$(tree_bytes "$W/gen0"); GEN0_FILES=$(tree_files "$W/gen0")
GEN1_BYTES=$(tree_bytes "$W/gen1"); GEN1_FILES=$(tree_files "$W/gen1")
(cd "$W/gen0" && find . -type f -print0 | sort -z | xargs -0 sha256sum) > "$W/sums0"
(cd "$W/gen1" && find . -type f -print0 | sort -z | xargs -0 sha256sum) > "$W/sums1"
rm -rf "$W/gen1"          # each tool evolves its own copy of gen0 in place
FS_BYTES=$(( (GEN0_BYTES + GEN1_BYTES) * 3 / 2 + 256 * 1024 * 1024 ))
FS_BYTES=$(( (FS_BYTES + 1048575) / 1048576 * 1048576 ))
say "generation 0: $GEN0_FILES files, $GEN0_BYTES bytes; generation 1: $GEN1_FILES files, $GEN1_BYTES bytes"

for run in $(seq 1 "$RUNS"); do
    for tool in $TOOLS; do
        say "run $run/$RUNS: $tool"
        case $tool in
            ours) run_ours "$run" ;;
            rsync-a|rsync-az) run_rsync "$tool" "$run" ;;
            tar-zstd) run_tar "$run" ;;
            *) die "unknown tool $tool" ;;
        esac
    done
done
T_END=$(now_us)
LOAD_END=$(cut -d' ' -f1-3 /proc/loadavg)

# ---- report ---------------------------------------------------------------

# med TOOL PHASE KEY: median over runs
med() {
    awk -v t="$1" -v p="$2" -v k="$3" '
        { tool = ""; phase = ""; val = ""
          for (i = 1; i <= NF; i++) {
              split($i, kv, "=")
              if (kv[1] == "tool") tool = kv[2]
              else if (kv[1] == "phase") phase = kv[2]
              else if (kv[1] == k) val = kv[2]
          }
          if (tool == t && phase == p && val != "" && val != "n/a") v[n++] = val + 0 }
        END {
          if (n == 0) { print "n/a"; exit }
          for (i = 0; i < n; i++) for (j = i + 1; j < n; j++) if (v[j] < v[i]) { x = v[i]; v[i] = v[j]; v[j] = x }
          m = (n % 2) ? v[int(n / 2)] : (v[n / 2 - 1] + v[n / 2]) / 2
          s = sprintf("%.3f", m); sub(/\.?0+$/, "", s); print s
        }' "$RAW"
}
mib() { [ "$1" = n/a ] && { echo n/a; return; }; awk -v k="$1" 'BEGIN { printf "%.1f MiB", k / 1024 }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "n/a" || b == "n/a" || b == 0) print "n/a"; else printf "%.2f", a / b }'; }
verdict() { awk -v v="$1" -v op="$2" -v lim="$3" 'BEGIN {
    if (v == "n/a") { print "n/a"; exit }
    ok = (op == ">=") ? (v + 0 >= lim + 0) : (op == "<=") ? (v + 0 <= lim + 0) : (v + 0 < lim + 0)
    print ok ? "met" : "NOT met" }'; }
has() { case " $TOOLS " in *" $1 "*) return 0 ;; esac; return 1; }

label() {
    case $1 in
        ours) echo "ours (ingest-agent -> ingest-receiver)" ;;
        rsync-a) echo "rsync -a (daemon)" ;;
        rsync-az) echo "rsync -az (daemon)" ;;
        tar-zstd) echo "tar \\| zstd -1 \\| socat (incr = whole tree)" ;;
    esac
}

REPORT=$W/results.md
{
    echo "# Shipping benchmark"
    echo
    echo "Written by \`bench/ship.sh\` (\`make bench-ship\`); see bench/README.md for what is measured and how."
    echo
    echo "- date: $START_DATE; total driver time $(us2s $((T_END - T_START))) s"
    echo "- code: $CODE_REV, binaries of $BUILD"
    echo "- machine: $(nproc) CPUs, $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), $(awk '/MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo) RAM, Linux $(uname -r)"
    echo "- load average (1/5/15 min): $LOAD_START at start, $LOAD_END at end (the machine is shared)"
    echo "- tree: SIZE=$SIZE, generation 0 $GEN0_FILES files / $GEN0_BYTES bytes; generation 1 (ingestctl bench gen --evolve) $GEN1_FILES files / $GEN1_BYTES bytes"
    echo "- runs: $RUNS, tools interleaved in each run ($TOOLS); each tool lands into $FS_KIND"
    echo "- tools: $(rsync --version | head -1 | sed 's/  */ /g'); $(zstd -V | sed 's/^\*\*\* //; s/ \*\*\*$//'); $(socat -V | sed -n 2p); $(tar --version | head -1)"
    echo "- figures are medians of $RUNS runs; MB/s = source bytes of the generation / wall seconds, 1 MB = 10^6 bytes; CPU s = user+sys of sender and receiver processes (initial / incremental)"
    echo
    echo "| tool | initial MB/s | incremental MB/s | wire bytes initial | wire bytes incremental | CPU s | peak RSS | agent RssAnon |"
    echo "|---|---|---|---|---|---|---|---|"
    for t in $TOOLS; do
        ra=n/a
        [ "$t" = ours ] && ra="$(mib "$(med ours initial rssanon_kb)") / $(mib "$(med ours incremental rssanon_kb)")"
        echo "| $(label "$t") | $(med "$t" initial mbps) | $(med "$t" incremental mbps) | $(med "$t" initial wire_bytes) | $(med "$t" incremental wire_bytes) | $(med "$t" initial cpu_s) / $(med "$t" incremental cpu_s) | $(mib "$(med "$t" initial peak_rss_kb)") / $(mib "$(med "$t" incremental peak_rss_kb)") | $ra |"
    done
    echo
    echo "Peak RSS is the sending side (agent; rsync client; the largest process of the tar pipeline), initial / incremental."
    if has ours; then
        echo "Receiving side, medians: ingest-receiver peak RSS $(mib "$(med ours receiver receiver_peak_rss_kb)"), CPU $(med ours initial receiver_cpu_s) / $(med ours incremental receiver_cpu_s) s (included in CPU s above)."
    fi
    for t in rsync-a rsync-az; do
        has "$t" && echo "$t daemon (all its children, both phases) peak RSS $(mib "$(med "$t" daemon daemon_peak_rss_kb)")."
    done
    echo "Seconds for \`sync -f\` of the landing filesystem right after each tool finished (not included above; ours is durable before it returns): $(for t in $TOOLS; do printf '%s %s / %s; ' "$t" "$(med "$t" initial sync_after_s)" "$(med "$t" incremental sync_after_s)"; done)"
    echo
    if [ $USE_LOOP = 1 ]; then
        echo "Bytes written to the landing filesystem's device (/sys/block/loopN/stat, after \`sync -f\`; data, metadata, journal, and for ours the receiver's state_dir):"
        echo
        echo "| tool | initial bytes | / bytes landed | incremental bytes |"
        echo "|---|---|---|---|"
        for t in $TOOLS; do
            echo "| $(label "$t") | $(med "$t" initial dev_write_bytes) | $(med "$t" initial wamp_dev) | $(med "$t" incremental dev_write_bytes) |"
        done
        echo
    fi
    if has ours; then
        echo "Receiver write amplification (initial ship): /proc/RECEIVER/io write_bytes / bytes landed = $(med ours initial wamp_io); du -sb of bronze + state_dir / bytes landed = $(med ours initial wamp_du); the receiver's cancelled_write_bytes (dirty pages truncated before writeback, e.g. a deleted spill file) $(med ours initial recv_cancelled_write_bytes). Incremental: receiver write_bytes $(med ours incremental recv_write_bytes), bytes of generation 1 $GEN1_BYTES."
        echo
        echo "## Targets"
        echo
        echo "| target | measured | verdict |"
        echo "|---|---|---|"
        if has rsync-az; then
            r=$(ratio "$(med ours initial mbps)" "$(med rsync-az initial mbps)")
            echo "| ours >= 2x rsync -az MB/s (initial) | ${r}x | $(verdict "$r" '>=' 2) |"
            r=$(ratio "$(med ours incremental mbps)" "$(med rsync-az incremental mbps)")
            echo "| ours >= 2x rsync -az MB/s (incremental) | ${r}x | $(verdict "$r" '>=' 2) |"
        fi
        if has tar-zstd; then
            r=$(ratio "$(med ours initial mbps)" "$(med tar-zstd initial mbps)")
            echo "| ours >= 0.8x tar \\| zstd MB/s (initial) | ${r}x | $(verdict "$r" '>=' 0.8) |"
        fi
        v=$(med ours initial rssanon_kb); v2=$(med ours incremental rssanon_kb)
        vm=$(awk -v a="$v" -v b="$v2" 'BEGIN { if (a == "n/a") print b; else if (b == "n/a" || a + 0 > b + 0) print a; else print b }')
        echo "| agent RssAnon < 32 MiB | $(mib "$vm") | $(verdict "$vm" '<' 32768) |"
        v=$(med ours initial wamp_io)
        echo "| write amplification <= 1.05 (io write_bytes) | $v | $(verdict "$v" '<=' 1.05) |"
        v=$(med ours initial wamp_du)
        echo "| write amplification <= 1.05 (du -sb) | $v | $(verdict "$v" '<=' 1.05) |"
        if [ $USE_LOOP = 1 ]; then
            v=$(med ours initial wamp_dev)
            echo "| write amplification <= 1.05 (device writes, incl. journal) | $v | $(verdict "$v" '<=' 1.05) |"
        fi
        if has rsync-az; then
            a=$(med ours incremental wire_bytes); b=$(med rsync-az incremental wire_bytes)
            echo "| incremental wire bytes <= rsync -az's | $a vs $b ($(ratio "$a" "$b")x) | $(verdict "$(ratio "$a" "$b")" '<=' 1) |"
        fi
    fi
    echo
    echo "## Raw per-run lines"
    echo
    echo '```'
    cat "$RAW"
    echo '```'
} > "$REPORT"
cp "$REPORT" "$RESULTS"
cat "$REPORT"
say "wrote $RESULTS"

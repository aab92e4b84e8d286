#!/usr/bin/env bash
# bench/ship.sh [BUILD]: the shipping benchmark (make bench-ship / make bench).
#
# Ships one generated tree (PROFILE: default, gateway or small; see
# `ingestctl bench gen --help`) with ingest-agent -> ingest-receiver, with
# rsync -a and rsync -az to an rsync daemon, with tar | zstd -1 | socat, all
# over loopback, and with restic and casync into a local repository (where
# installed), each into a fresh filesystem; then ships the evolved generation
# of the tree (incremental).  Medians of RUNS runs go to bench/results.md and
# stdout, three bar charts to bench/results.svg (bench/results-PROFILE.md and
# .svg for the gateway and small profiles).  See bench/README.md.
#
# Environment: PROFILE (default|gateway|small), SIZE (1GiB; the small profile
# takes its file count from FILES, 40000, or from SIZE / 900 when SIZE is
# set), RUNS (3), BENCH_DIR (parent of the work dir, /tmp),
# TOOLS ("ours rsync-a rsync-az tar-zstd restic casync"; restic and casync are
# reported as "not installed" when missing), VERIFY (first|all|none: checksum
# the landed trees in the first run, every run, or never), STAGES (auto|0:
# `ingestctl bench stages` on the tree in each run: the ceiling), LOOP (auto|0:
# loop-mounted ext4 per run when root), LOOP_DIO (0|1|auto: 1 and auto make
# the loop device read and write its image with direct I/O, auto only when
# it can; 0 leaves it caching the image),
# PERF (auto|0: one extra, uncounted run
# of ours under perf record when perf works), BASE (a build directory, or any
# directory, holding another ingest-agent and ingest-receiver: the tool
# ours-base ships with them, interleaved with ours, for a before/after in
# one run), RESULTS (output file,
# bench/results.md; the SVG goes beside it, same name with .svg), KEEP=1 keeps
# the work dir, AGENT_YAML (YAML text appended to ours' agent.yaml, e.g.
# "batch: {max_bytes: 64MiB}": a setting tried against the defaults).
# record() takes key=value words; $(dev_fields ...) is split into them on purpose.
# shellcheck disable=SC2046
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
TOP=$(cd "$HERE/.." && pwd)
BUILD=${1:-${BUILD:-build}}
case $BUILD in /*) ;; *) BUILD=$TOP/$BUILD ;; esac
PROFILE=${PROFILE:-default}
SIZE_GIVEN=${SIZE:+1}
SIZE=${SIZE:-1GiB}
FILES=${FILES:-}
RUNS=${RUNS:-3}
TOOLS=${TOOLS:-ours ours-metrics rsync-a rsync-az tar-zstd restic casync}
VERIFY=${VERIFY:-first}
LOOP=${LOOP:-auto}
LOOP_DIO=${LOOP_DIO:-0}
LOOP_COPY=""  # the report's words for the loop device's second copy, when it makes one
PERF=${PERF:-auto}
STAGES=${STAGES:-auto}
case $PROFILE in
    default) RESULTS=${RESULTS:-$HERE/results.md} ;;
    gateway|small) RESULTS=${RESULTS:-$HERE/results-$PROFILE.md} ;;
    *) echo "bench: PROFILE must be default, gateway or small" >&2; exit 1 ;;
esac
# the arguments of `ingestctl bench gen` for both generations
GEN_ARGS=(--profile "$PROFILE")
case $PROFILE in
    small)
        if [ -n "$SIZE_GIVEN" ]; then GEN_ARGS+=(--size "$SIZE"); fi
        if [ -n "$FILES" ]; then GEN_ARGS+=(--files "$FILES"); fi ;;
    *) GEN_ARGS+=(--size "$SIZE") ;;
esac
SVG=${RESULTS%.md}.svg
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
case $VERIFY in first|all|none) ;; *) die "VERIFY must be first, all or none" ;; esac
# installed TOOL: the optional comparison tools may be missing (reported as
# "not installed"); the others are checked above
installed() {
    case $1 in
        restic|casync) command -v "$1" >/dev/null ;;
        *) return 0 ;;
    esac
}
for t in $TOOLS; do
    case $t in ours|ours-metrics|ours-base|rsync-a|rsync-az|tar-zstd|restic|casync) ;; *) die "unknown tool $t" ;; esac
done
case " $TOOLS " in
    *" ours-base "*)
        [ -n "${BASE:-}" ] || die "tool ours-base needs BASE, a directory with the other ingest-agent and ingest-receiver"
        BASE_SHOWN=$BASE # as given: the report never names a path of this machine through it
        case $BASE in /*) ;; *) BASE=$TOP/$BASE ;; esac
        for p in "$BASE/ingest-agent" "$BASE/ingest-receiver"; do [ -x "$p" ] || die "$p not found (BASE)"; done ;;
esac
# has TOOL: TOOL is in TOOLS and installed
has() { case " $TOOLS " in *" $1 "*) installed "$1" ;; *) return 1 ;; esac; }

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
    if [ "$LOOP_DIO" != 0 ]; then
        # can a loop device of an image here do direct I/O (the image's filesystem takes O_DIRECT)?
        truncate -s 64M "$W/probe.img"
        if dev=$(losetup -f --show --direct-io=on "$W/probe.img" 2>/dev/null) && [ "$(cat "/sys/block/${dev##*/}/loop/dio" 2>/dev/null)" = 1 ]; then
            losetup -d "$dev"
        else
            [ -n "${dev:-}" ] && losetup -d "$dev"
            [ "$LOOP_DIO" = auto ] || die "LOOP_DIO=$LOOP_DIO: a loop device of an image under $W cannot do direct I/O"
            LOOP_DIO=0
        fi
        rm -f "$W/probe.img"
    fi
    if [ "$LOOP_DIO" != 0 ]; then
        FS_KIND="$FS_KIND, the loop device in direct I/O mode (losetup --direct-io=on: the image is written without a second page cache and its copy, as a disk is)"
    else
        LOOP_COPY=" and, on these loop devices that cache their images, copy every byte once more into the image's page cache"
        FS_KIND="$FS_KIND, the loop device caching its image in the page cache (LOOP_DIO=0: each byte landed is copied once more, by a kernel worker, into the image's page cache)"
    fi
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
status_kb() { sed -n "s/^$2:[[:space:]]*\\([0-9]*\\) kB/\\1/p" "/proc/$1/status"; }
children_of() { { cat /proc/"$1"/task/*/children 2>/dev/null || true; } | tr ' ' '\n' | sed '/^$/d' || true; }
# tv FILE FIELD: a figure of /usr/bin/time -v output
tv() { sed -n "s/^[[:space:]]*$2: //p" "$1" | tail -1; }
tv_cpu() { awk -F': ' '/User time \(seconds\)|System time \(seconds\)/ { s += $2 } END { printf "%.2f", s }' "$1"; }
fdiv() { awk -v a="$1" -v b="$2" 'BEGIN { if (b == 0) print "n/a"; else printf "%.3f", a / b }'; }
us2s() { awk -v a="$1" 'BEGIN { printf "%.3f", a / 1e6 }'; }
mbps() { awk -v b="$1" -v us="$2" 'BEGIN { if (us <= 0) print "n/a"; else printf "%.1f", b / us }'; }
# dmbps BYTES US SYNC_S: MB/s counting the sync -f after the tool (durable, as ours is when it returns)
dmbps() { awk -v b="$1" -v us="$2" -v s="$3" 'BEGIN { t = us + s * 1e6; if (t <= 0) print "n/a"; else printf "%.1f", b / t }'; }
tree_bytes() { find "$1" -type f -printf '%s\n' | awk '{ s += $1 } END { printf "%.0f", s }'; }
tree_files() { find "$1" -type f | wc -l; }
# free_port: a TCP port no socket uses, below the kernel's range of ephemeral ports (a
# port from that range can be a connection's local port by the time a listener binds it:
# "Address already in use", seen once with other tests running beside the benchmark)
free_port() {
    local p lo
    lo=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
    [ "$lo" -gt 11024 ] || lo=32768
    while :; do
        p=$(( 10000 + RANDOM % (lo - 10000) ))
        ss -Htan "sport = :$p" 2>/dev/null | grep -q . || { echo "$p"; return; }
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
        mkfs.ext4 -q -F -E lazy_itable_init=0,lazy_journal_init=0 "${MKFS_INODES[@]}" "$W/img-$1" >/dev/null
        mount -o loop "$W/img-$1" "$mp"
        MOUNTS+=("$mp")
        [ "$LOOP_DIO" = 0 ] || losetup --direct-io=on "$(findmnt -no SOURCE --target "$mp")"
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
# machine_ticks: clock ticks every CPU has been busy so far (/proc/stat's cpu line: user, nice,
# system, irq, softirq, steal): what the machine spent, the kernel's workers included (writeback, and
# the loop device's copy of every byte into its image), which no process's own CPU time shows
machine_ticks() { awk '$1 == "cpu" { printf "%.0f\n", $2 + $3 + $4 + $7 + $8 + $9; exit }' /proc/stat; }
# machine_fields T0 T1: the record's machine_cpu_s (ticks T0..T1: the tool's timed run) and
# sync_machine_cpu_s (what sync_fs measured last, in $W/sync-machine)
ticks_s() { awk -v t="$1" -v h="$CLK_TCK" 'BEGIN { printf "%.2f\n", t / h }'; }
machine_fields() {
    echo "machine_cpu_s=$(ticks_s $(($2 - $1)))" \
        "sync_machine_cpu_s=$(cat "$W/sync-machine" 2>/dev/null || echo n/a)"
}
# sync_fs DIR: seconds to make DIR's filesystem durable (what the tool left dirty); the machine's
# busy CPU seconds during it go to $W/sync-machine
sync_fs() {
    local t0 t1 m0 m1
    rm -f "$W/sync-machine"
    m0=$(machine_ticks); t0=$(now_us); sync -f "$1"; t1=$(now_us); m1=$(machine_ticks)
    ticks_s $((m1 - m0)) > "$W/sync-machine"
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

# should_verify RUN: whether the landed trees of run RUN are checksummed
should_verify() { [ "$VERIFY" = all ] || { [ "$VERIFY" = first ] && [ "$1" = 1 ]; }; }
# verify TOOL RUN PHASE SUMS DIR: every file of the generation equals the
# landed one; VERIFIED lists what passed, for the report
VERIFIED=()
verify() {
    (cd "$5" && sha256sum -c --quiet "$4") >"$W/verify.log" 2>&1 ||
        { head -5 "$W/verify.log" >&2; die "$1 run $2 $3: landed tree $5 differs from the source ($4)"; }
    VERIFIED+=("$1 run $2 $3 ($(wc -l < "$4") files)")
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
    "$CTL" bench gen --evolve "${GEN_ARGS[@]}" "$W/src" >/dev/null
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

# recv_up DIR PHASE: start the receiver of DIR/receiver.yaml under
# /usr/bin/time -v (DIR/rtime-PHASE; RTPID), RPID = the receiver itself;
# point DIR/agent.yaml (when there) at the address it bound
recv_up() {
    local d=$1 i=0
    rm -f "$d/addr"
    /usr/bin/time -v -o "$d/rtime-$2" "$RECEIVER" --config "$d/receiver.yaml" --ready-file "$d/addr" >> "$d/receiver.log" 2>&1 &
    RTPID=$!; PIDS+=("$RTPID")
    while [ ! -s "$d/addr" ]; do
        i=$((i + 1))
        [ $i -gt 400 ] && { cat "$d/receiver.log" >&2; die "receiver did not start"; }
        kill -0 "$RTPID" 2>/dev/null || { cat "$d/receiver.log" >&2; die "receiver exited"; }
        read -r -t 0.02 -u 9 || true
    done
    RPID=$(children_of "$RTPID" | head -1)
    [ -n "$RPID" ] || die "no receiver process under /usr/bin/time"
    [ -f "$d/agent.yaml" ] && sed -i "s|^  address: .*|  address: $(cat "$d/addr")|" "$d/agent.yaml"
    return 0
}
# recv_down: stop the receiver cleanly (it writes its index then) and wait
# for /usr/bin/time to write its figures
recv_down() {
    [ -n "${RTPID:-}" ] || return 0
    kill "$RPID" 2>/dev/null || true
    wait "$RTPID" 2>/dev/null || true
    untrack "$RTPID"
    RTPID=""
}

# ours_start NAME: a fresh filesystem $W/fs-NAME with the receiver's
# state_dir and bronze on it, the receiver started for the initial phase
# (recv_up), configs in OD=$W/NAME
ours_start() {
    local d=$W/$1 fs addr
    OD=$d
    fresh_fs "$1"; fs=$FS
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
    if [ "${OURS_METRICS:-0}" = 1 ]; then
        RMPORT=$(free_port); printf 'metrics:\n  listen: 127.0.0.1:%s\n' "$RMPORT" >> "$d/receiver.yaml"
    fi
    rm -f "$d/agent.yaml"
    recv_up "$d" initial
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
    if [ "${OURS_METRICS:-0}" = 1 ]; then
        AMPORT=$(free_port); printf 'metrics:\n  listen: 127.0.0.1:%s\n' "$AMPORT" >> "$d/agent.yaml"
    fi
    if [ -n "${AGENT_YAML:-}" ]; then printf '%s\n' "$AGENT_YAML" >> "$d/agent.yaml"; fi
}
# scrape_loop OUT PORT...: GET /metrics from every port once a second (a
# Prometheus at a 1 s interval) until killed; the last bodies go to OUT.PORT
scrape_loop() {
    local out=$1 p; shift
    while :; do
        for p in "$@"; do
            { exec 3<>"/dev/tcp/127.0.0.1/$p" && printf 'GET /metrics HTTP/1.0\r\n\r\n' >&3 && cat <&3 > "$out.$p"; exec 3>&-; } 2>/dev/null || true
        done
        read -r -t 1 -u 9 || true
    done
}
ours_stop() {  # ours_stop NAME
    recv_down
    rm -rf "$W/src"
    drop_fs "$1"
}
# summary_fields OUT: the agent's summary line as agent_KEY=VALUE words
summary_fields() {
    local line
    line=$(grep '^shipped:' "$1" | tail -1)
    [ -n "$line" ] || { cat "$1" >&2; die "no summary line from the agent"; }
    echo "${line#shipped: }" | sed 's/\([^ ]*\)=/agent_\1=/g'
}

# run_ours RUN [metrics]: with "metrics", both programs serve /metrics and
# are scraped every second (tool ours-metrics: what metrics cost)
run_ours() {
    local run=$1 d fs phase sums v0 t0 t1 m0 m1 tp sp tool=ours mp="" rpeak=0
    # ours-base: the same with BASE's programs (seen by recv_up through bash's dynamic scope)
    local AGENT=$AGENT RECEIVER=$RECEIVER
    if [ "${2:-}" = metrics ]; then tool=ours-metrics; OURS_METRICS=1; else OURS_METRICS=0; fi
    if [ "${2:-}" = base ]; then tool=ours-base; AGENT=$BASE/ingest-agent; RECEIVER=$BASE/ingest-receiver; fi
    ours_start "$tool-$run"; d=$OD; fs=$FS
    fresh_source
    for phase in initial incremental; do
        if [ $phase = incremental ]; then evolve_source; sums=$W/sums1; else sums=$W/sums0; fi
        v0=$(dev_written "$fs")
        # the receiver runs for one phase: its figures include its clean
        # stop, where it writes the index entries it kept in memory
        [ $phase = incremental ] && recv_up "$d" $phase
        m0=$(machine_ticks); t0=$(now_us)
        /usr/bin/time -v -o "$d/time-$phase" "$AGENT" --config "$d/agent.yaml" --once \
            > "$d/out-$phase" 2> "$d/err-$phase" &
        tp=$!; PIDS+=("$tp")
        sample_rssanon "$tp" "$d/rssanon-$phase" &
        sp=$!; PIDS+=("$sp")
        if [ "$OURS_METRICS" = 1 ]; then
            scrape_loop "$d/scrape-$phase" "$RMPORT" "$AMPORT" &
            mp=$!; PIDS+=("$mp")
        fi
        if ! wait "$tp"; then
            cat "$d/err-$phase" >&2; tail -20 "$d/receiver.log" >&2; die "agent failed ($phase, run $run)"
        fi
        t1=$(now_us)
        if [ -n "$mp" ]; then
            kill "$mp" 2>/dev/null; wait "$mp" 2>/dev/null || true; untrack "$mp"; mp=""
            grep -q '^# TYPE ingest_receiver_' "$d/scrape-$phase.$RMPORT" 2>/dev/null ||
                die "ours-metrics: the receiver's /metrics was never scraped"
        fi
        wait "$sp" || true
        untrack "$tp"; untrack "$sp"
        recv_down
        m1=$(machine_ticks) # after the receiver's clean stop, as its cpu_s
        local syncs; syncs=$(sync_fs "$fs")
        local fields wire bytes acpu rcpu du_b rw rk br_b br_a
        fields=$(summary_fields "$d/out-$phase")
        wire=$(echo "$fields" | tr ' ' '\n' | sed -n 's/^agent_wire_bytes=//p')
        [ -n "$wire" ] || { cat "$d/out-$phase" >&2; die "no wire_bytes in the agent's summary line"; }
        if [ $phase = initial ]; then bytes=$GEN0_BYTES; else bytes=$GEN1_BYTES; fi
        acpu=$(tv_cpu "$d/time-$phase")
        rcpu=$(tv_cpu "$d/rtime-$phase")
        # File system outputs: the receiver's io write_bytes less its cancelled ones, in 512-byte units
        rw=$(( $(tv "$d/rtime-$phase" 'File system outputs') * 512 ))
        rk=$(tv "$d/rtime-$phase" 'Maximum resident set size (kbytes)')
        [ "$rk" -gt "$rpeak" ] && rpeak=$rk
        du_b=$(du -sb "$fs/bronze" "$fs/rstate" | awk '{ s += $1 } END { printf "%.0f", s }')
        # the landed tree: its bytes (apparent sizes) and the bytes allocated to it (holes are not)
        br_b=$(du -sb "$fs/bronze" | cut -f1)
        br_a=$(du -s --block-size=1 "$fs/bronze" | cut -f1)
        # shellcheck disable=SC2086  # $fields: key=value words
        record "$tool" "$run" $phase $(dev_fields "$fs" "$v0" $phase "$bytes") wall_s="$(us2s $((t1 - t0)))" mbps="$(mbps "$bytes" $((t1 - t0)))" durable_mbps="$(dmbps "$bytes" $((t1 - t0)) "$syncs")" \
            wire_bytes="$wire" cpu_s="$(awk -v a="$acpu" -v b="$rcpu" 'BEGIN { printf "%.2f", a + b }')" \
            agent_cpu_s="$acpu" receiver_cpu_s="$rcpu" \
            peak_rss_kb="$(tv "$d/time-$phase" 'Maximum resident set size (kbytes)')" \
            rssanon_kb="$(cut -d' ' -f1 "$d/rssanon-$phase")" rssanon_samples="$(cut -d' ' -f2 "$d/rssanon-$phase")" \
            recv_write_bytes=$rw wamp_io="$(fdiv "$rw" "$bytes")" \
            du_bytes="$du_b" wamp_du="$(fdiv "$du_b" "$bytes")" sync_after_s="$syncs" \
            bronze_bytes="$br_b" bronze_alloc_bytes="$br_a" $(machine_fields "$m0" "$m1") \
            $fields
        if should_verify "$run"; then verify "$tool" "$run" $phase "$sums" "$fs/bronze/dev1/src"; fi
    done
    record "$tool" "$run" receiver receiver_peak_rss_kb="$rpeak"
    ours_stop "$tool-$run"
}

# ---- ours under perf: one extra run, not counted in the medians ------------
# The agent runs under `perf record -g`; `perf record -g -p` is attached to
# the receiver for the same phase.  Only the CPU share by DSO is reported.

PERF_STATE="not run"
perf_probe() {  # perf_probe: 0 when perf can record here; PERF_STATE says why not
    if [ "$PERF" = 0 ]; then PERF_STATE="skipped (PERF=0)"; return 1; fi
    if ! command -v perf >/dev/null; then PERF_STATE="perf is not installed (Debian linux-perf; make bench-deps)"; return 1; fi
    if ! perf record -q -N -o "$W/probe.data" -- true > "$W/probe.log" 2>&1; then
        PERF_STATE="perf is installed but cannot record here: $(grep -m1 -v '^$' "$W/probe.log" || echo 'no message')"
        return 1
    fi
    rm -f "$W/probe.data"
    return 0
}
run_ours_perf() {
    local d fs phase tp pp t0 t1 i
    ours_start ours-perf; d=$OD; fs=$FS
    fresh_source
    for phase in initial incremental; do
        [ $phase = incremental ] && { evolve_source; recv_up "$d" $phase; }
        perf record -q -N -g -o "$d/perf-receiver-$phase.data" -p "$RPID" > "$d/perf-receiver-$phase.log" 2>&1 &
        pp=$!; PIDS+=("$pp")
        # perf opens its events shortly after it starts; nothing happens on the receiver meanwhile
        for i in 1 2 3 4 5 6 7 8 9 10; do read -r -t 0.05 -u 9 || true; done
        if ! kill -0 "$pp" 2>/dev/null; then     # the profile is optional: report why, go on
            wait "$pp" 2>/dev/null || true; untrack "$pp"
            PERF_STATE="perf record -p on the receiver failed: $(grep -m1 -v '^$' "$d/perf-receiver-$phase.log" || echo 'no message')"
            ours_stop ours-perf
            return 0
        fi
        t0=$(now_us)
        perf record -q -N -g -o "$d/perf-agent-$phase.data" -- "$AGENT" --config "$d/agent.yaml" --once \
            > "$d/out-$phase" 2> "$d/err-$phase" &
        tp=$!; PIDS+=("$tp")
        if ! wait "$tp"; then
            cat "$d/err-$phase" >&2; tail -20 "$d/receiver.log" >&2; die "agent under perf failed ($phase)"
        fi
        t1=$(now_us)
        untrack "$tp"
        kill -INT "$pp" 2>/dev/null || true
        wait "$pp" 2>/dev/null || true
        untrack "$pp"
        recv_down
        dso_shares "$d/perf-agent-$phase.data" > "$W/dso-agent-$phase"
        dso_shares "$d/perf-receiver-$phase.data" > "$W/dso-receiver-$phase"
        record ours-perf perf $phase wall_s="$(us2s $((t1 - t0)))" \
            agent_samples="$(share_of "$W/dso-agent-$phase" samples)" \
            receiver_samples="$(share_of "$W/dso-receiver-$phase" samples)" \
            $(summary_fields "$d/out-$phase")
        rm -f "$d/perf-agent-$phase.data" "$d/perf-receiver-$phase.data"
    done
    ours_stop ours-perf
    if [ "$(share_of "$W/dso-agent-initial" samples)" -gt 0 ] && [ "$(share_of "$W/dso-receiver-initial" samples)" -gt 0 ]; then
        PERF_STATE=recorded
    else
        PERF_STATE="perf recorded no samples (perf report of the agent or the receiver was empty)"
    fi
}
# dso_shares DATA: "GROUP PERCENT" lines, the self CPU share of each group of
# shared objects (libzstd, libcrypto, libsodium, kernel, libc, ours, liblmdb, other),
# "samples N" and "other_dsos A,B,..."
dso_shares() {
    perf report -i "$1" --stdio -n --no-children --sort dso -g none --percent-limit 0 2>/dev/null |
        awk '/^#/ || NF < 3 { next }
             $1 ~ /%$/ {
                 p = $1; sub(/%$/, "", p); n += $2; d = $3
                 if (d ~ /^libzstd/) g = "libzstd"
                 else if (d ~ /^libcrypto/) g = "libcrypto"
                 else if (d ~ /^libsodium/) g = "libsodium"
                 else if (d ~ /^\[kernel|^\[guest\.kernel/) g = "kernel"
                 else if (d ~ /^libc[.-]/) g = "libc"
                 else if (d ~ /^ingest-(agent|receiver)$|^libingest/) g = "ours"
                 else if (d ~ /^liblmdb/) g = "liblmdb"
                 else { g = "other"; if (!(d in seen)) { seen[d] = 1; others = others (others == "" ? "" : ",") d } }
                 s[g] += p }
             END {
                 printf "samples %d\n", n
                 for (g in s) printf "%s %.1f\n", g, s[g]
                 if (others != "") printf "other_dsos %s\n", others }'
}
# share_of FILE KEY: a value of dso_shares' output (0 when absent)
share_of() { awk -v k="$2" '$1 == k { print $2; f = 1 } END { if (!f) print (k == "other_dsos" ? "" : k == "samples" ? "0" : "0.0") }' "$1"; }

# ---- rsync -a / -az to an rsync daemon ------------------------------------

run_rsync() {
    local tool=$1 run=$2 opt d fs port tp dpid phase sums v0 t0 t1 m0 m1 c0 c1 i
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
        m0=$(machine_ticks); t0=$(now_us)
        /usr/bin/time -v -o "$d/time-$phase" rsync $opt --stats "$W/src/" "rsync://127.0.0.1:$port/mod/" \
            > "$d/stats-$phase" 2>&1 || { cat "$d/stats-$phase" >&2; die "$tool failed"; }
        t1=$(now_us)
        # the daemon's child must be reaped for its CPU to show in cutime
        i=0
        while [ -n "$(children_of "$dpid")" ] && [ $i -lt 500 ]; do
            read -r -t 0.01 -u 9 || true; i=$((i + 1))
        done
        c1=$(cpu_ticks "$dpid"); m1=$(machine_ticks)
        local syncs; syncs=$(sync_fs "$fs")
        local sent recv bytes ccpu dcpu
        sent=$(sed -n 's/^Total bytes sent: //p' "$d/stats-$phase" | tr -d ,)
        recv=$(sed -n 's/^Total bytes received: //p' "$d/stats-$phase" | tr -d ,)
        if [ $phase = initial ]; then bytes=$GEN0_BYTES; else bytes=$GEN1_BYTES; fi
        ccpu=$(tv_cpu "$d/time-$phase")
        dcpu=$(awk -v t=$((c1 - c0)) -v h="$CLK_TCK" 'BEGIN { printf "%.2f", t / h }')
        record "$tool" "$run" $phase $(dev_fields "$fs" "$v0" $phase "$bytes") wall_s="$(us2s $((t1 - t0)))" mbps="$(mbps "$bytes" $((t1 - t0)))" durable_mbps="$(dmbps "$bytes" $((t1 - t0)) "$syncs")" \
            wire_bytes=$((sent + recv)) cpu_s="$(awk -v a="$ccpu" -v b="$dcpu" 'BEGIN { printf "%.2f", a + b }')" \
            client_cpu_s="$ccpu" daemon_cpu_s="$dcpu" \
            peak_rss_kb="$(tv "$d/time-$phase" 'Maximum resident set size (kbytes)')" \
            sync_after_s="$syncs" $(machine_fields "$m0" "$m1")
        if should_verify "$run"; then verify "$tool" "$run" $phase "$sums" "$fs/mod"; fi
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
    local run=$1 d=$W/tar-zstd-$1 fs port phase sums v0 t0 t1 m0 m1 tp
    mkdir -p "$d"
    fresh_fs "tar-zstd-$run"; fs=$FS
    mkdir -p "$fs/land"
    fresh_source
    for phase in initial incremental; do
        if [ $phase = incremental ]; then evolve_source; sums=$W/sums1; else sums=$W/sums0; fi
        port=$(free_port)
        v0=$(dev_written "$fs")
        m0=$(machine_ticks); t0=$(now_us)
        /usr/bin/time -v -o "$d/time-$phase" bash -c '
            set -o pipefail
            socat -u TCP-LISTEN:$1,bind=127.0.0.1,reuseaddr STDOUT | zstd -d -q | tar -C "$2" -xf - &
            tar -C "$3" -cf - . | zstd -1 -vv -c 2> "$4" |
                socat -u STDIN TCP:127.0.0.1:$1,retry=200,interval=0.01 || exit 1
            wait $! || exit 1' tar-zstd "$port" "$fs/land" "$W/src" "$d/zstd-$phase" \
            > "$d/log-$phase" 2>&1 &
        tp=$!; PIDS+=("$tp")
        wait "$tp" || { cat "$d/log-$phase" "$d/zstd-$phase" >&2; die "tar | zstd failed ($phase)"; }
        t1=$(now_us); m1=$(machine_ticks)
        untrack "$tp"
        local syncs; syncs=$(sync_fs "$fs")
        local wire bytes
        # "(501760 B =>  53992 B, ...)": the compressed size is right-aligned to the input's width
        wire=$(tr '\r' '\n' < "$d/zstd-$phase" | sed -n 's/.*B => *\([0-9]*\) B,.*/\1/p' | tail -1)
        [ -n "$wire" ] || { cat "$d/zstd-$phase" >&2; die "no compressed size in the output of zstd -vv ($phase)"; }
        if [ $phase = initial ]; then bytes=$GEN0_BYTES; else bytes=$GEN1_BYTES; fi
        record tar-zstd "$run" $phase $(dev_fields "$fs" "$v0" $phase "$bytes") wall_s="$(us2s $((t1 - t0)))" mbps="$(mbps "$bytes" $((t1 - t0)))" durable_mbps="$(dmbps "$bytes" $((t1 - t0)) "$syncs")" \
            wire_bytes="$wire" cpu_s="$(tv_cpu "$d/time-$phase")" \
            peak_rss_kb="$(tv "$d/time-$phase" 'Maximum resident set size (kbytes)')" \
            sync_after_s="$syncs" $(machine_fields "$m0" "$m1")
        if should_verify "$run"; then verify tar-zstd "$run" $phase "$sums" "$fs/land"; fi
    done
    rm -rf "$W/src"
    drop_fs "tar-zstd-$run"
}

# ---- restic / casync: a local repository on the fresh filesystem -----------
# No receiving side: the tool writes its repository itself.  Its wire bytes
# are the repository's growth (du -sb after minus before), what a remote
# repository would have had to receive.  Incremental = a second backup of the
# evolved tree into the same repository.  Verification restores (untimed)
# into the work dir, not onto the landing filesystem.

du_sb() { du -sb "$1" | cut -f1; }
run_repo() {
    local tool=$1 run=$2 d=$W/$1-$2 fs repo phase sums v0 t0 t1 m0 m1 b0 b1 tp
    mkdir -p "$d"
    fresh_fs "$tool-$run"; fs=$FS
    repo=$fs/repo
    case $tool in
        restic)
            printf 'bench-%s-%s\n' "$run" "$RANDOM" > "$d/password"
            restic init -q --repo "$repo" --password-file "$d/password" > "$d/init.log" 2>&1 ||
                { cat "$d/init.log" >&2; die "restic init failed"; } ;;
        casync) mkdir -p "$repo/store" ;;
    esac
    fresh_source
    for phase in initial incremental; do
        if [ $phase = incremental ]; then evolve_source; sums=$W/sums1; else sums=$W/sums0; fi
        b0=$(du_sb "$repo")
        v0=$(dev_written "$fs")
        m0=$(machine_ticks); t0=$(now_us)
        case $tool in
            # from $W, so that the snapshot holds src/ (restored as TARGET/src)
            restic) (cd "$W" && RESTIC_CACHE_DIR=$d/cache exec /usr/bin/time -v -o "$d/time-$phase" \
                        restic -q --repo "$repo" --password-file "$d/password" backup src) \
                        > "$d/log-$phase" 2>&1 & ;;
            casync) /usr/bin/time -v -o "$d/time-$phase" casync make --store="$repo/store" \
                        "$repo/$phase.caidx" "$W/src" > "$d/log-$phase" 2>&1 & ;;
        esac
        tp=$!; PIDS+=("$tp")
        wait "$tp" || { cat "$d/log-$phase" >&2; die "$tool failed ($phase, run $run)"; }
        t1=$(now_us); m1=$(machine_ticks)
        untrack "$tp"
        local syncs bytes; syncs=$(sync_fs "$fs")
        b1=$(du_sb "$repo")
        if [ $phase = initial ]; then bytes=$GEN0_BYTES; else bytes=$GEN1_BYTES; fi
        record "$tool" "$run" $phase $(dev_fields "$fs" "$v0" $phase "$bytes") wall_s="$(us2s $((t1 - t0)))" mbps="$(mbps "$bytes" $((t1 - t0)))" durable_mbps="$(dmbps "$bytes" $((t1 - t0)) "$syncs")" \
            wire_bytes=$((b1 - b0)) repo_bytes="$b1" cpu_s="$(tv_cpu "$d/time-$phase")" \
            peak_rss_kb="$(tv "$d/time-$phase" 'Maximum resident set size (kbytes)')" \
            sync_after_s="$syncs" $(machine_fields "$m0" "$m1")
        if should_verify "$run"; then
            rm -rf "$W/restore"
            case $tool in
                restic) RESTIC_CACHE_DIR=$d/cache restic -q --repo "$repo" --password-file "$d/password" \
                            restore latest --target "$W/restore" > "$d/restore-$phase" 2>&1 ;;
                casync) mkdir -p "$W/restore"
                        casync extract --store="$repo/store" "$repo/$phase.caidx" "$W/restore/src" \
                            > "$d/restore-$phase" 2>&1 ;;
            esac || { cat "$d/restore-$phase" >&2; die "$tool: restoring the $phase backup failed"; }
            verify "$tool" "$run" $phase "$sums" "$W/restore/src"
            rm -rf "$W/restore"
        fi
    done
    rm -rf "$W/src"
    drop_fs "$tool-$run"
}

# ---- main -----------------------------------------------------------------

START_DATE=$(date -u '+%Y-%m-%d %H:%M UTC')
# read-only git queries (no index refresh): the commit the binaries come from
CODE_REV="commit $(git -C "$TOP" rev-parse --short HEAD 2>/dev/null || echo unknown)"
git -C "$TOP" --no-optional-locks diff --quiet HEAD -- libingest agent include 2>/dev/null ||
    CODE_REV="$CODE_REV with uncommitted changes in libingest/agent/include"
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
T_START=$(now_us)
# ---- the ceiling: single-core cost of every stage the data must pass -------

STAGE_NAMES="read chunk hash compress seal loopback open decompress verify land"
# run_stages RUN: `ingestctl bench stages` over generation 0, landing into a
# fresh filesystem; its seconds per stage go to the raw lines (tool stages)
run_stages() {
    local fs json st k v words=()
    fresh_fs "stages-$1"; fs=$FS
    json=$("$CTL" bench stages --land "$fs" "$W/gen0") || die "ingestctl bench stages failed (run $1)"
    drop_fs "stages-$1"
    st=$(echo "$json" | sed -n 's/.*"seconds":{\([^}]*\)}.*/\1/p')
    for k in $STAGE_NAMES; do
        v=$(echo "$st" | tr ',' '\n' | sed -n "s/^\"$k\":\([0-9.]*\)$/\1/p")
        words+=("s_$k=${v:-n/a}")
    done
    for k in device_seconds core_seconds loopback_seconds total_seconds ceiling_mbps_2cores durable_cpu_seconds \
        ceiling_durable_mbps_2cores encoded_bytes; do
        v=$(echo "$json" | tr ',{}' '\n\n\n' | sed -n "s/^\"$k\":\([0-9.]*\)$/\1/p")
        words+=("$k=${v:-n/a}")
    done
    record stages "$1" stages "${words[@]}"
}

say "work dir $W, PROFILE=$PROFILE (bench gen ${GEN_ARGS[*]}) RUNS=$RUNS, landing into $FS_KIND"
setup_keys
"$CTL" bench gen "${GEN_ARGS[@]}" "$W/gen0" >/dev/null
cp -a "$W/gen0" "$W/gen1"
"$CTL" bench gen --evolve "${GEN_ARGS[@]}" "$W/gen1" >/dev/null
GEN0_BYTES=$(tree_bytes "$W/gen0"); GEN0_FILES=$(tree_files "$W/gen0")
GEN1_BYTES=$(tree_bytes "$W/gen1"); GEN1_FILES=$(tree_files "$W/gen1")
(cd "$W/gen0" && find . -type f -print0 | sort -z | xargs -0 sha256sum) > "$W/sums0"
(cd "$W/gen1" && find . -type f -print0 | sort -z | xargs -0 sha256sum) > "$W/sums1"
rm -rf "$W/gen1"          # each tool evolves its own copy of gen0 in place
FS_BYTES=$(( (GEN0_BYTES + GEN1_BYTES) * 3 / 2 + 256 * 1024 * 1024 ))
FS_BYTES=$(( (FS_BYTES + 1048575) / 1048576 * 1048576 ))
# mkfs.ext4 makes an inode per 16 KiB: too few for a tree of small files
# (both generations, the receiver's own files, room to spare)
MKFS_INODES=()
INODES=$(( (GEN0_FILES + GEN1_FILES) * 2 + 10000 ))
if [ $((FS_BYTES / 16384)) -lt $INODES ]; then MKFS_INODES=(-N "$INODES"); fi
say "generation 0: $GEN0_FILES files, $GEN0_BYTES bytes; generation 1: $GEN1_FILES files, $GEN1_BYTES bytes"

for t in $TOOLS; do installed "$t" || say "$t is not installed: left out (make bench-deps installs it)"; done
# The order rotates: run r starts with the r-th tool.  Whoever runs right
# after a filesystem of a GiB was dropped pays for fresh page-cache pages
# (on this VM freed memory goes back to the host), so no tool is always
# the one that follows another's teardown.
read -r -a TOOL_LIST <<< "$TOOLS"
for run in $(seq 1 "$RUNS"); do
    for ((ti = 0; ti < ${#TOOL_LIST[@]}; ti++)); do
        tool=${TOOL_LIST[$(( (ti + run - 1) % ${#TOOL_LIST[@]} ))]}
        installed "$tool" || continue
        say "run $run/$RUNS: $tool"
        case $tool in
            ours) run_ours "$run" ;;
            ours-metrics) run_ours "$run" metrics ;;
            ours-base) run_ours "$run" base ;;
            rsync-a|rsync-az) run_rsync "$tool" "$run" ;;
            tar-zstd) run_tar "$run" ;;
            restic|casync) run_repo "$tool" "$run" ;;
        esac
    done
    if [ "$STAGES" != 0 ] && has ours; then
        say "run $run/$RUNS: stages (ingestctl bench stages)"
        run_stages "$run"
    fi
done
T_END=$(now_us)
if has ours && perf_probe; then
    say "extra run of ours under perf record (not in the medians)"
    run_ours_perf
fi
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
# per_file VALUE SCALE: VALUE x SCALE / files of generation 0
per_file() { awk -v v="$1" -v s="$2" -v f="$GEN0_FILES" 'BEGIN { if (v == "n/a" || f == 0) print "n/a"; else printf "%.1f", v * s / f }'; }
# ceiling STAGE_SECONDS [DURABLE_SECONDS]: the MB/s this machine's cores bound a ship of generation 0 at
ceiling() { awk -v b="$GEN0_BYTES" -v s="$1" -v d="${2:-0}" -v c="$(nproc)" 'BEGIN { printf "%.1f", c * b / (s + d) / 1e6 }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "n/a" || b == "n/a" || b == 0) print "n/a"; else printf "%.2f", a / b }'; }
verdict() { awk -v v="$1" -v op="$2" -v lim="$3" 'BEGIN {
    if (v == "n/a") { print "n/a"; exit }
    ok = (op == ">=") ? (v + 0 >= lim + 0) : (op == "<=") ? (v + 0 <= lim + 0) : (v + 0 < lim + 0)
    print ok ? "met" : "NOT met" }'; }

label() {
    case $1 in
        ours) echo "ours (ingest-agent -> ingest-receiver)" ;;
        ours-metrics) echo "ours, metrics on (both /metrics scraped every second)" ;;
        ours-base) echo "ours, base build (BASE=${BASE_SHOWN:-$BASE})" ;;
        rsync-a) echo "rsync -a (daemon)" ;;
        rsync-az) echo "rsync -az (daemon)" ;;
        tar-zstd) echo "tar \\| zstd -1 \\| socat (incr = whole tree)" ;;
        restic) echo "restic backup (local repository; wire = repository growth)" ;;
        casync) echo "casync make (local store; wire = store growth)" ;;
    esac
}
short_label() {
    case $1 in
        rsync-a) echo "rsync -a" ;;
        rsync-az) echo "rsync -az" ;;
        tar-zstd) echo "tar|zstd" ;;
        *) echo "$1" ;;
    esac
}
tool_versions() {
    printf '%s; %s; %s; %s' "$(rsync --version | head -1 | sed 's/  */ /g')" \
        "$(zstd -V | sed 's/^\*\*\* //; s/ \*\*\*$//')" "$(socat -V | sed -n 2p)" "$(tar --version | head -1)"
    installed restic && printf '; %s' "$(restic version | sed 's/ compiled.*//')"
    installed casync && printf '; %s' "$(casync --version | head -1)"
    echo
}

# write_svg OUT: three bar charts side by side (initial MB/s, incremental wire
# bytes on a log scale, peak sender RSS), values printed on the bars
write_svg() {
    local t pk
    for t in $TOOLS; do
        if ! installed "$t"; then printf '%s\t-\t-\t-\t0\n' "$(short_label "$t")"; continue; fi
        pk=$(awk -v a="$(med "$t" initial peak_rss_kb)" -v b="$(med "$t" incremental peak_rss_kb)" 'BEGIN {
            if (a == "n/a") a = b; if (b == "n/a") b = a
            if (a == "n/a") print "n/a"; else printf "%.1f", ((a + 0 > b + 0) ? a : b) / 1024 }')
        printf '%s\t%s\t%s\t%s\t%s\n' "$(short_label "$t")" "$(med "$t" initial mbps)" \
            "$(med "$t" incremental wire_bytes)" "$pk" "$([ "$t" = ours ] && echo 1 || echo 0)"
    done | awk -F'\t' -v title="Shipping benchmark: $([ "$PROFILE" = default ] || echo "profile $PROFILE, ")$([ "$PROFILE" = small ] && echo "$GEN0_FILES files" || echo "SIZE=$SIZE"), medians of $RUNS run(s), $START_DATE" '
        function esc(x) { gsub(/&/, "\\&amp;", x); gsub(/</, "\\&lt;", x); gsub(/>/, "\\&gt;", x); return x }
        function bytes(v) {
            if (v >= 1e9) return sprintf("%.2f GB", v / 1e9)
            if (v >= 1e6) return sprintf("%.1f MB", v / 1e6)
            if (v >= 1e3) return sprintf("%.0f kB", v / 1e3)
            return sprintf("%d B", v)
        }
        function tick(v) { return v >= 1e9 ? sprintf("%g GB", v / 1e9) : v >= 1e6 ? sprintf("%g MB", v / 1e6) : v >= 1e3 ? sprintf("%g kB", v / 1e3) : sprintf("%g B", v) }
        function fmt(c, v) { return c == 1 ? sprintf("%.1f", v) : c == 2 ? bytes(v) : sprintf("%.1f MiB", v) }
        function lg(v) { return log(v) / log(10) }
        { n++; name[n] = $1; val[1, n] = $2; val[2, n] = $3; val[3, n] = $4; ours[n] = $5 }
        END {
            PW = 350; LW = 78; BW = 200; TOP = 76; RH = 28; BH = 20
            H = TOP + n * RH + 46; Wd = 3 * PW + 20
            head[1] = "Initial ship: MB/s"; sub1[1] = "higher is better"
            head[2] = "Incremental ship: wire bytes"; sub1[2] = "log scale; lower is better"
            head[3] = "Peak sender memory: RSS, MiB"; sub1[3] = "lower is better"
            printf "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" font-family=\"DejaVu Sans, Arial, sans-serif\" font-size=\"12\">\n", Wd, H, Wd, H
            printf "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
            printf "<text x=\"10\" y=\"20\" font-size=\"14\" font-weight=\"bold\">%s</text>\n", esc(title)
            for (c = 1; c <= 3; c++) {
                x0 = 10 + (c - 1) * PW; bx = x0 + LW
                max = 0; min = 0
                for (i = 1; i <= n; i++) {
                    v = val[c, i]
                    if (v == "-" || v == "n/a" || v + 0 <= 0) continue
                    if (v + 0 > max) max = v + 0
                    if (min == 0 || v + 0 < min) min = v + 0
                }
                if (c == 2 && max > 0) {
                    lo = 10 ^ int(lg(min) + 1e-9); if (lo > min) lo /= 10; if (lo >= min) lo /= 10
                    hi = 10 ^ int(lg(max) + 1e-9); if (hi < max) hi *= 10
                    if (hi <= lo) hi = lo * 10
                }
                printf "<text x=\"%d\" y=\"46\" font-size=\"13\" font-weight=\"bold\">%s</text>\n", x0, esc(head[c])
                printf "<text x=\"%d\" y=\"62\" font-size=\"11\" fill=\"#555\">%s</text>\n", x0, esc(sub1[c])
                printf "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#444\"/>\n", bx, TOP - 6, bx, TOP + n * RH
                if (c == 2 && max > 0)
                    for (e = lo; e <= hi * 1.001; e *= 10) {
                        gx = bx + BW * (lg(e) - lg(lo)) / (lg(hi) - lg(lo))
                        printf "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#ddd\"/>\n", gx, TOP - 6, gx, TOP + n * RH
                        printf "<text x=\"%.1f\" y=\"%d\" font-size=\"10\" fill=\"#666\" text-anchor=\"middle\">%s</text>\n", gx, TOP + n * RH + 14, tick(e)
                    }
                for (i = 1; i <= n; i++) {
                    y = TOP + (i - 1) * RH
                    printf "<text x=\"%d\" y=\"%d\" text-anchor=\"end\"%s>%s</text>\n", bx - 6, y + 14, ours[i] ? " font-weight=\"bold\"" : "", esc(name[i])
                    v = val[c, i]
                    if (v == "-") { printf "<text x=\"%d\" y=\"%d\" fill=\"#888\">not installed</text>\n", bx + 6, y + 14; continue }
                    if (v == "n/a") { printf "<text x=\"%d\" y=\"%d\" fill=\"#888\">n/a</text>\n", bx + 6, y + 14; continue }
                    v += 0
                    if (v <= 0) len = 0
                    else if (c == 2) len = BW * (lg(v) - lg(lo)) / (lg(hi) - lg(lo))
                    else len = BW * v / max
                    if (len < 2) len = 2
                    printf "<rect x=\"%d\" y=\"%d\" width=\"%.1f\" height=\"%d\" fill=\"%s\"/>\n", bx, y + 1, len, BH, ours[i] ? "#d95f02" : "#4c72b0"
                    lab = fmt(c, v)
                    if (len >= 8 * length(lab) + 8)
                        printf "<text x=\"%.1f\" y=\"%d\" fill=\"white\" text-anchor=\"end\">%s</text>\n", bx + len - 4, y + 15, lab
                    else
                        printf "<text x=\"%.1f\" y=\"%d\" fill=\"#222\">%s</text>\n", bx + len + 4, y + 15, lab
                }
            }
            printf "<text x=\"10\" y=\"%d\" font-size=\"10\" fill=\"#666\">1 MB = 10^6 bytes. restic and casync: wire bytes = growth of their local repository. Peak RSS: the larger of the initial and incremental medians. See results.md.</text>\n", H - 8
            print "</svg>"
        }' > "$1"
}

REPORT=$W/results.md
SVG_TMP=$W/results.svg
write_svg "$SVG_TMP"
{
    if [ "$PROFILE" = default ]; then
        echo "# Shipping benchmark"
        echo
        echo "Written by \`bench/ship.sh\` (\`make bench-ship\`); see bench/README.md for what is measured and how."
    else
        echo "# Shipping benchmark: the $PROFILE profile"
        echo
        echo "Written by \`bench/ship.sh\` (\`make bench-$PROFILE\`, PROFILE=$PROFILE); see bench/README.md for what is measured and how."
    fi
    echo "Charts: [$(basename "$SVG")]($(basename "$SVG"))."
    echo
    echo "![initial MB/s, incremental wire bytes and peak sender memory per tool]($(basename "$SVG"))"
    echo
    echo "- date: $START_DATE; total driver time $(us2s $((T_END - T_START))) s"
    echo "- code: $CODE_REV, binaries of $(case $BUILD in "$TOP"/*) echo "${BUILD#"$TOP"/}/" ;; *) echo "$BUILD" ;; esac)"
    echo "- machine: $(nproc) CPUs, $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), $(awk '/MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo) RAM, Linux $(uname -r)"
    echo "- load average (1/5/15 min): $LOAD_START at start, $LOAD_END at end (the machine is shared)"
    echo "- tree: PROFILE=$PROFILE (\`ingestctl bench gen ${GEN_ARGS[*]}\`), generation 0 $GEN0_FILES files / $GEN0_BYTES bytes; generation 1 (ingestctl bench gen --evolve) $GEN1_FILES files / $GEN1_BYTES bytes"
    echo "- runs: $RUNS, tools interleaved in each run ($TOOLS), the order rotating by one tool per run (run r starts with the r-th), then \`ingestctl bench stages\`; each tool lands into $FS_KIND"
    echo "- tools: $(tool_versions)"
    for t in $TOOLS; do installed "$t" || echo "- $t: not installed (make bench-deps), left out"; done
    if [ ${#VERIFIED[@]} -gt 0 ]; then
        echo "- verified (VERIFY=$VERIFY; sha256 of every file of the generation against the landed or restored copy): $(printf '%s; ' "${VERIFIED[@]}")"
    else
        echo "- verified: nothing (VERIFY=$VERIFY)"
    fi
    echo "- figures are medians of $RUNS runs; MB/s = source bytes of the generation / wall seconds, 1 MB = 10^6 bytes; CPU s = user+sys of sender and receiver processes (initial / incremental)"
    echo
    echo "| tool | initial MB/s | incremental MB/s | wire bytes initial | wire bytes incremental | CPU s | peak RSS | agent RssAnon |"
    echo "|---|---|---|---|---|---|---|---|"
    for t in $TOOLS; do
        if ! installed "$t"; then echo "| $(label "$t") | not installed | - | - | - | - | - | - |"; continue; fi
        ra=n/a
        [ "$t" = ours ] && ra="$(mib "$(med ours initial rssanon_kb)") / $(mib "$(med ours incremental rssanon_kb)")"
        echo "| $(label "$t") | $(med "$t" initial mbps) | $(med "$t" incremental mbps) | $(med "$t" initial wire_bytes) | $(med "$t" incremental wire_bytes) | $(med "$t" initial cpu_s) / $(med "$t" incremental cpu_s) | $(mib "$(med "$t" initial peak_rss_kb)") / $(mib "$(med "$t" incremental peak_rss_kb)") | $ra |"
    done
    echo
    echo "Peak RSS is the sending side (agent; rsync client; the largest process of the tar pipeline; restic or casync itself), initial / incremental."
    if has ours; then
        echo "Receiving side, medians: ingest-receiver peak RSS $(mib "$(med ours receiver receiver_peak_rss_kb)"), CPU $(med ours initial receiver_cpu_s) / $(med ours incremental receiver_cpu_s) s (included in CPU s above)."
    fi
    for t in rsync-a rsync-az; do
        has "$t" && echo "$t daemon (all its children, both phases) peak RSS $(mib "$(med "$t" daemon daemon_peak_rss_kb)")."
    done
    if has restic || has casync; then
        echo "restic and casync have no receiving side: one process reads the tree and writes the repository (compressed, deduplicated; restic also encrypts); their wire bytes are its growth (du -sb after minus before). Repository size after both phases: $(for t in restic casync; do has "$t" && printf '%s %s; ' "$t" "$(med "$t" incremental repo_bytes)"; done)"
    fi
    echo "Seconds for \`sync -f\` of the landing filesystem right after each tool finished (not included above; ours is durable before it returns): $(for t in $TOOLS; do has "$t" && printf '%s %s / %s; ' "$t" "$(med "$t" initial sync_after_s)" "$(med "$t" incremental sync_after_s)"; done)"
    echo "MB/s when each tool's \`sync -f\` is counted (source bytes / (wall seconds + those seconds), medians), initial / incremental: $(for t in $TOOLS; do has "$t" && printf '%s %s / %s; ' "$t" "$(med "$t" initial durable_mbps)" "$(med "$t" incremental durable_mbps)"; done)"
    echo "The machine's busy CPU seconds (every CPU, /proc/stat: the tools' processes and the kernel's workers, which write the pages back${LOOP_COPY}) during each tool's timed run + during its \`sync -f\` after, medians, initial: $(for t in $TOOLS; do has "$t" && printf '%s %s + %s; ' "$t" "$(med "$t" initial machine_cpu_s)" "$(med "$t" initial sync_machine_cpu_s)"; done)"
    echo
    if [ $USE_LOOP = 1 ]; then
        echo "Bytes written to the landing filesystem's device (/sys/block/loopN/stat, after \`sync -f\`; data, metadata, journal, and for ours the receiver's state_dir; restic and casync store compressed):"
        echo
        echo "| tool | initial bytes | / bytes landed | incremental bytes |"
        echo "|---|---|---|---|"
        for t in $TOOLS; do
            has "$t" || continue
            echo "| $(label "$t") | $(med "$t" initial dev_write_bytes) | $(med "$t" initial wamp_dev) | $(med "$t" incremental dev_write_bytes) |"
        done
        echo
    fi
    if has ours; then
        echo "Receiver write amplification (initial ship; the receiver runs for one phase and is stopped cleanly before the figures are read, so they include the index entries it writes at its stop): the receiver's write_bytes less cancelled_write_bytes (/usr/bin/time's File system outputs x 512) / bytes landed = $(med ours initial wamp_io); du -sb of bronze + state_dir / bytes landed = $(med ours initial wamp_du). The landed tree after both phases: $(med ours incremental bronze_bytes) bytes, $(med ours incremental bronze_alloc_bytes) allocated (\`du -s --block-size=1\`; all-zero chunks land as holes, docs/landing.md). Incremental: receiver write_bytes $(med ours incremental recv_write_bytes), bytes of generation 1 $GEN1_BYTES."
        echo
        echo "## Where ours spends its time"
        echo
        echo "Medians of the agent's summary line (seconds of its shipping thread; see docs/operations.md):"
        echo
        echo "| stage | initial s | incremental s |"
        echo "|---|---|---|"
        echo "| whole ship (\`seconds\`) | $(med ours initial agent_seconds) | $(med ours incremental agent_seconds) |"
        echo "| waiting for the next batch to be built: walk, read, chunk, hash (\`wait_build_seconds\`) | $(med ours initial agent_wait_build_seconds) | $(med ours incremental agent_wait_build_seconds) |"
        echo "| waiting for the receiver's WANT after a manifest (\`wait_want_seconds\`) | $(med ours initial agent_wait_want_seconds) | $(med ours incremental agent_wait_want_seconds) |"
        echo "| sending the wanted chunks: re-read, compress, encrypt, write (\`send_seconds\`) | $(med ours initial agent_send_seconds) | $(med ours incremental agent_send_seconds) |"
        echo "| waiting for the ACK: the receiver making the batch durable (\`wait_ack_seconds\`) | $(med ours initial agent_wait_ack_seconds) | $(med ours incremental agent_wait_ack_seconds) |"
        echo "| per-file latency p50, batch build start to ack (\`latency_p50_seconds\`) | $(med ours initial agent_latency_p50_seconds) | $(med ours incremental agent_latency_p50_seconds) |"
        echo "| per-file latency p99 (\`latency_p99_seconds\`) | $(med ours initial agent_latency_p99_seconds) | $(med ours incremental agent_latency_p99_seconds) |"
        echo
        if has ours-base; then
            echo "The same medians for ours-base (BASE=${BASE_SHOWN:-$BASE}), initial / incremental s: seconds $(med ours-base initial agent_seconds) / $(med ours-base incremental agent_seconds); wait_build $(med ours-base initial agent_wait_build_seconds) / $(med ours-base incremental agent_wait_build_seconds); wait_want $(med ours-base initial agent_wait_want_seconds) / $(med ours-base incremental agent_wait_want_seconds); send $(med ours-base initial agent_send_seconds) / $(med ours-base incremental agent_send_seconds); wait_ack $(med ours-base initial agent_wait_ack_seconds) / $(med ours-base incremental agent_wait_ack_seconds); CPU s agent $(med ours-base initial agent_cpu_s), receiver $(med ours-base initial receiver_cpu_s) (ours: $(med ours initial agent_cpu_s), $(med ours initial receiver_cpu_s)); agent RssAnon $(mib "$(med ours-base initial rssanon_kb)") (ours: $(mib "$(med ours initial rssanon_kb)"))."
            echo
        fi
        if [ "$PERF_STATE" = recorded ]; then
            echo "Where the CPU seconds went: one extra run of ours (not in the medians above) with the agent under \`perf record -g\` and \`perf record -g -p\` attached to the receiver for each phase; self CPU share by shared object, from \`perf report --no-children --sort dso\` (samples: agent $(share_of "$W/dso-agent-initial" samples) / $(share_of "$W/dso-agent-incremental" samples), receiver $(share_of "$W/dso-receiver-initial" samples) / $(share_of "$W/dso-receiver-incremental" samples); median CPU s of the counted runs: agent $(med ours initial agent_cpu_s) / $(med ours incremental agent_cpu_s), receiver $(med ours initial receiver_cpu_s) / $(med ours incremental receiver_cpu_s)):"
            echo
            echo "| shared object | agent initial | receiver initial | agent incremental | receiver incremental |"
            echo "|---|---|---|---|---|"
            for g in libzstd libcrypto libsodium kernel libc ours liblmdb other; do
                case $g in
                    kernel) gl="kernel ([kernel.kallsyms])" ;;
                    ours) gl="our binaries (ingest-agent, ingest-receiver)" ;;
                    other) gl="other" ;;
                    *) gl=$g ;;
                esac
                echo "| $gl | $(share_of "$W/dso-agent-initial" $g)% | $(share_of "$W/dso-receiver-initial" $g)% | $(share_of "$W/dso-agent-incremental" $g)% | $(share_of "$W/dso-receiver-incremental" $g)% |"
            done
            echo
            echo "\"other\": $(cat "$W"/dso-*-* | awk '$1 == "other_dsos" { n = split($2, a, ","); for (i = 1; i <= n; i++) if (!(a[i] in s)) { s[a[i]] = 1; o = o (o == "" ? "" : ", ") a[i] } } END { print (o == "" ? "nothing" : o) }')."
        else
            echo "Where the CPU seconds went (perf): not measured: $PERF_STATE."
        fi
        echo
        if [ "$(med stages stages total_seconds)" != n/a ]; then
            echo "## The ceiling"
            echo
            echo "\`ingestctl bench stages --land FS GEN0\` in each run (medians; FS a fresh filesystem like the tools'): the CPU seconds (user + system, one thread) generation 0 spends in each stage every byte must pass, one stage at a time. Their sum is the least CPU any ship of this tree doing this work can take, however its stages are spread over threads, so $(nproc) cores bound its MB/s at bytes / (sum / cores). It leaves out what a real ship adds (walk, manifests, framing, the index, syncs, waits between threads)."
            echo
            echo "| stage | side | CPU s | MB/s on one core |"
            echo "|---|---|---|---|"
            for k in $STAGE_NAMES; do
                case $k in read|chunk|hash|compress|seal) sd=device ;; loopback) sd="both (socket copies)" ;; *) sd=core ;; esac
                v=$(med stages stages "s_$k")
                echo "| $k | $sd | $v | $(awk -v b="$GEN0_BYTES" -v s="$v" 'BEGIN { if (s == "n/a" || s == 0) print "n/a"; else printf "%.1f", b / s / 1e6 }') |"
            done
            tot=$(med stages stages total_seconds)
            ceil=$(ceiling "$tot")
            echo "| **sum** | device $(med stages stages device_seconds), core $(med stages stages core_seconds) | $tot | $(awk -v b="$GEN0_BYTES" -v s="$tot" 'BEGIN { printf "%.1f", b / s / 1e6 }') |"
            echo
            echo "Ceiling on $(nproc) cores: **$ceil MB/s**. Ours reached $(med ours initial mbps) MB/s, $(ratio "$(med ours initial mbps)" "$ceil")x of it."
            dur=$(med stages stages durable_cpu_seconds)
            if [ "$dur" != n/a ]; then
                cd2=$(ceiling "$tot" "$dur")
                echo
                echo "The sum leaves out what making the landed bytes durable costs the machine, which ours pays within its run (it acknowledges only what is durable) and the other tools mostly after theirs, in their \`sync -f\`: the kernel's workers write the pages back${LOOP_COPY}. What the stages' run cost the machine beyond its own process, up to the end of the syncfs that closes it (every CPU's busy time from /proc/stat, less the process's CPU and the busy rate of a quiet second before the run), was **$dur s**. Counted, the ceiling on $(nproc) cores is **$cd2 MB/s**, and ours reached $(ratio "$(med ours initial mbps)" "$cd2")x of it."
            fi
            if has rsync-az; then
                t2=$(awk -v a="$(med rsync-az initial mbps)" 'BEGIN { printf "%.1f", 2 * a }')
                echo "2x rsync -az is $t2 MB/s, $(ratio "$t2" "$ceil")x the ceiling$(awk -v a="$t2" -v c="$ceil" 'BEGIN { if (a + 0 > c + 0) print ": beyond what this work allows on these cores" }')."
            fi
            echo
        fi
        echo "## Targets"
        echo
        echo "| target | measured | verdict |"
        echo "|---|---|---|"
        if has rsync-az; then
            r=$(ratio "$(med ours initial mbps)" "$(med rsync-az initial mbps)")
            echo "| ours >= 2x rsync -az MB/s (initial) | ${r}x | $(verdict "$r" '>=' 2) |"
            if [ "$(med stages stages total_seconds)" != n/a ]; then
                c2=$(ceiling "$(med stages stages total_seconds)")
                r=$(ratio "$c2" "$(med rsync-az initial mbps)")
                echo "| the ceiling (above) >= 2x rsync -az MB/s: can any design doing this work reach the target here? | ${r}x | $(verdict "$r" '>=' 2) |"
            fi
            r=$(ratio "$(med ours incremental mbps)" "$(med rsync-az incremental mbps)")
            echo "| ours >= 2x rsync -az MB/s (incremental) | ${r}x | $(verdict "$r" '>=' 2) |"
        fi
        if has tar-zstd; then
            r=$(ratio "$(med ours initial mbps)" "$(med tar-zstd initial mbps)")
            echo "| ours >= 0.8x tar \\| zstd MB/s (initial) | ${r}x | $(verdict "$r" '>=' 0.8) |"
        fi
        # issue 16's targets for its profiles
        if [ "$PROFILE" = small ] && has tar-zstd; then
            a=$(med ours initial wire_bytes); b=$(med tar-zstd initial wire_bytes)
            echo "| small files: wire bytes <= tar \\| zstd -1's (initial) | $a vs $b ($(ratio "$a" "$b")x) | $(verdict "$(ratio "$a" "$b")" '<=' 1) |"
            a=$(med ours initial wall_s); b=$(med tar-zstd initial wall_s)
            echo "| small files: µs/file <= tar \\| zstd's (initial; durable) | $(per_file "$a" 1e6) vs $(per_file "$b" 1e6) ($(ratio "$a" "$b")x) | $(verdict "$(ratio "$a" "$b")" '<=' 1) |"
        fi
        if [ "$PROFILE" = gateway ]; then
            if has rsync-az; then
                r=$(ratio "$(med ours initial mbps)" "$(med rsync-az initial mbps)")
                echo "| gateway: ours >= 1.3x rsync -az MB/s (initial) | ${r}x | $(verdict "$r" '>=' 1.3) |"
            fi
            if has tar-zstd; then
                r=$(ratio "$(med ours initial mbps)" "$(med tar-zstd initial mbps)")
                echo "| gateway: ours >= 1.0x tar \\| zstd MB/s (initial) | ${r}x | $(verdict "$r" '>=' 1.0) |"
            fi
            if has rsync-az; then
                a=$(med ours incremental wire_bytes); b=$(med rsync-az incremental wire_bytes)
                echo "| gateway: incremental wire bytes <= 0.5x rsync -az's | $a vs $b ($(ratio "$a" "$b")x) | $(verdict "$(ratio "$a" "$b")" '<=' 0.5) |"
            fi
        fi
        # issue 19's targets (default profile)
        if [ "$PROFILE" = default ]; then
            if [ "$(med stages stages total_seconds)" != n/a ]; then
                c2=$(ceiling "$(med stages stages total_seconds)")
                r=$(ratio "$(med ours initial mbps)" "$c2")
                echo "| ours >= 0.85x the ceiling that \`bench stages\` reports in the same run (initial) | ${r}x ($(med ours initial mbps) of $c2 MB/s) | $(verdict "$r" '>=' 0.85) |"
                cd2=$(med stages stages durable_cpu_seconds)
                if [ "$cd2" != n/a ]; then
                    cd2=$(ceiling "$(med stages stages total_seconds)" "$cd2")
                    r=$(ratio "$(med ours initial mbps)" "$cd2")
                    echo "| (for the record, not the target) ours against the ceiling with durability counted (the paragraph under the ceiling) | ${r}x ($(med ours initial mbps) of $cd2 MB/s) | n/a |"
                fi
            fi
            if has rsync-az; then
                r=$(ratio "$(med ours initial mbps)" "$(med rsync-az initial mbps)")
                echo "| ours >= 1.5x rsync -az MB/s (initial) | ${r}x | $(verdict "$r" '>=' 1.5) |"
                a=$(awk -v c="$(med ours initial agent_cpu_s)" -v b="$GEN0_BYTES" 'BEGIN { printf "%.2f", c / (b / 1e9) }')
                b=$(awk -v c="$(med rsync-az initial client_cpu_s)" -v b="$GEN0_BYTES" 'BEGIN { printf "%.2f", c / (b / 1e9) }')
                echo "| agent CPU s per GB shipped <= 0.6x rsync -az's sender (client) CPU s per GB (initial) | $a vs $b ($(ratio "$a" "$b")x) | $(verdict "$(ratio "$a" "$b")" '<=' 0.6) |"
            fi
            if has tar-zstd; then
                r=$(ratio "$(med ours initial mbps)" "$(med tar-zstd initial mbps)")
                echo "| ours >= 1.1x tar \\| zstd -1 \\| socat MB/s (initial) | ${r}x | $(verdict "$r" '>=' 1.1) |"
            fi
        fi
        if has ours-base; then
            echo "| (before/after) ours / ours-base initial MB/s | $(ratio "$(med ours initial mbps)" "$(med ours-base initial mbps)")x | info |"
            echo "| (before/after) ours / ours-base agent CPU s (initial) | $(ratio "$(med ours initial agent_cpu_s)" "$(med ours-base initial agent_cpu_s)")x | info |"
            echo "| (before/after) ours / ours-base receiver CPU s (initial) | $(ratio "$(med ours initial receiver_cpu_s)" "$(med ours-base initial receiver_cpu_s)")x | info |"
        fi
        if has ours-metrics; then
            r=$(awk -v a="$(med ours-metrics initial mbps)" -v b="$(med ours initial mbps)" 'BEGIN {
                if (a == "n/a" || b == "n/a" || b == 0) print "n/a"; else printf "%.3f", 1 - a / b }')
            echo "| metrics on costs < 3% of throughput (1 - ours-metrics / ours initial MB/s) | $r | $(verdict "$r" '<' 0.03) |"
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
        if has casync; then
            a=$(med ours incremental wire_bytes); b=$(med casync incremental wire_bytes)
            echo "| incremental wire bytes <= 0.5x casync's incremental store growth | $a vs $b ($(ratio "$a" "$b")x) | $(verdict "$(ratio "$a" "$b")" '<=' 0.5) |"
        elif case " $TOOLS " in *" casync "*) true ;; *) false ;; esac; then
            echo "| incremental wire bytes <= 0.5x casync's incremental store growth | casync not installed | n/a |"
        fi
    fi
    echo
    if [ "$PROFILE" = small ]; then
        echo "## Per file"
        echo
        echo "Generation 0: $GEN0_FILES files, $(awk -v b="$GEN0_BYTES" -v f="$GEN0_FILES" 'BEGIN { printf "%.0f", b / f }') bytes each on average. µs/file = initial wall seconds / $GEN0_FILES; wire bytes / file = initial wire bytes / $GEN0_FILES (medians). Incremental: generation 1 ($GEN1_FILES files; $((GEN1_FILES - GEN0_FILES)) new, a few rewritten), whole tree for tar."
        echo
        echo "| tool | initial wall s | µs/file | MB/s | wire bytes | wire bytes / file | incremental wall s | incremental wire bytes |"
        echo "|---|---|---|---|---|---|---|---|"
        for t in $TOOLS; do
            has "$t" || continue
            w=$(med "$t" initial wall_s); b=$(med "$t" initial wire_bytes)
            echo "| $(label "$t") | $w | $(per_file "$w" 1e6) | $(med "$t" initial mbps) | $b | $(per_file "$b" 1) | $(med "$t" incremental wall_s) | $(med "$t" incremental wire_bytes) |"
        done
        echo
        if has ours; then
            a=$(med ours initial agent_wire_bytes); c=$(med ours initial agent_chunk_bytes)
            echo "Ours on the wire beyond the compressed chunk data (the manifest lines, WANT, ACK, framing, AEAD tags; both ways): (\`wire_bytes\` - \`chunk_bytes\`) / files = $(awk -v a="$a" -v c="$c" -v f="$GEN0_FILES" 'BEGIN { if (a == "n/a" || c == "n/a") print "n/a"; else printf "%.0f", (a - c) / f }') bytes per file (initial, medians); chunk data $(per_file "$c" 1) bytes per file."
            echo
        fi
    fi
    echo "## Raw per-run lines"
    echo
    echo '```'
    cat "$RAW"
    echo '```'
} > "$REPORT"
cp "$REPORT" "$RESULTS"
cp "$SVG_TMP" "$SVG"
cat "$REPORT"
say "wrote $RESULTS and $SVG"

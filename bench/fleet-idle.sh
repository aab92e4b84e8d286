#!/bin/bash
# Fleet scale at the receiver (issue 14): IDLE authenticated device sessions
# held open (tests/tools/idle-sessions) while devices ship, and the
# receiver's memory and CPU per GB with 1, 10 and 100 devices shipping.
#
#   bash bench/fleet-idle.sh BUILD [IDLE] [PHASE_MIB]
#
# IDLE (default 1000) sessions connect first; the receiver's RssAnon is read
# (and VmSize) before and after (the cost of an idle session).  Then three phases, each
# shipping PHASE_MIB (default 64) MiB of incompressible files split over 1,
# 10 and 100 devices (`ingest-agent --once`, all started at once; new
# device ids per phase, so nothing dedups), with the idle sessions still
# held.  Per phase: wall seconds, aggregate MB/s, the receiver's CPU
# seconds (utime + stime from /proc) per GB landed, and its peak RssAnon
# (sampled every 50 ms) beside its peak VmRSS.  Every file must land
# byte-identical (checked with sha256sum), or the script fails.
# Prints a Markdown table.  RECEIVER_STACK_KIB=N runs the receiver under
# `ulimit -s N` (bench/stack-depth.sh).
set -eu
BUILD=$(cd "${1:?usage: fleet-idle.sh BUILD [IDLE] [PHASE_MIB]}" && pwd)
IDLE=${2:-1000}
PHASE_MIB=${3:-64}
CTL="$BUILD/ingestctl"
AGENT="$BUILD/ingest-agent"
RECEIVER="$BUILD/ingest-receiver"
IDLER="$BUILD/tools/idle-sessions"
for p in "$CTL" "$AGENT" "$RECEIVER" "$IDLER"; do [ -x "$p" ] || { echo "missing $p (make all tests)" >&2; exit 1; }; done
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"
W=$(mktemp -d "${TMPDIR:-/tmp}/ingest-fleet-idle.XXXXXX")
RPID=""
IPID=""
cleanup() {
    [ -n "$IPID" ] && kill "$IPID" 2>/dev/null || true
    [ -n "$RPID" ] && kill "$RPID" 2>/dev/null || true
    wait 2>/dev/null || true
    rm -rf "$W"
}
trap cleanup EXIT
mkdir -p "$W/keys/idle" "$W/bronze" "$W/rstate"
cd "$W/keys"
"$CTL" keygen receiver > /dev/null
"$CTL" keygen --dedup fleet.dedup > /dev/null
: > authorized
i=1
while [ $i -le "$IDLE" ]; do
    (cd idle && "$CTL" keygen "d$i" > /dev/null)
    echo "d$i $(cat "idle/d$i.pub")" >> authorized
    i=$((i + 1))
done
for ph in 1 10 100; do
    k=1
    while [ $k -le $ph ]; do
        "$CTL" keygen "p${ph}s$k" > /dev/null
        echo "p${ph}s$k $(cat "p${ph}s$k.pub")" >> authorized
        k=$((k + 1))
    done
done
cd "$W"
cat > receiver.yaml <<EOT
listen: 127.0.0.1:0
key: keys/receiver.key
authorized_devices: keys/authorized
dedup_key: keys/fleet.dedup
state_dir: rstate
bronze: bronze
layout: "{device}/{path}"
max_connections: $((IDLE + 200))
idle_timeout: 1h
handshake:
  max_pending: 1024
  max_pending_per_address: 1024
log:
  level: warn
EOT
# RECEIVER_STACK_KIB: run the receiver under `ulimit -s` (its threads' stacks, ingest_core_thread_stack(); bench/stack-depth.sh)
if [ -n "${RECEIVER_STACK_KIB:-}" ]; then
    (ulimit -s "$RECEIVER_STACK_KIB" && exec "$RECEIVER" --config receiver.yaml --ready-file receiver.addr) > receiver.log 2>&1 &
else
    "$RECEIVER" --config receiver.yaml --ready-file receiver.addr > receiver.log 2>&1 &
fi
RPID=$!
i=0
while [ ! -s receiver.addr ]; do
    i=$((i + 1)); [ $i -gt 200 ] && { cat receiver.log; echo "the receiver did not start" >&2; exit 1; }
    sleep 0.05
done
ADDR=$(cat receiver.addr)
kb() { awk -v k="$1" '$1 == k":" { print $2 }' "/proc/$RPID/status"; }
cpu_s() { awk '{ print ($14 + $15) / '"$(getconf CLK_TCK)"' }' "/proc/$RPID/stat"; }
threads() { awk '$1 == "Threads:" { print $2 }' "/proc/$RPID/status"; }
sleep 0.5
anon0=$(kb RssAnon)
vm0=$(kb VmSize)
mkfifo idle.in
"$IDLER" "$ADDR" keys/receiver.pub keys/idle "$IDLE" < idle.in > idle.out 2>&1 &
IPID=$!
exec 9> idle.in
i=0
until grep -q "connected=$IDLE\|failed" idle.out; do
    i=$((i + 1)); [ $i -gt 6000 ] && { echo "the idle sessions did not connect" >&2; exit 1; }
    sleep 0.05
done
grep -q "connected=$IDLE" idle.out || { cat idle.out; tail receiver.log; exit 1; }
sleep 1
anon1=$(kb RssAnon)
vm1=$(kb VmSize)
thr1=$(threads)
echo "## Fleet: $IDLE idle sessions, then 1, 10 and 100 devices shipping $PHASE_MIB MiB per phase"
echo
echo "Command: \`bash bench/fleet-idle.sh BUILD $IDLE $PHASE_MIB\` (load average before: $(cut -d' ' -f1-3 /proc/loadavg))."
echo
echo "- receiver RssAnon: $((anon0)) KiB at start, $((anon1)) KiB with $IDLE idle sessions: $(( (anon1 - anon0) / IDLE )) KiB per idle session; $thr1 threads;"
echo "  VmSize $((vm0 / 1024)) MiB at start, $((vm1 / 1024)) MiB with $IDLE idle sessions: $(( (vm1 - vm0) / IDLE )) KiB of address space per idle session."
echo
echo "| shipping devices | files | MiB | wall s | MB/s | receiver CPU s | CPU s per GB | peak RssAnon MiB | peak VmRSS MiB | all landed |"
echo "|---|---|---|---|---|---|---|---|---|---|"
for ph in 1 10 100; do
    per=$((PHASE_MIB * 1024 / ph)) # KiB per device
    nf=$(( per / 64 )); [ $nf -ge 1 ] || nf=1
    k=1
    while [ $k -le $ph ]; do
        d="p${ph}s$k"
        mkdir -p "$W/src/$d/data" "$W/astate/$d"
        j=1
        while [ $j -le $nf ]; do head -c 65536 /dev/urandom > "$W/src/$d/data/f$j.bin"; j=$((j + 1)); done
        cat > "$W/$d.yaml" <<EOT
device:
  id: $d
  key: keys/$d.key
core:
  address: $ADDR
  receiver_key: keys/receiver.pub
dedup_key: keys/fleet.dedup
sources:
  - path: src/$d/data
state_dir: astate/$d
log:
  level: warn
EOT
        k=$((k + 1))
    done
    c0=$(cpu_s)
    t0=$(date +%s.%N)
    pids=""
    k=1
    while [ $k -le $ph ]; do
        "$AGENT" --config "$W/p${ph}s$k.yaml" --once > "$W/p${ph}s$k.out" 2> "$W/p${ph}s$k.err" &
        pids="$pids $!"
        k=$((k + 1))
    done
    peak_anon=0
    peak_rss=0
    while :; do
        a=$(kb RssAnon); r=$(kb VmRSS)
        [ "$a" -gt "$peak_anon" ] && peak_anon=$a
        [ "$r" -gt "$peak_rss" ] && peak_rss=$r
        alive=0
        for p in $pids; do kill -0 "$p" 2>/dev/null && alive=1 && break; done
        [ $alive = 1 ] || break
        sleep 0.05
    done
    failed=0
    for p in $pids; do wait "$p" || failed=$((failed + 1)); done
    t1=$(date +%s.%N)
    c1=$(cpu_s)
    ok=yes
    [ $failed = 0 ] || ok="no: $failed agents failed"
    k=1
    while [ $k -le $ph ] && [ "$ok" = yes ]; do
        d="p${ph}s$k"
        (cd "$W/src/$d/data" && sha256sum -- *) > "$W/$d.sums"
        (cd "$W/bronze/$d/data" 2>/dev/null && sha256sum -c --quiet "$W/$d.sums" > /dev/null 2>&1) || ok="no: $d"
        k=$((k + 1))
    done
    mib=$(( nf * ph * 64 / 1024 ))
    awk -v ph=$ph -v nf=$((nf * ph)) -v mib=$mib -v t0="$t0" -v t1="$t1" -v c0="$c0" -v c1="$c1" -v pa="$peak_anon" \
        -v pr="$peak_rss" -v ok="$ok" 'BEGIN {
        w = t1 - t0; b = mib * 1048576; c = c1 - c0
        printf "| %d | %d | %d | %.2f | %.1f | %.2f | %.1f | %.1f | %.1f | %s |\n", ph, nf, mib, w, b / 1e6 / w, c,
            c / (b / 1e9), pa / 1024, pr / 1024, ok }'
    rm -rf "$W/src/p${ph}s"* "$W/bronze/p${ph}s"*
done
exec 9>&-
wait "$IPID" || true
IPID=""
echo
echo "The idle sessions stayed connected through the three phases (each shipping device is a separate"
echo "\`ingest-agent --once\` process on the same two cores as the receiver)."
